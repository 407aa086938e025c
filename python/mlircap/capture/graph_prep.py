"""What compiling a captured graph rewrites or splits first (graph_compile.py compiles the result):
inputs requiring grad that reach no output handed detached (_grad_free_inputs), a graph whose outputs
fall into separate gradient groups compiled one part per group (_separate_gradient_groups,
_SplitOutputs), sizes computed as 0-d integer tensors folded to numbers (_fold_number_sizes)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx


def _is_getattr_of(node: fx.Node, attr: str) -> bool:
    """`node` reads `x.<attr>` (capture records it as a trampoline over getattr)."""
    if len(node.args) != 2 or node.args[1] != attr or node.kwargs:
        return False
    t = node.target
    if t is getattr:
        return True
    return any(_cell(c) is getattr for c in getattr(t, "__closure__", None) or ())


def _cell(c: Any) -> Any:
    try:
        return c.cell_contents
    except ValueError:   # an empty cell
        return None


_DETACH = {torch.Tensor.detach, torch.detach, torch.ops.aten.detach.default}
# tensor attributes that detaching leaves as they are (spectral_norm reads `weight_mat.H`)
_PLAIN_ATTRS = ("H", "T", "mT", "mH", "shape", "dtype", "device", "ndim", "real", "imag")


def _cuts_history(node: fx.Node) -> bool:
    """`node` is `x.detach()` / `torch.detach(x)` / `x.data`: a value with no autograd history."""
    if node.op == "call_method":
        return node.target == "detach"
    return node.op == "call_function" and (node.target in _DETACH or _is_getattr_of(node, "data"))


def _reads_autograd_state(node: fx.Node) -> bool:
    """`node` may read what detaching its tensor changes: an attribute (`.grad`, `.requires_grad`,
    `.grad_fn`, `.is_leaf`; `.data` aside) or a hook / grad method (`retain_grad`, `register_hook`)."""
    if node.op == "call_function" and not _is_getattr_of(node, "data") and (
            node.target is getattr or any(_cell(c) is getattr for c in getattr(node.target, "__closure__", None) or ())):
        return True
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return "grad" in name or "hook" in name or "leaf" in name or name in ("__get__", "__set__")


def _may_return_view(node: fx.Node) -> bool:
    """`node`'s result may alias one of its tensor arguments (an aten op of its name returns an
    alias in some overload; indexing; anything unknown)."""
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name in ("__getitem__", "getitem"):
        return True
    packet = getattr(torch.ops.aten, name.strip("_"), None) if name else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return not name.startswith("__") or name.strip("_") not in _ARITH_DUNDERS
    for ov in packet.overloads():
        sch = getattr(packet, ov)._schema
        if any(r.alias_info is not None and not r.alias_info.is_write for r in sch.returns):
            return True
    return False


_ARITH_DUNDERS = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "radd", "rsub", "rmul",
                  "rtruediv", "matmul", "and", "or", "xor", "lt", "le", "gt", "ge", "eq", "ne", "abs", "invert"}


def _grad_free_inputs(gm: fx.GraphModule, examples: Sequence[Any]) -> tuple[int, ...]:
    """Positions of inputs that require grad but reach no output (nor any tensor written in
    place) through a differentiable op: read only through `.detach()` / `.data` or under
    no_grad, as a loss of an earlier graph summed into a running total after its
    `.backward()` (`total += loss.detach()`). Eager's autograd graph has no edge from the
    graph's results to such an input; aot_autograd's Function takes every input requiring
    grad as an edge, so a later backward through this graph walked into the earlier graph
    whose saved tensors that backward had freed ('Trying to backward through the graph a
    second time'). Such inputs are handed to the compiled graph detached."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(examples):
        return ()
    # (an input no node reads may still be read by a node's code, a vmap's function: kept)
    # (a leaf, a parameter: an edge into it adds nothing to its .grad; only values of earlier
    # graphs, with a history of their own, are cut)
    cand = [i for i, e in enumerate(examples)
            if isinstance(e, torch.Tensor) and e.requires_grad and e.grad_fn is not None and phs[i].users]
    if not cand:
        return ()
    from ..attention_masks import _mutates

    out = []
    for i in cand:
        tainted = {phs[i]}
        grad_on = True   # (a graph recorded under no_grad may run with grad on: a no_grad region counts when the graph switches it)
        free = True
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target in (torch._C._set_grad_enabled, torch.set_grad_enabled):
                grad_on = n.args[0] if isinstance(n.args[0], bool) else True
                continue
            if n.op == "placeholder":
                continue
            ins = []
            fx.node.map_arg((n.args, n.kwargs), ins.append)
            if not any(a in tainted for a in ins):
                continue
            if n.op == "output" or n.op not in ("call_function", "call_method") or (grad_on and _mutates(n)) or \
                    _reads_autograd_state(n) or _mutates(n) and n.args and n.args[0] in tainted:
                # (the input itself written in place, also under no_grad: a parameter's update or
                # weight clipping; the graph reads it on through the write's result, which the
                # taint does not follow: detached, the later ops lost its gradient and `.grad`)
                free = False
                break
            if (grad_on and not _cuts_history(n)) or (not grad_on and _may_return_view(n)):
                tainted.add(n)   # (a view made under no_grad still aliases the input)
        if free:
            out.append(i)
    return tuple(out)


def _output_nodes(gm: fx.GraphModule) -> list:
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    vals = out.args[0]
    return list(vals) if isinstance(vals, (tuple, list)) else None


def _separate_gradient_groups(gm: fx.GraphModule, examples: Sequence[Any]):
    """A graph whose outputs fall into groups that no input requiring grad links differentiably
    (`total = total + loss` of an earlier graph's loss beside the next micro-batch's loss): one
    autograd node for the whole graph (aot_autograd's Function) made a backward from one group's
    output walk into the other group's inputs, into an earlier graph whose backward had freed its
    saved tensors ('backward through the graph a second time'), where eager's per-op graph never
    reaches them. The same for groups of parameters alone: a GAN step's graph computing the
    discriminator's loss and the generator's `fake`, one node, the loss's backward freed the saved
    tensors the generator loss's backward through `fake` needs later. Such a graph is compiled as
    one part per group (each its own autograd node), every node in one part: a node in the part of
    the group whose inputs it depends on differentiably, any other (no history, or one another
    group reads through `.detach()` alone: D(fake.detach())) in the first part to run that needs it,
    later parts taking it as an input. Only where no node without users but a grad-mode switch
    (copied into every part) or an op that returned its own argument (in no part) is in the graph,
    the parts' order keeps the random draws' order, and an in-place write (spectral_norm's `out=`
    power iteration under no_grad) has its tensor read in its own part alone.
    Returns [(input slots, output slots, sub-graph)] in the order to run (_SplitOutputs) or None."""
    outs = _output_nodes(gm)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not outs or len(phs) != len(examples) or not all(isinstance(o, fx.Node) for o in outs):
        return None
    roots = {p: i for i, (p, e) in enumerate(zip(phs, examples)) if isinstance(e, torch.Tensor) and e.requires_grad}
    if len(roots) < 2:
        return None
    from ..attention_masks import _mutates
    from .draws import _node_draws

    anc: dict = {}   # node -> positions of inputs requiring grad it depends on differentiably
    modes, grad_on, dropped = [], True, set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            anc[n] = frozenset([roots[n]]) if n in roots else frozenset()
            continue
        if n.op == "output":
            continue
        if n.op == "call_function" and n.target in (torch._C._set_grad_enabled, torch.set_grad_enabled):
            if not isinstance(n.args[0], bool):
                return None
            grad_on = n.args[0]
            modes.append(n)
            continue
        if not n.users and n.meta.get("returns_argument"):
            # (`w.flatten(1)` of a matrix, `.contiguous()` of a contiguous tensor: the op returned its
            # argument, which the program reads on as the argument itself, graph_nodes; the node
            # computes nothing anything reads: in no part. Kept as a reason to give up, spectral_norm's
            # flatten made a GAN step's discriminator loss and `fake` one autograd node again)
            dropped.add(n)
            continue
        if n.op not in ("call_function", "call_method") or not n.users or \
                _reads_autograd_state(n) and not any(_is_getattr_of(n, a) for a in _PLAIN_ATTRS):
            return None
        ins: list = []
        fx.node.map_arg((n.args, n.kwargs), ins.append)
        anc[n] = frozenset() if _cuts_history(n) or not grad_on else frozenset().union(*(anc[a] for a in ins))
    # union of input sets over outputs
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    for o in outs:
        s = sorted(anc[o])
        for a in s[1:]:
            parent[find(a)] = find(s[0])
    keys = {}
    for j, o in enumerate(outs):
        if anc[o]:
            keys.setdefault(find(min(anc[o])), []).append(j)
    groups = list(keys.values())   # (groups of parameters alone too: see above)
    if len(groups) < 2:
        return None
    # outputs without gradient history (a power iteration's u / v under no_grad) belong to no group:
    # each comes out of the part that computes it. Given to the first group, they pulled what they
    # read into its part: a hand-written spectral norm's `u.div_(...)` then ran in the generator's part
    # and the discriminator's part read u, no split ('backward through the graph a second time')
    free = [j for j, o in enumerate(outs) if not anc[o]]
    owner = {find(min(anc[outs[j]])): k for k, g in enumerate(groups) for j in g if anc[outs[j]]}
    needs = []
    for g in groups:
        needed: set = set()
        stack = [outs[j] for j in g]
        while stack:
            n = stack.pop()
            if n in needed or n.op == "placeholder":
                continue
            needed.add(n)
            fx.node.map_arg((n.args, n.kwargs), stack.append)
        needs.append(needed)
    body = [n for n in gm.graph.nodes if n.op not in ("output", "placeholder") and n not in modes and n not in dropped]
    # each node runs in one part: a node depending differentiably on a group's inputs in that group's
    # part, others (no gradient history, or one the group reads through .detach() alone) in the first
    # part to run that needs them; a part reading another's value takes it as an input, after it
    home = {n: owner.get(find(min(anc[n]))) if anc[n] else None for n in body}
    deps = [set() for _ in groups]
    for k, nd in enumerate(needs):
        deps[k] |= {home[n] for n in nd if home[n] is not None and home[n] != k}
    order, placed = [], set()
    rng_first = {}
    for i, n in enumerate(body):
        if _node_draws(n):
            for k, nd in enumerate(needs):
                if n in nd:
                    rng_first.setdefault(k, i)
    while len(order) < len(groups):
        ready = [k for k in range(len(groups)) if k not in placed and deps[k] <= placed]
        if not ready:
            return None
        k = min(ready, key=lambda k: (rng_first.get(k, len(body)), k))
        order.append(k)
        placed.add(k)
    rank = {k: r for r, k in enumerate(order)}
    for n in body:
        if home[n] is None:
            needers = [k for k, nd in enumerate(needs) if n in nd]
            if needers:
                home[n] = min(needers, key=rank.get)
    for n in body:
        if home[n] is None:
            # no group needs it (read by outputs without gradient history alone): no history either,
            # in the first part after those of its inputs, which hand them on to it
            if anc[n]:
                return None
            ins = []
            fx.node.map_arg((n.args, n.kwargs), ins.append)
            ins = [a for a in ins if a in home]
            home[n] = max((home[a] for a in ins), key=rank.get, default=order[0])
            needs[home[n]].update([n, *ins])
    outs_of = [sorted(g + [j for j in free if home.get(outs[j], order[0]) == k]) for k, g in enumerate(groups)]
    last_draw = -1
    for n in body:
        if _node_draws(n):   # random draws in the graph's order
            if rank[home[n]] < last_draw:
                return None
            last_draw = rank[home[n]]
        if _mutates(n):   # an in-place write: its tensor read in the writing part alone
            base = n.kwargs["out"] if "out" in n.kwargs else n.args[0] if n.args else None
            if not isinstance(base, fx.Node) or any(home.get(u, home[n]) != home[n] for u in base.users):
                return None
    # the parts, in order: inputs are slots (the graph's inputs, then values parts hand on), outputs the
    # graph's output positions, then slots of values handed on
    n_out, n_in = len(outs), len(phs)
    slot: dict = {p: i for i, p in enumerate(phs)}
    result = []
    for k in order:
        graph = fx.Graph()
        env: dict = {}
        ins: list = []

        def arg(a, env=env, ins=ins, graph=graph):
            if a not in env:
                ins.append(slot[a])
                env[a] = graph.placeholder(f"in{len(ins) - 1}")
            return env[a]
        mine = {n for n in body if home[n] == k}
        for n in gm.graph.nodes:
            if n in modes or n in mine:
                env[n] = graph.node_copy(n, arg)
        later = [n for n in mine if any(n in needs[q] for q in order[order.index(k) + 1:]) and n not in slot]
        for n in later:
            slot[n] = len(slot)
        graph.output(tuple([env[outs[j]] if outs[j] in env else arg(outs[j]) for j in outs_of[k]] +
                           [env[n] for n in later]))
        result.append((ins, outs_of[k] + [n_out + slot[n] - n_in for n in later], fx.GraphModule(gm, graph)))
    return result


class _SplitOutputs:
    """The parts of _separate_gradient_groups, each compiled on its own at its first call (a part may
    take values an earlier part hands on): called in order with the inputs each takes, their outputs
    put back in the graph's order."""
    __slots__ = ("parts", "n", "compile")

    def __init__(self, parts: list, n: int, compile: Callable) -> None:
        self.parts, self.n, self.compile = parts, n, compile

    def __call__(self, *args: Any) -> Any:
        res = [None] * self.n
        env = list(args)
        for p, (ins, outs, fn) in enumerate(self.parts):
            a = [env[i] for i in ins]
            if isinstance(fn, fx.GraphModule):
                fn = self.compile(fn, a)
                self.parts[p] = (ins, outs, fn)
            for j, v in zip(outs, fn(*a)):
                if j < self.n:
                    res[j] = v
                else:   # (handed on in order: the next slot)
                    env.append(v)
        return tuple(res)


# torch functions of Python numbers whose 0-d integer result code passes as a size, and the
# Tensor methods of such a result that keep it one
_NUMBER_FUNCTIONS = frozenset({torch.div, torch.floor_divide, torch.true_divide, torch.remainder, torch.fmod,
                               torch.mul, torch.add, torch.sub})
_NUMBER_METHODS = frozenset({"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
                             "__rfloordiv__", "__mod__", "__neg__", "add", "sub", "mul", "div"})
# Tensor methods whose arguments after the tensor are sizes (and strides)
_SIZE_METHODS = frozenset({"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_empty",
                           "new_full", "unflatten", "as_strided"})


def _fold_number_sizes(gm: fx.GraphModule) -> None:
    """`t.view(b, torch.div(n, w, rounding_mode="trunc"), w, d)` (transformers' Longformer
    chunking; n a size, recorded as a number the function's guards fix), and arithmetic on it
    (`size[1] * 2 - 1` handed to as_strided): the size such a 0-d integer tensor computed from
    numbers alone gives a size argument is its value, now a number of the graph. aot_autograd
    read it as data (`aten._local_scalar_dense`, a data-dependent output under fake tensors),
    and the backend failed to compile the whole graph, which then ran eagerly."""
    values: dict[fx.Node, torch.Tensor] = {}

    def literal(a: Any) -> bool:
        return type(a) in (int, bool) or a in values if isinstance(a, fx.Node) else \
            type(a) in (int, bool, str) or a is None
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.args:
            continue
        name = getattr(node.target, "__name__", None)
        if not (node.target in _NUMBER_FUNCTIONS or name in _NUMBER_METHODS and isinstance(node.args[0], fx.Node)
                and node.args[0] in values):
            continue
        if not all(literal(a) for a in (*node.args, *node.kwargs.values())):
            continue
        try:
            value = node.target(*[values.get(a, a) if isinstance(a, fx.Node) else a for a in node.args],
                                **{k: values.get(v, v) if isinstance(v, fx.Node) else v
                                   for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001 (eager raises it where the graph runs)
            continue
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() and \
                not value.is_complex() and value.dtype is not torch.bool and not value.requires_grad:
            values[node] = value
    if not values:
        return

    def swap(a: Any) -> Any:
        if isinstance(a, fx.Node) and a in values:
            return int(values[a])
        if type(a) in (list, tuple):
            return type(a)(swap(x) for x in a)
        return a
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "__name__", None) not in _SIZE_METHODS or \
                not node.args or not isinstance(node.args[0], fx.Node) or node.args[0] in values:
            continue
        args = (node.args[0], *(swap(a) for a in node.args[1:]))
        kwargs = {k: swap(v) for k, v in node.kwargs.items()}
        if args != node.args or kwargs != node.kwargs:
            node.args, node.kwargs = args, kwargs
            changed = True
    if changed:
        for node in reversed(list(values)):   # (only the folded numbers: other nodes may write)
            if not node.users:
                gm.graph.erase_node(node)
        gm.recompile()
