"""`t.data = v` (`_DataWriteMixin`): a write that swaps a tensor's storage and metadata for
v's, as momentum encoders and EMA teachers write their weights (`p_k.data = p_k.data * m +
p_q.data * (1 - m)`), without a graph break.  The write is a step right after the open graph
(replay order: the graph, then the writes in their order, then what closed the graph), and
what the graph reads of t after it:
* t requiring no grad and v requiring none (the momentum encoder's weights, a buffer): the
  graph reads v's value where the program reads t (`_data_node`), as eager's t then shares
  v's storage; a later graph reads t itself, written by then;
* else (t a parameter that requires grad, whose later use must reach t in autograd): where v
  has t's shape, dtype and device, an op of `_SWAP_READERS` (ops making new tensors, no
  in-place op, no view) reads `data_as(t, v)` there (`_swap_node`): v's values, its
  gradient t's, as eager's t then computes with v's storage and accumulates into t (a weight
  clipped or shrunk through `.data` each call, then used: one graph); any other use of t
  ends the open graph first (`_data_read`), so the write runs before it, as in eager (an
  in-place op or a view of t must reach v's storage).
A replay that misses after such a write restores t's storage as the replay found it
(`undo_data_writes`) before the tensors it wrote in place are restored."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_flatten

from .base import Unreplayable
from .locations import _user_location
from .steps import CallStep

if TYPE_CHECKING:  # pragma: no cover
    import torch.fx as fx

_DATA_SET = torch.Tensor.data.__set__


def undo_data_writes(saved: list) -> None:
    """Each tensor's storage as saved when the replay started ((tensor, tensor.data) pairs)."""
    with torch.no_grad():
        for t, d in saved:
            if t.data is not d:
                t.data = d


class _DataAs(torch.autograd.Function):
    """v's values, the gradient of the result t's (`t.data = v`, then a use of t)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return v.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        return g, None


def data_as(t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """t after `t.data = v` as an op reading it computes (graph node target)."""
    return _DataAs.apply(t, v)


# ops that read their tensor arguments' values into new tensors (no in-place write, no view)
# and may take t written by `t.data = v` as `data_as(t, v)`
_SWAP_READERS = frozenset({
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "matmul", "mm", "bmm", "addmm", "mv", "layer_norm", "group_norm", "rms_norm",
    "mul", "add", "sub", "div", "__mul__", "__rmul__", "__add__", "__radd__", "__sub__", "__rsub__",
    "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__neg__", "__pow__", "pow", "sum", "mean",
    "norm", "square", "abs", "exp", "tanh", "sigmoid", "softmax", "log_softmax", "prelu", "dot", "einsum",
    "outer", "cdist"})
# (not F.relu / F.embedding / F.batch_norm: `inplace=True`, `max_norm=` and the running
# statistics of training write their tensors in place, which must reach v's storage)


class _DataWriteMixin:
    """For `_GraphMixin`: `t.data = v` as a step after the open graph."""

    def _data_write(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """`t.data = v` (func: the descriptor's `__set__`): recorded as a step after the open
        graph; False: not such a write (it breaks the graph as before)."""
        if kwargs or len(args) != 2 or not all(isinstance(a, torch.Tensor) for a in args):
            return False
        t, v = args
        e = self.env.get(id(t))
        s = self.src.get(id(t))
        graph_value = e is not None and e[0] is t
        if not graph_value and (s is None or s[2] == "opaque") or not self._known_tensor(v):
            return False
        start = None
        if not graph_value:
            start = self.src_first.get(id(t), s[0])
            if _MADE_BY_REPLAY.search(start):
                return False   # (a rollback could not name it as the replay starts)
        try:
            fe = self.const(_DATA_SET, "Tensor.data.__set__")
            ae = [self.expr_of(t), self.expr_of(v)]
        except Unreplayable:
            return False
        if start is not None:
            self.__dict__.setdefault("data_written", {})[start] = None
        seg = self.cur
        if seg is None or not seg.nops:
            k = self.ncalls
            self.ncalls += 1
            self.steps.append(CallStep(k, fe, ae, {}, _REASON, external=False))   # (between graphs: now)
            return True
        pend = self.__dict__.setdefault("pending_data_writes", [])
        pend.append((fe, ae))
        if t.requires_grad or v.requires_grad:
            self.__dict__.setdefault("data_readers", {})[id(t)] = t   # a use of t ends the graph
            swaps = self.__dict__.setdefault("data_swaps", {})
            swaps.pop(id(t), None)
            if t.requires_grad and not v.requires_grad and type(t) in (torch.Tensor, torch.nn.Parameter) and \
                    type(v) is torch.Tensor and t.shape == v.shape and t.dtype == v.dtype and \
                    t.device == v.device and not v.is_sparse and t.layout == torch.strided:
                swaps[id(t)] = (t, v, seg.idx)   # (... but an op of _SWAP_READERS)
        else:
            self.__dict__.setdefault("data_nodes", {})[id(t)] = (t, seg.idx, self._arg_node(seg, v))
        return True

    def _data_node(self, seg: Any, t: torch.Tensor) -> fx.Node | None:
        """The node the open graph reads for t, whose `.data` it wrote (see the module
        docstring); None: t as any other tensor."""
        dn = self.__dict__.get("data_nodes")
        e = dn.get(id(t)) if dn else None
        if e is not None and e[0] is t and e[1] == seg.idx:
            return e[2]
        sw = self.__dict__.get("data_swaps")
        e = sw.get(id(t)) if sw else None
        if e is None or e[0] is not t or e[2] != seg.idx or self.__dict__.get("swapping"):
            return None
        return self._swap_node(t, e[1])

    def _swap_node(self, t: torch.Tensor, v: torch.Tensor) -> fx.Node:
        """A node `data_as(t, v)` of the open graph, made at each use of t (it reads v as it
        is there: an in-place write to v between two uses changes what the second reads)."""
        self.ext_depth += 1
        try:
            res = data_as(t, v)
        finally:
            self.ext_depth -= 1
        self.keep.append(res)
        self.keep.append(v)
        self.__dict__.setdefault("swap_storages", set()).add(v.untyped_storage().data_ptr())
        self.swapping = True
        try:
            self._record(data_as, "data_as", (t, v), {}, res)
        finally:
            self.swapping = False
        return self.env[id(res)][2]

    def _data_read(self, args: tuple, kwargs: dict, name: str = "") -> None:
        """A torch function taking a tensor whose `.data` write waits for the open graph
        (t requiring grad): the graph ends here, and the write runs before the function;
        but an op of _SWAP_READERS reading only such tensors with a swap (module doc).
        An in-place write to the storage of a v that a `data_as` node read (v itself, a view,
        t once written): eager's autograd then reads the new values where it saved t (a
        gradient computed later), the node's clone the old ones: capture gives up (eager)."""
        ss = self.__dict__.get("swap_storages")
        if ss and (name.endswith("_") and not name.endswith("__") or name in _IN_PLACE_DUNDERS or "out" in kwargs):
            w = kwargs.get("out", args[0] if args else None)
            for x in tree_flatten(w)[0]:
                if isinstance(x, torch.Tensor) and x.untyped_storage().data_ptr() in ss:
                    self.unreplayable = self.unreplayable or \
                        f"{name} writes in place a tensor whose values a parameter's earlier read took after its .data write"
        readers = self.__dict__.get("data_readers")
        if not readers:
            return
        flat, _ = tree_flatten((args, kwargs))
        read = [a for a in flat if isinstance(a, torch.Tensor) and readers.get(id(a)) is a]
        if read and name in _SWAP_READERS and "out" not in kwargs and "inplace" not in kwargs and \
                self.cur is not None:
            sw = self.__dict__.get("data_swaps") or {}
            if all(id(a) in sw and sw[id(a)][0] is a and sw[id(a)][2] == self.cur.idx for a in read):
                return
        if read:
            split = self.cur is not None and self.cur.nops > 0
            self._close_seg()
            if split:   # (a split, counted as graph breaks are)
                self._add_break("a use of a tensor whose .data the open graph's step writes", _user_location())

    def _flush_data_writes(self) -> None:
        """The `.data` writes waiting for the graph just closed, as steps after it."""
        pend = self.__dict__.get("pending_data_writes")
        if pend:
            for fe, ae in pend:
                k = self.ncalls
                self.ncalls += 1
                self.steps.append(CallStep(k, fe, ae, {}, _REASON, external=False))
            pend.clear()
        for name in ("data_nodes", "data_readers", "data_swaps"):
            d = self.__dict__.get(name)
            if d:
                d.clear()


_IN_PLACE_DUNDERS = frozenset({"__setitem__", "__set__"} | {f"__i{n}__" for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift", "matmul")})
_REASON = "Tensor.data = ... (a write after the graph)"
# a value the replay makes (a break's result, a graph output, a binding made before an
# uncapturable call), which code run as the replay starts cannot name
_MADE_BY_REPLAY = re.compile(r"\bb\d+\b|\bn\d+_\w+|\b_r\d+\b")
