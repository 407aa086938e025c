"""Order statistics compiled with an error flag: median and nanmedian (of all elements,
and along a dim with indices), kthvalue and mode (CPU). torch-mlir lowers none of them
for the CPU launch plans: they ran through torch.

Each slice's elements are ranked by pairwise comparisons (as movement.sort: O(length^2)
per slice, only up to MAX_WORK comparisons), under the order eager's kernel
(ATen/native/Sorting.cpp, TensorCompareKernel.cpp) uses:

* median / nanmedian along a dim: std::nth_element over indices with the comparator
  `a < b || (a == b && i < j)` (nanmedian: NaN after every number): a strict total
  order, so the element at rank (n - 1) / 2 (nanmedian: (n - #NaN - 1) / 2) and its index
  are eager's. median returns a slice's first NaN and its index where it has one. In a
  nanmedian slice of only NaN every comparison is false, so nth_element's swaps, and
  the index it returns, depend on the length alone: eager's own index for an all-NaN
  slice of that length, computed when the graph is traced.
* median / nanmedian of all elements: the value at that rank (NaN where median meets a
  NaN, nanmedian of only NaN, or no element).
* kthvalue: quickselect with NaN after every number; the value at rank k - 1 is eager's,
  and its index too where no other element of the slice equals it. Otherwise the index
  depends on quickselect's swaps: the flag is set.
* mode: std::sort of (value, index) pairs by value, then the first value of the longest
  run, and the index of the run's last pair. std::sort is an insertion sort (stable) for
  slices of up to 16 elements: the index is the largest among the mode's elements. Longer
  slices with a repeated value, and slices with NaN, set the flag.
* topk: eager's kernel (TopKImpl.h) orders (value, index) pairs by value alone (largest:
  NaN first, then descending; smallest: ascending, NaN last) with std::partial_sort, or
  std::nth_element then std::sort of the first k - 1 (sorted=True). Where no element of
  the first k is equivalent to another element of its slice (equal, -0.0 and 0.0
  included, or both NaN), those k and their order are the order's first k, whichever
  algorithm ran: values and indices are eager's. Otherwise the indices (and a zero's
  sign) depend on the algorithm's swaps: the flag is set. sorted=False leaves the first
  k - 1 in nth_element's order unless partial_sort ran (k * 64 <= length) or k is 1:
  other such calls are not rewritten (torch-mlir's topk has no CPU kernel: they run
  through torch).

A set flag reruns the captured graph eagerly (bounds.py: rerun_on_bad_index).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .fxutil import adopt_fake_vals, op_name
from .target import device_type

MAX_WORK = 1 << 22
_STABLE_SORT = 16        # std::sort sorts slices this short by insertion: stable

OPS = frozenset({"aten::median", "aten::nanmedian", "aten::kthvalue", "aten::mode", "aten::topk"})
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8, torch.bool)
# computed in a wider integer type holding every value (the same order), the values converted back
_HELD = {torch.uint8: torch.int16, torch.bool: torch.int8}


def _lowest(dtype):
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _pick(xs, onehot):
    """The element of each row of `xs` (..., n) where `onehot` (..., n) is set (one per row):
    the maximum of it and the lowest value (-0.0 and NaN kept)."""
    return torch.amax(torch.where(onehot, xs, torch.full((), _lowest(xs.dtype), dtype=xs.dtype)), -1)


def _index(onehot, n):
    return torch.where(onehot, torch.arange(n), torch.zeros((), dtype=torch.int64)).sum(-1)


def _ranks(xs, nan_last: bool):
    """Each element's rank in its row under (value, index) order (NaN after numbers, NaNs
    by index, where `nan_last`)."""
    n = xs.shape[-1]
    xi, xj = xs.unsqueeze(-1), xs.unsqueeze(-2)           # [.., i, 1], [.., 1, j]
    pos = torch.arange(n)
    j_first = pos.unsqueeze(0) < pos.unsqueeze(1)         # [i, j]: j < i
    before = (xj < xi) | ((xj == xi) & j_first)
    if nan_last and xs.is_floating_point():
        ni, nj = torch.isnan(xi), torch.isnan(xj)
        before = before | (ni & ~nj) | (ni & nj & j_first)
    return before.sum(-1)


def _median_dim(ignore_nan: bool, dim: int, keepdim: bool):
    def fn(x):
        xs = x.movedim(dim, -1)
        n = xs.shape[-1]
        flag = torch.zeros((), dtype=torch.bool)
        all_nan = None
        if ignore_nan and xs.is_floating_point():
            # NaN after numbers, NaNs unordered among themselves (index order here)
            nans = torch.isnan(xs)
            k = (n - nans.sum(-1) - 1) // 2                  # floor: C++'s / for a non-negative value
            k = torch.where(nans.all(-1), 0, k)              # (n - n - 1) / 2 truncates to 0
            all_nan = nans.all(-1)
            rank = _ranks(xs, True)
        else:
            k = torch.full((), (n - 1) // 2, dtype=torch.int64)
            rank = _ranks(xs, False)
        onehot = rank == k.unsqueeze(-1) if k.dim() else rank == k
        val, idx = _pick(xs, onehot), _index(onehot, n)
        if all_nan is not None:
            idx = torch.where(all_nan, _all_nan_index(n), idx)
        if not ignore_nan and xs.is_floating_point():
            nans = torch.isnan(xs)
            first = torch.where(nans, torch.arange(n), n).amin(-1)
            has = nans.any(-1)
            val = torch.where(has, torch.full((), float("nan"), dtype=xs.dtype), val)
            idx = torch.where(has, first, idx)
        if keepdim:
            val, idx = val.unsqueeze(dim), idx.unsqueeze(dim)
        return val, idx, flag

    return fn


def _all_nan_index(n: int) -> int:
    """The index eager's nanmedian returns for a slice of `n` NaN (a function of n alone)."""
    from .ranges import _now

    return _now(lambda: int(torch.nanmedian(torch.full((n,), float("nan")), 0).indices))


def _as_vector(fn):
    """fn for a 0-d input: on its one-element 1-d view along dim 0 (ATen's 0-d dims);
    uint8 and bool inputs held in a wider integer type (_HELD)."""
    def run(x):
        dtype = x.dtype
        if dtype in _HELD:
            x = x.to(_HELD[dtype])
        out = fn(x.reshape(1)) if x.dim() == 0 else fn(x)
        if x.dim() == 0:
            out = tuple(o.reshape(()) for o in out[:-1]) + (out[-1],)
        return (out[0].to(dtype),) + tuple(out[1:])

    return run


def _median_all(ignore_nan: bool):
    def fn(x):
        xs = x.reshape(1, -1)
        n = xs.shape[-1]
        nan = torch.full((), float("nan"), dtype=xs.dtype) if xs.is_floating_point() else None
        if n == 0:
            return torch.full((), float("nan"), dtype=xs.dtype), torch.zeros((), dtype=torch.bool)
        if xs.is_floating_point():
            nans = torch.isnan(xs)
            m = n - nans.sum(-1) if ignore_nan else torch.full((1,), n, dtype=torch.int64)
            k = torch.clamp((m - 1) // 2, min=0)
            onehot = _ranks(xs, True) == k.unsqueeze(-1)
            val = _pick(xs, onehot)[0]
            bad = (m == 0)[0] if ignore_nan else nans.any()
            val = torch.where(bad, nan, val)
        else:
            onehot = _ranks(xs, False) == (n - 1) // 2
            val = _pick(xs, onehot)[0]
        return val, torch.zeros((), dtype=torch.bool)

    return fn


def _kthvalue(k: int, dim: int, keepdim: bool):
    def fn(x):
        xs = x.movedim(dim, -1)
        n = xs.shape[-1]
        onehot = _ranks(xs, True) == k - 1
        val, idx = _pick(xs, onehot), _index(onehot, n)
        same = xs == val.unsqueeze(-1)
        if xs.is_floating_point():
            same = same | (torch.isnan(xs) & torch.isnan(val).unsqueeze(-1))
        flag = (same.sum(-1) > 1).any()
        if keepdim:
            val, idx = val.unsqueeze(dim), idx.unsqueeze(dim)
        return val, idx, flag

    return fn


def _mode(dim: int, keepdim: bool):
    def fn(x):
        xs = x.movedim(dim, -1)
        n = xs.shape[-1]
        eq = xs.unsqueeze(-1) == xs.unsqueeze(-2)             # [.., i, j]
        freq = eq.sum(-1)                                     # [.., i]
        top = freq == freq.amax(-1, keepdim=True)
        big = torch.full((), torch.finfo(xs.dtype).max if xs.is_floating_point() else torch.iinfo(xs.dtype).max,
                         dtype=xs.dtype)
        mode = torch.amin(torch.where(top, xs, big), -1)      # the smallest most frequent value
        members = xs == mode.unsqueeze(-1)
        last = torch.where(members, torch.arange(n), -1).amax(-1)   # the run's last pair: the largest index
        onehot = torch.arange(n) == last.unsqueeze(-1)
        val = _pick(xs, onehot)                                # that element (its zero's sign)
        flag = torch.zeros((), dtype=torch.bool)
        if xs.is_floating_point():
            flag = torch.isnan(xs).any()
        if n > _STABLE_SORT:
            flag = flag | (freq.amax(-1) > 1).any()
        if keepdim:
            val, last = val.unsqueeze(dim), last.unsqueeze(dim)
        return val, last, flag

    return fn


def _topk(k: int, dim: int, largest: bool):
    def fn(x):
        xs = x.movedim(dim, -1)
        n = xs.shape[-1]
        rank = _ranks(xs, True)                               # ascending, NaN last
        if largest:
            rank = (n - 1) - rank                             # descending, NaN first
        onehot = rank.unsqueeze(-2) == torch.arange(k).unsqueeze(-1)   # [.., r, i]
        val, idx = _pick(xs.unsqueeze(-2), onehot), _index(onehot, n)
        same = xs.unsqueeze(-1) == xs.unsqueeze(-2)           # [.., i, j]
        if xs.is_floating_point():
            nan = torch.isnan(xs)
            same = same | (nan.unsqueeze(-1) & nan.unsqueeze(-2))
        flag = ((rank < k) & (same.sum(-1) > 1)).any()
        return val.movedim(-1, dim), idx.movedim(-1, dim), flag

    return fn


def _args(node: fx.Node):
    """(fn, multi) for `node`, or None."""
    name = op_name(node.target)
    x = node.args[0] if node.args else None
    v = x.meta.get("val") if isinstance(x, fx.Node) else None
    if not isinstance(v, torch.Tensor) or device_type(v) != "cpu" or v.dtype not in _DTYPES:
        return None
    schema = node.target._schema
    bound = {a.name: (node.args[i] if i < len(node.args) else node.kwargs.get(a.name, a.default_value))
             for i, a in enumerate(schema.arguments)}
    rows = v.numel()
    if name in ("aten::median", "aten::nanmedian") and "dim" not in bound:
        if v.numel() ** 2 > MAX_WORK:
            return None
        return _as_vector(_median_all(name == "aten::nanmedian")), False
    dim = bound.get("dim", -1)
    keepdim = bool(bound.get("keepdim", False))
    rank = max(v.dim(), 1)
    if not isinstance(dim, int) or not -rank <= dim < rank:
        return None
    dim %= rank
    if v.dim() == 0:
        keepdim = False   # the 1-d view's result reshaped to 0-d (_as_vector)
    n = v.shape[dim] if v.dim() else 1
    if n == 0 or rows * n > MAX_WORK:
        return None
    if name in ("aten::median", "aten::nanmedian"):
        return _as_vector(_median_dim(name == "aten::nanmedian", dim, keepdim)), True
    if name == "aten::topk":
        k, largest, ordered = bound.get("k"), bound.get("largest", True), bound.get("sorted", True)
        if not isinstance(k, int) or not 1 <= k <= n or not (ordered or k == 1 or k * 64 <= n):
            return None
        return _as_vector(_topk(k, dim, bool(largest))), True
    if name == "aten::kthvalue":
        k = bound.get("k")
        if not isinstance(k, int) or not 1 <= k <= n:
            return None
        return _as_vector(_kthvalue(k, dim, keepdim)), True
    return _as_vector(_mode(dim, keepdim)), True


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """Replaces `node` (an op in OPS) by the ranked form traced into `graph`: its error
    flag, or None (left as it is)."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx

    from .frontend import decomposition_table

    if not isinstance(getattr(node.target, "_schema", None), torch._C.FunctionSchema):
        return None
    spec = _args(node)
    if spec is None:
        return None
    fn, multi = spec
    want = node.meta.get("val")
    wants = list(want) if multi else [want]
    if multi and not all(u.target is operator.getitem for u in node.users):
        return None
    x = node.args[0]
    v = x.meta["val"]
    fake = detect_fake_mode([v])
    try:
        with unset_fake_temporarily(), disable_proxy_modes_tracing():
            sub = make_fx(fn, decomposition_table=decomposition_table())(torch.zeros(v.shape, dtype=v.dtype))
    except Exception:   # noqa: BLE001 - anything it does not handle stays as it is
        return None
    outs = list(sub.graph.output_node().args[0])
    vals = [n.meta.get("val") for n in outs[:-1]]
    if any(n.op == "get_attr" for n in sub.graph.nodes) or len(vals) != len(wants) or any(
            a.shape != b.shape or a.dtype != b.dtype for a, b in zip(vals, wants)):
        return None
    ph = next(n for n in sub.graph.nodes if n.op == "placeholder")
    before = set(graph.nodes)
    with graph.inserting_before(node):
        res = graph.graph_copy(sub.graph, {ph: x})
    res = list(res)
    # the copied nodes' values as the graph's fake tensors (make_fx gave them a mode of
    # their own: a complex value in the same graph then failed lower_complex's detect_fake_mode)
    adopt_fake_vals(graph, fake, set(graph.nodes) - before)
    for r in res[:-1]:
        r.meta["mlircap_bounds_checked"] = True
    if multi:
        for u in list(node.users):
            u.replace_all_uses_with(res[u.args[1]])
            graph.erase_node(u)
    else:
        node.replace_all_uses_with(res[0])
    graph.erase_node(node)
    return [res[-1]]
