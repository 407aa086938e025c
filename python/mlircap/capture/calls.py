"""Opcode handlers for calls (`_CallMixin`): CALL / CALL_FUNCTION_EX and what a call is
(`classify._call_kind`): safe, a reflective read (getattr, vars), a write (setattr, a mutating
method), a ContextVar access, a call handled in a way of its own (special_calls.py: a
disabled logger's call, a tensor's deep copy, a vmapped function, ...), or uncapturable: a
graph break whose replay step runs the call eagerly (external_calls.py)."""
from __future__ import annotations

import contextvars
import copy
import functools
import sys
import types
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .base import Unreplayable, _Canned, _MISSING
from .guard_kinds import Is
from .deferred import _BREAK_NAME as _BREAK_REF
from .frame_hook import _E, _NULL
from .classify import (
    _MODULE_WALKERS, _WRITE_ONLY, _call_kind, _classify, _context_wrapper, _frame_namespace_call, _func_qualname,
    _reads_clock,
)
from .state_writers import _node_hook_call
from .optim_calls import _averaged_model_update, _grad_scaler_call, _idempotent_call, _lr_scheduler_call, _optimizer_step
from .external_calls import _SCALAR_ARGS
from .give_ups import compiling_answer, learned_callee_sources, learned_break, pass_through_codes
from .flush_writes import flush_before_call, pending_flows
from .grad_clips import clip_after_break
from .iterators import stateful_next
from .special_calls import _TENSOR_DEEPCOPY, _SpecialCallMixin
from .flows import _FlowMixin
from .reads import _ReadMixin
from .call_guards import _CallGuardMixin
from .fast_paths import (_FAST_PATH_FILES, _TRANSFORMER_FILE, _slow_path_same_as_fast,
                         _transformer_fast_path_possible)


class _CallMixin(_ReadMixin, _SpecialCallMixin, _FlowMixin, _CallGuardMixin):
    """For `_Recorder` (through `_TracerMixin`): the CALL handlers and the kinds of calls;
    the uncapturable call itself (`_external_call`) is external_calls.py's."""

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
        if argc == 1 and not nkw:
            self._flow_float_call(frame, f, args)
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
        if _namedtuple_class(f):
            # State(*(s.detach() for s in state)): a namedtuple's generated __new__ is traced
            # code too; made here, untraced, the generator's tensors were of unknown origin
            # and the whole function ran eagerly
            return True
        if type(fn) in (types.FunctionType, types.BuiltinFunctionType) and f is not _IS_COMPILING and \
                (getattr(fn, "__module__", None) or "").startswith("torch") and _call_kind(f) == "safe" and \
                not (self.lazy or self.lazy_objs) and f not in (torch.from_numpy, torch.as_tensor, torch.tensor):
            return True   # a torch function (torch.stack, torch.cat, ...): the mode records it
        return False

    def _constant_query(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int) -> bool:
        """A C query whose answer a guard holds, answered here as a constant (no break):
        `torch._C._get_tracing_state()` outside torch.jit.trace (None: nn.utils.parametrize
        asks it of every parametrized read under `with parametrize.cached():`), and `id(obj)`
        of a module, class or function reached from the function's inputs or globals (its
        identity guarded: parametrize's cache key `(id(module), name)`; a tensor or container,
        often a new one each call, keeps its break)."""
        if kwargs:
            return False
        if f is torch._C._get_tracing_state and not args:
            if f() is not None:
                return False
            self.guard(Is(f"{self.const(f)}()", "torch._C._get_tracing_state()", None, "None"))
        elif f is id and len(args) == 1:
            s = self.src.get(id(args[0]))
            if s is None or s[2] == "opaque" or _BREAK_REF.search(s[0]) or \
                    not isinstance(args[0], (torch.nn.Module, type, types.FunctionType, types.ModuleType)):
                return False
            self.guard(Is(s[0], s[1], args[0], "the same object (id)"))
        else:
            return False
        _E.poke(frame, slot, _Canned(f(*args)))
        return True

    def _cv_changed(self) -> bool:
        """A ContextVar the function set that holds another value than at the call's start: a
        replay sets it at its end (side_effects.writes), so a callee run eagerly before that
        would read the old value (a learned callee reading it gave eager's x * 1 for x * 2)."""
        return any(cv.get(_MISSING) is not old for cv, old in self.cv_snap.items())

    def _on_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int | None = None) -> None:
        if slot is not None and f is _IS_COMPILING:
            # A recording is a compilation: code the tracer follows (the user's, and
            # libraries like transformers that keep data-dependent checks out of compiled
            # graphs) asking torch.compiler.is_compiling() is answered True, as under
            # torch.compile.  torch's own (untraced) code keeps torch's answer: there it
            # selects Dynamo-only machinery. nn.TransformerEncoder's fast-path check is answered
            # as eager answers it (False) where eager can take the fast path (no grad needed):
            # there True meant the slow path, whose padded positions are not the fast path's
            # zeros (see _HAS_TORCH_FUNCTION below)
            _E.poke(frame, slot, _Canned((frame.f_code.co_filename != _TRANSFORMER_FILE or
                                          not _transformer_fast_path_possible(frame)) and compiling_answer(self, frame)))
            return
        if slot is not None and f is _HAS_TORCH_FUNCTION and frame.f_code.co_filename in _FAST_PATH_FILES and \
                len(args) == 1 and not kwargs and isinstance(args[0], (tuple, list)):
            # nn.TransformerEncoder / TransformerEncoderLayer / MultiheadAttention pick their
            # fast path (a nested tensor from the padding mask: padded positions come out 0;
            # fused kernels: a fully padded row is not NaN) on has_torch_function(tensor_args),
            # which the recording's own TorchFunctionMode made True: the recording took the slow
            # path where eager (under no_grad) takes the fast one. Answered as eager answers it
            # (an argument of a type overriding it)
            _E.poke(frame, slot, _Canned(any(_overrides_torch_function(t) for t in args[0]) or
                                         _slow_path_same_as_fast(frame)))
            return
        if slot is not None and (f := self._redirect_call(frame, f, args, kwargs, slot)) is None:
            return   # (a scripted function's Python function called instead; a vmapped one replayed)
        if clip_after_break(self, frame, f, args, kwargs, slot):
            return   # (clip_grad_norm_ right after a break: run with it, grad_clips.py)
        if (f is isinstance or f is issubclass) and len(args) == 2 and not kwargs:
            self._guard_class_check(f, args[0], args[1])
        elif type(f) is types.FunctionType and f.__code__ is _SINGLEDISPATCH_CODE and args:
            # a functools.singledispatch function: which implementation runs depends on its
            # registry (conv.register(T, impl) after compile), which its untraced wrapper
            # reads: guarded as the implementation it dispatches x's type to
            t = args[0].__class__
            impl = f.dispatch(t)
            self.guard(Is(f"{self.const(f)}.dispatch({self.const(t)})", f"{_func_qualname(f)}.dispatch("
                          f"{getattr(t, '__qualname__', t)})", impl, _func_qualname(impl)))
        elif f is torch.get_num_threads and not args and not kwargs:
            # the thread count read: guarded by value (the global state guard lets another count
            # through where nothing the variant compiled depends on it: guards._GlobalState)
            from .guard_kinds import Equals
            self.guard(Equals(f"{self.const(f)}()", "torch.get_num_threads()", f()))
        elif slot is not None and self._constant_query(frame, f, args, kwargs, slot):
            return
        if self.np_tensor_of_source(frame, f, args, kwargs, slot) or self._cached_call(frame, f, args, kwargs, slot) \
                or self._class_factory_call(frame, f, args, kwargs, slot) \
                or self._module_factory_call(frame, f, args, kwargs, slot):
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
        if _node_hook_call(f, args):
            raise Unreplayable("a hook registered on an autograd node (grad_fn.register_hook / register_prehook): "
                               "a replay's tensors come from compiled graphs, whose autograd nodes are others")
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
            if slot is not None and self._function_node(frame, cls, args if f is not _FUNCTION_APPLY else args[1:],
                                                        kwargs):
                return   # (grad_hooks.py: a pure Function, one node of the graph)
            self._external_call(frame, f, args, kwargs, f"a custom autograd.Function "
                                f"({getattr(cls, '__qualname__', '?')}.apply) on a tensor that requires grad", slot)
            return
        if isinstance(f, torch.nn.Module) and _full_backward_hooks_apply(f, args, kwargs):
            # m(x) with full backward hooks (register_full_backward_hook / _pre_hook): nn.Module's
            # __call__ wraps its inputs and outputs in a BackwardHookFunction (a custom
            # autograd.Function run in untraced code, whose backward calls the hooks), which no
            # graph can hold: the call runs between graphs as it is (the hooks fire in backward)
            self._external_call(frame, f, args, kwargs, f"{type(f).__name__} with full backward hooks", slot)
            return
        kind = _call_kind(f)
        if kind == "external" and _frame_namespace_call(f, args, kwargs):
            # (`eval("STORE.append(1)")` replayed raised NameError from the second call)
            self.unreplayable = self.unreplayable or \
                f"{f.__name__}() reads the calling frame's namespaces, which a replay does not run in"
        learned = learned_break(getattr(self.captured, "break_codes", None), f)
        if learned is not None:
            # a callee an earlier recording of this function gave up in: run eagerly between
            # graphs (give_ups.py); what the function wrote before it, the replay writes at its
            # end, after the callee read it
            kind = "external"
            learned_callee_sources(self, f, args)   # (a closure the call made, a comprehension's `.0`)
            if (self.dirty.pending or pending_flows(self) or self._cv_changed()) and not self.unreplayable and \
                    not flush_before_call(self, _callee_name(f)):
                # (the callers up to this frame would read those writes so too: none is learned)
                self.unreplayable = f"the function wrote state before a call into {_callee_name(f)}, " \
                                    f"which it runs eagerly (a replay writes at its end)"
                self.give_up_callee = None
                self.pass_codes = pass_through_codes(self.dirty, self.root_frame)
        recv = self._opaque_method(f, args)
        if recv is not None or kind == "safe" and (stateful_next(f, args, self.src) or _optimizer_step(f, args) or
                                                   _lr_scheduler_call(f, args) or _averaged_model_update(f, args) or
                                                   _grad_scaler_call(f, args)):
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
            if f.__name__ == "to":
                # (nn.Module.to: _apply sets each converted tensor as .data, or makes new
                # parameters / swaps them where torch.__future__'s flags say so)
                for flag in (torch.__future__.get_overwrite_module_params_on_conversion,
                             torch.__future__.get_swap_module_params_on_conversion):
                    self.guard(Is(f"{self.const(flag)}()", f"torch.__future__.{flag.__name__}()", flag(),
                                  repr(flag())))
        elif _averaged_model_update(f, args):
            # ema.update_parameters(model): both trees walked in torch code (parameters()), sourced
            # now as for parameters() (the averaged module's are read by later graphs)
            for m in (so, *args[1 if getattr(f, "__self__", None) is None else 0:]):
                if isinstance(m, torch.nn.Module) and id(m) in self.src:
                    self._source_module_tree(m)
        elif isinstance(so, torch.nn.Module) and getattr(f, "__name__", "") == "state_dict" and \
                id(so) in self.src and not args[1 if getattr(f, "__self__", None) is None else 0:] and \
                set(kwargs) <= {"keep_vars"}:
            self._state_dict_tree(so)
        elif kind == "safe" and type(f) is types.FunctionType and _classify(f.__code__) == "opaque" and \
                not isinstance(so, torch.nn.Module) and (mods := _module_args(args, kwargs)):
            # a library function handed modules (torch.func.stack_module_state(models)) walks
            # their parameters and buffers in code we do not trace: source their subtrees now,
            # as for parameters(), so the tensors its recorded ops read are known and guarded
            # (not nn.Module's own methods, m.state_dict() with its hooks: handled above or not)
            for m in mods:
                if id(m) in self.src:
                    self._source_module_tree(m)
        if self.lazy and slot is not None and self._flow_dict_call(frame, f, args, kwargs):
            return   # `d.get(k)` / `d.setdefault(k, v)` of a key the dict has: an item read (flow_items.py)
        own = kind == "external" and self._optimizer_reads(f, args, kwargs)
        if self.lazy or self.lazy_objs:
            ff = getattr(f, "__func__", f)
            # (torch's wrapper of a `@torch.no_grad()` method hands its arguments on to the traced
            # method: its object's counters and floats are read lazily there, not all guarded now)
            traced = type(ff) is types.FunctionType and (_classify(ff.__code__) == "user" or _context_wrapper(ff))
            if not traced:
                if kind == "mutator" and getattr(f, "__name__", "") in _WRITE_ONLY:
                    self.touch_deep(list(args[1:] if getattr(f, "__self__", None) is None else args)
                                    + list(kwargs.values()))
                elif kind == "external" and _reads_only_its_operands(f, args, kwargs):
                    pass   # nothing it reads can be a container of the program's
                elif own:
                    pass   # an optimizer's step: it reads the optimizer's own state alone (guarded there)
                elif kind == "external":
                    for o in list(self.lazy.values()):
                        self.touch(o[0])
                elif kind == "getattr" and len(args) >= 2 and type(args[1]) is str and \
                        isinstance(args[0], torch.nn.Module):
                    # getattr(self, "head", None) / hasattr(self, "adapter"): reads that attribute
                    # (guarded by _fake_load_attr below: a getter is traced, Module.__getattr__
                    # reads its parameters, buffers and submodules), not the containers the
                    # module holds (a stats dict), which stay lazily guarded
                    self.touch_deep(list(args[2:]) + list(kwargs.values()))
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
                if isinstance(args[0], torch.Tensor) and type(args[1]) is str:
                    self._tensor_dict_store(args[0], args[1])   # (side_effects.py)
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
                self.dirty.add((id(so), "**"))   # (by a method: any key, flow_roots._flow_item)
            if self.flow_stores and not (type(so) is list and getattr(f, "__name__", "") == "append"):
                # (an append leaves the items stored before it where they are: flow_writes)
                self._flow_items_written(so, frame)
            return
        if self._disabled_log_call(f, args, kwargs):
            self._flow_unused(frame)
            return
        # uncapturable call: replay it eagerly
        reason = f"call to uncapturable {_func_qualname(f)}" if learned is None else \
            f"call to {_callee_name(f)}, which capture gave up in ({learned})"
        if recv is not None:
            f, args = recv
        self._external_call(frame, f, args, kwargs, reason, slot, idempotent=_idempotent_call(f, args))


_IS_COMPILING = torch.compiler.is_compiling
_HAS_TORCH_FUNCTION = torch._C._has_torch_function


def _callee_name(f: Any) -> str:
    return f"{type(f).__qualname__}.forward" if isinstance(f, torch.nn.Module) else _func_qualname(f)



def _overrides_torch_function(t: Any) -> bool:
    """t is a tensor of a type with a __torch_function__ of its own (torch's
    has_torch_function without modes: Tensor and Parameter have none)."""
    if not isinstance(t, torch.Tensor):
        return False
    tf = getattr(type(t).__torch_function__, "__func__", type(t).__torch_function__)
    return tf is not torch.Tensor.__torch_function__.__func__ and tf is not torch._C._disabled_torch_function_impl
_SINGLEDISPATCH_CODE = functools.singledispatch(lambda x: x).__code__

_FUNCTION_APPLY = torch.autograd.function.Function.apply.__func__
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
    if _reads_clock(f, args, kwargs):   # time.perf_counter(): reads the clock only
        return True
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


def _namedtuple_class(f: Any) -> bool:
    """A class made by collections.namedtuple / typing.NamedTuple whose construction is its
    generated `__new__` (traced code: _classify says "user"), nothing overridden around it."""
    if not (isinstance(f, type) and issubclass(f, tuple) and hasattr(f, "_fields") and type(f) is type):
        return False
    new = f.__dict__.get("__new__") or next((c.__dict__["__new__"] for c in f.__mro__[1:]
                                             if "__new__" in c.__dict__ and c is not tuple), None)
    new = getattr(new, "__func__", new)
    return type(new) is types.FunctionType and _classify(new.__code__) == "user" and \
        f.__init__ is tuple.__init__ and new.__code__.co_filename.startswith("<")


def _module_args(args: list, kwargs: dict) -> list:
    """The nn.Modules among a call's arguments, directly or as items of a list / tuple."""
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.nn.Module):
            out.append(a)
        elif type(a) in (list, tuple) and len(a) <= 256:
            out.extend(x for x in a if isinstance(x, torch.nn.Module))
    return out


def _full_backward_hooks_apply(mod: torch.nn.Module, args: list, kwargs: dict) -> bool:
    """Calling mod runs full backward hooks' BackwardHookFunction on its inputs or outputs:
    hooks registered (on it or globally), grad mode on, and a tensor that requires grad among its
    inputs or parameters."""
    mm = torch.nn.modules.module
    full = mod._backward_pre_hooks or mm._global_backward_pre_hooks or \
        (mod._backward_hooks and mod._is_full_backward_hook) or \
        (mm._global_backward_hooks and mm._global_is_full_backward_hook)
    if not full or not torch.is_grad_enabled():
        return False   # (old-style register_backward_hook alone: no BackwardHookFunction)
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]) or \
        any(p.requires_grad for p in mod.parameters())
