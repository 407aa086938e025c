"""FX recording: tensor operations seen by the TorchFunctionMode (`_Mode`, torch_calls.py) go
into per-segment torch.fx graphs (`_GraphMixin`, `_Seg`).  Call targets are in fx_targets.py,
numbers a graph takes as inputs in scalar_inputs.py, the steps a call makes between graphs in
graph_steps.py, tensors' metadata checks and guards in tensor_meta.py."""
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
from .steps import GraphStep
from .classify import _DATA_DEP, _GLOBAL_STATE_FUNCS, _IMMUTABLE_CONST, _META_OK, _PRIM, _classify, _fname, _func_qualname
from .shape_ops import _SHAPE_META, _SPLITTERS, _dyn_shape_op
from .draws import _RNG_META, _draws_rng, _may_draw, _rng_token
from .locations import _user_location, _user_stack_trace
from .autocast import autocast_state, close_autocast, sync_autocast
from .guards import _ambient
from .sources import plain_subclass
from .typeinfo import _is_constant_value, _is_ndarray
from .grad_hooks import _REGISTER_HOOK, _GradHookMixin, pure_mapped_function
from .asserts import _AssertMixin
from .deferred import DEFERRABLE, _DeferMixin
from .restrides import _RESTRIDES, _RestrideMixin
from .data_writes import _DataWriteMixin
from .fx_targets import _bind_constants, _fx_target, _has_dataclass, _op_name
from .index_inputs import _IndexInputMixin
from .number_calls import _NumberCallMixin
from .overlaps import _overlapping_write
from .scalar_inputs import _ALPHA_OPS, _BOUND_OPS, _PRE, _SCALAR_OPERATORS, _ScalarInputMixin, _has_np_scalar
from .torch_calls import (_AUTOGRAD_STATE, _GRAD_WRITERS, _UNVERSIONED_WRITERS, _count_tensor,
                          _count_tensor_args, _cudnn_rnn_dropout, _custom_function_forward, _metadata,
                          _plain_equal_operands, _same_view, _tensor_in_slice)
from .tensor_meta import _TensorMetaMixin
from .graph_steps import _GraphStepMixin


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


class _GraphMixin(_ScalarInputMixin, _NumberCallMixin, _IndexInputMixin, _GradHookMixin, _RestrideMixin, _AssertMixin,
                  _DeferMixin, _DataWriteMixin, _TensorMetaMixin, _GraphStepMixin):
    """FX recording for `_Recorder`: torch functions seen by `_Mode` become nodes of the
    current segment's graph; data-dependent results end the segment (graph break)."""

    # -- torch function recording --------------------------------------------------
    def on_torch(self, func: Callable, types_: tuple, args: tuple, kwargs: dict) -> Any:
        name = _fname(func)
        if name == "grad" and args:
            self._grad_read(args[0])   # (a write to it waiting for the open graph: that graph ends first)
        self._data_read(args, kwargs)   # (a .data write to an argument waiting for it: the same)
        if func in _GLOBAL_STATE_FUNCS:
            return func(*args, **kwargs)  # grad mode is tracked per recorded op
        if name == "__iter__" and args and isinstance(args[0], torch.Tensor):
            parts = self.on_torch(torch.Tensor.unbind, types_, (args[0],), {})
            return iter(parts)
        if name == "allclose" and len(args) >= 2 and isinstance(args[0], torch.Tensor) and \
                isinstance(args[1], torch.Tensor):
            # eager's allclose is isclose(...).all().item(): those two ops are a graph and
            # only the bool breaks it (the whole call was a data-dependent step: no graph)
            close = self.on_torch(torch.isclose, types_, args, kwargs)
            every = self.on_torch(torch.Tensor.all, types_, (close,), {})
            return self.on_torch(torch.Tensor.__bool__, types_, (every,), {})
        if name == "equal" and _plain_equal_operands(args, kwargs) and not self._dyn_shape_args(args, kwargs):
            # eager's equal of same-shaped tensors is eq(...).all().item() (promoting, NaN
            # unequal, an alias too): a graph and the bool that breaks it, as allclose. Other
            # shapes are unequal: False (shapes fixed by the guards; a shape that follows
            # tensor data, nonzero's, leaves the call to eager)
            if args[0].shape != args[1].shape:
                return False
            every = self.on_torch(torch.Tensor.all, types_, (self.on_torch(torch.eq, types_, args, {}),), {})
            return self.on_torch(torch.Tensor.__bool__, types_, (every,), {})
        if any(isinstance(a, torch.Generator) for a in args) or \
                any(isinstance(a, torch.Generator) for a in kwargs.values()):
            return self._generator_op(func, args, kwargs)
        if _cudnn_rnn_dropout(func, args):
            return self._generator_op(func, args, kwargs, "an RNN with dropout between its layers (cuDNN's generator)")
        if name in ("__getitem__", "__setitem__") and len(args) >= 2 and _tensor_in_slice(args[1]):
            # x[:n] with a tensor n: indexing reads n's value (Tensor.__index__) where the graph
            # could only hold it as a constant (FX wrote it as code that cannot run, and a new n
            # would have kept the recorded one): a data-dependent step before the op, the op
            # then taking the Python int
            args = (args[0], self._slice_ints(args[1])) + tuple(args[2:])
        if (name in _SPLITTERS or name in ("size", "stride")) and _count_tensor_args(name, args, kwargs):
            # x.chunk(n) / x.split(n) with a tensor n: how many results there are follows n's
            # value, which the graph's structure fixes (a new n returned the recorded count of
            # pieces); x.size(n) / x.stride(n): metadata of the dim n names, guarded by x's
            # shape but not by n (a new n returned the recorded size). n is read by a
            # data-dependent step, the op takes the Python int
            args = args[:1] + tuple(self._index_step(a) if _count_tensor(name, a) else a for a in args[1:])
            kwargs = {k: self._index_step(v) if _count_tensor(name, v) else v for k, v in kwargs.items()}
        if name in _UNVERSIONED_WRITERS:
            self._note_unversioned(name, args, kwargs)
        if self.flow_call is not None and name in _ALPHA_OPS:
            alt = self._scalar_alpha(func, name, args, kwargs)
            if alt is not None:   # the scalar a graph input, in a form eager rounds the same
                pre, func, name, args, kwargs = alt
                if pre is not None:
                    pv = torch.mul(*pre)
                    self._record(torch.mul, "mul", pre, {}, pv)
                    args = tuple(pv if a is _PRE else a for a in args)
        if self.flow_call is not None:
            step = self._flow_torch_step(func, name, args, kwargs)
            if step is not None:
                return step[0]
        before = self._external_metadata(name, args, kwargs)
        inner = self._inner_metadata(name, args, kwargs)
        if name == "data" and getattr(func, "__name__", None) == "__set__" and len(args) == 2:
            self.data_same_view = _same_view(args[0], args[1])   # (before the write: after it, t is v's view)
        restride = self._restride_inputs(name, kwargs, before) if before else None
        # a call whose name does not say it draws (`F.gumbel_softmax`'s exponential_, attention's
        # dropout) is seen to by the generators' state: its nodes are marked (classify._node_draws)
        tok = _rng_token() if _may_draw(func, name) else None
        seg0 = self.cur
        n0 = len(seg0.graph.nodes) if seg0 is not None else 0
        try:
            res = func(*args, **kwargs)
        except Exception as e:
            self._raised(func, name, args, kwargs, e)
            raise
        drew = tok is not None and _rng_token() != tok
        if drew:
            self.uses_rng = True
        if restride is not None and any(_metadata(t) != m for t, m in before):
            # restrides.py: x.transpose_(0, 1) on an argument, recorded as x.transpose(0, 1)
            self._restrided(restride)
            func, name = getattr(torch.Tensor, _RESTRIDES[name]), _RESTRIDES[name]
        elif _overlapping_write(name, args, kwargs, getattr(self, "overlap_storages", ())):
            # v.index_fill_(...) of an expanded v (eager warns, and writes each shared element
            # once for all its positions): a graph's functional form writes each position
            # alone, so its views read other values than eager's; the function runs eagerly
            self.unreplayable = self.unreplayable or \
                f"{_op_name(func)} wrote in place to a tensor whose elements share memory (expanded)"
            return res
        elif before and any(_metadata(t) != m for t, m in before):
            # a graph cannot change its inputs' shapes or strides (aot_autograd's epilogue
            # copied the result into the input as it was: torch.mul(x, y, out=empty) raised,
            # buf.as_strided_(...) read the wrong elements): the function runs eagerly
            self.unreplayable = self.unreplayable or \
                f"{_op_name(func)} changed the shape or strides of a tensor from outside the function in place"
            return res
        elif inner and any(_metadata(t) != m for t, m in inner):
            # the same of a tensor the function made: an out= argument resized (torch.add(a, b,
            # out=torch.zeros(3)) of another shape: the graph's later ops read the result at
            # the out tensor's old shape), v.as_strided_(...) / v.resize_(n) / v.set_(...) of an
            # intermediate (its values read at other positions, or an IndexError): fuzz_graphs
            # --families edges seeds 283, 423, 450. The function runs eagerly, but for an out= tensor
            # of its own that the op's result simply replaces (restrides._rebound_out)
            if "out" in kwargs and self._rebound_out(func, name, args, kwargs, res, inner) is res:
                return res
            self.unreplayable = self.unreplayable or \
                f"{_op_name(func)} changed the shape or strides of a tensor in place"
            return res
        try:
            return self._after_torch(func, name, args, kwargs, res)
        except Exception as e:  # bookkeeping must never break the user's program
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
            return res
        finally:
            if drew and self.cur is not None:
                self._mark_draws(seg0, n0)

    def _mark_draws(self, seg0: Any, n0: int) -> None:
        """The call just recorded drew from torch's generators: the nodes it added to the open
        graph (after its first n0 nodes when that graph is seg0) are marked as draws."""
        nodes = self.cur.graph.nodes
        k = len(nodes) - (n0 if self.cur is seg0 else 0)
        for n in reversed(nodes):
            if k <= 0:
                break
            k -= 1
            if n.op in ("call_function", "call_method"):
                n.meta[_RNG_META] = True

    def _after_torch(self, func: Callable, name: str, args: tuple, kwargs: dict, res: Any) -> Any:
        flat_res, _ = tree_flatten(res)
        has_t = any(isinstance(x, torch.Tensor) for x in flat_res)
        fs = self.flow_scalar
        if fs is not None:
            # the operator of `x * r` flows.py expects: it takes r as a graph input, or r is
            # guarded by value now (any other function: r did not reach it as expected)
            self.flow_scalar = None
            if not (has_t and name in _SCALAR_OPERATORS and len(args) == 2 and not kwargs and
                    any(a is fs[1] for a in args)):
                self._flow_escape_keys(fs[3])
                fs = None
        dyn = self._dyn_shape_args(args, kwargs)
        if func is _REGISTER_HOOK and self._grad_hook_node(args, kwargs):
            return res   # (the handle, dropped by the program)
        if not has_t and name not in ("__setitem__", "__set__", "__delitem__"):
            if name in _META_OK and not (dyn and name in _SHAPE_META) and not \
                    (name == "_version" and any(isinstance(a, torch.Tensor) and id(a) in self.src for a in args)) \
                    and self._autograd_meta_guarded(name, args, res):
                # (the version counter of a tensor from outside the function changes with every
                # in-place write to it between calls, which no guard sees: read at replay)
                return res
            if name == "grad_fn" and res is None and len(args) == 1 and self._autograd_meta_guarded(name, args, res):
                return res   # (`x.grad_fn is None`: whether x is a leaf, see below)
            if name == "grad_fn" and res is not None and len(args) == 1 and self._grad_fn_none_tested(args[0]):
                return res   # `x.grad_fn is None` of a tensor that has one: only its presence seen
            if name == "grad" and res is None and len(args) == 1 and getattr(func, "__name__", None) == "__get__" \
                    and self._grad_none_guarded(args[0]):
                return res   # `p.grad` read as None by library code (nn.Module.to's _apply): guarded None
            if name == "_assert" and args and not isinstance(args[0], torch.Tensor):
                return res   # torch._assert(cond: bool, msg): passed; cond is a traced Python value
            if name == "numpy" and len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor) and \
                    not dyn and self.np_numpy_call(args[0], res):
                return res   # tracked: its uses are recorded or break the graph (np_interop)
            if self._retains_hooked_grad(name, args):
                return res
            if name in ("__bool__", "item") and len(args) == 1 and not kwargs and \
                    self._speculate_truth(args[0], res, after_call=name == "item"):
                return res   # the truth deciding a raise: a check after the graph (asserts.py)
            if name == "grad" and getattr(func, "__name__", None) == "__set__" and self._grad_write(func, args, kwargs):
                return res   # `p.grad = None` / `p.grad = g`: run right after the open graph
            if name == "data" and getattr(func, "__name__", None) == "__set__" and len(args) == 2 and \
                    not kwargs and (args[1] is args[0] or self.__dict__.pop("data_same_view", False)):
                # `t.data = t` (nn.Module.to's _apply, converting nothing), `t.data *= mask` (the
                # in-place op wrote t's memory through `t.data`, which it sets back): no write
                return res
            if name == "data" and getattr(func, "__name__", None) == "__set__" and self._data_write(func, args, kwargs):
                return res   # `t.data = v`: run right after the open graph (data_writes.py)
            # data-dependent (or unknown) non-tensor result: graph break
            reason = f"data-dependent operation Tensor.{name}()" if name in _DATA_DEP else \
                "version counter of a tensor from outside the function (Tensor._version)" \
                if name == "_version" else \
                f"shape of a data-dependent-shape tensor (Tensor.{name})" if name in _META_OK else \
                f"non-tensor result of {_func_qualname(func)}"
            try:
                fe = self.const(func, _func_qualname(func))
                ae = [self.expr_of(a) for a in args]
                ke = {k: self.expr_of(v) for k, v in kwargs.items()}
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or f"{e} (an argument of {_op_name(func)})"
                return res
            if name in DEFERRABLE and not kwargs and args and isinstance(args[0], torch.Tensor) and \
                    (len(args) == 1 or name == "__format__" and len(args) == 2 and type(args[1]) is str) and \
                    self._defer_data_step(func, name, args[0], res, fe, reason, _user_location(), ae[1:]):
                return res   # read after the open graph (deferred.py)
            k = self._call_step(fe, ae, ke, reason, external=False)
            self._add_break(reason, _user_location())
            if func in _GRAD_WRITERS:
                self.grad_writes = True   # a replay missing after it restores the leaves' .grad
                self.backward_steps += 1   # (its hooks may write the program's state: flow_roots._flow_item)
                if res is None:
                    # (it returns None: a guard `b4 is None`, which cannot fail, after an optimizer's
                    # step needed a continuation; the program's use of it is the constant None)
                    return res
            if name == "tolist" and type(res) is list and len(res) <= 512:
                # a new list of numbers (nested lists for more dimensions) no one else holds: its
                # items are guarded where the program reads them (a lazy container, sources.touch),
                # not all by value at once (`return loss.item(), err.abs().tolist()`: a recompile
                # per call, or after an optimizer's step a guard with no continuation)
                self._source(res, f"b{k}", f"<result of break {k}>", False)
                return res
            self._data_result(k, res)
            return res
        if not self.uses_rng and _draws_rng(name):
            self.uses_rng = True
        if name in _AUTOGRAD_STATE or name == "__set__" and \
                getattr(getattr(func, "__self__", None), "__name__", "") == "requires_grad":
            # a graph cannot make its own tensors leaves of autograd (x.detach().requires_grad_()
            # then .backward() in the function raised on replay): the call is a step between
            # graphs, on the tensor the graph before it returns (the graph after it takes that
            # tensor, now requiring grad), as Dynamo breaks there
            fn = torch.Tensor.retain_grad if name == "retain_grad" else torch.Tensor.requires_grad_
            self._autograd_state_step(fn, args[:1] if name == "retain_grad" else
                                      (args[0], bool(args[1]) if len(args) > 1 else kwargs.get("requires_grad", True)))
            return res
        leaf = kwargs.get("requires_grad") is True and isinstance(res, torch.Tensor) and res.is_leaf and \
            res.requires_grad
        if leaf:
            # a factory making a leaf that requires grad (torch.ones(n, requires_grad=True)):
            # the graph makes the values, the leaf is made between graphs, as requires_grad_()
            # (recorded with the flag, the replay's tensor did not require grad and a
            # .backward() in the function raised)
            kwargs = {k: v for k, v in kwargs.items() if k != "requires_grad"}
        try:
            if dyn and (name in _SPLITTERS or name == "__iter__"):
                raise Unreplayable(f"{name} of a tensor whose shape depends on tensor data")
            if fs is not None:
                args = self._scalar_input(func, name, args, res, fs)
            elif name in _BOUND_OPS and self.flow_call is not None:
                args, kwargs = self._scalar_bounds(func, args, kwargs, res)
            read = None
            if name in ("__getitem__", "__setitem__") and self.flow_call is not None and len(args) > 1:
                args, read = self._index_input(name, args, res)   # `betas[t]`: t a graph input
            elif name == "full" and self.flow_call is not None:
                filled = self._full_input(func, args, kwargs, res)   # `torch.full((n,), t)`: the same
                if filled is not None:
                    func, args, kwargs = filled
            if _has_np_scalar((args, kwargs)):
                args, kwargs = self._np_scalar_args(func, name, args, kwargs, res)
            if read is not None:   # `betas[[t]]` squeezed; a copy where eager's is a view: checked when the graph is built (replay.py)
                rows, site = read
                self._record(func, name, args, kwargs, rows)
                self.__dict__.setdefault("index_copies", []).append((self.env[id(rows)][2], site))
                func, name, args = torch.Tensor.squeeze, "squeeze", (rows, 0)
            self._record(func, name, args, kwargs, res)
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} (in {_op_name(func)})"
            return res
        if dyn or _dyn_shape_op(name, args, kwargs) or \
                any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in flat_res):
            # its shape follows tensor data: reading it is a data-dependent operation (a sparse
            # or nested result too: how many elements coalesce() keeps, and so the shapes of its
            # values() and indices(), follow the indices)
            dyn_ids = self.__dict__.setdefault("dyn_shape", {})
            for t in flat_res:
                if isinstance(t, torch.Tensor):
                    dyn_ids[id(t)] = t
        if leaf:
            self._autograd_state_step(torch.Tensor.requires_grad_, (res, True))
        return res


    def _seg(self) -> _Seg:
        if self.cur is None:
            self.cur = _Seg(len(self.segs), self.grad0)
            self.segs.append(self.cur)
            self.steps.append(GraphStep(self.cur))
        return self.cur


    def _close_seg(self) -> None:
        seg = self.cur
        if seg is None:
            return
        if seg.grad != seg.start_grad:
            seg.graph.call_function(torch._C._set_grad_enabled, (seg.start_grad,))
            seg.grad = seg.start_grad
        close_autocast(seg.graph, seg.autocast_open)
        self.close_deferred(seg.idx)
        self.cur = None
        self._flush_grad_writes()
        self._flush_data_writes()

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
        if isinstance(res, torch.Tensor):
            self.env[id(res)] = (res, seg.idx, node)
            self.keep.append(res)
            if merged and res.is_inference() == amb[0]:
                seg.inf_nodes.add(node)
            if type(res) is not torch.Tensor and plain_subclass(type(res)):
                seg.sub_nodes[node] = type(res)
        elif isinstance(res, (tuple, list)):
            for i, r in enumerate(res):
                if isinstance(r, torch.Tensor):
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
