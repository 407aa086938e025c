"""`_RecordingMixin` (for cache._Captured): a call run for real under the tracer and the variant
its recording leaves: the graphs' replay, or where capture gave up a frame run eagerly (its callees
captured on their own), a callee broken around from the next call on (give_ups.py); the warnings
and strict-mode errors giving up raises."""
from __future__ import annotations

import collections
import sys
from typing import Any, TypeVar
import types

import torch

from .. import logs as _logs
from .autocast import autocast_state
from .base import PY312, Unreplayable, _strict_error
from .frame_hook import _RECORD_LOCK, _REC_TLS, _call_bound
from .dispatch_args import _callers_level, _hook_acquire, _hook_release, _restore_profile
from .give_ups import MAX_EAGER_ANSWERS, MAX_LEARNED
from .torch_calls import _Mode
from .recorder import _Recorder
from .replay import _EagerVariant, _GraphVariant, _SkipFrameVariant

T = TypeVar("T")


class _RecordingMixin:
    """For `_Captured`: recording a call, storing its variant, giving up."""

    def _record(self, func: types.FunctionType, args: tuple, catchup: list | None = None,
                store: bool = True) -> Any:
        """Run the function for real under the tracer and (store) add the variant it
        records.  `catchup`: results of the first uncapturable calls, which already ran."""
        if store:
            self.stats.records += 1
        # One recording run at a time in the process: CPython's tracing (3.12: code object
        # instrumentation) is process-wide, and opcode tracing in two threads at once crashed
        # there.  Re-entrant: a recording nested in this thread's recording still runs; a thread
        # that finds another one recording waits for it (the lock releases the GIL meanwhile).
        # The frame hook stays installed while recording, also for a call dispatched without
        # it: with a frame evaluation function set, CPython 3.11 calls Python functions
        # without inlining their frames, so a caller's value stack still holds the callee
        # and its arguments (np_interop reads them).
        _hook_acquire()
        try:
            return self._record_hooked(func, args, catchup, store)
        finally:
            _hook_release()

    def _record_hooked(self, func: types.FunctionType, args: tuple, catchup: list | None, store: bool) -> Any:
        with _RECORD_LOCK:
            rec = _Recorder(self, func, self.code, args, self.argnames, catchup)
            prev_rec = getattr(_REC_TLS, "rec", None)
            _REC_TLS.rec = rec
            old = sys.gettrace()
            with _Mode(rec):
                if PY312:  # 3.12.0/1 only emit opcode events if a frame asked before settrace()
                    sys._getframe().f_trace_opcodes = True
                old_prof = sys.getprofile()
                sys.settrace(rec.global_trace)
                sys.setprofile(rec.global_profile)
                try:
                    result = _call_bound(func, self.code, args)
                    rec.grad_end = torch.is_grad_enabled()   # (torch.set_grad_enabled(False) unrestored)
                    rec.autocast_end = autocast_state()   # (torch.set_autocast_enabled(...) unrestored)
                finally:
                    _restore_profile(old_prof)
                    sys.settrace(old)
                    _REC_TLS.rec = prev_rec
        if rec.break_overflow and not self.warned_breaks and not self.strict:
            self.warned_breaks = True
            _logs.warn(f"mlircap.capture: {self._where()} broke the graph more than {self.break_limit} times "
                          f"in one call ({rec.break_overflow}); running it eagerly for these arguments, "
                          f"the modules and functions it calls captured on their own",
                          RuntimeWarning, stacklevel=_callers_level())
        elif rec.loop_break and not self.warned_breaks and not self.strict:
            self.warned_breaks = True
            r, loc, n = rec.loop_break
            _logs.warn(f"mlircap.capture: {self._where()} broke the graph {n} times at one place in a loop "
                          f"({r} at {loc}); running it eagerly for these arguments, the modules and functions "
                          f"it calls captured on their own", RuntimeWarning, stacklevel=_callers_level())
        if self.strict:
            self._check_strict(rec)
        if not store:
            return _plain(result)
        try:
            rec.unreplayable = rec.restride_ok()
            if rec.unreplayable:
                raise Unreplayable(rec.unreplayable)
            v = _GraphVariant(rec, result, self.backend)
        except Exception as e:  # Unreplayable, or a backend / codegen failure: never crash
            if getattr(e, "propagate", False):  # strict mode: the backend's error reaches the user
                raise
            why = rec.unreplayable or (str(e) if isinstance(e, Unreplayable) else f"{type(e).__name__}: {e}")
            why = why.strip() or type(e).__name__
            loc = (rec.unreplayable_loc if rec.unreplayable else None) or rec.return_loc or \
                f"{self.code.co_filename}:{self.code.co_firstlineno}"
            reason = f"{why} at {loc}"
            if rec.relearn and rec.unreplayable:
                # untraced library code wrote the RNG state (or the default dtype): its function
                # is known now (classify._LEARNED_WRITERS), and the next call records again,
                # replaying that call whole between graphs.  This call ran for real: correct.
                _logs.log("fallback", f"{self._where()}: {reason}; recording again on the next call")
                return _plain(result)
            if self.strict:
                raise _strict_error(f"{self._where()} would run eagerly: {reason}") from e
            if self._learn_break(rec, why):
                return _plain(result)
            callees = bool(rec.called_modules or rec.called_funcs or self.is_module)
            self._gave_up(reason, callees)
            pre = [p for p in rec.guards if p.pos == 0]
            try:
                if rec.loop_break or rec.break_overflow:
                    brk = rec.loop_break[:2] if rec.loop_break else \
                        collections.Counter(rec.break_events).most_common(1)[0][0]
                    if any(isinstance(u, _SkipFrameVariant) and u.breaks[0] == brk for u in self.variants):
                        # the same loop broke again for other arguments (its iteration count, a
                        # list that grows): it breaks whatever the arguments; the frame runs
                        # eagerly from now on where no earlier variant's guards hold
                        pre = []
                    v = _SkipFrameVariant(rec, pre, reason, brk)
                elif any(u.eager and u.reason == reason for u in self.variants):
                    # gave up at the same place for other arguments before (a model whose forward
                    # gives up deep inside, called with other sequence lengths): it gives up
                    # whatever the arguments, and each new shape recorded the whole call again
                    # (100x+ an eager call); from now on it runs eagerly where no earlier
                    # variant's guards hold
                    pre = []
                    v = _SkipFrameVariant(rec, pre, reason, None) if callees else _EagerVariant(rec, pre, reason)
                elif callees:
                    # as Dynamo does for a frame it skips: what the frame calls is captured
                    # on its own (a wrapper whose forward does bookkeeping capture cannot
                    # replay, DistributedDataParallel's: the wrapped module still compiles)
                    v = _SkipFrameVariant(rec, pre, reason, None)
                else:
                    v = _EagerVariant(rec, pre, reason=reason)
            except Exception:
                v = None
        if v is not None:
            self.variants.append(v)
            self.n_recorded += 1
            if _logs.enabled("guards"):
                _logs.log("guards", f"{self.code.co_name} variant {len(self.variants)}: " + "; ".join(g.describe() for g in v.pre))
        return _plain(result)

    def _learn_break(self, rec: _Recorder, why: str) -> bool:
        """The recording gave up inside a callee of the frame (give_ups.failing_callee) not
        learned before: from the next call on, recordings break the graph at calls into it
        and run it eagerly, instead of the frame running eagerly with each level of its
        callees recording again on a later call.  True: learned (this call ran for real)."""
        eager = self.__dict__.setdefault("eager_compiling_codes", set())
        if rec.compiling_code is not None and rec.compiling_code not in eager and len(eager) < MAX_EAGER_ANSWERS \
                and rec.unreplayable:
            # (first: is_compiling() answered as eager answers it there, the path eager takes)
            eager.add(rec.compiling_code)
            _logs.log("fallback", f"{self._where()}: capture gave up below {rec.compiling_code.co_name}, which "
                                  f"asked is_compiling(): {why}; recording again with eager's answer there")
            return True
        code = rec.give_up_callee
        if code is None or code in self.break_codes or len(self.break_codes) >= MAX_LEARNED or \
                not rec.unreplayable:
            return False
        self.break_codes[code] = why if len(why) <= 160 else why[:157] + "..."
        _logs.log("fallback", f"{self._where()}: capture gave up in {code.co_name} ({code.co_filename}:"
                              f"{code.co_firstlineno}): {why}; recording again, its calls run eagerly")
        return True

    def _gave_up(self, reason: str, callees: bool = False) -> None:
        """Capture gave up on a recording (the call, and later calls matching its guards,
        run eagerly): a warning names the cause and the user's file:line, once per cause,
        and the 'fallback' log area shows it every time."""
        _logs.log("fallback", f"capture gave up on {self._where()}: {reason}")
        if reason in self.warned_giveups or self.warned_breaks and (
                "graph breaks in one call" in reason or reason.startswith("a graph break in a loop")):
            return
        self.warned_giveups.add(reason)
        also = " (the modules and functions it calls are captured on their own)" if callees else ""
        _logs.warn(f"mlircap.capture: capture gave up on {self._where()}, which runs eagerly for these "
                      f"arguments{also}: {reason}", RuntimeWarning, stacklevel=_callers_level())

    def _check_strict(self, rec: _Recorder) -> None:
        """strict=True: every part of the call must run compiled.  Capture giving up
        (uncapturable values or side effects, too many graph breaks) raises, naming the
        cause and the user's file:line.  A graph break alone does not: the graphs on
        both sides of it are compiled, and what runs between them is the user's Python."""
        if rec.unreplayable and not rec.relearn:   # (relearn: the next call records again)
            raise _strict_error(f"{self._where()} would run eagerly (strict=True): capture gave up: "
                                f"{rec.unreplayable} at {rec.unreplayable_loc}")


def _plain(x: T) -> T:
    return x
