"""Checks on tensor data whose failing side raises (`if not torch._is_all_true(valid): raise
ValueError(...)` in torch.distributions' argument and sample validation, `assert (p >= 0).all(),
msg`, `if torch.isnan(loss).any(): raise FloatingPointError`): the truth of the tensor decides a
conditional jump, and the branch not taken by the recording goes straight (no jump, no return)
to a `raise`.  Instead of breaking the graph there (Dynamo turns distributions' validation
off process-wide instead, which changes what an invalid argument does), the graph computes
the condition as an extra output (`t != 0`, a fresh tensor at that point of the graph) and
the replay checks it right after the graph ran (`_AssertMixin.spec_checks`): a value other
than the recorded one rolls back what the replay wrote (as a mid-replay guard that fails:
replay._rollback) and records the call again from its start, which then takes eager's path
(raises eager's error, or records the other branch).  The check is exact whatever the
bytecode scan decides: the scan only picks where a miss is rare (an error path), since a miss
costs the graph's run plus an eager call."""
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


def raising_branch(frame: types.FrameType, truth: bool, after_call: bool = False) -> bool:
    """`frame` is at a conditional jump that pops the truth value `truth` (a tensor's), and
    the branch that value does not take raises.  `after_call`: the frame is at the call whose
    result (`t.item()`) the next instruction, such a jump, pops."""
    code = frame.f_code
    order, pos = _order(code)
    off = frame.f_lasti
    instrs = _instrs(code)
    if after_call:
        i = pos.get(off)
        if i is None or i + 1 >= len(order) or instrs[off][0] != "CALL":
            return False
        off = order[i + 1]
    ins = instrs.get(off)
    if ins is None:
        return False
    if ins[0] in _IF_TRUE:
        taken = truth
    elif ins[0] in _IF_FALSE:
        taken = not truth
    else:
        return False
    i = pos.get(off)
    if i is None or i + 1 >= len(order) or not isinstance(ins[2], int):
        return False
    return _raises_from(code, order[i + 1] if taken else ins[2])


class _AssertMixin:
    """For `_Recorder` (through `_GraphMixin`): the truth of a tensor the open graph computed,
    popped by a jump whose other side raises, as a check after that graph (module docstring)."""

    def _speculate_truth(self, t: Any, res: Any, after_call: bool = False) -> bool:
        """True where `bool(t)` (result `res`; `after_call`: `t.item()`, popped by the jump
        after the call) is held as a check on the open graph's output (no graph break);
        False: it breaks the graph, as before."""
        if type(res) not in ((bool, int, float) if after_call else (bool,)) or type(t) is not torch.Tensor or \
                self.np_env or self.epoch or t.numel() != 1:
            # (self.epoch: after an uncapturable call that may write any state, a miss that
            # records the call again from its start would read that state before the call)
            return False
        seg = self.cur
        e = self.env.get(id(t))
        if seg is None or e is None or e[0] is not t or e[1] != seg.idx:
            return False
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_OWN_DIR):
            f = f.f_back
        if f is None or not raising_branch(f, bool(res), after_call):
            return False
        c = torch.ne(t, 0)   # (under the mode's handler: not recorded by itself)
        self._record(torch.ne, "ne", (t, 0), {}, c)
        ec = self.env.get(id(c))
        if ec is None or ec[0] is not c or ec[1] != seg.idx:
            return False
        self.keep.append(c)
        self.spec_checks.append((seg.idx, self._use_node(seg.idx, ec[2]), bool(res)))
        return True
