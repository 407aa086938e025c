"""In-place writes whose destination shares memory with itself or with another operand
(`_overlapping_write`), which a graph's functional form would not reproduce: the function runs
eagerly there.  Views that only interleave (`x[:, 5:] *= x[:, 4:5]`: overlapping byte spans,
no shared element) are told apart element by element (`_shared_elements`)."""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten


def _overlapping_write(name: str, args: tuple, kwargs: dict, overlap_storages=()) -> bool:
    """An in-place call (or one with out=) writing a tensor with internal overlap
    (an expand's stride 0: several positions, one element), which eager allowed, or
    writing the storage of an argument with internal overlap through a view of it
    (x.diagonal().clamp_() of an expanded x: the graph wrote all of x back, and torch
    raised on its overlap)."""
    if "out" not in kwargs and name != "__setitem__" and not (name.endswith("_") and not name.endswith("__")):
        return False
    t = kwargs.get("out", args[0] if args else None)
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.is_nested or t.device.type == "meta":
        return False
    if internal_overlap(t) or \
            bool(overlap_storages) and t.untyped_storage().data_ptr() in overlap_storages:
        return True
    # another operand viewing the memory written, laid out otherwise (x.scatter_reduce_(0, i,
    # x[:2], 'amax'): eager's kernel reads the rows it already wrote, a graph reads them as
    # they were); eager's pointwise ops reject such operands, scatters and index ops do not
    flat, _ = tree_flatten((args[1:], {k: v for k, v in kwargs.items() if k != "out"}))
    lo, hi = _byte_span(t)
    # `y[:, 1] -= r` is y.__setitem__((slice, 1), y[:, 1].__isub__(r)): the value written is
    # the very view it is written to (a copy onto itself), not another layout of that memory
    dest = _basic_index_view(t, args[1]) if name == "__setitem__" and len(args) > 1 else None
    same = {(t.data_ptr(), t.shape, t.stride())} | \
        ({(dest.data_ptr(), dest.shape, dest.stride())} if dest is not None else set())
    return any(isinstance(o, torch.Tensor) and o is not t and o.layout == torch.strided and o.numel() and
               o.device == t.device and o.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() and
               (o.data_ptr(), o.shape, o.stride()) not in same and
               _byte_span(o)[0] < hi and lo < _byte_span(o)[1] and _shared_elements(t, o) for o in flat)


_MAX_OFFSETS = 1 << 20


def internal_overlap(t: torch.Tensor) -> bool:
    """Whether two positions of strided t are one element.  torch's own test
    (_debug_has_internal_overlap) answers yes only for a stride 0 and 'too hard' for any layout
    that is not dense (`x.as_strided((47, 2), (1, 1))`, rows overlapping: an in-place op on it
    wrote each element once per position in eager, once in a graph's functional form; fuzz_graphs
    --grad seed 6065).  Too hard is decided here: dims sorted by stride, each stride past the
    span of the smaller ones cannot overlap; otherwise element by element up to _MAX_OFFSETS
    (True, overlapping, past that)."""
    ov = torch._debug_has_internal_overlap(t)
    if ov != 2:
        return ov == 1
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1)
    if any(n == 0 for n in t.shape):
        return False
    span = 0
    for st, n in dims:
        if st <= span:
            break
        span += (n - 1) * st
    else:
        return False
    if t.numel() > _MAX_OFFSETS:
        return True
    offs = _offsets(t)
    with torch._C.DisableTorchFunction():
        return int(torch.unique(offs).numel()) < offs.numel()


def _offsets(v: torch.Tensor) -> torch.Tensor:
    """Every position's element offset in v's storage (v's shape, flattened)."""
    with torch._C.DisableTorchFunction():
        idx = torch.tensor(v.storage_offset(), dtype=torch.int64)
        for n, st in zip(v.shape, v.stride()):
            idx = idx.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * st
        return idx.reshape(-1)


def _shared_elements(t: torch.Tensor, o: torch.Tensor) -> bool:
    """Whether views t and o of one storage, whose byte spans overlap, share an element:
    columns of one matrix interleave without sharing any (`x[:, 5:] *= x[:, 4:5]`, YOLO's
    confidence times class scores: the function ran eagerly).  Decided element by element for
    views of one dtype up to _MAX_OFFSETS elements each; True (shared) otherwise."""
    if t.dtype != o.dtype or t.numel() > _MAX_OFFSETS or o.numel() > _MAX_OFFSETS:
        return True
    with torch._C.DisableTorchFunction():
        return bool(torch.isin(_offsets(t), _offsets(o)).any())


def _basic_index_view(t: torch.Tensor, index: Any) -> torch.Tensor | None:
    """t[index] where index is basic (ints, slices, None, Ellipsis, and integer tensors of no
    dimension, which torch indexes with as ints: `load[e] += 1` of an index e a loop took from a
    tensor writes the view it reads), a view of t, else None."""
    parts = index if type(index) is tuple else (index,)
    if not all(type(p) in (int, slice, type(None)) or p is Ellipsis or _int_scalar_tensor(p) for p in parts) or \
            any(type(p) is slice and not all(type(b) in (int, type(None)) for b in (p.start, p.stop, p.step))
                for p in parts):
        return None
    try:
        with torch._C.DisableTorchFunction():
            return t[index]
    except (IndexError, RuntimeError, ValueError):
        return None


def _int_scalar_tensor(p: Any) -> bool:
    return isinstance(p, torch.Tensor) and p.dim() == 0 and p.layout == torch.strided and \
        not p.is_floating_point() and not p.is_complex() and p.dtype is not torch.bool


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes of `t`'s storage its elements occupy, [first, last + 1)."""
    if t.numel() == 0:
        return 0, 0
    lo = hi = t.data_ptr()
    for n, st in zip(t.shape, t.stride()):
        (lo, hi) = (lo + (n - 1) * st * t.element_size(), hi) if st < 0 else (lo, hi + (n - 1) * st * t.element_size())
    return lo, hi + t.element_size()
