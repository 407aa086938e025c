"""Bytecode-level capture of PyTorch programs (MagPy style: run for real while recording).

Overview
--------
* Entry: a PEP 523 frame-evaluation hook (C++ extension `_mlircap_evalframe`) intercepts
  the frame of the captured function's code object and hands the CPython-bound arguments
  to `_Captured.dispatch`.  Without the extension a pure-Python wrapper binds the
  arguments itself (fallback).
* Recording: the first call (and every guard miss) runs the function for real with
  `sys.settrace` opcode events on user frames.  A C++ helper peeks the value stack, so
  every external read (globals, closure cells, attributes of modules/objects, container
  items) is seen and turned into a guard; writes are detected (STORE_* opcodes plus a
  diff of touched external state) and replayed.  Tensor operations are intercepted by a
  TorchFunctionMode and recorded into torch.fx graphs.
* Graph breaks: operations that depend on tensor data (`.item()`, `bool(t)`, `.tolist()`,
  printing ...) or calls to uncapturable code end the current graph; the operation is
  replayed eagerly and its result is guarded (mid-replay guard), then capture continues in
  a new graph.  When a mid-replay guard fails, tensor mutations / RNG are rolled back and
  a new variant is recorded.
* Replay: generated Python code (one function per variant) evaluates the graphs compiled
  by the user backend, the eager break operations and the deferred side effects.
"""
import builtins
import collections
import contextlib
import contextvars
import functools
import io
from logging import Logger as logging_Logger
import dis
import math
import operator
import os
import re
import sys
import types
import warnings
import weakref

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from . import _ext
from .. import logs as _logs

PY312 = sys.version_info >= (3, 12)
_E = _ext.load()
HOOK = "pep523" if _E is not None else "python-fallback"
_NULL = _E.NULL if _E is not None else object()
NOT_HANDLED = _E.NOT_HANDLED if _E is not None else object()


class _Missing:
    def __repr__(self):
        return "<unset>"


_MISSING = _Missing()


class _Miss:
    """A replay whose mid-replay guard failed.  `log`: the results of the uncapturable
    calls it already ran (their side effects happened), in order; the next variant tried
    and a re-recording take these results instead of running the calls again."""
    __slots__ = ("log",)

    def __init__(self, log: "list | None" = None) -> None:
        self.log = log

    def __repr__(self):
        return "<MISS>"


MISS = _Miss()


class _Canned:
    """Stands in for an uncapturable callable whose call already ran (catch-up after a
    failed mid-replay guard): returns that call's result."""
    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def __call__(self, *args, **kwargs):
        return self.value


class Unreplayable(Exception):
    pass


class _CaptureStrictError(RuntimeError):
    """strict=True error when mlircap.backend (MlircapCompileError) cannot be imported."""
    propagate = True


def _strict_error(msg: str) -> Exception:
    """The error strict=True raises for a part of the program that would not run compiled:
    mlircap's MlircapCompileError (imported lazily: the capture layer runs without the
    compiler half)."""
    try:
        from ..backend import MlircapCompileError
    except Exception:  # pragma: no cover - capture used without the compiler
        return _CaptureStrictError(msg)
    return MlircapCompileError(msg)


def _fn_name(fn) -> str:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else name


# ----------------------------------------------------------------------------------
# code classification
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_TORCH_NN_MODULES = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
_OWN_DIR = os.path.dirname(__file__) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
_OPAQUE_STDLIB = ("typing.py", "abc.py", "warnings.py", "threading.py", "weakref.py",
                  "_weakrefset.py", "inspect.py", "enum.py", "functools.py", "contextlib.py",
                  "linecache.py", "traceback.py", "logging/", "importlib/", "re/", "sre_",
                  "dis.py", "copyreg.py", "codecs.py")
_code_kind = {}


def _classify(code):
    k = _code_kind.get(code)
    if k is None:
        fn = code.co_filename
        if fn.startswith(_OWN_DIR) or fn.startswith("<frozen"):
            k = "opaque"
        elif fn.startswith(_TORCH_DIR):
            base = os.path.basename(fn)
            if fn.startswith(_TORCH_NN_MODULES) and base not in ("module.py", "container.py", "_functions.py"):
                k = "user"
            else:
                k = "opaque"
        elif fn.startswith(_STDLIB_DIR):
            rel = fn[len(_STDLIB_DIR):]
            k = "opaque" if (rel.startswith(_OPAQUE_STDLIB) or "site-packages" in rel) else "user"
            if "site-packages" in rel:
                k = "user"
        else:
            k = "user"
        _code_kind[code] = k
    return k


from ._bytecode import _CHECK_DEPTH, _STATIC_DEPTH, _instrs  # noqa: E402,F401


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
                    collections.OrderedDict, type({}.keys()), type({}.values()), type({}.items()))
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
             "add", "discard", "sort", "reverse", "popitem", "__setitem__", "__delitem__",
             "difference_update", "intersection_update", "symmetric_difference_update",
             "move_to_end", "__iadd__"}
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
    "_version", "__torch_function__",
}
_RNG_WORDS = ("rand", "dropout", "bernoulli", "normal", "multinomial", "uniform", "rrelu",
              "exponential", "cauchy", "geometric", "log_normal", "random_")


def _fname(func):
    n = getattr(func, "__name__", None)
    if n == "__get__" or n == "__set__":
        n = getattr(getattr(func, "__self__", None), "__name__", n)
    return n or repr(func)


def _func_qualname(func):
    n = getattr(func, "__qualname__", None) or _fname(func)
    if n == "__get__":
        n = getattr(getattr(func, "__self__", None), "__name__", n)
    return n


_API_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api.py")


def _user_location():
    f = sys._getframe(1)
    while f is not None:
        if _classify(f.f_code) == "user" and not f.f_code.co_filename.startswith(_TORCH_DIR) and \
                f.f_code.co_filename != _API_FILE:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    f = sys._getframe(1)
    while f is not None:
        if _classify(f.f_code) == "user" and f.f_code.co_filename != _API_FILE:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


def _user_stack_trace():
    """The innermost user frame in traceback form (FX `stack_trace` meta), so
    compilers can point diagnostics at the user's source line."""
    f = sys._getframe(1)
    while f is not None:
        if _classify(f.f_code) == "user" and not f.f_code.co_filename.startswith(_TORCH_DIR):
            return f'  File "{f.f_code.co_filename}", line {f.f_lineno}, in {f.f_code.co_name}\n'
        f = f.f_back
    return None


def _mk_obj(cls, d, base=None, items=None):
    """Rebuild an object created during the captured call (fresh object per replay)."""
    o = cls.__new__(cls)
    if base is dict or base is collections.OrderedDict:
        base.__init__(o)
        for k, x in items:
            base.__setitem__(o, k, x)
    elif base is list:
        list.extend(o, items)
    o.__dict__.update(d)
    return o


# ----------------------------------------------------------------------------------
def _new_placeholder(seg):
    """Placeholders go before every computation node (some backends assume that)."""
    first = next((n for n in seg.graph.nodes if n.op != "placeholder"), None)
    if first is None:
        return seg.graph.placeholder(f"in{len(seg.ph)}")
    with seg.graph.inserting_before(first):
        return seg.graph.placeholder(f"in{len(seg.ph)}")


class _Seg:
    def __init__(self, idx, grad):
        self.idx = idx
        self.graph = fx.Graph()
        self.ph = {}          # key -> placeholder node
        self.inputs = []      # python exprs producing each placeholder value
        self.examples = []
        self.outputs = []     # nodes needed later (ordered)
        self.out_set = set()
        self.start_grad = grad
        self.grad = grad
        self.nops = 0
        self.gm = None
        self.inplace = False  # records an in-place op


class _Recorder:
    def __init__(self, captured, func, code, args, argnames, catchup: "list | None" = None):
        self.captured = captured
        self.catchup = catchup or []   # results of uncapturable calls that already ran
        self.ext_seen = 0              # uncapturable calls met so far
        self.func = func
        self.code = code
        self.args = args
        self.consts = []
        self.const_idx = {}
        self.src = {}          # id(obj) -> (expr, pretty, argrooted)
        self.keep = []
        self.guards = []       # (step_pos, expr, pretty)
        self.guard_exprs = set()
        self.read_exprs = set()
        self.hooked = set()
        self.memo = None
        self.lets = []
        self.lazy = {}
        self.lazy_objs = {}
        self.cv_snap = {}
        self.builtin_reads = {}
        self.arg_tensors = []
        self.has_inplace = False
        self.cv_local = set()
        self.hooked_global = False
        self.dirty = set()     # (id(obj), key)
        # keys the code stored into (attribute names, ("item", key) for subscripts): replayed
        # even when the stored value is the one the object already had when recording, since
        # the object may hold another value at replay
        self.stored: dict[int, set] = collections.defaultdict(set)
        self.snaps = {}        # id -> (kind, obj, expr, pretty, snapshot)
        self.global_snaps = {} # (id(g), name) -> (g, name, had, old)
        self.ext_cells = {}    # id(cell) -> (expr, pretty)
        self.segs = []
        self.cur = None
        self.env = {}          # id(tensor) -> (tensor, seg_idx, node)
        self.steps = []        # ("graph", seg) | ("call", k, callee_expr, arg_exprs, kw_exprs, pretty)
        self.ncalls = 0
        self.suspended = 0
        self.ext_depth = 0
        self.cur_depth = -1
        self.pending = {}
        self.kwnames = {}
        self._unreplayable = None
        self.unreplayable_loc = None   # the user's file:line where capture gave up
        self.breaks = []       # (reason, location)
        self.break_limit = getattr(captured, "break_limit", None)
        self.break_overflow = None     # set when the call broke the graph more than break_limit times
        self.stopped = False           # recording stopped: the rest of the call runs untraced
        self.uses_rng = False
        self.versions = {}     # id(t) -> (t, version at first sight) for external tensors
        self.tensor_meta: dict[str, tuple[str, torch.Tensor]] = {}  # guard expr -> (tensor expr, example)
        self.vgroups: dict[tuple, str] = {}      # dict-group key -> version fast-path expression
        self.vgroup_of: dict[str, tuple] = {}    # guard expr -> its dict-group key
        self.state0 = _GlobalState()
        self.grad0 = self.state0.grad
        self.amb0 = self.state0.ambient
        self.const_names = {}
        # roots
        try:
            for i, (a, n) in enumerate(zip(args, argnames)):
                self._source(a, f"L[{i}]", n, argrooted=True)
        except Exception as e:  # e.g. an argument structure we cannot guard
            self.unreplayable = f"{type(e).__name__}: {e}"
        if isinstance(func, types.FunctionType) and func.__closure__:
            for i, (c, n) in enumerate(zip(func.__closure__, code.co_freevars)):
                self.ext_cells[id(c)] = (f"F.__closure__[{i}]", n)
                self.keep.append(c)

    @property
    def unreplayable(self):
        """Why this recording cannot be replayed (the call then runs eagerly), or None."""
        return self._unreplayable

    @unreplayable.setter
    def unreplayable(self, why) -> None:
        if why and not self._unreplayable:
            self._unreplayable = why
            try:
                self.unreplayable_loc = _user_location()
            except Exception:  # pragma: no cover
                self.unreplayable_loc = "<unknown>"

    def _add_break(self, reason: str, loc: str) -> None:
        self.breaks.append((reason, loc))
        _logs.log("graph_breaks", f"{reason} at {loc}")
        lim = self.break_limit
        if lim is not None and len(self.breaks) > lim and not self.stopped:
            # hundreds of graphs would each be compiled and replayed: stop recording, the rest
            # of the call and later calls with these arguments run eagerly
            top, n = collections.Counter(self.breaks).most_common(1)[0]
            self.break_overflow = f"most often: {top[0]} at {top[1]}, {n} times"
            self.unreplayable = f"more than {lim} graph breaks in one call ({self.break_overflow})"
            self.stopped = True

    # -- constants / guards -----------------------------------------------------
    def const(self, v, name=None):
        k = self.const_idx.get(id(v))
        if k is None:
            k = len(self.consts)
            self.consts.append(v)
            self.const_idx[id(v)] = k
            self.const_names[k] = name
        return f"C[{k}]"

    def _lit_or_const(self, v) -> str:
        return "None" if v is None else self.const(v)

    def _source_ndarray(self, v, expr: str, pretty: str, argrooted: bool) -> None:
        """A numpy array is mutable in place without any write the tracer sees: guard its
        contents (small arrays) or give up capturing."""
        if v.dtype.hasobject or v.nbytes > _NDARRAY_GUARD_BYTES:
            raise Unreplayable(f"numpy array {pretty} ({v.dtype}, {v.nbytes} bytes) read: its contents "
                               f"are not guarded above {_NDARRAY_GUARD_BYTES} bytes")
        self.guard(f"type({expr}) is {self.const(type(v))} and {expr}.dtype == {self.const(v.dtype)} and "
                   f"{expr}.shape == {tuple(v.shape)!r} and {expr}.tobytes() == {self.const(v.tobytes())}",
                   f"{pretty}: ndarray[{v.dtype}, shape={tuple(v.shape)}] with the same contents")
        self.src[id(v)] = (expr, pretty, argrooted)
        self.keep.append(v)

    def _lit(self, v):
        t = type(v)
        if v is None or t is bool:
            return repr(v)
        if t in (int, str) and len(repr(v)) < 60:
            return repr(v)
        if t is float and math.isfinite(v):
            return repr(v)
        return self.const(v)

    def _number_guard(self, expr: str, v, tname: str) -> str:
        """Exact guard for a number: -0.0 is not 0.0 (1/x, copysign, atan2 tell them
        apart) and a NaN matches a NaN (NaN != NaN would fail the guard on every call)."""
        tg = f"type({expr}) is {tname}"
        if isinstance(v, complex):
            # repr tells -0.0 from 0.0 and matches NaN parts; only for the rare complex
            return f"{tg} and {self.const(repr)}({self.const(complex)}({expr})) == {repr(complex(v))!r}"
        if isinstance(v, float):
            if v != v:
                return f"{tg} and {expr} != {expr}"
            if v == 0.0:
                sign = math.copysign(1.0, v)
                return f"{tg} and {expr} == 0.0 and {self.const(math.copysign)}(1.0, {expr}) == {sign!r}"
            return f"{tg} and {expr} == {self._lit(float(v))}"
        return f"{tg} and {expr} == {self._lit(v if type(v) in (int, bytes) else int(v))}"

    def _tensor_guard(self, expr: str, t: torch.Tensor) -> str:
        """Metadata guard for a tensor: Python type, dispatch keys (device, autograd),
        dtype, shape, strides and requires_grad, checked in C++ by torch's TensorGuards.
        The variant's pre-call guard merges all of them into one check."""
        tg = _tensor_guards(t)
        g = f"{self.const(tg)}.check({expr})"
        self.tensor_meta[g] = (expr, t)
        return g

    def guard(self, expr, pretty, pos=None, group: "tuple | None" = None):
        """Add a guard checked before the call (pos 0) or after break `pos - 1`.  `group`:
        the dicts (module / class / instance dicts) whose contents alone decide this guard;
        the variant checks a group of such guards through the dicts' version tags first."""
        if expr in self.guard_exprs:
            return
        self.guard_exprs.add(expr)
        pos = self.ncalls if pos is None else pos
        self.guards.append((pos, expr, pretty))
        if group and pos == 0 and _dict_version is not None:
            self.vgroup_of[expr] = self._group_key(group)

    def _group_key(self, group: tuple) -> tuple:
        key = tuple(id(d) for d in group)
        if key not in self.vgroups and _dict_version is not None:
            # versions as of the first read: a dict's version tag is unique to one state of
            # it, so the fast path only passes if nothing was written since
            self.vgroups[key] = " and ".join(f"_dv({self.const(d)}) == {_dict_version(d)}" for d in group)
        return key

    # Lazy containers: lists/dicts/sets reached through attributes, globals or cells are
    # only guarded (from their snapshot, i.e. the pre-call state) once the program reads
    # them; append-only / store-only use (logs, caches, histories) needs no guard at all.
    def touch(self, obj):
        lz = self.lazy.pop(id(obj), None)
        if lz is None:
            return
        v, expr, pretty, depth, pos = lz
        kind, _, _, _, snap = self.snaps[id(v)]
        t = type(v)
        saved = self.ncalls
        self.ncalls = pos
        try:
            n = len(snap)
            self.guard(f"type({expr}) is {self.const(t)} and len({expr}) == {n}",
                       f"type({pretty}) is {t.__name__} and len({pretty}) == {n}")
            if kind == "list":
                for i, x in enumerate(snap):
                    self._source(x, f"{expr}[{i}]", f"{pretty}[{i}]", False, depth + 1)
            elif kind == "dict":
                keys = list(snap.keys())
                self.guard(f"list({expr}) == {self.const(keys)}", f"list({pretty}.keys()) == {keys!r}")
                for k in keys:
                    self._source(snap[k], self._item(v, expr, k), f"{pretty}[{k!r}]", False, depth + 1)
            else:
                if all(type(x) in _PRIM or isinstance(x, _ID_HASHED) for x in snap):
                    self.guard(f"{expr} == {self.const(set(snap))}", f"{pretty} == {snap!r}")
                else:
                    raise Unreplayable(f"set of objects at {pretty}")
        finally:
            self.ncalls = saved

    def full_obj(self, o):
        """A lazily guarded object is used by code we do not trace: guard all of it."""
        v, pos = self.lazy_objs.pop(id(o))
        _, _, expr, pretty, snap = self.snaps[id(o)]
        dc = self.const(v.__dict__)
        saved = self.ncalls
        self.ncalls = pos
        try:
            self.guard(f"list({dc}) == {self.const(list(snap))}", f"vars({pretty}).keys() == {list(snap)}")
            for k, x in snap.items():
                self.read(f"{dc}[{k!r}]", f"{pretty}.{k}", x, id(v), k)
        finally:
            self.ncalls = saved

    def touch_deep(self, objs):
        if not self.lazy and not self.lazy_objs:
            return
        for o in objs:
            if id(o) in self.lazy_objs:
                self.full_obj(o)
            if id(o) in self.lazy:
                self.touch(o)
            d = getattr(o, "__dict__", None) if not isinstance(o, type) else None
            if isinstance(d, dict):
                for x in list(d.values()):
                    if id(x) in self.lazy:
                        self.touch(x)
            if isinstance(o, (list, tuple)) and len(o) < 64:
                for x in o:
                    if id(x) in self.lazy:
                        self.touch(x)

    def _source(self, v, expr, pretty, argrooted, depth=0, group: "tuple | None" = None):
        """v has just been read from an external location described by expr: guard it.
        `group`: the dicts expr reads from (see guard()); only guards that depend on
        nothing but that read use it."""
        t = type(v)
        if v is None or t is bool:
            self.guard(f"{expr} is {v!r}", f"{pretty} is {v!r}", group=group)
            return
        if t is str:
            self.guard(f"{expr} == {self._lit(v)}", f"{pretty} == {v!r}", group=group)
            return
        if t in (int, float, bytes, complex):
            self.guard(self._number_guard(expr, v, t.__name__), f"{pretty} == {v!r}", group=group)
            return
        if isinstance(v, (int, float, complex)) and t.__module__ == "numpy":
            # numpy scalars (np.float64 subclasses float): immutable, guarded by value
            self.guard(self._number_guard(expr, v, self.const(t)), f"{pretty} == {t.__name__}({v!r})",
                       group=group)
            return
        vid = id(v)
        if vid in self.src:
            old = self.src[vid][0]
            if old != expr:  # same object reached through another path: guard aliasing
                self.guard(f"{expr} is {old}", f"{pretty} is {self.src[vid][1]}",
                           group=group if old.startswith("C[") else None)
            return
        self.keep.append(v)
        if isinstance(v, torch.Tensor):
            meta = f"{type(v).__name__}[{str(v.dtype)[6:]}, {v.device}, shape={tuple(v.shape)}, " \
                   f"stride={tuple(v.stride())}, requires_grad={v.requires_grad}]"
            if argrooted:
                if expr.startswith("L["):
                    self.arg_tensors.append(expr)
                self.guard(self._tensor_guard(expr, v), f"{pretty}: {meta}")
                self.src[vid] = (expr, pretty, argrooted)
            elif isinstance(v, torch.nn.Parameter):
                # identity (so replay passes the constant) and metadata: `p.data = ...`,
                # `.to()`, `resize_` keep the object but change shape, dtype, ...
                c = self.const(v, pretty)
                self.guard(f"{expr} is {c}", f"{pretty} is the same tensor (id)", group=group)
                self.guard(self._tensor_guard(c, v), f"{pretty}: {meta}")
                self.src[vid] = (c, pretty, False)
            else:
                # buffers / plain tensor attributes / globals: read through expr at replay,
                # so any tensor with the same metadata will do
                self.guard(self._tensor_guard(expr, v), f"{pretty}: {meta}")
                self.src[vid] = (expr, pretty, False)
            self.versions[vid] = (v, v._version)
            return
        if isinstance(v, _IMMUTABLE_CONST):
            self.guard(f"{expr} == {self.const(v)}", f"{pretty} == {v!r}", group=group)
            return
        if _is_ndarray(v):
            self._source_ndarray(v, expr, pretty, argrooted)
            return
        if isinstance(v, (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType,
                          types.ModuleType, type, types.MethodWrapperType,
                          types.WrapperDescriptorType, types.MethodDescriptorType)) or \
                isinstance(v, (weakref.ref,)) or hasattr(type(v), "__members__"):
            c = self.const(v, pretty)
            self.guard(f"{expr} is {c}", f"{pretty} is {_short(v)}", group=group)
            self.src[vid] = (c, pretty, False)
            if isinstance(v, types.FunctionType) and _classify(v.__code__) == "user":
                # traced code: replacing __code__ / __defaults__ of the same function object
                # changes what it does
                self.guard(f"{c}.__code__ is {self.const(v.__code__)} and {c}.__defaults__ is "
                           f"{self._lit_or_const(v.__defaults__)} and {c}.__kwdefaults__ is "
                           f"{self._lit_or_const(v.__kwdefaults__)}",
                           f"{pretty} has the same __code__ and defaults")
            if isinstance(v, torch.nn.Module):
                self._snap(v, c, pretty)
                if isinstance(v, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict,
                                  torch.nn.ParameterList, torch.nn.ParameterDict)):
                    mods = v._modules if not isinstance(v, (torch.nn.ParameterList, torch.nn.ParameterDict)) else v._parameters
                    an = "_modules" if mods is v._modules else "_parameters"
                    self.guard(f"list({c}.{an}) == {self.const(list(mods.keys()))}",
                               f"{pretty}.{an}.keys() == {list(mods.keys())}")
                    mc = self.const(mods)
                    for k, m in mods.items():
                        self._source(m, f"{mc}[{k!r}]", f"{pretty}[{k!r}]", False, depth + 1)
            elif isinstance(v, types.FunctionType) and v.__closure__:
                for i, (cell, n) in enumerate(zip(v.__closure__, v.__code__.co_freevars)):
                    self.ext_cells[id(cell)] = (f"{c}.__closure__[{i}]", f"{pretty}.<closure {n}>")
                    self.keep.append(cell)
            return
        if t is types.MethodType:
            self.guard(f"type({expr}) is {self.const(types.MethodType)}", f"{pretty} is a bound method")
            self._source(v.__func__, f"{expr}.__func__", f"{pretty}.__func__", argrooted, depth + 1)
            self._source(v.__self__, f"{expr}.__self__", f"{pretty}.__self__", argrooted, depth + 1)
            return
        if depth > 6:
            raise Unreplayable(f"structure too deep at {pretty}")
        if t is tuple and not argrooted and len(v) <= 8 and all(type(x) in (int, str) for x in v):
            # e.g. conv stride/padding tuples read from module attributes
            self.guard(f"type({expr}) is tuple and {expr} == {v!r}", f"{pretty} == {v!r}", group=group)
            return
        if isinstance(v, (list, dict, set)) and not argrooted:
            if len(v) > 512:
                raise Unreplayable(f"container too large at {pretty}")
            self.src[vid] = (expr, pretty, argrooted)
            self._snap(v, expr, pretty)
            self.lazy[vid] = (v, expr, pretty, depth, self.ncalls)
            return
        if isinstance(v, (list, tuple, dict, set)):
            n = len(v)
            if n > 512:
                raise Unreplayable(f"container too large at {pretty}")
            self.guard(f"type({expr}) is {self.const(t)} and len({expr}) == {n}",
                       f"type({pretty}) is {t.__name__} and len({pretty}) == {n}")
            self.src[vid] = (expr, pretty, argrooted)
            if isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    self._source(x, f"{expr}[{i}]", f"{pretty}[{i}]", argrooted, depth + 1)
            elif isinstance(v, dict):
                keys = list(v.keys())
                self.guard(f"list({expr}) == {self.const(keys)}", f"list({pretty}.keys()) == {keys!r}")
                for k in keys:
                    self._source(dict.__getitem__(v, k), self._item(v, expr, k), f"{pretty}[{k!r}]",
                                 argrooted, depth + 1)
            else:
                if all(type(x) in _PRIM or isinstance(x, _ID_HASHED) for x in v):
                    self.guard(f"{expr} == {self.const(set(v))}", f"{pretty} == {v!r}")
                else:
                    raise Unreplayable(f"set of objects at {pretty}")
            if t is not tuple:
                self._snap(v, expr, pretty)
            return
        if t is functools.partial:
            self.guard(f"type({expr}) is {self.const(t)}", f"{pretty} is a functools.partial")
            self.src[vid] = (expr, pretty, argrooted)
            self._source(v.func, f"{expr}.func", f"{pretty}.func", True, depth + 1)
            self._source(v.args, f"{expr}.args", f"{pretty}.args", True, depth + 1)
            self._source(v.keywords, f"{expr}.keywords", f"{pretty}.keywords", True, depth + 1)
            return
        if hasattr(v, "__dict__") and not isinstance(v, type) and not _pure_python_type(t):
            # C-implemented type with an instance dict (SimpleNamespace, ...): identity; its
            # attribute reads are guarded where they happen (op_load_attr), its instance
            # dict and slots are snapshotted for writes
            c = self.const(v, pretty)
            self.guard(f"{expr} is {c}", f"{pretty} is {_short(v)}", group=group)
            self.src[vid] = (c, pretty, False)
            if type(getattr(v, "__dict__", None)) is dict:
                self._snap(v, c, pretty)
            return
        if hasattr(v, "__dict__") and not isinstance(v, type) and not argrooted and \
                type(getattr(v, "__dict__", None)) is dict:
            # object reached through a module attribute / global / cell (configs, helpers):
            # identity, then attribute reads are guarded lazily like nn.Module attributes
            c = self.const(v, pretty)
            self.guard(f"{expr} is {c}", f"{pretty} is {_short(v)}")
            self.src[vid] = (c, pretty, False)
            self._snap(v, c, pretty)
            self.lazy_objs[vid] = (v, self.ncalls)
            return
        if hasattr(v, "__dict__") and not isinstance(v, type):
            # plain custom object / dataclass argument: guard its type and whole instance dict
            self.guard(f"type({expr}) is {self.const(t)}", f"type({pretty}) is {t.__qualname__}")
            self.src[vid] = (expr, pretty, argrooted)
            d = v.__dict__
            keys = list(d.keys())
            self.guard(f"list({expr}.__dict__) == {self.const(keys)}", f"vars({pretty}).keys() == {keys}")
            for k in keys:
                self._source(d[k], f"{expr}.__dict__[{k!r}]", f"{pretty}.{k}", argrooted, depth + 1)
            self._snap(v, expr, pretty)
            return
        # object without __dict__ (__slots__ classes, C objects): identity; attribute reads
        # are guarded where they happen (op_load_attr), slot values snapshotted for writes
        c = self.const(v, pretty)
        self.guard(f"{expr} is {c}", f"{pretty} is {_short(v)}", group=group)
        self.src[vid] = (c, pretty, False)
        if _slot_names(t):
            self._snap(v, c, pretty)

    def final_guards(self):
        saved, self.ncalls = self.ncalls, 0
        try:
            for g, names in self.builtin_reads.values():
                self.guard(f"{self.const(g)}.keys().isdisjoint({self.const(frozenset(names))})",
                           f"module {g.get('__name__')!r} does not shadow builtins {sorted(names)}",
                           group=(g,) if self._group_key((g,)) in self.vgroups else None)
            if len(self.arg_tensors) > 1 and self.has_inplace:
                n = len(self.arg_tensors)
                self.guard("len({" + "".join(f"id({e}), " for e in self.arg_tensors) + f"}}) == {n}",
                           "tensor arguments are distinct objects (the graph mutates inputs)")
        finally:
            self.ncalls = saved

    def _item(self, container, expr, key):
        if type(container) in (dict, list, tuple):
            return f"{expr}[{self._lit(key)}]"
        return f"{self.const(dict.__getitem__)}({expr}, {self._lit(key)})"

    def _snap(self, v, expr, pretty):
        if id(v) in self.snaps:
            return
        if isinstance(v, torch.nn.Module):
            snap = (dict(v.__dict__), dict(v._parameters), dict(v._buffers), dict(v._modules))
            kind = "module"
        elif isinstance(v, list):
            snap, kind = list(v), "list"
        elif isinstance(v, dict):
            snap, kind = dict(v), "dict"
        elif isinstance(v, set):
            snap, kind = set(v), "set"
        elif type(getattr(v, "__dict__", None)) is not dict:
            snap, kind = _slot_values(v), "slots"
        else:
            snap, kind = dict(v.__dict__), "obj"
            slots = _slot_values(v)
            if slots:
                snap, kind = (snap, slots), "obj+slots"
        self.snaps[id(v)] = (kind, v, expr, pretty, snap)

    def read(self, expr, pretty, v, owner_id=None, key=None, group: "tuple | None" = None):
        if owner_id is not None and (owner_id, key) in self.dirty:
            return
        if expr in self.read_exprs:
            return
        self.read_exprs.add(expr)
        self._source(v, expr, pretty, argrooted=False, group=group)

    # -- opcode tracing -----------------------------------------------------------
    def global_trace(self, frame, event, arg):
        if event != "call" or self.suspended or self.ext_depth or self.stopped:
            return None
        if _classify(frame.f_code) != "user":
            return None
        frame.f_trace_lines = False
        frame.f_trace_opcodes = True
        code = frame.f_code
        try:
            self._hook_guard(frame, code)
        except Exception as e:
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        return self.local_trace

    def _hook_guard(self, frame, code):
        if code.co_argcount and code.co_name == "forward":
            self_ = _E.local_raw(frame, 0)
            s = self.src.get(id(self_))
            if s is not None and isinstance(self_, torch.nn.Module) and id(self_) not in self.hooked:
                self.hooked.add(id(self_))
                hs = [self_._forward_hooks, self_._forward_pre_hooks, self_._backward_hooks,
                      self_._backward_pre_hooks]
                n = tuple(len(h) for h in hs)
                if not any(n):
                    self.guard("not (" + " or ".join(self.const(h) for h in hs) + ")", f"{s[1]} has no hooks")
                else:
                    self.guard("(" + "".join(f"len({self.const(h)}), " for h in hs) + f") == {n}",
                               f"{s[1]} hook counts == {n}")
                # what `forward` resolves to (class monkeypatching, instance attribute); the
                # root module's frame is only dispatched here when its code is the captured one
                d = self_.__dict__
                if self.args and self_ is self.args[0] and code is self.code:
                    pass
                elif "forward" in d:
                    self.read(f"{self.const(d)}['forward']", f"{s[1]}.forward", d["forward"], id(self_),
                              "forward", group=(d,))
                else:
                    self._class_attr(self_, "forward", s[1])
                if not self.hooked_global:
                    self.hooked_global = True
                    mm = torch.nn.modules.module
                    gs = [mm._global_forward_hooks, mm._global_forward_pre_hooks, mm._global_backward_hooks,
                          mm._global_backward_pre_hooks, mm._global_forward_hooks_always_called]
                    n = tuple(len(x) for x in gs)
                    if not any(n):
                        self.guard("not (" + " or ".join(self.const(x) for x in gs) + ")",
                                   "no global nn.Module hooks")
                    else:
                        self.guard("(" + "".join(f"len({self.const(x)}), " for x in gs) + f") == {n}",
                                   f"global nn.Module hook counts == {n}")
        return self.local_trace

    def local_trace(self, frame, event, arg):
        if self.stopped:
            return None
        self.suspended += 1
        try:
            if event == "opcode":
                ins = _instrs(frame.f_code).get(frame.f_lasti)
                if ins is not None:
                    self.cur_depth = ins[3]
                    if _CHECK_DEPTH and ins[3] != _E_real.stack_depth(frame):
                        raise AssertionError(f"static stack depth {ins[3]} != {_E_real.stack_depth(frame)} "
                                             f"at {ins[0]} {frame.f_code.co_name}:{frame.f_lasti}")
                p = self.pending.pop(frame, None)
                if p is not None:
                    p(frame)
                if ins is not None and self.suspended == 1 and not self.ext_depth:
                    h = _HANDLERS.get(ins[0])
                    if h is not None:
                        h(self, frame, ins[1], ins[2])
            elif event == "exception" or event == "return":
                p = self.pending.pop(frame, None)
                if p is not None and getattr(p, "is_call", False):
                    self.ext_depth -= 1
                    self.unreplayable = self.unreplayable or "exception raised by an uncapturable call"
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or str(e)
        except AssertionError:
            raise
        except Exception as e:  # never let the recorder break the user's program
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
        finally:
            self.suspended -= 1
        return self.local_trace


    def op_load_global(self, frame, arg, name):
        g = frame.f_globals
        if name not in g:
            # resolved to a builtin: guard (once per module, at the end) that the module
            # does not shadow it later, and that builtins[name] is still the same object
            self.builtin_reads.setdefault(id(g), (g, set()))[1].add(name)
            if self.ncalls == 0:
                self._group_key((g,))  # pin the globals' version as of this read
            b = frame.f_builtins
            if name in b:
                self.read(f"{self.const(b)}[{name!r}]", f"builtins.{name}", b[name], id(b), name, group=(b,))
            return
        if (id(g), name) in self.dirty:
            return
        c = self.const(g, f"globals of {g.get('__name__')}")
        self.read(f"{c}[{name!r}]", f"G[{name!r}]", g[name], id(g), name, group=(g,))

    def op_load_attr(self, frame, arg, name, obj=_NULL):
        if obj is _NULL:
            obj = _E.peek(frame, 0)
        s = self.src.get(id(obj))
        if isinstance(obj, torch.Tensor):
            self._tensor_attr(obj, name, s)
            return
        if s is None or type(obj) in _PRIM:
            return
        expr, pretty, kind = s
        if kind == "opaque":
            raise Unreplayable(f"attribute {name!r} read from an opaque value returned by an uncapturable call")
        if (id(obj), name) in self.dirty:
            return
        if name == "__dict__":
            d = getattr(obj, "__dict__", None)
            if id(obj) in self.lazy_objs:
                self.full_obj(obj)
            if isinstance(d, dict):
                self.read(f"{expr}.__dict__", f"vars({pretty})", d)
            return
        if isinstance(obj, torch.nn.Module):
            d = obj.__dict__
            _, raw = _mro_lookup(type(obj), name)
            if raw is not _MISSING and (_is_data_descr(raw) or name not in d):
                # property / method / class data: a getter itself is traced; the class
                # attribute is guarded against monkeypatching and instance shadowing
                self._class_attr(obj, name, pretty)
                return
            # the module is identity-guarded, so its attribute dicts are bound as constants
            if name in d:
                self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
                return
            for store in ("_parameters", "_buffers", "_modules"):
                sd = d.get(store)
                if sd is not None and name in sd:
                    self.read(f"{self.const(sd)}[{name!r}]", f"{pretty}.{name}", sd[name], id(obj), name,
                              group=(sd,))
                    return
            return
        if isinstance(obj, types.ModuleType):
            d = obj.__dict__
            if name in d:
                self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
            return
        if isinstance(obj, type):
            try:
                v = getattr(obj, name)
            except Exception:
                return
            self.read(f"{expr}.{name}", f"{pretty}.{name}", v, id(obj), name,
                      group=_class_dicts(obj) if expr.startswith("C[") else None)
            return
        if _is_ndarray(obj):
            return  # guarded by contents
        argrooted = kind is True
        cls = type(obj)
        _, raw = _mro_lookup(cls, name)
        if raw is not _MISSING and _is_data_descr(raw):
            if type(raw) in (types.MemberDescriptorType, types.GetSetDescriptorType):
                # __slots__ member / C getset: the value read is the state to guard
                try:
                    v = getattr(obj, name)
                except Exception:
                    return
                self.read(f"{expr}.{name}", f"{pretty}.{name}", v, id(obj), name)
            self._class_guard(cls, name, raw, f"type({pretty}).{name}")
            return
        d = getattr(obj, "__dict__", None)
        if type(d) is dict and name in d:
            # argument objects are guarded eagerly (whole __dict__); others lazily, here
            if not argrooted:
                self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
            return
        if raw is not _MISSING:
            self._class_attr(obj, name, pretty, argrooted)

    def _tensor_attr(self, t: torch.Tensor, name: str, s) -> None:
        """An attribute read on a tensor: Python attributes set on it (`t.tag`) are guarded
        by value, methods and properties against monkeypatching of the tensor class."""
        cls = type(t)
        _, raw = _mro_lookup(cls, name)
        if (raw is _MISSING or not _is_data_descr(raw)) and s is not None and s[2] != "opaque":
            expr, pretty = s[0], s[1]
            if (id(t), name) in self.dirty:
                return
            d = t.__dict__
            keys = list(d)
            self.guard(f"not {expr}.__dict__" if not keys else f"list({expr}.__dict__) == {self.const(keys)}",
                       f"vars({pretty}).keys() == {keys}")
            if name in d:
                self.read(f"{expr}.__dict__[{name!r}]", f"{pretty}.{name}", d[name], id(t), name)
                return
        self._class_guard(cls, name, raw, f"{cls.__name__}.{name}")

    def _class_attr(self, obj, name: str, pretty: str, argrooted: bool = False) -> None:
        """Attribute found on the class (not the instance): guard the class attribute against
        monkeypatching, and (for non-data descriptors and plain class data) that no instance
        attribute shadows it."""
        cls = type(obj)
        _, raw = _mro_lookup(cls, name)
        if raw is _MISSING:
            return
        if not _is_data_descr(raw) and not argrooted:  # arguments: their keys are guarded
            d = getattr(obj, "__dict__", None)
            if type(d) is dict:
                self.guard(f"{name!r} not in {self.const(d)}", f"{pretty} has no instance attribute {name!r}",
                           group=(d,))
        self._class_guard(cls, name, raw, f"type({pretty}).{name}")

    def _class_guard(self, cls: type, name: str, raw, pretty: str) -> None:
        """Guard what `name` resolves to on `cls` (the raw MRO entry, or its absence)."""
        group = _class_dicts(cls)
        if not group:
            return  # immutable (C) types cannot be monkeypatched
        cc = self.const(cls)
        if raw is _MISSING:
            self.guard(f"not {self.const(hasattr)}({cc}, {name!r})", f"{pretty} is not defined", group=group)
            return
        try:
            vis = getattr(cls, name)
        except Exception:
            vis = _MISSING
        if vis is raw or (type(raw) is staticmethod and vis is raw.__func__):
            self.read(f"{cc}.{name}", pretty, vis, id(cls), name, group=group)
        else:  # classmethod or a custom descriptor: compare the raw MRO entry
            self.guard(f"{self.const(_static_lookup)}({cc}, {name!r}) is {self.const(raw)}",
                       f"{pretty} is {_short(raw)}", group=group)

    def op_load_deref(self, frame, arg, name):
        cell = _E.local_raw(frame, arg)
        e = self.ext_cells.get(id(cell))
        if e is None or (id(cell), "cell") in self.dirty:
            return
        try:
            v = cell.cell_contents
        except ValueError:
            return
        self.read(f"{e[0]}.cell_contents", e[1], v, id(cell), "cell")

    def op_store_deref(self, frame, arg, name):
        cell = _E.local_raw(frame, arg)
        if id(cell) in self.ext_cells:
            if (id(cell), "cell") not in self.dirty:
                try:
                    old = (True, cell.cell_contents)
                except ValueError:
                    old = (False, None)
                self.global_snaps[("cell", id(cell))] = (cell, None, old[0], old[1])
            self.dirty.add((id(cell), "cell"))

    def op_store_global(self, frame, arg, name):
        g = frame.f_globals
        key = (id(g), name)
        if key not in self.global_snaps:
            self.global_snaps[key] = (g, name, name in g, g.get(name))
        self.dirty.add(key)

    def op_store_attr(self, frame, arg, name):
        obj = _E.peek(frame, 0)
        if id(obj) in self.src:
            self.dirty.add((id(obj), name))
            self.stored[id(obj)].add(name)

    def op_store_subscr(self, frame, arg, argval):
        obj = _E.peek(frame, 1)
        if id(obj) in self.src:
            if _is_ndarray(obj):
                raise Unreplayable("in-place write to a numpy array")
            self.dirty.add((id(obj), "*"))
            key = _E.peek(frame, 0)
            try:
                hash(key)
                self.stored[id(obj)].add(("item", key))
            except TypeError:
                pass

    def op_binary_op(self, frame, arg, argval):
        # `arr += 1` mutates a numpy array in C without a call the tracer sees
        if arg is not None and arg >= 13:  # NB_INPLACE_* (dis._nb_ops)
            obj = _E.peek(frame, 1)
            if _is_ndarray(obj) and id(obj) in self.src:
                raise Unreplayable("in-place operator on a numpy array")

    def op_store_slice(self, frame, arg, argval):  # 3.12: [value, container, start, stop]
        obj = _E.peek(frame, 2)
        if id(obj) in self.src:
            self.dirty.add((id(obj), "*"))

    def op_kw_names(self, frame, arg, argval):
        self.kwnames[frame] = frame.f_code.co_consts[arg] if not isinstance(argval, tuple) else argval

    def op_call(self, frame, argc, argval):
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

    def op_call_ex(self, frame, arg, argval):
        has_kw = arg & 1
        f = _E.peek(frame, 1 + has_kw)
        cargs = _E.peek(frame, has_kw)
        kwargs = _E.peek(frame, 0) if has_kw else {}
        if type(cargs) is not tuple:
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

    def _on_call(self, frame, f, args, kwargs, slot: "int | None" = None):
        kind = _call_kind(f)
        so = getattr(f, "__self__", None)
        if isinstance(so, torch.nn.Module) and getattr(f, "__name__", "") in _MODULE_WALKERS \
                and id(so) in self.src:
            # parameters()/modules()/... run in torch code we do not trace: source the whole
            # subtree now so the yielded modules/parameters/buffers are known and guarded
            self._source_module_tree(so)
        if self.lazy or self.lazy_objs:
            ff = getattr(f, "__func__", f)
            traced = type(ff) is types.FunctionType and _classify(ff.__code__) == "user"
            if not traced:
                if kind == "mutator" and getattr(f, "__name__", "") in _WRITE_ONLY:
                    self.touch_deep(list(args[1:] if getattr(f, "__self__", None) is None else args)
                                    + list(kwargs.values()))
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
            return
        # uncapturable call: replay it eagerly
        self._external_call(frame, f, args, kwargs, f"call to uncapturable {_func_qualname(f)}", slot)

    def _source_module_tree(self, m, seen=None):
        seen = set() if seen is None else seen
        if id(m) in seen:
            return
        seen.add(id(m))
        s = self.src.get(id(m))
        if s is None:
            return
        for store in ("_parameters", "_buffers", "_modules"):
            d = m.__dict__[store]
            dc = self.const(d)
            self.guard(f"list({dc}) == {self.const(list(d.keys()))}", f"{s[1]}.{store}.keys() == {list(d.keys())}")
            for k, v in d.items():
                self.read(f"{dc}[{k!r}]", f"{s[1]}.{k}", v, id(m), k)
                if isinstance(v, torch.nn.Module):
                    self._source_module_tree(v, seen)

    def _fake_load_attr(self, obj, name):
        self.op_load_attr(None, None, name, obj)

    def _external_call(self, frame, f, args, kwargs, reason, slot: "int | None" = None):
        i = self.ext_seen
        self.ext_seen += 1
        if i < len(self.catchup):
            # this call already ran in a replay whose mid-replay guard then failed: its
            # side effects happened, so the program gets that call's result instead
            if slot is None:
                raise Unreplayable("internal: cannot substitute an uncapturable call")
            _E.poke(frame, slot, _Canned(self.catchup[i]))
        try:
            try:
                fe = self.expr_of(f)
            except Unreplayable:
                so = getattr(f, "__self__", None)
                if so is not None and not isinstance(so, types.ModuleType) and id(so) not in self.src \
                        and not isinstance(so, (logging_Logger, torch.Generator)):
                    raise
                fe = self.const(f)  # the same callable object is called again at replay
            ae = [self.expr_of(a) for a in args]
            ke = {k: self.expr_of(v) for k, v in kwargs.items()}
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or f"{reason}: {e}"
            return
        self._close_seg()
        k = self.ncalls
        self.ncalls += 1
        self.steps.append(("call", k, fe, ae, ke, reason, True))
        self._add_break(reason, _frame_loc(frame))
        self.ext_depth += 1

        def finish(fr):
            self.ext_depth -= 1
            res = _E.peek(fr, 0)
            self._call_result(k, res)
        finish.is_call = True
        self.pending[frame] = finish

    def _call_result(self, k, res):
        name = f"b{k}"
        if isinstance(res, torch.Tensor):
            self._source(res, name, f"<result of break {k}>", argrooted=True)
        elif _is_opaque_value(res):
            # e.g. a ContextVar token: passed on to other replayed calls, never inspected
            self.src[id(res)] = (name, f"<result of break {k}>", "opaque")
            self.keep.append(res)
        else:
            try:
                self._source(res, name, f"<result of break {k}>", argrooted=True)
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or str(e)

    # -- torch function recording --------------------------------------------------
    def on_torch(self, func, types_, args, kwargs):
        name = _fname(func)
        if func in _GLOBAL_STATE_FUNCS:
            return func(*args, **kwargs)  # grad mode is tracked per recorded op
        if name == "__iter__" and args and isinstance(args[0], torch.Tensor):
            parts = self.on_torch(torch.Tensor.unbind, types_, (args[0],), {})
            return iter(parts)
        res = func(*args, **kwargs)
        try:
            return self._after_torch(func, name, args, kwargs, res)
        except Exception as e:  # bookkeeping must never break the user's program
            self.unreplayable = self.unreplayable or f"internal: {type(e).__name__}: {e}"
            return res

    def _after_torch(self, func, name, args, kwargs, res):
        flat_res, _ = tree_flatten(res)
        has_t = any(isinstance(x, torch.Tensor) for x in flat_res)
        if not has_t and name not in ("__setitem__", "__set__", "__delitem__"):
            if name in _META_OK:
                return res
            # data-dependent (or unknown) non-tensor result: graph break
            reason = f"data-dependent operation Tensor.{name}()" if name in _DATA_DEP else \
                f"non-tensor result of {_func_qualname(func)}"
            try:
                fe = self.const(func, _func_qualname(func))
                ae = [self.expr_of(a) for a in args]
                ke = {k: self.expr_of(v) for k, v in kwargs.items()}
            except Unreplayable as e:
                self.unreplayable = self.unreplayable or str(e)
                return res
            self._close_seg()
            k = self.ncalls
            self.ncalls += 1
            self.steps.append(("call", k, fe, ae, ke, reason, False))
            self._add_break(reason, _user_location())
            self._call_result(k, res)
            return res
        if not self.uses_rng and any(w in name for w in _RNG_WORDS):
            self.uses_rng = True
        try:
            self._record(func, name, args, kwargs, res)
        except Unreplayable as e:
            self.unreplayable = self.unreplayable or str(e)
        return res

    def _seg(self):
        if self.cur is None:
            self.cur = _Seg(len(self.segs), self.grad0)
            self.segs.append(self.cur)
            self.steps.append(("graph", self.cur))
        return self.cur

    def _close_seg(self):
        seg = self.cur
        if seg is None:
            return
        if seg.grad != seg.start_grad:
            seg.graph.call_function(torch._C._set_grad_enabled, (seg.start_grad,))
            seg.grad = seg.start_grad
        self.cur = None

    def _arg_node(self, seg, t):
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
                seg.inputs.append(self._use_node(si, node))
                seg.examples.append(t)
            return ph
        s = self.src.get(id(t))
        if s is None:
            if isinstance(t, torch.nn.Parameter):
                raise Unreplayable("parameter reached through an untracked path")
            raise Unreplayable("tensor of unknown origin (created outside the traced code)")
        key = ("src", s[0])
        ph = seg.ph.get(key)
        if ph is None:
            ph = _new_placeholder(seg)
            seg.ph[key] = ph
            seg.inputs.append(s[0])
            seg.examples.append(t)
        return ph

    def _use_node(self, si, node):
        seg = self.segs[si]
        if node not in seg.out_set:
            seg.out_set.add(node)
            seg.outputs.append(node)
        return f"n{si}_{node.name}"

    def _record(self, func, name, args, kwargs, res):
        if _ambient() != self.amb0:
            raise Unreplayable("autocast / inference_mode changed inside the captured code")
        seg = self._seg()
        g = torch.is_grad_enabled()
        if g != seg.grad:
            seg.graph.call_function(torch._C._set_grad_enabled, (g,))
            seg.grad = g

        def conv(x):
            if isinstance(x, torch.Tensor):
                return self._arg_node(seg, x)
            if isinstance(x, (list, tuple)):
                r = [conv(y) for y in x]
                return type(x)(r) if type(x) in (list, tuple) else tuple(r)
            if isinstance(x, dict):
                return {k: conv(v) for k, v in x.items()}
            if type(x) in _PRIM or isinstance(x, _IMMUTABLE_CONST) or isinstance(x, (torch.dtype,)):
                return x
            if isinstance(x, (torch.Generator,)):
                raise Unreplayable("explicit torch.Generator argument")
            if callable(x) or isinstance(x, (types.ModuleType,)):
                return x
            raise Unreplayable(f"unsupported argument of type {type(x).__name__} to {name}")
        cargs = tuple(conv(a) for a in args)
        ckw = {k: conv(v) for k, v in kwargs.items()}
        target = func
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
        node = seg.graph.call_function(_fx_target(target), cargs, ckw)
        trace = _user_stack_trace()
        if trace:
            node.meta["stack_trace"] = trace
        seg.nops += 1
        if isinstance(res, torch.Tensor):
            self.env[id(res)] = (res, seg.idx, node)
            self.keep.append(res)
        elif isinstance(res, (tuple, list)):
            for i, r in enumerate(res):
                if isinstance(r, torch.Tensor):
                    gi = seg.graph.call_function(operator.getitem, (node, i))
                    self.env[id(r)] = (r, seg.idx, gi)
                    self.keep.append(r)
                elif isinstance(r, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in r):
                    raise Unreplayable(f"nested tensor containers returned by {name}")
        elif res is not None:
            raise Unreplayable(f"unsupported result type {type(res).__name__} of {name}")

    # -- value reconstruction --------------------------------------------------------
    def expr_of(self, v, depth=0):
        # In the final phase (return value + deferred writes) rebuilt mutable objects are
        # bound once, so aliasing between the result and stored state is preserved.
        memo = self.memo
        if memo is not None and type(v) not in _PRIM and not isinstance(v, torch.Tensor) and \
                id(v) not in self.src and isinstance(v, (list, dict, set, tuple)) or \
                (memo is not None and hasattr(v, "__dict__") and id(v) not in self.src and
                 not isinstance(v, (type, types.FunctionType, types.ModuleType, torch.nn.Module, torch.Tensor))):
            name = memo.get(id(v))
            if name is not None:
                return name
            e = self._expr_of(v, depth)
            name = f"_l{len(self.lets)}"
            self.lets.append((name, e))
            memo[id(v)] = name
            return name
        return self._expr_of(v, depth)

    def _expr_of(self, v, depth=0):
        if isinstance(v, torch.Tensor):
            s = self.src.get(id(v))
            if s is not None:
                return s[0]
            e = self.env.get(id(v))
            if e is not None and e[0] is v:
                return self._use_node(e[1], e[2])
            raise Unreplayable("tensor of unknown origin escapes")
        t = type(v)
        if v is None or t in _PRIM:
            return self._lit(v)
        s = self.src.get(id(v))
        if s is not None:
            return s[0]
        if depth > 8:
            raise Unreplayable("value too deep")
        if t is list:
            return "[" + ", ".join(self.expr_of(x, depth + 1) for x in v) + "]"
        if t is tuple:
            return "(" + "".join(self.expr_of(x, depth + 1) + ", " for x in v) + ")"
        if t is dict:
            return "{" + ", ".join(f"{self.expr_of(k, depth + 1)}: {self.expr_of(x, depth + 1)}"
                                   for k, x in v.items()) + "}"
        if t is set:
            return "{" + ", ".join(self.expr_of(x, depth + 1) for x in v) + "}" if v else "set()"
        if isinstance(v, _IMMUTABLE_CONST) or isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type,
                                                              types.ModuleType, torch.nn.Module)) \
                and not (isinstance(v, types.FunctionType) and v.__closure__):
            if isinstance(v, torch.nn.Module):
                raise Unreplayable("module created during the call")
            return self.const(v)
        if isinstance(v, tuple) and hasattr(type(v), "_fields"):
            return f"{self.const(t)}(" + ", ".join(self.expr_of(x, depth + 1) for x in v) + ")"
        if isinstance(v, tuple) and type(v).__module__ == "torch.return_types":
            return f"{self.const(t)}((" + "".join(self.expr_of(x, depth + 1) + ", " for x in v) + "))"
        if t is types.MethodType:
            return f"{self.const(types.MethodType)}({self.expr_of(v.__func__)}, {self.expr_of(v.__self__)})"
        if hasattr(v, "__dict__") and not any(getattr(k, "__slots__", ()) for k in t.__mro__) \
                and t.__module__ not in ("builtins",) \
                and not callable(v) and not isinstance(v, BaseException):
            d = {k: x for k, x in v.__dict__.items()}
            self.keep.append(d)  # temporaries must stay alive: the rebuild memo is keyed by id
            if isinstance(v, (set, frozenset)) or (isinstance(v, tuple) and not hasattr(t, "_fields")):
                raise Unreplayable(f"cannot reproduce container subclass {t.__name__}")
            if isinstance(v, dict):  # e.g. transformers ModelOutput (OrderedDict subclass)
                base = collections.OrderedDict if isinstance(v, collections.OrderedDict) else dict
                items = [(k, x) for k, x in dict.items(v)]
                self.keep.append(items)
                self.keep.extend(items)
                return (f"_mk({self.const(t)}, {self.expr_of(d, depth + 1)}, {self.const(base)}, "
                        f"{self.expr_of(items, depth + 1)})")
            if isinstance(v, list):
                items = list(list.__iter__(v))
                self.keep.append(items)
                return (f"_mk({self.const(t)}, {self.expr_of(d, depth + 1)}, {self.const(list)}, "
                        f"{self.expr_of(items, depth + 1)})")
            return f"_mk({self.const(t)}, {self.expr_of(d, depth + 1)})"
        if hasattr(t, "__members__"):
            return self.const(v)
        raise Unreplayable(f"cannot reproduce value of type {t.__name__}")

    # -- finalisation ------------------------------------------------------------------
    def writes(self):
        """Compare touched external state with its snapshot: list of (stmt builder)."""
        out = []
        for cv, old in self.cv_snap.items():
            now = cv.get(_MISSING)
            if now is not old:
                if now is _MISSING:
                    raise Unreplayable("ContextVar left unset")
                out.append(("cvset", self.const(cv), None, now, None))
        for key, (g, name, had, old) in self.global_snaps.items():
            if key[0] == "cell":
                cell = g
                e = self.ext_cells[id(cell)][0]
                try:
                    now = (True, cell.cell_contents)
                except ValueError:
                    now = (False, None)
                # stored by the code: replayed even if the value did not change
                if now[0]:
                    out.append(("set", f"{e}", "cell_contents", now[1], True))
                elif had:
                    raise Unreplayable("closure cell deleted")
                continue
            c = self.const(g)
            if name in g:  # stored (STORE_GLOBAL) by the code: replayed even if unchanged
                out.append(("item", c, name, g[name], False))
            elif had:
                out.append(("delitem", c, name, None, False))
        for vid, (kind, v, expr, pretty, snap) in self.snaps.items():
            stored = self.stored.get(vid, ())
            items = {k[1] for k in stored if type(k) is tuple and len(k) == 2 and k[0] == "item"}
            names = {k for k in stored if type(k) is str}
            if kind == "list":
                if len(v) >= len(snap) and all(a is b for a, b in zip(v, snap)):
                    # unchanged prefix: the stored indices (lst[i] = x), then the appended tail
                    for i in sorted(k for k in items if type(k) is int and -len(snap) <= k < len(snap)):
                        out.append(("item", expr, i, v[i], False))
                    if len(v) > len(snap):
                        out.append(("extend", expr, None, v[len(snap):], False))
                else:
                    if vid in self.lazy:  # the new contents depend on the old ones: guard them
                        self.touch(v)
                        for i, x in enumerate(snap):
                            if id(x) not in self.src and type(x) not in _PRIM:
                                raise Unreplayable("list rewritten in place")
                    out.append(("slice", expr, None, list(v), False))
            elif kind == "set":
                if v != snap:
                    add, rem = v - snap, snap - v
                    if rem:
                        out.append(("discard", expr, None, rem, False))
                    if add:
                        out.append(("update", expr, None, add, False))
            elif kind == "dict" or kind == "obj":
                d = v if kind == "dict" else v.__dict__
                de = expr if kind == "dict" else f"{expr}.__dict__"
                self._dict_diff(out, de, d, snap, force=items if kind == "dict" else names)
            elif kind == "slots" or kind == "obj+slots":
                if kind == "obj+slots":
                    self._dict_diff(out, f"{expr}.__dict__", v.__dict__, snap[0], force=names)
                    snap = snap[1]
                now = _slot_values(v)
                for k, x in now.items():
                    if k not in snap or snap[k] is not x or k in names:
                        out.append(("set", expr, k, x, None))
                if any(k not in now for k in snap):
                    raise Unreplayable("slot attribute deleted")
            else:  # module
                md, mp, mb, mm = snap
                self._dict_diff(out, f"{expr}.__dict__", v.__dict__, md,
                                skip=("_parameters", "_buffers", "_modules"), force=names)
                self._dict_diff(out, f"{expr}._parameters", v._parameters, mp, force=names)
                self._dict_diff(out, f"{expr}._buffers", v._buffers, mb, force=names)
                self._dict_diff(out, f"{expr}._modules", v._modules, mm, force=names)
        return out

    def _dict_diff(self, out, de, d, snap, skip=(), force=()):
        # dict subclasses may override __setitem__ (key normalisation...): replay the raw
        # state change through the builtin base class
        if type(d) is dict:
            setter = deleter = None
        else:
            base = collections.OrderedDict if isinstance(d, collections.OrderedDict) else dict
            setter, deleter = self.const(base.__setitem__), self.const(base.pop)
        for k, x in dict.items(d):
            if k in skip:
                continue
            if k not in snap or snap[k] is not x or k in force:
                out.append(("item", de, k, x, setter))
        for k in snap:
            if k not in d and k not in skip:
                out.append(("delitem", de, k, None, deleter))


def _short(v):
    if isinstance(v, torch.nn.Module):
        return f"<{type(v).__name__} module>"
    if isinstance(v, types.FunctionType):
        return f"<function {v.__qualname__}>"
    if isinstance(v, type):
        return f"<class {v.__qualname__}>"
    if isinstance(v, types.ModuleType):
        return f"<module {v.__name__}>"
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


def _frame_loc(frame):
    if frame is None:
        return _user_location()
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


_fx_ok = {}


def _fx_target(f):
    """FX codegen names call_function targets by module + name; some torch callables
    (e.g. Tensor dunder wrappers in torch/_tensor.py) do not resolve that way.  Such
    targets are routed through a resolvable module-level trampoline."""
    try:
        r = _fx_ok.get(f)
    except TypeError:
        r = None
    if r is not None:
        return r
    from torch.fx.node import _get_qualified_name
    ok = False
    try:
        q = _get_qualified_name(f)
        mod, _, attr = q.rpartition(".")
        import importlib
        obj = None
        parts = q.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except Exception:
                continue
            for p_ in parts[i:]:
                obj = getattr(obj, p_)
            break
        ok = obj is f or obj == f
    except Exception:
        ok = False
    if ok:
        r = f
    else:
        n = len(_fx_ok)
        name = f"_fx_target_{n}_" + "".join(ch if ch.isalnum() else "_" for ch in _fname(f))

        def tramp(*a, **k):
            return f(*a, **k)
        tramp.__name__ = tramp.__qualname__ = name
        tramp.__module__ = __name__
        globals()[name] = tramp
        r = tramp
    try:
        _fx_ok[f] = r
    except TypeError:
        pass
    return r


_MODULE_WALKERS = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                   "modules", "named_modules"}
_WRITE_ONLY = {"append", "extend", "insert", "add", "update", "clear", "__setitem__", "__delitem__",
               "discard", "sort", "reverse", "__iadd__"}
_HEAPTYPE = 1 << 9


def _pure_python_type(t):
    """True if all instance state of t lives in its __dict__ (no C-level slots)."""
    for k in t.__mro__:
        if k is object:
            continue
        if not (k.__flags__ & _HEAPTYPE):
            return False
        if getattr(k, "__slots__", ()) not in ((), [], None) and not (
                isinstance(k.__slots__, (tuple, list)) and set(k.__slots__) <= {"__dict__", "__weakref__"}):
            return False
    return True


_IMMUTABLETYPE = 1 << 8
_NDARRAY_GUARD_BYTES = 1 << 16
try:
    from torch._C._dynamo.guards import dict_version as _dict_version
except Exception:  # pragma: no cover - older torch: no version fast path
    _dict_version = None


def _mro_lookup(cls: type, name: str):
    """(defining class, raw attribute) as type lookup finds it, or (None, _MISSING)."""
    for k in cls.__mro__:
        d = k.__dict__
        if name in d:
            return k, d[name]
    return None, _MISSING


def _static_lookup(cls: type, name: str):
    return _mro_lookup(cls, name)[1]


def _is_data_descr(raw) -> bool:
    t = type(raw)
    return hasattr(t, "__set__") or hasattr(t, "__delete__")


_class_dicts_cache: "weakref.WeakKeyDictionary[type, tuple]" = weakref.WeakKeyDictionary()


def _class_dicts(cls: type) -> tuple:
    """The real dicts (not the mappingproxies) of the mutable classes in cls's MRO: a
    change to any of them can change an attribute lookup on cls."""
    r = _class_dicts_cache.get(cls)
    if r is None:
        import gc
        ds = []
        for k in cls.__mro__:
            if not k.__flags__ & _IMMUTABLETYPE:
                ref = [x for x in gc.get_referents(k.__dict__) if type(x) is dict]
                if len(ref) != 1:
                    ds = None
                    break
                ds.append(ref[0])
        r = tuple(ds) if ds is not None else ()
        try:
            _class_dicts_cache[cls] = r
        except TypeError:
            pass
    return r


_slot_cache: "weakref.WeakKeyDictionary[type, tuple]" = weakref.WeakKeyDictionary()


def _slot_names(t: type) -> tuple:
    """Names of the __slots__ members of Python classes in t's MRO."""
    r = _slot_cache.get(t)
    if r is None:
        r = tuple(n for k in t.__mro__ if k.__flags__ & _HEAPTYPE and "__slots__" in k.__dict__
                  for n, d in k.__dict__.items() if type(d) is types.MemberDescriptorType)
        try:
            _slot_cache[t] = r
        except TypeError:
            pass
    return r


def _slot_values(v) -> dict:
    out = {}
    for n in _slot_names(type(v)):
        try:
            out[n] = getattr(v, n)
        except AttributeError:
            pass
    return out


def _is_ndarray(v) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.ndarray)


def _is_opaque_value(v):
    t = type(v)
    if t in _PRIM or isinstance(v, (torch.Tensor, list, tuple, dict, set, frozenset, type, types.FunctionType,
                                    types.ModuleType, torch.nn.Module) + _IMMUTABLE_CONST):
        return False
    if hasattr(v, "__dict__") or hasattr(t, "__bool__") or hasattr(t, "__len__") or hasattr(t, "__iter__") \
            or hasattr(t, "__eq__") and t.__eq__ is not object.__eq__:
        return False
    return True


_ID_HASHED = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)
_GLOBAL_STATE_FUNCS = {torch._C._set_grad_enabled, torch.set_grad_enabled, torch.is_grad_enabled}
_DATA_DEP = {"item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__",
             "__repr__", "__str__", "__format__", "__array__", "data_ptr", "equal", "allclose",
             "__contains__", "__complex__", "is_nonzero", "__hash__"}

import threading as _threading  # noqa: E402
_REC_TLS = _threading.local()   # the recorder of this thread (for 3.12 static stack depths)
if _E is not None:
    _raw_peek = _E.peek

    class _EShim:
        NULL = _E.NULL

        @staticmethod
        def peek(frame, n):
            if _STATIC_DEPTH:
                return _E_real.peek_at(frame, _REC_TLS.rec.cur_depth, n)
            return _raw_peek(frame, n)

        @staticmethod
        def poke(frame, n, value):
            if _STATIC_DEPTH:
                return _E_real.poke_at(frame, _REC_TLS.rec.cur_depth, n, value)
            return _E_real.poke(frame, n, value)

        local_raw = staticmethod(_E.local_raw)
    _E_real = _E
    _E = _EShim


_EXTERNAL_PY_MODULES = ("logging", "warnings", "torch.random", "torch.cuda.random", "random", "time", "os",
                        "subprocess", "socket", "pdb", "builtins")
_EXTERNAL_PY_NAMES = {"manual_seed", "seed", "set_rng_state", "set_default_dtype", "set_default_device",
                      "set_printoptions", "use_deterministic_algorithms", "set_num_threads"}


def _call_kind(f):
    t = type(f)
    if t is weakref.ref:
        return "weakref"
    if t is types.FunctionType or t is types.MethodType:
        fn = f.__func__ if t is types.MethodType else f
        code = getattr(fn, "__code__", None)
        if code is not None and _classify(code) == "opaque":
            mod = getattr(fn, "__module__", "") or ""
            if fn.__name__ in _EXTERNAL_PY_NAMES or mod in _EXTERNAL_PY_MODULES or \
                    mod.split(".")[0] in ("logging", "warnings"):
                return "external"  # library code with global side effects: replay it
        return "safe"  # Python code: traced (or side-effect-free library code)
    if isinstance(f, type):
        if f.__module__ == "builtins" and f.__name__ in _SAFE_BUILTIN_NAMES or \
                issubclass(f, (list, dict, tuple, set, int, float, str, BaseException)):
            return "safe"
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
        if objc is not None and (objc.__module__.startswith("torch") or objc is object):
            return "safe"
        if objc in (list, dict, set, collections.OrderedDict):
            return "mutator" if f.__name__ in _MUTATORS else "safe"
        if objc is not None and issubclass(objc, _SAFE_SELF_TYPES):
            return "safe"
        return "external"
    mod = getattr(t, "__module__", "") or ""
    if mod.startswith("torch") or mod.split(".")[0] in _SAFE_MODULES or hasattr(f, "__call__") and \
            isinstance(getattr(t, "__call__", None), types.FunctionType):
        return "safe"  # torch callables, functools.partial, objects with Python __call__
    return "external"


def _touch_ops(*ns):
    def h(self, frame, arg, argval):
        if self.lazy:
            for n in ns:
                try:
                    o = _E.peek(frame, n)
                except IndexError:
                    continue
                if id(o) in self.lazy:
                    self.touch(o)
    return h


_HANDLERS = {
    "BINARY_SUBSCR": _touch_ops(1),
    "BINARY_SLICE": _touch_ops(2),
    "GET_ITER": _touch_ops(0),
    "CONTAINS_OP": _touch_ops(0, 1),
    "UNPACK_SEQUENCE": _touch_ops(0),
    "UNPACK_EX": _touch_ops(0),
    "LIST_EXTEND": _touch_ops(0),
    "SET_UPDATE": _touch_ops(0),
    "DICT_UPDATE": _touch_ops(0),
    "DICT_MERGE": _touch_ops(0),
    "COMPARE_OP": _touch_ops(0, 1),
    "IS_OP": _touch_ops(0, 1),
    "FORMAT_VALUE": _touch_ops(0, 1),
    "GET_LEN": _touch_ops(0),
    "MATCH_SEQUENCE": _touch_ops(0),
    "MATCH_MAPPING": _touch_ops(0),
    "MATCH_KEYS": _touch_ops(1),
    "LOAD_GLOBAL": _Recorder.op_load_global,
    "LOAD_ATTR": _Recorder.op_load_attr,
    "LOAD_METHOD": _Recorder.op_load_attr,
    "LOAD_DEREF": _Recorder.op_load_deref,
    "LOAD_CLASSDEREF": _Recorder.op_load_deref,
    "STORE_DEREF": _Recorder.op_store_deref,
    "STORE_GLOBAL": _Recorder.op_store_global,
    "DELETE_GLOBAL": _Recorder.op_store_global,
    "STORE_ATTR": _Recorder.op_store_attr,
    "DELETE_ATTR": _Recorder.op_store_attr,
    "STORE_SUBSCR": _Recorder.op_store_subscr,
    "BINARY_OP": _Recorder.op_binary_op,
    "DELETE_SUBSCR": _Recorder.op_store_subscr,
    "STORE_SLICE": _Recorder.op_store_slice,
    "KW_NAMES": _Recorder.op_kw_names,
    "CALL": _Recorder.op_call,
    "CALL_FUNCTION_EX": _Recorder.op_call_ex,
}


class _Mode(TorchFunctionMode):
    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.rec
        if rec.suspended or rec.ext_depth or rec.stopped:
            return func(*args, **kwargs)
        rec.suspended += 1
        try:
            return rec.on_torch(func, types_, args, kwargs)
        finally:
            rec.suspended -= 1


# ======================================================================================
# variants: guards + generated replay code
class _Variant:
    eager = False

    def __init__(self, rec, pre, reason=None):
        self.consts = rec.consts
        self.pre = pre                      # [(expr, pretty)]
        self.graphs = []
        self.breaks = list(rec.breaks)
        self.reason = reason
        self.hits = 0
        self.state = rec.state0
        self.guard = _compile_guard(_merge_guards(rec, pre), self.consts, self.state)
        self.grad0 = rec.grad0
        self.amb0 = rec.amb0

    def first_failure(self, args, func):
        if torch.is_grad_enabled() is not self.grad0:
            return f"torch.is_grad_enabled() == {self.grad0}"
        if _ambient() != self.amb0:
            return f"(inference_mode, autocast cpu, autocast cuda) == {self.amb0}"
        if self.state.guard is not None and not self.state.guard.check():
            return f"global torch state unchanged ({self.state.guard.reason().strip()} differs)"
        for expr, pretty in self.pre:
            g = _compile_guard([(expr, pretty)], self.consts, None)
            if not g(args, func):
                return pretty
        return None


class _EagerVariant(_Variant):
    eager = True

    def run(self, st, func, args, log=None):
        return st._call_eager(func, args, log)


def _graph_loc(gm: fx.GraphModule, text: str = "") -> str:
    """The user's file:line of the node an error names (FX's "While executing %name"),
    else of the graph's first node with a source location."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    m = re.search(r"While executing %(\w+)", text)
    if m:
        nodes = [n for n in nodes if n.name == m.group(1)] + nodes
    for n in nodes:
        t = n.meta.get("stack_trace") or ""
        lm = re.search(r'File "([^"]+)", line (\d+)', t)
        if lm:
            return f"{lm.group(1)}:{lm.group(2)}"
    return "<unknown>"


_HAS_LOC = re.compile(r" at \S+:\d+")


def _strict_backend_error(e: Exception, gm: fx.GraphModule, what: str) -> Exception:
    """strict=True: the error for a captured graph the backend did not compile, naming the
    user's file:line (kept as it is when the backend's message already names one)."""
    text = str(e)
    head, _, rest = text.partition("\n")
    if getattr(e, "propagate", False) and _HAS_LOC.search(head):
        return e
    if "DynamicOutputShape" in head or "data-dependent" in head.lower() or "DataDependent" in head:
        head += " (an operation whose output shape depends on tensor data)"
    prefix = "" if getattr(e, "propagate", False) else f"{what}: {type(e).__name__}: "
    err = _strict_error(f"{prefix}{head} at {_graph_loc(gm, text)}" + (f"\n{rest}" if rest else ""))
    err.__cause__ = e
    return err


def _compile_graph(backend, gm, examples, uses_rng, double_backward: bool = False, strict: bool = False):
    """Compile one captured graph with the user backend.  If the backend fails to compile
    it, or its compiled function fails on the first run before touching any input, the
    captured FX graph itself is run instead (same semantics, just not backend-compiled);
    strict=True raises instead."""
    try:
        with torch._C.DisableTorchFunction():
            fn = backend(gm, examples)
    except Exception as e:
        if strict:
            raise _strict_backend_error(e, gm, "the backend failed to compile a captured graph")
        if getattr(e, "propagate", False):  # the backend asked for its error to reach the user (strict mode)
            raise
        warnings.warn(f"mlircap.capture: backend failed to compile a captured graph "
                      f"({type(e).__name__}: {str(e)[:200]}); running the graph without it", RuntimeWarning)
        return gm.forward
    if fn is None:
        return gm.forward
    checked = _FirstRunChecked(fn, gm.forward, uses_rng, gm if strict else None)
    if double_backward and fn != gm.forward:
        return _HigherOrderGrad(checked, gm)
    return checked


class _HigherOrderGrad:
    """A backend-compiled graph whose gradient can itself be differentiated.

    aot_autograd-compiled graphs refuse double backward ("torch.compile with aot_autograd
    does not currently support double backward"), while the first (eager, recording) call
    of a captured function supports it.  When some input requires grad, the compiled call
    runs inside _RecomputeForHigherOrder: a plain backward calls the compiled backward; a
    backward with create_graph=True differentiates the captured FX graph re-run on the
    saved inputs, which autograd can differentiate again.  Only used for graphs that do
    not mutate or alias their inputs and draw no random numbers (_double_backward_ok).
    Cost: one autograd Function around each training-mode call of such a graph."""
    __slots__ = ("fn", "gm")

    def __init__(self, fn, gm: fx.GraphModule) -> None:
        self.fn, self.gm = fn, gm

    def __call__(self, *args):
        if torch.is_grad_enabled() and not torch._C._is_torch_function_mode_enabled():
            for a in args:
                if a.requires_grad:
                    return _RecomputeForHigherOrder.apply(self, *args)
        return self.fn(*args)


def _keep_graph() -> bool:
    """retain_graph / create_graph of the backward in progress."""
    try:
        return torch._C._autograd._get_current_graph_task_keep_graph()
    except Exception:  # pragma: no cover - older torch
        return True


class _RecomputeForHigherOrder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, runner: _HigherOrderGrad, *args):
        with torch.enable_grad():
            outs = tuple(runner.fn(*args))   # the compiled graph, with its own autograd node
        ctx.runner, ctx.outs = runner, outs
        ctx.save_for_backward(*args)
        ctx.diff = [o.requires_grad for o in outs]
        # a plain backward calls the compiled graph's backward directly (no nested
        # autograd.grad) when its node produced exactly these outputs in order
        node = next((o.grad_fn for o in outs if o.grad_fn is not None), None)
        ctx.node = node if node is not None and hasattr(node, "apply") and all(
            (o.grad_fn is node and o.output_nr == i) or not o.requires_grad for i, o in enumerate(outs)) else None
        res = tuple(o.detach() for o in outs)
        ctx.mark_non_differentiable(*[r for r, d in zip(res, ctx.diff) if not d])
        return res

    @staticmethod
    def backward(ctx, *grads):
        ins = ctx.saved_tensors
        create = torch.is_grad_enabled()
        if not create and ctx.node is not None:
            gi = ctx.node.apply(*grads)
            if isinstance(gi, tuple) and len(gi) == len(ins):
                return (None, *(g if x.requires_grad else None for g, x in zip(gi, ins)))
        if create:  # create_graph=True: a gradient that can be differentiated again
            with torch.enable_grad():
                outs = ctx.runner.gm(*ins)
        else:       # the compiled backward
            outs = ctx.outs
        pairs = [(o, g) for o, g, d in zip(outs, grads, ctx.diff) if d and o.requires_grad]
        need = [i for i, x in enumerate(ins) if x.requires_grad]
        gi = torch.autograd.grad([o for o, _ in pairs], [ins[i] for i in need], [g for _, g in pairs],
                                 allow_unused=True, retain_graph=_keep_graph(), create_graph=create) \
            if pairs and need else ()
        out = [None] * len(ins)
        for i, g in zip(need, gi):
            out[i] = g
        return (None, *out)


class _FirstRunChecked:
    __slots__ = ("fn", "fallback", "uses_rng", "checked", "strict_gm")

    def __init__(self, fn, fallback, uses_rng, strict_gm: "fx.GraphModule | None" = None):
        self.fn, self.fallback, self.uses_rng, self.checked = fn, fallback, uses_rng, False
        self.strict_gm = strict_gm   # strict=True: a failing first run raises (after the eager check)

    def __call__(self, *args):
        if self.checked:
            return self.fn(*args)
        vers = [a._version if isinstance(a, torch.Tensor) else None for a in args]
        rng = torch.get_rng_state() if self.uses_rng else None
        try:
            out = self.fn(*args)
        except Exception as e:
            if getattr(e, "propagate", False) or any(
                    isinstance(a, torch.Tensor) and a._version != v for a, v in zip(args, vers)):
                raise
            if rng is not None:
                torch.set_rng_state(rng)
            if self.strict_gm is not None:
                self.fallback(*args)   # the same error eagerly: the user's, raised as eager raises it
                raise _strict_backend_error(e, self.strict_gm, "the backend-compiled graph failed on its first run")
            warnings.warn(f"mlircap.capture: backend-compiled graph failed on its first run "
                          f"({type(e).__name__}: {str(e)[:200]}); running the captured graph without it",
                          RuntimeWarning)
            self.fn = self.fallback
            self.checked = True
            return self.fallback(*args)
        self.checked = True
        return out


def _double_backward_ok(rec: "_Recorder", seg: "_Seg") -> bool:
    """Can this graph run under _HigherOrderGrad: it takes some input that requires grad,
    makes no in-place change, draws no random numbers (a recompute would draw others) and
    returns no view of an input (a custom autograd Function would lose the view)."""
    if seg.inplace or rec.uses_rng or not any(t.requires_grad for t in seg.examples):
        return False
    out_nodes = set(seg.outputs)
    in_storages = {t.untyped_storage().data_ptr() for t in seg.examples}
    for t, si, node in rec.env.values():
        if si == seg.idx and node in out_nodes and t.untyped_storage().data_ptr() in in_storages:
            return False
    return True


def _merge_log(log: "list | None", done: list) -> list:
    """The uncapturable-call results known after a failed replay: those it ran (or took
    from `log`), then any further ones an earlier variant had already run."""
    return done + log[len(done):] if log and len(log) > len(done) else done


def _rollback(saved, rng):
    with torch.no_grad():
        for t, c in saved:
            t.copy_(c)
    if rng is not None:
        torch.set_rng_state(rng)


def _ambient():
    return (torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))


def _tensor_guards(*ts: torch.Tensor):
    """torch's C++ TensorGuards for these example tensors (static sizes and strides)."""
    from torch._C._dynamo.guards import TensorGuards
    return TensorGuards(*ts, dynamic_dims_sizes=[list(t.shape) for t in ts],
                        dynamic_dims_strides=[list(t.stride()) for t in ts])


def _merge_guards(rec: "_Recorder", pre: list) -> list:
    """The pre-call guards as the variant checks them (explain() and recompile reasons
    keep the individual ones):
    * guards that only depend on entries of the same dicts (module globals, module and
      class attributes, builtins), three or more, become one check of the dicts' version
      tags (~50 ns each) that falls back to the individual guards when a dict changed;
    * every tensor metadata check is merged into one TensorGuards call (about 80 ns a
      tensor), placed last so cheap identity checks fail first."""
    groups: dict[tuple, list[str]] = {}
    for e, _ in pre:
        k = rec.vgroup_of.get(e)
        if k is not None:
            groups.setdefault(k, []).append(e)
    out, done = [], set()
    for e, p in pre:
        k = rec.vgroup_of.get(e)
        if k is None or len(groups[k]) < 3:
            out.append((e, p))
        elif k not in done:
            done.add(k)
            slow = " and ".join(f"({x})" for x in groups[k])
            out.append((f"({rec.vgroups[k]}) or ({slow})", f"{len(groups[k])} guards on unchanged dicts"))
    pre = out
    tm = [e for e, _ in pre if e in rec.tensor_meta]
    if len(tm) < 2:
        return pre
    exprs = [rec.tensor_meta[e][0] for e in tm]
    tg = _tensor_guards(*(rec.tensor_meta[e][1] for e in tm))
    rest = [(e, p) for e, p in pre if e not in rec.tensor_meta]
    return rest + [(f"{rec.const(tg)}.check({', '.join(exprs)})", "tensor metadata")]


_CONST_REF = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?<![\w.\]])C\[(\d+)\]""")


def _bind_consts(body: str) -> "tuple[str, set[int]]":
    """`C[k]` -> a closure variable `_ck` bound once (one opcode instead of three per use);
    string literals are left alone."""
    used: set[int] = set()

    def sub(m):
        if m.group(1) is not None:
            return m.group(1)
        used.add(int(m.group(2)))
        return f"_c{m.group(2)}"
    return _CONST_REF.sub(sub, body), used


class _GlobalState:
    """The global torch state a variant was recorded under: grad mode, inference mode and
    autocast, plus (through torch's C++ GlobalStateGuard, one ~100 ns check) default
    dtype, deterministic algorithms, TF32 flags and thread count."""

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.ambient = _ambient()
        try:
            from torch._C._dynamo.guards import GlobalStateGuard
            self.guard = GlobalStateGuard()
        except Exception:  # pragma: no cover - older torch
            self.guard = None

    def expr(self) -> str:
        inf, ac_cpu, ac_cuda = self.ambient
        if self.guard is not None:  # grad mode and autocast are part of GlobalStateGuard
            return f"(_gs.check() and _inf() is {inf})"
        return f"(_ge() is {self.grad} and _inf() is {inf} and _ac('cpu') is {ac_cpu} and _ac('cuda') is {ac_cuda})"


def _compile_guard(pre, consts, state: "_GlobalState | None"):
    parts = [f"({e})" for e, _ in pre]
    if state is not None:
        parts.insert(0, state.expr())
    body, used = _bind_consts(" and ".join(parts) or "True")
    binds = "".join(f"    _c{k} = C[{k}]\n" for k in sorted(used))
    src = ("def _make(C, _ge, _inf, _ac, _gs, _dv):\n" + binds +
           "    def __guard(L, F):\n"
           "        try:\n"
           f"            return {body}\n"
           "        except Exception:\n"
           "            return False\n"
           "    return __guard\n")
    ns = {}
    exec(compile(src, "<mlircap guard>", "exec"), ns)
    return ns["_make"](consts, torch.is_grad_enabled, torch.is_inference_mode_enabled, torch.is_autocast_enabled,
                       state.guard if state is not None else None, _dict_version)


class _GraphVariant(_Variant):
    def __init__(self, rec, result, backend):
        rec.memo = {}
        ret = rec.expr_of(result)
        writes = rec.writes()
        rec.keep.append(writes)
        wexprs = []
        for kind, target, key, val, fn in writes:
            wexprs.append((kind, target, key, rec.expr_of(val) if kind != "delitem" else None, fn))
        lets = list(rec.lets)
        rec.memo = None
        rec._close_seg()
        # mutated external tensors (for rollback on a mid-replay guard failure)
        mutated = [rec.src[vid][0] for vid, (t, ver) in rec.versions.items()
                   if t._version != ver and vid in rec.src]
        rec.final_guards()
        pre = [(e, p) for pos, e, p in rec.guards if pos == 0]
        super().__init__(rec, pre)
        self.guards_all = [(pos, e, p) for pos, e, p in rec.guards]
        compiled = []
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode
            fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        except Exception:  # pragma: no cover
            fake_mode = None
        for seg in rec.segs:
            if fake_mode is not None:
                phs = [n for n in seg.graph.nodes if n.op == "placeholder"]
                for ph, ex in zip(phs, seg.examples):
                    try:
                        ph.meta["example_value"] = fake_mode.from_tensor(ex)
                    except Exception:
                        pass
            seg.graph.output(tuple(seg.outputs))
            gm = fx.GraphModule(torch.nn.Module(), seg.graph)
            seg.gm = gm
            self.graphs.append(gm)
            compiled.append(_compile_graph(backend, gm, list(seg.examples), rec.uses_rng,
                                           double_backward=_double_backward_ok(rec, seg),
                                           strict=getattr(rec.captured, "strict", False)))
        has_mid = any(pos > 0 for pos, _, _ in rec.guards)
        rollback = has_mid and (mutated or rec.uses_rng)
        # Uncapturable calls ("external" steps) run in order, exactly once per call of the
        # function: when a mid-replay guard fails after some of them ran, the miss carries
        # their results (_lg) to the next variant tried or to the re-recording, which use
        # them instead of calling again (no double print/write/append, no skipped random).
        L = ["def _make(C, B, _Miss, _mk, torch, _rollback, _merge_log):", "    def __replay(L, F, _lg=None):"]
        ind = "        "
        if any(st[0] == "call" and st[6] for st in rec.steps):
            L.append(ind + "_n = len(_lg) if _lg else 0")
        if rollback:
            L.append(ind + "_sv = [(_t, _t.detach().clone()) for _t in (" + "".join(m + ", " for m in mutated) + ")]")
            L.append(ind + ("_rng = torch.get_rng_state()" if rec.uses_rng else "_rng = None"))
            rb = "_rollback(_sv, _rng); "
        else:
            rb = ""
        midg = collections.defaultdict(list)
        for pos, e, p in rec.guards:
            if pos > 0:
                midg[pos].append(e)
        ext_done: list[str] = []
        for st in rec.steps:
            if st[0] == "graph":
                seg = st[1]
                call = f"B[{seg.idx}](" + "".join(i + ", " for i in seg.inputs) + ")"
                if seg.outputs:
                    L.append(ind + "".join(f"n{seg.idx}_{n.name}, " for n in seg.outputs) + "= " + call)
                else:
                    L.append(ind + call)
            else:
                _, k, fe, ae, ke, reason, external = st
                argl = list(ae) + [f"{kk}={vv}" for kk, vv in ke.items()]
                call = f"{fe}(" + ", ".join(argl) + ")"
                if external:
                    j = len(ext_done)
                    L.append(ind + f"b{k} = _lg[{j}] if _n > {j} else {call}")
                    ext_done.append(f"b{k}")
                else:  # a data-dependent tensor operation: no side effect, just run it
                    L.append(ind + f"b{k} = {call}")
                if midg.get(k + 1):
                    cond = " and ".join(f"({e})" for e in midg[k + 1])
                    L.append(ind + f"if not ({cond}):")
                    L.append(ind + f"    {rb}return _Miss(_merge_log(_lg, [{', '.join(ext_done)}]))")
        for name, e in lets:
            L.append(ind + f"{name} = {e}")
        for i, (kind, target, key, ve, fn) in enumerate(wexprs):
            if ve is not None:
                L.append(ind + f"_w{i} = {ve}")
        for i, (kind, target, key, ve, fn) in enumerate(wexprs):
            kl = rec._lit(key) if key is not None else None
            if kind == "item":
                L.append(ind + (f"{fn}({target}, {kl}, _w{i})" if fn else f"{target}[{kl}] = _w{i}"))
            elif kind == "delitem":
                L.append(ind + (f"{fn}({target}, {kl}, None)" if fn else f"{target}.pop({kl}, None)"))
            elif kind == "set":
                L.append(ind + f"{target}.{key} = _w{i}")
            elif kind == "extend":
                L.append(ind + f"{target}.extend(_w{i})")
            elif kind == "slice":
                L.append(ind + f"{target}[:] = _w{i}")
            elif kind == "cvset":
                L.append(ind + f"{target}.set(_w{i})")
            elif kind == "update":
                L.append(ind + f"{target}.update(_w{i})")
            elif kind == "discard":
                L.append(ind + f"{target}.difference_update(_w{i})")
        L.append(ind + f"return {ret}")
        L.append("    return __replay")
        self.source = "\n".join(L)
        ns = {}
        exec(compile(self.source, "<mlircap replay>", "exec"), ns)
        self.replay = ns["_make"](self.consts, compiled, _Miss, _mk_obj, torch, _rollback, _merge_log)
        self.mid_guards = [(pos, p) for pos, e, p in rec.guards if pos > 0]

    def run(self, st, func, args, log=None):
        return self.replay(args, func, log)


# ======================================================================================
import threading  # noqa: E402

_TLS = threading.local()
_RECORD_LOCK = threading.RLock()   # one recording run (opcode tracing) at a time in the process
_HOOK_USERS = [0]   # captured calls in flight (all threads): the frame hook stays installed meanwhile
_HOOK_LOCK = threading.Lock()


def _active():
    a = getattr(_TLS, "active", None)
    if a is None:
        a = _TLS.active = []
    return a


def _hook_cb(code, func, args):
    # The frame is dispatched to the innermost captured call of this thread only if it is
    # that call's own frame: the wrapper's function (and, for a module or bound method,
    # its own instance), and only once per call.  Other functions sharing the code object
    # (closures made by one `def`, other instances of a module class, e.g. called from a
    # forward pre-hook) and recursive frames run normally.
    a = _active()
    if not a:
        return NOT_HANDLED
    e = a[-1]
    st = e[0]
    if not e[1] or code is not st.code or func is not st.func or \
            (st.bound is not None and (not args or args[0] is not st.bound)):
        return NOT_HANDLED
    e[1] = False
    return st.dispatch(func, args)


def _call_bound(func, code, args):
    n = code.co_argcount
    pos = list(args[:n])
    i = n
    kw = {}
    for name in code.co_varnames[n:n + code.co_kwonlyargcount]:
        kw[name] = args[i]
        i += 1
    if code.co_flags & 0x04:
        pos.extend(args[i])
        i += 1
    if code.co_flags & 0x08:
        kw.update(args[i])
    return func(*pos, **kw)


class CaptureStats:
    def __init__(self):
        self.calls = 0
        self.replays = 0
        self.records = 0
        self.eager_calls = 0
        self.recompile_reasons = []


class _Captured:
    def __init__(self, fn, backend, cache_limit=8, strict=False, break_limit=64):
        self.fn = fn
        self.backend = backend
        self.cache_limit = cache_limit
        self.strict = bool(strict)
        self.break_limit = break_limit
        self.is_module = isinstance(fn, torch.nn.Module)
        func = type(fn).forward if self.is_module else fn
        # the instance whose frames are this capture's: the module, or a bound method's self
        self.bound = fn if self.is_module else getattr(fn, "__self__", None) \
            if isinstance(fn, types.MethodType) else None
        func = getattr(func, "__func__", func)
        self.func = func if isinstance(func, types.FunctionType) else None
        self.code = self.func.__code__ if self.func is not None else None
        self.variants = []
        self.warned = False
        self.warned_breaks = False
        self.stats = CaptureStats()
        self.fail_counts = collections.Counter()
        if self.code is not None:
            c = self.code
            n = c.co_argcount + c.co_kwonlyargcount + bool(c.co_flags & 0x04) + bool(c.co_flags & 0x08)
            self.argnames = list(c.co_varnames[:n])
            if self.code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):  # generator/coroutine
                self.func = self.code = None
                self.uncapturable = "generator or coroutine functions are not captured"
        if self.code is None and not hasattr(self, "uncapturable"):
            self.uncapturable = f"{type(fn).__name__} objects are not captured (a Python function or " \
                                f"nn.Module is)"
        if self.code is not None and _E is not None:
            _E_real.register_code(self.code)

    # user-facing call
    def __call__(self, *args, **kwargs):
        if self.code is None:
            if self.strict:
                raise _strict_error(f"{_fn_name(self.fn)} would run eagerly: {self.uncapturable}")
            return self.fn(*args, **kwargs)
        if _E is not None:
            active = _active()
            active.append([self, True])   # [capture, its own frame not dispatched yet]
            with _HOOK_LOCK:
                _HOOK_USERS[0] += 1
                if _HOOK_USERS[0] == 1:
                    _E_real.set_callback(_hook_cb)
            try:
                return self.fn(*args, **kwargs)
            finally:
                active.pop()
                with _HOOK_LOCK:
                    _HOOK_USERS[0] -= 1
                    if _HOOK_USERS[0] == 0:
                        _E_real.set_callback(None)
        # Pure-Python fallback (extension could not be built/imported): without the stack
        # peek helper external reads cannot be observed soundly, so we run eagerly.
        if self.strict:
            raise _strict_error(f"{self._where()} would run eagerly: the C++ frame hook is unavailable "
                                f"({_ext.error()})")
        if not self.warned:
            self.warned = True
            warnings.warn(f"mlircap.capture: C++ frame hook unavailable ({_ext.error()}); "
                          f"running {self.code.co_name} eagerly", RuntimeWarning, stacklevel=2)
        self.stats.eager_calls += 1
        return self.fn(*args, **kwargs)

    def _where(self) -> str:
        return f"{self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno})"

    def dispatch(self, func, args):
        self.stats.calls += 1
        log = None  # results of uncapturable calls already run by a replay that missed
        for v in self.variants:
            if v.guard(args, func):
                r = v.run(self, func, args, log)
                if type(r) is not _Miss:
                    if not v.eager:
                        self.stats.replays += 1
                    v.hits += 1
                    return r
                log = r.log or log
                self.fail_counts["a data-dependent value (mid-replay guard)"] += 1
        reason = None
        if self.variants:
            v = self.variants[-1]
            reason = v.first_failure(args, func) or "a data-dependent value changed (mid-replay guard)"
            self.fail_counts[reason] += 1
        if len(self.variants) >= self.cache_limit:
            if self.strict:
                worst = self.fail_counts.most_common(1)[0][0] if self.fail_counts else reason
                raise _strict_error(f"cache_limit ({self.cache_limit}) reached for {self._where()}: it would "
                                    f"run eagerly. Guard that kept failing: {worst}")
            if not self.warned:
                self.warned = True
                worst = self.fail_counts.most_common(1)[0][0] if self.fail_counts else reason
                warnings.warn(f"mlircap.capture: cache_limit ({self.cache_limit}) reached for "
                              f"{self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno}); "
                              f"running eagerly from now on. Guard that kept failing: {worst}",
                              RuntimeWarning, stacklevel=3)
            return self._call_eager(func, args, log)
        if reason is not None:
            self.stats.recompile_reasons.append(reason)
            _logs.log("recompiles", f"{self.code.co_name}: {reason}")
        return self._record(func, args, log)

    def _call_eager(self, func, args, log: "list | None" = None):
        self.stats.eager_calls += 1
        if log:  # some uncapturable calls already ran: the tracer substitutes their results
            return self._record(func, args, log, store=False)
        return _call_bound(func, self.code, args)

    def _record(self, func, args, catchup: "list | None" = None, store: bool = True):
        """Run the function for real under the tracer and (store) add the variant it
        records.  `catchup`: results of the first uncapturable calls, which already ran."""
        if store:
            self.stats.records += 1
        # One recording run at a time in the process: CPython's tracing (3.12: code object
        # instrumentation) is process-wide, and opcode tracing in two threads at once crashed
        # there.  Re-entrant: a recording nested in this thread's recording still runs; a thread
        # that finds another one recording waits for it (the lock releases the GIL meanwhile).
        with _RECORD_LOCK:
            rec = _Recorder(self, func, self.code, args, self.argnames, catchup)
            prev_rec = getattr(_REC_TLS, "rec", None)
            _REC_TLS.rec = rec
            old = sys.gettrace()
            with _Mode(rec):
                if PY312:  # 3.12.0/1 only emit opcode events if a frame asked before settrace()
                    sys._getframe().f_trace_opcodes = True
                sys.settrace(rec.global_trace)
                try:
                    result = _call_bound(func, self.code, args)
                finally:
                    sys.settrace(old)
                    _REC_TLS.rec = prev_rec
        if rec.break_overflow and not self.warned_breaks and not self.strict:
            self.warned_breaks = True
            warnings.warn(f"mlircap.capture: {self._where()} broke the graph more than {self.break_limit} times "
                          f"in one call ({rec.break_overflow}); running it eagerly for these arguments",
                          RuntimeWarning, stacklevel=4)
        if self.strict:
            self._check_strict(rec)
        if not store:
            return _plain(result)
        try:
            if rec.unreplayable:
                raise Unreplayable(rec.unreplayable)
            v = _GraphVariant(rec, result, self.backend)
        except Exception as e:  # Unreplayable, or a backend / codegen failure: never crash
            if getattr(e, "propagate", False):  # strict mode: the backend's error reaches the user
                raise
            if self.strict:
                raise _strict_error(f"{self._where()} would run eagerly: {type(e).__name__}: {e}") from e
            pre = [(ex, p) for pos, ex, p in rec.guards if pos == 0]
            try:
                v = _EagerVariant(rec, pre, reason=str(e))
            except Exception:
                v = None
        if v is not None:
            self.variants.append(v)
            if _logs.enabled("guards"):
                _logs.log("guards", f"{self.code.co_name} variant {len(self.variants)}: " + "; ".join(p for _, p in v.pre))
        return _plain(result)

    def _check_strict(self, rec: "_Recorder") -> None:
        """strict=True: every part of the call must run compiled.  Capture giving up
        (uncapturable values or side effects, too many graph breaks) raises, naming the
        cause and the user's file:line.  A graph break alone does not: the graphs on
        both sides of it are compiled, and what runs between them is the user's Python."""
        if rec.unreplayable:
            raise _strict_error(f"{self._where()} would run eagerly (strict=True): capture gave up: "
                                f"{rec.unreplayable} at {rec.unreplayable_loc}")

    # introspection
    @property
    def graph_count(self):
        return sum(len(v.graphs) for v in self.variants)

    @property
    def recompiles(self):
        return max(0, len(self.variants) - 1)


def _plain(x):
    return x


def capture(fn, backend, *, cache_limit=8, strict=False, break_limit=64):
    """Return a callable behaving like `fn` whose tensor graphs run through `backend`.

    cache_limit: variants (guard sets) per function before it runs eagerly.
    break_limit: graph breaks in one call past which that call stops recording and the
    function runs eagerly for these arguments (one warning names the cause).
    strict: raise MlircapCompileError (mlircap.backend) instead of running any part of
    the program uncompiled: graph breaks, capture giving up on a function or a side
    effect, cache_limit, a backend that fails on a captured graph."""
    c = _Captured(fn, backend, cache_limit, strict=strict, break_limit=break_limit)
    if isinstance(fn, torch.nn.Module):
        wrapper = _CapturedModuleCall(c)
    else:
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return c(*args, **kwargs)
    wrapper._mlircap_capture = c
    wrapper.explain = lambda: ExplainOutput(c)
    return wrapper


class _CapturedModuleCall:
    """The captured callable of an nn.Module: behaves like the module.  Attribute reads,
    writes and deletes reach the module; module methods that return the module itself
    (eval, train, to, ...) return this wrapper, so the captured path is kept."""
    _OWN_ATTRS = frozenset({"_mlircap_capture", "module", "explain"})

    def __init__(self, c: "_Captured") -> None:
        object.__setattr__(self, "_mlircap_capture", c)
        object.__setattr__(self, "module", c.fn)

    def __call__(self, *args, **kwargs):
        return self._mlircap_capture(*args, **kwargs)

    def explain(self) -> "ExplainOutput":
        return ExplainOutput(self._mlircap_capture)

    def __getattr__(self, name: str):
        d = self.__dict__
        if "module" not in d:
            raise AttributeError(name)
        m = d["module"]
        v = getattr(m, name)
        if isinstance(v, types.MethodType) and v.__self__ is m:
            meth = v

            @functools.wraps(meth)
            def call(*args, **kwargs):
                r = meth(*args, **kwargs)
                return self if r is m else r
            return call
        return v

    def __setattr__(self, name: str, value) -> None:
        if name in _CapturedModuleCall._OWN_ATTRS:
            object.__setattr__(self, name, value)
        else:
            setattr(self.__dict__["module"], name, value)

    def __delattr__(self, name: str) -> None:
        if name in _CapturedModuleCall._OWN_ATTRS:
            object.__delattr__(self, name)
        else:
            delattr(self.__dict__["module"], name)


# ======================================================================================
class ExplainOutput:
    def __init__(self, c):
        self.graphs = [g for v in c.variants for g in v.graphs]
        self.graph_count = len(self.graphs)
        self.variants = len(c.variants)
        self.breaks = [b for v in c.variants for b in v.breaks]
        self.break_count = len(self.breaks)
        self.guards = [p for v in c.variants for _, p in v.pre]
        self.mid_guards = [p for v in c.variants if not v.eager for _, p in v.mid_guards]
        self.recompile_reasons = list(c.stats.recompile_reasons)
        self.eager_reasons = [v.reason for v in c.variants if v.eager]
        self.op_count = sum(len([n for n in g.graph.nodes if n.op == "call_function"]) for g in self.graphs)
        self.hook = HOOK

    def __str__(self):
        L = [f"mlircap.capture explain (hook: {self.hook})",
             f"Graph count: {self.graph_count}", f"Graph break count: {self.break_count}",
             f"Op count: {self.op_count}", f"Variants: {self.variants}"]
        if self.breaks:
            L.append("Break reasons:")
            for i, (r, loc) in enumerate(self.breaks):
                L.append(f"  {i + 1}. {r}\n     at {loc}")
        if self.eager_reasons:
            L.append("Ran eagerly because:")
            L += [f"  - {r}" for r in self.eager_reasons]
        L.append("Guards:")
        L += [f"  - {g}" for g in self.guards]
        if self.mid_guards:
            L.append("Guards checked after breaks:")
            L += [f"  - {g}" for g in self.mid_guards]
        if self.recompile_reasons:
            L.append("Recompile reasons:")
            L += [f"  - {r}" for r in self.recompile_reasons]
        return "\n".join(L)

    __repr__ = __str__


def explain(fn, backend=None):
    """`explain(fn)(*args)` -> ExplainOutput: graphs, each break with its reason and user
    source file:line, guards in readable form, recompile reasons.  The returned runner keeps
    its cache, so calling it again with other arguments accumulates variants and
    recompile reasons: `ex = explain(f); ex(a); print(ex(b))`."""
    backend = backend or (lambda gm, ex: gm.forward)
    w = capture(fn, backend)

    def run(*args, **kwargs):
        w(*args, **kwargs)
        return ExplainOutput(w._mlircap_capture)
    run.captured = w
    return run
