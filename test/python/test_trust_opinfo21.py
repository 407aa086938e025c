"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2101-2104: op forms that ran
through torch (an eager island, a whole graph eagerly) or gave another result than eager.
Each case compares compiled calls with eager and checks that every graph compiled."""
import pytest
import torch

from compiled_check import check_compiled  # test/python/compiled_check.py


# --------------------------------------------------------------------------------- bucketize
@pytest.mark.parametrize("bdtype", [torch.uint8, torch.int8, torch.int64, torch.float32])
@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
def test_bucketize_of_uint8(bdtype, right, out_int32, fallback_log):
    # OpInfo bucketize uint8 #19 (seed 2101): 'aten.bucketize (dtype uint8)' ran through torch.
    # It only compares the values 0..255 with the boundaries: exact in int32 (widen.py);
    # values above 127 would read negative as signless i8
    x = torch.tensor([[0, 3, 127, 128, 200], [255, 5, 6, 129, 1]], dtype=torch.uint8)
    bounds = torch.tensor([0, 3, 6, 100, 127], dtype=bdtype)
    if bdtype is not torch.int8:
        bounds = torch.cat([bounds, torch.tensor([128, 200, 250], dtype=bdtype)])
    check_compiled(lambda v, b: torch.bucketize(v, b, right=right, out_int32=out_int32), [x, bounds], fallback_log)
    check_compiled(lambda v, b: torch.bucketize(v + 1, b, right=right, out_int32=out_int32), [x, bounds],
                   fallback_log)   # with a wrapping add before it
