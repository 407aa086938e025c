"""`t.data = v` (`_DataWriteMixin`): a write that swaps a tensor's storage and metadata for
v's, as momentum encoders and EMA teachers write their weights (`p_k.data = p_k.data * m +
p_q.data * (1 - m)`), without a graph break.  The write is a step right after the open graph
(replay order: the graph, then the writes in their order, then what closed the graph), and
what the graph reads of t after it:
* t requiring no grad and v requiring none (the momentum encoder's weights, a buffer): the
  graph reads v's value where the program reads t (`_data_node`), as eager's t then shares
  v's storage; a later graph reads t itself, written by then;
* else (t a parameter that requires grad, whose later use must reach t in autograd): a use of
  t ends the open graph first (`_data_read`), so the write runs before it, as in eager.
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
        else:
            self.__dict__.setdefault("data_nodes", {})[id(t)] = (t, seg.idx, self._arg_node(seg, v))
        return True

    def _data_node(self, seg: Any, t: torch.Tensor) -> fx.Node | None:
        """The node the open graph reads for t, whose `.data` it wrote (see the module
        docstring); None: t as any other tensor."""
        dn = self.__dict__.get("data_nodes")
        e = dn.get(id(t)) if dn else None
        return e[2] if e is not None and e[0] is t and e[1] == seg.idx else None

    def _data_read(self, args: tuple, kwargs: dict) -> None:
        """A torch function taking a tensor whose `.data` write waits for the open graph
        (t requiring grad): the graph ends here, and the write runs before the function."""
        readers = self.__dict__.get("data_readers")
        if not readers:
            return
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(a, torch.Tensor) and readers.get(id(a)) is a for a in flat):
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
        for name in ("data_nodes", "data_readers"):
            d = self.__dict__.get(name)
            if d:
                d.clear()


_REASON = "Tensor.data = ... (a write after the graph)"
# a value the replay makes (a break's result, a graph output, a binding made before an
# uncapturable call), which code run as the replay starts cannot name
_MADE_BY_REPLAY = re.compile(r"\bb\d+\b|\bn\d+_\w+|\b_r\d+\b")
