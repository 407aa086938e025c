"""Which instruction on a tracked NumPy array `np_interop` translates (`_NumpyPlanMixin`): a
*plan* (key, torch._numpy callable, NumPy callable, operands with arrays replaced by their
shadow tensors, kwargs, result kind) for operators, static indexing, `.T`, NumPy functions and
ndarray methods torch._numpy has, and `torch.from_numpy` / `as_tensor` / `tensor`; and how many
stack values any other instruction consumes (those arrays are materialized first)."""
from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any

import torch

from .base import PY312
from .frame_hook import _NULL
from .classify import _classify
from .np_ops import (_BINOPS, _CMPOPS, _META_ATTRS, _UNARY, _VALUE_ATTRS, _method, _nb_ops, _np,
                     _static_index, _tnp)


class _NumpyPlanMixin:
    """For `_Recorder` (through `_NumpyMixin`): `np_env` maps id(array or NumPy scalar) ->
    (the array, its shadow tensor)."""

    def _np_tracked(self, o: Any) -> tuple | None:
        e = self.np_env.get(id(o))
        return e if e is not None and e[0] is o else None

    @staticmethod
    def _np_traced_callee(argc: int | None, stack: list) -> bool:
        """The CALL calls a Python function the tracer follows (user code)."""
        if argc is None or len(stack) < argc + 2:
            return False
        meth = stack[argc + 1]
        f = meth if meth is not _NULL else stack[argc]
        f = getattr(f, "__func__", f) if type(f) is types.MethodType else f
        return type(f) is types.FunctionType and _classify(f.__code__) == "user"

    @staticmethod
    def _np_consumed(op: str, arg: int | None, depth: int) -> int:
        """How many values from the top of the stack `op` consumes (all: unknown)."""
        if op in ("BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "BINARY_SUBSCR", "STORE_ATTR",
                  "DELETE_SUBSCR", "MAP_ADD", "IMPORT_NAME", "CHECK_EXC_MATCH"):
            return 2
        if op in ("STORE_SUBSCR", "BINARY_SLICE"):
            return 3
        if op == "STORE_SLICE":
            return 4
        if op.startswith("UNARY_") or op.startswith("POP_JUMP") or op in (
                "LOAD_ATTR", "LOAD_METHOD", "GET_ITER", "UNPACK_SEQUENCE", "UNPACK_EX", "LIST_APPEND", "SET_ADD",
                "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE", "RETURN_VALUE", "YIELD_VALUE",
                "STORE_GLOBAL", "STORE_DEREF", "STORE_NAME", "FORMAT_VALUE", "TO_BOOL", "BEFORE_WITH",
                "GET_LEN", "FORMAT_SIMPLE", "CONVERT_VALUE", "FOR_ITER", "LIST_TO_TUPLE", "CALL_INTRINSIC_1"):
            return 1 if op != "FORMAT_VALUE" or not (arg or 0) & 4 else 2
        if op in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING", "BUILD_SLICE", "RAISE_VARARGS") \
                and arg is not None:
            return arg
        if op == "BUILD_MAP" and arg is not None:
            return 2 * arg
        if op == "BUILD_CONST_KEY_MAP" and arg is not None:
            return arg + 1
        if op == "CALL" and arg is not None:
            return arg + 2
        return depth

    def _np_operand(self, o: Any) -> tuple[bool, Any]:
        """(ok, the operand for the translation): a tracked array's shadow, a Python number,
        None, a dtype as its name."""
        e = self._np_tracked(o)
        if e is not None:
            return True, e[1]
        np = _np()
        if o is None or type(o) in (int, float, bool, str):
            return True, o
        if type(o) is tuple and all(type(x) is int for x in o):
            return True, o
        if isinstance(o, np.dtype):
            return True, o.name
        if isinstance(o, type) and issubclass(o, np.generic):
            try:
                return True, np.dtype(o).name
            except Exception:
                return False, None
        return False, None

    def _np_plan(self, frame: types.FrameType, op: str, ins: tuple, stack: list) -> tuple | None:
        """For a translatable instruction: (key, tnp callable, numpy callable, operands,
        kwargs, result kind, n consumed); None otherwise."""
        np = _np()
        if np is None:
            return None
        if op == "BINARY_OP":
            sym = next((s for n, s in _nb_ops() if n == ins[1]), None)
            fn = _BINOPS.get(sym)
            if fn is None:
                return None
            operands = [stack[1], stack[0]]
            return self._np_plan_ops(("op", fn.__name__), fn, fn, operands, {}, "array")
        if op == "COMPARE_OP":
            fn = _CMPOPS.get(ins[2])
            if fn is None:
                return None
            return self._np_plan_ops(("op", fn.__name__), fn, fn, [stack[1], stack[0]], {}, "array")
        if op in _UNARY:
            fn = _UNARY[op]
            return self._np_plan_ops(("op", fn.__name__), fn, fn, [stack[0]], {}, "array")
        if op == "BINARY_SUBSCR":
            a, idx = stack[1], stack[0]
            if self._np_tracked(a) is None or not _static_index(idx):
                return None
            fn = operator.getitem
            return (("op", "getitem"), fn, fn, [self._np_tracked(a)[1], idx], {}, "array")
        is_meth = op == "LOAD_METHOD" or (PY312 and op == "LOAD_ATTR" and (ins[1] or 0) & 1)
        if op == "LOAD_ATTR" and ins[2] in _VALUE_ATTRS and not is_meth:
            e = self._np_tracked(stack[0])
            if e is None:
                return None
            fn = operator.attrgetter(ins[2])
            return (("attr", ins[2]), fn, fn, [e[1]], {}, "array")
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            e = self._np_tracked(stack[0])
            if e is None:
                return None
            if ins[2] in _META_ATTRS:
                return ("meta",)
            if is_meth and hasattr(_tnp().ndarray, ins[2]) and \
                    hasattr(np.ndarray, ins[2]):
                return ("meta",)   # the method is called next: CALL translates it
            return None
        if op == "CALL":
            return self._np_plan_call(frame, ins[1], stack)
        return None

    def _np_plan_ops(self, key: tuple, tfn: Callable, nfn: Callable, operands: list, kwargs: dict,
                     kind: str) -> tuple | None:
        conv = []
        tracked = False
        for o in operands:
            ok, v = self._np_operand(o)
            if not ok:
                return None
            tracked = tracked or isinstance(v, torch.Tensor)
            conv.append(v)
        ckw = {}
        for k, o in kwargs.items():
            ok, v = self._np_operand(o)
            if not ok:
                return None
            ckw[k] = v
        if not tracked:
            return None
        return (key, tfn, nfn, conv, ckw, kind)

    def _np_plan_call(self, frame: types.FrameType, argc: int, stack: list) -> tuple | None:
        np = _np()
        kw = self.kwnames.get(frame, ())
        meth = stack[argc + 1]
        if meth is not _NULL:
            f, args = meth, [stack[argc - i] for i in range(argc + 1)]
        else:
            f, args = stack[argc], [stack[argc - 1 - i] for i in range(argc)]
        nkw = len(kw)
        kwargs = dict(zip(kw, args[len(args) - nkw:])) if nkw else {}
        if nkw:
            args = args[:len(args) - nkw]
        if type(f) is types.BuiltinMethodType and self._np_tracked(f.__self__) is not None:
            args = [f.__self__] + args
            f = getattr(type(f.__self__), f.__name__, None)
        tnp = _tnp()
        if f in (torch.from_numpy, torch.as_tensor, torch.tensor):
            if not args or self._np_tracked(args[0]) is None or len(args) > 1 or \
                    set(kwargs) - {"dtype"} or (f is torch.from_numpy and kwargs):
                return None
            dt = kwargs.get("dtype")
            if dt is not None and not isinstance(dt, torch.dtype):
                return None
            return (("to_tensor",), None, f, [self._np_tracked(args[0])[1]], {"dtype": dt},
                    "copy" if f is torch.tensor else "alias")
        name = getattr(f, "__name__", None)
        if name is None or name.startswith("_"):
            return None
        if getattr(f, "__objclass__", None) is np.ndarray and args and self._np_tracked(args[0]) is not None:
            if not hasattr(tnp.ndarray, name):
                return None
            return self._np_plan_ops(("method", name), _method(name), f, args, kwargs, "array")
        if (isinstance(f, np.ufunc) or getattr(f, "__module__", "") in ("numpy", "numpy._core.multiarray") or
                str(getattr(f, "__module__", "")).startswith("numpy._core")) and getattr(np, name, None) is f:
            tf = getattr(tnp, name, None)
            if tf is None:
                return None
            return self._np_plan_ops(("np", name), tf, f, args, kwargs, "array")
        return None
