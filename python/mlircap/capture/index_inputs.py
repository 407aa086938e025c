"""Ints that index a tensor or fill one, taken by the graph as inputs (`_IndexInputMixin`, for
`_GraphMixin`): `betas[t]`, `buf[self.ptr] = x`, `emb.weight[self.step]` and `torch.full((n,), t)`
with t a number flows.py follows (an int that changed between calls, `flow_roots._varies`; a
break's `.item()`) index or fill from a graph input made from t's replay expression instead of
holding t as a constant guarded by value (a recompile per value: a diffusion sampler's step, a
ring buffer's pointer).  The graph's read is an advanced index, a copy where eager's is a view:
`index_copy_hazard` finds the graphs where the two would differ, which are recorded again with
that index guarded by value."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from .base import INDEXING
from .scalar_inputs import _frame_outside_capture, _int_scalar_tensor, _same_result, _scalar_tensor


class _IndexInputMixin:
    """For `_GraphMixin` (the recorder's `flow_call`; graph inputs made by scalar_inputs.py)."""
    flow_call: tuple | None
    _flow_call_done: Callable[[tuple], None]             # (flow_roots.py)
    _number_input: Callable[..., None]                   # (scalar_inputs.py)

    def _index_input(self, name: str, args: tuple, res: Any) -> tuple[tuple, tuple | None]:
        """`betas[t]` / `buf[self.ptr] = x` with t an int flows.py follows (`_flow_index`: an
        argument, attribute or counter seen with two values, `_varies`), called right from the
        user's frame: the graph indexes with a 0-d int64 tensor input made from t's replay
        expression instead of holding t as a constant guarded by value (a recompile per value:
        a sampling loop's timestep, a ring buffer's pointer, a step-indexed embedding row):
        a 1-element int64 index (`betas[[t]][0]`: a 0-d one reads its value, Tensor.__index__,
        which aot_autograd traces as data-dependent), the read's result squeezed (graph.py).
        The program's own call ran with the int (a view, as eager's); the graph's advanced index
        reads the same elements into a copy (a negative t wraps alike; a t out of range raises
        IndexError, eager's error, from the graph's bounds check) and writes the same elements
        (a value of the tensor's own dtype or a Python number: index_put_ casts nothing).  The
        copy differs from eager's view only where the view is written in place, its tensor is
        written in place after it, or it leaves the graph (a view the program keeps): the graph
        is checked for those when it is built (`index_copy_hazard`).  Returns (the args to
        record, and for a read taken so (its rows `betas[[t]]`, the call site), else None)."""
        fc = self.flow_call
        f = _frame_outside_capture()
        base, idx = args[0], args[1]
        if fc[4] is not INDEXING or f is not fc[0] or f.f_lasti != fc[1] or id(idx) not in fc[2] or \
                type(idx) is not int or not isinstance(base, torch.Tensor) or base.layout != torch.strided or \
                base.dim() == 0 or type(base) not in (torch.Tensor, torch.nn.Parameter):
            return args, None
        dev = None if base.device.type == "cpu" else base.device
        if name == "__setitem__":
            v = args[2] if len(args) > 2 else None
            if not (type(v) in (int, float, bool) or isinstance(v, torch.Tensor) and type(v) in
                    (torch.Tensor, torch.nn.Parameter) and v.dtype == base.dtype and v.device == base.device):
                return args, None
        rows = None
        try:
            t = _int_index_tensor(idx, dev)
            if name == "__getitem__":
                with torch._C.DisableTorchFunction():
                    rows = base[t]
                    # (values: under no_grad eager's view of a tensor requiring grad says it
                    # requires grad, a copy does not; only a view leaving the graph could tell)
                    same = _same_result(res.detach(), rows.squeeze(0).detach())
                if not same:
                    return args, None
        except Exception:  # noqa: BLE001 - (an int beyond int64: kept a constant)
            return args, None
        self._number_input(t, _int_index_tensor, fc[2][id(idx)], dev)
        self._flow_call_done(fc)   # taken by the graph: no guard (close_flows)
        return (base, t) + tuple(args[2:]), None if rows is None else (rows, (f.f_code, f.f_lasti))

    def _full_input(self, func: Callable, args: tuple, kwargs: dict, res: Any) -> tuple | None:
        """`torch.full((n,), t, dtype=torch.long)` with t a number flows.py follows (an int
        seen with two values, a float argument), called right from the user's frame: the
        graph fills from a 0-d tensor input made from t's replay expression (`_filled`: the
        same conversion to the result's dtype) instead of holding t as a constant guarded by
        value (a diffusion sampler's timestep batch).  None: recorded as it is; else
        (func, args, kwargs) to record."""
        fc = self.flow_call
        f = _frame_outside_capture()
        if fc[4] is not func or f is not fc[0] or f.f_lasti != fc[1] or len(fc[2]) != 1 or \
                not isinstance(res, torch.Tensor) or res.layout != torch.strided or \
                set(kwargs) - {"dtype", "device"} or len(args) != 2 or not isinstance(args[0], (tuple, list)):
            return None
        v = args[1]
        if id(v) not in fc[2] or type(v) not in (int, float) or any(a is v for a in args[0]):
            return None
        dev = None if res.device.type == "cpu" else res.device
        mk = _int_scalar_tensor if type(v) is int else _scalar_tensor
        try:
            t = mk(v, dev)
            with torch._C.DisableTorchFunction():
                if not _same_result(res, _filled(t, tuple(args[0]), res.dtype)):
                    return None
        except Exception:  # noqa: BLE001 - (an int beyond int64: kept a constant)
            return None
        self._number_input(t, mk, fc[2][id(v)], dev)
        self._flow_call_done(fc)   # taken by the graph: no guard (close_flows)
        return _filled, (t, tuple(args[0]), res.dtype), {}


def _filled(v: torch.Tensor, size: tuple, dtype: torch.dtype) -> torch.Tensor:
    """torch.full(size, <the number 0-d v holds>, dtype=dtype), as a graph computes it."""
    return v.to(dtype).expand(size).clone()


def _int_index_tensor(v: int, device: torch.device | None = None) -> torch.Tensor:
    """An int index graph input (`_index_input`): a 1-element int64 tensor holding it."""
    return _int_scalar_tensor(v, device).reshape(1)


_INPLACE_DUNDERS = frozenset(f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and",
                                                       "or", "xor", "lshift", "rshift", "matmul"))
# ops whose result is a view of their first argument (a graph's recorded names)
_VIEW_NAMES = frozenset(("view", "view_as", "reshape", "reshape_as", "__getitem__", "select", "narrow", "slice",
                         "squeeze", "unsqueeze", "t", "T", "mT", "H", "mH", "transpose", "swapaxes", "swapdims",
                         "movedim", "moveaxis", "permute", "expand", "expand_as", "flatten", "unflatten", "unbind",
                         "split", "chunk", "tensor_split", "split_with_sizes", "hsplit", "vsplit", "dsplit",
                         "diagonal", "detach", "alias", "as_strided", "unfold", "real", "imag", "view_as_real",
                         "view_as_complex", "contiguous", "data", "getitem", "__get__", "getattr", "type_as", "to",
                         "float", "double", "half", "bfloat16", "int", "long", "bool", "cpu", "cuda", "squeeze_",
                         "align_to", "rename", "nan_to_num_", "atleast_1d", "atleast_2d", "atleast_3d", "ravel"))


def _node_name(n: Any) -> str:
    t = n.target
    if isinstance(t, str):
        return t
    name = getattr(t, "__name__", None)
    if name in ("__get__", "__set__"):
        name = getattr(getattr(t, "__self__", None), "__name__", name)
    return name or str(t)


def _flat(v: Any) -> list:
    return [x for y in v for x in _flat(y)] if isinstance(v, (list, tuple)) else [v]


def _inplace_flag(n: Any) -> bool:
    """`F.relu(x, inplace=True)` (also positional: `F.dropout(x, 0.1, True, True)`)."""
    if n.kwargs.get("inplace") is True:
        return True
    t = n.target
    if isinstance(t, str) or not callable(t) or not any(a is True for a in n.args):
        return False
    try:
        return inspect.signature(t).bind_partial(*n.args, **n.kwargs).arguments.get("inplace") is True
    except (TypeError, ValueError):
        return True   # (a True argument of a function whose parameters are unknown: assumed to write)


def _written(n: Any) -> list:
    """The nodes `n` writes in place: its out= tensors, or its first argument (a list of them
    for a foreach op) where it is an in-place op (`add_`, an aten overload `add_.Tensor`,
    `__iadd__`, `__setitem__`, `inplace=True`)."""
    if "out" in n.kwargs:
        return _flat(n.kwargs["out"])
    name = _node_name(n).split(".")[0]
    if name.endswith("_") and not name.endswith("__") or name in _INPLACE_DUNDERS or \
            name in ("__setitem__", "setitem", "__set__") or _inplace_flag(n):
        return _flat(n.args[0]) if n.args else []
    return []


def _aliases(roots: set, down_only: bool) -> set:
    """Nodes sharing memory with `roots` through view ops (to their views; also to what they
    are views of unless down_only), a superset where unsure (any op of a view-ish name)."""
    seen, todo = set(roots), list(roots)
    while todo:
        n = todo.pop()
        near = [u for u in n.users if _node_name(u) in _VIEW_NAMES and u.args and u.args[0] is n]
        if not down_only and _node_name(n) in _VIEW_NAMES and n.args and hasattr(n.args[0], "users"):
            near.append(n.args[0])
        for m in near:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def index_copy_hazard(seg: Any, nodes: list) -> str | None:
    """Where a graph's advanced index by a number that changes between calls (a copy:
    `_index_input`) reads other values than eager's basic index (a view) would: the copy or
    its tensor is written in place after it, or the copy (or a view of it) leaves the graph.
    None: nowhere."""
    mine = [n for n in nodes if n.graph is seg.graph]
    if not mine:
        return None
    order = {n: i for i, n in enumerate(seg.graph.nodes)}
    outs = set(seg.outputs)
    phs = {p: ex for p, ex in zip([m for m in order if m.op == "placeholder"], seg.examples)
           if isinstance(ex, torch.Tensor) and ex.layout == torch.strided}
    for n in mine:
        copy = _aliases({n}, down_only=True)
        if copy & outs:
            return "kept by the program after the graph"
        base = n.args[0]
        roots = {base} if hasattr(base, "users") else set()
        if base in phs:   # (inputs sharing its memory: a view the program made outside, also written)
            st = phs[base].untyped_storage().data_ptr()
            roots |= {p for p, ex in phs.items() if ex.untyped_storage().data_ptr() == st}
        watched = copy | _aliases(roots, down_only=False)
        for m in order:
            if order[m] > order[n] and any(w in watched for w in _written(m)):
                return f"written in place ({_node_name(m)})"
    return None
