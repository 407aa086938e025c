"""torch.frexp compiles (float_bits.py): 'aten.frexp.Tensor (unsupported)' ran through torch
(OpInfo frexp float32 #0, bench/opinfo.py seed 2801). Mantissa and exponent bit for bit as
eager's std::frexp: zeros (signed), infinities, NaN, subnormals, the extremes."""
import warnings

import pytest
import torch

import mlircap

INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _values(dtype):
    fi = torch.finfo(dtype)
    g = torch.Generator().manual_seed(3)
    special = torch.tensor([0.0, -0.0, 1.0, -3.5, float("inf"), -float("inf"), float("nan"), fi.tiny,
                            fi.tiny / 4, -fi.tiny / 2 ** (fi.bits - 3), fi.max, fi.min, fi.eps, 0.75],
                           dtype=torch.float64).to(dtype)
    wide = torch.randn(2000, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-1100, 1100, (2000,), generator=g).double())
    x = torch.cat([special, wide.to(dtype)])
    return x[~(x.isnan() & (x.view(INT[x.element_size()]) != special[6].view(INT[x.element_size()])))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(-1,), (2, -1), ()], ids=str)
def test_frexp_compiles_bit_for_bit(dtype, shape):
    x = _values(dtype)
    x = x[:1].reshape(()) if shape == () else x[: x.numel() // 2 * 2].reshape(shape)
    if x.dim() == 2:
        x = x.t()   # a transposed input

    def f(x):
        m, e = torch.frexp(x)
        return m, e

    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [fast(x.clone()) for _ in range(2)]
    m0, e0 = f(x)
    for m, e in outs:
        assert m.dtype == dtype and e.dtype == torch.int32 and m.shape == m0.shape
        assert torch.equal(m.view(INT[m.element_size()]), m0.view(INT[m.element_size()]))
        assert torch.equal(e, e0)
    text = "\n".join(str(w.message) for w in seen)
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
    assert "run through torch" not in text and "eagerly" not in text, text


def test_frexp_inside_a_computation():
    def f(x, y):
        m, e = torch.frexp(x * y)
        return m * 2 + e, torch.ldexp(m, e)

    x, y = torch.randn(5, 7) * 1e3, torch.randn(5, 7)
    fast = mlircap.compile(f)
    for _ in range(2):
        got = fast(x, y)
    for a, b in zip(got, f(x, y)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int8, torch.uint8, torch.bool], ids=str)
def test_signbit_compiles_bit_for_bit(dtype):
    if dtype.is_floating_point:
        x = _values(dtype)
        x = torch.cat([x, -x, x.new_full((1,), float("nan")).neg()])   # NaNs of both signs
    elif dtype == torch.bool:
        x = torch.tensor([True, False, True])
    else:
        info = torch.iinfo(dtype)
        x = torch.tensor([info.min, -1, 0, 1, info.max], dtype=torch.int64).clamp(info.min, info.max).to(dtype)

    def f(x):
        return torch.signbit(x[::2]), torch.signbit(x) | (x == 1)

    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [fast(x.clone()) for _ in range(2)]
    want = f(x)
    for out in outs:
        for a, b in zip(out, want):
            assert a.dtype == b.dtype and torch.equal(a, b)
    text = "\n".join(str(w.message) for w in seen)
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
    assert "run through torch" not in text and "eagerly" not in text, text
