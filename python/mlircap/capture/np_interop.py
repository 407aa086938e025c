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

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from ._bytecode import _instrs
from .base import Unreplayable
from .frame_hook import _E, _E_real, _NULL
from .classify import _OWN_DIR, _classify
from .locations import _frame_loc
from .typeinfo import _np_float
from .np_ops import (_MOVES, _RETURN_PATH, _close, _matches, _np, _np_apply, _np_call, _np_from_tensor,
                     _np_to_tensor, _static_depth, _use, _wrapper)
from .np_plan import _NumpyPlanMixin


def _tuple_len(frame: types.FrameType) -> int | None:
    """The element count of the BUILD_TUPLE instruction about to run in frame."""
    ins = _instrs(frame.f_code).get(frame.f_lasti)
    return ins[1] if ins is not None and ins[0] == "BUILD_TUPLE" else None


class _NumpyMixin(_NumpyPlanMixin):
    """NumPy interop for `_Recorder` (see the module docstring); `np_env` maps id(array or
    NumPy scalar) -> (the array, its shadow tensor)."""

    def np_track(self, arr: Any, shadow: torch.Tensor) -> None:
        self.np_env[id(arr)] = (arr, shadow)
        self.keep.append(arr)
        self.keep.append(shadow)

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
        if self._np_tensor_index(frame, op, stack):
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

    def _np_tensor_index(self, frame: types.FrameType, op: str, stack: list) -> bool:
        """A tracked integer or boolean array indexing a tensor (`x[a]`, `x[:, a]`, the tuple
        built right before the subscript): the array is replaced on the stack by its shadow,
        which indexes the tensor the same way (torch turns an array index into such a tensor),
        so the graph takes it instead of the array being materialized."""
        np = _np()
        if op == "BINARY_SUBSCR":
            n, base = 1, 1
        elif op == "BUILD_TUPLE":
            nxt = _instrs(frame.f_code).get(frame.f_lasti + 2)
            if nxt is None or nxt[0] != "BINARY_SUBSCR":
                return False
            n = base = _tuple_len(frame)
        else:
            return False
        if n is None or len(stack) <= base or not isinstance(stack[base], torch.Tensor):
            return False
        swaps = []
        for i in range(n):
            e = self._np_tracked(stack[i])
            if e is not None:
                if type(e[0]) is not np.ndarray or e[0].dtype.kind not in "bi":
                    return False
                swaps.append((i, e[1]))
        for i, shadow in swaps:
            _E.poke(frame, i, shadow)
        return bool(swaps)

    def np_track_result(self, k: int, res: Any) -> bool:
        """An array returned by an uncapturable call (break k: `rs.normal(size=...)`,
        `np.random.permutation(n)`, a loaded table) is tracked like one computed from a tensor,
        its shadow `torch.from_numpy(b{k})` a graph input: what NumPy operations and
        `torch.from_numpy` make of it enters the graph as an input, so a new draw per call is
        no recompile.  Its contents are guarded only where the program uses it otherwise
        (np_materialize), as any break result was."""
        np = _np()
        if np is None or type(res) is not np.ndarray or res.dtype.kind not in "biuf" or \
                not res.dtype.isnative or not res.flags.writeable or not res.size:
            return False
        try:
            shadow = torch.from_numpy(res)
        except Exception:   # a dtype torch has no tensor of
            return False
        self._source(shadow, f"{self.const(torch.from_numpy)}(b{k})", f"torch.from_numpy(<result of break {k}>)",
                     argrooted=True)
        self.np_track(res, shadow)
        self.np_results[id(res)] = k
        return True

    def np_materialize(self, frame: types.FrameType, o: Any, reason: str, guard: bool = True) -> None:
        k = self.np_results.pop(id(o), None)
        if k is not None:   # a break result (np_track_result): it is b{k}, guarded by contents from here on
            arr, _ = self.np_env.pop(id(o))
            if guard:
                self._source_ndarray(arr, f"b{k}", f"<result of break {k}>", True)
            else:
                self.src[id(arr)] = (f"b{k}", f"<result of break {k}>", True)
            return
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
        k = self._call_step(fe, ae, ke, reason, external=False)
        if guard:
            self._add_break(reason, _frame_loc(frame))
            if (type(res) in (int, float) or _np_float(res) and res == res) and self._follow_result(frame, k, res):
                return   # a number (`np.quantile(d, q)`): followed, guarded where the program uses it (flows.py)
            self._call_result(k, res)
        else:
            # returned as it is: the step converts an output of the last graph, which is not
            # split (no break, as Dynamo converts such outputs), and nothing reads it
            self.src[id(res)] = (f"b{k}", f"<result of break {k}>", True)
            self.keep.append(res)
