"""softshrink / hardshrink gradients at NaN inputs are eager's (shrink_grads.py): eager's CPU
backward kernels give a NaN input 0 in their vector loop and pass the gradient in their scalar
loop (each inner loop's tail); torch's Python kernels at the Autograd key, which aot_autograd
traced, gave `grad * 0` (softshrink) or the gradient (hardshrink) everywhere. --families modules
--grad fuzz seed 7124: 2 NaN gradients where eager has none."""
import pytest
import torch
import torch.nn.functional as F

import mlircap


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and \
        torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


def _check(f, x, w, calls=3):
    fast = mlircap.compile(f, strict=True)
    for i in range(calls):
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yc = f(xe, w), fast(xc, w)
        assert _same(ye.detach(), yc.detach()), i
        (ye * w).sum().backward()
        (yc * w).sum().backward()
        assert _same(xe.grad, xc.grad), (i, xe.grad, xc.grad)


def _nans(shape, dtype, seed, every=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    flat = x.view(-1)
    flat[::every] = float("nan")
    flat[1::7] = float("inf")
    flat[2::11] = 0.1
    return x


SHRINKS = {"softshrink": lambda x, w: F.softshrink(x, 0.3) * 2,
           "hardshrink": lambda x, w: F.hardshrink(x, 0.3) * 2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [5, 40, 100])
@pytest.mark.parametrize("name", sorted(SHRINKS))
def test_nan_inputs_rows(name, n, dtype):
    # 5: the scalar loop alone (eager passes the gradient); 40 / 100: vector loop and tail
    x = _nans((n,), dtype, n)
    _check(SHRINKS[name], x, torch.ones(n, dtype=dtype))


@pytest.mark.parametrize("name", sorted(SHRINKS))
def test_nan_inputs_transposed_2d(name):
    """a strided input: eager's loop follows the operands' layouts (here the incoming gradient is
    contiguous, the input transposed: its scalar loop everywhere). The loss is computed in the
    function, so the incoming gradient's layout is the graph's own (a gradient coming from outside
    the graph takes the layout of the forward's output in the compiled backward: eager's layout of
    it there is not known; hardtanh's rule has the same limit)."""
    def f(x, w):
        return (SHRINKS[name](x, w) * w).sum()

    fast = mlircap.compile(f, strict=True)
    x, w = _nans((37, 9), torch.float32, 1).t(), torch.randn(9, 37)   # (9, 37), strides (1, 9)
    for i in range(3):
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        f(xe, w).backward()
        fast(xc, w).backward()
        assert _same(xe.grad, xc.grad), (i, xe.grad, xc.grad)


def test_nan_gradient_through_upsampling_and_amax():
    """fuzz seed 7124: amax's gradient is NaN at a NaN position; eager's vector loop gives the NaN
    input 0 there, the where's gradient gave NaN * 0."""
    def f(x, w):
        return F.interpolate(F.softshrink(x, 0.3), scale_factor=2, mode="nearest").amax(-4)

    torch.manual_seed(0)
    x = torch.randn(1, 2, 3, 4, 3)
    x[0, 0, 1, 1, 1] = float("nan")
    x[0, 1, 0, 0, 0] = float("inf")
    x[0, 0, 0, 0, 0] = float("-inf")
    _check(f, x, torch.randn(1, 6, 8, 6))


@pytest.mark.parametrize("name", sorted(SHRINKS))
def test_finite_inputs_unchanged(name):
    x = torch.randn(6, 50, dtype=torch.float32)
    x[0, :5] = 0.3       # at the threshold: eager's kernel gives 0
    x[1, :5] = -0.3
    _check(SHRINKS[name], x, torch.randn(6, 50))
