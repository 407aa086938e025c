"""Ops that write at indices from the inputs (scatter, scatter_add, scatter_reduce,
index_reduce, index_put, put, index_add/copy/fill, and what decomposes to them:
max_unpool, ...), compiled with a bounds check, without a scatter.

torch-mlir lowers these ops to tm_tensor.scatter, which no launch plan has a kernel
for, so they ran as eager islands (partition.py, reason "index"). Eager's CPU
kernels apply the written elements one after the other: for each destination
element, the sources whose index names it, in index order (scatter along `dim`: j
ascending; index_put: the broadcast index tensors' elements in row-major order),
each combined with what the element holds (replace, +, *, max, min). Here that loop
is unrolled over the J index positions: step j compares the index at j with every
destination position (a constant `arange`) and, where it matches, combines the
source at j into the element (`where(hit, combine(out, src_j), out)`). Each step
rounds as eager's does, in eager's order, so the result is eager's bit for bit in
every dtype; no index is ever dereferenced (an index is only compared). The work is
J x the destination's size, so only small writes are rewritten (_MAX_STEPS,
_MAX_WORK); larger ones stay islands.

Eager raises on an index out of range: the rewrite is applied by
bounds.add_bounds_checks, whose error flag reruns the graph eagerly (eager's error).
CPU only, like the bounds checks (bounds.py), but for the writes whose result is the same in
any order (cuda_order_free): on CUDA those are checked as the reads are (torch._assert_async).
"""
from __future__ import annotations

import math

import torch
import torch.fx as fx

from .fxutil import adopt_fake_vals, bool_like, keep_layout, op_name
from .target import device_type

aten = torch.ops.aten

_MAX_STEPS = 128        # index positions J: one pointwise step each
_MAX_WORK = 1 << 22     # J x elements of the destination


# --- the decompositions (traced into the graph by `rewrite`) ------------------------


def _identity(reduce: str, dtype: torch.dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _combine(reduce: str | None):
    if reduce is None:
        return lambda out, src: src
    return {"sum": torch.add, "mean": torch.add, "prod": torch.mul,
            "amax": torch.maximum, "amin": torch.minimum}[reduce]


_LOW = (torch.bfloat16, torch.float16)


def _steps(out, dim: int, index, src, reduce: str | None, include_self: bool = True, dtype=None,
           opmath: bool = True):
    """scatter_reduce of `src` into `out` along `dim` at `index` (same shape as `out`
    outside `dim`, and as `src` everywhere), eager's loop unrolled, for a result of
    `dtype` (default: out's). bfloat16/float16 are computed in float32 (the
    compiled CPU code has no bfloat16 select): with `opmath` (eager's scatter
    kernels) sums and products accumulate in float32 and round once, a mean's sum
    is rounded before the division; without it (index_reduce, index_put) every
    step rounds to the dtype, as c10::BFloat16 arithmetic does."""
    dtype = dtype or out.dtype
    if reduce == "sum" and include_self and dtype == out.dtype and _integer_sum(dtype, True) \
            and int(index.shape[dim]) > _MAX_STEPS:
        return _order_free_sum(out, dim, index, src)
    low = dtype in _LOW
    if low:
        out, src = out.float(), src.float()
    if dtype == torch.bool and reduce is not None:   # or, and: in int32, nonzero is True
        out = _steps(out.to(torch.int32), dim, index, src.to(torch.int32), reduce, include_self, torch.int32)
        return out != 0

    def rounded(t):
        return t.to(dtype).float() if low else t

    n = int(out.shape[dim])
    shape = [1] * out.ndim
    shape[dim] = n
    pos = torch.arange(n, device=out.device).view(shape)
    hits = [index.narrow(dim, j, 1) == pos for j in range(int(index.shape[dim]))]
    count = None
    if reduce is not None and (not include_self or reduce == "mean"):
        count = torch.zeros(out.shape, dtype=torch.int64, device=out.device)
        for hit in hits:
            count = count + hit
    if reduce is not None and not include_self:
        ident = torch.full((), _identity(reduce, dtype), dtype=out.dtype, device=out.device)
        out = torch.where(count > 0, ident, out)
    combine = _combine(reduce)
    each = low and not opmath and reduce in ("sum", "mean", "prod")
    for j, hit in enumerate(hits):
        value = combine(out, src.narrow(dim, j, 1))
        out = torch.where(hit, rounded(value) if each else value, out)
    if reduce == "mean":
        if include_self:
            count = count + 1
        count = torch.where(count == 0, 1, count)
        if out.is_floating_point():
            out = rounded(rounded(out) / rounded(count.to(out.dtype)))
        else:   # (in int64: torch-mlir lowers no int8 floor division)
            out = torch.div(out.to(torch.int64), count, rounding_mode="floor").to(out.dtype)
    return out.to(dtype) if low else out


def _block(x, shape, skip: int | None = None):
    """`x` narrowed to `shape` in every dim but `skip`."""
    for d, s in enumerate(shape):
        if d != skip and int(x.shape[d]) != s:
            x = x.narrow(d, 0, s)
    return x


def scatter_like(x, dim: int, index, src, reduce: str | None, include_self: bool = True, opmath: bool = True):
    """scatter (reduce None), scatter_add ("sum"), scatter_reduce.two into `x`
    (`opmath`: see _steps)."""
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0:
        x1 = scatter_like(x.view(1), 0, index.view(1) if index.ndim == 0 else index,
                          src.view(1) if src.ndim == 0 else src, reduce, include_self, opmath)
        return x1.view(())
    shape = [int(s) for s in index.shape]
    block = _block(x, shape, dim)
    out = _steps(block, dim, index, _block(src, shape), reduce, include_self, opmath=opmath)
    return out if tuple(out.shape) == tuple(x.shape) else _put_block(x, out)


def _put_block(x, block):
    """`x` with `block` written at its origin (slice_scatter, outermost dim first)."""
    def put(base, blk, d):
        while d < x.ndim and int(blk.shape[d]) == int(base.shape[d]):
            d += 1
        if d == x.ndim:
            return blk
        size = int(blk.shape[d])
        return torch.slice_scatter(base, put(base.narrow(d, 0, size), blk, d + 1), d, 0, size)

    return put(x, block, 0)


def index_reduce(x, dim: int, index, source, reduce: str | None, include_self: bool = True):
    """index_reduce: scatter_reduce along `dim` with the 1-D index broadcast over
    `source`; also index_copy (reduce None) and index_add ("sum"), each step rounded."""
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0:
        return index_reduce(x.view(1), 0, index.view(-1), source.view(-1), reduce, include_self).view(())
    shape = [1] * source.ndim
    shape[dim] = -1
    idx = index.reshape(shape).expand(source.shape)
    block_shape = list(source.shape)
    block_shape[dim] = int(x.shape[dim])
    if list(x.shape) != block_shape:
        return NotImplemented
    return scatter_like(x, dim, idx, source, reduce, include_self, opmath=False)


def index_put(x, indices: list, values, accumulate: bool = False):
    """index_put with integer index tensors at adjacent dims (the Nones before and
    after them keep their dims): the indexed dims flattened to one, each index
    element's position in it, negative indices wrapped; then a scatter along it of
    the values in the index tensors' broadcast order."""
    first = next(i for i, t in enumerate(indices) if t is not None)
    tensors = [t for t in indices if t is not None]
    k = len(tensors)
    sizes = [int(s) for s in x.shape]
    lead, mid, tail = sizes[:first], sizes[first:first + k], sizes[first + k:]
    bshape = list(torch.broadcast_shapes(*[t.shape for t in tensors]))
    lin = None
    for t, n in zip(tensors, mid):
        t = torch.where(t < 0, t + n, t).expand(bshape)
        lin = t if lin is None else lin * n + t
    p, q, m, n = math.prod(lead), math.prod(tail), math.prod(bshape), math.prod(mid)
    out = x.reshape(p, n, q)
    vals = values.expand(lead + bshape + tail).reshape(p, m, q)
    idx = lin.reshape(1, m, 1).expand(p, m, q)
    return _steps(out, 1, idx, vals, "sum" if accumulate else None, opmath=False).view(sizes)


# --- the rewrite of a graph node -------------------------------------------------------

def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_index(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dtype in (torch.int64, torch.int32)


def _small(steps: int, numel: int, order_free: bool = False) -> bool:
    """`order_free`: an integer sum (_order_free_sum), which has no step limit."""
    return 0 < steps and (order_free or steps <= _MAX_STEPS) and steps * max(numel, 1) <= _MAX_WORK


def _integer_sum(dtype, accumulate) -> bool:
    return bool(accumulate) and not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _order_free_sum(out, dim: int, index, src):
    """An accumulating write of integers: sums modulo 2**bits, the same in any order, so
    every index position is compared at once (one (.., n, J, ..) comparison) instead of
    eager's loop unrolled one step per position (_steps: up to _MAX_STEPS)."""
    n = int(out.shape[dim])
    shape = [1] * (out.ndim + 1)
    shape[dim] = n
    hit = index.unsqueeze(dim) == torch.arange(n, device=out.device).view(shape)
    added = torch.where(hit, src.unsqueeze(dim).to(torch.int64), 0).sum(dim + 1)
    return (out.to(torch.int64) + added).to(out.dtype)


def _spec(node: fx.Node):
    """(fn, tensor argument nodes, bounds checks [(index node, lowest, size)]) for
    `node`, or None where it is not rewritten."""
    name = op_name(node.target)
    args = list(node.args)
    kw = dict(node.kwargs)
    x = args[0] if args else None
    xv = _val(x)
    if not isinstance(xv, torch.Tensor) or xv.is_complex() or xv.numel() == 0 or \
            device_type(xv) != "cpu" and not (device_type(xv) == "cuda" and cuda_order_free(node)):
        return None
    overload = node.target._overloadname
    if name in ("aten::scatter", "aten::scatter_add", "aten::scatter_reduce"):
        if len(args) < 4 or not isinstance(args[1], int):
            return None
        legacy = kw.get("reduce", args[4] if name == "aten::scatter" and len(args) > 4 else None)
        if legacy is not None:   # scatter(..., reduce="add"/"multiply")
            if legacy not in ("add", "multiply") or overload not in ("reduce", "value_reduce"):
                return None
            overload = "src" if overload == "reduce" else "value"
        dim, index, src = args[1], args[2], args[3]
        iv = _val(index)
        if not _is_index(iv) or iv.ndim != xv.ndim or iv.numel() == 0:
            return None
        d = dim % max(xv.ndim, 1)
        steps = int(iv.shape[d]) if iv.ndim else 1
        if not _small(steps, xv.numel()):
            return None
        n = int(xv.shape[d]) if xv.ndim else 1
        checks = [(index, 0, n)]
        legacy_reduce = {"add": "sum", "multiply": "prod", None: None}[legacy]
        if name == "aten::scatter" and overload == "value":
            value = src
            if not isinstance(value, (int, float, bool)):
                return None
            return (lambda x, i: scatter_like(x, dim, i, torch.full(i.shape, value, dtype=x.dtype), legacy_reduce),
                    [x, index], checks)
        sv = _val(src)
        if not isinstance(sv, torch.Tensor) or sv.dtype != xv.dtype or sv.ndim != xv.ndim:
            return None
        if name == "aten::scatter":
            if overload != "src":
                return None
            reduce, include_self = legacy_reduce, True
        elif name == "aten::scatter_add":
            reduce, include_self = "sum", True
        else:
            reduce = args[4] if len(args) > 4 else kw.get("reduce")
            include_self = args[5] if len(args) > 5 else kw.get("include_self", True)
        if reduce is not None and (xv.dtype == torch.bool and reduce == "mean"
                                   or reduce not in ("sum", "prod", "mean", "amax", "amin")):
            return None   # (bool sums, maxima: logical or; products, minima: and)
        return (lambda x, i, s: scatter_like(x, dim, i, s, reduce, include_self), [x, index, src], checks)
    if name == "aten::index_reduce":
        if len(args) < 5 or not isinstance(args[1], int):
            return None
        dim, index, source, reduce = args[1], args[2], args[3], args[4]
        include_self = args[5] if len(args) > 5 else kw.get("include_self", True)
        iv, sv = _val(index), _val(source)
        if not _is_index(iv) or iv.ndim > 1 or not isinstance(sv, torch.Tensor) or sv.dtype != xv.dtype \
                or xv.dtype == torch.bool or reduce not in ("prod", "mean", "amax", "amin"):
            return None
        d = dim % max(xv.ndim, 1)
        if sv.ndim != xv.ndim or iv.numel() == 0 or not _small(iv.numel(), xv.numel()):
            return None
        return (lambda x, i, s: index_reduce(x, dim, i, s, reduce, include_self), [x, index, source],
                [(index, 0, int(xv.shape[d]) if xv.ndim else 1)])
    if name in ("aten::index_add", "aten::index_copy", "aten::index_fill"):
        # what aot_autograd leaves whole (uint8, ...): integer index_add only (eager's
        # float kernel adds alpha * source with its own rounding)
        if len(args) < 4 or not isinstance(args[1], int):
            return None
        dim, index, source = args[1], args[2], args[3]
        iv = _val(index)
        if not _is_index(iv) or iv.ndim > 1 or iv.numel() == 0 or xv.ndim == 0 and iv.numel() != 1:
            return None
        d = dim % max(xv.ndim, 1)
        if not _small(iv.numel(), xv.numel()):
            return None
        checks = [(index, 0, int(xv.shape[d]) if xv.ndim else 1)]
        shape = list(xv.shape)
        if xv.ndim:
            shape[d] = iv.numel()
        if name == "aten::index_fill":
            if isinstance(source, (int, float, bool)):
                return (lambda x, i: index_reduce(x, dim, i, torch.full(shape, source, dtype=x.dtype), None),
                        [x, index], checks)
            sv = _val(source)
            if not isinstance(sv, torch.Tensor) or sv.ndim != 0:
                return None
            return (lambda x, i, v: index_reduce(x, dim, i, v.to(x.dtype).expand(shape), None),
                    [x, index, source], checks)
        sv = _val(source)
        if not isinstance(sv, torch.Tensor) or sv.dtype != xv.dtype or list(sv.shape) != shape:
            return None
        if name == "aten::index_copy":
            return (lambda x, i, s: index_reduce(x, dim, i, s, None), [x, index, source], checks)
        alpha = args[4] if len(args) > 4 else kw.get("alpha", 1)
        if xv.is_floating_point() or xv.dtype == torch.bool or not isinstance(alpha, int):
            return None
        return (lambda x, i, s: index_reduce(x, dim, i, s * alpha if alpha != 1 else s, "sum"),
                [x, index, source], checks)
    if name == "aten::put":   # put(x, index, source, accumulate): index_put into the flattened x
        if len(args) < 3:
            return None
        index, source = args[1], args[2]
        accumulate = args[3] if len(args) > 3 else kw.get("accumulate", False)
        iv, sv = _val(index), _val(source)
        if not _is_index(iv) or iv.numel() == 0 or not isinstance(sv, torch.Tensor) or sv.dtype != xv.dtype \
                or sv.numel() != iv.numel() or not _small(iv.numel(), xv.numel(), _integer_sum(xv.dtype, accumulate)):
            return None
        return (lambda x, i, s: index_put(x.reshape(-1), [i.reshape(-1)], s.reshape(-1), bool(accumulate)).view(x.shape),
                [x, index, source], [(index, -xv.numel(), xv.numel())])
    if name in ("aten::index_put", "aten::_unsafe_index_put") and overload == "default":
        if len(args) < 3:
            return None
        indices, values = list(args[1]), args[2]
        accumulate = args[3] if len(args) > 3 else kw.get("accumulate", False)
        vv = _val(values)
        where = [i for i, t in enumerate(indices) if t is not None]
        if not where or where != list(range(where[0], where[-1] + 1)) or len(indices) > xv.ndim:
            return None
        if not all(_is_index(_val(indices[i])) for i in where) or not isinstance(vv, torch.Tensor) \
                or vv.dtype != xv.dtype:
            return None
        try:
            bshape = torch.broadcast_shapes(*[_val(indices[i]).shape for i in where])
            lead, tail = list(xv.shape[:where[0]]), list(xv.shape[where[-1] + 1:])
            torch.broadcast_shapes(vv.shape, lead + list(bshape) + tail)
        except RuntimeError:
            return None
        if torch.broadcast_shapes(vv.shape, lead + list(bshape) + tail) != torch.Size(lead + list(bshape) + tail):
            return None
        if not _small(math.prod(bshape), xv.numel(), _integer_sum(xv.dtype, accumulate)):
            return None
        slots = [None if t is None else k for k, t in enumerate(indices)]

        def fn(x, *rest):
            ts = list(rest[:-1])
            return index_put(x, [None if s is None else ts[where.index(s)] for s in slots], rest[-1],
                             bool(accumulate))

        checks = [(indices[i], -int(xv.shape[i]), int(xv.shape[i])) for i in where]
        return fn, [x] + [indices[i] for i in where] + [values], checks
    return None


def _mask_put(graph: fx.Graph, node: fx.Node) -> list | None:
    """`x[..., mask] = v` (index_put with one boolean mask over dims at.. of x) whose
    values broadcast over the dims after the mask's (a scalar, a row: every selected
    element gets the same values) as `where(mask, v, x)` (accumulate: `where(mask, x + v,
    x)`, eager's one addition per element): nothing is indexed, so there is nothing
    to check ([] flags). Values with one row per selected element (their count is
    tensor data) stay an island. None where it does not apply. The nodes are made
    directly (not traced): their values are views of the mask's and the result's."""
    if op_name(node.target) not in ("aten::index_put", "aten::_unsafe_index_put") or len(node.args) < 3:
        return None
    x, indices, values = node.args[0], list(node.args[1]), node.args[2]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    where = [i for i, t in enumerate(indices) if t is not None]
    if len(where) != 1:
        return None
    at, mask = where[0], indices[where[0]]
    xv, mv, vv, want = _val(x), _val(mask), _val(values), _val(node)
    if not all(isinstance(t, torch.Tensor) for t in (xv, mv, vv, want)) or mv.dtype != torch.bool or \
            vv.dtype != xv.dtype or want.shape != xv.shape or want.dtype != xv.dtype:
        return None
    tail = list(xv.shape[at + mv.ndim:])
    if list(mv.shape) != list(xv.shape[at:at + mv.ndim]) or vv.ndim > len(tail):
        return None
    try:
        if list(torch.broadcast_shapes(vv.shape, tail)) != tail:
            return None
    except RuntimeError:
        return None
    shape = list(mv.shape) + [1] * len(tail)
    with graph.inserting_before(node):
        m = graph.call_function(aten.view.default, (mask, shape))
        m.meta["val"] = mv.view(shape)
        new = values
        if accumulate:
            new = graph.call_function(aten.add.Tensor, (x, values))
            new.meta["val"] = want
        out = graph.call_function(aten.where.self, (m, new, x))
        out.meta["val"] = want
    out.meta["mlircap_bounds_checked"] = True
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return []


def cuda_order_free(node: fx.Node) -> bool:
    """`node` (an op in WRITES) gives the same result whatever order its writes are applied
    in: a reduction of integers (sums and products modulo 2**bits, maxima, minima, and means:
    such a sum and then eager's floor division by the count). On CUDA eager applies the
    writes in no set order (atomic operations, a thread per source element), so the
    unrolled form (index order, eager's CPU order) gives eager's CUDA result only for
    these. A replacing write (scatter, index_copy, index_put without accumulate: which of
    two writes to one element lands is not set) and floating reductions (rounded in the
    order the atomics land; NaN handling of CUDA's atomic max / min) stay islands there."""
    name = op_name(node.target)
    args, kw = list(node.args), dict(node.kwargs)
    xv = _val(args[0]) if args else None
    if not isinstance(xv, torch.Tensor) or xv.is_floating_point() or xv.is_complex() or xv.dtype == torch.bool:
        return False
    if name in ("aten::scatter_add", "aten::index_add"):
        return True
    if name == "aten::scatter":   # the legacy reduce= of scatter
        return kw.get("reduce", args[4] if len(args) > 4 else None) in ("add", "multiply")
    if name in ("aten::scatter_reduce", "aten::index_reduce"):
        return (args[4] if len(args) > 4 else kw.get("reduce")) in ("sum", "prod", "mean", "amax", "amin")
    if name in ("aten::index_put", "aten::_unsafe_index_put", "aten::put"):
        at = 3
        return bool(args[at] if len(args) > at else kw.get("accumulate", False))
    return False


WRITES = ("aten::scatter", "aten::scatter_add", "aten::scatter_reduce", "aten::index_reduce",
          "aten::index_put", "aten::_unsafe_index_put", "aten::index_add", "aten::index_copy", "aten::index_fill", "aten::put")


# Where each op in WRITES takes its index tensor(s) (index_put: a list of them).
_INDEX_ARG = {"aten::scatter": 2, "aten::scatter_add": 2, "aten::scatter_reduce": 2, "aten::index_reduce": 2,
              "aten::index_put": 1, "aten::_unsafe_index_put": 1, "aten::index_add": 2, "aten::index_copy": 2,
              "aten::index_fill": 2, "aten::put": 1}


def _writes_nothing(node: fx.Node) -> bool:
    """`node` (an op in WRITES) has no index: its result is its input (a copy). The
    recording ran it on these shapes, which decide whether eager accepts them."""
    pos = _INDEX_ARG.get(op_name(node.target))
    if pos is None or len(node.args) <= pos:
        return False
    idx = node.args[pos]
    idx = [i for i in idx if i is not None] if isinstance(idx, (list, tuple)) else [idx]
    vals = [_val(i) for i in idx]
    if not vals or not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    try:
        shape = torch.broadcast_shapes(*(v.shape for v in vals))
    except RuntimeError:
        return False
    self_val, want = _val(node.args[0]), _val(node)
    return math.prod(shape) == 0 and isinstance(self_val, torch.Tensor) and isinstance(want, torch.Tensor) and \
        self_val.shape == want.shape and self_val.dtype == want.dtype


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """Replaces `node` (an op in WRITES) by its unrolled form traced into `graph`:
    the error flags of its index tensors ([] where nothing is to check), or None
    (the node is left as it is). With no index at all, by a copy of its input."""
    if _writes_nothing(node):
        with graph.inserting_before(node):
            out = graph.call_function(aten.clone.default, (node.args[0],))
        out.meta["val"] = node.meta["val"]
        out.meta["mlircap_bounds_checked"] = True
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        return []
    masked = _mask_put(graph, node)
    if masked is not None:
        return masked
    spec = _spec(node)
    if spec is None:
        return None
    fn, inputs, checks = spec
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx

    from .frontend import decomposition_table

    vals = [_val(n) for n in inputs]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    fake = detect_fake_mode(vals)
    try:
        with unset_fake_temporarily(), disable_proxy_modes_tracing():
            examples = [torch.zeros_like(torch.empty_strided(v.shape, v.stride(), dtype=v.dtype)) for v in vals]
            sub = make_fx(fn, decomposition_table=decomposition_table())(*examples)
    except Exception:   # noqa: BLE001 - anything it does not handle stays an island
        return None
    want, res = _val(node), _val(sub.graph.output_node().args[0])
    if any(n.op == "get_attr" for n in sub.graph.nodes) or not isinstance(want, torch.Tensor) \
            or not isinstance(res, torch.Tensor) or res.shape != want.shape or res.dtype != want.dtype:
        return None
    phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    before = set(graph.nodes)
    with graph.inserting_before(node):
        out = graph.graph_copy(sub.graph, dict(zip(phs, inputs)))
        flags = []
        for index, low, n in checks:
            iv = _val(index)
            lt = graph.call_function(aten.lt.Scalar, (index, low))
            ge = graph.call_function(aten.ge.Scalar, (index, n))
            bad = graph.call_function(aten.logical_or.default, (lt, ge))
            flag = graph.call_function(aten.any.default, (bad,))
            mask = bool_like(iv, iv.shape)
            for x, v in ((lt, mask), (ge, mask), (bad, mask), (flag, bool_like(iv, ()))):
                x.meta["val"] = v
            flags.append(flag)
    # the copied nodes' values as the graph's fake tensors
    adopt_fake_vals(graph, fake, set(graph.nodes) - before)
    keep_layout(out, want)
    out.meta["mlircap_bounds_checked"] = True
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return flags


def masked_scatter(self, mask, source):
    """aten.masked_scatter (torch-mlir's lowering has no CPU kernel): the k-th True of the
    mask (broadcast to self's shape, row-major) takes source's k-th element, read at the
    running count of Trues (a cumulative sum) minus one. More Trues than source elements:
    eager raises; the read is bounds-checked (bounds.py), so the graph reruns eagerly
    and raises too. An empty source: NotImplemented (the op stays whole)."""
    if not all(isinstance(t, torch.Tensor) for t in (self, mask, source)) or mask.dtype != torch.bool or \
            source.numel() == 0 or source.dtype != self.dtype or self.is_complex():
        return NotImplemented
    try:
        shape = torch.broadcast_shapes(self.shape, mask.shape)   # (out of place: both broadcast)
    except RuntimeError:
        return NotImplemented
    m = mask.expand(shape).reshape(-1)
    base = self.expand(shape).reshape(-1)
    if m.numel() == 0:
        return base.clone().reshape(shape)
    count = torch.cumsum(m.to(torch.int64), 0) - 1
    pos = torch.where(m, count, torch.zeros_like(count))
    vals = source.reshape(-1)[pos]
    return torch.where(m, vals, base).reshape(shape)
