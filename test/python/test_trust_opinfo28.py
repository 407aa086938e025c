"""OpInfo sweep (bench/opinfo.py, issue 10), session 28 (held-out seeds 2801 / 2803 / 2805):
wrong results found next to the sweep's fallbacks, and fallbacks turned into compiled code."""
import warnings

import pytest
import torch

import mlircap


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
