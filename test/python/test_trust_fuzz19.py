"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), seeds 1500:1800 of each
mode and userops seeds 400:650, and the cases left open at seeds 1200:1500: the wrong results
it found, minimized, and the fuzzer's own fixes (false positives)."""
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import mlircap

inf = float("inf")


def _same(got, want):
    """Equal values, NaN where eager has NaN, infinities of eager's signs."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), (got, want)


# ---------------------------------------- batch norm's non-finite channels as eager's kernel
# default seed 1385: training-mode F.batch_norm with a -inf weight. Eager's CPU kernel computes
# `x * alpha + beta` (alpha = invstd * weight, beta = bias - mean * alpha): inf - inf = NaN in 4 of
# 6 elements; the decomposition's `(x - mean) * invstd * weight` gave +-inf there.
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["weight", "bias", "overflow"])
def test_batch_norm_nonfinite_channels_as_eager(training, dtype, case):
    g = torch.Generator().manual_seed(1385)
    x = torch.randn(3, 4, 5, generator=g, dtype=dtype)
    rm, rv = torch.randn(4, generator=g, dtype=dtype), torch.rand(4, generator=g, dtype=dtype) + 0.5
    w, b = torch.randn(4, generator=g, dtype=dtype), torch.randn(4, generator=g, dtype=dtype)
    if case == "weight":
        w[1], w[2] = -inf, inf
    elif case == "bias":
        b[0] = inf
    else:   # mean * alpha past the range: beta is infinite, x * alpha too
        x[:, 3] += 1e30 if dtype == torch.float32 else 1e300
        w[3] = 1e20 if dtype == torch.float32 else 1e200

    def f(x, rm, rv, w, b):
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1) * 1

    want = f(x, rm.clone(), rv.clone(), w, b)
    if case == "weight":
        assert want.isnan().any()
    c = mlircap.compile(f)
    for _ in range(2):
        _same(c(x, rm.clone(), rv.clone(), w, b), want)


def test_batch_norm_finite_channels_unchanged():
    # channels with finite alpha and beta keep the decomposition's values
    x = 1e4 + torch.randn(8, 3, 6, generator=torch.Generator().manual_seed(1))

    def f(x, w):
        return F.batch_norm(x, None, None, w, None, training=True) * 1

    c = mlircap.compile(f)
    w, finite = torch.tensor([1.0, -inf, 2.0]), torch.tensor([1.0, 3.0, 2.0])
    c(x, w)
    got, other = c(x, w), c(x, finite)
    assert torch.equal(got[:, 0::2], other[:, 0::2])
    _same(got[:, 1], f(x, w)[:, 1])
