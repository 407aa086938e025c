"""A graph being recorded and a torch call's node in it: `_Seg` (one captured graph between
breaks: its FX graph, inputs, outputs, grad / autocast / inference state) and `_NodeMixin`
(the call's arguments as nodes or graph inputs, the node and its results' bookkeeping).
graph.py decides what a torch call records; this module records it."""
from __future__ import annotations

import builtins
import operator
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from .base import Unreplayable
from .classify import _IMMUTABLE_CONST, _PRIM, _classify
from .locations import _user_stack_trace
from .autocast import autocast_state, sync_autocast
from .guards import _ambient
from .sources import plain_subclass
from .typeinfo import _is_constant_value, _is_ndarray
from .grad_hooks import pure_mapped_function
from .fx_targets import _bind_constants, _fx_target, _has_dataclass
from .torch_calls import _custom_function_forward
from .restrides import _RESTRIDES


_RESTRIDED_AS = frozenset(_RESTRIDES.values())


def _writes_argument(name: str, kwargs: dict) -> bool:
    """Whether an op named `name` returns its argument as the written version of it: in-place
    methods (`add_`), in-place operators (`__iadd__`), item / attribute writes, `copy_`, `out=`, and
    the in-place view ops restrides.py records by their functional names (`x.transpose_(0, 1)` as
    `transpose`: the result is x itself, restrided: the new version)."""
    return name.endswith("_") and not name.endswith("__") or name.startswith("__i") or \
        name in ("__setitem__", "__set__", "copy_") or "out" in kwargs or name in _RESTRIDED_AS


class _Seg:
    """One captured graph (a segment of the call between graph breaks)."""

    def __init__(self, idx: int, grad: bool) -> None:
        self.idx = idx
        self.graph = fx.Graph()
        self.ph: dict[tuple, fx.Node] = {}     # key -> placeholder node
        self.inputs: list[str] = []           # python exprs producing each placeholder value
        self.examples: list[torch.Tensor] = []
        self.outputs: list[fx.Node] = []      # nodes needed later (ordered)
        self.out_set: set[fx.Node] = set()
        self.start_grad = grad
        self.grad = grad
        self.autocast: tuple | None = None    # the autocast state its next ops run under (autocast.py)
        self.autocast_open: list[fx.Node] = []
        self.nops = 0
        self.gm: fx.GraphModule | None = None
        self.inplace = False  # records an in-place op
        # the inference mode its ops ran in: one other than the entry's (a `with
        # torch.inference_mode():` block, a helper decorated with it) is entered around the
        # graph's compile and each run (replay.py), its results inference tensors as eager's
        self.inference = torch.is_inference_mode_enabled()
        if self.inference:
            self.start_grad = self.grad = torch.is_grad_enabled()
        # nodes whose values eager made inside a block of the other inference mode than the
        # call's entry (inference tensors in a normal call, normal ones in an inference call),
        # recorded into this graph (graph_steps._merge_inference): those the graph outputs are
        # made tensors of the block's mode after it runs (replay.mode_copies)
        self.inf_nodes: set[fx.Node] = set()
        # nodes whose values eager made as instances of a plain torch.Tensor subclass (an
        # argument's: sources.plain_subclass): the replay makes the graph's outputs so
        self.sub_nodes: dict[fx.Node, type] = {}


def _new_placeholder(seg: _Seg) -> fx.Node:
    """Placeholders go before every computation node (some backends assume that)."""
    first = next((n for n in seg.graph.nodes if n.op != "placeholder"), None)
    if first is None:
        return seg.graph.placeholder(f"in{len(seg.ph)}")
    with seg.graph.inserting_before(first):
        return seg.graph.placeholder(f"in{len(seg.ph)}")


class _NodeMixin:
    """A torch call as a node of the open graph (`_record`), its tensor arguments as nodes or graph
    inputs (`_arg_node`), graph outputs used later (`_use_node`); for `_GraphMixin`."""

    def _arg_node(self, seg: _Seg, t: torch.Tensor) -> fx.Node:
        dn = self._data_node(seg, t)
        if dn is not None:   # (its .data written in this graph: the value written)
            return dn
        e = self.env.get(id(t))
        if e is not None and e[0] is t:
            _, si, node = e
            if si == seg.idx:
                return node
            key = ("node", si, node)
            ph = seg.ph.get(key)
            if ph is None:
                ph = _new_placeholder(seg)
                seg.ph[key] = ph
                seg.inputs.append(self._plain_input(self._use_node(si, node), t))
                seg.examples.append(self._plain_example(t))
            return ph
        s = self.src.get(id(t))
        if s is not None and self.defer_nodes:
            dn = self.defer_nodes.get((seg.idx, s[0]))
            if dn is not None:   # a graph input the graph computes from numbers it reads after it (deferred.py)
                return dn
        if s is None:
            what = f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
            if isinstance(t, torch.nn.Parameter):
                raise Unreplayable(f"parameter ({what}) reached through an untracked path")
            raise Unreplayable(f"tensor ({what}) of unknown origin (created outside the traced code)")
        key = ("src", s[0])
        ph = seg.ph.get(key)
        if ph is None:
            ph = _new_placeholder(seg)
            seg.ph[key] = ph
            seg.inputs.append(self._plain_input(s[0], t))
            seg.examples.append(self._plain_example(t))
        return ph

    @staticmethod
    def _plain_input(expr: str, t: torch.Tensor) -> str:
        """A graph input of a plain tensor subclass (sources.plain_subclass) goes in as a plain
        tensor viewing it (`as_subclass(torch.Tensor)`: a compiled graph's runtime wrote its
        in-place results back through the subclass's __torch_function__ and raised); its
        ops' results are made instances of it again after the graph (seg.sub_nodes)."""
        return f"{expr}.as_subclass(torch.Tensor)" if type(t) is not torch.Tensor and plain_subclass(type(t)) else expr

    def _plain_example(self, t: torch.Tensor) -> torch.Tensor:
        if type(t) is torch.Tensor or not plain_subclass(type(t)):
            return t
        p = t.as_subclass(torch.Tensor)
        self.keep.append(p)
        return p

    def _function_argument(self, fn: Any, name: str) -> bool:
        """fn, an argument of the torch function `name`, is a Python function FX cannot name
        as an argument (`F.triplet_margin_with_distance_loss(..., distance_function=lambda a, b:
        1 - F.cosine_similarity(a, b))` gave up on the whole function with a SyntaxError of FX's
        code generation, which writes a function argument as its repr): True where it is bound
        into the node's target (fx_targets._bind_constants).  A function of the user's is, where
        its body is pure tensor code of its arguments (grad_hooks.pure_mapped_function: no
        closure, no defaults, only torch's modules read, those lookups guarded) and it is the
        same function at every call: read from a guarded location, or made from its code by a
        frame the recording traced; any other: Unreplayable.  Torch's own functions are, where
        read from a guarded location."""
        s = self.src.get(id(fn))
        if type(fn) is not types.FunctionType or _classify(fn.__code__) != "user":
            return type(fn) in (types.FunctionType, types.BuiltinFunctionType) and s is not None and s[2] != "opaque"
        lookups = pure_mapped_function(fn) if fn.__defaults__ is None else None
        if lookups is None or not (s is not None and s[2] != "opaque" or
                                   any(fn.__code__ in c.co_consts for c in self.traced_codes)):
            raise Unreplayable(f"the Python function {fn.__qualname__} as an argument of {name} (not pure "
                               f"tensor code of its arguments)")
        for gname, mod, attr in lookups:
            g = fn.__globals__
            self.read(f"{self.const(g)}[{gname!r}]", gname, mod, group=(g,))
            if attr is not None:
                self.read(f"{self.const(mod)}.{attr}", f"{gname}.{attr}", getattr(mod, attr))
        return True

    def _use_node(self, si: int, node: fx.Node) -> str:
        seg = self.segs[si]
        if node not in seg.out_set:
            seg.out_set.add(node)
            seg.outputs.append(node)
        return f"n{si}_{node.name}"

    def _record(self, func: Callable, name: str, args: tuple, kwargs: dict, res: Any) -> None:
        if self._reads_pending_leaf(args, kwargs):
            # (a tensor the open graph made a leaf: the graph ends, the requires_grad_ step runs)
            self._flush_pending_leaves(brk=True)
        amb = _ambient()
        if self.cur is not None and self.cur.inference != amb[0] and not self._merge_inference(self.cur, amb[0], args, kwargs):
            self._close_seg()   # inference mode switched: a graph of its own, run in that mode
        if self.defer_window is not None:
            self.split_deferred(tree_flatten((args, kwargs))[0])
        seg = self._seg()
        if amb != self.amb0 or seg.autocast_open or amb[1] or amb[2]:   # (also a dtype-only change)
            ac = autocast_state()
            if seg.autocast is None:
                seg.autocast = self.autocast0
            if ac != seg.autocast:
                sync_autocast(seg.graph, seg.autocast_open, self.autocast0, ac)
                seg.autocast = ac
        g = torch.is_grad_enabled()
        if not g and _custom_function_forward(args, kwargs):
            # autograd runs a custom Function's forward without grad and attaches its
            # backward to the outputs: recorded as plain ops under no_grad, the graph's
            # outputs had no gradient at all (a gradient reversal layer's input got None)
            raise Unreplayable("a custom torch.autograd.Function with inputs that require grad "
                               "(its backward is not captured)")
        if g != seg.grad:
            seg.graph.call_function(torch._C._set_grad_enabled, (g,))
            seg.grad = g

        def conv(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return self._arg_node(seg, x)
            if isinstance(x, tuple) and hasattr(type(x), "_make"):
                # a named tuple: a constant when it holds only constants (an options object),
                # else one holding the graph's values
                return x if _is_constant_value(x) and not _has_dataclass(x) else type(x)._make(conv(y) for y in x)
            if isinstance(x, (list, tuple)):
                r = [conv(y) for y in x]
                return type(x)(r) if type(x) in (list, tuple) else tuple(r)
            if isinstance(x, dict):
                return {k: conv(v) for k, v in x.items()}
            if type(x) in _PRIM or isinstance(x, _IMMUTABLE_CONST) or isinstance(x, (torch.dtype,)):
                return x
            if _is_constant_value(x):
                # an options object (frozen dataclass, enum member): a constant; FX writes
                # dataclasses as code it cannot run, so those are bound to the target (below)
                if _has_dataclass(x):
                    raise Unreplayable(f"frozen dataclass {type(x).__name__} inside an argument to {name}")
                return x
            if isinstance(x, (torch.Generator,)):
                raise Unreplayable("explicit torch.Generator argument")
            if name in ("__getitem__", "__setitem__") and _is_ndarray(x) and not x.dtype.hasobject:
                s = self.src.get(id(x))
                if s is not None and s[2] != "opaque":
                    # an index array with a source (guarded by contents, or computed from
                    # such): the graph takes it as a tensor input, as indexing converts it
                    t = torch.as_tensor(x)
                    self.keep.append(t)
                    self.src[id(t)] = (f"{self.const(torch.as_tensor)}({s[0]})", f"torch.as_tensor({s[1]})", s[2])
                    return self._arg_node(seg, t)
            if callable(x) or isinstance(x, (types.ModuleType,)):
                return x
            raise Unreplayable(f"unsupported argument of type {type(x).__name__} to {name}")
        bind = {i: a for i, a in enumerate(args) if _has_dataclass(a) and _is_constant_value(a) or
                self._function_argument(a, name)}
        bind_kw = {k: v for k, v in kwargs.items() if _has_dataclass(v) and _is_constant_value(v) or
                   self._function_argument(v, name)}
        cargs = tuple(None if i in bind else conv(a) for i, a in enumerate(args))
        ckw = {k: conv(v) for k, v in kwargs.items() if k not in bind_kw}
        target = func if not (bind or bind_kw) else _bind_constants(func, bind, bind_kw)
        if getattr(func, "__name__", None) in ("__get__", "__set__"):
            attr = getattr(getattr(func, "__self__", None), "__name__", None)
            if attr is None:
                raise Unreplayable(f"descriptor {func!r}")
            if func.__name__ == "__get__":
                target, cargs, ckw = builtins.getattr, (cargs[0], attr), {}
            else:
                target, cargs, ckw = builtins.setattr, (cargs[0], attr, cargs[1]), {}
        if name.endswith("_") and not name.endswith("__") or name in ("__setitem__", "__set__", "copy_"):
            self.has_inplace = True
            seg.inplace = True
        if target is builtins.getattr and cargs[1] == "data" and isinstance(res, torch.Tensor):
            # t.data has a version counter of its own: writes through it (or its views) leave
            # t._version as it was, so they are found by the alias's version instead
            base = self.data_aliases.get(id(args[0]), (None, args[0]))[1]
            if id(base) in self.versions:
                self.data_aliases[id(res)] = (res, base, res._version)
        node = seg.graph.call_function(_fx_target(target), cargs, ckw)
        trace = _user_stack_trace()
        if trace:
            node.meta["stack_trace"] = trace
        seg.nops += 1
        merged = amb[0] != self.amb0[0]   # (a block's value a graph of the entry's mode may hold)
        if merged and not amb[0] and any(isinstance(t, torch.Tensor) and t.requires_grad
                                         for t in (res if isinstance(res, (tuple, list)) else (res,))):
            seg.grad_in_block = True   # (a normal block in an inference call: graph_steps._merge_inference)
        # an op that returned one of its tensor arguments itself (`w.flatten(1)` of a matrix,
        # `p.float()` / `.contiguous()` / `.to(dtype)` converting nothing, `atleast_2d`,
        # `broadcast_tensors` of equal shapes) is that object, not a new value: it stays bound to
        # what it was (a graph input: the parameter, a leaf whose .grad a later graph reads and
        # whose in-place update must reach it). Rebound to the node, the replay passed that
        # node's output for it, a non-leaf: `p.grad` None, writes lost. In-place ops (`x.add_`,
        # `x += y`, `out=`) return their argument as the new version: bound to the node as before.
        same = () if _writes_argument(name, kwargs) else \
            tuple(a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor))
        if any(r is a for r in (res if isinstance(res, (tuple, list)) else (res,)) for a in same):
            # (its node computes nothing the program reads through it: left without users, it is
            # dropped where a graph is split into its gradient groups, graph_prep)
            node.meta["returns_argument"] = True
        if isinstance(res, torch.Tensor) and any(res is a for a in same):
            self.keep.append(res)
        elif isinstance(res, torch.Tensor):
            self.env[id(res)] = (res, seg.idx, node)
            self.keep.append(res)
            if merged and res.is_inference() == amb[0]:
                seg.inf_nodes.add(node)
            if type(res) is not torch.Tensor and plain_subclass(type(res)):
                seg.sub_nodes[node] = type(res)
        elif isinstance(res, (tuple, list)):
            for i, r in enumerate(res):
                if isinstance(r, torch.Tensor) and any(r is a for a in same):
                    self.keep.append(r)   # (`broadcast_tensors(a, b)[0] is a`: bound as before)
                elif isinstance(r, torch.Tensor):
                    gi = seg.graph.call_function(operator.getitem, (node, i))
                    self.env[id(r)] = (r, seg.idx, gi)
                    self.keep.append(r)
                    if merged and r.is_inference() == amb[0]:
                        seg.inf_nodes.add(gi)
                    if type(r) is not torch.Tensor and plain_subclass(type(r)):
                        seg.sub_nodes[gi] = type(r)
                elif isinstance(r, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in r):
                    raise Unreplayable(f"nested tensor containers returned by {name}")
        elif res is not None:
            raise Unreplayable(f"unsupported result type {type(res).__name__} of {name}")
