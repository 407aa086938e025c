"""Autocast regions inside the captured code (`with torch.autocast("cpu", dtype=bf16):`, an
`@autocast` method): the graph holds them as Dynamo's graphs do, an `_enter_autocast` node
where the recorded ops start running under a different autocast state than the graph's
start and an `_exit_autocast` node where it changes back or the graph ends, so the graph's
ops are cast as eager's were (the backend traces through them: aot_autograd records the
casts).  A replayed step between graphs does not run under the region: a break inside one
still makes capture give up (graph_steps._call_step)."""
from __future__ import annotations

import torch
import torch.fx as fx

_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple:
    """(enabled, dtype) per device, and the cast cache flag: what decides how ops are cast."""
    return tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _DEVICES) + \
        (torch.is_autocast_cache_enabled(),)


def set_autocast_state(state: tuple) -> None:
    """Sets the autocast state `autocast_state()` returned (a call that switched it with
    torch.set_autocast_enabled and left it so)."""
    for d, (enabled, dtype) in zip(_DEVICES, state):
        torch.set_autocast_enabled(d, enabled)
        torch.set_autocast_dtype(d, dtype)
    torch.set_autocast_cache_enabled(state[-1])


class autocast_state_as:
    """A block run in autocast state `state` (the one after it restored)."""

    def __init__(self, state: tuple) -> None:
        self.state = state

    def __enter__(self) -> None:
        self.prev = autocast_state()
        if self.prev != self.state:
            set_autocast_state(self.state)

    def __exit__(self, *exc: object) -> None:
        if autocast_state() != self.prev:
            set_autocast_state(self.prev)


def sync_autocast(graph: fx.Graph, open_nodes: list, start: tuple, now: tuple) -> None:
    """Makes the graph run its next ops under autocast state `now`: closes the regions it
    opened (innermost first) and opens one per device whose state differs from `start`, the
    graph's state as it begins (guarded by the variant: the call's ambient state)."""
    close_autocast(graph, open_nodes)
    for d, (s, n) in zip(_DEVICES, zip(start, now)):
        if n != s:
            open_nodes.append(graph.call_function(torch.amp.autocast_mode._enter_autocast, (d, n[1], n[0], now[-1])))


def close_autocast(graph: fx.Graph, open_nodes: list) -> None:
    while open_nodes:
        graph.call_function(torch.amp.autocast_mode._exit_autocast, (open_nodes.pop(),))
