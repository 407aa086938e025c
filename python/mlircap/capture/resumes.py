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
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._bytecode import _STATIC_DEPTH, _instrs, _order, _stack_depths
from .base import Unreplayable, _MISSING
from .classify import _OWN_DIR, _PRIM
from .frame_hook import _E, _E_real
from .guards import _ambient
from .flow_state import _ATTR_KEYS
from .resume_code import resumable_code
from .typeinfo import _np_float

# a replay expression reading through a location (`C[1]['G']`, `L[0].cfg`, `b3[0]`): at a
# continuation, after the uncapturable call, the location may hold another object than the
# one the frame read before the call
_THROUGH = re.compile(r"\b(?:[CLF]\[\d+\]|b\d+|F)(?=\s*[\[.])|\bgetattr\(")


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
    """The captured frame right after break k returned: continue `code` at `offset` with
    these variables (None: unbound) and stack values (bottom first; None: a call's NULL),
    each a replay expression; `lets` bind the objects the expressions rebuild."""
    k: int
    code: types.CodeType
    offset: int
    local_exprs: list[str | None]
    stack_exprs: list[str | None]
    lets: list[tuple[str, str]]


class _ResumeMixin:
    """Resume points for `_Recorder` (see the module docstring)."""

    def _resume_mark(self, k: int) -> None:
        """Break k's step was just recorded: a resume point is taken when the captured
        function's frame made it by a call of its own (not a function it called)."""
        root = self.root_frame
        if root is None:
            return
        f = sys._getframe(1)
        while f is not None and f is not root:
            if not f.f_code.co_filename.startswith(_OWN_DIR):
                return   # code between the frame and the break (a callee, library Python code)
            f = f.f_back
        if f is None:
            return
        ins = _instrs(root.f_code).get(root.f_lasti)
        if ins is None:
            return
        if ins[0] in ("CALL", "CALL_FUNCTION_EX"):
            self.resume_at = (k, root.f_lasti)   # taken once the call returned (_resume_capture)
        elif ins[0] in _BOOL_JUMPS and self.epoch and k not in self.resumes:
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
        """The captured function's frame runs its next instruction: if that follows the
        call of the break marked, take the resume point (after an uncapturable call that
        may write any state only; before one, a replay that misses records again)."""
        k, off = self.resume_at
        self.resume_at = None
        if self.epoch == 0 or k in self.resumes:
            return
        order, pos = _order(frame.f_code)
        i = pos.get(off)
        if i is None or i + 1 >= len(order) or frame.f_lasti != order[i + 1]:
            self.resume_missing[k] = "the call did not return to the next instruction"
            return
        depth = self.cur_depth if _STATIC_DEPTH else _E_real.stack_depth(frame)
        try:
            self.resumes[k] = self._resume_point(frame, k, frame.f_lasti, depth, lambda j: _E.peek(frame, j))
        except Unreplayable as e:
            self.resume_missing[k] = str(e)

    def _resume_point(self, frame: types.FrameType, k: int, offset: int, depth: int,
                      peek: Callable[[int], Any]) -> ResumePoint:
        """Continue `frame` at `offset` with its variables now and its value stack (`depth`
        values, read by `peek`, 0 the top) but for the top: the result of break k."""
        code = frame.f_code
        if not resumable_code(code):
            raise Unreplayable("a generator, or a function whose variables are cells of inner functions")
        self._resume_state_plain()
        nv = len(code.co_varnames)
        clos = self.func.__closure__ or ()
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
            for j in range(depth - 1, 0, -1):   # bottom first; slot 0 is the break's result
                v = peek(j)
                if type(v) in _PRIM and v is not None or _np_float(v):
                    # (which of them the follower (flows.py) computed is not known here)
                    raise Unreplayable("a number or text under the break's result on the value stack")
                stack_exprs.append(None if v is _E.NULL else self._resume_expr(v, None, f"stack slot {j}"))
            stack_exprs.append(f"b{k}")
            lets = self.lets[nlets:]
        finally:
            del self.lets[nlets:]
            self.memo = saved_memo
        return ResumePoint(k, code, offset, local_exprs, stack_exprs, lets)

    def _resume_state_plain(self) -> None:
        """No state the replay would have to set before continuing: no write to external
        state yet (replayed writes are applied at the end of a replay), no int counters or
        floats written back as expressions, NumPy arrays tracked, or a grad mode / autocast
        other than at the call's start (a graph sets its own inside)."""
        if self.dirty or self.flow_stores or \
                any(cv.get(_MISSING) is not old for cv, old in self.cv_snap.items()):
            raise Unreplayable("the frame wrote external state before (replayed at the end)")
        if self.np_env:
            raise Unreplayable("NumPy arrays computed from tensors are tracked")
        if torch.is_grad_enabled() is not self.grad0 or _ambient() != self.amb0:
            raise Unreplayable("grad mode or autocast differs from the call's start")

    def _resume_expr(self, v: Any, followed: tuple[str, frozenset[int]] | None, what: str) -> str:
        """The replay expression of a value the frame holds at a resume point."""
        if followed is not None:
            expr, ks = followed
            if not any(kk <= -_ATTR_KEYS for kk in ks):
                return expr   # computed from breaks' results and float arguments: valid there
            for kk in ks:     # (an attribute's expression would read it after the call): its value
                self._flow_escape(kk)
        s = self.src.get(id(v))
        if s is not None and type(v) not in _PRIM and _THROUGH.search(s[0]):
            # an object the frame read through a location before the first uncapturable call
            # that may write: the replay binds it there (`_r0`)
            if self.src0.get(id(v)) != s[0]:
                raise Unreplayable(f"{what} holds a value read through a location after such a call")
            return self.resume_paths.setdefault(s[0], f"_r{len(self.resume_paths)}")
        e = self.expr_of(v)
        if _THROUGH.search(e):
            raise Unreplayable(f"{what} holds a value read through locations")
        return e
