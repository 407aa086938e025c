"""OpInfo sweep (bench/opinfo.py, bench/opinfo_grad.py; issue 10), held-out seeds 503, 511
and 509 on 2026-12-04: what they found, fixed. Each case compares compiled calls with eager
bit for bit and checks that the first call's recording is replayed by the next ones with
every graph compiled (no eager island, no 'runs through torch' warning)."""
import functools

import pytest
import torch
import torch.nn.functional as F

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py


_same = same
_check = functools.partial(check_compiled, one_record=True)


# ------------------------------------------------- fallback: uint8 reflection / replication pads
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 5), (1, 2)), ((2, 3, 4, 5), (1, 2, 2, 1)),
                                       ((1, 2, 3, 4, 5), (1, 2, 2, 1, 0, 1))])
def test_uint8_reflection_and_replication_pads_compile(fallback_log, mode, shape, pad):
    # they only copy elements: computed in int32 like uint8's other movements (widen.py);
    # they ran through torch (OpInfo nn.functional.pad.reflect uint8)
    x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    _check(lambda x: F.pad(x, pad, mode=mode) + 7, [x], fallback_log)


# ------------------------------------------------- wrong: floating fmod of large quotients
def _specials(dtype):
    # (no quotient past the dtype's range: eager's vectorized fmod (Sleef) gives NaN there,
    # its scalar tail loop the exact value, so eager's own result depends on the position)
    v = [0.0, -0.0, 1.0, -1.0, 2.5, -7.25, float("inf"), float("-inf"), float("nan"), 1e30, -3e-3, 65504.0]
    return torch.tensor(v, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fmod_of_large_quotients_like_eager(fallback_log, dtype):
    # eager's fmod is std::fmod (exact); torch-mlir lowered it as a - trunc(a / b) * b:
    # float32 fmod(1e5 * randn, 0.1..3.1) was 1.68 off eager, floor division (computed
    # from fmod) one off
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(400, generator=g) * 1e5).to(dtype)
    b = (torch.rand(400, generator=g) * 3 + 0.1).to(dtype)
    s = _specials(dtype)
    a = torch.cat([a, s.repeat_interleave(len(s)), -b[:7]])
    b = torch.cat([b, s.repeat(len(s)), b[:7]])
    _check(lambda a, b: torch.fmod(a, b), [a, b], fallback_log)
    _check(lambda a, b: torch.div(a, b, rounding_mode="floor"), [a, b], fallback_log)
    _check(lambda a, b: a // b, [a, b], fallback_log)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("divisor", [2.7, -0.3, 1e-3, 7])
def test_fmod_by_a_number_compiles_like_eager(fallback_log, dtype, divisor):
    # fmod.Scalar of a float: torch-mlir cannot lower it (it ran through torch: OpInfo
    # nn.functional.grid_sample's reflection padding, fmod's Scalar samples)
    g = torch.Generator().manual_seed(1)
    a = torch.cat([(torch.randn(300, generator=g) * 1e4).to(dtype), _specials(dtype)])
    _check(lambda a: torch.fmod(a, divisor) * 2, [a], fallback_log)


@pytest.mark.parametrize("case", ["int_by_float", "float_by_int", "int_by_float_number", "float_by_0d_double"])
def test_fmod_mixed_dtypes_like_eager(fallback_log, case):
    g = torch.Generator().manual_seed(2)
    f = (torch.randn(64, generator=g) * 1e4)
    i = torch.randint(-2 ** 31, 2 ** 31 - 1, (64,), generator=g, dtype=torch.int32)
    i[0] = -2 ** 31
    fn, args = {
        "int_by_float": (lambda a, b: torch.fmod(a, b), [i, f.abs() + 0.5]),
        "float_by_int": (lambda a, b: torch.fmod(a, b), [f * 1e3, torch.randint(3, 50, (64,), generator=g)]),
        "int_by_float_number": (lambda a: torch.fmod(a, 3.3), [i]),
        "float_by_0d_double": (lambda a, b: torch.fmod(a, b), [f, torch.tensor(-2.3, dtype=torch.float64)]),
    }[case]
    _check(fn, args, fallback_log)


def test_fmod_in_place_like_eager(fallback_log):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(50, generator=g) * 1e6, torch.rand(50, generator=g) + 0.01

    def fn(a, b):
        a.fmod_(b)
        return a * 1

    fast = mlircap.compile(fn)
    for _ in range(3):
        x, y = a.clone(), a.clone()
        _same(fast(x, b), fn(y, b))
        _same(x, y)


# ------------------------------------------------- crash (contained): bf16 transposes
@pytest.mark.parametrize("shape,perm", [((5, 5, 5), (2, 0, 1)), ((5, 5, 5), (2, 1, 0)), ((3, 4, 5), (2, 0, 1)),
                                        ((2, 3, 7), (2, 1, 0))])
def test_bf16_transpose_compiles(fallback_log, shape, perm):
    # LLVM's x86 backend asserted on the bf16 vectors its vectorizers made of the copy
    # (the compile worker died of SIGABRT: the graph ran eagerly); bf16 memory moves as
    # i16 now (mlircap-bf16-memory-as-i16)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).bfloat16()
    _check(lambda x: x.permute(perm).contiguous(), [x], fallback_log)


@pytest.mark.parametrize("op", ["sort", "msort"])
def test_bf16_sort_along_a_leading_dim_compiles(fallback_log, op):
    # OpInfo sort bfloat16 #7 and #56 (seed 511): sort of a 5x5x5 tensor along dim 0
    x = torch.randint(0, 120, (5, 5, 5), generator=torch.Generator().manual_seed(1)).bfloat16()
    fn = {"sort": lambda x: tuple(torch.sort(x, 0, descending=True)), "msort": lambda x: torch.msort(x)}[op]
    _check(fn, [x], fallback_log)


# ------------------------------------------------- fallback: uint8 nansum, masked put
def _u8(*shape, seed=0):
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", ["nansum", "nansum_dim", "nansum_0d", "masked_put"])
def test_uint8_nansum_and_masked_put_compile(fallback_log, case):
    # they ran through torch ('dtype uint8': OpInfo nansum, _unsafe_masked_index_put_accumulate
    # uint8, seed 511); computed in int32 as widen.py does
    mask = torch.rand(10, 10, generator=torch.Generator().manual_seed(3)) > 0.5
    i0 = torch.randint(0, 5, (10, 1), generator=torch.Generator().manual_seed(4))
    i1 = torch.randint(0, 5, (1, 10), generator=torch.Generator().manual_seed(5))
    fn, args = {
        "nansum": (lambda x: torch.nansum(x), [_u8(6, 40)]),
        "nansum_dim": (lambda x: torch.nansum(x, 1) * 3, [_u8(6, 40)]),
        "nansum_0d": (lambda x: torch.nansum(x, ()) + 1, [torch.tensor(200, dtype=torch.uint8)]),
        "masked_put": (lambda b, m, a, c, v: torch.ops.aten._unsafe_masked_index_put_accumulate(b, m, [a, c], v),
                       [_u8(5, 5), mask, i0, i1, _u8(10, 10, seed=1)]),
    }[case]
    _check(fn, args, fallback_log)
