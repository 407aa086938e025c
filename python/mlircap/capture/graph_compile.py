"""Compiling captured graphs with the user backend: fallback to the FX graph when the
backend fails, first-run check, higher-order gradients, strict-mode errors."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from .. import logs as _logs
from .base import _strict_error

if TYPE_CHECKING:  # annotations only: recorder imports this module
    from .graph import _Seg
    from .recorder import _Recorder


def _graph_loc(gm: fx.GraphModule, text: str = "") -> str:
    """The user's file:line of the node an error names (FX's "While executing %name"),
    else of the graph's first node with a source location."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    m = re.search(r"While executing %(\w+)", text)
    if m:
        nodes = [n for n in nodes if n.name == m.group(1)] + nodes
    for n in nodes:
        t = n.meta.get("stack_trace") or ""
        lm = re.search(r'File "([^"]+)", line (\d+)', t)
        if lm:
            return f"{lm.group(1)}:{lm.group(2)}"
    return "<unknown>"


_HAS_LOC = re.compile(r" at \S+:\d+")


def _strict_backend_error(e: Exception, gm: fx.GraphModule, what: str) -> Exception:
    """strict=True: the error for a captured graph the backend did not compile, naming the
    user's file:line (kept as it is when the backend's message already names one)."""
    text = str(e)
    head, _, rest = text.partition("\n")
    if getattr(e, "propagate", False) and _HAS_LOC.search(head):
        return e
    if "DynamicOutputShape" in head or "data-dependent" in head.lower() or "DataDependent" in head:
        head += " (an operation whose output shape depends on tensor data)"
    prefix = "" if getattr(e, "propagate", False) else f"{what}: {type(e).__name__}: "
    err = _strict_error(f"{prefix}{head} at {_graph_loc(gm, text)}" + (f"\n{rest}" if rest else ""))
    err.__cause__ = e
    return err


def _compile_graph(backend: Callable, gm: fx.GraphModule, examples: list, uses_rng: bool,
                   double_backward: bool = False, strict: bool = False, dyn_inputs: tuple = ()) -> Callable:
    """Compile one captured graph with the user backend.  If the backend fails to compile
    it, or its compiled function fails on the first run before touching any input, the
    captured FX graph itself is run instead (same semantics, just not backend-compiled);
    strict=True raises instead.  `dyn_inputs`: positions of inputs whose shape depends on
    tensor data (made by `where(m)`, `x[mask]` before a graph break): the graph is
    compiled per shape of those (_PerShape)."""
    if dyn_inputs:
        return _PerShape(backend, gm, examples, uses_rng, double_backward, strict, tuple(dyn_inputs))
    parts = _separate_gradient_groups(gm, examples)
    if parts is not None:
        return _SplitOutputs(parts, len(_output_nodes(gm)), lambda sub, ex: _compile_graph(
            backend, sub, ex, uses_rng, double_backward, strict))
    grad = torch.is_grad_enabled()
    cut = _grad_free_inputs(gm, examples)
    if cut:
        examples = [e.detach() if i in cut else e for i, e in enumerate(examples)]
    try:
        with torch._C.DisableTorchFunction():
            fn = backend(gm, examples)
    except Exception as e:
        # a graph that switches grad mode (an optimizer step's no_grad) and failed to
        # trace halfway left the process-wide grad mode switched: restore it
        torch._C._set_grad_enabled(grad)
        if strict:
            raise _strict_backend_error(e, gm, "the backend failed to compile a captured graph")
        if getattr(e, "propagate", False):  # the backend asked for its error to reach the user (strict mode)
            raise
        _logs.warn(f"mlircap.capture: backend failed to compile a captured graph "
                      f"({type(e).__name__}: {str(e)[:200]}); running the graph without it", RuntimeWarning)
        return gm.forward
    if fn is None:
        return gm.forward
    checked = _FirstRunChecked(fn, gm.forward, uses_rng, gm if strict else None)
    if double_backward and fn != gm.forward:
        checked = _HigherOrderGrad(checked, gm)
    return _DetachedInputs(checked, cut) if cut else checked


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
    (copied into every part) is in the graph, the parts' order keeps the random draws' order, and
    an in-place write (spectral_norm's `out=` power iteration under no_grad) has its tensor read
    in its own part alone.
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
    modes, grad_on = [], True
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
    groups[0] = sorted(groups[0] + [j for j, o in enumerate(outs) if not anc[o]])
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
    body = [n for n in gm.graph.nodes if n.op not in ("output", "placeholder") and n not in modes]
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
            if not needers:
                return None
            home[n] = min(needers, key=rank.get)
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
        graph.output(tuple([env[outs[j]] for j in groups[k]] + [env[n] for n in later]))
        result.append((ins, groups[k] + [n_out + slot[n] - n_in for n in later], fx.GraphModule(gm, graph)))
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


class _DetachedInputs:
    """Calls `fn` with the inputs at `cut` detached (_grad_free_inputs)."""
    __slots__ = ("fns", "cut")

    def __init__(self, fn: Callable, cut: tuple[int, ...]) -> None:
        self.fns, self.cut = [fn], cut
        if isinstance(fn, _FirstRunChecked):
            fn.slot = (self.fns, 0)

    def __call__(self, *args: Any) -> Any:
        a = list(args)
        for i in self.cut:
            if isinstance(a[i], torch.Tensor):
                a[i] = a[i].detach()
        return self.fns[0](*a)


class _PerShape:
    """A captured graph taking tensors whose shapes depend on tensor data: the function
    guards checked the call's arguments, not these, so a later call hands the graph
    other sizes than it was compiled for (a backend compiling static shapes then read
    and wrote with the first call's sizes: wrong results). Compiled once per shape of
    those inputs, at most MAX_VARIANTS, then the captured graph runs (strict=True:
    raises)."""
    MAX_VARIANTS = 8
    __slots__ = ("backend", "gm", "uses_rng", "double_backward", "strict", "dyn", "variants")

    def __init__(self, backend: Callable, gm: fx.GraphModule, examples: list, uses_rng: bool,
                 double_backward: bool, strict: bool, dyn: tuple) -> None:
        self.backend, self.gm, self.uses_rng = backend, gm, uses_rng
        self.double_backward, self.strict, self.dyn = double_backward, strict, dyn
        self.variants: dict[tuple, Callable] = {}
        self.variants[self._key(examples)] = self._compile(examples)

    def _key(self, args: Sequence[Any]) -> tuple:
        return tuple(tuple(args[i].shape) if isinstance(args[i], torch.Tensor) else None for i in self.dyn)

    def _compile(self, examples: Sequence[Any]) -> Callable:
        return _compile_graph(self.backend, self.gm, list(examples), self.uses_rng, self.double_backward,
                              self.strict)

    def __call__(self, *args: Any) -> Any:
        key = self._key(args)
        fn = self.variants.get(key)
        if fn is None:
            if len(self.variants) >= self.MAX_VARIANTS:
                if self.strict:
                    raise _strict_error(f"a captured graph taking tensors whose shapes depend on tensor data "
                                        f"met more than {self.MAX_VARIANTS} shapes at {_graph_loc(self.gm)}")
                fn = self.gm.forward
            else:
                fn = self._compile(args)
            self.variants[key] = fn
        return fn(*args)


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
        if isinstance(fn, _FirstRunChecked):
            fn.slot = (self.fns, 0)

    @property
    def fn(self) -> Callable:
        return self.fns[0]

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled() and not torch._C._is_torch_function_mode_enabled():
            for a in args:
                if a.requires_grad:
                    # (the Function saves every input for its backward, and an inference tensor,
                    # made under torch.inference_mode, cannot be saved: the graph then runs as
                    # it is, as eager, which saves only what each op's gradient needs)
                    if any(b.is_inference() for b in args):
                        break
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
        if isinstance(o, torch.Tensor) and o.grad_fn is not None:
            node = o.grad_fn
            break
    if node is None:
        return True   # nothing to differentiate (no output requires grad)
    cls = getattr(node, "_forward_cls", None)
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
        pairs = [(o, g) for o, g, d in zip(outs, grads, ctx.diff) if d and o.requires_grad]
        need = [i for i, x in enumerate(ins) if x.requires_grad]
        gi = torch.autograd.grad([o for o, _ in pairs], [ins[i] for i in need], [g for _, g in pairs],
                                 allow_unused=True, retain_graph=_keep_graph(), create_graph=create) \
            if pairs and need else ()
        out = [None] * len(ins)
        for i, g in zip(need, gi):
            out[i] = g
        return (None, *out)


class _FirstRunChecked:
    """Runs the backend-compiled `fn`; its first run falls back to the captured graph
    when `fn` fails before touching an input.  `slot` (list, index): where the caller
    holds this object; once checked, `fn` itself (or the fallback) takes its place
    there, so later calls skip this layer."""
    __slots__ = ("fn", "fallback", "uses_rng", "checked", "strict_gm", "slot")

    def __init__(self, fn: Callable, fallback: Callable, uses_rng: bool,
                 strict_gm: fx.GraphModule | None = None) -> None:
        self.fn, self.fallback, self.uses_rng, self.checked = fn, fallback, uses_rng, False
        self.strict_gm = strict_gm   # strict=True: a failing first run raises (after the eager check)
        self.slot: tuple[list, int] | None = None

    def _done(self) -> None:
        self.checked = True
        if self.slot is not None:
            lst, i = self.slot
            if lst[i] is self:
                lst[i] = self.fn

    def __call__(self, *args: Any) -> Any:
        if self.checked:
            return self.fn(*args)
        vers = [a._version if isinstance(a, torch.Tensor) and not a.is_inference() else None for a in args]
        rng = torch.get_rng_state() if self.uses_rng else None
        grad = torch.is_grad_enabled()
        try:
            out = self.fn(*args)
        except Exception as e:
            torch._C._set_grad_enabled(grad)   # a graph failing after a grad-mode switch
            if getattr(e, "propagate", False) or any(
                    v is not None and a._version != v for a, v in zip(args, vers)):
                raise
            if rng is not None:
                torch.set_rng_state(rng)
            if self.strict_gm is not None:
                self.fallback(*args)   # the same error eagerly: the user's, raised as eager raises it
                raise _strict_backend_error(e, self.strict_gm, "the backend-compiled graph failed on its first run")
            try:
                out = self.fallback(*args)
            except Exception as e2:
                if type(e2) is type(e):
                    # the captured graph raises too (integer division by zero, an index out of
                    # range): the call's data, not the backend; the compiled graph is kept for
                    # the next call, still unchecked (it ran uncompiled for good before)
                    raise
                self.fn = self.fallback
                self._done()
                raise
            _logs.warn(f"mlircap.capture: backend-compiled graph failed on its first run "
                          f"({type(e).__name__}: {str(e)[:200]}); running the captured graph without it",
                          RuntimeWarning)
            self.fn = self.fallback
            self._done()
            return out
        self._done()
        return out


def _double_backward_ok(rec: _Recorder, seg: _Seg) -> bool:
    """Can this graph run under _HigherOrderGrad: it takes some input that requires grad,
    makes no in-place change, draws no random numbers (a recompute would draw others) and
    returns no view of an input (a custom autograd Function would lose the view). Nor a
    graph that calls autograd.grad and takes an input with a history: the Function cuts
    that history, through which the call differentiates (forces = -grad(energy, pos) where
    the energy came from an eager callee: 'differentiated Tensor ... not used')."""
    if seg.inplace or rec.uses_rng or not any(t.requires_grad for t in seg.examples):
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
