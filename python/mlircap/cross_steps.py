"""CPU bfloat16 / float16 linalg.cross in the steps of eager's kernel.

Eager's CPU kernel (CrossKernel.cpp: apply_cross) is a scalar loop over the dtype itself:

    r[0] = a[1] * b[2] - a[2] * b[1]    (and its two rotations)

where each product of two c10::BFloat16 / c10::Half is computed in float32 and rounded to the
dtype, and so is their difference. Computed in float32 and rounded once (opmath), or by torch's
decomposition, a third of the elements of a bfloat16 cross of random operands were one unit or
more apart from eager's (cancellation of the two rounded products), so the op ran through torch
(partition.EAGER_NUMERICS). These steps round where eager rounds: every element equal to eager's
(bench/opinfo.py linalg.cross / cross bfloat16 and float16).
"""
from __future__ import annotations

import torch
from .target import device_type

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def cross_rounded_like_eager(a, b, dim=-1):
    """aten.linalg_cross(a, b, dim) of two CPU bfloat16 / float16 tensors of one dtype, rounded
    as eager's kernel rounds; NotImplemented for anything else (the op's other handling)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dtype not in _LOW_PRECISION \
            or b.dtype != a.dtype or device_type(a) != "cpu" or device_type(b) != "cpu" or not isinstance(dim, int):
        return NotImplemented
    try:
        shape = torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        return NotImplemented   # eager's error
    if not shape or not -len(shape) <= dim < len(shape) or shape[dim] != 3:
        return NotImplemented
    dt = a.dtype
    a, b = a.expand(shape), b.expand(shape)
    comp = [(a.select(dim, i).float(), b.select(dim, i).float()) for i in range(3)]

    def product(i, j):   # a[i] * b[j], rounded to the dtype
        return (comp[i][0] * comp[j][1]).to(dt).float()

    parts = [(product(1, 2) - product(2, 1)).to(dt),
             (product(2, 0) - product(0, 2)).to(dt),
             (product(0, 1) - product(1, 0)).to(dt)]
    return torch.stack(parts, dim)
