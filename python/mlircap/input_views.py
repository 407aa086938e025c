"""Outputs of a captured graph that are views of an input sharing memory with another input,
made after the compiled graph from the call's own argument.

aot_autograd gives inputs that share memory, one of them written in place, one "synthetic base"
and regenerates an output that views such an input from it after the graph: that replay applies
the output's view steps to the wrong tensor and raises ("incorrect out shape after application of
ViewMeta sequence: (2,) (actual) vs (2, 1) (expected)", torch.compile(backend="aot_eager") too).
`x0.add_(1); return x1.t()` with x1 = x0.unsqueeze(0) failed on every replayed call
(bench/fuzz_graphs --families edges seeds 883, 943). A view op has no side effect and reads no
values, so the view of the argument taken after the graph (which wrote it) is the output eager
returns: the graph is compiled without these outputs and the view steps run on the arguments.
An in-place op on the way (`x1.unsqueeze(0).add_(1)` returned, edges seeds 1342, 1372) returns
its argument: it stays in the graph, and its output after the graph is that argument.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx


def _aten_view(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    overloads = [getattr(packet, o) for o in packet.overloads()]
    return bool(overloads) and all(o.is_view for o in overloads)


def _basic_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or (isinstance(i, int) and not isinstance(i, bool)) or
               (isinstance(i, slice) and all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                                             for v in (i.start, i.stop, i.step)))
               for i in items)


def _view_step(node: fx.Node) -> fx.Node | None:
    """The tensor `node` views when it is a view op (t, unsqueeze, transpose, view, expand,
    select by an int or a slice, ...) whose other arguments are constants; else None."""
    if node.op not in ("call_function", "call_method") or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    if any(isinstance(a, fx.Node) for a in (*node.args[1:], *node.kwargs.values())):
        return None
    t = node.target
    name = t if isinstance(t, str) else getattr(t, "__name__", None)
    if t is operator.getitem or name == "__getitem__":
        return node.args[0] if len(node.args) == 2 and _basic_index(node.args[1]) else None
    if isinstance(t, torch._ops.OpOverload):
        return node.args[0] if t.is_view else None
    if not isinstance(name, str) or name.endswith("_"):
        return None
    if node.op == "call_function" and not (getattr(torch.Tensor, name, None) is t or getattr(torch, name, None) is t):
        return None
    return node.args[0] if _aten_view(name) else None


_RESIZING = {"resize_", "resize_as_", "set_"}


def _writes_self(op: torch._ops.OpOverload) -> bool:
    """`op` writes the values of its first argument in place and returns it (add_, mul_,
    bernoulli_, ...): not a view op changing its metadata (t_, unsqueeze_, as_strided_, resize_)."""
    s = op._schema
    if torch.Tag.inplace_view in op.tags or op._schema.name.split("::")[-1] in _RESIZING or not s.arguments or \
            len(s.returns) != 1:
        return False
    a, r = s.arguments[0].alias_info, s.returns[0].alias_info
    return a is not None and a.is_write and r is not None and r.is_write and \
        set(a.before_set) == set(r.before_set)


def _in_place_step(node: fx.Node) -> fx.Node | None:
    """The tensor `node` writes and returns when it is an in-place op whose result is its first
    argument (x.add_(1), x.bernoulli_(p)); else None. After the graph, that result is the
    argument itself, written by the graph."""
    if node.op not in ("call_function", "call_method") or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return node.args[0] if _writes_self(t) else None
    name = t if isinstance(t, str) else getattr(t, "__name__", None)
    if not isinstance(name, str) or not name.endswith("_") or name.startswith("_"):
        return None
    if node.op == "call_function" and not (getattr(torch.Tensor, name, None) is t or getattr(torch, name, None) is t):
        return None
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None
    overloads = [op for op in (getattr(packet, o) for o in packet.overloads())   # (not add_.t, of lists)
                 if op._schema.arguments and isinstance(op._schema.arguments[0].type, torch.TensorType)]
    return node.args[0] if overloads and all(_writes_self(o) for o in overloads) else None


def _storage(t) -> int | None:
    try:
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.layout == torch.strided and \
            type(t) in (torch.Tensor, torch.nn.Parameter) and t.numel() else None
    except (RuntimeError, NotImplementedError):
        return None


def shared_input_views(gm: fx.GraphModule, example_inputs) -> dict[int, list[fx.Node]]:
    """{output position: its view steps, from an input's placeholder on} for the outputs of `gm`
    that are views of an input sharing its memory with another input."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(example_inputs):
        return {}
    owners: dict[int, set[int]] = {}
    for i, t in enumerate(example_inputs):
        s = _storage(t)
        if s is not None:
            owners.setdefault(s, set()).add(id(t))
    shared = {ph for ph, t in zip(phs, example_inputs) if _storage(t) is not None and len(owners[_storage(t)]) > 1}
    if not shared:
        return {}
    outs = gm.graph.output_node().args[0]
    if not isinstance(outs, (tuple, list)):
        return {}
    found = {}
    for k, o in enumerate(outs):
        chain, n = [], o
        while isinstance(n, fx.Node) and n.op != "placeholder":
            chain.append(n)
            n = _view_step(n) or _in_place_step(n)
        if chain and n in shared:
            found[k] = chain[::-1]
    return found


def views_after(gm: fx.GraphModule, example_inputs: list, moved: dict[int, list[fx.Node]], compile_fn):
    """`gm` compiled by `compile_fn` without the outputs at `moved` (shared_input_views); those
    are the view steps run on the call's arguments after the compiled graph."""
    outs = list(gm.graph.output_node().args[0])
    graph = fx.Graph()
    env: dict = {}
    graph.output(graph.graph_copy(gm.graph, env))
    graph.output_node().args = (tuple(env[o] if isinstance(o, fx.Node) else o
                                      for k, o in enumerate(outs) if k not in moved),)
    sub = fx.GraphModule(gm, graph)
    post = fx.Graph()
    penv: dict = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            penv[n] = post.node_copy(n)
    for k in sorted(moved):
        for n in moved[k]:
            if n not in penv:   # (an in-place step: its argument, which the graph wrote)
                penv[n] = penv[n.args[0]] if _view_step(n) is None else post.node_copy(n, lambda a: penv[a])
    post.output(tuple(penv[outs[k]] for k in sorted(moved)))
    post_gm = fx.GraphModule(gm, post)
    fn = compile_fn(sub, example_inputs)
    rest = [k for k in range(len(outs)) if k not in moved]
    order = sorted(moved)

    def run(*args):
        got = fn(*args)
        views = post_gm(*args)
        merged = [None] * len(outs)
        for k, v in zip(rest, got):
            merged[k] = v
        for k, v in zip(order, views):
            merged[k] = v
        return type(got)(merged) if isinstance(got, (tuple, list)) else tuple(merged)

    run.__dict__.update(getattr(fn, "__dict__", {}))
    return run
