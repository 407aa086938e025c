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


# ------------------------------------------------------------------ Chebyshev polynomials at 0
# special.chebyshev_polynomial_{t,u,v,w} of x = 0 (y = 2x - 1 = 0 in the shifted forms) with a
# degree past the closed-form threshold set polynomials.py's flag and reran the graph eagerly:
# 'bounds check' fallbacks of OpInfo's integer samples (seed 2904 chebyshev_polynomial_t int16
# #7; 20 of 36 uint8 samples of the four ops). Eager's closed form there reads acos(0) = pi / 2
# in the dtype: now compiled, no rerun, eager's values (to float32's tolerance: libm's sin / cos
# against the compiled ones).

_CHEBYSHEV = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
              "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
              "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w"]


@pytest.mark.parametrize("name", _CHEBYSHEV)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int16], ids=str)
def test_chebyshev_at_zero_compiles_as_eager(fallback_log, name, dtype):
    fn = getattr(torch.special, name)
    shifted = name.startswith("shifted")
    at = 0.5 if shifted and dtype.is_floating_point else 0
    degrees = torch.cat([torch.arange(-3, 40), torch.tensor([97, 100, 1001, 4096, 65537])])
    xs, ns = [torch.full(degrees.shape, at)], [degrees]
    # and points next to them that compile: the ends of the interval (every degree), the
    # loop (degrees up to the closed form's threshold, 4 for every kind)
    for end in (-1.0, 1.0) if not shifted else (0.0, 1.0):
        xs.append(torch.full(degrees.shape, end))
        ns.append(degrees)
    if dtype.is_floating_point:
        xs.append(torch.tensor([0.25, 0.8, 3.0]).repeat_interleave(8))
        ns.append(torch.arange(-3, 5).repeat(3))
    x = torch.cat(xs).to(dtype)
    n = torch.cat(ns).to(dtype if dtype.is_floating_point else torch.int16)
    want = fn(x, n)
    assert torch.isfinite(want).any()
    check_compiled(lambda a, b: fn(a, b) * 1, [x, n], fallback_log, exact=False)
