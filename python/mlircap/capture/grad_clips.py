"""Gradient clipping right after a graph break (`loss.backward(); clip_grad_norm_(m.parameters(),
1.0); opt.step()`): `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` called where no graph
operation was recorded since the break before it runs eagerly with that break, as a replayed
call (external_calls), instead of opening a graph of its own that the optimizer's step then
splits off again: one break where there were two (the clipping ops are torch's foreach kernels
in eager, on the gradients the backward just wrote).  Called anywhere else (after graph
operations, before any break) it is recorded into the graph as before.  A generator of a
module's parameters handed to it (`m.parameters()`, not started) is made again at replay."""
from __future__ import annotations

import inspect
import types
from typing import Any

import torch

from .counters import _SymExpr
from .steps import CallStep

_CLIP_HELPERS = tuple(f for f in (getattr(torch.nn.utils, "clip_grad_norm_", None),
                                  getattr(torch.nn.utils, "clip_grad_value_", None),
                                  getattr(torch.nn.utils, "clip_grad_norm", None)) if f is not None)
_PARAMETERS = torch.nn.Module.parameters.__code__


def clip_after_break(rec: Any, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int | None) -> bool:
    """Run the clipping call f(*args, **kwargs) with the break before it (True), where f is one
    of torch's clipping helpers and the recording's last step is a break with no graph
    operation since."""
    if slot is None or not any(f is h for h in _CLIP_HELPERS) or not rec.steps or \
            not isinstance(rec.steps[-1], CallStep) or rec.cur is not None and rec.cur.nops:
        return False
    args = list(args)
    if args and type(args[0]) is types.GeneratorType:
        g = _parameters_expr(rec, args[0])
        if g is None:
            return False
        args[0] = g
    # inert: torch's clipping code reads and writes the gradients alone (tensors, whose in-place
    # writes external_calls tracks by their versions), no state of the program's Python objects:
    # no new epoch, so the numbers read after it are still read after the graph (deferred.py)
    # rerun: after a backward, a replay that misses past it restores the gradients (replay_helpers._save_grads) and
    # the recording that follows runs the backward again: the clipping must run again too (its logged
    # result reused left the new gradients unclipped: a wrong result)
    rec._external_call(frame, f, args, kwargs, f"call to {f.__name__} right after a graph break", slot, inert=True,
                       rerun=bool(rec.__dict__.get("grad_writes")))
    return True


def _parameters_expr(rec: Any, gen: types.GeneratorType) -> _SymExpr | None:
    """`m.parameters()` (or `m.parameters(recurse=...)`) not started yet, of a module the
    recording tracks: its replay expression; None for any other generator."""
    if gen.gi_code is not _PARAMETERS or inspect.getgeneratorstate(gen) != inspect.GEN_CREATED:
        return None
    loc = gen.gi_frame.f_locals
    m, recurse = loc.get("self"), loc.get("recurse")
    if not isinstance(m, torch.nn.Module) or id(m) not in rec.src or type(recurse) is not bool:
        return None
    return _SymExpr(f"{rec.src[id(m)][0]}.parameters(recurse={recurse})")
