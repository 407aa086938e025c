"""Opcode handlers for calls (`_CallMixin`): CALL / CALL_FUNCTION_EX and what a call is
(`classify._call_kind`): safe, a reflective read (getattr, vars), a write (setattr, a mutating
method), a ContextVar access, a disabled logger's call (a guard, no break), or uncapturable:
a graph break whose replay step runs the call eagerly and whose result is guarded or followed."""
from __future__ import annotations

import contextvars
import copy
import logging
import random
import sys
import types
from collections.abc import Callable
from logging import Logger as logging_Logger
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .. import logs as _logs
from .base import Unreplayable, _Canned, _MISSING
from .guard_kinds import Equals, Lengths, TypeIs
from .frame_hook import _E, _NULL
from .classify import (_MODULE_WALKERS, _WRITE_ONLY, _call_kind, _classify, _func_qualname, _no_new_epoch,
                       _optimizer_step)
from .iterators import pure_draw, stateful_next
from .locations import _frame_loc
from .typeinfo import _is_opaque_value
from .rng import _unlog
from .special_calls import _SpecialCallMixin, _is_context_manager
from .flows import _FlowMixin
from .reads import _ReadMixin


class _CallMixin(_ReadMixin, _SpecialCallMixin, _FlowMixin):
    """For `_Recorder` (through `_TracerMixin`): the CALL handlers, the kinds of calls, and the
    uncapturable call replayed as a graph break (`_external_call`, `_call_result`)."""

    def op_kw_names(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        self.kwnames[frame] = frame.f_code.co_consts[arg] if not isinstance(argval, tuple) else argval

    def op_call(self, frame: types.FrameType, argc: int, argval: Any) -> None:
        kw = self.kwnames.pop(frame, ())
        meth = _E.peek(frame, argc + 1)
        if meth is not _NULL:
            f = meth
            slot = argc + 1
            args = [_E.peek(frame, argc - i) for i in range(argc + 1)]
        else:
            f = _E.peek(frame, argc)
            slot = argc
            args = [_E.peek(frame, argc - 1 - i) for i in range(argc)]
        nkw = len(kw)
        if nkw:
            kwargs = dict(zip(kw, args[len(args) - nkw:]))
            args = args[:len(args) - nkw]
        else:
            kwargs = {}
        self._on_call(frame, f, args, kwargs, slot)

    def op_call_ex(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        has_kw = arg & 1
        f = _E.peek(frame, 1 + has_kw)
        cargs = _E.peek(frame, has_kw)
        kwargs = _E.peek(frame, 0) if has_kw else {}
        if type(cargs) is not tuple:
            if type(cargs) is types.GeneratorType and _classify(cargs.gi_code) == "user" and \
                    self._defer_call_ex(frame, f, kwargs):
                return
            # f(*it): CPython turns the iterable into a tuple when the call runs; do it
            # now and hand it that tuple, so looking at the arguments does not exhaust an
            # iterator (x.permute(*reversed(range(n))))
            try:
                cargs = tuple(cargs)
            except Exception:
                return  # the call raises the same error itself
            _E.poke(frame, has_kw, cargs)
        if has_kw and type(kwargs) is not dict:
            try:
                kwargs = dict(kwargs)
            except Exception:
                return
            _E.poke(frame, 0, kwargs)
        self._on_call(frame, f, list(cargs), dict(kwargs), 1 + has_kw)

    def _defer_call_ex(self, frame: types.FrameType, f: Any, kwargs: Any) -> bool:
        """f(*gen) where gen is a generator of traced code (`self[0](*(getattr(self,
        f"original{i}") for i in range(n)))`, torch's ParametrizationList): a handler runs
        untraced, so turning gen into a tuple here would hide what it reads and records.
        Where f is a call whose arguments the recording need not see before it runs (traced
        Python code, a torch function the mode records, a module's forward), CPython runs
        the generator itself, traced; True then.  Other calls: False (the caller
        materializes the arguments now, untraced, as before)."""
        if type(kwargs) is not dict or self.np_env:
            return False
        fn = f.__func__ if type(f) is types.MethodType else f
        if isinstance(f, torch.nn.Module):
            s = self.src.get(id(f))
            if s is None or s[2] == "opaque" or type(f).__call__ is not torch.nn.Module.__call__:
                return False
            self._note_callee(frame, f)
            if id(f) not in self.hooked:
                self._guard_module_call(f, s[1])
            if self.lazy or self.lazy_objs:
                self.touch_deep(list(kwargs.values()) + [f])
            return True
        if type(fn) is types.FunctionType and _classify(fn.__code__) == "user" and f is not _IS_COMPILING:
            self._note_callee(frame, f)
            return True
        if type(fn) in (types.FunctionType, types.BuiltinFunctionType) and f is not _IS_COMPILING and \
                (getattr(fn, "__module__", None) or "").startswith("torch") and _call_kind(f) == "safe" and \
                not (self.lazy or self.lazy_objs) and f not in (torch.from_numpy, torch.as_tensor, torch.tensor):
            return True   # a torch function (torch.stack, torch.cat, ...): the mode records it
        return False

    def _on_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int | None = None) -> None:
        if slot is not None and f is _IS_COMPILING:
            # A recording is a compilation: code the tracer follows (the user's, and
            # libraries like transformers that keep data-dependent checks out of compiled
            # graphs) asking torch.compiler.is_compiling() is answered True, as under
            # torch.compile.  torch's own (untraced) code keeps torch's answer: there it
            # selects Dynamo-only machinery.
            _E.poke(frame, slot, _Canned(True))
            return
        if slot is not None and (f := self._redirect_call(frame, f, args, kwargs, slot)) is None:
            return   # (a scripted function's Python function called instead; a vmapped one replayed)
        if self.np_tensor_of_source(frame, f, args, kwargs, slot) or self._cached_call(frame, f, args, kwargs, slot):
            return
        if slot is not None and getattr(f, "__func__", f) in _TENSOR_DEEPCOPY:
            # x.__deepcopy__(memo): bound, or the function with x first (LOAD_METHOD)
            xm = [f.__self__] + args if type(f) is types.MethodType else args
            if len(xm) == 2 and isinstance(xm[0], torch.Tensor) and self._deepcopy_tensor(frame, xm[0], xm[1], slot):
                return
        self._note_callee(frame, f)
        self._source_defaults(f, args, kwargs)
        if isinstance(f, torch.nn.Module) and id(f) not in self.hooked:
            s = self.src.get(id(f))
            if s is not None and s[2] != "opaque":
                # m(x): nn.Module.__call__ (untraced) runs its hooks and what `forward`
                # resolves to, which may be no method named forward (m.forward = lambda ...)
                self._guard_module_call(f, s[1])
        if any(f is r for r in _FRAME_READERS):
            if f is globals or f is sys._getframe:
                raise Unreplayable(f"{f.__name__}() reads the calling frame, which a replay does not have")
            if not (args or kwargs):
                # locals() / vars() / dir(): a snapshot of this frame's variables, which the
                # tracer sees (replayed elsewhere it would read the replay's own frame); float
                # arguments in it are not followed (flows.py): guarded by value
                self._flow_escape_args()
                return
        if (f is _FUNCTION_APPLY or getattr(f, "__func__", None) is _FUNCTION_APPLY) and torch.is_grad_enabled() and \
                any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]):
            # MyFunction.apply(x) (a custom autograd.Function) on a tensor that requires
            # grad: run between graphs as it is, so that autograd attaches its own backward
            # (its forward's ops, recorded, would give the ops' gradient, or none: autograd
            # runs forward under no_grad)
            cls = getattr(f, "__self__", None) or (args[0] if args else None)
            self._external_call(frame, f, args, kwargs, f"a custom autograd.Function "
                                f"({getattr(cls, '__qualname__', '?')}.apply) on a tensor that requires grad", slot)
            return
        kind = _call_kind(f)
        recv = self._opaque_method(f, args)
        if recv is not None or kind == "safe" and (stateful_next(f, args, self.src) or _optimizer_step(f, args)):
            kind = "external"
        if kind == "external" and recv is None and (_pure_ufunc_call(f, args, kwargs) or
                                   f is id and frame.f_code.co_filename == copy.__file__):
            # id() in copy.deepcopy (dataclasses.asdict, ...): the keys of its memo of objects
            # already copied, which never leave it
            kind = "safe"
        so = getattr(f, "__self__", None)
        if so is None and args and type(f) is types.FunctionType:
            so = args[0]   # m.parameters() called as a method: f is the function, args[0] is m
        if f is copy.deepcopy and args and isinstance(args[0], torch.nn.Module) and id(args[0]) in self.src:
            # copy.deepcopy(module): its parameters and buffers are reached through
            # __reduce_ex__'s state (C code): source the subtree, as for parameters()
            self._source_module_tree(args[0])
        elif isinstance(so, torch.nn.Module) and getattr(f, "__name__", "") in _MODULE_WALKERS \
                and id(so) in self.src:
            # parameters()/modules()/... run in torch code we do not trace: source the whole
            # subtree now so the yielded modules/parameters/buffers are known and guarded
            self._source_module_tree(so)
        elif isinstance(so, torch.nn.Module) and getattr(f, "__name__", "") == "state_dict" and \
                id(so) in self.src and not args[1 if getattr(f, "__self__", None) is None else 0:] and \
                set(kwargs) <= {"keep_vars"}:
            self._state_dict_tree(so)
        if self.lazy or self.lazy_objs:
            ff = getattr(f, "__func__", f)
            traced = type(ff) is types.FunctionType and _classify(ff.__code__) == "user"
            if not traced:
                if kind == "mutator" and getattr(f, "__name__", "") in _WRITE_ONLY:
                    self.touch_deep(list(args[1:] if getattr(f, "__self__", None) is None else args)
                                    + list(kwargs.values()))
                elif kind == "external" and _reads_only_its_operands(f, args, kwargs):
                    pass   # nothing it reads can be a container of the program's
                elif kind == "external":
                    for o in list(self.lazy.values()):
                        self.touch(o[0])
                else:
                    self.touch_deep(list(args) + list(kwargs.values()) +
                                    ([f.__self__] if hasattr(f, "__self__") else []))
        if kind == "safe":
            return
        if kind == "getattr":
            if len(args) >= 2 and type(args[1]) is str and id(args[0]) in self.src:
                self._fake_load_attr(args[0], args[1])
            return
        if kind == "vars":
            if len(args) == 1 and id(args[0]) in self.src and hasattr(args[0], "__dict__"):
                self._fake_load_attr(args[0], "__dict__")
            return
        if kind == "setattr":
            if args and id(args[0]) in self.src and len(args) >= 2:
                self.dirty.add((id(args[0]), args[1]))
                if type(args[1]) is str:
                    self.stored[id(args[0])].add(args[1])
            return
        if kind == "ctxvar":
            # ContextVar state is modelled like other external state: reads of values not set
            # by this call are guarded, the net change is replayed at the end
            cv = getattr(f, "__self__", None)
            if not isinstance(cv, contextvars.ContextVar):
                cv = args[0]
            if cv not in self.cv_snap:
                self.cv_snap[cv] = cv.get(_MISSING)
                self.keep.append(cv)
            name = f.__name__
            if name == "set":
                self.cv_local.add(cv)
            elif name == "reset":   # back to an earlier value (possibly the pre-call one)
                self.cv_local.discard(cv)
            elif cv not in self.cv_local:
                # a read that depends on the value the variable had before this call
                self.read(f"{self.const(cv)}.get({self.const(_MISSING)})", f"ContextVar {cv.name!r}",
                          self.cv_snap[cv])
            return
        if kind == "weakref":
            if id(f) in self.src:
                r = f()
                if r is not None:
                    self.read(f"{self.src[id(f)][0]}()", f"{self.src[id(f)][1]}()", r)
            return
        if kind == "mutator":
            so = getattr(f, "__self__", None)
            if so is None or isinstance(so, type):
                so = args[0] if args else None
            if id(so) in self.src:
                self.dirty.add((id(so), "*"))
            if self.flow_stores:
                self._flow_items_written(so)
            return
        if self._disabled_log_call(f, args, kwargs):
            self._flow_unused(frame)
            return
        # uncapturable call: replay it eagerly
        reason = f"call to uncapturable {_func_qualname(f)}"
        if recv is not None:
            f, args = recv
        self._external_call(frame, f, args, kwargs, reason, slot)

    def _deepcopy_tensor(self, frame: types.FrameType, x: torch.Tensor, memo: Any, slot: int) -> bool:
        """`copy.deepcopy(t)` reaching torch's Tensor / Parameter `__deepcopy__` (copy.py is
        traced; its `copier(memo)` is this call).  A tensor that needs no autograd leaf of
        its own (no requires_grad, no .grad, no Python attributes, a plain strided Tensor)
        is copied in the graph as `t.clone(memory_format=torch.preserve_format)`: the same
        values, dtype and device (a view's copy is not a view into a copy of the whole storage
        then).  A parameter or a tensor that requires grad gets a new autograd leaf: the
        copy is a replayed step between graphs (`copy.deepcopy(t)` at replay) whose result
        the graph after it takes as an input.  False (traced as before) where a tensor copied
        before in the same deepcopy shares its storage (eager's copies share theirs)."""
        if type(memo) is not dict:
            return False
        ptr = x.untyped_storage().data_ptr()
        for o in memo.get(id(memo), ()):   # what this deepcopy copied before
            o = o.untyped_storage() if isinstance(o, torch.Tensor) else o
            if isinstance(o, torch.UntypedStorage) and o.data_ptr() == ptr:
                return False   # a storage shared with a tensor copied before: the copies share theirs
        if id(x) not in self.src and not (id(x) in self.env and self.env[id(x)][0] is x):
            return False   # of unknown origin: as before (the give-up names it)
        if type(x) is torch.Tensor and not x.requires_grad and x.grad is None and not x.__dict__ and \
                x.layout == torch.strided and x.device.type not in ("meta", "lazy"):
            # the program gets the real copy (its storage goes into the memo, as eager's);
            # the graph makes it as a clone
            res = x.__deepcopy__(memo)
            self._after_torch(torch.Tensor.clone, "clone", (x,), {"memory_format": torch.preserve_format}, res)
            _E.poke(frame, slot, _Canned(res))
            return True
        if not x.is_leaf:
            return False   # deepcopy raises: as eager does
        _E.poke(frame, slot, _CallWithout(_deepcopy_of, x))
        self._external_call(frame, _deepcopy_of, [x], {}, "copy.deepcopy of a tensor that requires grad "
                            "(a new autograd leaf)", slot)
        return True

    def _note_callee(self, frame: types.FrameType, f: Any) -> None:
        """What the call could be captured as if this frame ends up running eagerly (a loop
        that breaks on every iteration: replay.SkipFrameVariant): a module called anywhere
        in the traced code, or a user function called by the captured frame itself."""
        if isinstance(f, torch.nn.Module):
            if len(self.called_modules) < _MAX_CALLEES:
                self.called_modules[id(f)] = f
            return
        fn = f.__func__ if type(f) is types.MethodType else f
        if type(fn) is types.FunctionType and frame.f_code is self.code and \
                len(self.called_funcs) < _MAX_CALLEES and _classify(fn.__code__) == "user" and \
                fn.__code__ not in self.code.co_consts:   # not one the frame makes (a new one per call)
            self.called_funcs[id(fn)] = fn

    def _guard_module_call(self, mod: torch.nn.Module, pretty: str, forward: bool = True) -> None:
        """What calling `mod` runs besides traced code: its hooks and the global module hooks
        (guarded empty or by count), and (`forward`) what `mod.forward` resolves to (an
        instance attribute, or the class's method, guarded against monkeypatching)."""
        self.hooked.add(id(mod))
        hs = [mod._forward_hooks, mod._forward_pre_hooks, mod._backward_hooks, mod._backward_pre_hooks]
        self.guard(Lengths(tuple(hs), tuple(len(h) for h in hs), pretty), group=tuple(hs))
        d = mod.__dict__
        if forward and "forward" in d:
            self.read(f"{self.const(d)}['forward']", f"{pretty}.forward", d["forward"], id(mod), "forward",
                      group=(d,))
        elif forward:
            self._class_attr(mod, "forward", pretty)
        if not self.hooked_global:
            self.hooked_global = True
            mm = torch.nn.modules.module
            gs = [mm._global_forward_hooks, mm._global_forward_pre_hooks, mm._global_backward_hooks,
                  mm._global_backward_pre_hooks, mm._global_forward_hooks_always_called]
            self.guard(Lengths(tuple(gs), tuple(len(x) for x in gs), "global nn.Module"), group=tuple(gs))

    def _disabled_log_call(self, f: Any, args: list, kwargs: dict) -> bool:
        """`log.debug(...)` (info, warning, ..., log(level, ...)) on a standard library logger
        that is not enabled for that level does nothing: no graph break, a guard that the
        logger is still disabled for the level instead (an enabled logger writes: a break)."""
        fn = getattr(f, "__func__", f)
        so = getattr(f, "__self__", None)
        rest = list(args)
        if so is None:
            if not rest:
                return False
            so = rest.pop(0)
        name = getattr(fn, "__name__", None)
        if not isinstance(so, (logging.Logger, logging.LoggerAdapter)) or name not in _LOG_LEVELS:
            return False
        base = logging.Logger if isinstance(so, logging.Logger) else logging.LoggerAdapter
        if base.__dict__.get(name) is not fn or type(so).isEnabledFor is not base.isEnabledFor:
            return False   # an overriding subclass may do anything
        level = _LOG_LEVELS[name]
        if level is None:   # log(level, msg, ...)
            level = rest[0] if rest else kwargs.get("level")
            if type(level) is not int:
                return False
        s = self.src.get(id(so))
        if s is None or s[2] == "opaque":
            return False
        try:
            if so.isEnabledFor(level):
                return False
        except Exception:
            return False
        self.guard(Equals(f"{s[0]}.isEnabledFor({level})", f"{s[1]}.isEnabledFor({level})", False))
        return True

    def _external_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, reason: str,
                       slot: int | None = None, substitute: Callable[[Any], None] | None = None) -> None:
        i = self.ext_seen
        self.ext_seen += 1
        if i < len(self.catchup):
            # this call already ran in a replay whose mid-replay guard then failed: its
            # side effects happened, so the program gets that call's result instead (and
            # the RNG state it left, where it wrote the RNG: rng.py)
            value = _unlog(self.catchup[i])
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
                        and not isinstance(so, (logging_Logger, torch.Generator)):
                    raise
                fe = self.const(f)  # the same callable object is called again at replay
            ae = [self._flow_arg(frame, a) or self.expr_of(a) for a in args]
            ke = {k: self._flow_arg(frame, v) or self.expr_of(v) for k, v in kwargs.items()}
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{reason}: {e}"
            return
        k = self._hoisted_step(fe, ae, ke, reason) if _rng_draw(f, args, kwargs) or pure_draw(f, args) else None
        if k is None:
            k = self._call_step(fe, ae, ke, reason, external=True)
            self._add_break(reason, _frame_loc(frame))
        else:
            _logs.log("graph_breaks", f"{reason} at {_frame_loc(frame)}: run before the graph, which it does not split")
        self.ext_depth += 1

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            if not _no_new_epoch(f, args, kwargs):
                self._new_epoch(k)
            res = _E.peek(fr, 0)
            if type(res) in (int, float) and self._follow_result(fr, k, res):
                return   # followed: guarded where the program uses it (flows.py)
            self._call_result(k, res, external=True)
            if fr in self.flow_frames:
                self._flow_tick(fr)   # flows of this frame: this step took their pending slot
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish

    def _call_result(self, k: int, res: Any, external: bool = False) -> None:
        name = f"b{k}"
        if external and self.np_track_result(k, res):
            return
        if isinstance(res, torch.Tensor):
            self._source(res, name, f"<result of break {k}>", argrooted=True)
        elif _is_opaque_value(res) or external and _is_context_manager(res):
            # e.g. a ContextVar token: passed on to other replayed calls, never inspected; a
            # library's context manager (its methods are replayed calls: special_calls.py)
            self.src[id(res)] = (name, f"<result of break {k}>", "opaque")
            self.keep.append(res)
            if not _is_opaque_value(res):
                self.guard(TypeIs(name, f"type(<result of break {k}>)", type(res)))
        else:
            try:
                self._source(res, name, f"<result of break {k}>", argrooted=True)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or str(e)


_IS_COMPILING = torch.compiler.is_compiling
_FUNCTION_APPLY = torch.autograd.function.Function.apply.__func__
_TENSOR_DEEPCOPY = (torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__)


def _deepcopy_of(x: Any) -> Any:
    """copy.deepcopy(x): the replayed step of a deep copy that makes a new autograd leaf."""
    return copy.deepcopy(x)


class _CallWithout:
    """Stands in for a callable on the value stack: calls f(x), whatever it is called with
    (`copier(memo)` in copy.deepcopy becomes `_deepcopy_of(t)`)."""
    __slots__ = ("f", "x")

    def __init__(self, f: Callable, x: Any) -> None:
        self.f, self.x = f, x

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.f(self.x)
_MAX_CALLEES = 256   # modules / functions noted per recording (SkipFrameVariant captures them)
_FRAME_READERS = (locals, vars, dir, globals, sys._getframe)


def _pure_ufunc_call(f: Any, args: list, kwargs: dict) -> bool:
    """A NumPy ufunc called without an output argument (`np.sqrt(d)`, `np.maximum(a, 0)`):
    a pure function of its arguments, which are guarded values (arrays are guarded by
    contents, tracked arrays were translated or materialized before), so its result is
    one too; ufunc methods (`np.add.at`, which writes) are not ufuncs."""
    np = sys.modules.get("numpy")
    if np is None or not isinstance(f, np.ufunc) or kwargs or len(args) > f.nin:
        return False
    # arrays and numbers only: a tensor argument is read by NumPy's C code (Tensor.__array__)
    return all(type(a) in (int, float, bool, complex) or isinstance(a, (np.generic, np.ndarray)) for a in args)

def _reads_only_its_operands(f: Any, args: list, kwargs: dict) -> bool:
    """A method of a built-in C type (a static type: `io.StringIO.write`, a file's write)
    called with numbers and strings only: C code that reads its receiver and arguments and
    runs no Python code, so it cannot read a list or deque of the program (which an
    uncapturable call otherwise might: all lazily guarded containers are guarded then)."""
    if type(f) is types.MethodDescriptorType and args and isinstance(args[0], f.__objclass__):
        so, args = args[0], args[1:]   # o.write(s) as CALL runs it: the descriptor, o, s
    elif type(f) is types.BuiltinMethodType:
        so = f.__self__
    else:
        return False
    if so is None or isinstance(so, (type, types.ModuleType)) or type(so).__flags__ & _HEAPTYPE:
        return False
    return all(type(a) in _SCALAR_ARGS for a in list(args) + list(kwargs.values()))


_HEAPTYPE = 1 << 9   # Py_TPFLAGS_HEAPTYPE: classes made by Python code (and 3.12's heap C types)
_SCALAR_ARGS = (str, bytes, int, float, bool, type(None))


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

# logger methods that only write when the logger is enabled for their level (None: the
# level is the first argument)
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
               "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
               "fatal": logging.CRITICAL, "log": None}

