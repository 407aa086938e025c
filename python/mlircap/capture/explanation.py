"""`ExplainOutput`: the human-readable report of what capture did."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .frame_hook import HOOK

if TYPE_CHECKING:  # pragma: no cover
    from .cache import _Captured


# ======================================================================================
class ExplainOutput:
    def __init__(self, c: _Captured) -> None:
        self.graphs = [g for v in c.variants for g in v.graphs]
        self.graph_count = len(self.graphs)
        self.variants = len(c.variants)
        self.breaks = [b for v in c.variants for b in v.breaks]
        self.break_count = len(self.breaks)
        self.guards = [g.describe() for v in c.variants for g in v.pre]
        self.mid_guards = [p.guard.describe() for v in c.variants if not v.eager for p in v.mid_guards]
        self.recompile_reasons = list(c.stats.recompile_reasons)
        self.eager_reasons = [v.reason for v in c.variants if v.eager]
        # callees a recording gave up in, run eagerly between graphs by later recordings (give_ups.py)
        self.eager_callees = [f"{k.co_name} ({k.co_filename}:{k.co_firstlineno}): {why}"
                              for k, why in getattr(c, "break_codes", {}).items()]
        self.op_count = sum(len([n for n in g.graph.nodes if n.op == "call_function"]) for g in self.graphs)
        self.hook = HOOK

    def __str__(self) -> str:
        L = [f"mlircap.capture explain (hook: {self.hook})",
             f"Graph count: {self.graph_count}", f"Graph break count: {self.break_count}",
             f"Op count: {self.op_count}", f"Variants: {self.variants}"]
        if self.breaks:
            L.append("Break reasons:")
            for i, (r, loc) in enumerate(self.breaks):
                L.append(f"  {i + 1}. {r}\n     at {loc}")
        if self.eager_reasons:
            L.append("Ran eagerly because:")
            L += [f"  - {r}" for r in self.eager_reasons]
        if self.eager_callees:
            L.append("Callees capture gave up in (later recordings run them eagerly between graphs):")
            L += [f"  - {r}" for r in self.eager_callees]
        L.append("Guards:")
        L += [f"  - {g}" for g in self.guards]
        if self.mid_guards:
            L.append("Guards checked after breaks:")
            L += [f"  - {g}" for g in self.mid_guards]
        if self.recompile_reasons:
            L.append("Recompile reasons:")
            L += [f"  - {r}" for r in self.recompile_reasons]
        return "\n".join(L)

    __repr__ = __str__
