"""The mean of var_mean on the CPU (float32) is eager's: its float64 mean rounded to float32
(frontend._var_mean_mean_in_double), not torch-mlir's float32 sum divided in float32.

var_mean is also what torch's decomposition of batch norm (and so instance norm) computes its
statistics with. The fuzzer's case (bench/fuzz_graphs.py --grad --seed 4202): instance_norm of
an input expanded along its last dim, every row of equal values: eager's mean is each row's
value, the float32 sum of 7 of them divided by 7 was an ulp off for some rows, and with the
variance 0, `(x - mean) * rsqrt(eps)` multiplied that ulp by 316 (outputs and gradients off
by more than eager's own error)."""
import pytest
import torch
import torch.nn.functional as F

import mlircap


def _rows_of_equal_values(rows, n, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(rows, 1, generator=g) * 3).expand(rows, n).contiguous()


@pytest.mark.parametrize("n", [3, 7, 12, 100])
def test_var_mean_of_equal_values_has_the_value_as_mean(n):
    x = _rows_of_equal_values(36, n, n)

    def f(x):
        return torch.var_mean(x, -1, correction=0)

    var, mean = mlircap.compile(f, strict=True)(x)
    want_var, want_mean = f(x)
    assert torch.equal(want_mean, x[:, 0])   # eager: the value, its variance 0
    assert torch.equal(mean, want_mean)
    assert torch.equal(var, want_var)


@pytest.mark.parametrize("shape,dim", [((5, 37), -1), ((4, 9, 33), (0, 2)), ((6, 1000), 1), ((3, 5), None)])
def test_var_mean_mean_is_eagers(shape, dim):
    g = torch.Generator().manual_seed(len(shape) * 100 + shape[-1])
    x = torch.randn(*shape, generator=g) * 5 + 2

    def f(x):
        return torch.var_mean(x, dim, keepdim=True)

    var, mean = mlircap.compile(f, strict=True)(x)
    want_var, want_mean = f(x)
    assert mean.shape == want_mean.shape
    assert torch.equal(mean, want_mean), (mean - want_mean).abs().max()
    torch.testing.assert_close(var, want_var, rtol=1e-6, atol=0)


def test_batch_norm_statistics_of_equal_rows_like_eager():
    # native_batch_norm over (1, C, L): InstanceNorm's view of a (N, C', L) input
    x = _rows_of_equal_values(36, 7, 4202).reshape(1, 36, 7)

    def f(x):
        return torch.ops.aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)

    out, mean, invstd = mlircap.compile(f, strict=True)(x)
    want_out, want_mean, want_invstd = f(x)
    assert torch.equal(mean, want_mean)
    assert torch.equal(invstd, want_invstd)
    # the exact output is 0 (x equals its row's mean); eager's `x * alpha + beta` is off by
    # its rounding of mean * alpha, the decomposition's `(x - mean) * invstd` is exact
    assert out.abs().max() <= want_out.abs().max()


def test_instance_norm_of_equal_rows_in_training_like_eager():
    # fuzz_graphs --grad seed 4202: F.instance_norm of an input expanded along its last dim,
    # in a graph that records for backward (the mean saved)
    vals = _rows_of_equal_values(36, 1, 4202).reshape(6, 6, 1)
    weights = torch.arange(6 * 6 * 7).reshape(6, 6, 7).sin()

    def f(x):
        return F.instance_norm(x)

    def run(fn, dtype):
        x = vals.to(dtype).expand(6, 6, 7).detach().requires_grad_(True)
        y = fn(x)
        (y * weights.to(dtype)).sum().backward()
        return y.detach().double(), x.grad.double()

    eager_y, eager_grad = run(f, torch.float32)   # the exact output: 0 (each row is its mean)
    c = mlircap.compile(f, strict=True)
    for _ in range(2):   # the recording call, then the replay
        y, grad = run(c, torch.float32)
        # eager's `x * alpha + beta` is off by its rounding of mean * alpha; a mean an ulp off
        # the value gave outputs (and gradients) 2.5x further off
        assert y.abs().max() <= eager_y.abs().max()
        torch.testing.assert_close(grad, eager_grad, rtol=1e-5, atol=0)
