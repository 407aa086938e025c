"""OpInfo sweep (bench/opinfo.py, issue 10), session 29 (held-out seeds 2901-2905):
fallbacks turned into compiled code that computes eager's values."""
import pytest
import torch

from compiled_check import check_compiled  # test/python/compiled_check.py

LOW = (torch.bfloat16, torch.float16)


# ------------------------------------------------------------------ cross (cross_steps.py)
# bfloat16 / float16 linalg.cross ran through torch (partition.EAGER_NUMERICS: OpInfo cross
# bfloat16 #2, seed 2901): eager's kernel rounds each product to the dtype, then their
# difference. Compiled in those steps: eager's values bit for bit, every graph compiled.

def _operands(shape_a, shape_b, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(shape_a, generator=g) * 8).to(dtype)
    b = (torch.randn(shape_b, generator=g) * 3).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("shape_a,shape_b,dim", [
    ((300, 3), (300, 3), -1),
    ((3, 7, 5), (3, 7, 5), 0),
    ((4, 3, 6), (1, 3, 6), 1),       # broadcast
    ((1, 3), (5, 3), -1),             # broadcast of a size-1 dim
    ((2, 5, 3), (2, 5, 3), 2),
])
def test_low_precision_linalg_cross_compiles_as_eager(fallback_log, dtype, shape_a, shape_b, dim):
    a, b = _operands(shape_a, shape_b, dtype)
    want = torch.linalg.cross(a, b, dim=dim)
    # the values are the ones a float32 product rounded once does not give (not a vacuous test)
    once = torch.linalg.cross(a.float(), b.float(), dim=dim).to(dtype)
    if want.numel() >= 100:
        assert not torch.equal(once, want)
    check_compiled(lambda x, y: torch.linalg.cross(x, y, dim=dim), [a, b], fallback_log)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_low_precision_cross_noncontiguous_and_special_values(fallback_log, dtype):
    a, b = _operands((3, 40), (3, 40), dtype, seed=1)
    a[0, :4] = torch.tensor([float("inf"), float("nan"), -0.0, 60000.0 if dtype == torch.float16 else 1e38])
    b[2, :4] = torch.tensor([2.0, 1.0, 0.0, 4.0])
    check_compiled(lambda x, y: torch.cross(x.t(), y.t(), dim=1), [a, b], fallback_log)
    check_compiled(lambda x, y: torch.linalg.cross(x.t() * 2, y.t()) + 1, [a, b], fallback_log)
