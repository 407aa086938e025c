"""Ops with a data-dependent output size, computed compiled at a static bound.

`unique` and `unique_consecutive` return as many elements (or slices along `dim`)
as their input has distinct values (runs of equal values), `nonzero` and
`argwhere` as many rows as it has nonzero elements: the size depends on
the data, so aot_autograd cannot trace them and ddsplit.py used to run them as
eager islands. Their size is bounded by the input's, though. `rewrite` replaces
such an op in a captured graph by two nodes:

    bounded   a static-shape computation of the op's results padded to the bound,
              plus the number of valid rows and a flag saying whether this input
              is one the computation models; ordinary tensor ops, compiled with
              the graph before it;
    trim      the padded results narrowed to that number (views, made contiguous
              as eager's results are): the only step that reads tensor data on
              the host, as eager's kernel does to size its outputs.

ddsplit then cuts the graph at `trim` (its size needs data) and compiles the
parts before and after it; nothing runs through torch's kernel for the op. When
the flag says the input is not modelled (floating-point input with NaN, which
eager orders by an unstable sort), `trim` reruns the original op through torch on
the original input and reports it as an eager island on the 'fallback' log.

nonzero's padded indices are nonzero.py's static form (inputs up to 1024 elements).
Each element's group is found by pairwise comparisons (O(n^2) in the number of
elements or slices, as movement.sort does): only up to `MAX_WORK` comparisons,
larger inputs keep the op whole (an eager island, as before).
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from . import logs

MAX_WORK = 1 << 22   # pairwise element comparisons of one bounded op


def _unique_args(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    return input, bool(return_inverse), bool(return_counts), dim


def _consecutive_args(input, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    return input, bool(return_inverse), bool(return_counts), dim


# capture-level targets -> (binds (args, kwargs) to (input, inverse, counts, dim), consecutive)
_TARGETS: dict[Any, tuple] = {
    torch.unique: (_unique_args, False),
    torch.Tensor.unique: (_unique_args, False),
    torch.unique_consecutive: (_consecutive_args, True),
    torch.Tensor.unique_consecutive: (_consecutive_args, True),
}


def _slices(x: torch.Tensor, dim):
    """(n, m) rows of x: its elements (dim None) or its slices along dim, flattened."""
    if dim is None:
        return x.reshape(-1, 1)
    return x.movedim(dim, 0).reshape(x.shape[dim], -1)


def _key(s: torch.Tensor) -> torch.Tensor:
    return s.to(torch.int32) if s.dtype == torch.bool else s


def bounded_unique(x: torch.Tensor, dim, consecutive: bool):
    """(values, inverse, counts, count, modelled): eager's unique / unique_consecutive
    of x (sorted, as eager's CPU and CUDA kernels always are), values and counts
    padded to n rows (n = elements, or slices along dim), `count` of them valid."""
    s = _key(_slices(x, dim))                                 # (n, m)
    n = s.shape[0]
    dev = x.device
    pos = torch.arange(n, device=dev)
    si, sj = s.unsqueeze(1), s.unsqueeze(0)                   # (i, 1, m), (1, j, m)
    diff = si != sj                                           # NaN differs from everything
    if consecutive:
        new = torch.ones(n, dtype=torch.bool, device=dev)     # row i starts a run
        if n > 1:   # (a cat of an empty slice would be an eager island)
            new = torch.cat([new[:1], (s[1:] != s[:-1]).any(-1)])
        lower = pos.unsqueeze(0) <= pos.unsqueeze(1)          # [i, j]: j <= i
        rank = (lower & new.unsqueeze(0)).sum(-1) - 1         # run of row i
        first = new
    else:
        same = ~diff.any(-1)                                  # [i, j]: equal rows
        earlier = pos.unsqueeze(0) < pos.unsqueeze(1)         # [i, j]: j < i
        first = ~(same & earlier).any(-1)                     # first row of its value
        # row j < row i lexicographically: at their first differing element
        k = diff.to(torch.int32).argmax(-1, keepdim=True)     # (i, j, 1)
        a = torch.gather(si.expand(n, n, -1), 2, k).squeeze(-1)
        b = torch.gather(sj.expand(n, n, -1), 2, k).squeeze(-1)
        less = diff.any(-1) & (b < a)                         # [i, j]
        rank = (less & first.unsqueeze(0)).sum(-1)            # distinct values below row i
    pick = (rank.unsqueeze(0) == pos.unsqueeze(1)) & first.unsqueeze(0)   # [r, i]: row i is value r
    rows = x.movedim(dim, 0).reshape(n, -1) if dim is not None else x.reshape(n, 1)
    if x.dtype == torch.bool:
        vals = (pick.unsqueeze(-1) & rows.unsqueeze(0)).any(1)
    else:
        # the maximum of one element and the lowest value is that element (-0.0 too)
        low = float("-inf") if x.is_floating_point() else torch.iinfo(x.dtype).min
        vals = torch.amax(torch.where(pick.unsqueeze(-1), rows.unsqueeze(0),
                                      torch.full((), low, dtype=x.dtype, device=dev)), 1)
    counts = (rank.unsqueeze(0) == pos.unsqueeze(1)).sum(-1)               # rows of value r
    count = first.sum()
    if dim is None:
        values = vals.reshape(n)
        inverse = rank.reshape(x.shape)
    else:
        rest = list(x.movedim(dim, 0).shape[1:])
        values = vals.reshape([n] + rest).movedim(0, dim)
        inverse = rank
    if x.is_floating_point() and not consecutive:
        # eager's unstable sort orders NaN rows its own way, and picks -0.0 or 0.0 for
        # a value both stand for: inputs with NaN or with zeros of both signs are rerun
        zero = x == 0
        neg = (1.0 / x) < 0   # (torch-mlir cannot lower signbit): -inf at -0.0
        modelled = ~(torch.isnan(x).any() | ((zero & neg).any() & (zero & ~neg).any()))
    else:
        modelled = torch.ones((), dtype=torch.bool, device=dev)
    return values, inverse, counts, count, modelled


class Trim:
    """The results of a bounded op from its padded form, in eager's structure (a
    tensor, or a tuple of the requested results). A graph node's target (FX writes
    non-primitive arguments as their repr): it holds the original op, rerun through
    torch on an input the bounded form does not model."""

    mlircap_trim = True   # ddsplit: splitting here runs nothing eagerly

    def __init__(self, op, extra_args: tuple, kwargs: dict, dim, inv: bool, cnt: bool) -> None:
        self.op, self.extra_args, self.kwargs = op, extra_args, kwargs
        self.dim, self.inv, self.cnt = dim, inv, cnt
        self.__name__ = "trim_" + getattr(op, "__name__", "op")
        self.__module__ = __name__

    strict = False   # strict=True: an input not modelled raises instead of rerunning (ddsplit)

    def __call__(self, values, inverse, counts, count, modelled, x):
        if not bool(modelled):
            if self.strict:
                from .backend import MlircapCompileError

                raise MlircapCompileError(f"{self.op.__name__} of an input its bounded form does not compute "
                                          "(NaN) would run through torch (strict=True)")
            logs.log("fallback", f"graph split into 1 parts; eager islands: {self.op.__name__}: "
                                 "an input its bounded form does not compute (NaN)")
            return self.op(x, *self.extra_args, **self.kwargs)
        n = int(count)
        d = 0 if self.dim is None else self.dim % max(x.dim(), 1)
        # eager's storages: unique's values and counts hold the valid rows alone; those of
        # unique_consecutive (flattened) and the counts along a dim keep the input's size
        padded = "consecutive" in getattr(self.op, "__name__", "") and self.dim is None
        out = [_narrow_in_storage(values, d, n, padded)]
        if self.inv:
            out.append(inverse)
        if self.cnt:
            out.append(_narrow_in_storage(counts, 0, n, padded or self.dim is not None))
        return out[0] if len(out) == 1 else tuple(out)


def _own_storage(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.storage_offset() == 0 and \
        t.untyped_storage().nbytes() == t.numel() * t.element_size()


def _narrow_in_storage(t: torch.Tensor, d: int, n: int, padded: bool) -> torch.Tensor:
    """The first `n` rows along `d` of the padded result `t`, contiguous, in a storage of the
    size eager's kernel leaves: the rows alone, or (`padded`) the padded size. The storage
    is visible to as_strided: a narrow of the padded buffer read its padding (-inf, 0) past
    the valid rows where eager raises (tensorops seed 1373: unique(...).contiguous()
    .as_strided((3, 2), (1, 1)) of one distinct value)."""
    if padded:
        return (t if _own_storage(t) else t.clone(memory_format=torch.contiguous_format)).narrow(d, 0, n)
    rows = t.narrow(d, 0, n)
    return rows if _own_storage(rows) else rows.clone(memory_format=torch.contiguous_format)


def _nonzero_args(input, *, out=None, as_tuple=False):  # noqa: A002
    return input, out, bool(as_tuple)


_NONZERO_TARGETS = {torch.nonzero: _nonzero_args, torch.Tensor.nonzero: _nonzero_args,
                    torch.argwhere: lambda input: (input, None, False),  # noqa: A006
                    torch.Tensor.argwhere: lambda self: (self, None, False)}


def bounded_nonzero(x: torch.Tensor):
    """(indices, count): x's nonzero indices (nonzero.py's static form) padded to x.numel() rows."""
    from .nonzero import nonzero_static

    n = x.numel()
    return nonzero_static(x, size=n, fill_value=0), (x != 0).sum()


class TrimNonzero:
    """nonzero / argwhere from the padded indices: the first `count` rows (as_tuple: their columns).
    `scalar`: the input was 0-d, its indices those of its 1-element view: eager's result has
    no column ((count, 0); as_tuple: the one column, as eager returns it)."""

    mlircap_trim = True

    def __init__(self, name: str, as_tuple: bool, scalar: bool = False) -> None:
        self.as_tuple, self.scalar = as_tuple, scalar
        self.__name__ = "trim_" + name
        self.__module__ = __name__

    def __call__(self, indices, count):
        # eager's layout: (count, ndim) with strides (1, count), in a storage of its own
        n = int(count)
        rows = torch.empty_strided((n, indices.size(1)), (1, n), dtype=indices.dtype,
                                   device=indices.device).copy_(indices.narrow(0, 0, n))
        if self.as_tuple:
            return tuple(rows.unbind(1))
        return rows.narrow(1, 0, 0) if self.scalar else rows


def empty_nonzero(x: torch.Tensor, as_tuple: bool):
    """nonzero / argwhere of a tensor without elements: no row, whatever the data."""
    if as_tuple:
        return tuple(torch.zeros(0, dtype=torch.int64, device=x.device) for _ in range(x.dim()))
    return torch.zeros(0, x.dim(), dtype=torch.int64, device=x.device)


def _rewrite_nonzero(gm: fx.GraphModule, node: fx.Node, env: dict) -> bool:
    target = node.target if node.op == "call_function" else getattr(torch.Tensor, str(node.target), None)
    bind = _NONZERO_TARGETS.get(target)
    if bind is None or not node.args:
        return False
    try:
        x, out, as_tuple = bind(*fx.node.map_arg(node.args, lambda a: env[a]),
                                **fx.node.map_arg(node.kwargs, lambda a: env[a]))
    except (TypeError, KeyError):
        return False
    # nonzero.py's form: up to 1024 elements (n * n comparisons), no complex; a 0-d input
    # as its 1-element view; no element: no row (static, nothing to trim)
    if out is not None or not isinstance(node.args[0], fx.Node) or not isinstance(x, torch.Tensor) or \
            x.is_complex() or x.layout != torch.strided or x.numel() > 1024:
        return False
    g = gm.graph
    with g.inserting_before(node):
        if x.numel() == 0:
            t = g.call_function(empty_nonzero, (node.args[0], as_tuple))
        else:
            src = node.args[0] if x.dim() else g.call_function(torch.reshape, (node.args[0], (1,)))
            b = g.call_function(bounded_nonzero, (src,))
            parts = [g.call_function(operator.getitem, (b, i)) for i in range(2)]
            t = g.call_function(TrimNonzero(getattr(target, "__name__", "nonzero"), as_tuple, x.dim() == 0),
                                tuple(parts))
    t.meta = dict(node.meta)
    node.replace_all_uses_with(t)
    g.erase_node(node)
    gm.recompile()
    return True


def bounded_masked_rows(x: torch.Tensor, mask: torch.Tensor):
    """(rows, count): the rows of `x` (viewed as (mask.numel(), *rest)) where the bool `mask`
    (x's leading dims) is True, in row-major order, padded to mask.numel() rows (the
    padding repeats row 0), and how many are valid. x[mask] and masked_select (a
    broadcast x and mask, rest empty) are their first `count` rows."""
    from .nonzero import nonzero_static

    m = mask.numel()
    flat = x.reshape([m] + list(x.shape[mask.dim():]))
    idx = nonzero_static(mask.reshape(m), size=m, fill_value=0)[:, 0]
    return flat.index_select(0, idx), mask.sum()


def masked_select_rows(x: torch.Tensor, mask: torch.Tensor):
    """bounded_masked_rows of masked_select: x and mask broadcast to one shape."""
    xb, mb = torch.broadcast_tensors(x, mask)
    return bounded_masked_rows(xb, mb)


class TrimRows:
    """x[mask] / masked_select from the padded rows: the first `count`, contiguous in a
    storage of their own (eager's fresh result)."""

    mlircap_trim = True

    def __init__(self, name: str) -> None:
        self.__name__ = "trim_" + name
        self.__module__ = __name__

    def __call__(self, rows, count):
        return rows.narrow(0, 0, int(count)).clone(memory_format=torch.contiguous_format)


_MASKED_MAX = 1024   # mask elements of a bounded selection (nonzero.py's static form: n * n work)


def _rewrite_masked(gm: fx.GraphModule, node: fx.Node, env: dict) -> bool:
    """x[mask] (one bool mask over x's leading dims, of their exact shape) and
    masked_select(x, mask) (a bool mask broadcasting with x), for inputs that do not
    require grad, up to _MASKED_MAX mask elements: the selected rows computed at their
    bound (every row) and trimmed to the count."""
    target = node.target if node.op == "call_function" else getattr(torch.Tensor, str(node.target), None)
    if target in (operator.getitem, torch.Tensor.__getitem__):
        kind = "getitem"
    elif target in (torch.masked_select, torch.Tensor.masked_select):
        kind = "masked_select"
    else:
        return False
    if node.kwargs or len(node.args) != 2 or not all(isinstance(a, fx.Node) for a in node.args):
        return False
    x, mask = (env.get(a) for a in node.args)
    if not isinstance(x, torch.Tensor) or not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or \
            x.layout != torch.strided or mask.layout != torch.strided or x.device != mask.device or \
            x.is_complex() or x.requires_grad or mask.dim() == 0:
        return False
    if kind == "getitem":
        if mask.dim() > x.dim() or tuple(mask.shape) != tuple(x.shape[:mask.dim()]):
            return False   # eager raises (IndexError): left to eager
        n = mask.numel()
        fn = bounded_masked_rows
    else:
        try:
            shape = torch.broadcast_shapes(x.shape, mask.shape)
        except RuntimeError:
            return False
        n = 1
        for d in shape:
            n *= d
        fn = masked_select_rows
    if n == 0 or n > _MASKED_MAX:
        return False
    g = gm.graph
    with g.inserting_before(node):
        b = g.call_function(fn, tuple(node.args))
        parts = [g.call_function(operator.getitem, (b, i)) for i in range(2)]
        t = g.call_function(TrimRows(kind), tuple(parts))
    t.meta = dict(node.meta)
    node.replace_all_uses_with(t)
    g.erase_node(node)
    gm.recompile()
    return True


def _fits(x, dim) -> bool:
    if not isinstance(x, torch.Tensor) or x.is_complex() or x.layout != torch.strided or x.numel() == 0:
        return False
    if dim is not None:
        if not isinstance(dim, int) or x.dim() == 0 or not -x.dim() <= dim < x.dim():
            return False
        n = x.shape[dim]
    else:
        n = x.numel()
    return x.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.bool, torch.uint8,
                       torch.int8, torch.int16, torch.int32, torch.int64) and n * x.numel() <= MAX_WORK


def _empty_unique_fits(x, dim) -> bool:
    """unique / unique_consecutive of `x` has no element to compare: x has none and the
    op reduces along a dim of size 0 or over all elements (eager raises for another dim)."""
    if not isinstance(x, torch.Tensor) or x.numel() != 0 or x.layout != torch.strided or x.is_complex():
        return False
    return dim is None or (isinstance(dim, int) and x.dim() > 0 and -x.dim() <= dim < x.dim()
                           and x.shape[dim] == 0)


def empty_unique(x: torch.Tensor, dim, inv: bool, cnt: bool):
    """unique / unique_consecutive of a tensor without elements (_empty_unique_fits): no
    value, no count; the inverse has a (no) entry per element or slice."""
    dev = x.device
    values = torch.zeros(0, dtype=x.dtype, device=dev) if dim is None else torch.zeros(x.shape, dtype=x.dtype,
                                                                                       device=dev)
    out = [values]
    if inv:
        out.append(torch.zeros(x.shape if dim is None else (0,), dtype=torch.int64, device=dev))
    if cnt:
        out.append(torch.zeros(0, dtype=torch.int64, device=dev))
    return out[0] if len(out) == 1 else tuple(out)


def combinations(x: torch.Tensor, r: int = 2, with_replacement: bool = False):
    """torch.combinations of a 1-d tensor: its output shape depends on the length alone,
    so the index rows (itertools' order, eager's) are a constant and the result is x
    indexed by them (fake tensors fail on eager's boolean-mask implementation). No rows:
    eager's stack of r empty selections of x, which requires grad where x does (a fill
    made here did not: the compiled result of a 1-element x had no grad_fn, and its
    backward raised); r = 0: eager's fresh empty tensor."""
    import itertools

    n = x.shape[0]
    if r == 0:
        return torch.zeros(0, dtype=x.dtype, device=x.device)
    gen = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(gen(range(n), r))
    if not rows:
        return torch.stack([x.narrow(0, 0, 0)] * r, 1)
    return x[torch.tensor(rows, dtype=torch.int64, device=x.device)]


_COMBINATIONS_MAX = 1 << 16   # index rows of a constant combinations index


def _rewrite_combinations(gm: fx.GraphModule, node: fx.Node, env: dict) -> bool:
    import math

    if node.op != "call_function" or node.target is not torch.combinations:
        return False
    try:
        x, r, rep = (lambda input, r=2, with_replacement=False: (input, r, with_replacement))(  # noqa: A006
            *fx.node.map_arg(node.args, lambda a: env[a]), **fx.node.map_arg(node.kwargs, lambda a: env[a]))
    except (TypeError, KeyError):
        return False
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not isinstance(r, int) or r < 0 or \
            not isinstance(rep, bool) or not isinstance(node.args[0], fx.Node):
        return False
    n = x.shape[0]
    if (math.comb(n + r - 1, r) if rep else math.comb(n, r)) > _COMBINATIONS_MAX:
        return False
    with gm.graph.inserting_before(node):
        t = gm.graph.call_function(combinations, (node.args[0], r, rep))
    t.meta = dict(node.meta)
    node.replace_all_uses_with(t)
    gm.graph.erase_node(node)
    gm.recompile()
    return True


def rewrite(gm: fx.GraphModule, node: fx.Node, env: dict) -> bool:
    """Replaces `node` (an op of data-dependent size of `gm`) by its bounded form and
    a trim, when it has one for the values `env` (fake tensors) gives its inputs."""
    spec = _TARGETS.get(node.target) if node.op == "call_function" else None
    if spec is None and node.op == "call_method" and node.target in ("unique", "unique_consecutive"):
        spec = _TARGETS.get(getattr(torch.Tensor, node.target))
    if spec is None:
        return _rewrite_nonzero(gm, node, env) or _rewrite_combinations(gm, node, env) or \
            _rewrite_masked(gm, node, env)
    bind, consecutive = spec
    try:
        vals = fx.node.map_arg((node.args, node.kwargs), lambda a: env[a])
        x, inv, cnt, dim = bind(*vals[0], **vals[1])
        xn, _, _, _ = bind(*node.args, **node.kwargs)
    except (TypeError, KeyError):
        return False
    if isinstance(xn, fx.Node) and _empty_unique_fits(x, dim) and not any(
            isinstance(a, fx.Node) for a in _flat((node.args[1:], node.kwargs))):
        with gm.graph.inserting_before(node):
            t = gm.graph.call_function(empty_unique, (xn, dim, inv, cnt))
        t.meta = dict(node.meta)
        node.replace_all_uses_with(t)
        gm.graph.erase_node(node)
        gm.recompile()
        return True
    if not isinstance(xn, fx.Node) or not _fits(x, dim):
        return False
    if not node.args or node.args[0] is not xn or any(isinstance(a, fx.Node)
                                                       for a in _flat((node.args[1:], node.kwargs))):
        return False   # only the input is a graph value: the op can be called again on it
    op = node.target if node.op == "call_function" else getattr(torch.Tensor, node.target)
    trim = Trim(op, tuple(node.args[1:]), dict(node.kwargs), dim, inv, cnt)
    g = gm.graph
    with g.inserting_before(node):
        b = g.call_function(bounded_unique, (xn, dim, consecutive))
        parts = [g.call_function(operator.getitem, (b, i)) for i in range(5)]
        t = g.call_function(trim, (*parts, xn))
    t.meta = dict(node.meta)
    node.replace_all_uses_with(t)
    g.erase_node(node)
    gm.recompile()
    return True


def _flat(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _flat(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _flat(v)
    else:
        yield x
