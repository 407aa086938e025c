"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2201-2205: op forms that ran
through torch (an eager island, a whole graph eagerly) or gave another result than eager.
Each case compares compiled calls with eager and checks that every graph compiled."""
import pytest
import torch

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py


# ------------------------------------------------------------------ padded output strides
_PADDED = {
    "1d": lambda x: x.new_empty_strided((2,), (4,)).copy_(x[:2] * 2),
    "2d": lambda x: x.new_empty_strided((2, 3), (8, 2)).copy_(x[:6].view(2, 3) + 1),
    "permuted": lambda x: x.new_empty_strided((3, 2), (1, 5)).copy_(x[:6].view(3, 2).neg()),
    "empty_strided": lambda x: torch.empty_strided((2, 2), (6, 3)).copy_(x[:4].view(2, 2) * x[4]),
}


@pytest.mark.parametrize("form", list(_PADDED))
def test_padded_output_keeps_eager_strides(form, fallback_log):
    # OpInfo new_empty_strided (seed 2101): stride (4,) for size (2,) came back contiguous.
    # The strides of a graph's output are observable (stride(), as_strided of the result
    # reads its padding positions, is_contiguous): the result is laid out as eager's
    x = torch.randn(8)
    fn = _PADDED[form]
    want = fn(x.clone())
    fast = check_compiled(fn, [x], fallback_log)
    for _ in range(2):
        got = fast(x.clone())
        assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset(), \
            (got.stride(), want.stride())
        assert got.untyped_storage().nbytes() >= want.untyped_storage().nbytes()
        same(got.as_strided(want.shape, want.stride()), want.as_strided(want.shape, want.stride()))
