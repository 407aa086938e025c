"""Steps between graphs that a torch call makes (`_GraphStepMixin` of graph.py's
`_GraphMixin`): a replayed call that ends the open graph (`_call_step`) or runs before it
(`_hoisted_step`), tensor slice bounds and counts read as ints, `.grad` writes run right after
the open graph, autograd state (`requires_grad_`, `retain_grad`), running statistics written
without a version bump, random ops with an explicit generator, and ops that raised while
recording.  Split out of graph.py (pure move)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .base import Unreplayable, _Raised
from .steps import CallStep, GraphStep
from .classify import _func_qualname
from .draws import _node_draws
from .locations import _user_location
from .guards import _ambient
from .fx_targets import _op_name
from .torch_calls import _RaisesAs, _raise_from_metadata


class _NoneIfRaises:
    """Runs `func`; None where it raises (a replay's step: the guards on its result's shape
    then fail, and the call records again, where the op raises as eager's does)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable) -> None:
        self.func = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.func(*args, **kwargs)
        except Exception:  # noqa: BLE001
            return None

    def __repr__(self) -> str:
        return f"none_if_raises({_func_qualname(self.func)})"


class _GraphStepMixin:
    """Replayed steps between the graphs of `_GraphMixin` (graph.py)."""

    def _slice_ints(self, index: Any) -> Any:
        """`index` with each tensor bound of its slices replaced by its value as a Python int,
        read by a replayed data-dependent step (a graph break) whose result is guarded."""
        if isinstance(index, tuple):
            return tuple(self._slice_ints(i) for i in index)
        if not isinstance(index, slice):
            return index
        return slice(*(self._index_step(b) if isinstance(b, torch.Tensor) else b
                       for b in (index.start, index.stop, index.step)))

    def _index_step(self, t: torch.Tensor) -> int:
        res = t.__index__()
        reason = "data-dependent operation Tensor.__index__() (a tensor bound of a slice)"
        fn = torch.Tensor.__index__
        try:
            fe = self.const(fn, _func_qualname(fn))
            ae = [self.expr_of(t)]
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} (a tensor bound of a slice)"
            return res
        k = self._call_step(fe, ae, {}, reason, external=False)
        self._add_break(reason, _user_location())
        self._call_result(k, res)
        return res

    def _grad_write(self, func: Callable, args: tuple, kwargs: dict) -> bool:
        """`p.grad = None` / `p.grad = g` on a leaf from outside the function (a parameter),
        as training code clears or sets gradients by hand between the ops of a step
        (`p -= lr * p.grad; p.grad = None` in a loop).  It wrote its broken graph at each
        assignment; the write is now a step run right after the open graph instead (replay
        order: the graph, then the writes in their order, then what closed the graph).  What
        the graph reads of `.grad` comes before the write (its inputs and getattr nodes run
        with the graph); a later read of that tensor's `.grad`, by the function or by library
        code (clip_grad_norm_, an optimizer's step: an uncapturable call), closes the graph
        first (`_grad_read`), so it runs after the write as in eager.  False: not such a write
        (it breaks the graph as before)."""
        if kwargs or len(args) != 2 or not isinstance(args[0], torch.Tensor) or not args[0].is_leaf or \
                not (args[1] is None or isinstance(args[1], torch.Tensor)):
            return False
        s = self.src.get(id(args[0]))
        if s is None or s[2] == "opaque":
            return False
        try:
            fe = self.const(func, _func_qualname(func))
            ae = [self.expr_of(a) for a in args]
        except Unreplayable:
            return False
        self.grad_writes = True   # a replay missing after it restores the leaves' .grad
        self.__dict__.setdefault("grad_written", {})[ae[0]] = None
        pend = self.__dict__.setdefault("pending_grad_writes", {})
        pend.setdefault(id(args[0]), []).append((fe, ae))
        if self.cur is None or not self.cur.nops:
            self._flush_grad_writes()   # (no graph open: it runs here, between graphs)
        return True

    def _grad_read(self, t: Any) -> None:
        """`t.grad` read where a write to it waits for the open graph to end: the graph ends
        here, and the write runs before what reads it."""
        pend = self.__dict__.get("pending_grad_writes")
        if pend and isinstance(t, torch.Tensor) and id(t) in pend:
            split = self.cur is not None and self.cur.nops > 0
            self._close_seg()
            if split:   # (the graph ends here: a split, counted as graph breaks are)
                self._add_break("a read of a .grad the open graph's step writes", _user_location())

    def _flush_grad_writes(self) -> None:
        """The `.grad` writes waiting for the open graph (`_grad_write`), as steps after it."""
        pend = self.__dict__.get("pending_grad_writes")
        if not pend:
            return
        for writes in list(pend.values()):
            for fe, ae in writes:
                k = self.ncalls
                self.ncalls += 1
                self.steps.append(CallStep(k, fe, ae, {}, "Tensor.grad = ... (a write after the graph)", external=False))
        pend.clear()

    def _autograd_state_step(self, fn: Callable, args: tuple) -> None:
        """`fn(*args)` (Tensor.requires_grad_ / retain_grad, also for `t.requires_grad = v`:
        side_effects.op_store_attr) as a replayed step between graphs."""
        reason = f"Tensor.{fn.__name__} (a tensor's autograd state)"
        try:
            ae = [self.expr_of(a) for a in args]
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} (an argument of Tensor.{fn.__name__})"
            return
        t = args[0]
        e = self.env.get(id(t))
        seg = self.cur
        if fn is torch.Tensor.requires_grad_ and len(args) == 2 and args[1] is True and seg is not None and \
                e is not None and e[0] is t and e[1] == seg.idx and t.is_leaf and t.requires_grad:
            # a tensor the open graph made becomes a leaf (`p.detach().requires_grad_()`,
            # torch.func.stack_module_state's stacked parameters, autograd.functional's inputs):
            # the step waits until the graph closes, which the first op reading the tensor does
            # (graph_nodes._record), so ops not reading it stay in the graph (a break per leaf)
            self.__dict__.setdefault("pending_leaves", {})[id(t)] = (t, self.const(fn, reason), ae, reason,
                                                                     _user_location())
            return
        self._call_step(self.const(fn, reason), ae, {}, reason, external=False)
        self._add_break(reason, _user_location())

    def _flush_pending_leaves(self, brk: bool = False) -> None:
        """The requires_grad_ steps deferred by _autograd_state_step, after the graph that made
        their tensors (brk: the graph is split here, at an op reading one of them)."""
        pl = self.__dict__.get("pending_leaves")
        if not pl:
            return
        items = list(pl.values())
        pl.clear()
        for _, fe, ae, reason, loc in items:
            self._call_step(fe, ae, {}, reason, external=False)
            if brk:
                self._add_break(reason, loc)

    def _reads_pending_leaf(self, args: tuple, kwargs: dict) -> bool:
        pl = self.__dict__.get("pending_leaves")
        return bool(pl) and any(isinstance(x, torch.Tensor) and pl.get(id(x), (None,))[0] is x
                                for x in tree_flatten((args, kwargs))[0])

    def _note_unversioned(self, name: str, args: tuple, kwargs: dict) -> None:
        """A batch / instance norm using batch statistics writes its running mean and
        variance in place without bumping their version counters: its external tensor
        arguments that are not parameters are noted as written (guards.mutated_ids), so a
        replay that misses after it restores them before the call records again."""
        flag = kwargs.get("training", kwargs.get("use_input_stats", args[5] if len(args) > 5 else
                                                 name == "instance_norm"))
        if flag is False:
            return
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter) and id(a) in self.versions:
                self.unversioned.add(id(a))

    def _generator_op(self, func: Callable, args: tuple, kwargs: dict, what: str = "") -> Any:
        """A random op drawing from an explicit torch.Generator (`torch.rand(n, generator=g)`,
        `t.normal_(generator=g)`): the generator's state is not the graph's to hold, so the op
        is a replayed step between graphs, in order with the generator's other calls (its
        manual_seed), run exactly once per call; its tensor result is an input of the graph
        after it.  Same seed, same values as eager.  Also an op drawing from a generator state
        of its own (`what`: _cudnn_rnn_dropout)."""
        i = self.ext_seen
        self.ext_seen += 1
        # (no ext_writes: it reads and writes its generator and its tensors alone, never a
        # number the recording follows: `self.paths += n` after `torch.randn(..., generator=g)`
        # stays an expression of the value bound at the start, not a guard by value)
        if i < len(self.catchup):
            # this step already ran in a replay whose mid-replay guard then failed
            from .rng import _unlog
            res = _unlog(self.catchup[i])
            if type(res) is _Raised:   # it raised at the replay that missed (replay.py): raises again
                self.unreplayable = self.unreplayable or f"{_op_name(func)} raised at a replay"
                raise res.exc
        else:
            res = func(*args, **kwargs)
        reason = f"random op {_op_name(func)} with an explicit generator" if not what else \
            f"random op {_op_name(func)}: {what}"
        try:
            fe = self.const(func, _func_qualname(func))
            ae = [self.expr_of(a) for a in args]
            ke = {k: self.expr_of(v) for k, v in kwargs.items()}
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]):
                raise Unreplayable("its tensor arguments require grad")
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{e} (an argument of {_op_name(func)})"
            return res
        k = None
        if not what and not any(isinstance(t, torch.Tensor) for t in tree_flatten((args, kwargs))[0]):
            # a draw of new values (`torch.randn(p.shape, generator=g)`): it reads no tensor and
            # touches nothing but its generator, whose every other use is a step too: run before
            # the open graph, as a Python RNG draw is (DP-SGD's noise per parameter: a break each)
            k = self._hoisted_step(fe, ae, ke, reason)
        if k is None:
            k = self._call_step(fe, ae, ke, reason, external=True)
            self._add_break(reason, _user_location())
        self._call_result(k, res, external=True)
        return res

    def _leading_shape_op(self, func: Callable, name: str, args: tuple, kwargs: dict) -> tuple | None:
        """`F.one_hot(labels)` with its class count read from the labels (labels.max() + 1),
        before any graph operation of the call, on integer tensors: run here as a step before
        the first graph (as Dynamo runs it before its graph), its result an input of that
        graph, whose shape is then a guarded fact (a new class count records again) instead
        of a data-dependent shape that a later read (`oh.size(1)`) broke the graph at.  A
        1-tuple holding the result; None where it is not such a call."""
        if name != "one_hot" or any(seg.nops for seg in self.segs) or self.unreplayable:
            return None
        flat = tree_flatten((args, kwargs))[0]
        if not all(not isinstance(a, torch.Tensor) or a.dtype == torch.int64 and a.layout == torch.strided and
                   not a.requires_grad for a in flat):
            return None
        try:
            fe = self.const(_NoneIfRaises(func), _func_qualname(func))
            ae = [self.expr_of(a) for a in args]
            ke = {k: self.expr_of(v) for k, v in kwargs.items()}
        except Unreplayable:
            return None
        try:
            res = func(*args, **kwargs)
        except Exception:  # noqa: BLE001  (the op's usual path runs it again: a raise the function may catch)
            return None
        reason = f"{_op_name(func)} with its class count read from the labels (before any graph operation)"
        k = self._call_step(fe, ae, ke, reason, external=False)
        self._add_break(reason, _user_location())
        self._call_result(k, res)
        return (res,)

    def _raised(self, func: Callable, name: str, args: tuple, kwargs: dict, e: Exception) -> None:
        """A torch op raised while recording (the function may catch it: `try: L =
        torch.linalg.cholesky(K) except RuntimeError: <add jitter>`): whether it raises can depend
        on tensor values, which no guard checks, so a replay took the recorded `except` path for
        any matrix.  The op is a step between graphs that runs it again and tells whether it
        raised as recorded: a guard after it holds only then (else the call records anew)."""
        if self.unreplayable:
            return
        if _raise_from_metadata(name, args, kwargs, self.__dict__.get("dyn_shape") or {}, self._known_tensor):
            # (its tensors' shapes, strides and dtypes are guarded, its other arguments
            # constants: it raises at every replay of this variant, so nothing runs there)
            return
        if name.endswith("_") and not name.endswith("__") or "out" in kwargs or name in ("__setitem__", "__set__"):
            # (run again at replay, a write that no longer raises would be done twice)
            self.unreplayable = f"{_op_name(func)} raised {type(e).__name__} (a write whose failure was caught)"
            return
        try:
            fe = self.const(_RaisesAs(func, type(e)), _func_qualname(func))
            ae = [self.expr_of(a) for a in args]
            ke = {k: self.expr_of(v) for k, v in kwargs.items()}
        except Unreplayable as u:
            self.unreplayable = f"{u} (an argument of {_op_name(func)}, which raised {type(e).__name__})"
            return
        reason = f"{_op_name(func)} raised {type(e).__name__}"
        k = self._call_step(fe, ae, ke, reason, external=False)
        self._add_break(reason, _user_location())
        self._call_result(k, True)

    def _merge_inference(self, seg: Any, inference: bool, args: tuple, kwargs: dict) -> bool:
        """An op about to be recorded runs in another inference mode than the open graph `seg`:
        whether it joins that graph instead of closing it.  A block of the other mode than the
        call's entry (`with torch.inference_mode():` in a call entered outside inference mode, a
        helper decorated with it; `with torch.inference_mode(False):` in a call entered inside
        it) was a graph of its own, run in its mode: a graph before, one for the block, one
        after.  Its ops now join the graph of the entry's mode: an inference block's with grad
        off (eager records no autograd there), a normal block's where none of its tensors
        requires grad (so none of its results does); the results eager made in the block's mode
        are marked (seg.inf_nodes) and made tensors of that mode after the graph runs, where the
        graph outputs them (replay.mode_copies).  A graph opened inside the block becomes one of
        the entry's mode when an op after the block joins it (an inference block's ops so far
        then run with grad off).  Not for grad enabled inside an inference block
        (`torch.enable_grad()` there) nor for a normal block whose results require grad."""
        entry = self.amb0[0]
        if inference != entry:   # an op inside the block, the open graph of the entry's mode
            if seg.inference != entry:
                return False
            if inference:
                return not torch.is_grad_enabled()
            return not any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]) \
                and kwargs.get("requires_grad") is not True
        if entry:   # after a normal block that opened the graph: its results required no grad
            if seg.__dict__.get("grad_in_block"):
                return False
            seg.inference = True
            return True
        if not seg.inference or seg.start_grad or any(
                n.target is torch._C._set_grad_enabled and n.args[0] for n in seg.graph.nodes):
            return False
        first = next((n for n in seg.graph.nodes if n.op != "placeholder"), None)
        if first is None:
            seg.graph.call_function(torch._C._set_grad_enabled, (False,))
        else:
            with seg.graph.inserting_before(first):
                seg.graph.call_function(torch._C._set_grad_enabled, (False,))
        seg.inference, seg.start_grad, seg.grad = False, self.grad0, False
        return True

    def _call_step(self, fe: str, ae: list[str], ke: dict[str, str], reason: str, external: bool) -> int:
        """Ends the open graph segment and records a call replayed outside graphs
        (its arguments as replay expressions); returns its call number."""
        self._close_seg()
        if external and _ambient() != self.amb0:   # (the replay runs it outside the region)
            self.unreplayable = self.unreplayable or f"{reason} inside an autocast region"
        k = self.ncalls
        self.ncalls += 1
        g = torch.is_grad_enabled()   # (after an unbalanced torch.set_grad_enabled(False))
        flushed = self.__dict__.pop("pre_writes", None)   # (flush_writes.py)
        pre = None
        if flushed:
            from .flush_writes import pre_write_guards   # (below in the layout: lazy)

            pre = pre_write_guards(self, k, flushed)
        self.steps.append(CallStep(k, fe, ae, ke, reason, external=external, grad=None if g == self.grad0 else g,
                                   pre_writes=pre))
        self._resume_mark(k)
        return k

    def _hoisted_step(self, fe: str, ae: list[str], ke: dict[str, str], reason: str) -> int | None:
        """A draw from a Python or NumPy RNG (`random.random()`, `rs.uniform(0.9, 1.1)`) with
        no tensor argument, met inside a graph: it touches nothing but its generator's state,
        so the replay runs it before the open graph instead of splitting the graph there (as
        Dynamo runs Python random draws before its graph).  The guards placed after it (the
        branch it decides) are then checked before that graph runs.  Not when the graph so far
        draws from torch's RNG: a replay that misses after the draw logs the torch RNG state
        it left (rng.py), which must be the state after those draws.  None: not hoisted."""
        seg = self.cur
        if seg is None or not seg.nops or self.defer_window is not None or self.__dict__.get("pre_writes"):
            return None   # (reads pending after the open graph: deferred.py; writes flushed before it)
        if any(c[0] == seg.idx for c in self.spec_checks):
            # (a check after the open graph, asserts.py, decides whether eager gets here: run
            # before that graph, a draw would have run where the check then misses, and the
            # call recorded again would take its logged result for another call)
            return None
        for n in seg.graph.nodes:
            if _node_draws(n):
                return None
        at = next((i for i in range(len(self.steps) - 1, -1, -1)
                   if isinstance(self.steps[i], GraphStep) and self.steps[i].seg is seg), None)
        if at is None:
            return None
        k = self.ncalls
        self.ncalls += 1
        self.steps.insert(at, CallStep(k, fe, ae, ke, reason, external=True))
        return k
