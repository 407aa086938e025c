"""Graphs with an op whose output shape depends on tensor data.

`unique`, `nonzero`, boolean-mask indexing (`x[x > 0]`), `masked_select`,
`repeat_interleave` with tensor repeats and the like cannot be traced with fake
tensors: aot_autograd fails on them (DynamicOutputShapeException /
DataDependentOutputException) and the whole captured graph used to run eagerly.

`split_data_dependent` cuts the captured graph at the first such op instead:

    before   the nodes before it: compiled now, with the example inputs;
    the op   (and the getitems of its tuple result) runs through torch;
    after    the nodes after it: compiled on first use, once per signature of
             its inputs (shapes, strides, dtypes; non-tensor values are baked
             in as constants), at most `MAX_VARIANTS` signatures, then eagerly.

Node order is kept, so in-place updates and reads happen in the program's
order. `after` goes through the backend again, so a second data-dependent op
in it splits it again. This is TorchDynamo's graph break on such ops (its
default, capture_dynamic_output_shape_ops=False), done inside the backend so
that both capture fronts get it. The op is reported as an eager island on the
'fallback' log; strict=True raises instead.

An op with a bounded form (bounded.py: unique, unique_consecutive, nonzero,
argwhere) does not run through torch: it is computed at its static bound in the
part before, and the graph is cut at the trim of its results to their size
instead (no island; strict=True runs it). One whose result has a static shape
(of a tensor without elements; combinations) is replaced and the graph compiled
whole.
"""
from __future__ import annotations

import copy
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from . import logs
from .partition import PartitionedGraph

MAX_VARIANTS = 8   # compiled signatures of the part after the op; more run eagerly

_DD_EXCEPTIONS = ("DynamicOutputShapeException", "DataDependentOutputException",
                  "GuardOnDataDependentSymNode", "UnsupportedOperatorException")


def is_data_dependent_error(e: BaseException) -> bool:
    """aot_autograd (or fake propagation) failed on an op whose output depends on data."""
    seen = 0
    while e is not None and seen < 8:
        if type(e).__name__ in _DD_EXCEPTIONS[:3]:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _fake_run(node: fx.Node, gm: fx.GraphModule, env: dict) -> Any:
    args = fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "get_attr":
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        return obj
    raise NotImplementedError(node.op)


class restoring_global_modes:
    """Restores, on exit, the grad mode and the autocast state (per device enabled and dtype,
    the cast cache flag, the nesting count) as they were on entry.  Running a captured graph's
    nodes other than by calling it whole (tracing, fake propagation, a part of it) runs its
    torch._C._set_grad_enabled and _enter_autocast / _exit_autocast switch nodes for real: one
    stopped inside a block, or a part ending inside one, left the block's state for the rest
    of the process (grad off: every later backward raised; autocast on, and the cast cache
    never cleared again, which the outermost autocast exit does)."""

    _DEVICES = ("cpu", "cuda")

    def __enter__(self) -> restoring_global_modes:
        self.grad = torch.is_grad_enabled()
        self.autocast = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in self._DEVICES]
        self.cache = torch.is_autocast_cache_enabled()
        self.nesting = _autocast_nesting()
        return self

    def __exit__(self, *exc: Any) -> None:
        torch._C._set_grad_enabled(self.grad)
        for d, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(d, enabled)
            torch.set_autocast_dtype(d, dtype)
        torch.set_autocast_cache_enabled(self.cache)
        n = _autocast_nesting()
        while n > self.nesting:
            n = torch.autocast_decrement_nesting()
            if n == 0:
                torch.clear_autocast_cache()
        while n < self.nesting:
            n = torch.autocast_increment_nesting()


def _autocast_nesting() -> int:
    n = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return n


def first_data_dependent(gm: fx.GraphModule, example_inputs: Sequence, any_failure: bool = False,
                         env: dict | None = None) -> fx.Node | None:
    """The first node of `gm` whose output shape (or value) needs tensor data, found by
    running the graph on fake tensors; None when there is none or propagation fails
    for another reason first. `any_failure`: the first node fake tensors cannot run
    at all, whatever the reason (a meta kernel stricter than the real one:
    `_grouped_mm` with int64 offsets on torch 2.11). `env`, when given, receives
    the fake value of every node before it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    env = {} if env is None else env
    inputs = iter(example_inputs)
    with warnings.catch_warnings(), restoring_global_modes():   # (its mode switch nodes run for real)
        warnings.simplefilter("ignore")
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                v = next(inputs, None)
                env[node] = mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                continue
            if node.op == "output":
                return None
            try:
                with mode, torch._C.DisableTorchFunction():
                    env[node] = _fake_run(node, gm, env)
            except Exception as e:  # noqa: BLE001 - any other failure: no split point known
                return node if any_failure or is_data_dependent_error(e) else None
    return None


def _subgraph(gm: fx.GraphModule, nodes: list[fx.Node], inputs: list[fx.Node],
              outputs: list[fx.Node]) -> fx.GraphModule:
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in inputs:
        p = g.placeholder(n.name)
        p.meta = dict(n.meta)
        env[n] = p
    for n in nodes:
        env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[o] for o in outputs))
    return fx.GraphModule(gm, g)


def _uses(nodes: list[fx.Node]) -> list[fx.Node]:
    """The values `nodes` read, in first-use order."""
    seen: dict[fx.Node, None] = {}
    for n in nodes:
        fx.node.map_arg((n.args, n.kwargs), lambda a: seen.setdefault(a))
    return list(seen)


def _differentiates_after(gm: fx.GraphModule, dd: fx.Node) -> bool:
    """An autograd.grad / backward call of the graph at or after `dd`: split there, the part
    after the op takes its results as inputs of its own, and the call traced in that part
    differentiates only through the part (`autograd.grad(x[mask].sum() + x.sum(), x)`: the
    masked term's gradient was lost, 1 where eager gives 2: bench/modules12.py
    nan_robust_huber_targets_missing_mask). That part runs as captured (eager's autograd over
    the real history: the part before the op stays compiled)."""
    seen = False
    for n in gm.graph.nodes:
        seen = seen or n is dd
        if not seen or n.op not in ("call_function", "call_method"):
            continue
        t = n.target
        if t is torch.autograd.grad or t is torch.autograd.backward or t == "backward" or \
                getattr(t, "__name__", None) == "backward":
            return True
    return False


def split_data_dependent(gm: fx.GraphModule, example_inputs: Sequence,
                         compile_fn: Callable[[fx.GraphModule, list], Callable],
                         fake_failure: str | None = None, strict: bool = False) -> Callable | None:
    """`gm` as compiled parts around its first data-dependent op (module docstring),
    or None when it has none. `compile_fn(gm, example_inputs)` is the backend.
    `fake_failure`: aot_autograd failed for another reason (what failed); the op
    split off is then the first one fake tensors cannot run, and the user is warned.
    `strict` (strict=True): only splits that run nothing through torch (the op computed
    at its bound, bounded.py); None where the op itself would run eagerly, and a part
    after it that would run eagerly, or an input the bounded form does not model,
    raises MlircapCompileError when called."""
    if strict and fake_failure is not None:
        return None
    why = fake_failure or "data-dependent (its output shape depends on tensor data)"
    env: dict[fx.Node, Any] = {}
    dd = first_data_dependent(gm, example_inputs, any_failure=fake_failure is not None, env=env)
    if dd is None:
        return None
    if fake_failure is None and not getattr(dd.target, "mlircap_trim", False):
        from . import bounded

        # an op with a bounded form (unique, ...): computed compiled at its bound,
        # and the graph split at the trim of its results to their size instead
        g2 = copy.copy(gm)
        g2.graph = copy.deepcopy(gm.graph)
        by_name = {n.name: n for n in g2.graph.nodes}
        env2 = {by_name[n.name]: v for n, v in env.items()}
        if bounded.rewrite(g2, by_name[dd.name], env2):
            if strict:
                for n in g2.graph.nodes:
                    if getattr(n.target, "mlircap_trim", False):
                        n.target.strict = True   # an unmodelled input raises instead of rerunning
            again = split_data_dependent(g2, example_inputs, compile_fn, strict=strict)
            # a static form (an op of an empty tensor, combinations): nothing left to split
            return again if again is not None else compile_fn(g2, list(example_inputs))
    if strict and not getattr(dd.target, "mlircap_trim", False):
        return None   # the op would run through torch
    if not getattr(dd.target, "mlircap_trim", False):
        from .saved_writes import island_input_written

        w = island_input_written(gm, dd, env)
        if w is not None:   # (the graph then runs as captured: eager's autograd, correct)
            logs.log("fallback", f"graph not split at {getattr(dd.target, '__name__', dd.target)}: "
                                 f"{getattr(w.target, '__name__', w.target)} after it writes its input in place")
            return None
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    i = nodes.index(dd)
    op_nodes = [dd] + [u for u in dd.users if u.op == "call_function" and u.target is operator.getitem]
    op_set = set(op_nodes)
    before = [n for n in nodes[:i] if n not in op_set]
    after = [n for n in nodes[i + 1:] if n not in op_set]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out_args = gm.graph.output_node().args[0]
    final_nodes: list[fx.Node] = []
    fx.node.map_arg(out_args, final_nodes.append)

    def needed_later(part: list[fx.Node], later: list[fx.Node]) -> list[fx.Node]:
        used = set(_uses(later)) | set(final_nodes)
        return [n for n in part if n in used]

    # the getitems (or the op itself when nothing unpacks it) are its outputs
    op_outs = op_nodes[1:] + [dd] if any(u not in op_set for u in dd.users) or dd in final_nodes \
        or len(op_nodes) == 1 else op_nodes[1:]
    steps: list[tuple[Callable, list[fx.Node], list[fx.Node]]] = []
    name = getattr(dd.target, "__name__", str(dd.target))
    if before:
        outs = needed_later(before, op_nodes + after)
        inside = set(before)
        ins = [n for n in _uses(before) if n not in inside]
        sub = _subgraph(gm, before, ins, outs)
        if outs:
            examples = [example_inputs[placeholders.index(n)] for n in ins]
            steps.append((_in_grad_mode(compile_fn(sub, examples), before), ins, outs))
        else:   # only effects (in-place updates of inputs): run as it is
            steps.append((sub, ins, outs))
    op_ins = [n for n in _uses(op_nodes) if n not in op_set]
    steps.append((_subgraph(gm, op_nodes, op_ins, op_outs), op_ins, op_outs))
    if after:
        outs = needed_later(after, [])
        inside = set(after)
        ins = [n for n in _uses(after) if n not in inside]
        sub = _subgraph(gm, after, ins, outs)
        if outs and _differentiates_after(gm, dd):
            # (its autograd.grad then follows the real history, through the op and the part before)
            logs.log("fallback", "the part after the split differentiates (autograd.grad / backward): it runs as captured")
            steps.append((_in_grad_mode(sub, after), ins, outs))
        else:
            steps.append((_in_grad_mode(_Specialized(sub, compile_fn, strict), after) if outs else sub, ins, outs))
    if getattr(dd.target, "mlircap_trim", False):   # bounded.py: the op itself compiled
        logs.log("fallback", f"graph split into {len(steps)} parts at {name}: the results of an op of "
                             "data-dependent size, computed compiled at their bound, trimmed to their size")
    else:
        logs.log("fallback", f"graph split into {len(steps)} parts; eager islands: {name}: {why}")
    if fake_failure is not None:   # not by design: the user hears of it
        from .backend import _node_loc

        logs.warn(f"mlircap: {name} at {_node_loc(dd)} runs through torch, the graph is compiled "
                      f"around it: {why}", stacklevel=2)
    # run in order, each value freed after its last use: the partitioner's runner
    return PartitionedGraph(gm, steps)


def _grad_modes(nodes: list[fx.Node]) -> tuple[bool | None, bool | None]:
    """(the grad mode a part's leading torch._C._set_grad_enabled nodes set, the mode its last
    one leaves); None where it has none."""
    enter = leave = None
    lead = True
    for n in nodes:
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
            leave = bool(n.args[0])
            if lead:
                enter = leave
        else:
            lead = False
    return enter, leave


class _InGradMode:
    """A compiled part of a split graph that switches grad mode (a torch.no_grad() block the
    data-dependent op splits: the captured graph switches grad mode with
    torch._C._set_grad_enabled nodes, and run whole ends in the mode it started in, but a
    compiled part does not switch the caller's mode at all).  Run in the mode its leading
    switches set, leaving the mode its last one sets, so that the island after it and the
    caller after the last part see eager's mode (grad stayed off for good after the call)."""
    __slots__ = ("fn", "enter", "leave")

    def __init__(self, fn: Callable, enter: bool | None, leave: bool | None) -> None:
        self.fn, self.enter, self.leave = fn, enter, leave

    def __call__(self, *args: Any) -> Any:
        if self.enter is not None:
            torch._C._set_grad_enabled(self.enter)
        out = self.fn(*args)
        if self.leave is not None:
            torch._C._set_grad_enabled(self.leave)
        return out


def _in_grad_mode(fn: Callable, nodes: list[fx.Node]) -> Callable:
    enter, leave = _grad_modes(nodes)
    return fn if enter is None and leave is None else _InGradMode(fn, enter, leave)


def _strict_error(what: str) -> None:
    from .backend import MlircapCompileError

    raise MlircapCompileError(f"{what} (strict=True)")


def _signature(v: Any) -> tuple:
    if isinstance(v, torch.Tensor):
        return ("T", tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, v.device, v.requires_grad)
    return ("V", type(v).__name__, repr(v))


class _FastKey:
    """A signature of _Specialized checked in one call: the tensors' metadata by one
    TensorMetas / TensorGuards check (type, dispatch keys, dtype, device, requires_grad,
    sizes, strides: all _signature reads but the storage offset, which is compared on its
    own), the non-tensor inputs by their _signature.  Stricter than the signature, never
    looser (a miss takes the signature's path): _signature of every input cost ~2.6 us a
    tensor per call, where the part takes the weights of the layers after the op (two packed
    LSTM / GRU stacks: 73 inputs, ~0.19 ms a call against eager's 1.4 ms)."""
    __slots__ = ("n", "tpos", "check", "scan_nested", "offsets", "others", "entry")

    def __init__(self, args: tuple, entry: tuple[Callable, list[int]]) -> None:
        from .capture import _tensor_ext
        from .capture.guard_tensors import _tensor_guards

        self.n, self.entry = len(args), entry
        self.tpos = [k for k, a in enumerate(args) if type(a) is torch.Tensor or type(a) is torch.nn.Parameter]
        ts = [args[k] for k in self.tpos]
        ext = _tensor_ext.load()
        # (TensorMetas turns a nested tensor down; TensorGuards aborts the process reading its strides)
        self.scan_nested = ext is None
        self.check = None if not ts else ext.TensorMetas(*ts).check if ext is not None else _tensor_guards(*ts).check
        self.offsets = [t.storage_offset() for t in ts]
        tensors = set(self.tpos)
        self.others = [(k, _signature(a)) for k, a in enumerate(args) if k not in tensors]

    def match(self, args: tuple) -> bool:
        if len(args) != self.n:
            return False
        ts = [args[k] for k in self.tpos]
        if self.scan_nested and any(getattr(t, "is_nested", False) for t in ts):
            return False
        if self.check is not None and not self.check(*ts):
            return False
        return [t.storage_offset() for t in ts] == self.offsets and \
            all(_signature(args[k]) == sig for k, sig in self.others)


class _Specialized:
    """The part after a data-dependent op: compiled per signature of its inputs, with
    non-tensor inputs baked in as constants; past MAX_VARIANTS signatures, or when a
    compile or first run fails, that signature runs the FX graph eagerly.  The signature
    last hit is tried first by its _FastKey."""

    def __init__(self, gm: fx.GraphModule, compile_fn: Callable, strict: bool = False) -> None:
        self.gm, self.compile_fn, self.strict = gm, compile_fn, strict
        self.variants: dict[tuple, tuple[Callable, list[int]]] = {}
        self.nested: dict[tuple, Callable] = {}
        self.fast: dict[tuple, _FastKey | None] = {}
        self.last: _FastKey | None = None

    def __call__(self, *args: Any) -> Any:
        last = self.last
        if last is not None and last.match(args):
            fn, tensor_pos = last.entry
            return fn(*[args[i] for i in tensor_pos])
        at = tuple(k for k, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_nested)
        if at:   # (a nested tensor has no sizes to key a signature by)
            split = self.nested.get(at)
            if split is not None:
                return split(*args)
            return self._split_nested(at, args)
        key = tuple(_signature(a) for a in args)
        hit = self.variants.get(key)
        if hit is None:
            hit = self._compile(args)
            if hit is None:
                return self.gm(*args)
        if key not in self.fast:
            try:
                self.fast[key] = _FastKey(args, hit)
            except Exception:  # noqa: BLE001 - no one-call check of these tensors: the signature's path
                self.fast[key] = None
        self.last = self.fast[key]
        fn, tensor_pos = hit
        return fn(*[args[i] for i in tensor_pos])

    def _split_nested(self, at: tuple, args: tuple) -> Any:
        """The part's nodes up to the last one that reads or makes a nested tensor (from
        nn.TransformerEncoder's fast path: _nested_tensor_from_mask, the native encoder
        layers on it, to_padded_tensor) run through torch, the nodes after it are
        specialized and compiled as this part is. This call runs the graph node by node
        (finding those nodes) and returns its result; later calls run the split."""
        nodes = [n for n in self.gm.graph.nodes if n.op not in ("placeholder", "output")]
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        env: dict[fx.Node, Any] = dict(zip(placeholders, args))

        def nested(v: Any) -> bool:
            if isinstance(v, torch.Tensor):
                return v.is_nested
            return isinstance(v, (tuple, list)) and any(nested(x) for x in v)

        last = -1
        with restoring_global_modes():
            for i, n in enumerate(nodes):
                env[n] = _fake_run(n, self.gm, env)
                if nested(env[n]) or any(nested(env[a]) for a in _uses([n])):
                    last = i
        result = fx.node.map_arg(self.gm.graph.output_node().args[0], lambda a: env[a])
        head, tail = nodes[: last + 1], nodes[last + 1:]
        final_nodes: list[fx.Node] = []
        fx.node.map_arg(self.gm.graph.output_node().args[0], final_nodes.append)
        steps: list[tuple[Callable, list[fx.Node], list[fx.Node]]] = []
        used_later = set(_uses(tail)) | set(final_nodes)
        head_outs = [n for n in head if n in used_later]
        head_ins = [n for n in _uses(head) if n not in set(head)]
        steps.append((_subgraph(self.gm, head, head_ins, head_outs), head_ins, head_outs))
        if tail:
            tail_outs = [n for n in tail if n in set(final_nodes)]
            tail_ins = [n for n in _uses(tail) if n not in set(tail)]
            sub = _subgraph(self.gm, tail, tail_ins, tail_outs)
            steps.append((_Specialized(sub, self.compile_fn, self.strict) if tail_outs else sub, tail_ins, tail_outs))
        logs.log("fallback", f"the part after a data-dependent op reads nested tensors: its first {len(head)} "
                             f"of {len(nodes)} nodes run through torch, the rest is compiled")
        self.nested[at] = PartitionedGraph(self.gm, steps)
        return result

    def _compile(self, args: tuple) -> tuple[Callable, list[int]] | None:
        if len(self.variants) >= MAX_VARIANTS:
            if self.strict:
                _strict_error(f"the part after a data-dependent op has {MAX_VARIANTS} compiled input "
                              "signatures: a new one would run eagerly")
            logs.log("fallback", f"the part after a data-dependent op has {MAX_VARIANTS} compiled "
                                 "input signatures: a new one runs eagerly")
            return None
        graph = fx.Graph()
        env: dict[fx.Node, Any] = {}
        tensor_pos = []
        for k, (p, a) in enumerate(zip([n for n in self.gm.graph.nodes if n.op == "placeholder"], args)):
            if isinstance(a, torch.Tensor):
                env[p] = graph.placeholder(p.name)
                env[p].meta = dict(p.meta)
                tensor_pos.append(k)
            else:
                env[p] = a   # baked in
        for n in self.gm.graph.nodes:
            if n.op == "output":
                graph.output(fx.node.map_arg(n.args[0], lambda a: env[a]))
            elif n.op != "placeholder":
                env[n] = graph.node_copy(n, lambda a: env[a])
        gm = fx.GraphModule(self.gm, graph)
        try:
            fn = self.compile_fn(gm, [args[i] for i in tensor_pos])
        except Exception as e:  # noqa: BLE001 - the part runs eagerly for this signature
            if self.strict:
                raise
            logs.log("fallback", f"the part after a data-dependent op did not compile "
                                 f"({type(e).__name__}: {str(e)[:200]}): it runs eagerly")
            fn = gm.forward
        entry = (fn if self.strict else _FirstRun(fn, gm.forward), tensor_pos)
        self.variants[tuple(_signature(a) for a in args)] = entry
        return entry


class _FirstRun:
    """A compiled part whose first run, if it fails before changing any input, is
    replaced by the FX graph (run eagerly) for good."""
    __slots__ = ("fn", "fallback", "checked")

    def __init__(self, fn: Callable, fallback: Callable) -> None:
        self.fn, self.fallback, self.checked = fn, fallback, fn is fallback

    def __call__(self, *args: Any) -> Any:
        if self.checked:
            return self.fn(*args)
        vers = [a._version for a in args if isinstance(a, torch.Tensor)]
        try:
            out = self.fn(*args)
        except Exception as e:  # noqa: BLE001
            if [a._version for a in args if isinstance(a, torch.Tensor)] != vers:
                raise
            logs.log("fallback", f"the part after a data-dependent op failed on its first run "
                                 f"({type(e).__name__}: {str(e)[:200]}): it runs eagerly")
            self.fn = self.fallback
            out = self.fn(*args)
        self.checked = True
        return out
