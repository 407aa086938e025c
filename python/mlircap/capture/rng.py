"""torch's RNG state across a replay that misses.

A replay whose mid-replay guard fails rolls the RNG back to its state before the call (the
graphs it ran drew random numbers the next variant draws again), but the uncapturable calls
it ran are not run again: the next variant and a re-recording take their logged results
(`_Miss.log`).  Such a call may have changed the RNG (`torch.manual_seed`, `set_rng_state`,
a random op run eagerly), so in a replay that may roll back, each logged result carries the
RNG state the call left (`_RngLogged`), and whoever takes the result in its place restores
that state (`_unlog`), as if the call had run again."""
from __future__ import annotations

from typing import Any

import torch

from .base import _Raised

RngStates = tuple[torch.Tensor, list[torch.Tensor] | None]


def _rng_states() -> RngStates:
    """The state of torch's default generators: the CPU one, and CUDA's once CUDA is in use."""
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)


def _set_rng_states(s: RngStates) -> None:
    torch.set_rng_state(s[0])
    if s[1] is not None:
        torch.cuda.set_rng_state_all(s[1])


class _RngLogged:
    """A logged result of an uncapturable call, with the RNG state right after the call."""
    __slots__ = ("result", "state")

    def __init__(self, result: Any, state: RngStates) -> None:
        self.result, self.state = result, state


class _NewLogged:
    """A logged result of an uncapturable call that new containers were flushed before
    (flush_writes.py): those containers, as the call left them, which the recording that
    follows a miss (not running the call again) takes the contents of."""
    __slots__ = ("result", "new")

    def __init__(self, result: Any, new: tuple) -> None:
        self.result, self.new = result, new


def _unlog_raising(v: Any) -> Any:
    """_unlog for a replay: a logged raise (base._Raised) raises again."""
    v = _unlog(v)
    if type(v) is _Raised:
        raise v.exc
    return v


def _unlog(v: Any) -> Any:
    """The result a logged call returned; restores the RNG state it left, if logged."""
    if type(v) is _NewLogged:
        v = v.result
    if type(v) is _RngLogged:
        _set_rng_states(v.state)
        return v.result
    return v
