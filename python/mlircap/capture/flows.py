"""Numbers returned by graph breaks, followed opcode by opcode until the program is done with
them (`_FlowMixin`), so that they need no guard on their value:

* compared and branched on (`random.random() < self.p`, `if loss.item() > th:`,
  `if float(t.mean()) < 0:`): the mid-replay guard is the comparison's outcome;
* formatted and handed to an uncapturable call (`print(f"loss {loss.item():.3f}")`,
  `log.info("%.3f", v)`): the replayed call gets the expression of the replay's own value
  (`"loss " + format(b3, ".3f")`) instead of the text this recording printed;
* anything else (the number reaches a graph, a variable, a traced function, a return value,
  an exception): guarded by value right after the break, as every break result was.

The follower models only the stack slots holding values computed from the number, through
a few instructions (loads, arithmetic, comparisons, conditional jumps, f-string formatting,
calls); any other instruction while such a slot is live ends it with the value guard.  Other
operands are the program's own values, guarded where they were read: they enter the
expressions as literals (numbers and strings only)."""
from __future__ import annotations

import operator
import re
import sys
import types
from typing import Any

import torch

from ._bytecode import _instrs, _nb_op, _order
from .base import PY312
from .classify import _classify
from .frame_hook import _E
from .guard_kinds import Equals, Number

_CMP = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
        ">=": operator.ge}
_ARITH = {"+", "-", "*", "/", "//", "%"}
_PUSH1 = ("LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF")
_NOOPS = ("PRECALL", "KW_NAMES", "NOP", "EXTENDED_ARG", "CACHE")
_JUMPS = ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
_CONV = {0: "{}", 1: "str({})", 2: "repr({})", 3: "ascii({})"}
_MAX_STEPS = 48


def _np_float(v: Any) -> bool:
    """A NumPy float64 scalar (a float subclass: `np.float64(0.1)`, a float64 array's item)."""
    return isinstance(v, float) and type(v).__module__ == "numpy"


def _binop(arg: int | None) -> str | None:
    s = _nb_op(arg)
    return s if s in _ARITH else None


def _lit(v: Any) -> str | None:
    """A number or string as a literal of a guard / replay expression (None: anything else)."""
    if type(v) is str or type(v) is int:
        return repr(v)
    if type(v) is float:
        return repr(v) if v == v and v not in (float("inf"), float("-inf")) else f"float({str(v)!r})"
    return None


class _Flow:
    """The numbers followed in one frame: the stack slots (0 = top) holding values computed
    from them, each an expression of the breaks' results (b3, ...) and the breaks it uses."""
    __slots__ = ("slots", "steps", "expect", "waiting")

    def __init__(self) -> None:
        self.slots: dict[int, tuple[str, frozenset[int]]] = {}
        self.steps = 0
        self.expect: tuple[int, ...] | None = None   # the offsets it may go on at (None: any)
        # (expression, breaks, number) returned by the call running now
        self.waiting: list[tuple[str, frozenset[int], Any]] = []


class _FlowMixin:
    """For `_Recorder` (through `_TracerMixin`): `_follow_result` after an uncapturable call,
    `_data_result` after a data-dependent operation, `_flow_arg` for the replayed call that
    takes a followed value, `close_flows` at the end of the recording.  A frame's numbers
    advance together, one pending step per instruction (`_flow_tick`)."""

    def _follow_result(self, frame: types.FrameType, k: int, res: Any) -> bool:
        """res (the result of break k, an int or float) is at the top of frame's stack."""
        self.keep.append(res)
        self.flows_open[k] = res
        self.flow_frames.setdefault(frame, _Flow()).waiting.append((f"b{k}", frozenset((k,)), res))
        self._flow_tick(frame)
        return True

    def _flow_tick(self, fr: types.FrameType) -> None:
        """Advance the numbers followed in frame fr over the instruction about to run."""
        fl = self.flow_frames.get(fr)
        if fl is None:
            return
        code = fr.f_code
        if fl.expect is not None and fr.f_lasti not in fl.expect:
            self._flow_escape_all(fl)   # a step was missed (another pending step ran instead)
        for expr, ks, res in fl.waiting:
            if _E.peek(fr, 0) is res and 0 not in fl.slots:
                fl.slots[0] = (expr, ks)
            else:
                for k in ks:
                    self._flow_escape(k)
        fl.waiting = []
        ins = _instrs(code).get(fr.f_lasti)
        if fl.slots and (ins is None or fl.steps > _MAX_STEPS or self._flow_apply(fl, fr, ins) is None):
            self._flow_escape_all(fl)
        fl.steps += 1
        if fl.slots:
            fl.expect = _next_offsets(code, fr.f_lasti, ins)
            self.pending[fr] = self._flow_tick
        else:
            del self.flow_frames[fr]

    def _flow_escape_all(self, fl: _Flow) -> None:
        for _, ks in fl.slots.values():
            for k in ks:
                self._flow_escape(k)
        fl.slots = {}

    def _flow_apply(self, fl: _Flow, fr: types.FrameType, ins: tuple) -> bool | None:
        """Move the followed slots over instruction ins (about to run); None: not followed."""
        op, arg, argval, _ = ins
        arg = arg or 0
        slots = fl.slots
        if op in _NOOPS or op in _JUMPS:
            return True
        if op in _PUSH1 or op == "PUSH_NULL":
            return _shift(fl, 0, 1)
        if op == "LOAD_GLOBAL":
            return _shift(fl, 0, 1 + (arg & 1))
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            if 0 in slots:
                return None
            return _shift(fl, 1, 2 if op == "LOAD_METHOD" or PY312 and arg & 1 else 1)
        if op in ("BINARY_OP", "COMPARE_OP"):
            if 0 not in slots and 1 not in slots:
                return _shift(fl, 2, 1)
            sym = _binop(arg) if op == "BINARY_OP" else (argval if argval in _CMP else None)
            if op == "BINARY_OP" and sym is not None and self._flow_tensor_operand(fl, fr):
                return _shift(fl, 2, 1)   # a tensor: the number became a graph input (or is guarded)
            a, b = _operand(fl, fr, 1, None), _operand(fl, fr, 0, None)
            if sym is None or a is None or b is None:
                return None
            return _shift(fl, 2, 1, (f"({a[0]} {sym} {b[0]})", a[1] | b[1]))
        if op.startswith("POP_JUMP") and ("IF_FALSE" in op or "IF_TRUE" in op):
            if 0 in slots:
                expr, ks = slots[0]
                value = _E.peek(fr, 0)
                if type(value) is not bool:
                    return None
                self.guard(Equals(expr, _pretty(expr), value, exact=bool), pos=max(max(ks) + 1, 0))
                _shift(fl, 1, 0)
                for k in ks:
                    self._flow_settled(k)
                return True
            return _shift(fl, 1, 0)
        if op == "FORMAT_VALUE":
            spec = bool(arg & 4)
            if 0 in slots and spec:
                return None
            pos = 1 if spec else 0
            if pos not in slots:
                return _shift(fl, pos + 1, 1)
            sp = _E.peek(fr, 0) if spec else ""
            if type(sp) is not str:
                return None
            e, ks = slots[pos]
            return _shift(fl, pos + 1, 1, (f"format({_CONV[arg & 3].format(e)}, {sp!r})", ks))
        if op == "BUILD_STRING":
            if not any(p < arg for p in slots):
                return _shift(fl, arg, 1)
            parts = [_operand(fl, fr, p, True) for p in range(arg - 1, -1, -1)]
            if any(x is None for x in parts):
                return None
            return _shift(fl, arg, 1, ("(" + " + ".join(x[0] for x in parts) + ")",
                                       frozenset().union(*(x[1] for x in parts))))
        if op == "RETURN_VALUE" and 0 in slots:
            return self._flow_return(fl, fr)
        if op == "CALL":
            if arg in slots or arg + 1 in slots:
                return None   # the callable or the bound receiver
            given = {p: t for p, t in slots.items() if p < arg}
            if given:
                objs = [_E.peek(fr, p) for p in range(arg)]
                for p in given:   # a value another argument also is (a cached small int) is ambiguous
                    if any(objs[q] is objs[p] for q in range(arg) if q not in given):
                        return None
                ks = frozenset().union(*(t[1] for t in given.values()))
                self.flow_call = (fr, fr.f_lasti, {id(objs[p]): t[0] for p, t in given.items()}, ks)
                self.keep.extend(objs[p] for p in given)
                for k in ks:
                    if k in self.flows_open:
                        self.flows_given[k] = self.flows_open.pop(k)
                    elif k in self.flows_scalar:   # also a graph input: this call needs it too
                        self.flows_given[k] = self.flows_scalar[k]
            return _shift(fl, arg + 2, 1)
        return None

    def _flow_return(self, fl: _Flow, fr: types.FrameType) -> bool | None:
        """A traced function returns a followed number (`random.uniform(a, b)`: `a + (b - a) *
        self.random()` in random.py) to the traced code calling it: followed on there."""
        caller = fr.f_back
        if caller is None or caller.f_trace is None or not caller.f_trace_opcodes or \
                _classify(caller.f_code) != "user" or caller in self.pending and self.pending[caller] != self._flow_tick:
            return None
        ins = _instrs(caller.f_code).get(caller.f_lasti)
        if ins is None or ins[0] not in ("CALL", "CALL_FUNCTION_EX"):
            return None
        expr, ks = fl.slots.pop(0)
        obj = _E.peek(fr, 0)
        self.keep.append(obj)
        self.flow_frames.setdefault(caller, _Flow()).waiting.append((expr, ks, obj))
        self.pending[caller] = self._flow_tick
        self._flow_escape_all(fl)   # what else this frame followed ends with it
        return True

    def _flow_tensor_operand(self, fl: _Flow, fr: types.FrameType) -> bool:
        """`x * r`, `(1 - r) * x`, `x / r` (a float computed from followed numbers, the other
        operand a tensor): the torch operator that runs next may take the float as a graph
        input (`flow_scalar`, graph.py `_scalar_input`) instead of a constant, so the value
        needs no guard: a new draw of `random.random()` does not recompile.  Where it does
        not, the number is guarded at the end (close_flows), as a value handed to a call."""
        if (0 in fl.slots) == (1 in fl.slots):
            return False
        pos = 0 if 0 in fl.slots else 1
        obj, other = _E.peek(fr, pos), _E.peek(fr, 1 - pos)
        if not (type(obj) is float or _np_float(obj)) or not isinstance(other, torch.Tensor):
            return False
        expr, ks = fl.slots[pos]
        self.flow_scalar = (id(obj), obj, expr, ks)
        self.keep.append(obj)
        for k in ks:
            if k in self.flows_open:
                self.flows_scalar[k] = self.flows_open.pop(k)
        return True

    def _flow_settled(self, k: int) -> None:
        """Break k's number needs no guard of its own any more (unless still followed)."""
        fl_ks = {k2 for fl in self.flow_frames.values() for _, ks in fl.slots.values() for k2 in ks}
        if k not in fl_ks:
            self.flows_open.pop(k, None)

    def op_load_fast(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        """A float argument of the captured function loaded (`x * scale`, `if t > 0.5`):
        followed like a break's number (key -(i + 1), expression L[i]), so that a new value
        recompiles only where the program needs the value itself."""
        fa = self.float_args.get(name)
        if fa is None or frame.f_code is not self.code:
            return
        i, a = fa
        if _E.local_raw(frame, arg) is not a:
            return   # the variable holds another value now
        k = -(i + 1)
        p = self.pending.get(frame)
        if p is not None and p != self._flow_tick:
            self._flow_escape(k)
            return
        self.flows_open[k] = a
        self.flow_frames.setdefault(frame, _Flow()).waiting.append((f"L[{i}]", frozenset((k,)), a))
        self.pending[frame] = self._flow_tick

    def _flow_escape_args(self) -> None:
        """Every float argument guarded by value (its frame's variables are read otherwise:
        locals(), vars())."""
        for i, _ in list(self.float_args.values()):
            self._flow_escape(-(i + 1))

    def _flow_escape(self, k: int) -> None:
        """Guard the result of break k by value, right after the break (as `_call_result`);
        a float argument (k < 0) before the call."""
        if k < 0:
            for n, (i, a) in list(self.float_args.items()):
                if -(i + 1) == k:
                    del self.float_args[n]   # guarded: not followed any more
                    self.flows_open.pop(k, None)
                    self.flows_given.pop(k, None)
                    self.flows_scalar.pop(k, None)
                    self.guard(Number(f"L[{i}]", n, a, type(a)), pos=0)
            return
        res = self.flows_open.pop(k, None)
        given = self.flows_given.pop(k, None)
        scalar = self.flows_scalar.pop(k, None)
        res = res if res is not None else given if given is not None else scalar
        if res is None:
            return
        saved, self.ncalls = self.ncalls, k + 1
        try:
            self._call_result(k, res)
        finally:
            self.ncalls = saved

    def _flow_arg(self, frame: types.FrameType, a: Any) -> str | None:
        """The replay expression of argument a of the uncapturable call about to run here, when
        it is a value computed from a followed number (None: any other argument)."""
        fc = self.flow_call
        if fc is None or fc[0] is not frame or fc[1] != frame.f_lasti:
            return None
        e = fc[2].get(id(a))
        if e is not None:
            self.flows_used.update(fc[3])
        return e

    def _flow_unused(self, frame: types.FrameType) -> None:
        """The call about to run here ignores its arguments (a logger not enabled for the level)."""
        fc = self.flow_call
        if fc is not None and fc[0] is frame and fc[1] == frame.f_lasti:
            self.flows_used.update(fc[3])

    def close_flows(self) -> None:
        """End of the recording: numbers still followed, or handed to a call that was not
        replayed with their expression (a traced function, a torch function), are guarded."""
        for k in list(self.flows_open):
            self._flow_escape(k)
        for k in list(self.flows_given):
            if k not in self.flows_used:
                self._flow_escape(k)
        for k in list(self.flows_scalar):
            if k not in self.flows_scalar_ok:   # the operator did not take it as a graph input
                self._flow_escape(k)

    def _data_result(self, k: int, res: Any) -> None:
        """The number or text a data-dependent operation returned (`loss.item()`, `float(t)`,
        `f"{t.mean():.3f}"`), break k: followed from the user's code calling it, when that is
        where it returns to."""
        f = _calling_user_frame() if type(res) in (int, float, str) else None
        if f is None or f in self.pending and self.pending[f] != self._flow_tick:
            self._call_result(k, res)
            return
        self.flows_open[k] = res
        self.keep.append(res)
        self.flow_frames.setdefault(f, _Flow()).waiting.append((f"b{k}", frozenset((k,)), res))
        self.pending[f] = self._flow_tick


def _calling_user_frame() -> types.FrameType | None:
    """The innermost traced (user) frame, when it is at a call or an f-string's formatting of a
    value (`f"{t.mean():.3f}"`: Tensor.__format__), whose result comes next."""
    f = sys._getframe(2)
    while f is not None and _classify(f.f_code) != "user":
        f = f.f_back
    if f is None or f.f_trace is None or not f.f_trace_opcodes:
        return None   # not followed opcode by opcode
    ins = _instrs(f.f_code).get(f.f_lasti)
    return f if ins is not None and ins[0] in ("CALL", "CALL_FUNCTION_EX", "FORMAT_VALUE") else None


def _shift(fl: _Flow, pops: int, pushes: int, top: tuple[str, frozenset[int]] | None = None) -> bool:
    """The instruction pops `pops` slots and pushes `pushes` (the top one `top`, if followed)."""
    fl.slots = {p - pops + pushes: t for p, t in fl.slots.items() if p >= pops}
    if top is not None:
        fl.slots[pushes - 1] = top
    return True


def _operand(fl: _Flow, fr: types.FrameType, pos: int, string: bool | None) -> tuple[str, frozenset] | None:
    """The operand at stack position pos: followed, or a literal of the program's value (a
    string where `string`, a number or string where None); None: anything else."""
    t = fl.slots.get(pos)
    if t is not None:
        return t
    v = _E.peek(fr, pos)
    e = _lit(v) if string is None or (type(v) is str) == string else None
    return None if e is None else (e, frozenset())


def _pretty(expr: str) -> str:
    return re.sub(r"\bb(\d+)\b", r"<result of break \1>", expr)


def _next_offsets(code: types.CodeType, off: int, ins: tuple) -> tuple[int, ...]:
    """Where execution goes on after the instruction at off: the next one, or a jump's target."""
    order = _order(code)
    i = order[1].get(off)
    nxt = order[0][i + 1] if i is not None and i + 1 < len(order[0]) else -1
    if ins[0] in _JUMPS and type(ins[2]) is int:
        return (ins[2],)
    return (nxt, ins[2]) if ins[0].startswith("POP_JUMP") and type(ins[2]) is int else (nxt,)

