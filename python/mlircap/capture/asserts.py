"""Checks on tensor data whose failing side raises (`if not torch._is_all_true(valid): raise
ValueError(...)` in torch.distributions' argument and sample validation, `assert (p >= 0).all(),
msg`, `if torch.isnan(loss).any(): raise FloatingPointError`): the truth of the tensor decides a
conditional jump, and the branch not taken by the recording goes straight (no jump, no return)
to a `raise`.  Instead of breaking the graph there (Dynamo turns distributions' validation
off process-wide instead, which changes what an invalid argument does), the graph computes
the condition as an extra output (`t != 0`, a fresh tensor at that point of the graph) and
the replay checks it right after the graph ran (`_AssertMixin.spec_checks`): a value other
than the recorded one rolls back what the replay wrote (as a mid-replay guard that fails:
replay_helpers._rollback) and records the call again from its start, which then takes eager's path
(raises eager's error, or records the other branch).  The check is exact whatever the
bytecode scan decides: the scan only picks where a miss is rare (an error path), since a miss
costs the graph's run plus an eager call.

Other tensor branches (an early exit, `if x.abs().max() > c: x = x / ...`, a `break` out of a
`for` loop; not in a `while` loop, whose trip count the data decides) are checked so too, up to
_MAX_OTHER per recording, until a call takes their other side: that replay misses once
(`Deopt`), its sites break the graph in the function's later recordings and the variant is
dropped, so a branch the data flips costs one wasted graph run, not one per call."""
from __future__ import annotations

import sys
import types
from typing import Any

import torch

from ._bytecode import _instrs, _order
from .classify import _OWN_DIR

_IF_TRUE = frozenset({"POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_IF_TRUE"})
_IF_FALSE = frozenset({"POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE"})
# instructions that leave a straight path without raising
_LEAVES = frozenset({"RETURN_VALUE", "RETURN_CONST", "RERAISE", "FOR_ITER", "SEND", "YIELD_VALUE",
                     "RETURN_GENERATOR", "END_FOR"})
_ALWAYS = frozenset({"JUMP_FORWARD", "JUMP", "JUMP_NO_INTERRUPT"})
_MAX_SCAN = 300


def _raises_from(code: types.CodeType, off: int) -> bool:
    """Whether every path from `off` ends in a `raise X`: forward jumps only (a message's
    conditional expression), no return, no loop."""
    instrs = _instrs(code)
    order, pos = _order(code)
    work, seen = [off], set()
    while work:
        i = pos.get(work.pop())
        while True:
            if i is None or i >= len(order) or len(seen) > _MAX_SCAN:
                return False
            o = order[i]
            if o in seen:
                break
            seen.add(o)
            op, arg, argval = instrs[o][:3]
            if op == "RAISE_VARARGS":
                if not arg:
                    return False
                break
            if op in _LEAVES or "JUMP" in op and ("BACKWARD" in op or not isinstance(argval, int) or argval <= o):
                return False
            if "JUMP" in op:
                work.append(argval)
                if op in _ALWAYS:
                    break
            i += 1
    return True


def branch_kind(frame: types.FrameType, truth: bool, after_call: bool = False) -> tuple[str, int] | None:
    """Where `frame` is at a conditional jump that pops the truth value `truth` (a tensor's;
    `after_call`: the frame is at the call whose result, `t.item()`, the next instruction,
    such a jump, pops): ("raise", offset) where the branch that value does not take raises,
    ("other", offset) for another jump outside the loops of its code; None otherwise."""
    code = frame.f_code
    order, pos = _order(code)
    off = frame.f_lasti
    instrs = _instrs(code)
    if after_call:
        i = pos.get(off)
        if i is None or i + 1 >= len(order) or instrs[off][0] != "CALL":
            return None
        off = order[i + 1]
    ins = instrs.get(off)
    if ins is None:
        return None
    if ins[0] in _IF_TRUE:
        taken = truth
    elif ins[0] in _IF_FALSE:
        taken = not truth
    else:
        return None
    i = pos.get(off)
    if i is None or i + 1 >= len(order) or not isinstance(ins[2], int):
        return None
    if _raises_from(code, order[i + 1] if taken else ins[2]):
        return "raise", off
    return None if _in_loop(code, off) else ("other", off)


def raising_branch(frame: types.FrameType, truth: bool, after_call: bool = False) -> bool:
    k = branch_kind(frame, truth, after_call)
    return k is not None and k[0] == "raise"


_loops: dict[types.CodeType, list[tuple[int, int]]] = {}


def _in_loop(code: types.CodeType, off: int) -> bool:
    """Whether `off` lies in a `while` loop of `code` (between a backward jump's target and
    itself, the target no FOR_ITER): a check there would unroll a loop whose trip count the
    data decides into one graph.  A `for` loop over a container or range is unrolled anyway
    (its length is guarded); a data-dependent `break` out of it only ends it early."""
    spans = _loops.get(code)
    if spans is None:
        ins = _instrs(code)
        spans = _loops[code] = [(argval, o) for o, (op, _a, argval, _d) in ins.items()
                                if "JUMP" in op and isinstance(argval, int) and argval <= o and
                                ins.get(argval, ("",))[0] != "FOR_ITER"]
    return any(t <= off <= o for t, o in spans)


class Deopt:
    """Called by a replay whose check at a jump with no raise (`other` sites) failed: those
    sites are not checked again by recordings of this function (they break the graph, as
    before: the data takes both sides) and the variant is dropped (cache.dispatch), so a
    flipping branch costs one wasted graph run, not one per call."""

    __slots__ = ("captured", "sites", "variant")

    def __init__(self, captured: Any, sites: list) -> None:
        self.captured, self.sites, self.variant = captured, sites, None

    def __call__(self) -> None:
        self.captured.__dict__.setdefault("spec_off", set()).update(self.sites)
        if self.variant is not None:
            self.variant.dead = True
            self.variant.guard = _never


def _never(*_: Any) -> bool:
    return False


# checks at jumps with no raise per recording (each a possible wasted graph run)
_MAX_OTHER = 16


class _AssertMixin:
    """For `_Recorder` (through `_GraphMixin`): the truth of a tensor the open graph computed,
    popped by a jump whose other side raises, as a check after that graph (module docstring)."""

    def _speculate_truth(self, t: Any, res: Any, after_call: bool = False) -> bool:
        """True where `bool(t)` (result `res`; `after_call`: `t.item()`, popped by the jump
        after the call) is held as a check on the open graph's output (no graph break);
        False: it breaks the graph, as before."""
        if type(res) not in ((bool, int, float) if after_call else (bool,)) or type(t) is not torch.Tensor or \
                self.np_env or self.wrote_eagerly() or t.numel() != 1:
            # (after an uncapturable call that may write any state or that wrote tensors (an
            # optimizer's step), a miss that records the call again from its start would read
            # that state before the call: the branch breaks the graph, where the frame can be
            # continued from, resumes.py)
            return False
        seg = self.cur
        e = self.env.get(id(t))
        if seg is None or e is None or e[0] is not t or e[1] != seg.idx:
            return False
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_OWN_DIR):
            f = f.f_back
        kind = None if f is None else branch_kind(f, bool(res), after_call)
        if kind is None:
            return False
        site = None
        if kind[0] == "other":
            site = (f.f_code, kind[1])
            if site in self.captured.__dict__.get("spec_off", ()) or \
                    sum(1 for c in self.spec_checks if c[3] is not None) >= _MAX_OTHER:
                return False
        c = torch.ne(t, 0)   # (under the mode's handler: not recorded by itself)
        self._record(torch.ne, "ne", (t, 0), {}, c)
        ec = self.env.get(id(c))
        if ec is None or ec[0] is not c or ec[1] != seg.idx:
            return False
        self.keep.append(c)
        self.spec_checks.append((seg.idx, self._use_node(seg.idx, ec[2]), bool(res), site))
        return True
