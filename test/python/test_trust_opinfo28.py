"""OpInfo sweep (bench/opinfo.py, issue 10), session 28 (held-out seeds 2801 / 2803 / 2805):
wrong results found next to the sweep's fallbacks, and fallbacks turned into compiled code."""
import warnings

import pytest
import torch

import mlircap
from compiled_check import check_compiled  # test/python/compiled_check.py


# ------------------------------------------------------------------ histc (histogram.py)
# Bounds apart as Python numbers but one value in the dtype (min=1.0, max=1.0 + 1e-9 in
# float32; 9.3958 and 9.4009 in bfloat16 / float16): eager's position divides by 0 and its
# kernel counts the elements on that value in bin 0; the compiled form counted none (a
# wrong result, found checking the float16 histc of seed 2803's fallback). Such a histc now
# stays whole (through torch): eager's counts.

@pytest.mark.parametrize("dtype,lo,hi", [(torch.float32, 1.0, 1.0 + 1e-9), (torch.bfloat16, 9.3958, 9.4009),
                                         (torch.float16, 9.3958, 9.4009)], ids=str)
def test_histc_bounds_equal_in_the_dtype_as_eager(dtype, lo, hi):
    same = torch.tensor(lo, dtype=dtype)
    assert same == torch.tensor(hi, dtype=dtype)   # one value in the dtype
    x = torch.cat([same.reshape(1).repeat(3), torch.tensor([0.5, 20.0, float("nan")], dtype=dtype)])

    def f(t):
        return torch.histc(t, bins=5, min=lo, max=hi)

    want = f(x)
    assert want.sum() > 0   # eager counts them
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (the op runs through torch, named)
        for _ in range(3):
            torch.testing.assert_close(fast(x.clone()), want, rtol=0, atol=0)


# float16 histc ran through torch ('aten.histc', seed 2803 histc float16 #31): c10::Half
# rounds every step of the position as c10::BFloat16 does, and its counts are exact up to
# 2048, so histogram.py's form covers it.

def _half_inputs(shape):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 6).half()
    if x.numel() > 3:
        x.view(-1)[1] = float("nan")
        x.view(-1)[2] = float("inf")
    return x


@pytest.mark.parametrize("bins,lo,hi", [(100, 0, 10), (1, 0, 10), (3, -10, 10), (7, -3.3, 2.9), (13, -1, 1.7)])
def test_histc_float16_compiles_like_eager(fallback_log, bins, lo, hi):
    for shape in [(), (5,), (5, 5), (5, 5, 5)]:
        check_compiled(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), [_half_inputs(shape)], fallback_log)
    # every edge, many times: inner edges land where eager's rounded division puts them
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float16)
    x = torch.cat([edges] * (900 // (bins + 1) + 1))[:900]
    check_compiled(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), [x], fallback_log)


def test_histc_float16_bounds_from_the_data(fallback_log):
    x = _half_inputs((6, 7)).nan_to_num(0.0, 3.0, -3.0)
    check_compiled(lambda t: torch.histc(t, bins=9), [x], fallback_log)


def test_histc_float16_past_2048_elements_runs_through_torch():
    y = torch.full((2100,), 0.25, dtype=torch.float16)   # a count past 2048: not every count is a half
    fast = mlircap.compile(lambda t: torch.histc(t, bins=2, min=0, max=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            torch.testing.assert_close(fast(y), torch.histc(y, bins=2, min=0, max=1), rtol=0, atol=0)


# torch.histogram(x, bins, range=(lo, hi)) has the same defect (histogram_bin_ct): range
# (1.0, 1.0 + 1e-9) in float32, eager counts 1.0 in the middle bin of 3, compiled counted
# none. It stays whole there too.

@pytest.mark.parametrize("bins", [1, 3, 4])
def test_histogram_range_equal_in_the_dtype_as_eager(bins):
    x = torch.tensor([1.0, 1.0, 1.0 + 2 ** -23, 3.0, 0.5])

    def f(t):
        return torch.histogram(t, bins=bins, range=(1.0, 1.0 + 1e-9))

    want = f(x)
    assert want.hist.sum() > 0   # eager counts them
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (the op runs through torch, named)
        for _ in range(3):
            got = fast(x.clone())
            torch.testing.assert_close(got[0], want.hist, rtol=0, atol=0)
            torch.testing.assert_close(got[1], want.bin_edges, rtol=0, atol=0)
