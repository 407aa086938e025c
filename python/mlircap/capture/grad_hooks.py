"""Gradient hooks the graph registers itself (`h.register_hook(fn)`, as Dynamo's
`register_hook` higher-order op): on a tensor the graph computed, with a hook the call made
(a lambda or nested function of the traced code, from a code constant: no closure, no
defaults, so every call makes the same function) whose body is tensor arithmetic on the
gradient alone (`lambda g: g.clamp(-c, c)` with literal bounds, `g * 0.5`, `g.neg()`), and a
handle the program drops.  The graph holds a node that registers the hook on its tensor and
returns that tensor; the eager backend runs it as it is, aot_autograd traces the hook into
the backward graph (which is why the body must be pure tensor code of its argument: anything
that reads or writes the program's state would run once, at compile time).  Anything else
stays a step between graphs."""
from __future__ import annotations

import sys
import types
from collections.abc import Callable

import torch

from ._bytecode import _instrs, _order
from .base import Unreplayable
from .classify import _DATA_DEP, _classify
from .typeinfo import _mro_lookup

# instructions of a hook body that only move values and compute with them (no jumps: a
# branch on the gradient would be data-dependent; no globals, cells, imports or stores
# outside its own locals)
_PURE_OPS = frozenset({
    "RESUME", "NOP", "CACHE", "PUSH_NULL", "PRECALL", "CALL", "KW_NAMES", "LOAD_FAST", "LOAD_FAST_CHECK",
    "STORE_FAST", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST", "POP_TOP", "COPY", "SWAP", "BINARY_OP",
    "BINARY_SUBSCR", "COMPARE_OP", "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "BUILD_TUPLE",
    "BUILD_LIST", "BUILD_SLICE", "LOAD_METHOD", "LOAD_ATTR"})
# Tensor methods that touch autograd, storage or devices, or give Python values of the data
_NOT_PURE = frozenset({"register_hook", "register_post_accumulate_grad_hook", "backward", "retain_grad",
                       "detach", "requires_grad_", "data_ptr", "storage", "untyped_storage", "set_",
                       "share_memory_", "record_stream", "pin_memory", "to", "cpu", "cuda", "tolist",
                       "numpy", "item", "apply_", "map_", "map2_", "register_hook_op"})
_CONST_TYPES = (int, float, bool, type(None), str)
_GENERATORS = 0x20 | 0x80 | 0x200   # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def pure_grad_hook(hook: object, made_by: types.CodeType) -> tuple[str, ...] | None:
    """The Tensor attribute names the hook's body looks up (each to guard against
    monkeypatching), where `hook` is a function the code `made_by` made and its body is
    pure tensor code of the gradient; None otherwise."""
    if type(hook) is not types.FunctionType or hook.__closure__ or hook.__defaults__ or hook.__kwdefaults__:
        return None
    code = hook.__code__
    if code not in made_by.co_consts or code.co_argcount != 1 or code.co_kwonlyargcount or \
            code.co_flags & (0x04 | 0x08 | _GENERATORS) or code.co_freevars or code.co_cellvars:
        return None
    names: list[str] = []
    for op, _arg, argval, _depth in _instrs(code).values():
        if op not in _PURE_OPS:
            return None
        if op == "LOAD_CONST" and not (type(argval) in _CONST_TYPES or
                                       type(argval) is tuple and all(type(x) in _CONST_TYPES for x in argval)):
            return None
        if op in ("LOAD_METHOD", "LOAD_ATTR"):
            if not _pure_method(argval):
                return None
            names.append(argval)
    return tuple(dict.fromkeys(names))


def _pure_method(name: object) -> bool:
    if type(name) is not str or name in _NOT_PURE or name in _DATA_DEP or name.endswith("_") and \
            not name.endswith("__"):
        return False
    if name.startswith("_") and name not in _DUNDER_ARITH:
        return False
    raw = _mro_lookup(torch.Tensor, name)[1]
    return isinstance(raw, (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                            types.BuiltinFunctionType))


_DUNDER_ARITH = frozenset(f"__{n}__" for n in (
    "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "neg", "pos", "abs", "pow", "rpow",
    "getitem", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "xor", "invert", "matmul", "rmatmul"))


def hook_target(hook: Callable) -> Callable:
    """The graph node's callable: registers `hook` on its tensor, returns that tensor."""
    def register_grad_hook(t: torch.Tensor) -> torch.Tensor:
        t.register_hook(hook)
        return t
    return register_grad_hook


class _GradHookMixin:
    """For `_Recorder` (through `_GraphMixin`): the graph node of a gradient hook."""

    def _grad_hook_node(self, args: tuple, kwargs: dict) -> bool:
        """`h.register_hook(fn)` held by the graph as a node (grad_hooks.py): h computed by
        the graph, fn a pure gradient hook the calling frame made, the handle dropped
        (POP_TOP next).  False: the call is a step between graphs, as before."""
        t = args[0] if args else None
        hook = args[1] if len(args) == 2 and not kwargs else kwargs.get("hook") if len(args) == 1 else None
        e = self.env.get(id(t))
        fr = _dropping_user_frame()
        if e is None or e[0] is not t or id(t) in self.src or fr is None or self.np_env:
            return False
        names = pure_grad_hook(hook, fr.f_code)
        if names is None:
            return False
        try:
            self._record(hook_target(hook), "register_hook", (t,), {}, t)
        except Unreplayable:
            return False
        for n in names:   # what the hook's lookups resolve to, as traced code's are guarded
            self._class_guard(torch.Tensor, n, _mro_lookup(torch.Tensor, n)[1], f"Tensor.{n}")
        return True


_REGISTER_HOOK = torch.Tensor.register_hook


def _dropping_user_frame() -> types.FrameType | None:
    """The innermost user frame, where the call it is at drops its result (POP_TOP next)."""
    f = sys._getframe(2)
    while f is not None and _classify(f.f_code) != "user":
        f = f.f_back
    if f is None:
        return None
    ins = _instrs(f.f_code)
    offs, pos = _order(f.f_code)
    i = pos.get(f.f_lasti)
    if i is None or ins[f.f_lasti][0] != "CALL" or i + 1 >= len(offs):
        return None
    return f if ins[offs[i + 1]][0] == "POP_TOP" else None
