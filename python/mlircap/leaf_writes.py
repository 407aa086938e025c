"""In-place writes to a leaf that requires grad run with grad mode off, as eager records them.

Eager raises for a differentiable in-place op on a leaf that requires grad (or a view of one),
so a write to such an input that runs at all is one autograd does not record: a
non-differentiable op (x.logical_not_(), x.logical_and_(m), x.sign_() of ints...) or one under
no_grad. aot_autograd records the first kind as a differentiable mutation of the input: the
input's new value becomes an output of the compiled Function and its gradient passes straight
back to the input, so the input got a zero .grad (the materialized gradient of that unused
output) where eager leaves None: bench/fuzz_graphs.py --grad --families edges seed 435,
`x1.logical_and_(m)` on a float leaf beside a loss of x0 (then momentum or weight decay would
have moved x1). Such writes run under `torch._C._set_grad_enabled(False)` in the captured graph
(the form `with torch.no_grad(): x.mul_(2)` takes, which aot_autograd hides from autograd), the
previous mode restored after them: the same values, and the gradient eager gives."""
from __future__ import annotations

import torch
import torch.fx as fx

from .input_views import _in_place_step, _view_step


def no_grad_leaf_writes(gm: fx.GraphModule, example_inputs) -> bool:
    """Rewrites `gm` in place (module docstring); whether it changed anything."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(example_inputs):
        return False
    leaves = {ph for ph, t in zip(phs, example_inputs)
              if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf}
    if not leaves:
        return False
    changed = False
    for n in list(gm.graph.nodes):
        root = _in_place_step(n)
        while isinstance(root, fx.Node) and root.op != "placeholder":
            root = _view_step(root)
        if root not in leaves:
            continue
        with gm.graph.inserting_before(n):
            prev = gm.graph.call_function(torch.is_grad_enabled, ())
            gm.graph.call_function(torch._C._set_grad_enabled, (False,))
        with gm.graph.inserting_after(n):
            gm.graph.call_function(torch._C._set_grad_enabled, (prev,))
        changed = True
    if changed:
        gm.recompile()
    return changed
