"""Graph inputs compiled in the layout they arrive in.

A launch plan takes its inputs contiguous: `Plan._prepare_inputs` copies any other
layout with `.contiguous()`. Many inputs arrive as a permutation of a contiguous
tensor, though: fused attention returns its output (B, H, T, D) stored as (B, T, H,
D), and the graph after it transposes it back to (B, T, H, D) and reshapes it, so
the copy was followed by a transpose kernel that undid it (two copies per attention
layer, besides the attention itself); a channels-last image is another case.

`physical_inputs` rewrites a graph so that such an input is taken in its memory
order: the placeholder becomes the contiguous tensor `x.permute(perm)` (no copy:
only the sizes and strides are renamed) and a `permute(inv)` node gives the graph
the logical view back. The compiled code then reads the input where it lies: the
two transposes compose, and one that is the identity folds away. At run time the
graph is called with `x.permute(perm)` (CompiledGraph.__call__); an input laid out
otherwise on a later call is copied contiguous by the plan as before, so results
never depend on the layout, only the cost does.
"""
from __future__ import annotations

import copy

import torch
import torch.fx as fx

from . import config

aten = torch.ops.aten


def non_overlapping(shape, strides) -> bool:
    """No two elements of the layout share memory: dims by increasing stride,
    each stride at least the extent of the dims inside it."""
    extent = 1
    for s, n in sorted((s, n) for n, s in zip(shape, strides) if n > 1):
        if s < extent:
            return False
        extent = s * n
    return True


def enabled(device: str) -> bool:
    """MLIRCAP_PHYSICAL_INPUTS: on CUDA by default, 'force' on any device, '0' off."""
    mode = (config.env("MLIRCAP_PHYSICAL_INPUTS") or "1").strip().lower()
    return mode == "force" or (mode not in ("0", "false", "off") and device == "cuda")


def physical_perm(val) -> list[int] | None:
    """The permutation `p` with `val.permute(p)` contiguous, for a strided tensor whose
    elements are dense in memory in another order than its dims'; None for a
    contiguous tensor, or one with gaps, overlaps or broadcast (stride 0) dims."""
    if not isinstance(val, torch.Tensor) or val.layout != torch.strided or val.dim() < 2 or \
            val.is_contiguous() or val.numel() < 2:
        return None
    shape, strides = val.shape, val.stride()
    if any(s == 0 and n > 1 for n, s in zip(shape, strides)):
        return None
    perm = sorted(range(val.dim()), key=lambda d: (-strides[d], d))
    if perm == list(range(val.dim())) or not val.permute(perm).is_contiguous():
        return None
    return perm


def physical_inputs(gm: fx.GraphModule) -> tuple[fx.GraphModule, tuple] | None:
    """`gm` with its dense permuted tensor inputs taken in memory order (module
    docstring), and ((placeholder index, perm), ...); None when no input is such."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    todo = [(i, n, p) for i, n in enumerate(placeholders) if (p := physical_perm(n.meta.get("val"))) is not None
            and n.users]
    if not todo:
        return None
    graph = copy.deepcopy(gm.graph)
    new_placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i, _, perm in todo:
        p = new_placeholders[i]
        val = p.meta["val"]
        inv = [perm.index(d) for d in range(len(perm))]
        with graph.inserting_after(p):
            logical = graph.call_function(aten.permute.default, (p, inv))
        p.replace_all_uses_with(logical, delete_user_cb=lambda u, logical=logical: u is not logical)
        logical.meta = {k: v for k, v in p.meta.items() if k in ("val", "tensor_meta", "stack_trace")}
        p.meta = dict(p.meta, val=val.permute(perm))
        p.meta.pop("tensor_meta", None)
    graph.lint()
    new = fx.GraphModule(gm, graph)
    return new, tuple((i, tuple(perm)) for i, _, perm in todo)


def take_physical(args, perms: tuple) -> list:
    """The call's arguments as a graph of `physical_inputs` takes them."""
    args = list(args)
    for i, perm in perms:
        args[i] = args[i].permute(perm)
    return args
