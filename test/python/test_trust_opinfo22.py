"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2201-2205: op forms that ran
through torch (an eager island, a whole graph eagerly) or gave another result than eager.
Each case compares compiled calls with eager and checks that every graph compiled."""
import re

import pytest
import torch

import mlircap
from compiled_check import all_compiled, check_compiled, same  # test/python/compiled_check.py


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


# ------------------------------------------------------------------------ complex32 (chalf)
def _chalf_sources():
    torch.manual_seed(0)
    v = torch.cat([torch.randn(40) * 10.0 ** torch.randint(-8, 6, (40,)),
                   torch.tensor([0.0, -0.0, 65504.0, 65520.0, -1e6, 6e-8, 3e-8, 1e-40, float("inf"), float("nan")])])
    return {"float32": v, "bfloat16": v.bfloat16(), "float16": v.half(), "int16": (v * 7).clamp(-3e4, 3e4).short(),
            "uint8": v.abs().clamp(0, 255).to(torch.uint8), "bool": v > 0}


_CHALF = {
    "chalf": lambda x: x.chalf(),
    "to": lambda x: x.to(torch.complex32).view(10, 5).t(),
    "real_imag": lambda x: (x.chalf().real, x.chalf().imag.unsqueeze(0)),
    "view_as_real": lambda x: torch.view_as_real(x.chalf()[::2].conj().resolve_conj()),
    "cat": lambda x: torch.cat([x.chalf(), x.chalf().neg()]),
}


def _as_real(t):
    return torch.view_as_real(t) if isinstance(t, torch.Tensor) and t.dtype == torch.complex32 else t


@pytest.mark.parametrize("source", list(_chalf_sources()))
@pytest.mark.parametrize("form", list(_CHALF))
def test_complex32_conversions_compile(source, form, fallback_log):
    # OpInfo chalf float32 reference #33 / #37 (seed 2202), chalf bf16 #0 (seed 2201):
    # 'aten._to_copy (dtype complex32)' ran through torch. complex32 is a pair of float16
    # parts (complex_pairs.py); its conversions round each part once, as eager's
    x = _chalf_sources()[source]
    fn = _CHALF[form]
    want = fn(x.clone())
    fast = mlircap.compile(fn)
    for _ in range(3):
        got = fast(x.clone())
        gs, ws = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for g, w in zip(gs, ws):
            assert g.dtype == w.dtype and g.shape == w.shape
            same(_as_real(g), _as_real(w), signs=True)
    err = fallback_log.readouterr().err
    assert not re.search(r"eager islands: \S", err), err
    all_compiled(fast)


@pytest.mark.parametrize("fn", [lambda x: x.chalf() * x.chalf(), lambda x: x.double().chalf(),
                                lambda x: x.long().chalf()])
def test_complex32_arithmetic_and_double_rounding_stay_eager(fn):
    # complex32 arithmetic (eager computes in its own precision) and conversions that eager
    # rounds twice (float64, int32 / int64 through float) are left to torch: correct values
    x = _chalf_sources()["float32"].clamp(-1e4, 1e4)
    want = fn(x.clone())
    got = mlircap.compile(fn)(x.clone())
    same(_as_real(got), _as_real(want))


# ------------------------------------------------------------------ uint8 _unsafe_masked_index
@pytest.mark.parametrize("fill", [5, 200, 255, 0])
def test_uint8_masked_index(fill, fallback_log):
    # OpInfo _unsafe_masked_index uint8 #5 (seed 2203): 'aten._unsafe_masked_index (dtype
    # uint8)' ran through torch. It only moves elements and writes the fill: exact in int32
    # (widen.py), values above 127 included
    torch.manual_seed(0)
    x = torch.randint(0, 256, (6, 5, 4), dtype=torch.uint8)
    mask = torch.rand(6, 5, 4) > 0.4
    idx = [torch.randint(0, 6, (6, 1, 1)), torch.randint(0, 5, (1, 5, 1)), torch.randint(0, 4, (1, 1, 4))]
    ops = torch.ops.aten
    check_compiled(lambda t, m, i0, i1, i2: ops._unsafe_masked_index(t, m, [i0, i1, i2], fill), [x, mask, *idx],
                   fallback_log)
    check_compiled(lambda t, m, i0, i1, i2: ops._unsafe_masked_index(t * 3, m, [i0, i1, i2], fill) + 100,
                   [x, mask, *idx], fallback_log)   # wrapping arithmetic around it


# ------------------------------------------------------- integer accumulating index writes
_INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def _int_values(shape, dtype):
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1 << 40), min(info.max, 1 << 40)
    return torch.randint(lo, hi, shape, dtype=torch.int64).to(dtype)   # sums wrap in the narrow dtypes


@pytest.mark.parametrize("dtype", _INT_DTYPES)
def test_integer_index_put_accumulate_of_many_positions(dtype, fallback_log):
    # OpInfo _unsafe_masked_index_put_accumulate int64 #5 (seed 2203): 'eager islands:
    # index_put (index)', 990 index positions past scatter.py's 128 unrolled steps. An integer
    # sum is the same in any order (modulo 2**bits): all positions are compared at once
    torch.manual_seed(0)
    x = _int_values((5, 6, 4), dtype)
    i0 = torch.randint(-5, 5, (30, 1))
    i1 = torch.randint(0, 6, (1, 9))
    v = _int_values((30, 9, 4), dtype)
    check_compiled(lambda t, a, b, s: torch.index_put(t, (a, b), s, accumulate=True), [x, i0, i1, v], fallback_log)
    check_compiled(lambda t, a, s: torch.ops.aten.index_put(t, [None, a], s * 3, True) + 1,
                   [x, torch.randint(0, 6, (200,)), _int_values((5, 200, 4), dtype)], fallback_log)
    check_compiled(lambda t, a, s: t.put(a, s, accumulate=True),
                   [x, torch.randint(-120, 120, (500,)), _int_values((500,), dtype)], fallback_log)
