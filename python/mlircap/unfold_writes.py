"""Graphs that write in place through a view made by `unfold` run as captured (eager's kernels).

aot_autograd functionalizes a write through a view into the view's inverse, applied to its base:
for `unfold` torch's inverse is `unfold_backward` (the gradient's formula), which gives every
element of the base the sum of its window copies and zero where no window covers it. That is the
base's new value only where the windows tile it exactly once: `v.unfold(0, 1, 2)[0].fill_(7)`
(a gap between windows) zeroed the rest of v, `v.unfold(0, 2, 2)` of 7 rows zeroed the last row
(bench/fuzz_graphs.py --grad seed 3931: `v2.unfold(-3, 1, 2)[0].bernoulli_(0.5)`, the other half
of v2 zeros in the replayed call). Such writes are rare (unfold is read, not written, in models):
the graph is refused (`written_through_unfold`), and runs as captured."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .input_views import _in_place_step
from .saved_writes import _VIEW_NAMES


def _name(n: fx.Node) -> str | None:
    if n.op == "call_method":
        return n.target
    if n.op != "call_function":
        return None
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        return t.__name__.split(".")[0]
    return getattr(t, "__name__", None)


def written_through_unfold(gm: fx.GraphModule) -> fx.Node | None:
    """The first node of `gm` that writes in place (an in-place op, a setitem, an out=
    argument) a tensor that is `unfold`'s result or a view of it; else None."""
    through: set[fx.Node] = set()
    for n in gm.graph.nodes:
        name = _name(n)
        if name is None:
            continue
        first = n.args[0] if n.args and isinstance(n.args[0], fx.Node) else None
        if name == "unfold" or (first in through and name in _VIEW_NAMES):
            through.add(n)
            continue
        target = _in_place_step(n)
        if target is None and (n.target is operator.setitem or name == "__setitem__"):
            target = first
        out = n.kwargs.get("out")
        if target in through or any(o in through for o in (out if isinstance(out, (list, tuple)) else [out])):
            return n
    return None
