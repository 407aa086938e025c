"""Followed floats inside a container the program builds and returns later (`metrics = {"epe":
epe.mean().item(), ...}; return flow_loss, metrics` in a helper, `loss, metrics = helper(...)`, then
`return loss.detach(), metrics`: RAFT's training step), for `_FlowMixin` (flows.py): the replay
returns them as their expressions, so they need no guard on their values (each was guarded by
value, a new recording on every call until cache_limit).

A tuple, list or dict built by BUILD_* from followed floats (and containers of them) is followed
as one stack slot, a `_Box`, while the code only moves it: stored into a variable and loaded
back, built into another tuple / list / dict, a tuple or list unpacked again (UNPACK_SEQUENCE: its
floats are followed slots again), returned by a traced function to the traced code calling it.
Returned by the captured function, its floats are returned as their expressions (flows.py
`_flow_returned`, by identity: each float is a fresh object).  Any other instruction that takes
the slot (a subscript, a call it is handed to, iterating it, a store into an attribute or a
cell, ...) ends it: its numbers are guarded by value, as every escaped number.  Ints and texts
are not boxed (an int may be a shared small-int object)."""
from __future__ import annotations

import types
from typing import Any

from .flow_state import _JUMPS, _Flow, _followable, _shift
from .frame_hook import _E

_PASS = object()   # (not a box's instruction: the ordinary follower handles it)
_NOOPS = ("PRECALL", "KW_NAMES", "NOP", "EXTENDED_ARG", "CACHE", "RESUME", "PUSH_NULL", "SWAP")
_PUSH = ("LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_GLOBAL")
_POP1 = ("LOAD_ATTR", "LOAD_METHOD", "POP_TOP", "STORE_FAST", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT",
         "UNARY_POSITIVE", "GET_ITER", "RETURN_VALUE", "UNPACK_SEQUENCE", "STORE_GLOBAL", "STORE_DEREF",
         "STORE_NAME", "GET_LEN")
_POP2 = ("BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "BINARY_SUBSCR", "STORE_ATTR")
_KINDS = {"BUILD_TUPLE": tuple, "BUILD_LIST": list, "BUILD_MAP": dict, "BUILD_CONST_KEY_MAP": dict}


class _Box:
    """A container of followed floats: members {index, or ("key", k) of a dict: (expression or
    _Box, flow keys, the float or container)}."""
    __slots__ = ("kind", "members")

    def __init__(self, kind: type, members: dict[Any, tuple]) -> None:
        self.kind, self.members = kind, members

    def leaves(self) -> list[tuple[str, frozenset[int], Any]]:
        out = []
        for e, ks, obj in self.members.values():
            out += e.leaves() if type(e) is _Box else [(e, ks, obj)]
        return out


def _reads(op: str, arg: int) -> int | None:
    """How many stack slots from the top the instruction takes (None: not known here)."""
    if op in _NOOPS or op in _JUMPS or op in _PUSH:
        return 0
    if op in _POP1 or op.startswith("POP_JUMP"):
        return 1
    if op in _POP2:
        return 2
    if op in ("STORE_SUBSCR", "BINARY_SLICE"):
        return 3
    if op == "FORMAT_VALUE":
        return 2 if arg & 4 else 1
    if op == "CALL":
        return arg + 2
    if op == "COPY":
        return arg
    if op in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SLICE", "BUILD_STRING"):
        return arg
    if op == "BUILD_MAP":
        return 2 * arg
    if op == "BUILD_CONST_KEY_MAP":
        return arg + 1
    return None


class _FlowBoxMixin:
    """`_flow_box_op` (the instructions that take a box), `_flow_box_build` (a container built
    from followed values)."""

    def _flow_box_op(self, fl: _Flow, fr: types.FrameType, ins: tuple) -> Any:
        """The instruction ins about to run in fr, where a slot of fl holds a box: True / None
        (followed / not: everything escapes) or _PASS (it takes no box: the follower goes on)."""
        op, arg, _, _ = ins
        arg = arg or 0
        boxes = [p for p, (e, _) in fl.slots.items() if type(e) is _Box]
        if op in _KINDS:
            return _PASS   # (flows.py: a box built into a box)
        n = _reads(op, arg)
        if n is None:
            return None
        if not any(p < n for p in boxes):
            return _PASS
        if op == "STORE_FAST" and 0 in boxes:   # `metrics = {...}`: its loads are followed again
            self.flow_locals[(fr, arg)] = (*fl.slots[0], _E.peek(fr, 0))
            self.flow_stored = (fr, arg, fr.f_lasti)
            self.keep.append(_E.peek(fr, 0))
            return _shift(fl, 1, 0)
        if op == "POP_TOP" or op == "RETURN_VALUE":
            return _PASS   # (dropped: nothing read it; returned: flows.py)
        if op == "UNPACK_SEQUENCE" and 0 in boxes:   # `loss, metrics = helper(...)`
            box, _ = fl.slots[0]
            c = _E.peek(fr, 0)
            if type(c) is not box.kind or box.kind not in (tuple, list) or len(c) != arg or \
                    any(type(i) is not int or c[i] is not m[2] for i, m in box.members.items()):
                return None
            _shift(fl, 1, arg)
            for i, (e, ks, _) in box.members.items():
                fl.slots[i] = (e, ks)   # (item 0 on top)
            return True
        return None

    def _flow_box_build(self, fl: _Flow, fr: types.FrameType, op: str, n: int, vals: range,
                        paths: dict[int, Any] | None) -> bool | None:
        """BUILD_* about to run in fr takes followed slots (and no followed key): the container
        becomes a box.  None: a slot holding anything but a float or a box (an int, a text)."""
        if paths is None or any(p < n and p not in vals for p in fl.slots):
            return None
        members = {}
        for p in vals:
            t = fl.slots.get(p)
            if t is None:
                continue
            obj = _E.peek(fr, p)
            if not (type(t[0]) is _Box or type(t[0]) is str and _followable(obj)):
                return None
            members[paths[p]] = (t[0], t[1], obj)
        ks = frozenset().union(*(m[1] for m in members.values()))
        return _shift(fl, n, 1, (_Box(_KINDS[op], members), ks))
