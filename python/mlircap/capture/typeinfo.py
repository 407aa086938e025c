"""Introspection of Python types: MRO lookups, data descriptors, class dicts (for
dict-version guards), __slots__ members, numpy arrays, opaque values."""
from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable

import torch

from .base import _MISSING
from .classify import _IMMUTABLE_CONST, _PRIM


_HEAPTYPE = 1 << 9


def _pure_python_type(t: type) -> bool:
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
# A dict's version tag (unique to one state of it), and all of several dicts unchanged in
# one call: the capture extension's (one C loop), else torch's per dict.
_dicts_unchanged: Callable[[tuple, bytes], bool] | None = None
try:
    from . import _ext
    _dict_version = _ext.load().dict_version
    _dicts_unchanged = _ext.load().dicts_unchanged
except Exception:  # the extension could not be built: capture runs eagerly anyway
    try:
        from torch._C._dynamo.guards import dict_version as _dict_version
    except Exception:  # pragma: no cover - older torch: no version fast path
        _dict_version = None


def _pack_versions(vs: tuple[int, ...]) -> bytes:
    """Version tags as `_dicts_unchanged` takes them (native uint64s)."""
    import struct
    return struct.pack(f"={len(vs)}Q", *vs)


def _mro_lookup(cls: type, name: str) -> tuple:
    """(defining class, raw attribute) as type lookup finds it, or (None, _MISSING)."""
    for k in cls.__mro__:
        d = k.__dict__
        if name in d:
            return k, d[name]
    return None, _MISSING


def _static_lookup(cls: type, name: str) -> object:
    return _mro_lookup(cls, name)[1]


def _is_data_descr(raw: object) -> bool:
    t = type(raw)
    return hasattr(t, "__set__") or hasattr(t, "__delete__")


_class_dicts_cache: weakref.WeakKeyDictionary[type, tuple] = weakref.WeakKeyDictionary()


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


_slot_cache: weakref.WeakKeyDictionary[type, tuple] = weakref.WeakKeyDictionary()


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


def _slot_values(v: object) -> dict:
    out = {}
    for n in _slot_names(type(v)):
        try:
            out[n] = getattr(v, n)
        except AttributeError:
            pass
    return out


def _is_ndarray(v: object) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.ndarray)


def _is_opaque_value(v: object) -> bool:
    t = type(v)
    if t in _PRIM or isinstance(v, (torch.Tensor, list, tuple, dict, set, frozenset, type, types.FunctionType,
                                    types.ModuleType, torch.nn.Module) + _IMMUTABLE_CONST):
        return False
    if hasattr(v, "__dict__") or hasattr(t, "__bool__") or hasattr(t, "__len__") or hasattr(t, "__iter__") \
            or hasattr(t, "__eq__") and t.__eq__ is not object.__eq__:
        return False
    return True


def _is_constant_value(v: object, depth: int = 0) -> bool:
    """An immutable value made only of constants, which a graph can hold as it is (a torch
    function's options object, `LinearCrossEntropyOptions(...)`): Python scalars and strings,
    dtypes / devices / ..., enum members, tuples (named or not) and frozensets of such, and
    frozen dataclasses whose fields are all such.  Guarded by type and value, field by field."""
    t = type(v)
    if v is None or t in _PRIM or isinstance(v, _IMMUTABLE_CONST) or hasattr(t, "__members__") and \
            not isinstance(v, type):
        return not isinstance(v, frozenset) or all(_is_constant_value(x, depth + 1) for x in v)
    if depth > 4:
        return False
    if isinstance(v, tuple):
        return (t is tuple or hasattr(t, "_make")) and all(_is_constant_value(x, depth + 1) for x in v)
    return _is_frozen_dataclass(v) and all(_is_constant_value(getattr(v, f), depth + 1)
                                           for f in _dataclass_fields(t))


def _is_frozen_dataclass(v: object) -> bool:
    params = getattr(type(v), "__dataclass_params__", None)
    return params is not None and getattr(params, "frozen", False) and not isinstance(v, type)


def _dataclass_fields(t: type) -> tuple[str, ...]:
    import dataclasses
    return tuple(f.name for f in dataclasses.fields(t))


_NP_FLOATS = ("float64", "float32", "float16")


def _np_float(v: object) -> bool:
    """A NumPy floating scalar (`np.float64(0.1)`, a float subclass; `np.float32(0.1)`, an
    array's item): arithmetic on it in a replay expression runs NumPy's own, as in the program."""
    t = type(v)
    return t.__module__ == "numpy" and t.__name__ in _NP_FLOATS
