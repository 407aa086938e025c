"""Continuations of a frame (Dynamo's resume functions, made smaller): a code object that
starts the captured function's code at an instruction in its middle, with its variables
and value stack given as arguments.  A replay whose guard after an uncapturable call fails
runs the rest of the frame through one (`Continuation`), from the point it reached, instead
of running the call again from its start: that call, which may have written any state the
frame read before it, already ran (replay.py, resumes.py)."""
from __future__ import annotations

import dis
import sys
import types
from typing import Any

_OP = dis.opmap
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_CO_GENERATOR_LIKE = 0x20 | 0x80 | 0x100 | 0x200   # generator, coroutine, async generator, iterable coroutine
_NO_LOCATION = 15   # location table entry code: no source location


def resumable_code(code: types.CodeType) -> bool:
    """Whether continuations of `code` can be made: a plain function (not a generator or
    coroutine) whose variables are no cells of inner functions (a continuation of it would
    get new cells, which the closures the frame already made do not see)."""
    return sys.version_info[:2] in ((3, 11), (3, 12)) and not code.co_cellvars and \
        not code.co_flags & _CO_GENERATOR_LIKE and \
        (not code.co_freevars or code.co_nlocals + len(code.co_freevars) + code.co_stacksize < 256)


def _shifted_derefs(co: bytes, first: int, shift: int) -> bytes | None:
    """`co` with the free-variable instructions' indexes from `first` on moved by `shift`.
    Those index the frame's locals-plus array (variables, then cells, then free variables):
    the continuation's stack arguments are variables added before the free variables.  None
    where an index would need another EXTENDED_ARG unit (the code's size would change)."""
    out = bytearray(co)
    ext, start = 0, 0
    for i in range(0, len(co), 2):
        op, arg = co[i], co[i + 1] | ext
        if op == _OP["EXTENDED_ARG"]:
            ext, start = arg << 8, start if ext else i
            continue
        if op in dis.hasfree and arg >= first and shift:
            new, n = arg + shift, (i - start) // 2 if ext else 0   # n: its EXTENDED_ARG units
            if new >> (8 * (n + 1)):
                return None
            for u in range(n + 1):
                out[i - 2 * u + 1] = (new >> (8 * u)) & 0xFF
        ext, start = 0, i + 2
    return bytes(out)


def _ins(op: str, arg: int = 0) -> list[int]:
    """The code units of one instruction (with EXTENDED_ARG prefixes for a large arg)."""
    out: list[int] = []
    ext = [(arg >> s) & 0xFF for s in (24, 16, 8) if arg >> s]
    for e in ext:
        out += [_OP["EXTENDED_ARG"], e]
    return out + [_OP[op], arg & 0xFF]


def _varint(v: int, first: bool) -> bytes:
    groups = [v & 63]
    v >>= 6
    while v:
        groups.append(v & 63)
        v >>= 6
    groups.reverse()
    out = bytearray(g | 64 for g in groups[:-1]) + bytearray([groups[-1]])
    if first:
        out[0] |= 128
    return bytes(out)


def _shifted_exception_table(code: types.CodeType, units: int) -> bytes:
    out = bytearray()
    for e in dis._parse_exception_table(code):   # type: ignore[attr-defined]
        out += _varint(e.start // 2 + units, True) + _varint((e.end - e.start) // 2, False)
        out += _varint(e.target // 2 + units, False) + _varint((e.depth << 1) | int(e.lasti), False)
    return bytes(out)


def _no_location(units: int) -> bytes:
    out = bytearray()
    while units > 0:
        n = min(units, 8)
        out.append(0x80 | (_NO_LOCATION << 3) | (n - 1))
        units -= n
    return bytes(out)


def continuation_code(code: types.CodeType, offset: int, unbound: tuple[int, ...], stack: tuple[bool, ...]
                      ) -> types.CodeType:
    """`code` started at byte `offset` (an instruction boundary) with its variables and value
    stack given: the continuation's arguments are the variables of `code` (co_varnames, in
    order; those in `unbound` are unbound at the offset) then the stack values, bottom first
    (`stack[j]` False: slot j holds the NULL of a call sequence, its argument is ignored).
    The prologue binds them and jumps to the offset; the original instructions follow
    unchanged, their exception table shifted past the prologue."""
    nv = len(code.co_varnames)
    names = code.co_varnames + tuple(f"__stack{j}" for j in range(len(stack)))
    pro: list[int] = []
    if code.co_freevars:
        pro += _ins("COPY_FREE_VARS", len(code.co_freevars))
    pro += _ins("RESUME", 0)
    for i in unbound:
        pro += _ins("DELETE_FAST", i)
    for j, real in enumerate(stack):
        pro += _ins("LOAD_FAST", nv + j) if real else _ins("PUSH_NULL")
    # the jump lands on offset: its delta, counted from the end of the jump, is the offset
    # itself (the original code follows the prologue)
    pro += _ins("JUMP_FORWARD", offset // 2)
    units = len(pro) // 2
    body = _shifted_derefs(code.co_code, nv, len(stack))
    if body is None:   # (resumable_code keeps the indexes under 256: not met)
        raise ValueError("a continuation would need longer free-variable instructions")
    flags = code.co_flags & ~(_CO_VARARGS | _CO_VARKEYWORDS)
    return code.replace(
        co_code=bytes(pro) + body,
        co_argcount=len(names), co_posonlyargcount=0, co_kwonlyargcount=0, co_nlocals=len(names),
        co_varnames=names, co_flags=flags, co_stacksize=code.co_stacksize + len(stack) + 2,
        co_exceptiontable=_shifted_exception_table(code, units),
        co_linetable=_no_location(units) + code.co_linetable,
        co_name=code.co_name, co_qualname=f"{code.co_qualname} (continued at {offset})")


class Continuation:
    """The rest of the captured frame from one point of a recording: called by the replay
    (`C[j](F, values...)`, the captured function and the continuation's arguments) when a
    guard after an uncapturable call fails; it returns what the function returns.  The
    continuation is a function of its own, captured like the function (`parent`'s backend
    and limits: its variants, guards and graphs), as Dynamo compiles resume functions."""

    __slots__ = ("code", "parent", "_fn")

    def __init__(self, code: types.CodeType, parent: Any) -> None:
        self.code = code
        self.parent = parent   # the function's cache._Captured
        self._fn: tuple[Any, types.FunctionType, Any] | None = None

    def __call__(self, func: types.FunctionType, *values: Any) -> Any:
        from .cache import _Captured   # (above this module: the variants' cache)
        from .frame_hook import _active
        c = self._fn
        if c is None or c[0] is not func:
            fn = types.FunctionType(self.code, func.__globals__, self.code.co_name, None, func.__closure__)
            p = self.parent
            cap = _Captured(fn, p.backend, p.cache_limit, strict=p.strict, break_limit=p.break_limit)
            c = self._fn = (func, fn, cap)
        active = _active()
        active.append([c[2], False])   # this thread's call being dispatched (as _Captured.__call__)
        try:
            return c[2].dispatch(c[1], values)
        finally:
            active.pop()
