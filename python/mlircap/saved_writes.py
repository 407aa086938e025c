"""Graphs that write in place a tensor an earlier op of the same graph saved for backward.

`boxes[..., 0::2] = boxes[..., 0::2].clamp(0, w)` (a detection head clipping decoded boxes):
clamp saves its input, a view of `boxes`, and the write into `boxes` makes that saved tensor
stale. Eager runs the forward, and a backward through the clamp raises "one of the variables
needed for gradient computation has been modified by an inplace operation". aot_autograd
traces the backward of every output requiring grad while compiling, raised the same error,
and the whole graph ran as captured: nothing of it compiled (bench/modules11.py
det_retina_head_anchor_decode_clip; a VQ-VAE whose EMA update writes the codebook a matmul
saved, vq_ema_codebook_straight_through_perplexity).

`split_saved_writes` runs the graph once on fake tensors under saved-tensor hooks and finds
each op that saves a tensor a later node writes in place (the saver), the view nodes making
that tensor from the written one, and the writer. Those nodes run through torch (eager's
kernels and eager's autograd, which saves and checks as eager does: a backward through the
saver raises as eager's); the runs of nodes between them are compiled, each part with the
grad mode the graph's own switches give it. The part before the first such node is compiled
now with the example inputs, later parts at their first call (ddsplit._Specialized).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from . import logs

_MESSAGE = "modified by an inplace operation"


def is_saved_write_error(e: BaseException) -> bool:
    """aot_autograd failed on a saved tensor written in place later in the graph."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, RuntimeError) and _MESSAGE in str(e):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _switch(n: fx.Node) -> bool | None:
    """The grad mode a torch._C._set_grad_enabled node sets, else None."""
    if n.op == "call_function" and n.target in (torch._C._set_grad_enabled, torch.set_grad_enabled) and \
            isinstance(n.args[0], bool):
        return n.args[0]
    return None


def _autocast_node(n: fx.Node) -> bool:
    name = getattr(n.target, "__name__", "") if n.op == "call_function" else ""
    return "autocast" in name


def stale_saves(gm: fx.GraphModule, example_inputs: Sequence) -> set[fx.Node] | None:
    """The nodes to run through torch: ops saving a tensor a later node of the graph writes in
    place, the view nodes making that tensor, the writers. None when the graph cannot run on
    fake tensors (or switches autocast), an empty set when no saved tensor is written."""
    if any(_autocast_node(n) for n in gm.graph.nodes):
        return None
    from .ddsplit import restoring_global_modes
    from .saved_versions import _run_fake

    saved: list[tuple[fx.Node, torch.Tensor, int]] = []
    made: dict[int, fx.Node] = {}   # id of a node's tensor value -> the node
    values: dict[fx.Node, Any] = {}
    stale: list[tuple[fx.Node, torch.Tensor, fx.Node]] = []   # (saver, saved tensor, writer)
    current: list = [None]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if current[0] is not None:
            saved.append((current[0], t, t._version))
        return t

    wrote: dict[fx.Node, list] = {}   # node -> the storages of the tensors it wrote in place

    class _Run(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            current[0] = n if n.op != "placeholder" else None
            args = [a for a in _tensor_args(n) if isinstance(values.get(a), torch.Tensor)]
            before = [values[a]._version for a in args]
            v = super().run_node(n)
            values[n] = v
            bumped = [_storage(values[a]) for a, b in zip(args, before) if values[a]._version != b]
            if bumped:
                wrote[n] = bumped
            if isinstance(v, torch.Tensor):
                made.setdefault(id(v), n)
            k = 0
            while k < len(saved):
                s, t, ver = saved[k]
                if t._version != ver and s is not n:
                    stale.append((s, t, n))
                    saved.pop(k)
                else:
                    k += 1
            return v

    rng = torch.get_rng_state()
    try:
        with warnings.catch_warnings(), restoring_global_modes(), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            warnings.simplefilter("ignore")
            _run_fake(gm, list(example_inputs), _Run)
    except Exception:  # noqa: BLE001 - an op fake tensors cannot run: not split here
        return None
    finally:
        torch.set_rng_state(rng)
    out: set[fx.Node] = set()

    def views(n: fx.Node | None) -> None:
        # the view nodes making n's tensor from a tensor of its own storage: run through torch
        # too, so the saved tensor and the written one are eager's views (one version counter)
        while n is not None and n.op != "placeholder" and isinstance(values.get(n), torch.Tensor) and \
                values[n]._base is not None and n not in out:
            out.add(n)
            n = _first_tensor_arg(n, values)
    for saver, t, writer in stale:
        out.add(saver)
        views(made.get(id(t)))
        if writer not in out:
            out.add(writer)
            views(_first_tensor_arg(writer, values))
    if not stale:
        return out
    # A value whose autograd history goes through a saver is poisoned: a backward reaching the
    # saver raises, as eager's. A compiled part taking it as an input is one autograd node for
    # all its outputs, and a backward from any of them called the saver's node (with no
    # gradient, but it unpacks its saved tensors first): it raised where eager's did not reach
    # the saver. So every node reading a poisoned value (or memory a poisoned write wrote) runs
    # through torch too, and its results are poisoned.
    poisoned: set[fx.Node] = {s for s, _, _ in stale}
    storages: set = set()
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output") or n in poisoned:
            continue
        ins = _tensor_args(n)
        if any(a in poisoned or _storage(values.get(a)) in storages for a in ins):
            out.add(n)
            poisoned.add(n)
            storages.update(wrote.get(n, ()))
            if isinstance(values.get(n), torch.Tensor):
                storages.add(_storage(values[n]))
            storages.discard(None)
    return out


def _tensor_args(n: fx.Node) -> list[fx.Node]:
    ins: list = []
    fx.node.map_arg((n.args, n.kwargs), ins.append)
    return ins


def _storage(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return StorageWeakRef(t.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


def _first_tensor_arg(n: fx.Node, values: dict) -> fx.Node | None:
    return next((a for a in _tensor_args(n) if isinstance(values.get(a), torch.Tensor)), None)


def split_saved_writes(gm: fx.GraphModule, example_inputs: Sequence,
                       compile_fn: Callable[[fx.GraphModule, list], Callable]) -> Callable | None:
    """`gm` as compiled parts around the nodes stale_saves finds (module docstring), or None
    when there are none (or nothing would be compiled)."""
    from .ddsplit import _InGradMode, _Specialized, _subgraph, _uses
    from .partition import PartitionedGraph

    eager = stale_saves(gm, example_inputs)
    if not eager:
        return None
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    runs: list[tuple[bool, list[fx.Node]]] = []   # (through torch?, nodes) in graph order
    for n in nodes:
        e = n in eager
        if runs and runs[-1][0] == e:
            runs[-1][1].append(n)
        else:
            runs.append((e, [n]))
    if not any(not e and any(_switch(n) is None for n in part) for e, part in runs):
        return None   # nothing but switches left to compile
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    final_nodes: list[fx.Node] = []
    fx.node.map_arg(gm.graph.output_node().args[0], final_nodes.append)
    steps: list[tuple[Callable, list[fx.Node], list[fx.Node]]] = []
    mode: bool | None = None   # the grad mode the graph's switches set before the part (None: the caller's)
    names = []
    for k, (through_torch, part) in enumerate(runs):
        later = [n for _, p in runs[k + 1:] for n in p]
        used = set(_uses(later)) | set(final_nodes)
        outs = [n for n in part if n in used]
        inside = set(part)
        ins = [n for n in _uses(part) if n not in inside]
        enter = mode
        for n in part:
            s = _switch(n)
            if s is not None:
                mode = s
        sub = _subgraph(gm, part, ins, outs)
        if through_torch or not outs:
            fn: Callable = sub
            if through_torch:
                names += [getattr(n.target, "__name__", str(n.target)) for n in part]
        elif all(n in placeholders for n in ins) and enter is None:
            fn = compile_fn(sub, [example_inputs[placeholders.index(n)] for n in ins])
        else:
            fn = _Specialized(sub, compile_fn)
        if enter is not None or mode is not None:
            # (a part run through torch by its generated forward, as PartitionedGraph runs one:
            # an error there is eager's, without FX's report of the traced module)
            fn = _InGradMode(fn.forward if isinstance(fn, fx.GraphModule) else fn, enter, mode)
        steps.append((fn, ins, outs))
    logs.log("fallback", f"graph split into {len(steps)} parts; eager islands: {', '.join(dict.fromkeys(names))}: "
                         "a tensor an op saved for backward written in place later in the graph (eager's "
                         "autograd saves and checks it)")
    return PartitionedGraph(gm, steps)


# ops whose result may be a view of their first argument (conservatively: reshape, flatten)
_VIEW_NAMES = frozenset({"getitem", "__getitem__", "view", "view_as", "reshape", "reshape_as", "transpose", "permute",
                         "t", "T", "mT", "narrow", "select", "slice", "unsqueeze", "squeeze", "expand", "expand_as",
                         "flatten", "unflatten", "diagonal", "as_strided", "unbind", "split", "chunk", "detach",
                         "movedim", "swapaxes", "unfold", "real", "imag", "alias"})


def island_input_written(gm: fx.GraphModule, island: fx.Node, env: dict) -> fx.Node | None:
    """A node after `island` (an op run through torch between compiled parts, ddsplit) that
    writes in place memory of one of its tensor inputs, where the op is an autograd node (an
    input requires grad); else None. Eager's node saved what it saved and a backward through it
    raises once the tensor is written; but with the write in a compiled part after it, that
    part's single autograd node links every output of the part to the island, and a backward
    from an output eager never linked to the island called the island's node, which raised
    (unpacking its saved tensors) where eager's backward did not. `env`: fake values of the
    nodes before `island` (ddsplit.first_data_dependent)."""
    if not torch.is_grad_enabled():
        return None
    ins = [a for a in _tensor_args(island) if isinstance(env.get(a), torch.Tensor)]
    if not any(env[a].requires_grad for a in ins):
        return None
    storages = {_storage(env[a]) for a in ins} - {None}
    from .attention_masks import _mutates

    after = False
    for n in gm.graph.nodes:
        if n is island:
            after = True
            continue
        if not after or not _mutates(n):
            continue
        m = n.kwargs["out"] if "out" in n.kwargs else n.args[0] if n.args else None
        if not isinstance(m, fx.Node):
            continue
        # up through the views made after the island to a value made before it
        seen = 0
        while m is not None and m not in env and seen < 64:
            name = m.target if isinstance(m.target, str) else getattr(m.target, "__name__", "")
            if m.op not in ("call_function", "call_method") or name not in _VIEW_NAMES or not m.args or \
                    not isinstance(m.args[0], fx.Node):
                m = None
                break
            m, seen = m.args[0], seen + 1
        if m is not None and _storage(env.get(m)) in storages:
            return n
    return None

