"""searchsorted as eager's binary search, in ops torch-mlir lowers.

torch-mlir does not lower aten.searchsorted, so it ran through torch. Eager's CPU
kernel runs, for each value, a binary search over the last dimension of the sorted
sequence (cus_lower_bound / cus_upper_bound):

    while start < end:
        mid = start + (end - start) // 2
        if not (seq[mid] >= value):   # side="right": not (seq[mid] > value)
            start = mid + 1
        else:
            end = mid

Here every value runs the same number of steps (enough for the longest search; a
finished search no longer moves), and `seq[mid]` is selected by comparing `mid` with
the positions of the sequence (a one-hot sum, no gather: nothing can be read out of
bounds). The same comparisons in the same order as eager's, so the result is eager's
for any input: unsorted sequences and NaN included. O(values x length x log(length))
work: only where that stays small (_MAX_WORK), else the op runs through torch.
"""
from __future__ import annotations

import torch
from .target import device_type

_MAX_WORK = 1 << 22


def searchsorted(seq, values, *, out_int32: bool = False, right: bool = False, side=None, sorter=None):
    """aten.searchsorted.Tensor; NotImplemented where the op should stay whole.
    With a `sorter`, eager searches seq[sorter]: the sequence is gathered first (a
    gather with indices from the inputs: bounds.py checks them, an index out of range
    reruns the graph eagerly, which raises as eager does)."""
    if not isinstance(seq, torch.Tensor) or not isinstance(values, torch.Tensor):
        return NotImplemented
    if sorter is not None:
        if not isinstance(sorter, torch.Tensor) or sorter.dtype != torch.int64 or sorter.shape != seq.shape \
                or seq.dim() == 0 or device_type(seq) != "cpu":
            return NotImplemented
        seq = torch.gather(seq, -1, sorter)
    if seq.dtype != values.dtype or seq.is_complex() or seq.dtype == torch.bool or seq.dim() == 0:
        return NotImplemented
    n = int(seq.shape[-1])
    if seq.dim() > 1 and (values.dim() != seq.dim() or tuple(values.shape[:-1]) != tuple(seq.shape[:-1])):
        return NotImplemented
    steps = max(1, n).bit_length()
    if values.numel() * max(n, 1) * steps > _MAX_WORK:
        return NotImplemented
    upper = right or side == "right"
    dev = values.device
    start = torch.zeros(values.shape, dtype=torch.int64, device=dev)
    end = torch.full(values.shape, n, dtype=torch.int64, device=dev)
    if n:
        pos = torch.arange(n, device=dev)
        rows = seq if seq.dim() == 1 else seq.unsqueeze(-2)          # (n) or (..., 1, n)
        zero = torch.zeros((), dtype=seq.dtype, device=dev)
        for _ in range(steps):
            active = start < end
            mid = start + (end - start) // 2
            mid_val = torch.where(pos == mid.unsqueeze(-1), rows, zero).sum(-1, dtype=seq.dtype)
            go_right = ~(mid_val > values) if upper else ~(mid_val >= values)
            start = torch.where(active & go_right, mid + 1, start)
            end = torch.where(active & ~go_right, mid, end)
    return start.to(torch.int32) if out_int32 else start


def searchsorted_scalar(seq, value, *, out_int32: bool = False, right: bool = False, side=None, sorter=None):
    """aten.searchsorted.Scalar: eager makes the number a tensor and converts both
    to their promoted dtype (a wrapped number: the sequence's kind decides)."""
    if not isinstance(seq, torch.Tensor) or not isinstance(value, (int, float, bool)):
        return NotImplemented
    dtype = torch.result_type(seq, value)
    if dtype.is_complex or dtype == torch.bool:
        return NotImplemented
    values = torch.scalar_tensor(value, dtype=torch.float64 if isinstance(value, float) else torch.int64,
                                 device=seq.device).to(dtype)
    return searchsorted(seq.to(dtype), values, out_int32=out_int32, right=right, side=side, sorter=sorter)
