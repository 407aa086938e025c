"""Higher-order gradients of backend-compiled graphs: aot_autograd's compiled graphs refuse
double backward, so a backward with create_graph=True differentiates the captured FX graph
re-run on the call's inputs (`_HigherOrderGrad`, `_RecomputeForHigherOrder`); which graphs
may run so (`_double_backward_ok`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

if TYPE_CHECKING:  # annotations only: recorder imports this module
    from .graph_nodes import _Seg
    from .recorder import _Recorder


_grad_enabled, _function_mode_enabled = torch.is_grad_enabled, torch._C._is_torch_function_mode_enabled


class _HigherOrderGrad:
    """A backend-compiled graph whose gradient can itself be differentiated.

    aot_autograd-compiled graphs refuse double backward ("torch.compile with aot_autograd
    does not currently support double backward"), while the first (eager, recording) call
    of a captured function supports it.  A backward with create_graph=True must then
    differentiate the captured FX graph re-run on the call's inputs, which autograd can
    differentiate again; a plain backward runs the compiled backward.  Only used for graphs
    that do not mutate or alias their inputs and draw no random numbers (_double_backward_ok).

    Where the compiled graph's outputs come from one aot_autograd node whose inputs are
    exactly the call's inputs (checked once per node class, _direct_node_ok), the call runs
    the compiled graph as it is and leaves the inputs and their versions on that node
    (_stash_inputs); its class's backward (_patch_aot_backward) recomputes through the FX
    graph only under create_graph=True.  Else each call runs inside _RecomputeForHigherOrder,
    an autograd Function around the compiled one (about 35 µs a call)."""
    __slots__ = ("fns", "gm", "direct")

    def __init__(self, fn: Callable, gm: fx.GraphModule) -> None:
        self.fns, self.gm = [fn], gm
        self.direct = True   # False once a call's node did not pass _direct_node_ok

    @property
    def fn(self) -> Callable:
        return self.fns[0]

    def __call__(self, *args: Any) -> Any:
        if _grad_enabled() and not _function_mode_enabled():
            for a in args:
                if a.requires_grad:
                    # (the Function saves every input for its backward, and an inference tensor,
                    # made under torch.inference_mode, cannot be saved: the graph then runs as
                    # it is, as eager, which saves only what each op's gradient needs)
                    for b in args:
                        if b.is_inference():
                            return self.fns[0](*args)
                    if self.direct:
                        outs = self.fns[0](*args)
                        if _stash_inputs(self, outs, args):
                            return outs
                        self.direct = False   # (the graph draws no random numbers: run it again)
                    return _RecomputeForHigherOrder.apply(self, *args)
        return self.fns[0](*args)


def _stash_inputs(runner: _HigherOrderGrad, outs: Any, args: tuple) -> bool:
    """A direct call's outputs `outs`: leave (runner, args, their versions) on their
    aot_autograd node for a create_graph backward. False: the outputs cannot be
    differentiated twice so (the call must run under _RecomputeForHigherOrder)."""
    node = None
    for o in outs:
        if isinstance(o, torch.Tensor):
            node = o.grad_fn
            if node is not None:
                break
    if node is None:
        return True   # nothing to differentiate (no output requires grad)
    cls = getattr(node, "_forward_cls", None)
    ok = cls.__dict__.get("_mlircap_direct_ok") if cls is not None else None
    if ok:   # (the class checked before: the per-call checks only)
        if not _same_node(node, outs):
            return False
        node._mlircap_hog = (runner, args, [a._version for a in args], len(outs))
        return True
    if cls is None or "_double_backward" not in cls.__dict__:
        # not an aot_autograd node: where the compiled graph was replaced by the captured
        # one (its first run failed), eager's own nodes, which differentiate again; any
        # other node (a view of an aot_autograd output, another Function) runs under the
        # Function
        return cls is None and runner.fns[0] == runner.gm.forward
    ok = cls.__dict__.get("_mlircap_direct_ok")
    if ok is None:   # checked once per aot_autograd Function class
        ok = _direct_node_ok(node, cls, outs, args)
        if ok:
            _patch_aot_backward(cls)
        cls._mlircap_direct_ok = ok
    if not ok or not _same_node(node, outs):
        return False
    node._mlircap_hog = (runner, args, [a._version for a in args], len(outs))
    return True


def _same_node(node: Any, outs: Any) -> bool:
    """Output i that requires grad is output i of `node`."""
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            return False
        if o.requires_grad and (o.grad_fn is not node or o.output_nr != i):
            return False
    return True


def _direct_node_ok(node: Any, cls: Any, outs: Any, args: tuple) -> bool:
    """An aot_autograd node whose gradients map one to one: its outputs are the graph's
    outputs in order (no mutated input, no intermediate base among them) and its inputs
    are the graph's inputs in order (no deduplicated or synthetic-base input)."""
    meta = getattr(cls, "metadata", None)
    if meta is None:
        return False
    try:
        if meta.num_mutated_inp_runtime_indices or meta.num_intermediate_bases or meta.num_outputs != len(outs):
            return False
    except AttributeError:
        return False
    return _same_node(node, outs) and _edges_are_inputs(node, args)


def _patch_aot_backward(cls: Any) -> None:
    """`cls` (an aot_autograd Function)'s backward: under create_graph=True, on a node that
    _stash_inputs marked, the gradients of the FX graph re-run on the call's inputs (which
    can be differentiated again); else the compiled backward, as before."""
    if "_mlircap_orig_backward" in cls.__dict__:
        return
    orig = cls.backward

    def backward(ctx: Any, *grads: Any) -> Any:
        st = getattr(ctx, "_mlircap_hog", None)
        if st is None or not torch.is_grad_enabled():
            if st is not None and not _keep_graph():
                ctx._mlircap_hog = None
            return orig(ctx, *grads)
        runner, args, vers, n = st
        if getattr(cls, "boxed_grads_call", False) and len(grads) == 1 and isinstance(grads[0], list):
            grads = tuple(grads[0])   # (the engine hands a boxed class its gradients as one list)
        if len(grads) != n:  # pragma: no cover - _direct_node_ok checked the outputs
            raise RuntimeError("mlircap: a compiled graph's backward got another number of gradients")
        for a, v in zip(args, vers):
            if a._version != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an "
                    "inplace operation: an input of a compiled graph changed after the call "
                    f"(version {a._version}, expected {v})")
        return _recomputed_grads(runner.gm, args, grads)

    cls._mlircap_orig_backward = orig
    cls.backward = staticmethod(backward)


def _recomputed_grads(gm: Any, args: tuple, grads: tuple) -> tuple:
    """The gradients of `gm` at `args` for output gradients `grads`, as a graph that can be
    differentiated again (create_graph=True): `gm` re-run on views of the inputs."""
    with torch.enable_grad():
        ins = tuple(_fresh_input(a, True) for a in args)
        outs = gm(*ins)
    pairs = [(o, g) for o, g in zip(outs, grads)
             if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
    need = [i for i, x in enumerate(ins) if isinstance(x, torch.Tensor) and x.requires_grad]
    gi = torch.autograd.grad([o for o, _ in pairs], [ins[i] for i in need], [g for _, g in pairs],
                             allow_unused=True, retain_graph=True, create_graph=True) \
        if pairs and need else ()
    out: list = [None] * len(ins)
    for i, g in zip(need, gi):
        out[i] = g
    return tuple(out)


def _edges_are_inputs(node: Any, args: tuple) -> bool:
    """`node`'s inputs are exactly `args` (so its gradients are theirs): not the case
    when the graph ran as several autograd nodes (a split graph's last part)."""
    from torch.autograd.graph import get_gradient_edge

    edges = node.next_functions
    if len(edges) != len(args):
        return False
    for (fn, nr), a in zip(edges, args):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            e = get_gradient_edge(a)
            if fn is not e.node or nr != e.output_nr:
                return False
    return True


def _keep_graph() -> bool:
    """retain_graph / create_graph of the backward in progress."""
    try:
        return torch._C._autograd._get_current_graph_task_keep_graph()
    except Exception:  # pragma: no cover - older torch
        return True


def _fresh_input(a: Any, view: bool) -> Any:
    """`a` (an input of a _RecomputeForHigherOrder graph that requires grad) entering the
    graph through a tensor of its own, so that autograd.grad over the graph stops there: a
    leaf detached from `a`'s history (`view` False; an input that is a leaf already is kept),
    or a view of `a` (`view` True: the history kept, for a gradient that is differentiated
    again). Its .grad is `a`'s where the graph may read it."""
    if not (isinstance(a, torch.Tensor) and a.requires_grad):
        return a
    if not view and a.grad_fn is None:
        return a
    t = a.view_as(a) if view else a.detach().requires_grad_()
    if a.is_leaf or a.retains_grad:
        g = a.grad
        if g is not None:
            t.grad = g
    return t


class _RecomputeForHigherOrder(torch.autograd.Function):
    """The graph runs on its inputs cut from their history (_fresh_input): its backward's
    autograd.grad over it must give this Function's own gradients, the partial derivatives
    of each input. Over the inputs themselves it also went through their history where one
    input was computed from another (a loss and the weight it came from, both inputs of
    `loss * 2`): that path's gradient came back twice, once here and once through the engine
    (with retain_graph), or the upstream graph's saved tensors were freed by the inner call
    and the engine's own visit raised."""

    @staticmethod
    def forward(ctx: Any, runner: _HigherOrderGrad, *args: Any) -> Any:
        with torch.enable_grad():
            cut = tuple(_fresh_input(a, False) for a in args)
            outs = tuple(runner.fn(*cut))   # the compiled graph, with its own autograd node
        ctx.runner, ctx.outs, ctx.n = runner, outs, len(args)
        ctx.save_for_backward(*args, *cut)
        ctx.diff = [o.requires_grad for o in outs]
        # a plain backward calls the compiled graph's backward directly (no nested
        # autograd.grad) when its node produced exactly these outputs in order (and took
        # exactly these inputs: checked in backward, which a forward-only call skips)
        node = next((o.grad_fn for o in outs if o.grad_fn is not None), None)
        ctx.node = node if node is not None and hasattr(node, "apply") and all(
            (o.grad_fn is node and o.output_nr == i) or not o.requires_grad for i, o in enumerate(outs)) else None
        res = tuple(o.detach() for o in outs)
        ctx.mark_non_differentiable(*[r for r, d in zip(res, ctx.diff) if not d])
        return res

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        saved = ctx.saved_tensors
        args, ins = saved[:ctx.n], saved[ctx.n:]
        create = torch.is_grad_enabled()
        if not create and ctx.node is not None and _edges_are_inputs(ctx.node, ins):
            try:
                gi = ctx.node.apply(*grads)
            except AssertionError:
                # aot_autograd's prologue counts the gradients before computing anything: the
                # node has fewer outputs than the graph (an output aot regenerates from another,
                # a detached alias next to a boolean-mask index: 'expected 2 grad_outs, got 3',
                # bench/fuzz_graphs.py --grad seed 437); autograd.grad below maps them itself
                gi = None
            if isinstance(gi, tuple) and len(gi) == len(ins):
                return (None, *(g if x.requires_grad else None for g, x in zip(gi, ins)))
        if create:  # create_graph=True: a gradient that can be differentiated again
            with torch.enable_grad():
                ins = tuple(_fresh_input(a, True) for a in args)
                outs = ctx.runner.gm(*ins)
        else:       # the compiled backward
            outs = ctx.outs
        # An output that is a leaf is one of the graph's (cut) inputs returned as it is (aot
        # returns the input for `x.detach()` of an input): its gradient is that input's as it
        # is, and autograd.grad rejects it as an output ('element 2 of tensors does not require
        # grad', bench/fuzz_graphs.py --grad --families edges seed 385: v0.detach() returned
        # beside v0.sum() after a .item() read of v0 split the graphs).
        pairs, direct = [], []
        for o, g, d in zip(outs, grads, ctx.diff):
            if d and o.requires_grad:
                (pairs if o.grad_fn is not None else direct).append((o, g))
        need = [i for i, x in enumerate(ins) if x.requires_grad]
        gi = torch.autograd.grad([o for o, _ in pairs], [ins[i] for i in need], [g for _, g in pairs],
                                 allow_unused=True, retain_graph=_keep_graph(), create_graph=create) \
            if pairs and need else ()
        out = [None] * len(ins)
        for i, g in zip(need, gi):
            out[i] = g
        for o, g in direct:
            i = next((k for k, x in enumerate(ins) if x is o), None)
            if i is not None and g is not None:
                out[i] = g if out[i] is None else out[i] + g
        return (None, *out)


def _double_backward_ok(rec: _Recorder, seg: _Seg) -> bool:
    """Can this graph run under _HigherOrderGrad: it takes some input that requires grad,
    makes no in-place change, draws no random numbers (a recompute would draw others) and
    returns no view of an input (a custom autograd Function would lose the view). Nor a
    graph that calls autograd.grad and takes an input with a history: the Function cuts
    that history, through which the call differentiates (forces = -grad(energy, pos) where
    the energy came from an eager callee: 'differentiated Tensor ... not used')."""
    if seg.inplace or rec.uses_rng or not any(t.requires_grad for t in seg.examples):
        return False
    # (nor one taking a tensor the recording wrote in place without an op that seg.inplace
    # names: an instance / batch norm's running statistics, `buf += 1` (__iadd__): a graph
    # whose direct node fails _stash_inputs runs again under _RecomputeForHigherOrder, and a
    # second run applied the write twice: fuzz_graphs --families modules --grad seed 7018)
    mutated = rec.mutated_ids()
    if mutated and any(id(t) in mutated for t in seg.examples):
        return False
    if any(t.grad_fn is not None for t in seg.examples) and any(
            n.op == "call_function" and n.target is torch.autograd.grad for n in seg.graph.nodes):
        return False
    out_nodes = set(seg.outputs)
    in_storages = {t.untyped_storage().data_ptr() for t in seg.examples}
    for t, si, node in rec.env.values():
        if si == seg.idx and node in out_nodes and t.untyped_storage().data_ptr() in in_storages:
            return False
    return True
