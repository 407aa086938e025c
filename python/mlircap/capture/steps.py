"""Typed records of a recording's replay plan: the steps run in order at replay (a
captured graph or a graph-break call) and the writes to external state replayed after."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .graph_nodes import _Seg


@dataclass(slots=True)
class GraphStep:
    """Run the (backend-compiled) graph of segment `seg` at this point of the replay."""
    seg: _Seg


@dataclass(slots=True)
class CallStep:
    """A graph break: `callee(*args, **kwargs)` (Python expressions) runs eagerly at replay
    and its result is bound to `b{k}`; mid-replay guards on it follow (position k + 1)."""
    k: int
    callee: str
    args: list[str]
    kwargs: dict[str, str]
    reason: str
    external: bool   # an uncapturable call (run once per call, result logged for a miss);
                     # False: a data-dependent tensor operation (no side effect)
    grad: bool | None = None   # the grad mode it ran in, where not the call's starting one
    # the function's writes made right before the call (flush_writes.py): item / delitem /
    # set Writes whose values are replay expressions
    pre_writes: list[Write] | None = None


Step = GraphStep | CallStep


@dataclass(frozen=True, slots=True)
class Write:
    """One replayed write to external state.  `value` is the value when recording and
    the Python expression producing it in the replay plan (None for deletions)."""
    kind: str        # item | delitem | set | extend | slice | cvset | update | discard
    target: str      # expression of the object / container written
    key: Any         # item key or attribute name (None where the kind has none)
    value: Any
    setter: str | None = None   # item/delitem on a dict subclass: the base class's setter/deleter
