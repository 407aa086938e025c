"""Tensors' metadata as the recording sees it (`_TensorMetaMixin` of graph.py's
`_GraphMixin`): the tensors an in-place call or out= may resize or restride (from outside
the function, or its own), tensors whose shape follows tensor data, and the autograd
metadata no tensor guard covers (`is_leaf`, `grad_fn is None`, `.grad is None`), guarded
where read.  Split out of graph.py (pure move)."""
from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ._bytecode import _instrs, _none_tested
from .guard_kinds import Equals, Is
from .restrides import _RESTRIDES
from .torch_calls import _AUTOGRAD_META, _Mode, _metadata, _shrinking_resize


class _TensorMetaMixin:
    """Metadata checks and guards of `_GraphMixin` (graph.py)."""

    def _external_metadata(self, name: str, args: tuple, kwargs: dict) -> list:
        """[(tensor, its metadata)] for the tensors from outside the function (graph inputs)
        that a call of an in-place function or one with out= may resize or restride."""
        if "out" not in kwargs and not (name.endswith("_") and not name.endswith("__")):
            return []
        flat, _ = tree_flatten((args, kwargs))
        return [(t, _metadata(t)) for t in flat if isinstance(t, torch.Tensor) and id(t) in self.src]

    def _inner_metadata(self, name: str, args: tuple, kwargs: dict) -> list:
        """[(tensor, its metadata)] for the function's own tensors that a call of an in-place
        function or one with out= may resize or restride (the in-place views of _RESTRIDES,
        which a graph records as views, excepted)."""
        if "out" not in kwargs and not (name.endswith("_") and not name.endswith("__")) or \
                name in _RESTRIDES and "out" not in kwargs or _shrinking_resize(name, args, kwargs):
            return []
        flat, _ = tree_flatten((args, kwargs))
        return [(t, _metadata(t)) for t in flat if isinstance(t, torch.Tensor) and id(t) not in self.src]

    def _autograd_meta_guarded(self, name: str, args: tuple, res: Any) -> bool:
        """A tensor's autograd metadata that the tensor guards (TensorMatch: dtype, shape,
        strides, requires_grad, dispatch keys) do not cover (`is_leaf`, `grad_fn is None`,
        `retains_grad`, `output_nr`, `_is_view()`): of a graph value it follows from the graph
        and its guarded inputs; of a tensor from outside, its value is guarded here (before:
        not at all, so `x.is_leaf` of a leaf argument stayed True for a non-leaf one).  False
        where it cannot be (a tensor of no location): the read breaks the graph."""
        form = _AUTOGRAD_META.get(name)
        if form is None:
            return True
        t = args[0] if len(args) == 1 and isinstance(args[0], torch.Tensor) else None
        if t is None or type(res) not in (bool, int, type(None)):
            return False
        e = self.env.get(id(t))
        if e is not None and e[0] is t:
            return True
        s = self.src.get(id(t))
        if s is None or s[2] == "opaque":
            return False
        self.guard(Is(form.format(s[0]), form.format(s[1]), res, repr(res)) if type(res) is not int else
                   Equals(form.format(s[0]), form.format(s[1]), res, int))
        return True

    def _grad_fn_none_tested(self, t: Any) -> bool:
        """`x.grad_fn is None` / `if x.grad_fn is not None:` where x has a grad_fn: the node
        itself (another each call, the compiled graph's at replay) reaches no code, only
        whether there is one: the frame reading it tests it against None next (the frame
        right above the mode's).  Of a graph value requiring grad that follows from the graph
        and its guarded inputs; of a tensor from outside it is guarded."""
        if not isinstance(t, torch.Tensor):
            return False
        f = sys._getframe(1)
        while f is not None and f.f_code is not _Mode.__torch_function__.__code__:
            f = f.f_back
        f = f.f_back if f is not None else None   # (the reader: the mode is called from its LOAD_ATTR)
        ins = _instrs(f.f_code).get(f.f_lasti) if f is not None else None
        if ins is None or ins[0] != "LOAD_ATTR" or ins[2] != "grad_fn" or not _none_tested(f.f_code, f.f_lasti):
            return False
        e = self.env.get(id(t))
        if e is not None and e[0] is t:
            return t.requires_grad and not t.is_leaf
        s = self.src.get(id(t))
        if s is None or s[2] == "opaque":
            return False
        self.guard(Is(f"({s[0]}.grad_fn is None)", f"{s[1]}.grad_fn is None", False, "False"))
        return True

    def _grad_none_guarded(self, t: Any) -> bool:
        """`t.grad` is None now, for a tensor read through a guarded location whose `.grad`
        this call has not written (no write pending after the open graph nor run before):
        guarded `is None` where it is read (a write of it this call makes is ordered by
        `_grad_write`, whose value the guard would not see)."""
        s = self.src.get(id(t))
        if not isinstance(t, torch.Tensor) or s is None or s[2] == "opaque" or \
                id(t) in self.__dict__.get("pending_grad_writes", {}) or \
                self.expr_of(t) in self.__dict__.get("grad_written", {}):
            return False
        self.guard(Is(f"{s[0]}.grad", f"{s[1]}.grad", None, "None"))
        return True

    def _known_tensor(self, t: torch.Tensor) -> bool:
        """A value of the recorded graphs, or a tensor read through a guarded location."""
        e = self.env.get(id(t))
        return e is not None and e[0] is t or id(t) in self.src

    def _dyn_shape_args(self, args: tuple, kwargs: dict) -> bool:
        """Whether a tensor argument's shape depends on tensor data (see `_dyn_shape_op`); a
        sparse or nested one's does (its element count: no tensor guard's sizes cover it)."""
        flat, _ = tree_flatten((args, kwargs))
        if any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in flat):
            return True
        dyn_ids = self.__dict__.get("dyn_shape")
        if not dyn_ids:
            return False
        return any(isinstance(t, torch.Tensor) and dyn_ids.get(id(t)) is t for t in flat)
