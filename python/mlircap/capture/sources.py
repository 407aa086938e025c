"""Sources of tracked values: guarding a value read from an external location
(`_SourceMixin._source`), lazily guarded containers and objects, snapshots."""
from __future__ import annotations

import array
import collections
import functools
import re
import types
from collections.abc import Iterable
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
from .typeinfo import (
    _NDARRAY_GUARD_BYTES, _dataclass_fields, _np_float, _is_constant_value, _is_frozen_dataclass, _is_ndarray, _pure_python_type,
    _slot_names, _slot_values,
)


_BARE_CONST = re.compile(r"C\[\d+\]")
# the name the replay binds an object read through a location to, before an uncapturable
# call that may write any state (after it, the location may hold another object)
_BOUND = re.compile(r"_r\d+")
# a location path (`C[1]['G']`, `L[0].cfg`, `b3[0]`, `_r0[1]`: attributes and subscripts with
# literal keys from a root): what is bound
_PATH = re.compile(r"(?:[CLF]\[\d+\]|F|b\d+|_r\d+)(?:\.\w+|\[[^\[\]()]*\])+")


def _dict_items(d: dict) -> dict:
    """The items d holds, in its iteration order, without calling a subclass's __getitem__:
    `dict(d)` of a mapping that is not a plain dict reads each item through it, and HF's
    `ACT2FN` (an OrderedDict whose __getitem__ instantiates the activation class it holds)
    then made a module per snapshot, guarded by identity against the class the replay reads
    (a recompile per call)."""
    return dict(d) if type(d) is dict else {k: dict.__getitem__(d, k) for k in d}


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


class _SourceMixin:
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

    # Lazy containers: lists/dicts/sets reached through attributes, globals or cells are
    # only guarded (from their snapshot, i.e. the pre-call state) once the program reads
    # them; append-only / store-only use (logs, caches, histories) needs no guard at all.
    def touch(self, obj: object) -> None:
        if self.flow_stores:   # a list item this call stored, used otherwise (flow_writes.py)
            self._flow_items_written(obj)
        if self.float_items and self._flow_items_escape(obj):
            return   # (a list whose float items flow_items.py follows: they are guarded now)
        lz = self.lazy.pop(id(obj), None)
        if lz is None:
            return
        v, expr, pretty, depth, pos, group = lz[:6]
        kind, _, _, _, snap = self.snaps[id(v)]
        if len(lz) > 6:   # its contents after an uncapturable call (_new_epoch)
            snap = lz[6]
        t = type(v)
        # a dict read from a dict group's entry: what is guarded here depends on that entry
        # and on this dict's contents only
        group = group + (v,) if group and t is dict else None
        saved = self.ncalls
        self.ncalls = pos
        try:
            n = len(snap)
            self.guard(TypeLen(expr, pretty, t, n), group=group)
            if kind == "deque":
                self.guard(Equals(f"{expr}.maxlen", f"{pretty}.maxlen", v.maxlen))
            if kind == "list" or kind == "deque" or kind == "tuple":
                for i, x in enumerate(snap):
                    self._source(x, f"{expr}[{i}]", f"{pretty}[{i}]", False, depth + 1)
            elif kind == "dict":
                keys = list(snap.keys())
                self.guard(Keys(expr, pretty, tuple(keys)), group=group)
                for k in keys:
                    self._source(snap[k], self._item(v, expr, k), f"{pretty}[{k!r}]", False, depth + 1, group)
            else:
                if all(type(x) in _PRIM or isinstance(x, _ID_HASHED) for x in snap):
                    self.guard(Equals(expr, pretty, set(snap)))
                else:
                    raise Unreplayable(f"set of objects at {pretty}")
        finally:
            self.ncalls = saved

    def full_obj(self, o: object) -> None:
        """A lazily guarded object is used by code we do not trace: guard all of it."""
        v, pos, *now = self.lazy_objs.pop(id(o))
        _, _, expr, pretty, snap = self.snaps[id(o)]
        if now:   # its attributes after an uncapturable call (_new_epoch)
            snap = now[0]
        d = v.__dict__
        dc = self.const(d)
        saved = self.ncalls
        self.ncalls = pos
        try:
            # the instance dict's keys and entries: its version tag decides them all (see
            # DictVersions)
            self.guard(Keys(dc, f"vars({pretty})", tuple(snap)), group=(d,))
            for k, x in snap.items():
                self.read(f"{dc}[{k!r}]", f"{pretty}.{k}", x, id(v), k, group=(d,))
        finally:
            self.ncalls = saved

    def touch_deep(self, objs: Iterable) -> None:
        if self.flow_stores:   # untraced code may read a float this call stored (flow_writes.py)
            objs = list(objs)
            ids = {id(o) for o in objs}
            for oid, name in [k for k in self.flow_stores if k[0] in ids]:
                self._flow_store_read(oid, name)
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

    def _item(self, container: object, expr: str, key: object) -> str:
        if type(container) in (dict, list, tuple):
            return f"{expr}[{self._lit(key)}]"
        return f"{self.const(dict.__getitem__)}({expr}, {self._lit(key)})"

    def _snap(self, v: Any, expr: str, pretty: str) -> None:
        if id(v) in self.snaps:
            return
        if isinstance(v, torch.nn.Module):
            snap = (dict(v.__dict__), dict(v._parameters), dict(v._buffers), dict(v._modules))
            kind = "module"
        elif isinstance(v, list):
            snap, kind = list(v), "list"
        elif isinstance(v, collections.deque):
            snap, kind = list(v), "deque"
        elif isinstance(v, dict):
            snap, kind = _dict_items(v), "dict"
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

    def _reread(self, expr: str, pretty: str, v: Any) -> None:
        """expr, read before an uncapturable call (which may have written anything), read again
        after it, giving an object the recording tracks.  An object the replay takes as a
        constant (a module, a function, a parameter, ...) is guarded to be that object where
        the program reads it now (a tensor: with its metadata); one it reads through expr
        (a container, a buffer, an array) may be another object of the same kind: a tensor
        guarded by metadata, an array by contents, a container lazily by its contents now
        (_new_epoch already made it lazy: guarded where the program uses it)."""
        s = self.src[id(v)]
        if _BOUND.fullmatch(s[0]):
            # the object the frame read before the call (bound there, _new_epoch): the
            # location still holds it
            self.guard(SameAs(expr, pretty, s[0], s[1]))
        elif s[0] != expr:
            self.guard(Is(expr, pretty, v, _short(v)))
        if isinstance(v, torch.Tensor):
            self.guard(self._tensor_match(expr, pretty, v))
        elif _is_ndarray(v):
            self._source_ndarray(v, expr, pretty, False)
        elif s[0] == expr and id(v) not in self.lazy and type(v) not in (list, dict, set, collections.deque):
            self.guard(Is(expr, pretty, v, _short(v)))

    def _new_epoch(self, k: int) -> None:
        """Uncapturable call k (print to a user object, a callback, a logger's handler) has
        run: it may have written any state the program reads.  What is read again after it is
        guarded again after it (mid-replay, `read`), and so are the containers the program
        holds: lists, dicts, deques and sets are lazily guarded again, from their contents
        now, where the program next uses them (touch); so are objects still lazily guarded."""
        self._bind_held(k)
        self.epoch += 1
        self.epoch_starts.append(k + 1)
        for vid in list(self.float_items):
            self.lazy.pop(vid, None)
            del self.float_items[vid]
        for vid, (kind, v, expr, pretty, _) in self.snaps.items():
            if kind in ("list", "dict", "deque", "set", "tuple") and (vid, "*") not in self.dirty:
                lz = self.lazy.get(vid)
                now = list(v) if kind in ("list", "deque", "tuple") else _dict_items(v) if kind == "dict" else set(v)
                self.lazy[vid] = (v, expr, pretty, lz[3] if lz else 0, k + 1, None, now)
        for vid, (o, _, *_) in list(self.lazy_objs.items()):
            self.lazy_objs[vid] = (o, k + 1, dict(o.__dict__))
        # an object's attributes the call wrote are its replay's writes, not the function's: the
        # snapshot of an object the function did not write is taken again (`self.calls += 1` in a
        # module run between graphs was also replayed at the end as the recording's count)
        written = {key[0] for key in self.dirty if type(key) is tuple}
        for vid, (kind, v, expr, pretty, _) in list(self.snaps.items()):
            if kind in ("module", "obj", "slots", "obj+slots") and vid not in written:
                del self.snaps[vid]
                self._snap(v, expr, pretty)

    def _bind_held(self, k: int) -> None:
        """Before uncapturable call k, which may rebind any location: every object the
        recording tracks that the replay reaches through a location (a list read from a
        global, `gl = GL`; a tensor attribute of an argument) is bound by the replay right
        before the call (`_r0 = F.__globals__['GL']`, replay.py) and named by that binding
        from then on: graph inputs, guards, arguments, continuations and writes after the call
        then use the object the frame holds, not whatever the location holds after it (a
        location read again after the call is guarded to still hold it: _reread)."""
        binds = []
        for vid, s in list(self.src.items()):
            e = s[0]
            if not _PATH.fullmatch(e):
                continue
            name = f"_r{self.nbound}"
            self.nbound += 1
            binds.append((name, e))
            self.src[vid] = (name,) + tuple(s[1:])
            self.src_first.setdefault(vid, e)
            sn = self.snaps.get(vid)
            if sn is not None and sn[2] == e:
                self.snaps[vid] = sn[:2] + (name,) + sn[3:]
            lz = self.lazy.get(vid)
            if lz is not None and lz[1] == e:
                self.lazy[vid] = lz[:1] + (name,) + lz[2:]
        if binds:
            self.epoch_binds[k] = binds
