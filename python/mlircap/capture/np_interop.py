"""NumPy arrays computed from tensors (`_NumpyMixin`): `t.numpy()`, NumPy operations on the
result and `torch.from_numpy(...)` back are recorded into the graph, as Dynamo does, through
torch._numpy (NumPy's API implemented with torch operations).

An array `a = t.numpy()` is tracked with a *shadow*: the tensor holding its values (for
`t.numpy()`, `t` itself).  At every traced opcode the arrays on the value stack are looked
at: an operation the recorder translates (arithmetic and comparison operators, unary
operators, static indexing, `.T`, NumPy functions and ndarray methods torch._numpy has, and
`torch.from_numpy` / `torch.as_tensor` / `torch.tensor`) is recorded on the shadows and its
result checked against NumPy's real one (dtype, shape, values); any other use of a tracked
array (a branch on it, `float(a)`, passing it to other code, storing it, returning it)
first *materializes* it: a graph break whose replay step is `shadow.numpy()`, after which
the array is an ordinary break result (guarded by contents).  An operation whose real result
does not match the translation, or is not an array, is itself such a break (the step runs
the NumPy operation on the shadows' arrays).  So capture follows NumPy code exactly where
it can and breaks the graph where it cannot; nothing reads a tracked array unseen."""
from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from ._bytecode import PY312, _instrs, _stack_depths
from .base import Unreplayable
from .steps import CallStep
from .frame_hook import _E, _E_real, _NULL
from .classify import _OWN_DIR, _classify
from .locations import _frame_loc
from .graph import _fx_target

_BINOPS: dict[str, Callable] = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv, "<<": operator.lshift,
    "@": operator.matmul, "*": operator.mul, "%": operator.mod, "|": operator.or_, "**": operator.pow,
    ">>": operator.rshift, "-": operator.sub, "/": operator.truediv, "^": operator.xor,
}
_CMPOPS: dict[str, Callable] = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
                                ">": operator.gt, ">=": operator.ge}
_UNARY: dict[str, Callable] = {"UNARY_NEGATIVE": operator.neg, "UNARY_POSITIVE": operator.pos,
                               "UNARY_INVERT": operator.invert}
# opcodes that only move values between the stack and local variables (a tracked array
# stays where the recorder sees it)
_MOVES = frozenset({
    "NOP", "RESUME", "CACHE", "PRECALL", "KW_NAMES", "PUSH_NULL", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "RETURN_CONST", "LOAD_GLOBAL", "LOAD_DEREF",
    "LOAD_CLOSURE", "LOAD_NAME", "LOAD_CLASSDEREF", "STORE_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST",
    "DELETE_FAST", "POP_TOP", "COPY", "SWAP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
    "JUMP", "JUMP_NO_INTERRUPT", "EXTENDED_ARG", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_ASSERTION_ERROR",
    "END_FOR", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
})
# what may run between an instruction and the captured frame's RETURN_VALUE for the values
# it consumes to count as returned (loads and container builds only)
_RETURN_PATH = frozenset({"LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP",
                          "BUILD_CONST_KEY_MAP", "NOP", "CACHE", "LIST_TO_TUPLE"})
# ndarray attributes that are metadata (static: the shadow's shape and dtype are guarded)
_META_ATTRS = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes"})
# ndarray attributes read as values (translated)
_VALUE_ATTRS = frozenset({"T"})


def _np() -> Any:
    return sys.modules.get("numpy")


def _tnp() -> Any:
    import torch._numpy as tnp
    return tnp


def _to_tnp(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return _tnp().ndarray(x)
    if type(x) in (tuple, list):
        return type(x)(_to_tnp(y) for y in x)
    return x


def _np_apply(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """`fn` on torch._numpy arrays wrapping the tensor arguments; the array result's tensor."""
    r = fn(*_to_tnp(args), **{k: _to_tnp(v) for k, v in kwargs.items()})
    tnp = _tnp()
    if isinstance(r, tnp.ndarray):
        return r.tensor
    raise TypeError(f"torch._numpy result of type {type(r).__name__}")


_WRAPPERS: dict[tuple, Callable] = {}


def _wrapper(key: tuple, fn: Callable) -> Callable:
    """The graph's call target for one NumPy operation (one per operation, made resolvable
    for FX code generation by `_fx_target`)."""
    w = _WRAPPERS.get(key)
    if w is None:
        def w(*a: Any, **k: Any) -> Any:
            return _np_apply(fn, a, k)
        w.__name__ = w.__qualname__ = "np_" + "_".join(str(p) for p in key if isinstance(p, str))
        w = _WRAPPERS[key] = _fx_target(w)
    return w


def _method(name: str) -> Callable:
    def m(arr: Any, *a: Any, **k: Any) -> Any:
        return getattr(arr, name)(*a, **k)
    return m


def _np_call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Replay step of an operation the graph does not hold: NumPy's own, on the arrays of
    the shadow tensors (`fn` is the NumPy callable, the operator, or an attribute getter)."""
    conv = lambda x: x.numpy() if isinstance(x, torch.Tensor) else x  # noqa: E731
    return fn(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})


def _np_from_tensor(t: torch.Tensor, scalar: bool) -> Any:
    """Replay step materializing a tracked array (or NumPy scalar) from its shadow."""
    a = t.detach().numpy()
    return a[()] if scalar else a


def _np_to_tensor(t: torch.Tensor, copy: bool, dtype: torch.dtype | None) -> torch.Tensor:
    """`torch.from_numpy(a)` / `torch.as_tensor(a, dtype)` / `torch.tensor(a, dtype)` of a
    tracked array, on its shadow: an alias (from_numpy, as_tensor of the same dtype) or a copy."""
    r = t.detach()
    if dtype is not None and dtype != r.dtype:
        return r.to(dtype)
    return r.clone() if copy else r


def _matches(res: Any, sr: Any) -> bool:
    """The translation's tensor holds NumPy's real result: same dtype, shape and values
    (floating point within torch.testing's default tolerances: a few ulps)."""
    np = _np()
    if not isinstance(sr, torch.Tensor) or np is None:
        return False
    if isinstance(res, np.ndarray):
        arr = res
    elif isinstance(res, np.generic):
        arr = np.asarray(res)
    else:
        return False
    try:
        rt = torch.from_numpy(np.array(arr, order="C", copy=True))
    except Exception:
        return False
    return _close(rt, sr)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    try:
        torch.testing.assert_close(b.detach(), a.detach(), equal_nan=True, check_stride=False)
    except Exception:
        return False
    return True


def _static_index(i: Any) -> bool:
    if type(i) is tuple:
        return all(_static_index(x) for x in i)
    return i is None or i is Ellipsis or type(i) in (int, bool) or \
        (type(i) is slice and all(v is None or type(v) is int for v in (i.start, i.stop, i.step)))


class _NumpyMixin:
    """NumPy interop for `_Recorder` (see the module docstring); `np_env` maps id(array or
    NumPy scalar) -> (the array, its shadow tensor)."""

    def np_track(self, arr: Any, shadow: torch.Tensor) -> None:
        self.np_env[id(arr)] = (arr, shadow)
        self.keep.append(arr)
        self.keep.append(shadow)

    def _np_tracked(self, o: Any) -> tuple | None:
        e = self.np_env.get(id(o))
        return e if e is not None and e[0] is o else None

    def np_numpy_call(self, t: torch.Tensor, res: Any) -> bool:
        """`t.numpy()` on a tensor the graph knows: the array is tracked (no break)."""
        np = _np()
        if np is None or type(res) is not np.ndarray or t.requires_grad:
            return False
        e = self.env.get(id(t))
        if not (e is not None and e[0] is t) and id(t) not in self.src:
            return False
        # only a call the traced code makes itself: through untraced code (Tensor.__array__
        # run by NumPy's C code for np.float32(t), ...) the array is used where it is not seen
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_OWN_DIR):
            f = f.f_back
        if f is None or f.f_trace != self.local_trace:
            return False
        self.np_track(res, t)
        return True

    def np_tensor_of_source(self, frame: types.FrameType, f: Any, args: list, kwargs: dict,
                            slot: int | None) -> bool:
        """`torch.from_numpy(a)` / `torch.as_tensor(a)` / `torch.tensor(a)` (optional dtype) of
        an array read from a guarded location (an argument, a global, an attribute, a break
        result: its contents are guarded): the tensor is an input of the graph, made from the
        same array at replay (from_numpy and as_tensor share its memory, as in eager)."""
        np = _np()
        if np is None or slot is None or f not in (torch.from_numpy, torch.as_tensor, torch.tensor) or \
                len(args) != 1 or type(args[0]) is not np.ndarray or set(kwargs) - {"dtype"} or \
                (f is torch.from_numpy and kwargs) or self._np_tracked(args[0]) is not None:
            return False
        s = self.src.get(id(args[0]))
        dt = kwargs.get("dtype")
        if s is None or s[2] == "opaque" or (dt is not None and not isinstance(dt, torch.dtype)):
            return False
        expr = f"{self.const(f)}({s[0]}" + (f", dtype={self.const(dt)}" if dt is not None else "") + ")"
        pretty = f"torch.{f.__name__}({s[1]})"
        self.ext_depth += 1   # not recorded into the graph: a graph input

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            res = _E.peek(fr, 0)
            if isinstance(res, torch.Tensor) and not res.requires_grad:
                self._source(res, expr, pretty, argrooted=True)
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish
        return True

    # -- the opcode hook ---------------------------------------------------------------
    def np_opcode(self, frame: types.FrameType, ins: tuple) -> bool:
        """Called before each traced opcode while arrays are tracked.  Returns True when the
        instruction was translated (the regular handler is skipped)."""
        op = ins[0]
        if op in _MOVES:
            return False
        depth = ins[3] if ins[3] >= 0 else _E_real.stack_depth(frame)
        stack = []
        for i in range(depth):
            try:
                stack.append(_E.peek(frame, i))
            except Exception:
                break
        hits = [i for i, o in enumerate(stack) if self._np_tracked(o) is not None or
                (type(o) is types.BuiltinMethodType and self._np_tracked(getattr(o, "__self__", None)) is not None)]
        if not hits:
            return False
        plan = None
        try:
            plan = self._np_plan(frame, op, ins, stack)
            if plan is not None and plan[0] not in ("meta", ("to_tensor",)) and self._np_writes(plan):
                plan = None   # writes into its operands: they are materialized first
        except Exception:
            plan = None
        if plan is not None:
            self._np_run(frame, op, *plan)
            return True
        if op == "CALL" and self._np_traced_callee(ins[1], stack):
            return False   # the arrays go to code the tracer follows: its opcodes are seen
        if op == "RETURN_VALUE" and self._np_returns_to_tracer(frame):
            return False   # back onto the stack of the traced caller
        n = self._np_consumed(op, ins[1], len(stack))
        returned = self._np_returned(frame)
        for i in hits:
            if i < n:
                o = stack[i]
                if type(o) is types.BuiltinMethodType:
                    o = o.__self__
                if self._np_tracked(o) is not None:
                    what = "array" if type(o) is _np().ndarray else f"{type(o).__name__} scalar"
                    use = "return of" if returned else _use(op)
                    self.np_materialize(frame, o, f"{use} a numpy {what} computed from a tensor", guard=not returned)
        return False

    def _np_writes(self, plan: tuple) -> bool:
        """Whether the translated operation writes into an operand (`out=`, `a.sort()`,
        `np.copyto`, ...): tried first on copies of the shadows, whose version counters an
        in-place write bumps.  Such an operation is not translated (the shadow of an array
        NumPy writes into would go stale), and running it on the shadows themselves would
        write twice into a tensor the array shares memory with."""
        _key, tfn, _nfn, operands, kwargs, _kind = plan
        copies: list[torch.Tensor] = []

        def cp(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                c = x.detach().clone()
                copies.append(c)
                return c
            if type(x) in (tuple, list):
                return type(x)(cp(y) for y in x)
            return x
        self.suspended += 1
        try:
            a, k = [cp(o) for o in operands], {n: cp(v) for n, v in kwargs.items()}
            before = [c._version for c in copies]
            _np_apply(tfn, tuple(a), k)
        except Exception:
            return False   # not translatable: _np_result finds it (a break running NumPy)
        finally:
            self.suspended -= 1
        return any(c._version != v for c, v in zip(copies, before))

    def _np_returned(self, frame: types.FrameType) -> bool:
        """The captured function's own frame returns the values the current instruction
        consumes, with nothing else run before (`return a`, `return x, a`, `return {"a": a}`):
        no code of the call reads them afterwards, so they need no guard."""
        if frame.f_code is not self.code or frame.f_trace != self.local_trace or \
                self._np_returns_to_tracer(frame):
            return False
        instrs = _instrs(frame.f_code)
        for off in sorted(o for o in instrs if o >= frame.f_lasti):
            op = instrs[off][0]
            if op == "RETURN_VALUE":
                return True
            if op not in _RETURN_PATH:
                return False
        return False

    def _np_returns_to_tracer(self, frame: types.FrameType) -> bool:
        """The frame returns to a traced caller that called it directly (its CALL's callable
        is this frame's function): not to C code such as `sorted(key=...)` or `map`."""
        c = frame.f_back
        if c is None or c.f_trace != self.local_trace or _classify(c.f_code) != "user":
            return False
        ins = _instrs(c.f_code).get(c.f_lasti)
        if ins is None or ins[0] != "CALL" or ins[1] is None:
            return False
        d = ins[3] if ins[3] >= 0 else _static_depth(c.f_code, c.f_lasti)
        if d is None or d < ins[1] + 2:
            return False
        try:
            meth = _E_real.peek_at(c, d, ins[1] + 1)
            f = meth if meth is not _NULL else _E_real.peek_at(c, d, ins[1])
        except Exception:
            return False
        f = f.__func__ if type(f) is types.MethodType else f
        return type(f) is types.FunctionType and f.__code__ is frame.f_code

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

    def _np_run(self, frame: types.FrameType, op: str, key: tuple, tfn: Callable | None = None,
                nfn: Callable | None = None, operands: list | None = None, kwargs: dict | None = None,
                kind: str = "array") -> None:
        if key == "meta":
            return
        call = op == "CALL"
        if call:
            # NumPy's Python-level functions run untraced, as one operation (like an
            # uncapturable call: an exception in it ends the recording's use of them)
            self.kwnames.pop(frame, None)
            self.ext_depth += 1

        def finish(fr: types.FrameType) -> None:
            if call:
                self.ext_depth -= 1
            res = _E.peek(fr, 0)
            try:
                self._np_result(fr, key, tfn, nfn, operands, kwargs, kind, res)
            except Exception as e:  # bookkeeping must never break the user's program
                self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        finish.is_call = call  # type: ignore[attr-defined]
        self.pending[frame] = finish

    def _np_result(self, frame: types.FrameType, key: tuple, tfn: Callable | None, nfn: Callable,
                   operands: list, kwargs: dict, kind: str, res: Any) -> None:
        self.suspended += 1   # the translation's torch calls are not the program's
        try:
            if key == ("to_tensor",):
                target = _np_to_tensor
                targs, tkw = (operands[0], kind == "copy", kwargs.get("dtype")), {}
                sr = _np_to_tensor(*targs)
                ok = isinstance(res, torch.Tensor) and not res.requires_grad and _close(res, sr)
            else:
                target = _wrapper(key, tfn)
                targs, tkw = tuple(operands), dict(kwargs)
                try:
                    sr = _np_apply(tfn, targs, tkw)
                    ok = _matches(res, sr)
                except Exception:
                    ok = False
        finally:
            self.suspended -= 1
        if ok:
            name = key[-1] if isinstance(key[-1], str) else "np"
            self._record(target, f"numpy.{name}", targs, tkw, sr)
            if not isinstance(res, torch.Tensor):
                self.np_track(res, sr)
            else:
                # the tensor is the recorded one's value (env keyed by the real object)
                e = self.env.pop(id(sr))
                self.env[id(res)] = (res, e[1], e[2])
                self.keep.append(res)
            return
        # not translatable: the replay runs NumPy's operation on the shadows' arrays
        reason = f"numpy operation {getattr(nfn, '__name__', key[-1])} the graph does not reproduce"
        self._np_break(frame, _np_call, [nfn] + list(operands), kwargs, res, reason)
        self._np_resync(list(operands) + list(kwargs.values()))

    def _np_resync(self, shadows: list) -> None:
        """After NumPy ran an operation the graph does not hold: an array it wrote into (at
        replay the step writes through `shadow.numpy()` into the shadow itself) gets its
        shadow's example value updated, so later operations are checked against it."""
        np = _np()
        for arr, shadow in list(self.np_env.values()):
            if not any(shadow is t for t in shadows) or not isinstance(arr, np.ndarray):
                continue
            try:
                if _matches(arr, shadow):
                    continue
                with torch.no_grad():
                    shadow.copy_(torch.from_numpy(np.array(arr, order="C", copy=True)))
            except Exception:
                self.unreplayable = self.unreplayable or "a numpy array computed from a tensor changed shape in place"

    def np_materialize(self, frame: types.FrameType, o: Any, reason: str, guard: bool = True) -> None:
        arr, shadow = self.np_env.pop(id(o))
        np = _np()
        self._np_break(frame, _np_from_tensor, [shadow, not isinstance(arr, np.ndarray)], {}, arr, reason, guard)

    def _np_break(self, frame: types.FrameType, fn: Callable, args: list, kwargs: dict, res: Any,
                  reason: str, guard: bool = True) -> None:
        try:
            fe = self.const(fn, getattr(fn, "__name__", "numpy step"))
            ae = [self.expr_of(a) if isinstance(a, torch.Tensor) else self._lit(a) if type(a) in
                  (int, float, bool, str, type(None)) else self.const(a) for a in args]
            ke = {k: self.expr_of(v) if isinstance(v, torch.Tensor) else self._lit(v) if type(v) in
                  (int, float, bool, str, type(None)) else self.const(v) for k, v in kwargs.items()}
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} ({reason})"
            return
        self._close_seg()
        k = self.ncalls
        self.ncalls += 1
        self.steps.append(CallStep(k, fe, ae, ke, reason, external=False))
        if guard:
            self._add_break(reason, _frame_loc(frame))
            self._call_result(k, res)
        else:
            # returned as it is: the step converts an output of the last graph, which is not
            # split (no break, as Dynamo converts such outputs), and nothing reads it
            self.src[id(res)] = (f"b{k}", f"<result of break {k}>", True)
            self.keep.append(res)


_depths: dict[types.CodeType, dict[int, int]] = {}


def _static_depth(code: types.CodeType, offset: int) -> int | None:
    """The value-stack depth before the instruction at `offset` (computed statically)."""
    d = _depths.get(code)
    if d is None:
        import dis
        d = _depths[code] = _stack_depths(code, list(dis.get_instructions(code)))
    return d.get(offset)


def _use(op: str) -> str:
    """What an opcode does with a tracked value, for the break reason."""
    if op.startswith("POP_JUMP") or op in ("TO_BOOL", "UNARY_NOT"):
        return "branch on"
    if op.startswith("CALL"):
        return "call with"
    if op.startswith("FORMAT") or op == "BUILD_STRING":
        return "formatting of"
    if op in ("RETURN_VALUE", "YIELD_VALUE"):
        return "return of"
    if op.startswith("STORE") or op.startswith("BUILD") or op.endswith(("_APPEND", "_ADD", "_EXTEND", "_UPDATE")):
        return "store of"
    if op in ("GET_ITER", "UNPACK_SEQUENCE", "UNPACK_EX"):
        return "iteration over"
    return f"{op} on"


def _nb_ops() -> list:
    import dis
    return list(enumerate(s for _, s in dis._nb_ops))
