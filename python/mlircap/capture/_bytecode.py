"""Torch-free bytecode helpers for the opcode tracer (instruction decoding and static
value-stack depths).  CPython 3.12 does not store the stack pointer before opcode trace
events, so the tracer locates stack values through these statically computed depths."""
from __future__ import annotations

import dis
import os
import sys
import types

PY312 = sys.version_info >= (3, 12)

# code -> {offset: (opname, arg, argval, static stack depth or -1)}
Instr = tuple[str, int | None, object, int]
_instr_cache: dict[types.CodeType, dict[int, Instr]] = {}
# MLIRCAP_CAPTURE_STATIC_DEPTH=1 forces static depths on 3.11; =check also compares them
# with the live stack pointer at every traced instruction.  (Read here, not through
# mlircap.config: this module and _ext.py load standalone, without the package and torch,
# for test_bytecode.py; config.ENV lists the variable.)
_STATIC_DEPTH = PY312 or os.environ.get("MLIRCAP_CAPTURE_STATIC_DEPTH") in ("1", "check")
_CHECK_DEPTH = os.environ.get("MLIRCAP_CAPTURE_STATIC_DEPTH") == "check"
_UNCOND = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"}
_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}


def _stack_depths(code: types.CodeType, instrs: list[dis.Instruction]) -> dict[int, int]:
    idx = {ins.offset: i for i, ins in enumerate(instrs)}
    depth: dict[int, int] = {}
    work = [(0, 0)]
    try:
        for e in dis._parse_exception_table(code):
            work.append((e.target, e.depth + 1 + (1 if e.lasti else 0)))
    except Exception:
        pass
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    while work:
        off, d = work.pop()
        i = idx.get(off)
        while i is not None and i < len(instrs):
            ins = instrs[i]
            if ins.offset in depth:
                break
            depth[ins.offset] = d
            op = ins.opcode
            arg = ins.arg if op >= dis.HAVE_ARGUMENT else None
            if op in jumps and isinstance(ins.argval, int):
                try:
                    work.append((ins.argval, d + dis.stack_effect(op, arg, jump=True)))
                except ValueError:
                    pass
                if ins.opname in _UNCOND:
                    break
            if ins.opname in _TERMINAL:
                break
            if ins.opname == "PRECALL":  # 3.11 compiler books -oparg here, but nothing is popped
                pass
            elif ins.opname == "CALL" and not PY312:
                d -= arg + 1
            elif ins.opname == "RETURN_GENERATOR":
                d += 1  # the resumed generator finds a value to POP_TOP
            else:
                try:
                    d += dis.stack_effect(op, arg, jump=False)
                except ValueError:
                    pass
            i += 1
    return depth


def _instrs(code: types.CodeType) -> dict[int, Instr]:
    """{offset: instruction}.  On 3.11 an instruction with EXTENDED_ARG prefixes (a jump over more
    than 255 code units, the 257th name of a function) traces one opcode event, at its first
    prefix (ceval dispatches the instruction from the prefix untraced): that offset maps to the
    instruction itself, as does its own offset (the frame's f_lasti while it runs a call).  As
    a prefix, a store there was missed (its write not replayed: a wrong result) and a followed
    number lost its step."""
    d = _instr_cache.get(code)
    if d is None:
        d = {}
        ins_list = list(dis.get_instructions(code))
        depths = _stack_depths(code, ins_list) if _STATIC_DEPTH else {}
        prefixes: list[int] = []
        for ins in ins_list:
            d[ins.offset] = (ins.opname, ins.arg, ins.argval, depths.get(ins.offset, -1))
            if ins.opname == "EXTENDED_ARG" and not PY312:
                prefixes.append(ins.offset)
                continue
            for o in prefixes:
                d[o] = d[ins.offset][:3] + (depths.get(o, depths.get(ins.offset, -1)),)
                _prefixed.setdefault(code, {})[ins.offset] = prefixes[0]
            prefixes = []
        _instr_cache[code] = d
    return d


_offset_index: dict[types.CodeType, tuple[list[int], dict[int, int]]] = {}
# code -> {offset of an instruction with EXTENDED_ARG prefixes: the offset of its first prefix}
_prefixed: dict[types.CodeType, dict[int, int]] = {}


def _order(code: types.CodeType) -> tuple[list[int], dict[int, int]]:
    """The offsets of the code's traced instructions in order, and each offset's position
    among them (an instruction with EXTENDED_ARG prefixes: at its first prefix, its own
    offset and its later prefixes at that position too)."""
    r = _offset_index.get(code)
    if r is None:
        d = _instrs(code)
        pre = _prefixed.get(code, {})
        inner = set(pre) | {o for o in d if d[o] is not None and o not in pre and
                            any(f < o < r_ for r_, f in pre.items())}
        offs = [o for o in d if o not in inner]
        pos = {o: i for i, o in enumerate(offs)}
        for o in inner:
            first = pre.get(o, max((f for r_, f in pre.items() if f < o < r_), default=o))
            pos[o] = pos[first]
        r = (offs, pos)
        _offset_index[code] = r
    return r


def _nb_op(arg: int | None) -> str | None:
    """The operator of BINARY_OP `arg` ("+", "//", ...; in-place forms as the plain one)."""
    try:
        s = dis._nb_ops[arg][1]   # type: ignore[attr-defined]
    except (IndexError, TypeError):
        return None
    return s[:-1] if s.endswith("=") else s


_NONE_JUMPS = ("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE",
               "POP_JUMP_BACKWARD_IF_NOT_NONE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")


def _none_tested(code: types.CodeType, off: int) -> bool:
    """The value the instruction at `off` pushes is only tested against None by the code that
    follows it (`x.grad_fn is None`, `if x.grad_fn is not None:`): `LOAD_CONST None; IS_OP`
    or a jump on None.  Nothing else in the frame can see the value."""
    order, pos = _order(code)
    i = pos.get(off)
    if i is None:
        return False
    d = _instrs(code)
    nxt = [d[o] for o in order[i + 1:i + 3]]
    if nxt and nxt[0][0] in _NONE_JUMPS:
        return True
    return len(nxt) == 2 and nxt[0][0] == "LOAD_CONST" and nxt[0][2] is None and nxt[1][0] == "IS_OP"
