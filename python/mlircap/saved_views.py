"""aot_autograd's partition of a training graph, with views of inputs saved as their inputs.

torch's default partitioner saves for the backward every forward value the backward reads.
A Linear's `x @ w.t()` saves `w.t()` (aot_autograd's `permute(primals_k, [1, 0])`), so the
compiled forward returned it as a graph output: a transpose kernel writing a copy of every
weight on every training call (PointNet's 4096x128 fc weight: 1.5 ms a call on this host,
eager saves the weight itself). `partition` saves the input instead (the graph returns its
own input: no copy) and makes the backward take the view of it again, where the backward's
`permute(permute(w))` folds away.

The default partitioner also copies into the backward every node of the joint graph it is not
told is the forward's whose inputs the backward has, and its dead-code elimination keeps random
ops and asserts: a forward draw that only feeds a write to an input (`x0.bernoulli_(0.5)`,
functionalized into bernoulli.p and a copy_ at the graph's end) ran again in the backward, its
result unused, drawing from torch's generator a second time, and the backward saved the
draw's operand (the input itself) for it; the input's later version bumps then failed the
backward's saved-tensor check ("modified by an inplace operation", edges --grad seed 629,
where eager's backward reads nothing of that input). `drop_duplicate_effects` removes such
copies: unused random ops and asserts of the backward that the forward runs too, and the saved
values only they read."""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

_aten = torch.ops.aten
# view ops the backward can apply again to the saved input: same values, no copy
VIEW_OPS = {
    _aten.permute.default, _aten.t.default, _aten.transpose.int, _aten.view.default,
    _aten.unsqueeze.default, _aten.squeeze.dim, _aten.squeeze.dims, _aten.squeeze.default,
    _aten.expand.default, _aten.alias.default,
}


def partition(joint_module: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int, **kwargs: Any):
    """torch's default_partition, then `save_inputs_not_views` on its result."""
    from torch._functorch.partitioners import default_partition

    fw, bw = default_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
    try:
        drop_duplicate_effects(fw, bw, num_fwd_outputs)
        save_inputs_not_views(fw, bw, num_fwd_outputs)
    except Exception:   # (graphs left half rewritten: partitioned again, as torch partitions them)
        fw, bw = default_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
    fw.meta["mlircap_num_fwd_outputs"] = num_fwd_outputs   # the rest is saved for the backward
    return fw, bw


_ASSERTS = {_aten._assert_async.default, _aten._assert_async.msg, _aten._assert_scalar.default}


def drop_duplicate_effects(fw: fx.GraphModule, bw: fx.GraphModule, num_fwd_outputs: int) -> int:
    """Removes the backward's unused random ops and asserts that are copies of forward nodes
    (the same name: both graphs copy the joint graph's nodes), then the backward's code and
    saved tensors (forward outputs past `num_fwd_outputs`, backward placeholders of the same
    name) that only they read. Returns how many nodes were removed."""
    fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    dropped = 0
    for n in reversed(list(bw.graph.nodes)):
        if n.op != "call_function" or n.users or n.name not in fw_names:
            continue
        random = n.is_impure() and not n.is_impure(impure_random=False)
        if random or n.target in _ASSERTS:
            bw.graph.erase_node(n)
            dropped += 1
    if not dropped:
        return 0
    bw.graph.eliminate_dead_code()
    fw_out = next(iter(fw.graph.find_nodes(op="output")))
    outs = list(fw_out.args[0])
    unused = {n.name: n for n in bw.graph.find_nodes(op="placeholder") if not n.users}
    keep = outs[:num_fwd_outputs]
    for node in outs[num_fwd_outputs:]:
        ph = unused.get(node.name) if isinstance(node, fx.Node) else None
        if ph is not None and isinstance(node.meta.get("val"), torch.Tensor) and \
                isinstance(ph.meta.get("val"), torch.Tensor):
            bw.graph.erase_node(ph)
        else:
            keep.append(node)
    fw_out.args = (tuple(keep), *fw_out.args[1:])
    fw.graph.eliminate_dead_code()
    fw.graph.lint()
    bw.graph.lint()
    fw.recompile()
    bw.recompile()
    return dropped


def _view_chain(node: fx.Node, inputs: set) -> list[fx.Node] | None:
    """The view ops from a forward input to `node` (first to last), or None where `node` is
    not such a chain (each op's only tensor argument its first, the others constants)."""
    chain = []
    n = node
    while isinstance(n, fx.Node) and n.op == "call_function" and n.target in VIEW_OPS:
        if n.kwargs or any(isinstance(a, fx.Node) for a in _flat(n.args[1:])):
            return None
        chain.append(n)
        n = n.args[0]
    if not chain or not isinstance(n, fx.Node) or n not in inputs:
        return None
    return chain[::-1]


def _flat(xs: Any) -> list:
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out += _flat(x)
        else:
            out.append(x)
    return out


def save_inputs_not_views(fw: fx.GraphModule, bw: fx.GraphModule, num_fwd_outputs: int) -> int:
    """Saved values (forward outputs past `num_fwd_outputs`) that are views of a forward
    input: the forward returns the input in that place, and the backward's placeholder
    there is made into the view again before its uses. Returns how many were changed."""
    fw_out = next(iter(fw.graph.find_nodes(op="output")))
    outs = list(fw_out.args[0])
    fw_inputs = set(fw.graph.find_nodes(op="placeholder"))
    bw_phs = {n.name: n for n in bw.graph.find_nodes(op="placeholder")}
    changed = 0
    for k in range(num_fwd_outputs, len(outs)):
        node = outs[k]
        if not isinstance(node, fx.Node) or node.meta.get("saved_tensor_with_no_vc_check", False):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or node.name not in bw_phs:
            continue
        chain = _view_chain(node, fw_inputs)
        if chain is None:
            continue
        base = chain[0].args[0]
        bval = base.meta.get("val")
        if not isinstance(bval, torch.Tensor) or bval.dtype != val.dtype:
            continue
        ph = bw_phs[node.name]
        users = list(ph.users)
        cur: fx.Node = ph
        at = list(bw.graph.find_nodes(op="placeholder"))[-1]
        for op in chain:
            with bw.graph.inserting_after(at):
                cur = bw.graph.call_function(op.target, (cur, *op.args[1:]), {})
            cur.meta.update({key: v for key, v in op.meta.items() if key in ("val", "tensor_meta")})
            at = cur
        for u in users:
            u.replace_input_with(ph, cur)
        ph.meta["val"] = bval
        if "tensor_meta" in base.meta:
            ph.meta["tensor_meta"] = base.meta["tensor_meta"]
        else:
            ph.meta.pop("tensor_meta", None)
        outs[k] = base
        changed += 1
    if changed:
        fw_out.args = (tuple(outs), *fw_out.args[1:])
        fw.graph.eliminate_dead_code()
        fw.graph.lint()
        bw.graph.lint()
        fw.recompile()
        bw.recompile()
    return changed
