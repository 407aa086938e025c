"""Eager's saved-tensor version checks across a compiled graph's boundary.

Eager's autograd saves some tensors an op reads (GatherBackward0 saves `self`, though its
formula only needs the sizes; MulBackward0 both operands; ExpBackward0 its result) and its
backward raises "one of the variables needed for gradient computation has been modified by
an inplace operation" where one of them was written in place after the op ran. A compiled
graph is one autograd node, whose backward saves what aot_autograd's partitioner chose: a
graph input or output eager saved, written after the call (an in-place op of the next graph,
an optimizer step under no_grad), gave a gradient where eager raises (bench/fuzz_graphs.py
--grad seed 1493: v1 = gather(v0, 0, i) in one graph, v0[0].abs_() in the next). Writes
inside the graph need nothing here: aot_autograd traces the graph through eager's autograd,
which raises, and the graph then runs as captured.

`saved_boundary` runs the captured graph once on fake tensors under saved-tensor hooks and
finds the graph inputs and outputs (or views of them) that an op saves, with the graph
outputs whose gradient reaches that op. `checked` wraps the compiled function: each call
remembers those tensors' versions, and a hook on each output reaching the op raises as
eager does when its gradient arrives and one of them has a newer version.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.fx


def _root(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose version counter `t` shares (a view shares its base's)."""
    return t._base if t._base is not None else t


def _flat_tensors(v: Any) -> list[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _flat_tensors(x)]
    return []


# A check: (where the saved tensor is: ("in", i) or ("out", j), the outputs whose gradient
# reaches an op that saved it, the op's name)
Check = tuple[tuple[str, int], frozenset[int], str]


def saved_boundary(gm: torch.fx.GraphModule, example_inputs: list) -> list[Check]:
    """The graph's inputs and outputs eager's autograd saves, and which outputs' gradients
    reach the ops saving them (values that carry gradients, as _output_reach); [] where
    none is saved, or the graph cannot run on fake tensors (no check is added then)."""
    if not torch.is_grad_enabled() or not any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs):
        return []
    from .ddsplit import restoring_global_modes

    saved: list[tuple[torch.fx.Node, torch.Tensor]] = []
    grads: dict[torch.fx.Node, bool] = {}   # whether a node's value carries gradients
    current: list = [None]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append((current[0], t))
        return t

    class _Run(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            current[0] = n
            v = super().run_node(n)
            grads[n] = any(t.requires_grad for t in _flat_tensors(v))
            return v

    rng = torch.get_rng_state()
    try:
        with warnings.catch_warnings(), restoring_global_modes(), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):   # (its mode switch nodes run for real)
            warnings.simplefilter("ignore")
            outs, fakes = _run_fake(gm, example_inputs, _Run)
    except Exception:  # noqa: BLE001 - an op fake tensors cannot run: no check
        return []
    finally:
        torch.set_rng_state(rng)
    if not saved:
        return []
    outs = tuple(outs) if isinstance(outs, (list, tuple)) else (outs,)
    where: dict[int, list[tuple[str, int]]] = {}
    for i, f in enumerate(fakes):
        if isinstance(f, torch.Tensor):
            where.setdefault(id(_root(f)), []).append(("in", i))
    for j, o in enumerate(outs):
        if isinstance(o, torch.Tensor):
            where.setdefault(id(_root(o)), []).append(("out", j))
    hits = [(n, w) for n, t in saved if n is not None for w in where.get(id(_root(t)), ())]
    if not hits:
        return []

    # the outputs each node's gradient is reached from, through values that require grad
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    out_args = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else (out_node.args[0],)
    reach: dict[torch.fx.Node, set[int]] = {}
    for j, a in enumerate(out_args):
        if isinstance(a, torch.fx.Node) and isinstance(outs[j], torch.Tensor) and outs[j].requires_grad:
            reach.setdefault(a, set()).add(j)

    for n in reversed(gm.graph.nodes):
        if n.op == "output":
            continue
        mine = reach.setdefault(n, set())
        for u in n.users:
            if u.op != "output" and grads.get(u):
                mine |= reach.get(u, set())
    checks: dict[tuple, set[int]] = {}
    for n, w in hits:
        r = reach.get(n)
        if r:
            checks.setdefault((w, getattr(n.target, "__name__", str(n.target))), set()).update(r)
    return [(w, frozenset(r), op) for (w, op), r in checks.items()]


def _run_fake(gm: torch.fx.GraphModule, example_inputs: list, run: type) -> tuple:
    """`gm`'s outputs on fake copies of `example_inputs` (those requiring grad as leaves, or
    non-leaves where the input is one), run by the Interpreter class `run`; and the copies."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fakes = [mode.from_tensor(a.detach()) if isinstance(a, torch.Tensor) else a for a in example_inputs]
    with mode:
        for k, (a, f) in enumerate(zip(example_inputs, fakes)):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                f = f.requires_grad_()
                if not a.is_leaf:   # (an in-place op on it is allowed, as on the real one)
                    f = f.clone()
                fakes[k] = f
        outs = run(gm).run(*fakes)
    return outs, fakes


def _message(t: torch.Tensor, now: int, then: int, op: str) -> str:
    return (f"one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: [{t.type()} {list(t.shape)}] is at version {now}; expected version {then} "
            f"instead (saved by {op} in a graph mlircap compiled, as eager's autograd saves it)")


def checked(fn: Any, checks: list[Check]) -> Any:
    """`fn` (aot_autograd's function of the captured graph) whose backward raises as eager's
    where a tensor at `checks` was written in place after the call."""
    if not checks:
        return fn
    # per output whose gradient reaches a saving op: (from the inputs?, index, op) of the tensors
    # whose versions its hook checks (laid out once: this runs on every training call)
    spec: dict[int, list] = {}
    for (kind, i), js, op in checks:
        for j in js:
            spec.setdefault(j, []).append((kind == "in", i, op))
    per_output = tuple((j, tuple(v)) for j, v in sorted(spec.items()))
    pending = [True]   # the inputs aot_autograd's node saves itself not yet looked for

    def run(*args: Any) -> Any:
        nonlocal per_output
        if not per_output:
            return fn(*args)
        out = fn(*args)
        if not torch.is_grad_enabled():
            return out
        outs = out if isinstance(out, (list, tuple)) else (out,)
        if pending[0] and torch._C._autograd._top_saved_tensors_default_hooks(False) is None:
            # (not under saved_tensors_hooks: reading the saved tensors would run their unpack hook)
            node = _aot_node(outs)
            if node is not None:
                pending[0] = False
                per_output = _without_saved_by(node, per_output, args)
        for j, wanted in per_output:
            o = outs[j] if j < len(outs) else None
            if not isinstance(o, torch.Tensor) or not o.requires_grad:
                continue
            held = []
            for from_input, i, op in wanted:
                src = args if from_input else outs
                t = src[i] if i < len(src) else None
                if isinstance(t, torch.Tensor) and not t.is_inference():
                    # held detached (it shares the version counter) where it is an output:
                    # held as it is, a hook on it would keep it alive through itself
                    own = from_input and all(t is not x for x in outs)
                    held.append((t if own else t.detach(), t._version, op))
            if held:
                o.register_hook(_hook(held))
        return out

    run.__dict__.update(getattr(fn, "__dict__", {}))
    return run


def _aot_node(outs: Any) -> Any:
    """The aot_autograd node (CompiledFunctionBackward) of the call's outputs, or None."""
    for o in outs:
        node = getattr(o, "grad_fn", None) if isinstance(o, torch.Tensor) else None
        if node is not None and type(node).__name__ == "CompiledFunctionBackward":
            return node
    return None


def _without_saved_by(node: Any, per_output: tuple, args: tuple) -> tuple:
    """`per_output` less the checks of inputs that aot_autograd's `node` saves itself, the
    input object as it is: its backward then unpacks it with autograd's own version check
    (save_for_backward), which raises as eager does whenever a gradient reaches the node,
    so a hook of ours adds nothing but its cost (~10 us of each training call's forward:
    a Linear's input, which eager's AddmmBackward0 saves and so does the compiled graph's
    partition). Looked for at the first call: which inputs the partition saves, and that
    the compiled forward returns them as they are, are the same at every call of the graph.
    Views of inputs (saved detached) and outputs (saved without their node) keep the hook."""
    try:
        saved = node.saved_tensors   # (those saved with a version check; not the no_vc_check ones)
    except RuntimeError:
        return per_output
    ids = {id(t) for t in saved}

    def own(from_input: bool, i: int) -> bool:
        return from_input and i < len(args) and isinstance(args[i], torch.Tensor) and id(args[i]) in ids

    res = []
    for j, wanted in per_output:
        left = tuple(w for w in wanted if not own(w[0], w[1]))
        if left:
            res.append((j, left))
    return tuple(res)


def _hook(held: list) -> Any:
    def check(grad: torch.Tensor | None) -> None:
        if grad is None:   # (the graph's node ran for another output's gradient)
            return
        for t, v, op in held:
            if t._version != v:
                raise RuntimeError(_message(t, t._version, v, op))
    return check
