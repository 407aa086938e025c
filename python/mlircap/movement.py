"""Data-movement ops as slices and concatenations, which every backend compiles.

torch-mlir lowers aten.roll to ops the CPU launch-plan builder has no kernel for
(and fails to lower roll without dims at all), so every roll ran through torch
("no CPU kernel"). A roll is two slices concatenated per rolled dim: exact in
every dtype (nothing is computed, elements only move).
"""
from __future__ import annotations

import torch
from .target import device_type

aten = torch.ops.aten


def roll(x, shifts, dims=()):
    """aten.roll as slices and cat; NotImplemented for what it does not handle."""
    if not isinstance(x, torch.Tensor):
        return NotImplemented
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(v, int) for v in shifts + dims):
        return NotImplemented
    if not dims:   # the flattened tensor rolled, then its shape back
        if len(shifts) != 1:
            return NotImplemented
        return roll(x.reshape(-1), shifts, [0]).view(x.shape)
    if len(shifts) != len(dims) or x.ndim == 0:
        return NotImplemented
    out = x
    for shift, dim in zip(shifts, dims):
        dim = dim % x.ndim
        n = int(x.shape[dim])
        if n == 0:
            continue
        s = shift % n
        if s == 0:
            continue
        out = aten.cat.default([aten.slice.Tensor(out, dim, n - s, n), aten.slice.Tensor(out, dim, 0, n - s)], dim)
    return out.clone() if out is x else out


_SORT_MAX_WORK = 1 << 22   # rows x length^2 of the pairwise comparisons
_STABLE_ALWAYS = 16        # std::sort sorts slices this short by insertion: stable


def sort(x, dim=-1, descending=False, *, stable=None):
    """aten.sort (default and stable overloads) as eager's CPU kernel orders a slice:
    std::stable_sort with KeyValueCompAsc/Desc (NaN after every number ascending,
    before descending; equal elements, -0.0 and 0.0 included, in input order). Each
    element's position is the number of elements ordered before it (pairwise
    comparisons, O(length^2) per slice: only up to _SORT_MAX_WORK), and each output
    position selects its element by comparing positions (a one-hot sum: nothing is
    gathered). Unstable sorts (std::sort) of slices longer than 16 order equal
    elements their own way: NotImplemented, as for what else it does not handle."""
    if not isinstance(x, torch.Tensor) or x.is_complex() or not isinstance(dim, int) or device_type(x) != "cpu":
        return NotImplemented   # (CUDA's sorts order -0.0/0.0 and equal elements their own way)
    n = int(x.shape[dim]) if x.ndim else 1
    if not stable and n > _STABLE_ALWAYS:
        return NotImplemented
    if x.numel() == 0 or x.ndim == 0 or x.numel() * n > _SORT_MAX_WORK:
        return NotImplemented
    dim = dim % x.ndim
    xs = x.movedim(dim, -1)
    key = xs.to(torch.int32) if x.dtype == torch.bool else xs
    xi, xj = key.unsqueeze(-1), key.unsqueeze(-2)        # (..., i, 1), (..., 1, j)
    dev = x.device
    pos = torch.arange(n, device=dev)
    before = pos.unsqueeze(0) < pos.unsqueeze(1)          # [i, j]: j < i
    if x.is_floating_point():
        ni, nj = torch.isnan(xi), torch.isnan(xj)
        first = (xj > xi) | (nj & ~ni) if descending else (xj < xi) | (~nj & ni)
        same = (xj == xi) | (nj & ni)
    else:
        first = xj > xi if descending else xj < xi
        same = xj == xi
    rank = (first | (same & before)).sum(-1)               # (..., i): where element i goes
    onehot = rank.unsqueeze(-2) == pos.unsqueeze(-1)       # [..., r, i]
    if x.dtype == torch.bool:
        values = (onehot & xs.unsqueeze(-2)).any(-1)
    else:
        # the maximum of one element and the lowest value is that element (-0.0, NaN too)
        low = float("-inf") if x.is_floating_point() else torch.iinfo(x.dtype).min
        values = torch.amax(torch.where(onehot, xs.unsqueeze(-2), torch.full((), low, dtype=x.dtype, device=dev)), -1)
    indices = torch.where(onehot, pos, torch.zeros((), dtype=torch.int64, device=dev)).sum(-1)
    return values.movedim(-1, dim), indices.movedim(-1, dim)


def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return sort(x, dim, descending, stable=stable)
