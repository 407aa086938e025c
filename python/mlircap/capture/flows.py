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

import builtins
import math
import operator
import re
import sys
import types
from typing import Any

import torch

from ._bytecode import _instrs, _nb_op, _order
from .base import PY312
from .classify import _classify
from .flow_writes import _FlowWriteMixin
from .frame_hook import _E, _NULL
from .guard_kinds import Equals, Number, TypeIs
from .typeinfo import _np_float

_CMP = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
        ">=": operator.ge}
_ARITH = {"+", "-", "*", "/", "//", "%"}
_PUSH1 = ("LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF")
_NOOPS = ("PRECALL", "KW_NAMES", "NOP", "EXTENDED_ARG", "CACHE")
_JUMPS = ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
_CONV = {0: "{}", 1: "str({})", 2: "repr({})", 3: "ascii({})"}
_MAX_STEPS = 48
# functions of numbers alone: called with followed numbers, their result is followed
_PURE_NUMERIC = {f: n for n, f in [(n, getattr(builtins, n)) for n in ("max", "min", "abs", "float", "round", "pow")] +
                 [(f"math.{n}", getattr(math, n)) for n in (
                     "sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "tanh", "atan",
                     "sinh", "cosh", "erf", "pow", "fabs", "floor", "ceil", "hypot", "copysign")]}
_ATTR_KEYS = 1 << 20
_BUILDS = ("BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP")
# (pops, pushes) of instructions that only touch their operands: with no followed operand,
# the followed slots below them just move
_EFFECTS = {
    "BINARY_SUBSCR": lambda a: (2, 1), "BINARY_SLICE": lambda a: (3, 1), "BUILD_SLICE": lambda a: (a, 1),
    "BUILD_TUPLE": lambda a: (a, 1), "BUILD_LIST": lambda a: (a, 1), "BUILD_MAP": lambda a: (2 * a, 1),
    "BUILD_CONST_KEY_MAP": lambda a: (a + 1, 1), "UNARY_NOT": lambda a: (1, 1), "UNARY_INVERT": lambda a: (1, 1),
    "UNARY_POSITIVE": lambda a: (1, 1), "CONTAINS_OP": lambda a: (2, 1), "IS_OP": lambda a: (2, 1),
    "STORE_ATTR": lambda a: (2, 0), "STORE_SUBSCR": lambda a: (3, 0), "GET_LEN": lambda a: (1, 2),
}   # flow keys of attributes: -(_ATTR_KEYS + i); of float arguments: -(index + 1)


def _followable(v: Any) -> bool:
    """A float a variable or a graph input may follow: a fresh object of each computation (not
    an int: small ints are shared, so another int in a variable could look the same); not NaN."""
    return (type(v) is float or _np_float(v)) and v == v


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


class _FlowMixin(_FlowWriteMixin):
    """For `_Recorder` (through `_TracerMixin`): `_follow_result` after an uncapturable call,
    `_data_result` after a data-dependent operation, `_flow_arg` for the replayed call that
    takes a followed value, `close_flows` at the end of the recording.  A frame's numbers
    advance together, one pending step per instruction (`_flow_tick`)."""

    def _follow_result(self, frame: types.FrameType, k: int, res: Any) -> bool:
        """res (the result of break k, an int or float) is at the top of frame's stack."""
        self.keep.append(res)
        self.flows_open[k] = res
        self.flow_vals[k] = res
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
        if op == "POP_TOP":   # a value dropped: nothing computed from it is used
            dropped = slots.get(0)
            _shift(fl, 1, 0)
            for k in dropped[1] if dropped else ():
                self._flow_settled(k)
            return True
        if op == "SWAP":   # `self.tau *= 0.9`: ... COPY 1, LOAD_ATTR, BINARY_OP, SWAP 2, STORE_ATTR
            top, other = slots.pop(0, None), slots.pop(arg - 1, None)
            if top is not None:
                slots[arg - 1] = top
            if other is not None:
                slots[0] = other
            return True
        if op == "COPY":
            return None if arg - 1 in slots else _shift(fl, 0, 1)
        if op == "STORE_ATTR" and 1 in slots and 0 not in slots:   # a float written back: flow_writes.py
            if not self._flow_store(fr, argval, *slots[1]):
                return None
            ks = slots[1][1]
            _shift(fl, 2, 0)
            for k in ks:
                self._flow_settled(k)
            return True
        eff = _EFFECTS.get(op)
        if eff is not None and op not in _BUILDS:
            pops, pushes = eff(arg)
            return _shift(fl, pops, pushes) if not any(p < pops for p in slots) else None
        if op == "UNARY_NEGATIVE":
            if 0 in slots:
                slots[0] = (f"(-{slots[0][0]})", slots[0][1])
            return True
        if op.startswith("POP_JUMP") and ("IF_FALSE" in op or "IF_TRUE" in op):
            if 0 in slots:
                expr, ks = slots[0]
                value = _E.peek(fr, 0)
                if type(value) is not bool or self._flow_stale(ks):
                    return None
                self.guard(Equals(expr, _pretty(expr), value, exact=bool), pos=self._flow_guard_pos(ks))
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
        if op == "STORE_FAST":
            if 0 not in slots:
                self.flow_locals.pop((fr, arg), None)
                return _shift(fl, 1, 0)
            obj = _E.peek(fr, 0)
            if not _followable(obj):
                return None
            # a variable holding a followed float: its loads are followed again (op_load_fast)
            self.flow_locals[(fr, arg)] = (*slots[0], obj)
            self.keep.append(obj)
            return _shift(fl, 1, 0)
        if op == "RETURN_VALUE" and 0 in slots:
            if self._flow_root_frame(fr):
                return self._flow_returned(fl, fr, (0,), 1, 0)
            return self._flow_return(fl, fr)
        if op in _BUILDS and not any(p < _EFFECTS[op](arg)[0] for p in slots):
            return _shift(fl, *_EFFECTS[op](arg))
        if op in _BUILDS and any(p < (2 * arg if op == "BUILD_MAP" else arg) for p in slots):
            # `return y, lam`, `return {"loss": loss.item()}`: built and returned at once
            n = 2 * arg if op == "BUILD_MAP" else arg + (op == "BUILD_CONST_KEY_MAP")
            nxt = _instrs(fr.f_code).get(_next_offsets(fr.f_code, fr.f_lasti, ins)[0])
            if nxt is None or nxt[0] != "RETURN_VALUE" or not self._flow_root_frame(fr):
                return None
            vals = range(1, n, 2) if op == "BUILD_MAP" else range(1 if op == "BUILD_CONST_KEY_MAP" else 0, n)
            if any(p < n and p not in vals for p in slots):
                return None   # a followed key
            return self._flow_returned(fl, fr, tuple(p for p in vals if p in slots), n, 1)
        if op == "CALL":
            if arg in slots or arg + 1 in slots:
                return None   # the callable or the bound receiver
            given = {p: t for p, t in slots.items() if p < arg}
            if given:
                pure = self._flow_pure_call(fl, fr, arg)
                if pure is not None:
                    return _shift(fl, arg + 2, 1, pure)
            if given and self._flow_stale(frozenset().union(*(t[1] for t in given.values()))):
                return None
            if given:
                objs = [_E.peek(fr, p) for p in range(arg)]
                for p in given:   # a value another argument also is (a cached small int) is ambiguous
                    if any(objs[q] is objs[p] for q in range(arg) if q not in given):
                        return None
                ks = frozenset().union(*(t[1] for t in given.values()))
                self.flow_call = (fr, fr.f_lasti, {id(objs[p]): t[0] for p, t in given.items()}, ks)
                self.keep.extend(objs[p] for p in given)
                for k in ks:   # (also one a graph input took: this call needs it too)
                    if k not in self.flows_guarded:
                        self.flows_given[k] = self.flows_open.pop(k, self.flow_vals[k])
            return _shift(fl, arg + 2, 1)
        return None

    def _flow_pure_call(self, fl: _Flow, fr: types.FrameType, argc: int) -> tuple[str, frozenset[int]] | None:
        """`max(m, 1e-6)`, `math.sqrt(d)`, `float(r)`: a function of numbers alone, with no
        state, called with followed numbers and literals: its result is followed, as the
        expression of the call (None: any other call)."""
        if self.kwnames.get(fr) or _E.peek(fr, argc + 1) is not _NULL:
            return None
        f = _E.peek(fr, argc)
        try:
            name = _PURE_NUMERIC.get(f)
        except TypeError:   # unhashable
            return None
        if name is None:
            return None
        ops = []
        for p in range(argc - 1, -1, -1):
            v = _E.peek(fr, p)
            o = _operand(fl, fr, p, None)
            if o is None or not (type(v) in (int, float) or _np_float(v)):
                return None
            ops.append(o)
        return (f"{self.const(f, name)}({', '.join(o[0] for o in ops)})", frozenset().union(*(o[1] for o in ops)))

    def _flow_root_frame(self, fr: types.FrameType) -> bool:
        """fr is the captured function's own frame (its return value is the call's)."""
        caller = fr.f_back
        return fr.f_code is self.code and (caller is None or caller.f_trace is None or _classify(caller.f_code) != "user")

    def _flow_returned(self, fl: _Flow, fr: types.FrameType, pos: tuple[int, ...], pops: int, pushes: int) -> bool | None:
        """Followed floats the captured function returns (at pos): the replay returns them as
        their expressions (`expr_of`) instead of as the values of this recording, which then
        need no guard.  Not an attribute: read at the end of the replay, after its writes."""
        items = []
        for p in pos:
            expr, ks = fl.slots[p]
            obj = _E.peek(fr, p)
            if not (type(obj) is float or _np_float(obj)) or any(k in self.flow_pos for k in ks):
                return None
            items.append((obj, expr, ks))
        _shift(fl, pops, pushes)
        for obj, expr, ks in items:
            self.flow_ret[id(obj)] = (obj, expr)
            self.keep.append(obj)
            for k in ks:
                self._flow_settled(k)
        return True

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
        if not (type(obj) in (float, int) or _np_float(obj)) or not isinstance(other, torch.Tensor):
            return False
        expr, ks = fl.slots[pos]
        if self._flow_stale(ks):
            return False
        if self.flow_scalar is not None:   # an operand the operator never took (graph.py)
            self._flow_escape_keys(self.flow_scalar[3])
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
        recompiles only where the program needs the value itself.  So is a variable the
        follower stored a followed float into (`s = t.item()`, `lr = base * decay`), while
        it still holds that float."""
        ent = self.flow_locals.get((frame, arg)) if self.flow_locals else None
        if ent is not None:
            expr, ks, obj = ent
            if _E.local_raw(frame, arg) is obj:
                self._flow_load(frame, expr, ks, obj)
                return
            del self.flow_locals[(frame, arg)]
        fa = self.float_args.get(name)
        if fa is None or frame.f_code is not self.code:
            return
        i, a = fa
        if _E.local_raw(frame, arg) is not a:
            return   # the variable holds another value now
        self._flow_load(frame, f"L[{i}]", frozenset((-(i + 1),)), a)

    def _flow_load(self, frame: types.FrameType, expr: str, ks: frozenset[int], obj: Any) -> None:
        """obj (the value of expr, computed from the numbers ks) is pushed by the instruction
        about to run in frame: followed from the next one on."""
        p = self.pending.get(frame)
        if p is not None and p != self._flow_tick:
            self._flow_escape_keys(ks)
            return
        for k in ks:
            if k not in self.flows_guarded:
                self.flows_open[k] = self.flow_vals[k]
        self.flow_frames.setdefault(frame, _Flow()).waiting.append((expr, ks, obj))
        self.pending[frame] = self._flow_tick

    def _flow_root(self, k: int | None, expr: str, pretty: str, v: Any, pos: int = 0,
                   group: tuple | None = None) -> int:
        """A float read from expr (an argument, an attribute) followed instead of guarded by
        value (its type is guarded where it was read); returns its key (< 0; k, or a new one
        for an attribute: None).  Its guard if it escapes: the value, at pos.  An attribute
        is read again by the replay (a graph input, a guard, a replayed call): followed only
        until the next break (an uncapturable call may write it)."""
        if k is None:
            k = -(_ATTR_KEYS + len(self.flow_pos))
            self.flow_pos[k] = pos
        self.flow_roots[k] = (expr, pretty, v, pos, group)
        self.flow_vals[k] = v
        self.keep.append(v)
        return k

    def _flow_attr(self, frame: types.FrameType | None, expr: str, pretty: str, v: Any, owner: int, name: str,
                   group: tuple) -> bool:
        """A float attribute read by LOAD_ATTR (`self.scale`, `cfg.temperature`): followed
        like a float argument (its type guarded here, its value only where the program needs
        it), so that a schedule changing it between calls does not recompile.  False: read
        (and guarded) as any other value."""
        if frame is None:   # a reflective read (getattr(self, "tau")): its value is used as it is
            k = self.flow_attrs.get(expr)
            if k is not None:
                self._flow_escape(k)
            return False
        if not _followable(v) or (owner, name) in self.dirty:
            return False
        k = self.flow_attrs.get(expr)
        if k is None:
            p = self.pending.get(frame)
            if expr in self.read_exprs or p is not None and p != self._flow_tick:
                return False
            self.read_exprs.add(expr)
            self.guard(TypeIs(expr, pretty, type(v)), group=group)
            k = self.flow_attrs[expr] = self._flow_root(None, expr, pretty, v, pos=self.ncalls, group=group)
        elif k in self.flows_guarded:
            return True   # guarded by value
        elif self.flow_vals[k] is not v or self.flow_pos[k] != self.ncalls:
            self._flow_escape(k)   # a break since it was read: guarded by the value read then
            return True
        self._flow_load(frame, expr, frozenset((k,)), v)
        return True

    def _flow_guard_pos(self, ks: frozenset[int]) -> int:
        """Where a guard on an expression of the numbers ks goes: after the last break among
        them, or where the attribute among them was read (a float argument: before the call)."""
        return max(k + 1 if k >= 0 else self.flow_pos.get(k, 0) for k in ks)

    def _flow_stale(self, ks: frozenset[int]) -> bool:
        """An attribute among ks was read before the last break: reading it again at the
        replay's step now may not give the value the program read (escape it instead)."""
        return bool(self.flow_pos) and any(self.flow_pos.get(k, self.ncalls) != self.ncalls for k in ks)

    def _flow_escape_args(self) -> None:
        """Every float argument and followed variable guarded by value (its frame's variables
        are read otherwise: locals(), vars())."""
        for i, _ in list(self.float_args.values()):
            self._flow_escape(-(i + 1))
        for _, ks, _ in list(self.flow_locals.values()):
            self._flow_escape_keys(ks)

    def _flow_escape_keys(self, ks: frozenset[int]) -> None:
        for k in ks:
            self._flow_escape(k)

    def _flow_escape(self, k: int) -> None:
        """Guard the result of break k by value, right after the break (as `_call_result`);
        a float argument or attribute (k < 0) where it was read."""
        if k < 0:
            root = self.flow_roots.pop(k, None)
            self.flows_open.pop(k, None)
            self.flows_given.pop(k, None)
            self.flows_scalar.pop(k, None)
            if root is None:
                return
            self.flows_guarded.add(k)
            for n, (i, _) in list(self.float_args.items()):
                if -(i + 1) == k:
                    del self.float_args[n]   # guarded: not followed any more
            expr, pretty, a, pos, group = root
            self.guard(Number(expr, pretty, a, type(a)), pos=pos, group=group)
            return
        self.flows_open.pop(k, None)
        self.flows_given.pop(k, None)
        self.flows_scalar.pop(k, None)
        if k in self.flows_guarded or k not in self.flow_vals:
            return
        res = self.flow_vals[k]
        self.flows_guarded.add(k)
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
        if self.flow_scalar is not None:   # an operand the operator never took (graph.py)
            self._flow_escape_keys(self.flow_scalar[3])
            self.flow_scalar = None
        for k in list(self.flows_open):
            self._flow_escape(k)
        for k in list(self.flows_given):
            if k not in self.flows_used:
                self._flow_escape(k)
        for k in list(self.flows_scalar):   # (graph.py _scalar_input resolves each use)
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
        self.flow_vals[k] = res
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

