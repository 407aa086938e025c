"""FX recording: tensor operations seen by the TorchFunctionMode (`_Mode`, torch_calls.py) go
into per-segment torch.fx graphs (`_GraphMixin`; `_Seg` and the nodes themselves in graph_nodes.py).  Call targets are in fx_targets.py,
numbers a graph takes as inputs in scalar_inputs.py, the steps a call makes between graphs in
graph_steps.py, tensors' metadata checks and guards in tensor_meta.py."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .base import Unreplayable
from .steps import GraphStep
from .classify import _DATA_DEP, _GLOBAL_STATE_FUNCS, _META_OK, _fname, _func_qualname
from .shape_ops import _SHAPE_META, _SPLITTERS, _dyn_shape_op
from .draws import _RNG_META, _draws_rng, _may_draw, _rng_token
from .locations import _user_location
from .autocast import close_autocast
from .grad_hooks import _REGISTER_HOOK, _GradHookMixin
from .asserts import _AssertMixin
from .deferred import DEFERRABLE, _DeferMixin
from .restrides import _RESTRIDES, _RestrideMixin
from .data_writes import _DataWriteMixin
from .fx_targets import _op_name
from .index_inputs import _IndexInputMixin
from .number_calls import _NumberCallMixin
from .overlaps import _overlapping_write
from .scalar_inputs import (_ALPHA_OPS, _BOUND_OPS, _FOREACH_SCALAR_OPS, _PRE, _SCALAR_OPERATORS, _ScalarInputMixin,
                            _has_np_scalar)
from .torch_calls import (_AUTOGRAD_STATE, _GRAD_WRITERS, _UNVERSIONED_WRITERS, _count_tensor,
                          _count_tensor_args, _cudnn_rnn_dropout, _metadata,
                          _plain_equal_operands, _same_view, _tensor_in_slice)
from .tensor_meta import _TensorMetaMixin
from .graph_steps import _GraphStepMixin
from .graph_nodes import _NodeMixin, _Seg



class _GraphMixin(_ScalarInputMixin, _NumberCallMixin, _IndexInputMixin, _GradHookMixin, _RestrideMixin, _AssertMixin,
                  _DeferMixin, _DataWriteMixin, _TensorMetaMixin, _GraphStepMixin, _NodeMixin):
    """FX recording for `_Recorder`: torch functions seen by `_Mode` become nodes of the
    current segment's graph; data-dependent results end the segment (graph break)."""

    # -- torch function recording --------------------------------------------------
    def on_torch(self, func: Callable, types_: tuple, args: tuple, kwargs: dict) -> Any:
        name = _fname(func)
        if name == "grad" and args:
            self._grad_read(args[0])   # (a write to it waiting for the open graph: that graph ends first)
        self._data_read(args, kwargs, name)   # (a .data write to an argument waiting for it: the same)
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
        if name == "one_hot" and _dyn_shape_op(name, args, kwargs):
            lead = self._leading_shape_op(func, name, args, kwargs)
            if lead is not None:
                return lead[0]
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
        if self.flow_call is not None and name in _FOREACH_SCALAR_OPS:
            alt = self._scalar_foreach(func, name, args, kwargs)
            if alt is not None:   # the scalar a graph input (one variant for every decay)
                func, args, kwargs = alt
                name = func.__name__
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
        elif self._restrides_graph_input(name, args, kwargs):
            self.unreplayable = self.unreplayable or \
                f"{_op_name(func)} changed the shape or strides of another graph's output that requires grad in place"
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
                # items are guarded where the program reads them (a lazy container, lazy_sources.touch),
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
            tmp = self._out_layout_kept(func, args, kwargs, res) if "out" in kwargs else None
            if tmp is not None:   # (restrides._out_layout_kept: the out tensor's strides kept)
                self._record(func, name, args, {k: v for k, v in kwargs.items() if k != "out"}, tmp)
                self._record(torch.Tensor.copy_, "copy_", (res, tmp), {}, res)
                # (marked for opmath.eager_loop: the copy's destination is the op's out tensor;
                # aot_autograd hands "custom" meta on to the aten nodes it traces)
                self.env[id(res)][2].meta.setdefault("custom", {})["mlircap_out_copy"] = True
            else:
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
        self._flush_pending_leaves()
