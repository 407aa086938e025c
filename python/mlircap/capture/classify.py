"""Classification of code and callables: which code objects are traced (`_classify`),
what a call does to external state (`_call_kind`), and the value categories used
throughout (immutable constants, safe builtins, mutators, ...)."""
from __future__ import annotations

import array
import collections
import contextvars
import ctypes
import inspect
import io
import os
import random
import re
import time
import types
import weakref
from typing import Any

import torch


# ----------------------------------------------------------------------------------
# code classification
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_TORCH_NN_MODULES = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
# Reparametrizations: Python code that computes a module's weight from other parameters at
# every forward (a `parametrize` property and its ParametrizationList / _WeightNorm /
# _SpectralNorm / _Orthogonal modules, the forward pre-hooks of the old `weight_norm` /
# `spectral_norm` / `prune`).  Traced like nn/modules: the parameters they read are then
# reached through tracked attribute loads, and their branches (training, caching) guarded.
_TORCH_REPARAM = tuple(os.path.join(_TORCH_DIR, "nn", "utils", f) for f in (
    "parametrize.py", "parametrizations.py", "weight_norm.py", "spectral_norm.py", "prune.py"))
_OWN_DIR = os.path.dirname(__file__) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
_OPAQUE_STDLIB = ("typing.py", "abc.py", "warnings.py", "threading.py", "weakref.py",
                  "_weakrefset.py", "inspect.py", "enum.py", "functools.py", "contextlib.py",
                  "linecache.py", "traceback.py", "logging/", "importlib/", "re/", "sre_",
                  "dis.py", "copyreg.py", "codecs.py", "ctypes/")
_code_kind = {}
# nn.Module.train / eval (module.py, otherwise untraced): traced, so that the `training` flags
# they write are writes of the call (module attributes the replay stores) and the forward's
# reads of them after it are that value, not guarded as the state at the call's start: a step
# that calls model.train() then model.eval() (a validation pass) recompiled on every call,
# each call starting in eval mode against a guard `dropout.training is True`
for _m in (torch.nn.Module.train, torch.nn.Module.eval):
    _code_kind[_m.__code__] = "user"
# LRScheduler.get_last_lr (`return self._last_lr`): traced, so that `sched.get_last_lr()[0]` after the
# scheduler's step (a replayed call, _lr_scheduler_call) is a float item of an attribute's list,
# followed (flow_roots._flow_item), not guarded by value: a new variant every call of a schedule
_code_kind[torch.optim.lr_scheduler.LRScheduler.get_last_lr.__code__] = "user"


def _classify(code: types.CodeType) -> str:
    """"user" (traced) or "opaque" (runs untraced: torch internals, this package, parts
    of the standard library), cached per code object."""
    k = _code_kind.get(code)
    if k is None:
        fn = code.co_filename
        if fn.startswith(_OWN_DIR) or fn.startswith("<frozen"):
            k = "opaque"
        elif fn.startswith(_TORCH_DIR):
            base = os.path.basename(fn)
            if fn.startswith(_TORCH_NN_MODULES) and base not in ("module.py", "container.py", "_functions.py") or \
                    fn in _TORCH_REPARAM:
                k = "user"
            else:
                k = "opaque"
        elif fn.startswith(_STDLIB_DIR):
            rel = fn[len(_STDLIB_DIR):]
            k = "opaque" if (rel.startswith(_OPAQUE_STDLIB) or "site-packages" in rel) else "user"
            if "site-packages" in rel:
                k = "user"
        elif os.path.basename(fn) == "typing_extensions.py":
            # typing's backport (site-packages), patched into typing: untraced like typing.py
            # (its _getframe made capture give up on a function evaluating Optional["T"],
            # as torch.autograd.profiler.record_function's __init__ does)
            k = "opaque"
        else:
            k = "user"
        _code_kind[code] = k
    return k


_CONTEXT_WRAPPERS = tuple(os.path.join(_TORCH_DIR, "utils", f) for f in ("_contextlib.py",)) + \
    (os.path.join(_TORCH_DIR, "amp", "autocast_mode.py"),)


def _context_wrapper(fn: Any) -> bool:
    """fn is torch's wrapper of a function decorated with a context manager
    (`@torch.no_grad()`, `@torch.enable_grad()`, `@torch.autocast(...)`): it enters the
    context and calls the traced function it wraps with its arguments, reading nothing of
    them itself."""
    w = getattr(fn, "__wrapped__", None)
    return type(fn) is types.FunctionType and fn.__code__.co_filename in _CONTEXT_WRAPPERS and \
        type(w) is types.FunctionType and _classify(w.__code__) == "user"


def _context_wrapper_frame(fr: types.FrameType) -> bool:
    """fr runs such a wrapper (`with ctx: return func(*args, **kwargs)`): what func returns,
    the wrapper returns to its own caller unchanged."""
    code = fr.f_code
    return code.co_filename in _CONTEXT_WRAPPERS and code.co_name in ("decorate_context", "decorate_autocast")


# ----------------------------------------------------------------------------------
# value categories
_PRIM = (bool, int, float, str, bytes, complex, type(None))
_IMMUTABLE_CONST = (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format,
                    slice, range, type(Ellipsis), type(NotImplemented), frozenset)
_SAFE_BUILTIN_NAMES = {
    "len", "isinstance", "issubclass", "range", "enumerate", "zip", "map", "filter", "min",
    "max", "sum", "abs", "round", "any", "all", "sorted", "reversed", "list", "tuple", "dict",
    "set", "frozenset", "int", "float", "bool", "str", "format", "getattr", "hasattr", "iter",
    "next", "divmod", "pow", "callable", "type", "super", "slice", "chr", "ord", "repr",
    "object", "setattr", "delattr", "vars", "bytes", "complex", "property",
    "staticmethod", "classmethod", "ascii", "bin", "hex", "oct", "StopIteration",
}
_SAFE_SELF_TYPES = (str, list, dict, tuple, int, float, set, frozenset, bytes, bool,
                    collections.OrderedDict, collections.deque, type({}.keys()), type({}.values()), type({}.items()),
                    re.Pattern, re.Match)   # (a compiled regex's match / findall / split: pure text functions)
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
             "add", "discard", "sort", "reverse", "popitem", "__setitem__", "__delitem__",
             "difference_update", "intersection_update", "symmetric_difference_update",
             "move_to_end", "__iadd__", "appendleft", "extendleft", "popleft", "rotate"}
# methods of BaseException that only set the exception object's own state
_EXC_METHODS = frozenset({"__init__", "__new__", "with_traceback", "add_note"})
_SAFE_MODULES = ("_abc", "abc", "math", "operator", "itertools", "functools", "_operator", "_functools",
                 "collections", "_collections", "dataclasses", "copy", "numbers", "cmath",
                 "string")

# Tensor functions whose non-tensor result only depends on guarded metadata.
_META_OK = {
    "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
    "is_floating_point", "is_complex", "element_size", "__len__", "shape", "dtype", "device",
    "ndim", "requires_grad", "is_cuda", "is_leaf", "layout", "is_sparse", "is_quantized",
    "is_meta", "is_grad_enabled", "is_tensor", "is_storage", "get_default_dtype",
    "is_inference_mode_enabled", "names", "is_mkldnn", "_is_view", "is_nested", "is_cpu",
    "itemsize", "nbytes", "is_autocast_enabled", "is_signed", "output_nr", "retains_grad",
    "_version", "__torch_function__", "is_conj", "is_neg",
    # (nn.Module.to's: its arguments parsed, whether a converted tensor can be set as .data)
    "_parse_to", "_has_compatible_shallow_copy_type",
}
def _fname(func: object) -> str:
    n = getattr(func, "__name__", None)
    if n == "__get__" or n == "__set__":
        n = getattr(getattr(func, "__self__", None), "__name__", n)
    return n or repr(func)


def _func_qualname(func: object) -> str:
    n = getattr(func, "__qualname__", None) or _fname(func)
    if n == "__get__":
        n = getattr(getattr(func, "__self__", None), "__name__", n)
    return n


_MODULE_WALKERS = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                   "modules", "named_modules", "to"}
_WRITE_ONLY = {"append", "extend", "insert", "add", "update", "clear", "__setitem__", "__delitem__",
               "discard", "sort", "reverse", "__iadd__"}


_ID_HASHED = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)
_GLOBAL_STATE_FUNCS = {torch._C._set_grad_enabled, torch.set_grad_enabled, torch.is_grad_enabled}
_DATA_DEP = {"item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__",
             "__repr__", "__str__", "__format__", "__array__", "data_ptr", "equal", "allclose",
             "__contains__", "__complex__", "is_nonzero", "__hash__"}


_EXTERNAL_PY_MODULES = ("logging", "warnings", "torch.random", "torch.cuda.random", "random", "time", "os",
                        "subprocess", "socket", "pdb", "builtins")
_EXTERNAL_PY_NAMES = {"manual_seed", "seed", "set_rng_state", "set_default_dtype", "set_default_device",
                      "set_printoptions", "use_deterministic_algorithms", "set_num_threads",
                      # torch.utils.swap_tensors: swaps two tensors' contents in C, unseen by the
                      # recording's TorchFunctionMode (later graphs read the tensors unswapped)
                      "swap_tensors", "_swap_tensor_impl"}


# Library functions (code objects) seen writing the RNG state or the default dtype from
# untraced code (torch.testing's wrapper_set_seed: manual_seed, the op, set_rng_state): a
# call of one from traced code is uncapturable from then on, replayed whole between graphs.
_LEARNED_WRITERS: set[types.CodeType] = set()


# Names whose call writes torch's RNG state: torch.manual_seed, torch.set_rng_state,
# torch.random.fork_rng (and a Generator's manual_seed).
_RNG_WRITER_NAMES = frozenset({"manual_seed", "set_rng_state", "fork_rng"})


def _names_rng_writer(code: types.CodeType) -> bool:
    return not _RNG_WRITER_NAMES.isdisjoint(code.co_names)


def _rng_state_manager(fn: types.FunctionType) -> bool:
    """fn is a `contextlib.contextmanager` of library code that saves and restores torch's
    RNG state around its body (torch.testing's freeze_rng_state): called from traced code it
    is an uncapturable call, and `with` on its result replays `__enter__` / `__exit__` between
    graphs, as for `torch.random.fork_rng()`."""
    w = getattr(fn, "__wrapped__", None)
    return type(w) is types.FunctionType and bool(w.__code__.co_flags & inspect.CO_GENERATOR) and \
        _classify(w.__code__) == "opaque" and _names_rng_writer(w.__code__)


_reseeds: dict[types.CodeType, bool] = {}


def _reseeding_helper(fn: types.FunctionType, depth: int = 1) -> bool:
    """fn is library code (untraced) that writes torch's RNG state itself, or through a global
    function it calls (`depth` levels): torch.testing's `wrapper_set_seed(op, ...)`
    (freeze_rng_state, manual_seed(42), the random op) and OpInfo's lambdas around it.
    Run untraced, its write would make the recording unreplayable and the whole helper would
    run eagerly: it is traced instead, so its reseeding and restoring calls are replayed
    between graphs and the random op it runs is compiled, drawing from the generator they
    set, as in eager."""
    code = fn.__code__
    if _names_rng_writer(code):
        return True
    if depth <= 0:
        return False
    r = _reseeds.get(code)
    if r is None:
        g = fn.__globals__
        r = _reseeds[code] = any(
            type(h) is types.FunctionType and h is not fn and _classify(h.__code__) == "opaque" and
            h.__module__ not in _EXTERNAL_PY_MODULES and _reseeding_helper(h, depth - 1)
            for h in (g.get(n) for n in code.co_names))
    return r


def _scripted_python(f: object) -> types.FunctionType | None:
    """The Python function a `torch.jit.script` function was made from (torch keeps it as
    `_torchdynamo_inline`, and Dynamo traces it instead of the TorchScript call, whose ops
    no torch function mode sees): the tracer calls and traces it the same way."""
    if isinstance(f, torch.jit.ScriptFunction):
        py = getattr(f, "_torchdynamo_inline", None)
        if type(py) is types.FunctionType:
            return py
    return None


def _ffi(f: object) -> bool:
    """f is a ctypes callable: a foreign library (`ctypes.CDLL`), one of its functions, a C
    data type or a helper of the ctypes module.  Its code is untraced (_OPAQUE_STDLIB: library
    code reaching it, e.g. torch.cuda's NVML device count, runs as it is; traced, CDLL's
    __init__ defines a class whose body closes over the library object, which no replay can
    rebuild, and capture gave up on the whole frame); called from traced code it is an
    uncapturable call, replayed between graphs."""
    for o in (f, type(f), getattr(f, "__self__", None)):
        mod = getattr(o, "__module__", None)
        if type(mod) is str and (mod == "ctypes" or mod.startswith(("ctypes.", "_ctypes"))):
            return True
    return False


# Mutable C buffers whose items C code reads and writes (subscripts, len, `.value`), out of
# the tracer's sight: guarded by contents (sources.py), a write into one unreplayable
# (side_effects.py), as for NumPy arrays.
_C_BUFFERS = (array.array, bytearray, ctypes.Array, ctypes.Structure, ctypes.Union, ctypes._SimpleCData)


def _ffi_object(v: object) -> bool:
    """v is an instance of a ctypes type (a library, a foreign function, C data), not a
    class or a function of the ctypes module."""
    mod = getattr(type(v), "__module__", None)
    return type(mod) is str and (mod == "ctypes" or mod.startswith(("ctypes.", "_ctypes"))) and \
        not isinstance(v, type)


# Tensor methods that write a tensor without calling __torch_function__ (the recording's
# TorchFunctionMode never sees them: `torch.empty(0).set_(x)` was left out of the graph, whose
# replay then read the tensor as it was before, empty): a step between graphs, run eagerly.
# So are those calling a Python function on each element (`t.apply_(fn)`, `map_`, `map2_`):
# they write the tensor without bumping its version (recorded into a graph, the write went
# unseen: no rollback by a replay that missed after it, which wrote it twice) and run the
# program's Python code, which may read or write any state
_UNDISPATCHED_TENSOR_METHODS = frozenset({"set_", "apply_", "map_", "map2_"})


def _call_kind(f: object) -> str:
    """What calling f means for the recording: safe | external | mutator | getattr | vars |
    setattr | ctxvar | weakref."""
    t = type(f)
    if t is weakref.ref:
        return "weakref"
    if _ffi(f):
        return "external"
    if t is types.MethodType and type(f.__func__) is not types.FunctionType:
        # a bound method of a compiled function (Cython: `rs.uniform` of a NumPy RandomState,
        # reached as a bound method through `rs.uniform(*b)` or `draw = rs.uniform`): no
        # Python code to trace; what its unbound form is (the LOAD_METHOD call's callable)
        return _call_kind(f.__func__)
    if t is types.FunctionType or t is types.MethodType:
        fn = f.__func__ if t is types.MethodType else f
        code = getattr(fn, "__code__", None)
        if code is not None and _classify(code) == "opaque":
            mod = getattr(fn, "__module__", "") or ""
            if fn.__name__ in _EXTERNAL_PY_NAMES or mod in _EXTERNAL_PY_MODULES or \
                    mod.split(".")[0] in ("logging", "warnings") or code in _LEARNED_WRITERS:
                return "external"  # library code with global side effects: replay it
            if _rng_state_manager(fn):
                return "external"  # `with freeze_rng_state():` as `with fork_rng():`
            if _reseeding_helper(fn):
                _code_kind[code] = "user"   # traced from now on (see _reseeding_helper)
        return "safe"  # Python code: traced (or side-effect-free library code)
    if isinstance(f, type):
        if issubclass(f, torch.Generator):
            return "external"   # a new generator: an opaque value of the replay (its seed calls replayed)
        if f.__module__ == "builtins" and f.__name__ in _SAFE_BUILTIN_NAMES or \
                issubclass(f, (list, dict, tuple, set, int, float, str, BaseException)):
            return "safe"
        if (getattr(f, "__module__", None) or "").split(".")[0] in ("logging", "warnings"):
            # warnings.catch_warnings(): a library context manager holding the process's warning
            # filters (compiled patterns) it saves on entry; made by a replayed call, its object
            # is a handle whose __enter__ / __exit__ are replayed (the recording could not make
            # the object again from its contents: capture gave up on the function)
            return "external"
        return "safe"  # user classes: __init__ is Python code; torch classes are recorded or inert
    if t in (types.BuiltinFunctionType, types.BuiltinMethodType):
        so = getattr(f, "__self__", None)
        name = f.__name__
        if so is None or isinstance(so, types.ModuleType):
            mod = getattr(f, "__module__", None) or (so.__name__ if isinstance(so, types.ModuleType) else "")
            mod = mod or ""
            if mod == "builtins":
                if name in ("getattr", "hasattr"):
                    return "getattr"
                if name == "vars":
                    return "vars"
                if name in ("setattr", "delattr"):
                    return "setattr"
                return "safe" if name in _SAFE_BUILTIN_NAMES else "external"
            if mod.startswith("torch") or mod.split(".")[0] in _SAFE_MODULES:
                return "safe"
            return "external"
        if isinstance(so, contextvars.ContextVar) and name in ("get", "set", "reset"):
            return "ctxvar"
        if isinstance(so, torch.Generator) or name in _EXTERNAL_PY_NAMES:
            return "external"
        if isinstance(so, torch.Tensor) and name in _UNDISPATCHED_TENSOR_METHODS:
            return "external"
        if isinstance(so, torch.Tensor) or type(so).__module__.startswith("torch"):
            return "safe"
        if isinstance(so, _SAFE_SELF_TYPES):
            return "mutator" if name in _MUTATORS else "safe"
        if isinstance(so, type):
            return "safe"
        return "external"
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType,
             types.MethodWrapperType):
        objc = getattr(f, "__objclass__", None)
        if objc is contextvars.ContextVar and f.__name__ in ("get", "set", "reset"):
            return "ctxvar"
        if isinstance(objc, type) and issubclass(objc, torch.Generator):
            return "external"   # gen.manual_seed(s) / get_state(): replayed in order, like the bound form
        if isinstance(objc, type) and issubclass(objc, torch._C.TensorBase) and \
                f.__name__ in _UNDISPATCHED_TENSOR_METHODS:
            return "external"
        if objc is not None and (objc.__module__.startswith("torch") or objc is object):
            return "safe"
        if objc in (list, dict, set, collections.OrderedDict, collections.deque):
            return "mutator" if f.__name__ in _MUTATORS else "safe"
        if objc is not None and issubclass(objc, _SAFE_SELF_TYPES):
            return "safe"
        if isinstance(objc, type) and issubclass(objc, BaseException) and f.__name__ in _EXC_METHODS:
            return "safe"   # super().__init__(msg) of an exception class: sets the new object's args
        return "external"
    mod = getattr(t, "__module__", "") or ""
    if mod.startswith("torch") or mod.split(".")[0] in _SAFE_MODULES or hasattr(f, "__call__") and \
            isinstance(getattr(t, "__call__", None), types.FunctionType):
        return "safe"  # torch callables, functools.partial, objects with Python __call__
    return "external"


# builtins that run no Python code whatever their arguments (an uncapturable call to one
# cannot write the state the program reads: no new epoch, epochs._new_epoch)
_NO_PYTHON: set[Any] = {id, torch._C._get_tracing_state, torch.is_grad_enabled, torch.is_inference_mode_enabled}
_PLAIN_ARGS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Tensor)


def _runs_no_python(f: Any, args: list, kwargs: dict) -> bool:
    """f(*args, **kwargs) runs no Python code: one of _NO_PYTHON, or a builtin function or
    method of torch or math called with plain values only (numbers, strings, tensors)."""
    try:
        if f in _NO_PYTHON:
            return True
    except TypeError:
        return False
    if type(f) is not types.BuiltinFunctionType:
        return False
    mod = getattr(f, "__module__", None) or getattr(type(getattr(f, "__self__", None)), "__module__", "")
    if not (mod in ("math", "time") or mod.startswith("torch")):
        return False
    return all(type(a) in _PLAIN_ARGS for a in (*args, *kwargs.values()))


_TEXT_ARGS = (type(None), bool, int, float, str, bytes)


def _no_new_epoch(f: Any, args: list, kwargs: dict) -> bool:
    """An uncapturable call that cannot write the state the program reads, so that what the
    program read before it needs no guard again after it (epochs._new_epoch): one that runs
    no Python code (_runs_no_python); a method of an in-memory text or bytes buffer
    (`io.StringIO`, `io.BytesIO`, exactly: C code) or `print` to one, with numbers and
    strings; a draw from a generator of the exact types `random.Random`, NumPy's
    `RandomState` / `Generator` with numbers (it changes that generator's state only)."""
    if _runs_no_python(f, args, kwargs):
        return True
    flat = list(args) + list(kwargs.values())
    if f is print:
        out = kwargs.get("file")
        return type(out) in _BUFFERS and all(type(a) in _TEXT_ARGS for a in args) and \
            all(type(v) in _TEXT_ARGS for k, v in kwargs.items() if k != "file")
    so = getattr(f, "__self__", None)
    if (so is None or isinstance(so, types.ModuleType)) and args and \
            getattr(type(args[0]), getattr(f, "__name__", ""), None) is f:
        so, flat = args[0], flat[1:]   # the LOAD_METHOD form: the method's class's, the receiver first
    if type(so) in _BUFFERS:
        return all(type(a) in _TEXT_ARGS for a in flat)
    if type(so) is random.Random or type(so).__name__ in ("RandomState", "Generator") and \
            type(so).__module__.startswith("numpy.random"):
        return all(type(a) in _TEXT_ARGS or type(a) is tuple and all(type(x) in _TEXT_ARGS for x in a)
                   for a in flat)
    return False


# Clock reads: they read no state of the program and write none (timing code in a forward,
# `t0 = time.perf_counter()` ... `self.stats["ms"] = (time.perf_counter() - t0) * 1e3`)
_CLOCKS = frozenset(id(f) for f in (
    time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic,
    time.monotonic_ns, time.process_time, time.process_time_ns, time.thread_time, time.thread_time_ns))


def _reads_clock(f: Any, args: list, kwargs: dict) -> bool:
    """A call of one of the time module's clocks, with no arguments: an uncapturable call that
    is inert (external_calls: reads and writes none of the program's state), so a number
    computed from it and stored into the program's state is replayed as its expression
    instead of being guarded by value (a recompile on every call)."""
    return id(f) in _CLOCKS and not args and not kwargs


_BUFFERS = (io.StringIO, io.BytesIO)


_FRAME_NAMESPACE_FUNCS = (eval, exec, globals, locals)


def _frame_namespace_call(f: Any, args: list, kwargs: dict) -> bool:
    """f(*args, **kwargs) reads or writes the namespaces of the frame calling it: globals(),
    locals(), or eval / exec not handed a globals dict.  A replay's call is in no such frame:
    the function runs eagerly."""
    if not any(f is g for g in _FRAME_NAMESPACE_FUNCS):
        return False
    return f is globals or f is locals or len(args) < 2 and "globals" not in kwargs
