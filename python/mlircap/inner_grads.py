"""A graph that calls torch.autograd.grad (a gradient penalty, a contrastive loss's gradient,
forces from an energy) and also returns a value that the call differentiated through: eager
frees the call's saved tensors (retain_graph defaults to create_graph, False) and returns the
value with its history, which nothing differentiates again. aot_autograd's joint trace
differentiates every output that requires grad, through that same history, after the traced
call freed it: 'Trying to backward through the graph a second time', and the whole graph ran
uncompiled (bench/modules12.py cl_nt_xent_2n_diag_masked_roll_labels: `return loss,
torch.autograd.grad(loss, z1)[0]`).

The traced graph holds the call's gradient as ops of its own: retain_graph only tells the
tracing engine to keep what it needs. `retain_inner_grad_graphs` sets it on such calls before
the trace; the compiled forward computes what eager computes. (A later backward through the
returned value, which eager rejects, then succeeds.)"""
from __future__ import annotations

import torch
import torch.fx as fx

# torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph, create_graph, ...)
_RETAIN_POS = 3


def retain_inner_grad_graphs(gm: fx.GraphModule) -> bool:
    """Sets retain_graph=True on every torch.autograd.grad call of `gm` that would free its
    graph (retain_graph None / False); True where it changed one."""
    changed = False
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not torch.autograd.grad:
            continue
        if len(n.args) > _RETAIN_POS:
            if n.args[_RETAIN_POS]:
                continue
            args = list(n.args)
            args[_RETAIN_POS] = True
            n.args = tuple(args)
        else:
            if n.kwargs.get("retain_graph"):
                continue
            n.kwargs = {**n.kwargs, "retain_graph": True}
        changed = True
    if changed:
        gm.recompile()
    return changed
