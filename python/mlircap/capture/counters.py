"""Integer counters on modules and objects (`self.step += 1`): the value is not guarded.

A recording normally guards every value it reads, so a counter incremented on every call
would make a new variant per call until cache_limit.  Here an `int` attribute read at the
start of the call (before any graph break) is followed through the straight-line bytecode
after the read, without running anything:
* `self.n += k` / `self.n = self.n - k` (arithmetic with constants, stored back to the same
  attribute): the replayed write is that expression of the value the attribute has when the
  replay starts (`_c{i}`), not the constant this recording saw;
* `if self.n % 100 == 0:` (arithmetic with constants, a comparison, a conditional jump): the
  guard is the comparison's outcome (`((n + 1) % 100 == 0) is False`), not the value;
* anything else (the value reaches a graph, a call, a local variable, ...) guards the value
  the attribute had before the call, exactly as an ordinary read does.
The attribute's type (`int`) is guarded; writes to it the bytecode window did not predict
end the symbolic tracking (the write is replayed as its value, as any other).
(flows.py does the same for numbers returned by graph breaks, following the run.)"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

from ._bytecode import _instrs, _nb_op, _order
from .guard_kinds import Equals, TypeIs
from .steps import Write

_ARITH = {"+", "-", "*", "//", "%"}
_WINDOW = 16


@dataclass(slots=True)
class _Counter:
    idx: int              # the replay binds the value at its start to _c{idx}
    name: str             # the attribute
    base: str             # expression of the attribute's value (C[k]['n'])
    pretty: str
    value0: int           # its value before the call
    tmpl: str = "{B}"     # the attribute's current value, as an expression of {B}
    value: int = 0        # ... and as this recording computed it
    expect: int | None = None   # offset of the STORE_ATTR the window predicted
    symbolic: bool = True
    owner: Any = None


class _SymExpr:
    """A replayed write's value given as a Python expression of the replay (values.expr_of)."""
    __slots__ = ("expr",)

    def __init__(self, expr: str) -> None:
        self.expr = expr


def _binop(arg: int | None) -> str | None:
    s = _nb_op(arg)
    return s if s in _ARITH else None


def _window(code: types.CodeType, off: int, name: str) -> tuple[str, str, int | None] | None:
    """What the bytecode after the LOAD_ATTR at `off` does with the value it loads:
    ("store", expr, offset of the STORE_ATTR) or ("guard", comparison, None); None: anything else."""
    offs, index = _order(code)
    ins = _instrs(code)
    i = index.get(off)
    if i is None or i == 0:
        return None
    before = ins[offs[i - 1]]
    stack: list[tuple[str, str]] = [("sym", "{B}")]
    j = i + 1
    while j < len(offs) and j <= i + _WINDOW:
        op, arg, argval, _ = ins[offs[j]]
        nxt = ins[offs[j + 1]] if j + 1 < len(offs) else None
        if op == "LOAD_CONST" and type(argval) in (int, float):
            stack.append(("const", repr(argval)))
        elif op == "BINARY_OP" and len(stack) >= 2 and _binop(arg) is not None:
            b, a = stack.pop(), stack.pop()
            stack.append(("sym", f"({a[1]} {_binop(arg)} {b[1]})"))
        elif op == "COMPARE_OP" and len(stack) >= 2 and argval in ("<", "<=", "==", "!=", ">", ">="):
            b, a = stack.pop(), stack.pop()
            stack.append(("cmp", f"({a[1]} {argval} {b[1]})"))
        elif op.startswith("POP_JUMP") and ("IF_FALSE" in op or "IF_TRUE" in op) and stack == [stack[0]] \
                and stack[0][0] == "cmp":
            return ("guard", stack[0][1], None)
        elif len(stack) == 1 and stack[0][0] == "sym" and nxt is not None and nxt[0] == "STORE_ATTR" and \
                nxt[2] == name and (op == "SWAP" and arg == 2 and before[0] == "COPY" and before[1] == 1 or
                                    op in ("LOAD_FAST", "LOAD_FAST_CHECK") and before[0] == op and
                                    before[2] == argval):
            return ("store", stack[0][1], offs[j + 1])
        else:
            return None
        j += 1
    return None


def _eval(tmpl: str, v: int) -> Any:
    return eval(tmpl.replace("{B}", repr(v)), {"__builtins__": {}})   # ints, constants, + - * // % <...


class _CounterMixin:
    """Counters for `_Recorder` (through `_TracerMixin`): `_counter_read` on an int attribute
    read, `_counter_store` on a store to one, `counter_writes` / `counter_bindings` for the
    replay."""

    def _counter_read(self, frame: types.FrameType | None, obj: object, d: dict, name: str, expr: str,
                      pretty: str, group: tuple) -> bool:
        """An attribute read of obj.name (stored in d): True when handled as a counter."""
        key = (id(obj), name)
        c = self.counters.get(key)
        if c is None:
            if frame is None or self.ncalls or key in self.dirty or type(d.get(name)) is not int or \
                    expr in self.read_exprs:
                return False
            w = _window(frame.f_code, frame.f_lasti, name)
            if w is None:
                return False
            c = _Counter(len(self.counters), name, expr, pretty, d[name], value=d[name], owner=obj)
            self.counters[key] = c
            self.keep.append(obj)
            self.read_exprs[expr] = self.epoch
            self.guard(TypeIs(expr, pretty, int), group=group)
        elif not c.symbolic:
            return False
        else:
            w = _window(frame.f_code, frame.f_lasti, name) if frame is not None else None
            if w is None:
                if not self._counter_flow(frame, c, d.get(name), group):
                    self._counter_escape(c, group)
                return True   # written by this call: read without a guard, as any written value
        kind, tmpl, store = w
        tmpl = tmpl.replace("{B}", c.tmpl)
        try:
            value = _eval(tmpl, c.value0)
        except Exception:
            self._counter_escape(c, group)
            return True
        if kind == "guard":
            full = tmpl.replace("{B}", c.base)
            self.guard(Equals(full, tmpl.replace("{B}", c.pretty), bool(value), exact=bool), pos=0)
        else:
            c.tmpl, c.value, c.expect = tmpl, value, store
        return True

    def _counter_flow(self, frame: types.FrameType | None, c: _Counter, now: Any, group: tuple) -> bool:
        """The counter read back after this call stored its new value (`self.step += 1; w =
        min(1.0, self.step / self.warmup)`): followed by flows.py as the expression of its
        value before the call (`(C[k]['step'] + 1)`, which the replay reads before its writes
        at the end), so that a float computed from it and given to a tensor operator is a
        graph input; anything else flows.py does not follow guards that value (as
        `_counter_escape`)."""
        if frame is None or self.ncalls or c.expect is not None or type(now) is not int or now != c.value or \
                self.pending.get(frame) not in (None, self._flow_tick):
            return False
        k = self._flow_root(None, c.base, c.pretty, c.value0, pos=0, group=group or None)
        self._flow_load(frame, c.tmpl.replace("{B}", c.base), frozenset((k,)), now)
        return True

    def _counter_escape(self, c: _Counter, group: tuple | None = None) -> None:
        """The value reaches something the window does not follow: guard it (pre-call)."""
        c.symbolic = False
        saved, self.ncalls = self.ncalls, 0
        try:
            self._source(c.value0, c.base, c.pretty, argrooted=False, group=group)
        finally:
            self.ncalls = saved

    def _counter_store(self, frame: types.FrameType, obj: object, name: str) -> None:
        """A store to a counter: the one its window predicted, or another value (`self.n = 0`),
        which does not depend on the old one (every read of that went through a window or
        guarded it): from then on the attribute is a value this call wrote, as any other."""
        c = self.counters.get((id(obj), name))
        if c is not None and c.symbolic:
            if c.expect is not None and frame.f_lasti == c.expect:
                c.expect = None
            else:
                c.symbolic = False

    def counter_bindings(self) -> list[tuple[str, str]]:
        """(name, expression) bound at the start of the replay, one per counter written."""
        return [(f"_c{c.idx}", c.base) for c in self.counters.values() if c.symbolic and c.tmpl != "{B}"]

    def counter_writes(self, writes: list[Write]) -> list[Write]:
        """The replayed writes, a counter's value as its expression of `_c{idx}`."""
        by_target = {}
        for c in self.counters.values():
            if not c.symbolic or c.tmpl == "{B}":
                continue
            d = getattr(c.owner, "__dict__", None)
            name = c.name
            now = d.get(name) if type(d) is dict else None
            if type(now) is not int or now != c.value or c.expect is not None:
                self._counter_escape(c)   # written by code the tracer did not see
                continue
            snap = self.snaps.get(id(c.owner))
            if snap is not None:
                by_target[(f"{snap[2]}.__dict__", name)] = c
        out, done = [], set()
        for w in writes:
            c = by_target.get((w.target, w.key)) if w.kind == "item" else None
            if c is not None and w.value == c.value and type(w.value) is int:
                w = Write(w.kind, w.target, w.key, _SymExpr(c.tmpl.replace("{B}", f"_c{c.idx}")), w.setter)
                done.add(id(c))
            out.append(w)
        flushed = self.__dict__.get("flush_sym") or ()   # (written as its expression before a break: flush_writes.py)
        for c in self.counters.values():
            if c.symbolic and c.tmpl != "{B}" and id(c) not in done and id(c) not in flushed:
                self._counter_escape(c)   # no write found to give as an expression: guard the value
        return out
