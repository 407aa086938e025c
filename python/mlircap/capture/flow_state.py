"""The state flows.py keeps for the numbers it follows (`_Flow`: the stack slots of one
frame holding values computed from them) and the stack bookkeeping of one instruction:
`_shift`, `_operand`, `_next_offsets`; `_followable` says which floats may be followed."""
from __future__ import annotations

import re
import sys
import types
from typing import Any

from ._bytecode import _instrs, _order
from .classify import _classify
from .frame_hook import _E
from .typeinfo import _np_float

_ATTR_KEYS = 1 << 20
_JUMPS = ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")

def _followable(v: Any) -> bool:
    """A float a variable or a graph input may follow: a fresh object of each computation (not
    an int: small ints are shared, so another int in a variable could look the same); not NaN."""
    return (type(v) is float or _np_float(v)) and v == v


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
