"""torch.frexp as bit operations on the float's representation (torch-mlir has no lowering
of aten.frexp: it ran through torch, 'aten.frexp.Tensor (unsupported)', OpInfo frexp,
bench/opinfo.py seed 2801).

Eager's CPU kernel is std::frexp per element: x = mantissa * 2 ** exponent with |mantissa|
in [0.5, 1), exponent int32; 0, -0, inf, -inf and NaN give themselves and exponent 0.
Here x (bfloat16 and float16 upcast to float32, exact) is viewed as its integer bits: the
biased exponent field e; a subnormal (e == 0, x != 0) is first scaled by 2 ** 25 (exact)
and its exponent lowered by 25. The mantissa is x's sign and fraction bits with the
exponent field of 0.5 (the value's own bits: exact, converted back to the low dtype
exactly, every such mantissa has at most the dtype's precision)."""
from __future__ import annotations

import torch

# dtype -> (bits dtype, fraction bits, exponent field mask, bias of 0.5's field)
_LAYOUT = {torch.float32: (torch.int32, 23, 0xFF, 126), torch.float64: (torch.int64, 52, 0x7FF, 1022)}
# a subnormal times 2 ** scale is normal: dtype -> scale
_SCALE = {torch.float32: 25, torch.float64: 54}


def frexp(x):
    """aten.frexp.Tensor; NotImplemented (the op stays whole) for what it does not handle."""
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float64, torch.bfloat16,
                                                          torch.float16) or x.layout != torch.strided:
        return NotImplemented
    t = x.to(torch.float32) if x.dtype in (torch.bfloat16, torch.float16) else x
    ibits, frac, mask, half = _LAYOUT[t.dtype]
    scale = _SCALE[t.dtype]
    # the exponent field, shifted down by an exact division of the masked (non-negative) bits
    field = torch.div(torch.bitwise_and(t.view(ibits), mask << frac), 1 << frac, rounding_mode="floor")
    sub = (field == 0) & (t != 0)
    s = torch.where(sub, t * float(2 ** scale), t)
    sbits = s.view(ibits)
    sfield = torch.div(torch.bitwise_and(sbits, mask << frac), 1 << frac, rounding_mode="floor")
    special = (t == 0) | (field == mask)   # zeros, infinities, NaN: themselves, exponent 0
    exp = torch.where(special, torch.zeros((), dtype=ibits, device=t.device),
                      sfield - half - torch.where(sub, scale, 0).to(ibits))
    keep = ~(mask << frac)   # sign and fraction bits
    mant = torch.bitwise_or(torch.bitwise_and(sbits, keep), half << frac).view(t.dtype)
    mant = torch.where(special, t, mant)
    return mant.to(x.dtype), exp.to(torch.int32)


_SAME_WIDTH = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
               torch.float16: torch.int16}


def signbit(x):
    """aten.signbit (torch-mlir cannot lower it: it ran through torch, OpInfo signbit float32
    #24 of its reference inputs, seed 2805): a float's sign bit is its bits read as the signed
    integer of its width below 0 (-0.0 and a NaN with the sign set too); an integer's x < 0."""
    if not isinstance(x, torch.Tensor) or x.is_complex() or x.layout != torch.strided:
        return NotImplemented
    if x.dtype in _SAME_WIDTH:
        return x.view(_SAME_WIDTH[x.dtype]) < 0
    if x.dtype == torch.bool or x.is_floating_point():
        return NotImplemented
    return x < 0
