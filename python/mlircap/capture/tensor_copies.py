"""`copy.deepcopy(t)` of a tensor reaching torch's Tensor / Parameter `__deepcopy__`
(`_TensorCopyMixin`, for special_calls._SpecialCallMixin): a clone in the graph, or (a parameter,
a tensor that requires grad: a new autograd leaf) a replayed step between graphs."""
from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

import torch

from .base import _Canned
from .frame_hook import _E

_TENSOR_DEEPCOPY = (torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__)


def _deepcopy_of(x: Any) -> Any:
    """copy.deepcopy(x): the replayed step of a deep copy that makes a new autograd leaf."""
    return copy.deepcopy(x)


class _CallWithout:
    """Stands in for a callable on the value stack: calls f(x), whatever it is called with
    (`copier(memo)` in copy.deepcopy becomes `_deepcopy_of(t)`)."""
    __slots__ = ("f", "x")

    def __init__(self, f: Callable, x: Any) -> None:
        self.f, self.x = f, x

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.f(self.x)


class _TensorCopyMixin:
    """For `_Recorder` (through `_SpecialCallMixin`): a tensor's deep copy."""

    def _deepcopy_tensor(self, frame: types.FrameType, x: torch.Tensor, memo: Any, slot: int) -> bool:
        """`copy.deepcopy(t)` reaching torch's Tensor / Parameter `__deepcopy__` (copy.py is
        traced; its `copier(memo)` is this call).  A tensor that needs no autograd leaf of
        its own (no requires_grad, no .grad, no Python attributes, a plain strided Tensor)
        is copied in the graph as `t.clone(memory_format=torch.preserve_format)`: the same
        values, dtype and device (a view's copy is not a view into a copy of the whole storage
        then).  A parameter or a tensor that requires grad gets a new autograd leaf: the
        copy is a replayed step between graphs (`copy.deepcopy(t)` at replay) whose result
        the graph after it takes as an input.  False (traced as before) where a tensor copied
        before in the same deepcopy shares its storage (eager's copies share theirs)."""
        if type(memo) is not dict:
            return False
        ptr = x.untyped_storage().data_ptr()
        for o in memo.get(id(memo), ()):   # what this deepcopy copied before
            o = o.untyped_storage() if isinstance(o, torch.Tensor) else o
            if isinstance(o, torch.UntypedStorage) and o.data_ptr() == ptr:
                return False   # a storage shared with a tensor copied before: the copies share theirs
        if id(x) not in self.src and not (id(x) in self.env and self.env[id(x)][0] is x):
            return False   # of unknown origin: as before (the give-up names it)
        if type(x) is torch.Tensor and not x.requires_grad and x.grad is None and not x.__dict__ and \
                x.layout == torch.strided and x.device.type not in ("meta", "lazy"):
            # the program gets the real copy (its storage goes into the memo, as eager's);
            # the graph makes it as a clone
            res = x.__deepcopy__(memo)
            self._after_torch(torch.Tensor.clone, "clone", (x,), {"memory_format": torch.preserve_format}, res)
            _E.poke(frame, slot, _Canned(res))
            return True
        if not x.is_leaf:
            return False   # deepcopy raises: as eager does
        _E.poke(frame, slot, _CallWithout(_deepcopy_of, x))
        self._external_call(frame, _deepcopy_of, [x], {}, "copy.deepcopy of a tensor that requires grad "
                            "(a new autograd leaf)", slot)
        return True
