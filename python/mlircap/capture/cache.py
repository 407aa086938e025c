"""`_Captured`: the per-function cache of variants (cache_limit, strict, break_limit,
stats), dispatching a call to a variant or recording a new one (recording.py)."""
from __future__ import annotations

import collections
import functools
import threading
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.forward_ad as _forward_ad

from . import _ext
from .. import logs as _logs
from .base import INLINE_TYPES, _Miss, _fn_name, _strict_error, inline_target
from .classify import _TORCH_DIR
from .state_writers import _autograd_mode_on
from .frame_hook import (
    _E, _E_real, _RECORD_LOCK, _active, _call_bound,
)
from .callees import _Callees
from .dispatch_args import (
    _CONTEXT_DECORATORS, _VARARGS, _VARKEYWORDS, _arg_signature, _bind_args, _callers_level, _hook_acquire,
    _hook_release, _module_direct,
)
from .torch_calls import _Mode
from .replay import _Variant
from .recording import _RecordingMixin

_top_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks   # (~60 ns a call)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_level = torch._C._functorch.peek_interpreter_stack


def _user_function_mode() -> Any:
    """The innermost TorchFunctionMode of the user's on this thread's stack (capture's own
    recording mode left out), or None."""
    from torch.overrides import _get_current_function_mode_stack

    for m in reversed(_get_current_function_mode_stack()):
        if not isinstance(m, _Mode):
            return m
    return None


class CaptureStats:
    """Counters of one captured function (calls, replays, recordings, eager calls) and
    the reason of each recompilation."""

    def __init__(self) -> None:
        self.calls = 0
        self.replays = 0
        self.records = 0
        self.eager_calls = 0
        self.recompile_reasons: list[str] = []


class _Captured(_RecordingMixin):
    def __init__(self, fn: Callable, backend: Callable, cache_limit: int = 8, strict: bool = False,
                 break_limit: int = 64) -> None:
        # a compiled module or function compiled again (mlircap.compile(mlircap.compile(f))):
        # this capture is of what it wraps (its own capture is used where it is called alone)
        inner = inline_target(fn)
        while inner is not None:
            fn, inner = inner, inline_target(inner)
        self.fn = fn
        self.backend = backend
        self.cache_limit = cache_limit
        self.strict = bool(strict)
        self.break_limit = break_limit
        self.is_module = isinstance(fn, torch.nn.Module)
        # what a call runs: for functools.partial(f, *a) (nested ones too) f, whose frames
        # are captured with the partial's arguments bound in them, as any argument
        target = fn
        while type(target) is functools.partial:
            target = target.func
        module = isinstance(target, torch.nn.Module)
        # the instance whose frames are this capture's: the module, a bound method's self,
        # or an object with a Python __call__ (whose frames are captured)
        if module:
            func, self.bound = type(target).forward, target
        elif isinstance(target, types.MethodType):
            func, self.bound = target, target.__self__
        elif not isinstance(target, (type, types.FunctionType)) and \
                isinstance(getattr(type(target), "__call__", None), types.FunctionType):
            func, self.bound = type(target).__call__, target
        else:
            func, self.bound = target, None
        func = getattr(func, "__func__", func)
        # a decorated function (functools.wraps): torch's context-manager decorators
        # (@torch.no_grad(), @torch.inference_mode(), ...: torch code, shared by every
        # decorated function), and for a module any wrapper taking only *args/**kwargs (its
        # frame never has the module as first argument, so it was never dispatched: the
        # module ran eagerly, silently).  The wrapper runs as it is on every call, the
        # wrapped function's frames are the ones captured; the state the wrapper sets is
        # guarded like any entry state.
        while isinstance(func, types.FunctionType) and \
                isinstance(getattr(func, "__wrapped__", None), types.FunctionType) and (
                    func.__code__.co_filename.endswith(_CONTEXT_DECORATORS) and
                    func.__code__.co_filename.startswith(_TORCH_DIR) or
                    module and func.__code__.co_argcount == 0):
            func = func.__wrapped__
        self.func: types.FunctionType | None = func if isinstance(func, types.FunctionType) else None
        self.code: types.CodeType | None = self.func.__code__ if self.func is not None else None
        self.variants: list[_Variant] = []
        self.n_recorded = 0   # variants stored so far (_await_recordings: threads recording at once)
        self._recording = threading.Condition()   # guards _recorders: threads recording a variant
        self._recorders: set[int] = set()
        self.warned = False
        # past cache_limit: the argument signatures (_arg_signature) of calls that matched no
        # variant; such a call again runs eagerly without checking the variants' guards
        self.eager_signatures: set[tuple] = set()
        self.warned_breaks = False
        self.warned_mode = False
        self.warned_giveups: set[str] = set()
        self.stats = CaptureStats()
        self.fail_counts: collections.Counter[str] = collections.Counter()
        # int sources (an argument, an attribute, a global, a list item) -> the first value a
        # recording read there, and those read with two values: followed from then on
        # (flow_roots._varies)
        self.int_seen: dict[tuple, int] = {}
        self.dyn_ints: set[tuple] = set()
        self.callees = _Callees(self)   # captured on their own where the frame runs eagerly
        self.break_codes: dict[types.CodeType, str] = {}   # callees it gave up in: broken around (give_ups.py)
        self.pass_codes: set[tuple] = set()   # frames its callees run as they are (give_ups.py)
        if self.code is not None:
            c = self.code
            n = c.co_argcount + c.co_kwonlyargcount + bool(c.co_flags & 0x04) + bool(c.co_flags & 0x08)
            self.argnames: list[str] = list(c.co_varnames[:n])
            if self.code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):  # generator/coroutine
                self.func = self.code = None
                self.uncapturable: str = "generator or coroutine functions are not captured"
        if self.code is None and not hasattr(self, "uncapturable"):
            self.uncapturable = f"{type(fn).__name__} objects are not captured (a Python function or " \
                                f"nn.Module is)"
        if self.code is not None and _E is not None:
            _E_real.register_code(self.code)
        # A call whose frame arguments can be bound here (see _bind_args) is dispatched
        # directly, without evaluating the function's frame for the PEP 523 hook to
        # intercept: a plain function, a bound method (its instance first) or a module
        # whose __call__ would go straight to its forward (_module_direct).
        self._lead: tuple | None = None
        if self.code is not None and _E is not None:
            if self.is_module:
                self._lead = (fn,)
            elif fn is self.func:
                self._lead = ()
            elif isinstance(fn, types.MethodType) and fn.__func__ is self.func:
                self._lead = (fn.__self__,)
        # positional arguments that bind as they are (no defaults, *args, keyword-only
        # parameters or **kwargs involved); -1: none do
        c = self.code
        self._npos = c.co_argcount - len(self._lead) if self._lead is not None and \
            not c.co_kwonlyargcount and not c.co_flags & (_VARARGS | _VARKEYWORDS) else -1

    # user-facing call
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lead = self._lead
        if lead is not None:   # the direct path (see __init__)
            active = _active()
            if active and not active[-1][1]:
                # Called while a captured call of this thread is being dispatched (from
                # its replay or recording): the function runs as it is, as the frame hook
                # lets every frame run while its callback is in progress.
                return self.fn(*args, **kwargs)
            if not self.is_module or _module_direct(self.fn, self.func):
                if len(args) == self._npos and not kwargs:
                    bound = lead + args
                else:
                    bound = _bind_args(self.code, self.func, lead + args, kwargs)
                if bound is not None:
                    # the frame's arguments, bound as CPython binds them: dispatched here,
                    # marked as this thread's call being dispatched (as _hook_cb does)
                    active.append([self, False])
                    try:
                        return self.dispatch(self.func, bound)
                    finally:
                        active.pop()
        if self.code is None:
            if self.strict:
                raise _strict_error(f"{_fn_name(self.fn)} would run eagerly: {self.uncapturable}")
            return self.fn(*args, **kwargs)
        if _E is not None:
            active = _active()
            if active and not active[-1][1]:
                return self.fn(*args, **kwargs)   # as above
            active.append([self, True])   # [capture, its own frame not dispatched yet]
            _hook_acquire()
            try:
                return self.fn(*args, **kwargs)
            finally:
                active.pop()
                _hook_release()
        # Pure-Python fallback (extension could not be built/imported): without the stack
        # peek helper external reads cannot be observed soundly, so we run eagerly.
        if self.strict:
            raise _strict_error(f"{self._where()} would run eagerly: the C++ frame hook is unavailable "
                                f"({_ext.error()})")
        if not self.warned:
            self.warned = True
            _logs.warn(f"mlircap.capture: C++ frame hook unavailable ({_ext.error()}); "
                          f"running {self.code.co_name} eagerly", RuntimeWarning, stacklevel=2)
        self.stats.eager_calls += 1
        return self.fn(*args, **kwargs)

    def _where(self) -> str:
        return f"{self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno})"

    def dispatch(self, func: types.FunctionType, args: tuple) -> Any:
        stats = self.stats
        stats.calls += 1
        seen = self.n_recorded
        if torch._C._is_torch_function_mode_enabled():
            mode = _user_function_mode()
            if mode is not None:
                return self._call_under_mode(func, args, f"a TorchFunctionMode ({type(mode).__name__}) is active")
        if _top_saved_hooks(False) is not None or _forward_ad._current_level >= 0 or _dispatch_modes():
            why = _autograd_mode_on()
            if why is not None:
                return self._call_under_mode(func, args, why)
        log = None  # results of uncapturable calls already run by a replay that missed
        signature = None
        if self.eager_signatures and len(self.variants) >= self.cache_limit and not self.strict:
            # (checking 8 variants' guards, all failing, made each such call of a loop over
            # 20 sequence lengths 5-10% slower than eager, bench/varying_lengths.py; a call whose
            # signature missed every variant before runs eagerly at once. Sound whatever the
            # variants' guards would say: eager is what a miss runs)
            signature = _arg_signature(args)
            if signature in self.eager_signatures:
                return self._call_eager(func, args)
        for v in self.variants:
            if v.guard(args, func):
                r = v.call(args, func, log)
                if type(r) is not _Miss:
                    if not v.eager:
                        stats.replays += 1
                    v.hits += 1
                    return r
                log = r.log or log
                self.fail_counts["a data-dependent value (mid-replay guard)"] += 1
        if any(getattr(v, "dead", False) for v in self.variants):   # (asserts.Deopt)
            self.variants = [v for v in self.variants if not getattr(v, "dead", False)]
        if log is None and _functorch_level() is not None:
            # a call under torch.func.vmap / grad / jacrev / jvp that matched no variant: its
            # arguments are the transform's wrapped tensors (no storage), whose recording
            # raised out of the user's call (vmap: 'Batching rule not implemented for
            # aten::_debug_has_internal_overlap') or left a variant that runs eagerly
            return self._call_under_mode(func, args, "a torch.func transform (vmap, grad, jacrev, jvp, ...) "
                                                     "is active")
        reason = None
        full = len(self.variants) >= self.cache_limit
        if self.variants and not (full and self.warned and not self.strict):
            # (past cache_limit, once warned, the reason a call misses is not needed: finding it
            # cost ~25 us of CPU on every call that then ran eagerly, 7% of a small transformer
            # block's forward, which made those calls slower than eager's)
            v = self.variants[-1]
            reason = v.first_failure(args, func) or "a data-dependent value changed (mid-replay guard)"
            self.fail_counts[reason] += 1
        if full:
            if self.strict:
                worst = self.fail_counts.most_common(1)[0][0] if self.fail_counts else reason
                raise _strict_error(f"cache_limit ({self.cache_limit}) reached for {self._where()}: it would "
                                    f"run eagerly. Guard that kept failing: {worst}")
            if not self.warned:
                self.warned = True
                worst = self.fail_counts.most_common(1)[0][0] if self.fail_counts else reason
                _logs.warn(f"mlircap.capture: cache_limit ({self.cache_limit}) reached for "
                              f"{self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno}); "
                              f"running eagerly from now on. Guard that kept failing: {worst}",
                              RuntimeWarning, stacklevel=_callers_level())
            # (also after a miss in the middle of a replay that had run uncapturable calls, `log`:
            # this call then continues under the tracer with their results, a recording's cost,
            # 8-30x eager's; each later call of the signature paid it again wherever its
            # data-dependent path (a random flip, a crop offset drawn from a generator) was not
            # among the variants': bench/heldout4.py augment_generator ran at 0.03x eager)
            if len(self.eager_signatures) < 1024:
                sig = signature if signature is not None else _arg_signature(args)
                if sig is not None:
                    self.eager_signatures.add(sig)
            return self._call_eager(func, args, log)
        if reason is not None:
            self.stats.recompile_reasons.append(reason)
            _logs.log("recompiles", f"{self.code.co_name}: {reason}")
        if log is not None:   # (uncapturable calls ran: this call goes on from their results)
            return self._record(func, args, log)
        if self._await_recordings(seen):
            stats.calls -= 1
            return self.dispatch(func, args)
        try:
            return self._record(func, args, log)
        finally:
            with self._recording:
                self._recorders.discard(threading.get_ident())
                self._recording.notify_all()

    def _await_recordings(self, seen: int) -> bool:
        """Threads that missed at once (a server's workers on their first request) each
        recorded and compiled the same variant: duplicates that filled cache_limit, after
        which every call ran eagerly.  A call that missed waits for the other threads'
        recordings of this function to store their variants (not inside a recording of its
        own, which holds the recording lock theirs need); True: a variant was stored since
        it missed (`seen`: `n_recorded` then), check the variants again.  Else this thread
        is marked as recording."""
        me = threading.get_ident()
        with self._recording:
            if not _RECORD_LOCK._is_owned():
                while self._recorders - {me}:
                    self._recording.wait()
            if self.n_recorded != seen:
                return True
            self._recorders.add(me)
            return False

    def _call_under_mode(self, func: types.FunctionType, args: tuple, why: str) -> Any:
        """A call made while the user's TorchFunctionMode is active (`with torch.device("cuda"):`,
        a mode that overrides torch functions), or saved tensor hooks / a forward AD level are on
        (state_writers._autograd_mode_on): the mode changes what each torch call computes (or what its
        backward reads), and neither the variants' graphs nor their guards know it, so the call
        runs eagerly."""
        if self.strict:
            raise _strict_error(f"{self._where()} would run eagerly: {why}")
        if not self.warned_mode:
            self.warned_mode = True
            _logs.warn(f"mlircap.capture: {self._where()} runs eagerly while {why}",
                          RuntimeWarning, stacklevel=_callers_level())
        self.stats.eager_calls += 1
        return _call_bound(func, self.code, args)

    def _call_eager(self, func: types.FunctionType, args: tuple, log: list | None = None) -> Any:
        self.stats.eager_calls += 1
        if log:  # some uncapturable calls already ran: the tracer substitutes their results
            return self._record(func, args, log, store=False)
        return _call_bound(func, self.code, args)

    # introspection
    @property
    def graph_count(self) -> int:
        return sum(len(v.graphs) for v in self.variants)

    @property
    def recompiles(self) -> int:
        return max(0, len(self.variants) - 1)


INLINE_TYPES[_Captured] = "fn"   # (base.inline_path)

