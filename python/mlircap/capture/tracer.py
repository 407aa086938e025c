"""The opcode tracer (`_TracerMixin`): the `sys.settrace` / `sys.setprofile` callbacks, the
guards on a module's forward hooks, and `_HANDLERS`, the handler of each opcode that reads
external state (reads.py), calls something (calls.py) or writes (side_effects.py)."""
from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from ._bytecode import _CHECK_DEPTH, _instrs
from .base import Unreplayable
from .frame_hook import _E, _E_real
from .classify import _classify
from .state_writers import _autograd_mode_writer, _global_state_writer, _learn_state_writer, _pushes_user_hooks
from .locations import _frame_loc
from .typeinfo import _mro_lookup
from .side_effects import _SideEffectMixin
from .calls import _CallMixin


_LAZY_INFER = torch.nn.modules.lazy.LazyModuleMixin._infer_parameters.__code__


def _touch_ops(*ns: int) -> Callable[..., None]:
    def h(self: Any, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        if self.lazy:
            for n in ns:
                try:
                    o = _E.peek(frame, n)
                except IndexError:
                    continue
                if id(o) in self.lazy:
                    self.touch(o)
    return h


class _TracerMixin(_CallMixin):
    """Opcode tracing for `_Recorder`: the settrace callbacks dispatch each traced opcode to
    its handler in `_HANDLERS` (reads.py, calls.py, side_effects.py)."""

    # -- opcode tracing -----------------------------------------------------------
    def global_trace(self, frame: types.FrameType, event: str, arg: Any) -> Callable | None:
        if event != "call" or self.suspended or self.ext_depth or self.stopped:
            return None
        if frame.f_code is _LAZY_INFER:
            # a lazy module's first call (nn.LazyLinear, ...) infers and initializes its
            # parameters in a forward pre-hook: that runs once, as it is, not recorded (as
            # Dynamo runs it before tracing); a replay is for calls after it
            self.suspended += 1
            frame.f_trace_lines = False
            return self._lazy_init_trace
        if _classify(frame.f_code) != "user":
            return None
        frame.f_trace_lines = False
        frame.f_trace_opcodes = True
        code = frame.f_code
        self.traced_codes.add(code)
        if code is self.code and self.root_frame is None:
            self.root_frame = frame
        if self.flow_call is not None:
            self._flow_callee(frame)   # followed numbers handed to it (flow_roots.py)
        try:
            self._hook_guard(frame, code)
        except Exception as e:
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        return self.local_trace

    def global_profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        """sys.setprofile callback while recording: C calls from code the tracer does not see
        (untraced library code; not an uncapturable call, which is replayed whole, nor the
        recorder itself) that write process-wide state make the recording unreplayable."""
        if event != "c_call" or self.suspended or self.ext_depth or self.stopped or self._unreplayable:
            return
        mode = _autograd_mode_writer(arg)
        # (not relearned as a call replayed between graphs: the graphs would run under the mode)
        if mode is not None and (arg is not torch._C._autograd._push_saved_tensors_default_hooks or
                                 _pushes_user_hooks(frame)):
            self.unreplayable = (f"untraced library code {frame.f_code.co_name} ({_frame_loc(frame)}) "
                                 f"switched on {mode}, which compiled graphs do not honour")
            return
        what = _global_state_writer(arg)
        if what is not None:
            if not self._unreplayable and _learn_state_writer(frame):
                self.relearn = True   # replayed whole from the next recording on
            self.unreplayable = (f"untraced library code {frame.f_code.co_name} ({_frame_loc(frame)}) "
                                 f"changed {what} (through {getattr(arg, '__qualname__', arg)})")

    def _opaque_dunders(self, frame: types.FrameType, spec: tuple) -> None:
        """An opcode about to call an operand's special method (`key in c`, `c[k]`, `c[k] = v`,
        `for x in c`, `if c:`) where that method is untraced Python code (a WeakKeyDictionary's
        `__contains__` / `__getitem__` / `__setitem__` in weakref.py, other library classes'):
        what it reads is guarded, as for an explicit call of untraced code (calls.py: its
        operands guarded whole), and what it writes is then compared with their snapshots and
        replayed.  Before: nothing the method read was guarded (a variant replayed the value
        `cache[m]` had at the recording) and its writes were not replayed."""
        names, slots = spec
        objs = []
        for n in slots:
            try:
                objs.append(_E.peek(frame, n))
            except IndexError:
                return
        if any(_opaque_special(o, names) for o in objs):
            self.touch_deep(objs)

    def _lazy_init_trace(self, frame: types.FrameType, event: str, arg: Any) -> Callable | None:
        if event == "return":   # (also after an exception leaves the frame)
            self.suspended -= 1
        return self._lazy_init_trace

    def _hook_guard(self, frame: types.FrameType, code: types.CodeType) -> Callable:
        if code.co_argcount and code.co_name == "forward":
            self_ = _E.local_raw(frame, 0)
            s = self.src.get(id(self_))
            if s is not None and isinstance(self_, torch.nn.Module) and id(self_) not in self.hooked:
                # the root module's frame is only dispatched here when its code is the captured one
                root = bool(self.args) and self_ is self.args[0] and code is self.code
                self._guard_module_call(self_, s[1], forward=not root)
        return self.local_trace

    def local_trace(self, frame: types.FrameType, event: str, arg: Any) -> Callable | None:
        if self.stopped:
            return None
        self.suspended += 1
        try:
            if event == "opcode":
                ins = _instrs(frame.f_code).get(frame.f_lasti)
                if ins is not None:
                    self.cur_depth = ins[3]
                    if _CHECK_DEPTH and ins[3] != _E_real.stack_depth(frame):
                        raise AssertionError(f"static stack depth {ins[3]} != {_E_real.stack_depth(frame)} "
                                             f"at {ins[0]} {frame.f_code.co_name}:{frame.f_lasti}")
                p = self.pending.pop(frame, None)
                if p is not None:
                    p(frame)
                if self.resume_at is not None and frame is self.resume_frame:
                    self._resume_capture(frame)
                if ins is not None and self.suspended == 1 and not self.ext_depth:
                    if self.np_env and self.np_opcode(frame, ins):
                        return self.local_trace   # a NumPy operation the graph records
                    d = _IMPLICIT_DUNDERS.get(ins[0])
                    if d is not None and (self.lazy or self.lazy_objs):
                        self._opaque_dunders(frame, d)
                    h = _HANDLERS.get(ins[0])
                    if h is not None:
                        h(self, frame, ins[1], ins[2])
            elif event == "exception" or event == "return":
                if event == "return" and frame.f_code is self.code:
                    self.return_loc = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                p = self.pending.pop(frame, None)
                if p is not None and getattr(p, "is_call", False):
                    self.ext_depth -= 1
                    self.unreplayable = self.unreplayable or "exception raised by an uncapturable call"
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or str(e)
        except AssertionError:
            raise
        except Exception as e:  # never let the recorder break the user's program
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        finally:
            self.suspended -= 1
        return self.local_trace


def _opaque_special(o: object, names: tuple[str, ...]) -> bool:
    """o's type defines one of the special methods `names` as Python code the tracer does
    not trace (modules and tensors: their reads are sourced and guarded elsewhere)."""
    t = type(o)
    if t.__module__ == "builtins" or isinstance(o, (torch.nn.Module, torch.Tensor)):
        return False
    for name in names:
        raw = _mro_lookup(t, name)[1]
        code = getattr(getattr(raw, "__func__", raw), "__code__", None)
        if type(code) is types.CodeType and _classify(code) == "opaque":
            return True
    return False


_ITER = ("__iter__", "__len__", "__getitem__")
_BOOL = ("__bool__", "__len__")
# opcode -> (the special methods it may call, the stack slots of the objects it calls them on)
_IMPLICIT_DUNDERS = {
    "BINARY_SUBSCR": (("__getitem__",), (1, 0)),
    "STORE_SUBSCR": (("__setitem__",), (1, 0)),
    "DELETE_SUBSCR": (("__delitem__",), (1, 0)),
    "CONTAINS_OP": (("__contains__",) + _ITER, (0, 1)),
    "GET_ITER": (_ITER, (0,)),
    "UNPACK_SEQUENCE": (_ITER, (0,)),
    "UNPACK_EX": (_ITER, (0,)),
    "LIST_EXTEND": (_ITER, (0,)),
    "SET_UPDATE": (_ITER, (0,)),
    "DICT_UPDATE": (("keys", "__getitem__"), (0,)),
    "DICT_MERGE": (("keys", "__getitem__"), (0,)),
    "GET_LEN": (("__len__",), (0,)),
    "UNARY_NOT": (_BOOL, (0,)),
}
# the jumps on an operand's truth (`if cache:`, `cache and ...`): 3.12's names, then 3.11's
for _op in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP",
            "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",
            "POP_JUMP_BACKWARD_IF_FALSE"):
    _IMPLICIT_DUNDERS[_op] = (_BOOL, (0,))


_HANDLERS = {
    "BINARY_SUBSCR": _TracerMixin.op_binary_subscr,
    "BINARY_SLICE": _touch_ops(2),
    "GET_ITER": _touch_ops(0),
    "CONTAINS_OP": _TracerMixin.op_contains_op,
    "UNPACK_SEQUENCE": _touch_ops(0),
    "UNPACK_EX": _touch_ops(0),
    "LIST_EXTEND": _touch_ops(0),
    "SET_UPDATE": _touch_ops(0),
    "DICT_UPDATE": _touch_ops(0),
    "DICT_MERGE": _touch_ops(0),
    "COMPARE_OP": _touch_ops(0, 1),
    "IS_OP": _touch_ops(0, 1),
    "FORMAT_VALUE": _touch_ops(0, 1),
    "GET_LEN": _touch_ops(0),
    "MATCH_SEQUENCE": _touch_ops(0),
    "MATCH_MAPPING": _touch_ops(0),
    "MATCH_KEYS": _touch_ops(1),
    "LOAD_GLOBAL": _TracerMixin.op_load_global,
    "LOAD_ATTR": _TracerMixin.op_load_attr,
    "LOAD_METHOD": _TracerMixin.op_load_attr,
    "LOAD_DEREF": _TracerMixin.op_load_deref,
    "IMPORT_NAME": _TracerMixin.op_import_name,
    "IMPORT_FROM": _TracerMixin.op_load_attr,
    "LOAD_CLASSDEREF": _TracerMixin.op_load_deref,
    "STORE_DEREF": _SideEffectMixin.op_store_deref,
    "STORE_GLOBAL": _SideEffectMixin.op_store_global,
    "DELETE_GLOBAL": _SideEffectMixin.op_store_global,
    "STORE_ATTR": _SideEffectMixin.op_store_attr,
    "DELETE_ATTR": _SideEffectMixin.op_store_attr,
    "STORE_SUBSCR": _SideEffectMixin.op_store_subscr,
    "BINARY_OP": _SideEffectMixin.op_binary_op,
    "DELETE_SUBSCR": _SideEffectMixin.op_store_subscr,
    "STORE_SLICE": _SideEffectMixin.op_store_slice,
    "BEFORE_WITH": _TracerMixin.op_before_with,
    "KW_NAMES": _TracerMixin.op_kw_names,
    "CALL": _TracerMixin.op_call,
    "CALL_FUNCTION_EX": _TracerMixin.op_call_ex,
    "LOAD_FAST": _TracerMixin.op_load_fast,
    "STORE_FAST": _TracerMixin.op_store_fast,
    "DELETE_FAST": _TracerMixin.op_store_fast,
    "LOAD_FAST_AND_CLEAR": _TracerMixin.op_store_fast,
    "LOAD_FAST_CHECK": _TracerMixin.op_load_fast,
}
