"""Copies of views, and scatters into a view (`diagonal_scatter`, `as_strided_scatter`) as a gather.

The `*_copy` forms of view ops (`view_copy`, `permute_copy`, `unbind_copy`, `narrow_copy`,
...), which torch-mlir cannot lower, are the view followed by a contiguous copy, as eager
returns them (`copy_of_view`).

torch-mlir cannot lower these two: they were eager islands. Both are "a copy of the
input whose elements under a view are replaced by `src`", and which elements the view
holds depends only on shapes and strides, never on data. So the positions are computed
from aranges: each element of the result reads either `src.reshape(-1)[k]` (the view's
k-th element sits there: k from comparing every element's position with the view's) or
the input's own element. The index map depends on no input (constant folding computes
it at compile time, constfold.py), so the op becomes `where(hit, src_flat[k], x)`, a
gather with constant indices that compiles (no index can be out of range).

* `diagonal_scatter`: the view is `diagonal(offset, dim1, dim2)` of the input's logical
  elements;
* `as_strided_scatter`: eager clones the input (keeping its strides where it is dense,
  else contiguous) and writes `src` through `as_strided(size, stride, storage_offset)`
  of the clone's storage: positions are storage positions of the clone. A view with
  overlapping elements (a stride 0: which write wins is up to the copy) or one reaching
  outside the clone's storage (eager raises) is left to eager: NotImplemented.
"""
from __future__ import annotations

import contextlib

import torch

_LIMIT = 1 << 12   # elements of the input (the comparison matrix is elements x view elements)


@contextlib.contextmanager
def _real():
    """Real tensors while aot_autograd traces: neither fake nor recorded in the graph."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    with disable_proxy_modes_tracing(), unset_fake_temporarily():
        yield


def _gather(x, src, pos: torch.Tensor, element: torch.Tensor):
    """`x` with the elements at storage positions `pos` (the view's elements, in order)
    replaced by `src`'s; `element`: each element's storage position. `pos` and `element`
    are computed from aranges only (the graph's constant folding computes the index map
    at compile time: constfold.py)."""
    if pos.numel() == 0:
        return x.clone()
    eq = element.reshape(-1, 1) == pos.reshape(1, -1)
    hit = eq.any(1).view(x.shape)
    k = eq.to(torch.int32).argmax(1)
    picked = src.reshape(-1).index_select(0, k).view(x.shape)
    return torch.where(hit, picked, x)


def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    if not isinstance(x, torch.Tensor) or not isinstance(src, torch.Tensor) or x.numel() > _LIMIT or \
            x.is_complex() or src.dtype != x.dtype or x.layout != torch.strided:
        return NotImplemented
    with _real():
        try:
            shape = torch.empty(x.shape, device="meta").diagonal(offset, dim1, dim2).shape
        except (RuntimeError, IndexError):
            return NotImplemented
    if tuple(shape) != tuple(src.shape):
        return NotImplemented   # eager raises
    logical = torch.arange(x.numel(), dtype=torch.int64, device=x.device).view(x.shape)
    return _gather(x, src, logical.diagonal(offset, dim1, dim2), logical)


def as_strided_scatter(x, src, size, stride, storage_offset=None):
    if not isinstance(x, torch.Tensor) or not isinstance(src, torch.Tensor) or x.numel() > _LIMIT or \
            x.is_complex() or src.dtype != x.dtype or x.layout != torch.strided or \
            tuple(src.shape) != tuple(size):
        return NotImplemented
    strides = x.clone().stride()   # the clone eager writes into (fake: metadata only)
    if any(s < 0 for s in strides) or any(s < 0 for s in stride):
        return NotImplemented
    span = 1 + sum((n - 1) * s for n, s in zip(x.shape, strides)) if x.numel() else 0
    off = 0 if storage_offset is None else int(storage_offset)
    n = 1
    for d in size:
        n *= d
    if n and (off < 0 or off + sum((d - 1) * s for d, s in zip(size, stride)) >= span):
        return NotImplemented   # outside the clone's storage: eager raises
    with _real():
        pos = torch.arange(max(span, off + 1), dtype=torch.int64).as_strided(tuple(size), tuple(stride), off)
        if pos.numel() != pos.reshape(-1).unique().numel():
            return NotImplemented   # overlapping view: which write wins is the copy's
    storage = torch.arange(max(span, off + 1), dtype=torch.int64, device=x.device)
    return _gather(x, src, storage.as_strided(tuple(size), tuple(stride), off),
                   storage.as_strided(tuple(x.shape), strides))


# view op -> its *_copy overloads (aten names without the aten:: prefix)
_COPIES = {
    "view": ("view_copy.default", "view_copy.dtype"), "permute": ("permute_copy.default",),
    "expand": ("expand_copy.default",), "transpose": ("transpose_copy.int",), "t": ("t_copy.default",),
    "unsqueeze": ("unsqueeze_copy.default",), "squeeze": ("squeeze_copy.default", "squeeze_copy.dim", "squeeze_copy.dims"),
    "alias": ("alias_copy.default",), "diagonal": ("diagonal_copy.default",), "select": ("select_copy.int",),
    "slice": ("slice_copy.Tensor",), "unfold": ("unfold_copy.default",), "narrow": ("narrow_copy.default",),
    "unbind": ("unbind_copy.int",), "split": ("split_copy.Tensor",), "split_with_sizes": ("split_with_sizes_copy.default",),
}


def copy_of_view(view_op):
    """A `*_copy` op as `view_op` (the view, resolved by the overload's name and
    arguments) followed by a contiguous copy of each result."""

    def decomposition(*args, **kwargs):
        out = view_op(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out.clone(memory_format=torch.contiguous_format)
        return [t.clone(memory_format=torch.contiguous_format) for t in out]

    return decomposition


def copy_decompositions() -> dict:
    """{*_copy OpOverload: decomposition} for the ops in _COPIES that exist in this torch."""
    aten = torch.ops.aten
    table = {}
    for view, names in _COPIES.items():
        packet = getattr(aten, view)
        for name in names:
            base, overload = name.split(".")
            copy_packet = getattr(aten, base, None)
            op = getattr(copy_packet, overload, None) if copy_packet is not None else None
            view_op = getattr(packet, overload, None)
            if op is not None and view_op is not None:
                table[op] = copy_of_view(view_op)
    return table
