"""Calls the tracer replays in a way of their own (`_SpecialCallMixin`):
* methods of the opaque values uncapturable calls return: the context manager of
  `with torch.random.fork_rng():` (its `__enter__` and `__exit__` save and restore the RNG),
  handles of library objects.  They run eagerly at their place in the replay, on the
  replay's own value (`b{k}`), never inside a graph nor untraced;
* `functools.lru_cache` functions called with constant arguments: read at replay;
* `torch.jit.script` functions: their Python function is called instead, traced (as Dynamo);
* compiled modules and functions (mlircap.compile, capture()): the module or function they
  wrap is called instead, traced (as Dynamo inlines an OptimizedModule's `_orig_mod`);
* `torch.vmap(func, ...)(*args)`: one node of the graph where func is pure tensor code
  (`_vmap_node`), else run between graphs (its ops see batched tensors no graph holds), as
  `vmap_impl(func, in_dims, ..., *args)` with `func` rebuilt at replay;
* dotted attribute lookups in untraced code (`m.get_submodule("enc.0")`, `get_parameter`,
  `get_buffer`, `operator.attrgetter("enc.0.weight")(m)`): read as the attribute loads they
  make, so what they return is a tracked (guarded) location;
* `copy.deepcopy(t)` of a tensor: tensor_copies.py;
* `log.debug(...)` and the other level methods of a standard library logger that is not
  enabled for that level: a guard that it is still disabled, no graph break."""
from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import operator
import types
from typing import Any

import torch

from .base import Unreplayable, _Canned, _Raised, inline_path
from .classify import _PRIM, _func_qualname, _scripted_python
from .external_calls import _traced
from .module_factories import _ModuleFactoryMixin
from .counters import _SymExpr
from .frame_hook import _E
from .functorch_calls import rebuilt_function, transform_call
from .grad_hooks import _torch_function, graph_arguments, guard_lookups, pure_mapped_function
from .guard_kinds import Equals
from .values import _DESCRIPTORS
from .reductions import plain_reducer
from .transform_nodes import _TransformNodeMixin
from .tensor_copies import _TENSOR_DEEPCOPY, _TensorCopyMixin  # noqa: F401 (_TENSOR_DEEPCOPY: calls.py's)


class _CannedWith:
    """Stands in for a context manager whose `__enter__` already ran (catch-up after a failed
    mid-replay guard): returns that call's result; `__exit__` is the real one's."""
    __slots__ = ("cm", "value")

    def __init__(self, cm: Any, value: Any) -> None:
        self.cm, self.value = cm, value

    def __enter__(self) -> Any:
        if type(self.value) is _Raised:   # (it raised: no __exit__, as eager's)
            raise self.value.exc
        return self.value

    def __exit__(self, *exc: Any) -> Any:
        return type(self.cm).__exit__(self.cm, *exc)


def _vmap_wrapped_code() -> types.CodeType | None:
    from torch._functorch import apis
    return next((c for c in apis.vmap.__code__.co_consts if isinstance(c, types.CodeType) and c.co_name == "wrapped"),
                None)


_VMAP_WRAPPED = _vmap_wrapped_code()


def _vmap_parts(f: Any) -> list | None:
    """For the function `torch.vmap(func, in_dims, out_dims, randomness, chunk_size=)`
    returns: [vmap_impl, func, in_dims, out_dims, randomness, chunk_size], what it calls."""
    if type(f) is not types.FunctionType or f.__code__ is not _VMAP_WRAPPED or _VMAP_WRAPPED is None:
        return None
    cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__ or ())))
    try:
        return [f.__globals__["vmap_impl"]] + [cells[n] for n in ("func", "in_dims", "out_dims", "randomness",
                                                                   "chunk_size")]
    except KeyError:
        return None


def _mapped(func: Any, depth: int = 0) -> tuple[Any, list, bool] | None:
    """For a function `torch.vmap` maps: (the function that computes, what its body looks up
    of torch's modules to guard, whether its body branches on shapes) where it is pure tensor
    code (grad_hooks.pure_mapped_function; forward branches and `shape` / `ndim` reads
    allowed, `_vmap_node` then checks at its run that no tensor data became a Python value),
    one of torch's own functions (`torch.vmap(torch.dot, in_dims=(0, None))`), or itself a
    vmapped function of those (nested vmap: its dims constants, randomness 'error'); None
    otherwise."""
    fn = func.__func__ if type(func) is types.MethodType else func
    vm = _vmap_parts(fn)
    if vm is not None:
        _impl, inner, in_dims, out_dims, randomness, chunk_size = vm
        if depth >= 4 or randomness != "error" or not _chunk_size(chunk_size) or not _constant_dims(in_dims) or \
                not _constant_dims(out_dims):
            return None
        return _mapped(inner, depth + 1)
    if type(fn) is types.BuiltinFunctionType:
        return (fn, [], False) if _torch_function(getattr(fn, "__name__", ""), fn) else None
    lookups = pure_mapped_function(fn)
    if lookups is not None:
        return fn, lookups, False
    lookups = pure_mapped_function(fn, shape_branches=True)
    return None if lookups is None else (fn, lookups, True)


_NO_RESULT = object()


def _chunk_size(c: object) -> bool:
    """vmap's chunk_size: None or a positive int (the chunks' results concatenated are the
    whole batch's)."""
    return c is None or type(c) is int and c > 0


def _constant_dims(d: object) -> bool:
    return d is None or type(d) is int or type(d) is tuple and all(_constant_dims(x) for x in d)


_DOTTED_GETTERS = (torch.nn.Module.get_submodule, torch.nn.Module.get_parameter, torch.nn.Module.get_buffer)


def _dotted_reads(f: Any, args: list) -> tuple[object, tuple] | None:
    """(object, dotted names) that `f(*args)` looks up attribute by attribute, for the
    getters above; None for any other call."""
    if type(f) is operator.attrgetter and len(args) == 1:
        names = f.__reduce__()[1]
        return (args[0], names) if all(type(n) is str for n in names) else None
    fn = getattr(f, "__func__", f)
    if any(fn is g for g in _DOTTED_GETTERS):
        so, rest = (f.__self__, args) if hasattr(f, "__self__") else (args[0] if args else None, args[1:])
        if rest and type(rest[0]) is str and isinstance(so, torch.nn.Module):
            return so, (rest[0],)
    return None


class _SpecialCallMixin(_TransformNodeMixin, _ModuleFactoryMixin, _TensorCopyMixin):
    """For `_Recorder` (through `_CallMixin`): methods of opaque results, `with` on them,
    cached functions, scripted and vmapped functions, deep copies of tensors, calls of
    disabled loggers."""

    def _redirect_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int) -> Any:
        """The callable the tracer handles for `f(*args, **kwargs)`: a scripted function's
        Python function (put in its place on the stack), f itself, or None where the call is
        handled here (a vmapped function: an uncapturable call)."""
        path = inline_path(f)
        if path is not None:
            # a compiled module or function (mlircap.compile, capture()) called from the
            # captured code: the module or function it wraps is called instead, traced into
            # this recording's graphs (as Dynamo inlines an OptimizedModule's original
            # module).  The attribute reads that reach it are guarded like the program's.
            for o, name in path:
                if id(o) in self.src:
                    self._fake_load_attr(o, name)
            f = path[-1][0].__dict__[path[-1][1]]
            _E.poke(frame, slot, f)
            return self._redirect_call(frame, f, args, kwargs, slot)
        orig = self._optimized_module_target(f)
        if orig is None:
            orig = self._compiled_function_target(f)
        if orig is not None:
            _E.poke(frame, slot, orig)
            return self._redirect_call(frame, orig, args, kwargs, slot)
        py = _scripted_python(f)
        if py is not None:
            _E.poke(frame, slot, py)
            return py
        red = plain_reducer(f, args, kwargs)
        if red is not None:
            _E.poke(frame, slot, red)   # (copy.deepcopy of a plain object: reductions.py)
            return red
        dotted = _dotted_reads(f, args)
        if dotted is not None and id(dotted[0]) in self.src:
            for path in dotted[1]:
                o = dotted[0]
                for part in (p for p in path.split(".") if p):
                    self._fake_load_attr(o, part)
                    o = getattr(o, part)
            return f   # (then runs as it is: its result is a location read)
        vm = _vmap_parts(f)
        if vm is not None and self._vmap_node(frame, vm, args, kwargs, slot):
            return None
        if vm is not None and self._transform_node(frame, f, args, kwargs, slot):
            return None   # (a vmapped closure of pure tensor code: one node, transform_nodes.py)
        if vm is not None:
            reason = f"torch.vmap of {_func_qualname(vm[1])}"
            self._external_call(frame, vm[0], [self._rebuilt(vm[1], reason)] + vm[2:] + list(args), kwargs,
                                reason, slot)
            return None
        if transform_call(f) and self._transform_node(frame, f, args, kwargs, slot):
            return None   # (of pure tensor code: one node of the graph, transform_nodes.py)
        if transform_call(f):   # torch.func.grad(g)(x), jacrev, vjp, ...: run between graphs (functorch_calls)
            reason = f"a torch.func transform ({_func_qualname(f)})"
            self._external_call(frame, self._rebuilt(f, reason), list(args), kwargs, reason, slot)
            return None
        return f

    def _rebuilt(self, f: Any, reason: str) -> Any:
        """f as the replay makes it again (functorch_calls.rebuilt_function), or f itself where
        it cannot: the call then runs unrecorded and the function eagerly."""
        try:
            return _SymExpr(rebuilt_function(self, f))
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{reason}: {e}"
            return f

    def _optimized_module_target(self, f: Any) -> torch.nn.Module | None:
        """A module compiled by torch.compile (an OptimizedModule, a submodule of the captured
        one) called from the captured code: the module it wraps, called instead and traced
        into this recording's graphs, as Dynamo inlines it.  Eager's wrapper call runs the
        wrapper's hooks, then the original module's call (its hooks and forward); so only
        where the wrapper has no hooks and no global module hook exists (those would run
        twice: guarded, with the module read through the wrapper's `_orig_mod`).  Before: the
        tracer followed Dynamo's frames, whose calls broke the graph each time (a frame with
        a loop over such modules ran eagerly).  A wrapper of torch.compiler.disable: None."""
        if _OPTIMIZED_MODULE is None or type(f) is not _OPTIMIZED_MODULE:
            return None
        s = self.src.get(id(f))
        orig = f.__dict__.get("_modules", {}).get("_orig_mod")
        if s is None or s[2] == "opaque" or not isinstance(orig, torch.nn.Module) or \
                type(f.__dict__.get("dynamo_ctx")).__name__ == "DisableContext":
            return None
        self._guard_module_call(f, s[1], forward=False)   # its hooks, the global ones: guarded
        mm = torch.nn.modules.module
        if f._forward_hooks or f._forward_pre_hooks or f._backward_hooks or f._backward_pre_hooks or \
                mm._has_any_global_hook():
            return None
        self._fake_load_attr(f, "_orig_mod")
        return orig

    def _compiled_function_target(self, f: Any) -> Any:
        """A function compiled by torch.compile (its wrapper) called from the captured code:
        the function it wraps, called instead and traced (as Dynamo inlines it).  Before: the
        tracer followed Dynamo's frames into the bytecode Dynamo made, and a replay read that
        code's `__compiled_fn_*` global from the program's module (NameError at the second
        call).  Its `_torchdynamo_orig_callable` read is guarded like the program's reads."""
        if type(f) is not types.FunctionType or f.__code__.co_filename != _DYNAMO_EVAL_FRAME:
            return None
        d = f.__dict__
        orig = d.get("_torchdynamo_orig_callable")
        s = self.src.get(id(f))
        if d.get("_is_torch_compile") is not True or orig is None or s is None or s[2] == "opaque":
            return None
        self._fake_load_attr(f, "_torchdynamo_orig_callable")
        return orig

    def _vmap_node(self, frame: types.FrameType, vm: list, args: list, kwargs: dict, slot: int) -> bool:
        """`torch.vmap(func, in_dims, out_dims, chunk_size=)(*args)` held by the graph as one
        node (as Dynamo's vmap op), where func's body is pure tensor code of its arguments
        (grad_hooks.pure_mapped_function; what it reads of torch's modules guarded), the
        tensor arguments are the graph's, the dims constants and randomness 'error'.  The
        call runs unrecorded (its ops see batched tensors); its result is the node's.
        A body that branches (`if h.shape[0] > 3:`) runs here once, watched: the node holds
        the branch it took only where no tensor's data became a Python value on the way
        (`_DATA_DEP` calls: `bool(m.sum() > 0)` of an argument mapped with in_dims None runs
        in eager and would fix one branch for any data); shapes are guarded, dims constant."""
        impl, func, in_dims, out_dims, randomness, chunk_size = vm
        if kwargs or self.np_env or randomness != "error" or not _chunk_size(chunk_size) or \
                not _constant_dims(in_dims) or not _constant_dims(out_dims):
            return False
        mapped = _mapped(func)
        if mapped is None:
            return False
        fn, lookups, branches = mapped
        if not graph_arguments(self, args, _PRIM):
            return False
        res = _NO_RESULT
        if branches:
            watch = self.ext_watch = []
            self.ext_depth += 1
            try:
                res = impl(func, in_dims, out_dims, randomness, chunk_size, *args)
            except Exception:  # noqa: BLE001  (the call runs as before, and raises there)
                return False
            finally:
                self.ext_depth -= 1
                self.ext_watch = None
            if watch:
                return False   # (a pure body: running it again there computes the same)
        if type(fn) is types.FunctionType:
            self.read(f"{self.const(fn)}.__code__", f"{fn.__qualname__}.__code__", fn.__code__)
        guard_lookups(self, fn, lookups)

        def vmapped(*a: Any) -> Any:
            return impl(func, in_dims, out_dims, randomness, chunk_size, *a)
        vmapped.__name__ = vmapped.__qualname__ = f"vmap_{fn.__name__}"

        def record(out: Any) -> None:
            try:
                self._record(vmapped, "vmap", tuple(args), {}, out)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or f"{e} (in torch.vmap of {fn.__qualname__})"
        if res is not _NO_RESULT:
            record(res)
            _E.poke(frame, slot, _Canned(res))
            return True
        self.ext_depth += 1

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            record(_E.peek(fr, 0))
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish
        return True

    def _opaque_method(self, f: Any, args: list) -> tuple[Any, list] | None:
        """A method called on an opaque value an uncapturable call returned (the context
        manager of `with torch.random.fork_rng():`, whose `__exit__` restores the RNG): an
        uncapturable call too, replayed in order on the replay's own value.  Returns the
        unbound callable and the arguments, receiver first (the replay calls it on `b{k}`);
        None for any other call and for methods the tracer follows (Python code of the user)."""
        so = getattr(f, "__self__", None)
        if type(so) is _CannedWith:
            so = so.cm
        if so is not None and not isinstance(so, type):
            if not self._is_opaque_result(so):
                return None
            fn = getattr(type(so), getattr(f, "__name__", ""), None)
            if fn is None or _traced(fn):
                return None
            return fn, [so] + list(args)
        if args and self._is_opaque_result(args[0]) and not _traced(f) and \
                isinstance(f, (types.FunctionType,) + _DESCRIPTORS):
            return f, list(args)   # o.m(...) through LOAD_METHOD: the unbound function, o first
        return None

    def _is_opaque_result(self, o: object) -> bool:
        s = self.src.get(id(o))
        return s is not None and s[2] == "opaque" and s[0].startswith("b")

    def op_before_with(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        """`with cm:` on an opaque value an uncapturable call returned: its `__enter__` is an
        uncapturable call (its `__exit__`, called by the with statement's exit, is one too:
        `_opaque_method`).  So is the `__enter__` of a C-implemented context manager the
        program reads (`with _lock:` on a global threading.Lock): its `__exit__` is a replayed
        call, and must not run at the replay without the `__enter__` it pairs with."""
        cm = _E.peek(frame, 0)
        enter = getattr(type(cm), "__enter__", None)
        if enter is None or _traced(enter):
            return
        if not self._is_opaque_result(cm) and (id(cm) not in self.src or type(enter) is types.FunctionType):
            return

        def canned(value: Any) -> None:   # __enter__ already ran in a replay that missed
            _E.poke(frame, 0, _CannedWith(cm, value))
        self._external_call(frame, enter, [cm], {}, f"call to uncapturable {_func_qualname(enter)}",
                            substitute=canned)

    def _class_factory_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict,
                            slot: int | None) -> bool:
        """`collections.namedtuple("Out", ["a", "b"])` / `dataclasses.make_dataclass(...)` inside
        the function, with constant arguments: run as it is, untraced (namedtuple reads its
        caller's frame for `__module__`, and traced, capture gave up on that), its class used
        by the recording as the class of this call.  Eager makes a new class per call: a
        replay may use the recorded one only where the class never leaves the call (its
        instances unpacked, their fields read); where it or an instance of it escapes (the
        return value, a write to external state) the recording is unreplayable (values.py)."""
        if slot is None or not any(f is g for g in _CLASS_FACTORIES):
            return False
        flat = list(args) + list(kwargs.values())
        if not all(_const_arg(x) for x in flat):
            return False
        self.ext_depth += 1

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            r = _E.peek(fr, 0)
            if isinstance(r, type):
                self.fresh_types.add(id(r))
                self.keep.append(r)
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish
        return True

    def _cached_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict, slot: int | None) -> bool:
        """A `functools.lru_cache` / `functools.cache` function called with constant arguments:
        its result may come from the cache (a tensor made by an earlier call, outside any
        graph), so it is not traced: the result is read at replay by calling the cached
        function again with the same arguments, and guarded like any value read."""
        w = f.__func__ if type(f) is types.MethodType else f
        if slot is None or type(w) is not _LRU_WRAPPER:
            return False
        consts = list(args) + list(kwargs.values()) + ([f.__self__] if w is not f else [])
        if not all(x is None or type(x) in _PRIM or isinstance(x, (torch.dtype, torch.device)) or
                   (type(x) is tuple and all(type(y) in _PRIM for y in x)) or
                   (id(x) in self.src and not isinstance(x, torch.Tensor)) for x in consts):
            return False   # tensors of the graph, objects made by the call: trace it
        fc = self.flow_call
        if fc is not None and fc[0] is frame and fc[1] == frame.f_lasti:
            # followed numbers among the arguments (flows.py) are guarded by value now, before
            # the guards on the result: those call the function, which a variant must only
            # do with the arguments eager calls it with (a miss runs its body: a variant for
            # another value would run it once more, and fill the cache eager leaves empty)
            self._flow_escape_keys(fc[3])
            self._flow_call_done(fc)
        try:
            fe = self.expr_of(f)
            ae = [self.expr_of(a) for a in args] + [f"{k}={self.expr_of(v)}" for k, v in kwargs.items()]
        except Unreplayable:
            return False
        expr = f"{fe}({', '.join(ae)})"
        pretty = f"{getattr(w, '__qualname__', 'cached function')}(...)"
        self.ext_depth += 1

        def finish(fr: types.FrameType) -> None:
            self.ext_depth -= 1
            try:
                self._source(_E.peek(fr, 0), expr, pretty, argrooted=True)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or f"result of {pretty}: {e}"
        finish.is_call = True  # type: ignore[attr-defined]
        self.pending[frame] = finish
        return True

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


try:
    import torch._dynamo.eval_frame as _dynamo_eval_frame
    _DYNAMO_EVAL_FRAME, _OPTIMIZED_MODULE = _dynamo_eval_frame.__file__, _dynamo_eval_frame.OptimizedModule
except Exception:  # pragma: no cover
    _DYNAMO_EVAL_FRAME = _OPTIMIZED_MODULE = None
_LRU_WRAPPER = type(functools.lru_cache(maxsize=1)(lambda: None))
_CLASS_FACTORIES = (collections.namedtuple, dataclasses.make_dataclass)


def _const_arg(x: object, depth: int = 0) -> bool:
    """x is a constant a class factory may take: numbers, strings, None, classes (field
    types, bases), and lists, tuples and dicts of them (field names, defaults)."""
    if x is None or type(x) in _PRIM or isinstance(x, type):
        return True
    if depth < 3 and type(x) in (list, tuple):
        return all(_const_arg(y, depth + 1) for y in x)
    if depth < 3 and type(x) is dict:
        return all(_const_arg(k, depth + 1) and _const_arg(v, depth + 1) for k, v in x.items())
    return False


# logger methods that only write when the logger is enabled for their level (None: the
# level is the first argument)
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
               "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
               "fatal": logging.CRITICAL, "log": None}
