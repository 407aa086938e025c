"""`segment_reduce` (lengths or offsets) compiled as eager's sequential loop, with a flag.

torch-mlir has no lowering for it. Eager's CPU kernel (SegmentReduce.cpp) reduces each
segment [start, end) of `data` along `axis` element by element in the data's own type:
`acc = initial` (or -inf / 0 / +inf / 1 for max, sum and mean, min, prod), then
`acc = isnan(v) ? v : max(acc, v)` (min alike), `acc + v`, `acc * v` for j ascending,
and a mean divides by the length (NaN for an empty segment without `initial`). Here the
loop runs over every position p of `data` along `axis` (a static count, unrolled up to
`MAX_LENGTH`), each step applied to the segments that hold p: the same operations in the
same order, so low-precision accumulation rounds as eager's does. Segment bounds come from
the lengths (a running sum) or offsets. Lengths or offsets eager would reject or read past
`data` with (negative lengths, a total other than the axis' size, offsets not starting at
0 or decreasing) set the error flag (bounds.py): the call reruns eagerly (eager's error
or result). CPU only, floating data.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .polynomials import inline
from .target import device_type

MAX_LENGTH = 64
_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _reduced(data, bounds, reduce: str, axis: int, unsafe: bool, initial, is_offsets: bool):
    n = data.shape[axis]
    if is_offsets:
        starts, ends = bounds[..., :-1], bounds[..., 1:]
        bad = (starts < 0).any() | (ends < starts).any() | (bounds[..., :1] != 0).any() | (ends > n).any()
        lengths = ends - starts
    else:
        lengths = bounds
        s = bounds.shape[-1]
        k = torch.arange(s, device=bounds.device)
        upto = (k.view(1, s) <= k.view(s, 1)).to(bounds.dtype)   # [k, j]: j <= k
        ends = (bounds.unsqueeze(-2) * upto).sum(-1)
        starts = ends - bounds
        bad = (bounds < 0).any() | (ends > n).any()
    if not unsafe:
        bad = bad | (ends[..., -1:] != n).any()
    segs = starts.shape[-1]
    inner = data.dim() - axis - 1
    shape = list(data.shape)
    shape[axis] = segs
    dt = data.dtype
    if initial is not None:
        init = float(initial)
    else:
        init = {"max": float("-inf"), "min": float("inf"), "sum": 0.0, "mean": 0.0, "prod": 1.0}[reduce]
    acc = torch.full(shape, init, dtype=dt, device=data.device)
    view = list(starts.shape) + [1] * inner
    for p in range(n):
        hold = ((starts <= p) & (p < ends)).view(view)
        v = data.narrow(axis, p, 1)
        if reduce == "max":
            step = torch.where(torch.isnan(v), v, torch.where(acc < v, v, acc))
        elif reduce == "min":
            step = torch.where(torch.isnan(v), v, torch.where(v < acc, v, acc))
        elif reduce in ("sum", "mean"):
            step = acc + v
        else:
            step = acc * v
        acc = torch.where(hold, step, acc)
    if reduce == "mean":
        length = lengths.view(view)
        divided = acc / length.to(dt)
        acc = torch.where((length > 0) & ~torch.isnan(acc), divided, acc)
        if initial is None:
            acc = torch.where(length == 0, torch.full_like(acc, float("nan")), acc)
    return acc, bad


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """Replaces `node` (aten.segment_reduce with lengths or offsets) by the unrolled loop
    traced into `graph`: its error flag, or None (left as it is)."""
    if len(node.args) != 2 or not isinstance(node.args[0], fx.Node) or not isinstance(node.args[1], str):
        return None
    kw = dict(node.kwargs)
    reduce = node.args[1]
    lengths, offsets, indices = kw.get("lengths"), kw.get("offsets"), kw.get("indices")
    bounds = lengths if lengths is not None else offsets
    if indices is not None or (lengths is None) == (offsets is None) or not isinstance(bounds, fx.Node) or \
            reduce not in ("max", "min", "sum", "mean", "prod"):
        return None
    data, bv, want = node.args[0].meta.get("val"), bounds.meta.get("val"), node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in (data, bv, want)) or data.dtype not in _FLOATS or \
            device_type(data) != "cpu" or bv.dtype not in (torch.int32, torch.int64) or bv.dim() < 1:
        return None
    axis = kw.get("axis", 0)
    axis = axis + data.dim() if axis < 0 else axis
    initial = kw.get("initial")
    if axis != bv.dim() - 1 or tuple(bv.shape[:-1]) != tuple(data.shape[:axis]) or \
            not 0 < data.shape[axis] <= MAX_LENGTH or bv.shape[-1] == 0 or \
            (initial is not None and not isinstance(initial, (int, float))) or isinstance(initial, bool):
        return None
    unsafe, is_offsets = bool(kw.get("unsafe", False)), offsets is not None

    def fn(d, b):
        return _reduced(d, b, reduce, axis, unsafe, initial, is_offsets)

    flag = inline(graph, node, fn, [node.args[0], bounds])
    return None if flag is None else [flag]
