"""Where a replay failing a guard placed after an uncapturable call goes: the continuations
of the frame from there (_continuations) when that call may write any state, or, for a call
that wrote tensors the function read before it (an optimizer's step), the guards checked
right before it instead (_hoist_before)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Unreplayable
from .guards import start_state, start_tensor
from .resume_code import Continuation, continuation_code

if TYPE_CHECKING:  # pragma: no cover
    from .recorder import _Recorder
    from .resumes import ResumePoint


def _continuations(rec: _Recorder) -> dict[int, list[tuple[str, ResumePoint]]]:
    """The continuations (constant and resume point, of the frame that made the call and
    of each frame that call returns into, innermost first) each guard position after an
    uncapturable call that may write any state needs: a replay that fails a guard there
    runs the rest of the frame through it (resume_code.py).  Running the function again
    from its start would read before that call what the call has written since.  A guard
    there without one is a known gap (see below)."""
    kw = min((k for k, _ in rec.tensor_writing_calls), default=None)
    if not rec.epoch_starts and kw is None:
        return {}
    if kw is not None:
        _hoist_before(rec, kw)
    # the first uncapturable call that may write any state, or that wrote tensors the function
    # read before it (an optimizer's step, which starts no epoch: classify._optimizer_owning_call)
    k0 = min(rec.epoch_starts + [kw + 1 if kw is not None else 1 << 30]) - 1
    out = {}
    for p in sorted({p.pos for p in rec.guards if p.pos > k0}):
        rp = rec.resumes.get(p - 1) if not rec.uses_rng else None   # (a miss restores the RNG state, records again)
        if rp is None and kw is not None and p > kw and rec.uses_rng:
            # recording again is no option after such a call (below); a continuation is: the
            # replay's random ops drew what eager draws (random islands), so the generator is
            # where eager's is when the rest of the frame runs eagerly from the break
            rp = rec.resumes.get(p - 1)
        if rp is None and kw is not None and p > kw and any(k > kw for k in rec.deferred):
            # a guard on a number read after the graph (deferred.py) past the step: that read is
            # a graph break from the next recording on, where the frame can be continued from
            # (this call ran for real: correct)
            rec.captured.__dict__.setdefault("defer_off", set()).update(
                d[2] for k, d in rec.deferred.items() if k > kw)
            rec.relearn = True
            rec.unreplayable = "a guard on a number read after an optimizer's step, past its graph"
            raise Unreplayable(rec.unreplayable)
        if rp is None and kw is not None and p > kw:
            # the call wrote in place tensors the function read before it (an optimizer's step
            # on the parameters its forward read): a replay failing this guard would record
            # again from the start, the forward reading the parameters already stepped, and
            # the step not run again (its result logged): a wrong result.  No continuation
            # from there: the function runs eagerly for these arguments (what it calls is
            # captured on its own)
            raise Unreplayable(f"a guard after {dict(rec.tensor_writing_calls)[kw]}, which wrote in place "
                               f"tensors the function read before it, with no continuation from there")
        if rp is None:
            # Known gap: no continuation from there (the call made through library code, a
            # write to external state before it that could not be made before the call,
            # external_calls._external_call): a replay failing this guard records again from
            # the start (or tries another variant, whose guards before the call check the
            # state the call left), reading what the call wrote before it.  Giving up on such
            # recordings instead costs deepcopy, `with lock:` and fork_rng captures.
            continue
        chain = []   # the break's frame first, then the frames its call returns into (ResumePoint.outer)
        for r in [rp] + rp.outer:
            unbound = tuple(i for i, e in enumerate(r.local_exprs) if e is None)
            real = tuple(e is not None for e in r.stack_exprs)
            chain.append((rec.const(Continuation(continuation_code(r.code, r.offset, unbound, real), rec.captured)), r))
        out[p - 1] = chain
    return out


def _hoist_before(rec: _Recorder, kw: int) -> None:
    """Guards placed after the uncapturable call kw, which wrote tensors the function read
    before it (an optimizer's step), with no call that may write any state in between, that
    read only Python state of the call's start (guards.start_state: `opt.zero_grad` looked up
    after the step, the branch of a dict counter the function increments): checked right
    before call kw instead, where they decide the same (the replay writes the program's state
    at its end) and where a miss can still record the call again from its start.  After the
    step, a miss needed a continuation (_continuations), without which the function ran
    eagerly.  So is the metadata guard of a tensor first read after the step at such a
    location (guards.start_tensor) where every tensor-writing call from kw on before it is an
    optimizer's own step: a step writes the data of tensors, not their metadata (a TD3 update
    reading its actor's parameters after the critic's step ran eagerly)."""
    nxt = min((s for s in rec.epoch_starts if s > kw), default=1 << 30)
    writers = [k for k, _ in rec.tensor_writing_calls]
    for p in rec.guards:
        if kw < p.pos < nxt and (start_state(p.guard, p.expr, rec.consts) or start_tensor(p.guard) and
                                 all(k in rec.own_steps for k in writers if k < p.pos)):
            p.pos = kw
