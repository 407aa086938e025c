"""The uncapturable call (`_ExternalCallMixin`): a call the recording cannot put in a graph
(a Python library call that may write the program's state, an RNG draw of `random` or NumPy,
a context manager's `__enter__` in library code, ...) ends the open graph; its replay step
runs the same call eagerly at the same place, with the replay's own arguments, and what it
returns is sourced as `b{k}` (guarded where the program reads it, followed where it flows
into arithmetic: flows.py).  A draw from an exact RNG object whose result only feeds the
graph is hoisted before the graph instead of splitting it.  After a failed mid-replay guard,
the calls that already ran hand their logged results to the new recording (catch-up)."""
from __future__ import annotations

import logging
import random
import re
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from .. import logs as _logs
from ._bytecode import _instrs
from .base import Unreplayable, _Canned, _Raised
from .classify import _classify, _ffi, _no_new_epoch, _reads_clock
from .optim_calls import (
    _TREE_WALK, _ScalerState, _grad_scaler_owning_call, _lr_scheduler_optimizer, _module_zero_grad, _optimizer_owning_call,
    _optimizer_step,
)
from .typeinfo import _mro_lookup
from .frame_hook import _E
from .functorch_calls import rebuilt_function
from .flush_writes import catch_up_new, flush_before_call, pending_flows
from .guard_kinds import Equals, TypeIs
from .iterators import pure_draw
from .locations import _frame_loc
from .rng import _unlog
from .typeinfo import _is_opaque_value, _np_float


def _traced(fn: Any) -> bool:
    """Whether calling fn runs Python code the tracer follows (the user's)."""
    fn = getattr(fn, "__func__", fn)
    return type(fn) is types.FunctionType and _classify(fn.__code__) == "user"


def _is_context_manager(v: object) -> bool:
    """A context manager implemented in (untraced) Python library code (`fork_rng()`'s
    contextlib manager, torch's context managers): a handle whose `__enter__` / `__exit__`
    (and other methods) are replayed, never read.  C objects (files) are sourced as before."""
    t = type(v)
    ex = getattr(t, "__exit__", None)
    return type(ex) is types.FunctionType and hasattr(t, "__enter__") and not _traced(ex) and \
        not isinstance(v, (torch.Tensor, torch.nn.Module, types.ModuleType, type))


class _ExternalCallMixin:
    """For `_Recorder` (through `_SpecialCallMixin` and `_CallMixin`): the uncapturable call
    replayed as a graph break (`_external_call`) and the sourcing of its result
    (`_call_result`, also used for the results of other steps between graphs)."""

    def _arg_expr(self, a: Any) -> str:
        """The replay's expression of an uncapturable call's argument; a closure the call made
        (`opt.step(closure)`, the closure computing the loss and its backward) is made again
        from its code and the replay's values of its cells (functorch_calls.rebuilt_function:
        where a cell holds what the replay cannot make again, the function runs eagerly)."""
        try:
            return self.expr_of(a)
        except Unreplayable:
            if type(a) is types.FunctionType and a.__closure__ and id(a) not in self.src:
                return rebuilt_function(self, a)
            raise

    def _external_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, reason: str,
                       slot: int | None = None, substitute: Callable[[Any], None] | None = None,
                       hoist: bool = False, inert: bool = False, idempotent: bool = False,
                       rerun: bool = False) -> None:
        """hoist: run before the open graph where it can (graph_steps._hoisted_step); inert: the
        call cannot read or write the program's state (a torch.nn module constructor with
        constant arguments: module_factories.py), so what the program read before it is not
        read again after it (no new epoch, `ext_writes` unchanged); idempotent: calling it
        again leaves the state it leaves (zero_grad): not logged as run once for a replay
        that misses, but run again by the recording that follows (optim_calls._idempotent_call);
        rerun: the same for a call writing only tensors a replay that misses restores (gradient
        clipping after a backward: grad_clips.py), its tensor writes tracked as an external call's."""
        inert = inert or _reads_clock(f, args, kwargs)
        own = self._own_state_call(f, args, kwargs) if not inert else None
        logged = not (idempotent or rerun)
        i = self.ext_seen if logged else len(self.catchup)
        if logged:
            self.ext_seen += 1
        if not inert and own is None:   # (an optimizer's step reads and writes its own state alone)
            self.ext_writes += 1
            stale = self._written_before(f, args, kwargs)
            if stale is not None and not (not self.unreplayable and flush_before_call(self, reason)):
                # `cfg["a"] = s; json.dumps(cfg)`, `m["loss"] = v; print(m)`: the replay applies the
                # function's writes at its end, so its call read the values from before them (a
                # wrong printout, a wrong result built from it): the function runs eagerly
                self.unreplayable = self.unreplayable or \
                    f"{reason} reads {stale}, which the function wrote before the call (a replay writes at its end)"
            elif stale is None and not self.unreplayable and (self.dirty.pending or pending_flows(self)) and \
                    not _no_new_epoch(f, args, kwargs):
                # a call that may write any state, after writes of the function: made before it
                # where they can be (flush_writes.py), so that a replay missing after it can go on
                # from there (resumes._resume_state_plain) instead of recording the call again
                # from its start, which reads what the call wrote before it
                flush_before_call(self, reason)
        elif own is not None:
            self.own_calls += 1   # (resumes.py: continuations are taken after it)
            if logged:   # (a step; zero_grad is run again by a recording that follows a miss)
                self.own_writes += 1
        # this call already ran in a replay that then missed (its result substituted below)
        caught = logged and i < len(self.catchup)
        if i < len(self.catchup):
            # this call already ran in a replay whose mid-replay guard then failed: its
            # side effects happened, so the program gets that call's result instead (and
            # the RNG state it left, where it wrote the RNG: rng.py)
            value = _unlog(self.catchup[i])
            catch_up_new(self, self.catchup[i])   # (the new containers flushed before it: flush_writes.py)
            if type(value) is _Raised:
                # it raised there (replay.py): this recording raises it again, and the variant
                # runs eagerly (its replay would call it, and it may raise again or not)
                self.unreplayable = self.unreplayable or f"{reason} raised {type(value.exc).__name__} at a replay"
            if substitute is not None:
                substitute(value)
            elif slot is None:
                raise Unreplayable("internal: cannot substitute an uncapturable call")
            else:
                _E.poke(frame, slot, _Canned(value))
        try:
            try:
                fe = self.expr_of(f)
            except Unreplayable:
                so = getattr(f, "__self__", None)
                if so is not None and not isinstance(so, types.ModuleType) and id(so) not in self.src \
                        and not isinstance(so, (logging.Logger, torch.Generator)):
                    raise
                fe = self.const(f)  # the same callable object is called again at replay
            ae = [self._flow_arg(frame, a) or self._arg_expr(a) for a in args]
            ke = {k: self._flow_arg(frame, v) or self._arg_expr(v) for k, v in kwargs.items()}
        except Unreplayable as e:
            # the function runs eagerly; the call still runs here, unrecorded as a replayable
            # one's is: its ops are not the program's (torch.vmap(torch.func.grad(f)) of a
            # function the replay cannot rebuild: recorded, its functorch-wrapped tensors, which
            # have no storage, made the recorder raise where eager ran)
            self.unreplayable = self.unreplayable or f"{reason}: {e}"
            self.ext_depth += 1

            def unrecorded(fr: types.FrameType) -> None:
                self.ext_depth -= 1
            unrecorded.is_call = True  # type: ignore[attr-defined]
            self.pending[frame] = unrecorded
            return
        k = self._hoisted_step(fe, ae, ke, reason) if not idempotent and (
            hoist or _rng_draw(f, args, kwargs) or pure_draw(f, args)) else None
        external = k is None and not idempotent   # (hoisted draws and idempotent calls write no tensor)
        if k is None:
            k = self._call_step(fe, ae, ke, reason, external=logged)
            self._add_break(reason, _frame_loc(frame))
        else:
            _logs.log("graph_breaks", f"{reason} at {_frame_loc(frame)}: run before the graph, which it does not split")
        self.ext_depth += 1
        seen = [(t, t._version) for t, _ in self.versions.values()] if external else ()

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            if any(t._version != v for t, v in seen) or caught and own is not None:
                # (an optimizer's step the replay that missed ran: it wrote the tensors it
                # writes then, unseen here)
                self.tensor_writing_calls.append((k, reason))
            if own is not None:
                self.own_steps.add(k)
                own_state = [own.state, *own.state.values()]
                self.keep.append(own_state)
                self.own_state.update((id(o), o) for o in own_state)
                if isinstance(own, _ScalerState):
                    self._resnap(own.before + own.objects())
            elif not inert and not _no_new_epoch(f, args, kwargs):
                self._new_epoch(k)
            res = _E.peek(fr, 0)
            if _popped(fr):
                # the result is dropped unread (`opt.step()` as a statement): nothing of it
                # to source or guard (a guard `b4 is None` after an optimizer's step had no
                # continuation and made the function run eagerly, guard_misses._continuations)
                pass
            elif (type(res) in (int, float) or _np_float(res) and res == res) and self._follow_result(fr, k, res):
                # (a NumPy float: `np.quantile(d, q)`, followed as a float)
                return   # followed: guarded where the program uses it (flows.py)
            else:
                self._call_result(k, res, external=True)
            if fr in self.flow_frames:
                self._flow_tick(fr)   # flows of this frame: this step took their pending slot
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish

    def _own_state_call(self, f: Any, args: list, kwargs: dict) -> Any:
        """The optimizer of an uncapturable call about to run that is its step / zero_grad,
        writing no state of the program but the optimizer's own (classify.
        _optimizer_owning_call), whose state the recording has not read: the call starts no
        new epoch (what the program read before it is not guarded again after it) and counts
        as no write to the program's state.  Its step hooks are guarded to stay none; its
        state (noted after the call) read later in the call gives up (sources._source), as no
        guard after the call would check it.  None: not such a call."""
        opt = _optimizer_owning_call(f, args, kwargs)
        scaler = None
        if opt is None:
            scaler = _grad_scaler_owning_call(f, args, kwargs)
            if scaler is None:
                return self._module_grads_call(f, args, kwargs)
            opt = scaler.opt
            if opt is None:
                return scaler
        seen = (self.src, self.snaps, self.lazy, self.lazy_objs)
        if any(id(o) in m for o in [opt.state, *opt.state.values()] for m in seen):
            return None   # (read before it: guarded again after it, as after any such call)
        from torch.optim import optimizer as _opt
        s = self.src.get(id(opt))
        oe = self.src_first.get(id(opt), s[0]) if s is not None and s[2] != "opaque" else None
        if oe is None or _BREAK_NAME.match(oe):
            oe = self.const(opt)   # (its step is called through a constant or a guarded location)
        for e, d in ((f"{oe}._optimizer_step_pre_hooks", opt._optimizer_step_pre_hooks),
                     (f"{oe}._optimizer_step_post_hooks", opt._optimizer_step_post_hooks),
                     (self.const(_opt._global_optimizer_pre_hooks), _opt._global_optimizer_pre_hooks),
                     (self.const(_opt._global_optimizer_post_hooks), _opt._global_optimizer_post_hooks)):
            self.guard(Equals(f"len({e})", "the optimizer step hooks registered", len(d)), pos=0)
        return opt if scaler is None else scaler

    def _resnap(self, objs: list) -> None:
        """After an own call that wrote Python state of its own object (a GradScaler's stage dicts,
        its `_per_optimizer_states` set anew): their snapshots are taken again, so that the
        recording's writes are the function's alone (the replayed call makes its own; diffed, the
        new dict was no value the replay could name and capture gave up on the function), as
        _new_epoch does after other calls.  Objects the function itself wrote keep theirs."""
        written = {key[0] for key in self.dirty.pending if type(key) is tuple} | self.stored.keys()
        for o in objs:
            sn = self.snaps.get(id(o))
            if sn is not None and id(o) not in written:
                del self.snaps[id(o)]
                self._snap(o, sn[2], sn[3])

    def _module_grads_call(self, f: Any, args: list, kwargs: dict) -> Any:
        """`module.zero_grad()` writing its parameters' .grad alone (classify._module_zero_grad),
        as an optimizer's zero_grad: no new epoch (a dict counter incremented after it was
        guarded by value, a recompile per call).  The methods its walk of the tree calls are
        guarded to stay nn.Module's; it has no state of its own (an empty one).  None: not such
        a call."""
        m = _module_zero_grad(f, args, kwargs)
        if m is None:
            return None
        classes, work, seen = set(), [m], set()
        while work:
            x = work.pop()
            if id(x) not in seen:
                seen.add(id(x))
                classes.add(type(x))
                work.extend(c for c in x.__dict__["_modules"].values() if c is not None)
        for cls in classes:
            for n in _TREE_WALK:
                self._class_guard(cls, n, _mro_lookup(cls, n)[1], f"{cls.__qualname__}.{n}")
        return _NO_STATE

    def _written_before(self, f: Any, args: list, kwargs: dict) -> str | None:
        """What of the objects an uncapturable call is handed (its arguments, the items of a
        list / tuple / dict argument, the object of a bound method) the function wrote before
        the call (a store into it, a followed number stored there); None: nothing."""
        if not self.dirty.pending and not pending_flows(self):
            return None
        objs = list(args) + list(kwargs.values())
        so = getattr(f, "__self__", None)
        if so is not None and not isinstance(so, (types.ModuleType, type)):
            objs.append(so)
        if getattr(f, "__module__", None) == "torch.nn.modules.module":
            # (nn.Module's own methods, zero_grad / requires_grad_, read its parameters and
            # submodules, not the attributes a program sets on it; torch.save would: checked)
            objs = [o for o in objs if not isinstance(o, torch.nn.Module)]
        for o in list(objs):
            if type(o) in (list, tuple):
                objs.extend(o)
            elif type(o) is dict:
                objs.extend(o.values())
        ids = {id(o): o for o in objs}
        for key in list(self.dirty.pending) + pending_flows(self):
            if type(key) is tuple and key[0] in ids:
                return f"a {type(ids[key[0]]).__name__}"
        return None

    def _optimizer_reads(self, f: Any, args: list, kwargs: dict) -> bool:
        """Before an optimizer's step / zero_grad (calls._on_call): what it reads of the
        program's state is the optimizer's own (param_groups, defaults, attributes), guarded
        now, not every container the program holds (a dict counter the function increments
        stays followed).  The function writing any of it before the call (`g["lr"] = ...`)
        runs eagerly: the replay applies writes at its end, so its step read the old values
        (once its guards after the step no longer made it run eagerly).  False: not such a call."""
        scaler = _grad_scaler_owning_call(f, args, kwargs)
        if scaler is not None:
            opt = scaler.opt   # (a GradScaler's unscale_ / step: the optimizer's param_groups, as its step)
            if opt is None:
                return True
        elif not _optimizer_step(f, args):
            return False
        else:
            opt = getattr(f, "__self__", None)
            opt = _lr_scheduler_optimizer(f) if opt is None else opt
            opt = args[0] if opt is None else opt
        if not isinstance(opt, torch.optim.Optimizer):
            # (nn.Module's zero_grad / requires_grad_: the former reads the parameters' .grad alone)
            return _module_zero_grad(f, args, kwargs) is not None
        groups = opt.param_groups
        objs = [opt, groups, *groups, opt.defaults]
        ids = {id(o) for o in objs}
        if (any(k[0] in ids for k in self.dirty.pending) or any(k[0] in ids for k in pending_flows(self))) and \
                not (not self.unreplayable and flush_before_call(self, f"{type(opt).__name__}.{f.__name__}")):
            self.unreplayable = self.unreplayable or \
                f"{type(opt).__name__}.{f.__name__} reads the optimizer's param_groups or attributes the " \
                f"function wrote before it (a replay writes them at its end)"
        if scaler is None and _optimizer_owning_call(f, args, kwargs) is None:
            return False
        self.touch_deep(objs[1:])   # (not the optimizer's attributes: its state, read here, is its own)
        return True

    def _call_result(self, k: int, res: Any, external: bool = False) -> None:
        name = f"b{k}"
        if external and self.np_track_result(k, res):
            return
        if isinstance(res, torch.Tensor):
            self._source(res, name, f"<result of break {k}>", argrooted=True)
        elif _is_opaque_value(res) or type(res) is RemovableHandle or isinstance(res, torch.ScriptObject) or \
                external and (_is_context_manager(res) or _ffi(res)):
            # e.g. a ContextVar token: passed on to other replayed calls, never inspected; a
            # library's context manager (its methods are replayed calls: special_calls.py); a
            # hook's handle (its id counts hooks made: guarded by value, every call missed); a
            # foreign library or C data of ctypes (its functions are replayed calls too); a
            # TorchScript object an op returns (record_function's handle, which
            # _record_function_exit takes: guarded by identity, every call recorded again)
            self.src[id(res)] = (name, f"<result of break {k}>", "opaque")
            self.keep.append(res)
            if not _is_opaque_value(res):
                self.guard(TypeIs(name, f"type(<result of break {k}>)", type(res)))
        else:
            try:
                self._source(res, name, f"<result of break {k}>", argrooted=True)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or str(e)


class _NoState:
    """The own state of a call writing none of its own (module.zero_grad: _module_grads_call)."""
    state: dict = {}


_NO_STATE = _NoState()
_SCALAR_ARGS = (str, bytes, int, float, bool, type(None))
_BREAK_NAME = re.compile(r"b\d+\b|_r\d+\b")


def _popped(fr: types.FrameType) -> bool:
    """The frame's next instruction (it is about to run: the call just returned) drops the
    call's result from the stack unread."""
    ins = _instrs(fr.f_code).get(fr.f_lasti)
    return ins is not None and ins[0] == "POP_TOP"


def _rng_draw(f: Any, args: list, kwargs: dict) -> bool:
    """A method of a Python `random.Random` or a NumPy RandomState / Generator (their module
    functions are bound methods of hidden instances) called with numbers and strings only:
    it reads and writes its generator's state alone."""
    so = getattr(f, "__self__", None)
    if so is None and args and getattr(type(args[0]), getattr(f, "__name__", ""), None) is f:
        so, args = args[0], args[1:]   # the LOAD_METHOD form: the method's class's, the receiver first
    if so is None or not (isinstance(so, random.Random) or type(so).__name__ in ("RandomState", "Generator") and
                          type(so).__module__.startswith("numpy.random")):
        return False
    flat = list(args) + list(kwargs.values())
    flat += [y for x in flat if type(x) is tuple for y in x]
    return all(type(x) in _SCALAR_ARGS or type(x) is tuple for x in flat)
