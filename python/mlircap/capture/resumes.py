"""Where the rest of the captured frame can be continued from (`_ResumeMixin`): at a graph
break made directly by the captured function's own frame after an uncapturable call that
may run Python (print to a user object, a callback, a logger's handler), the frame's
variables and value stack as replay expressions.  A replay whose guard after such a call
fails runs the rest of the frame from there (resume_code.Continuation) instead of running
the call again from its start, which would read before the call the state the call has
written since (Python state cannot be rolled back).  A variant that could need a
continuation it does not have is not replayed (replay.py)."""
from __future__ import annotations

import dis
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._bytecode import _STATIC_DEPTH, _instrs, _order, _stack_depths
from .base import Unreplayable, _MISSING
from .classify import _OWN_DIR, _PRIM, _classify
from .frame_hook import _E, _E_real
from .guards import _ambient
from .flow_state import _ATTR_KEYS
from .flush_writes import pending_flows
from .resume_code import resumable_code
from .typeinfo import _np_float

# conditional jumps that pop a condition and test its truth (a tensor's: a graph break)
_BOOL_JUMPS = ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
               "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE")
_depths: dict[types.CodeType, dict[int, int]] = {}


def _static_depths(code: types.CodeType) -> dict[int, int]:
    """The value stack depth before each instruction of code (3.11 keeps the live stack
    pointer only during a trace event; a break inside an instruction is after it)."""
    d = _depths.get(code)
    if d is None:
        d = _depths[code] = _stack_depths(code, list(dis.get_instructions(code)))
    return d


@dataclass(slots=True)
class ResumePoint:
    """A frame of the captured call right after break k returned into it: continue `code`
    at `offset` with these variables (None: unbound) and stack values (bottom first; None:
    a call's NULL), each a replay expression; `lets` bind the objects the expressions
    rebuild; `func` is the replay expression of the function whose frame it is (`F`: the
    captured function).  `outer`: where the break was made in a function the captured
    frame calls (a helper, through helpers), the frames that call returns into, innermost
    first, each at the instruction after its call with the result of the frame inside on
    its stack's top (`_v`), the captured function's frame last."""
    k: int
    code: types.CodeType
    offset: int
    local_exprs: list[str | None]
    stack_exprs: list[str | None]
    lets: list[tuple[str, str]]
    func: str = "F"
    outer: list[ResumePoint] = field(default_factory=list)


class _ResumeMixin:
    """Resume points for `_Recorder` (see the module docstring)."""

    def _resume_mark(self, k: int) -> None:
        """Break k's step was just recorded: a resume point is taken when a frame of the
        captured call made it by a call of its own: the captured function's frame, or a
        function it calls through user functions only (each frame traced, calling the next)."""
        root = self.root_frame
        if root is None:
            return
        f = sys._getframe(1)
        while f is not None and f is not root and f.f_code.co_filename.startswith(_OWN_DIR):
            f = f.f_back
        if f is None:
            return
        f = _dispatched_caller(f, root)
        inner = f
        while f is not root:   # the frames between: traced user code only
            if f is None or f.f_code.co_filename.startswith(_OWN_DIR) or f.f_trace is None or \
                    _classify(f.f_code) != "user":
                return
            f = f.f_back
        ins = _instrs(inner.f_code).get(inner.f_lasti)
        if ins is None:
            return
        if ins[0] in ("CALL", "CALL_FUNCTION_EX"):
            self.resume_at = (k, inner.f_lasti)   # taken once the call returned (_resume_capture)
            self.resume_frame = inner
        elif ins[0] in _BOOL_JUMPS and inner is root and (self.own_calls or self.wrote_eagerly()) and \
                k not in self.resumes:
            # bool(t) of the condition the jump pops: the frame continues at the jump, with
            # the break's result (a bool) in the tensor's place
            try:
                depth = _static_depths(root.f_code).get(root.f_lasti, -1)
                peek = lambda j: _E_real.peek_at(root, depth, j)  # noqa: E731
                self.resumes[k] = self._resume_point(root, k, root.f_lasti, depth, peek)
            except Unreplayable as e:
                self.resume_missing[k] = str(e)
            except IndexError:
                self.resume_missing[k] = "the value stack could not be read"

    def _resume_capture(self, frame: types.FrameType) -> None:
        """The frame that made the call of the break marked runs its next instruction: if
        that follows the call, take the resume point (after an uncapturable call that may
        write any state only; before one, a replay that misses records again)."""
        k, off = self.resume_at
        self.resume_at = self.resume_frame = None
        if not (self.own_calls or self.wrote_eagerly()) or k in self.resumes:
            return
        order, pos = _order(frame.f_code)
        i = pos.get(off)
        if i is None or i + 1 >= len(order) or frame.f_lasti != order[i + 1]:
            self.resume_missing[k] = "the call did not return to the next instruction"
            return
        depth = self.cur_depth if _STATIC_DEPTH else _E_real.stack_depth(frame)
        try:
            func, fexpr, outer = self._resume_outer(frame, k)
            rp = self._resume_point(frame, k, frame.f_lasti, depth, lambda j: _E.peek(frame, j), func, fexpr)
            rp.outer = outer
            self.resumes[k] = rp
        except Unreplayable as e:
            self.resume_missing[k] = str(e)
        except IndexError:
            self.resume_missing[k] = "the value stack could not be read"

    def _resume_outer(self, frame: types.FrameType, k: int) -> tuple[Any, str, list[ResumePoint]]:
        """`frame`'s function and its replay expression, and the resume points of the frames
        from `frame`'s caller up to the captured function's (innermost first), each suspended
        in the call of the frame inside it, continued after that call returns."""
        calls = []   # (caller frame, its stack depth at the call, the call's argument count, peek)
        fns: list[tuple[Any, str]] = []   # the function each caller calls
        child = frame
        while child is not self.root_frame:
            g = child.f_back
            ins = _instrs(g.f_code).get(g.f_lasti)
            if ins is None or ins[0] != "CALL":
                raise Unreplayable("a helper called otherwise than by CALL")
            depth = _static_depths(g.f_code).get(g.f_lasti, -1)
            n = ins[1]
            if depth < n + 2:
                raise Unreplayable("the caller's value stack could not be read")
            peek = lambda j, g=g, depth=depth: _E_real.peek_at(g, depth, j)  # noqa: E731
            fn = peek(n + 1)
            if fn is _E.NULL:
                fn = peek(n)
            if type(fn) is types.MethodType:
                fn = fn.__func__
            if type(fn) is not types.FunctionType or fn.__code__ is not child.f_code:
                raise Unreplayable("the helper's function is not the callable its caller calls")
            fns.append((fn, self._resume_expr(fn, None, "the helper's function")))
            calls.append((g, depth, n, peek))
            child = g
        if not calls:
            return self.func, "F", []
        fns.append((self.func, "F"))   # the captured function's frame is the outermost
        out = []
        for i, (g, depth, n, peek) in enumerate(calls):
            order, pos = _order(g.f_code)
            j = pos.get(g.f_lasti)
            if j is None or j + 1 >= len(order):
                raise Unreplayable("no instruction after the helper's call")
            fn, fexpr = fns[i + 1]
            out.append(self._resume_point(g, k, order[j + 1], depth, peek, fn, fexpr, top="_v", skip=n + 2))
        return fns[0][0], fns[0][1], out

    def _resume_point(self, frame: types.FrameType, k: int, offset: int, depth: int,
                      peek: Callable[[int], Any], func: Any = None, fexpr: str = "F",
                      top: str | None = None, skip: int = 1) -> ResumePoint:
        """Continue `frame` (of function `func`, `fexpr` at replay) at `offset` with its
        variables now and its value stack (`depth` values, read by `peek`, 0 the top) but
        for the `skip` top ones: the result of break k (`top`: that expression instead)."""
        code = frame.f_code
        if not resumable_code(code):
            raise Unreplayable("a generator, or a function whose variables are cells of inner functions")
        self._resume_state_plain()
        nv = len(code.co_varnames)
        clos = (func if func is not None else self.func).__closure__ or ()
        if len(clos) != len(code.co_freevars) or \
                any(_E.local_raw(frame, nv + i) is not c for i, c in enumerate(clos)):
            raise Unreplayable("the frame's closure is not its function's")
        if depth < 1:
            raise Unreplayable("no value stack")
        saved_memo, self.memo = self.memo, {}
        nlets = len(self.lets)
        try:
            local_exprs: list[str | None] = []
            for i in range(nv):
                v = _E.local_raw(frame, i)
                if v is _E.NULL:
                    local_exprs.append(None)
                    continue
                ent = self.flow_locals.get((frame, i))
                local_exprs.append(self._resume_expr(v, ent[:2] if ent is not None and ent[2] is v else None,
                                                     code.co_varnames[i]))
            stack_exprs: list[str | None] = []
            for j in range(depth - 1, skip - 1, -1):   # bottom first; the top `skip` slots: the break's result
                v = peek(j)
                if type(v) in _PRIM and v is not None or _np_float(v):
                    # (which of them the follower (flows.py) computed is not known here)
                    raise Unreplayable("a number or text under the break's result on the value stack")
                stack_exprs.append(None if v is _E.NULL else self._resume_expr(v, None, f"stack slot {j}"))
            stack_exprs.append(top or f"b{k}")
            lets = self.lets[nlets:]
        finally:
            del self.lets[nlets:]
            self.memo = saved_memo
        return ResumePoint(k, code, offset, local_exprs, stack_exprs, lets, fexpr)

    def _resume_state_plain(self) -> None:
        """No state the replay would have to set before continuing: no write to external
        state yet (replayed writes are applied at the end of a replay), no int counters or
        floats written back as expressions, NumPy arrays tracked, or a grad mode / autocast
        other than at the call's start (a graph sets its own inside)."""
        if self.dirty.pending or pending_flows(self) or \
                any(cv.get(_MISSING) is not old for cv, old in self.cv_snap.items()):
            raise Unreplayable("the frame wrote external state before (replayed at the end)")
        if self.np_env:
            raise Unreplayable("NumPy arrays computed from tensors are tracked")
        if torch.is_grad_enabled() is not self.grad0 or _ambient() != self.amb0:
            raise Unreplayable("grad mode or autocast differs from the call's start")

    def _resume_expr(self, v: Any, followed: tuple[str, frozenset[int]] | None, what: str) -> str:
        """The replay expression of a value the frame holds at a resume point."""
        if followed is not None and type(followed[0]) is not str:
            # a container of followed floats (flow_boxes.py): made again, its floats as their expressions
            box, ks = followed
            if any(kk <= -_ATTR_KEYS for kk in ks):
                self._flow_escape_keys(ks)
                return self.expr_of(v)
            saved = dict(self.flow_ret)
            try:
                self.flow_ret.update({id(obj): (obj, e) for e, _, obj in box.leaves()})
                return self.expr_of(v)
            finally:
                self.flow_ret.clear()
                self.flow_ret.update(saved)
        if followed is not None:
            expr, ks = followed
            if not any(kk <= -_ATTR_KEYS for kk in ks):
                return expr   # computed from breaks' results and float arguments: valid there
            for kk in ks:     # (an attribute's expression would read it after the call): its value
                self._flow_escape(kk)
        if type(v) is _RANGE_ITER:
            # `for _ in range(n):` around the break (a training loop's steps): the loop's
            # iterator, made again at its position (its bounds are ints the recording guarded:
            # the loop's trip count follows them)
            _, (r,), i = v.__reduce__()
            return f"{self.const(_range_iter)}({r.start}, {r.stop}, {r.step}, {i})"
        # (an object the frame read through a location before an uncapturable call that may
        # write is named by the binding the replay made before that call, epochs._bind_held;
        # one read through a location since the last such call: that location is unchanged
        # since, as no Python code ran in between)
        return self.expr_of(v)


_RANGE_ITER = type(iter(range(0)))
_HANDLE_TORCH_FUNCTION = torch.overrides.handle_torch_function.__code__


def _dispatched_caller(f: types.FrameType, root: types.FrameType) -> types.FrameType:
    """f, the frame the recorder was called from; where that is torch's handle_torch_function
    called by a Python torch function that returns what it returns (`Tensor.backward`: `if
    has_torch_function_unary(self): return handle_torch_function(...)`), the frame calling that
    torch function: the step recorded is that whole call, so the caller continues right after it."""
    g = f.f_back
    if f.f_code is not _HANDLE_TORCH_FUNCTION or g is None or g is root or g.f_back is None or \
            _classify(g.f_code) != "opaque":
        return f
    order, pos = _order(g.f_code)
    i = pos.get(g.f_lasti)
    nxt = _instrs(g.f_code).get(order[i + 1]) if i is not None and i + 1 < len(order) else None
    return g.f_back if nxt is not None and nxt[0] == "RETURN_VALUE" else f


def _range_iter(start: int, stop: int, step: int, i: int) -> Any:
    it = iter(range(start, stop, step))
    it.__setstate__(i)
    return it
