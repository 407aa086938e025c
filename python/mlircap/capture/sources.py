"""Sources of tracked values: guarding a value read from an external location
(`_SourceMixin._source`, `read`); lazily guarded containers and objects and snapshots are
lazy_sources.py's, what an uncapturable call that may write changes epochs.py's."""
from __future__ import annotations

import array
import collections
import functools
import re
import types
from typing import Any
import weakref

import torch

from .base import Unreplayable
from .guard_kinds import (
    Equals, FunctionCode, Is, Keys, NdarrayContents, Number, SameAs, TypeIs, TypeLen,
)
from .classify import _C_BUFFERS, _ID_HASHED, _IMMUTABLE_CONST, _PRIM, _classify, _ffi_object
from .functorch_calls import transform_call
from .locations import _short
from .lazy_sources import _LazySourceMixin
from .epochs import _EpochMixin
from .typeinfo import (
    _NDARRAY_GUARD_BYTES, _dataclass_fields, _np_float, _is_constant_value, _is_frozen_dataclass, _is_ndarray, _pure_python_type,
    _slot_names,
)


_BARE_CONST = re.compile(r"C\[\d+\]")


def plain_subclass(t: type) -> bool:
    """A Python subclass of torch.Tensor that keeps torch's default __torch_function__ and no
    __torch_dispatch__ (`class Tagged(torch.Tensor)` with methods of its own): its ops run as a
    plain tensor's, eager's default __torch_function__ then making each tensor result an
    instance of it (`as_subclass`), which the replay does to the graph's outputs (replay.py)."""
    tf = getattr(getattr(t, "__torch_function__", None), "__func__", None)
    return t is not torch.Tensor and issubclass(t, torch.Tensor) and not issubclass(t, torch.nn.Parameter) and \
        tf is torch.Tensor.__torch_function__.__func__ and \
        getattr(t, "__torch_dispatch__", None) is torch._C._disabled_torch_dispatch_impl and \
        not issubclass(t, torch.nn.parameter.UninitializedTensorMixin)


def _propagating_subclass(t: type) -> bool:
    """A torch.Tensor subclass whose type torch's ops carry to their results (the default
    __torch_function__, or its own; or its own __torch_dispatch__: a wrapper subclass, whose
    ops run its Python per aten op and which may have no storage of its own, DTensor- or
    TwoTensor-like: a replay handed one to compiled code, which read its data pointer and
    segfaulted); not nn.Parameter (its ops give plain tensors) nor a lazy module's
    uninitialized parameter or buffer."""
    if t is torch.Tensor or issubclass(t, torch.nn.Parameter) or \
            issubclass(t, torch.nn.parameter.UninitializedTensorMixin):
        return False
    return getattr(t, "__torch_function__", None) is not torch._C._disabled_torch_function_impl or \
        getattr(t, "__torch_dispatch__", None) is not torch._C._disabled_torch_dispatch_impl


class _SourceMixin(_LazySourceMixin, _EpochMixin):
    """Sources for `_Recorder`: `_source` guards a value read from an external location;
    lazily guarded containers/objects are guarded when first used; snapshots for writes."""

    def _source_ndarray(self, v: Any, expr: str, pretty: str, argrooted: bool) -> None:
        """A numpy array is mutable in place without any write the tracer sees: guard its
        contents (small arrays) or give up capturing."""
        if v.dtype.hasobject or v.nbytes > _NDARRAY_GUARD_BYTES:
            raise Unreplayable(f"numpy array {pretty} ({v.dtype}, {v.nbytes} bytes) read: its contents "
                               f"are not guarded above {_NDARRAY_GUARD_BYTES} bytes")
        self.guard(NdarrayContents(expr, pretty, type(v), v.dtype, tuple(v.shape), v.tobytes()))
        self.src[id(v)] = (expr, pretty, argrooted)
        self.keep.append(v)

    def _source(self, v: Any, expr: str, pretty: str, argrooted: bool | str, depth: int = 0,
                group: tuple | None = None) -> None:
        """v has just been read from an external location described by expr: guard it.
        `group`: the dicts expr reads from (see guard()); only guards that depend on
        nothing but that read use it."""
        t = type(v)
        if v is None or t is bool:
            self.guard(Is(expr, pretty, v, repr(v)), group=group)
            return
        if t is str:
            self.guard(Equals(expr, pretty, v), group=group)
            return
        if t in (int, float, bytes, complex):
            self.guard(Number(expr, pretty, v, t), group=group)
            return
        if isinstance(v, (int, float, complex)) and t.__module__ == "numpy" or _np_float(v):
            # numpy scalars (np.float64 subclasses float; np.float32 / float16 do not, and were
            # guarded by identity: a new object each call, never equal): immutable, by value
            self.guard(Number(expr, pretty, v, t), group=group)
            return
        vid = id(v)
        if vid in self.own_state:
            raise Unreplayable(f"{pretty}: an optimizer's state read after its step or zero_grad wrote it")
        if vid in self.src:
            old = self.src[vid][0]
            if old != expr:  # same object reached through another path: guard aliasing
                # (in expr's dict group only when the other path is a constant: `C[a]['x'] is
                # C[b]['y']` also depends on dict a)
                self.guard(SameAs(expr, pretty, old, self.src[vid][1]),
                           group=group if _BARE_CONST.fullmatch(old) else None)
            return
        self.keep.append(v)
        if isinstance(v, torch.Tensor):
            if _propagating_subclass(t) and not (argrooted and plain_subclass(t)):
                # eager's results of ops on it are of the subclass (and its __torch_function__
                # runs for each); a graph's are plain tensors (returned as torch.Tensor: a
                # user's methods on the subclass were gone)
                raise Unreplayable(f"a tensor of the torch.Tensor subclass {t.__qualname__}")
            if argrooted:
                if expr.startswith("L["):
                    self.arg_tensors.append(expr)
                self.guard(self._tensor_match(expr, pretty, v))
                self.src[vid] = (expr, pretty, argrooted)
            elif isinstance(v, torch.nn.Parameter):
                # identity (so replay passes the constant) and metadata: `p.data = ...`,
                # `.to()`, `resize_` keep the object but change shape, dtype, ...
                c = self.const(v, pretty)
                self.guard(Is(expr, pretty, v, "the same tensor (id)"), group=group)
                self.guard(self._tensor_match(c, pretty, v))
                self.src[vid] = (c, pretty, False)
            else:
                # buffers / plain tensor attributes / globals: read through expr at replay,
                # so any tensor with the same metadata will do
                self.guard(self._tensor_match(expr, pretty, v))
                self.src[vid] = (expr, pretty, False)
            if not v.is_inference():   # (written only inside inference mode: a replayed step)
                self.versions[vid] = (v, v._version)
            return
        if isinstance(v, _IMMUTABLE_CONST):
            self.guard(Equals(expr, pretty, v), group=group)
            return
        if isinstance(v, _C_BUFFERS):
            # a mutable C buffer handed in (array.array, bytearray, a ctypes array, structure or
            # number): its items are read by C code (subscripts, len, `.value`), which the
            # tracer does not see; guarded by contents, byte for byte (and array's item type)
            self.guard(TypeIs(expr, f"type({pretty})", t))
            if isinstance(v, array.array):
                self.guard(Equals(f"{expr}.typecode", f"{pretty}.typecode", v.typecode))
            self.guard(Equals(f"bytes({expr})", f"bytes({pretty})", bytes(v)))
            self.src[vid] = (expr, pretty, argrooted)
            self.keep.append(v)
            return
        if argrooted and _ffi_object(v):
            # a ctypes library, foreign function or C data handed in (an argument, a
            # continuation's stack value): opaque, like an uncapturable call's result of it
            # (its functions are replayed calls; each CDLL has a class of its own, which an
            # attribute guard would never see again)
            self.guard(TypeIs(expr, f"type({pretty})", t))
            self.src[vid] = (expr, pretty, "opaque")
            return
        if _is_ndarray(v):
            self._source_ndarray(v, expr, pretty, argrooted)
            return
        if isinstance(v, torch.nn.Module) and id(v) in self.fresh_modules:
            self._source_fresh_module(v, expr, pretty)   # (module_factories.py)
            return
        if t is types.BuiltinMethodType and isinstance(v.__self__, type):
            # a classmethod of a C class (`dict.fromkeys`, `int.from_bytes`): each read binds a
            # new method object, so an identity guard failed on every call (a recompile per call
            # until cache_limit: transformers' Mamba forward reads dict.fromkeys); equal methods
            # are those of the same class and C function
            self.guard(Equals(expr, pretty, v, exact=t), group=group)
            self.src[vid] = (self.const(v, pretty), pretty, False)
            return
        if argrooted and transform_call(v):
            # the function torch.func.vjp / linearize return (a closure of torch's, new each
            # call): an opaque value, called by a replayed call (functorch_calls); guarded by
            # identity, every call recorded again
            self.guard(TypeIs(expr, f"type({pretty})", t))
            self.src[vid] = (expr, pretty, "opaque")
            self.keep.append(v)
            return
        if isinstance(v, (torch.nn.Module, types.FunctionType, types.BuiltinFunctionType,
                          types.ModuleType, type, types.MethodWrapperType,
                          types.WrapperDescriptorType, types.MethodDescriptorType)) or \
                isinstance(v, (weakref.ref,)) or hasattr(type(v), "__members__"):
            c = self.const(v, pretty)
            self.guard(Is(expr, pretty, v, _short(v)), group=group)
            self.src[vid] = (c, pretty, False)
            if isinstance(v, types.FunctionType) and _classify(v.__code__) == "user":
                # traced code: replacing __code__ / __defaults__ of the same function object
                # changes what it does
                self.guard(FunctionCode(c, pretty, v.__code__, v.__defaults__, v.__kwdefaults__))
            if isinstance(v, torch.nn.Module):
                self._snap(v, c, pretty)
                if isinstance(v, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict,
                                  torch.nn.ParameterList, torch.nn.ParameterDict)):
                    mods = v._modules if not isinstance(v, (torch.nn.ParameterList, torch.nn.ParameterDict)) else v._parameters
                    an = "_modules" if mods is v._modules else "_parameters"
                    self.guard(Keys(f"{c}.{an}", f"{pretty}.{an}", tuple(mods.keys())))
                    # (the same dict: `del ml[i]` rebuilds `_modules`, so the items below,
                    # read from the recorded dict, would not be the container's)
                    self.guard(Is(f"{c}.{an}", f"{pretty}.{an}", mods, "the same dict"))
                    mc = self.const(mods)
                    for k, m in mods.items():
                        self._source(m, f"{mc}[{k!r}]", f"{pretty}[{k!r}]", False, depth + 1)
            elif isinstance(v, types.FunctionType) and v.__closure__:
                for i, (cell, n) in enumerate(zip(v.__closure__, v.__code__.co_freevars)):
                    self.ext_cells[id(cell)] = (f"{c}.__closure__[{i}]", f"{pretty}.<closure {n}>")
                    self.keep.append(cell)
            return
        if t is types.MethodType:
            self.guard(TypeIs(expr, pretty, types.MethodType))
            self._source(v.__func__, f"{expr}.__func__", f"{pretty}.__func__", argrooted, depth + 1)
            self._source(v.__self__, f"{expr}.__self__", f"{pretty}.__self__", argrooted, depth + 1)
            return
        if depth > 6:
            raise Unreplayable(f"structure too deep at {pretty}")
        if t is tuple and not argrooted and len(v) <= 8 and all(type(x) in (int, str) for x in v):
            # e.g. conv stride/padding tuples read from module attributes
            self.guard(Equals(expr, pretty, v, exact=tuple), group=group)
            return
        if t is tuple and not argrooted and 0 < len(v) <= 64 and \
                any(type(x) is float and x == x or _np_float(x) for x in v) and \
                all(x is None or type(x) in _PRIM or _np_float(x) for x in v):
            # numbers with floats (`self.loss_weights = (1.0, 0.5)`): guarded where the program
            # uses them, as a list is (a float item read by a subscript: flow_roots._flow_item)
            self.src[vid] = (expr, pretty, argrooted)
            self.snaps[vid] = ("tuple", v, expr, pretty, list(v))
            self.lazy[vid] = (v, expr, pretty, depth, self.ncalls, group)
            return
        if isinstance(v, (list, dict, set, collections.deque)) and not argrooted:
            if len(v) > 512:
                raise Unreplayable(f"container too large at {pretty}")
            self.src[vid] = (expr, pretty, argrooted)
            self._snap(v, expr, pretty)
            self.lazy[vid] = (v, expr, pretty, depth, self.ncalls, group)
            return
        if isinstance(v, (list, tuple, dict, set, collections.deque)):
            n = len(v)
            if n > 512:
                raise Unreplayable(f"container too large at {pretty}")
            self.guard(TypeLen(expr, pretty, t, n))
            self.src[vid] = (expr, pretty, argrooted)
            if isinstance(v, collections.deque):
                self.guard(Equals(f"{expr}.maxlen", f"{pretty}.maxlen", v.maxlen))
            if isinstance(v, (list, tuple, collections.deque)):
                for i, x in enumerate(v):
                    self._source(x, f"{expr}[{i}]", f"{pretty}[{i}]", argrooted, depth + 1)
            elif isinstance(v, dict):
                keys = list(v.keys())
                self.guard(Keys(expr, pretty, tuple(keys)))
                for k in keys:
                    self._source(dict.__getitem__(v, k), self._item(v, expr, k), f"{pretty}[{k!r}]",
                                 argrooted, depth + 1)
            else:
                if all(type(x) in _PRIM or isinstance(x, _ID_HASHED) for x in v):
                    self.guard(Equals(expr, pretty, set(v)))
                else:
                    raise Unreplayable(f"set of objects at {pretty}")
            if t is not tuple:
                self._snap(v, expr, pretty)
            return
        if t is functools.partial:
            self.guard(TypeIs(expr, pretty, t))
            self.src[vid] = (expr, pretty, argrooted)
            self._source(v.func, f"{expr}.func", f"{pretty}.func", True, depth + 1)
            self._source(v.args, f"{expr}.args", f"{pretty}.args", True, depth + 1)
            self._source(v.keywords, f"{expr}.keywords", f"{pretty}.keywords", True, depth + 1)
            return
        if _is_frozen_dataclass(v) and _is_constant_value(v):
            # an immutable options object: guarded by type and field values, so an equal one
            # made for every call is no recompile (graphs hold it as a constant)
            self.guard(TypeIs(expr, pretty, t))
            self.src[vid] = (expr, pretty, argrooted)
            for f in _dataclass_fields(t):
                self._source(getattr(v, f), f"{expr}.{f}", f"{pretty}.{f}", argrooted, depth + 1)
            return
        if hasattr(v, "__dict__") and not isinstance(v, type) and not _pure_python_type(t):
            # C-implemented type with an instance dict (SimpleNamespace, ...): identity; its
            # attribute reads are guarded where they happen (op_load_attr), its instance
            # dict and slots are snapshotted for writes
            c = self.const(v, pretty)
            self.guard(Is(expr, pretty, v, _short(v)), group=group)
            self.src[vid] = (c, pretty, False)
            if type(getattr(v, "__dict__", None)) is dict:
                self._snap(v, c, pretty)
            return
        if hasattr(v, "__dict__") and not isinstance(v, type) and not argrooted and \
                type(getattr(v, "__dict__", None)) is dict:
            # object reached through a module attribute / global / cell (configs, helpers):
            # identity, then attribute reads are guarded lazily like nn.Module attributes
            c = self.const(v, pretty)
            self.guard(Is(expr, pretty, v, _short(v)), group=group)
            self.src[vid] = (c, pretty, False)
            self._snap(v, c, pretty)
            self.lazy_objs[vid] = (v, self.ncalls)
            return
        if hasattr(v, "__dict__") and not isinstance(v, type):
            # plain custom object / dataclass argument: guard its type and whole instance dict
            self.guard(TypeIs(expr, pretty, t))
            self.src[vid] = (expr, pretty, argrooted)
            d = v.__dict__
            keys = list(d.keys())
            self.guard(Keys(f"{expr}.__dict__", f"vars({pretty})", tuple(keys)))
            for k in keys:
                self._source(d[k], f"{expr}.__dict__[{k!r}]", f"{pretty}.{k}", argrooted, depth + 1)
            self._snap(v, expr, pretty)
            return
        # object without __dict__ (__slots__ classes, C objects): identity; attribute reads
        # are guarded where they happen (op_load_attr), slot values snapshotted for writes
        c = self.const(v, pretty)
        self.guard(Is(expr, pretty, v, _short(v)), group=group)
        self.src[vid] = (c, pretty, False)
        if _slot_names(t):
            self._snap(v, c, pretty)

    def read(self, expr: str, pretty: str, v: Any, owner_id: int | None = None, key: object = None,
             group: tuple | None = None) -> None:
        if owner_id is not None and (owner_id, key) in self.dirty:
            return
        e = self.read_exprs.get(expr)
        if e == self.epoch:
            return
        self.read_exprs[expr] = self.epoch
        if e is not None and id(v) in self.src:
            self._reread(expr, pretty, v)
            return
        self._source(v, expr, pretty, argrooted=False, group=group)
