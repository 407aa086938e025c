"""Opcode handlers for reads of external state (`_ReadMixin`): globals and builtins, attributes
of modules, classes, objects and tensors, closure cells, and the module trees untraced torch code
walks (`m.parameters()`, `m.state_dict()`).  Each read becomes a guard on the value read (or on
what it resolves to: class attributes against monkeypatching and instance shadowing)."""
from __future__ import annotations

import collections
import sys
import types
from typing import Any

import torch

from .base import Unreplayable, _MISSING
from .guard_kinds import ClassAttr, Equals, Is, Keys, Lengths, NoClassAttr, NoKey, TypeIs
from .frame_hook import _E, _NULL
from .classify import _PRIM, _classify, _ffi
from .typeinfo import _IMMUTABLETYPE, _class_dicts, _is_data_descr, _is_ndarray, _mro_lookup, _static_lookup
from .counters import _CounterMixin
from .np_ops import _static_index
from .sources import _BARE_CONST


class _ReadMixin(_CounterMixin):
    """For `_Recorder` (through `_TracerMixin`): LOAD_GLOBAL / LOAD_ATTR / LOAD_DEREF and the
    attribute reads of `getattr` / `vars` calls, turned into guards."""

    def op_load_global(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
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
        v = g[name]
        if type(v) is int and self._flow_attr(frame, f"{c}[{name!r}]", f"G[{name!r}]", v, id(g), name, (g,)):
            return   # an int global seen with two values (flow_roots._varies)
        self.read(f"{c}[{name!r}]", f"G[{name!r}]", v, id(g), name, group=(g,))

    def op_import_name(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        """`import numpy as np` inside the traced code: the module it binds is the one in
        sys.modules, guarded there (then `np.random.beta` and other attribute reads through
        it are sourced and guarded like reads through a global module)."""
        def finish(fr: types.FrameType) -> None:
            mod = _E.peek(fr, 0)
            mname = getattr(mod, "__name__", None)
            if isinstance(mod, types.ModuleType) and type(mname) is str and sys.modules.get(mname) is mod \
                    and id(mod) not in self.src:
                self.read(f"{self.const(sys.modules)}[{mname!r}]", f"sys.modules[{mname!r}]", mod)
        self.pending[frame] = finish

    def op_binary_subscr(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        """`c[i]`: a lazily guarded container is guarded now; a NumPy array with a source
        (a break result or an argument, guarded by contents) indexed statically gives an
        array or scalar reproducible by the same expression (`b0[:4]`), which replayed
        calls (`np.sort(b0[:4])`) can then take."""
        c = _E.peek(frame, 1)
        if self.flow_stores and self._flow_item_load(frame, c, _E.peek(frame, 0)):
            return   # an item this call stored, read back (flow_writes.py)
        if self.lazy and id(c) in self.lazy and not self._flow_item(frame, c, _E.peek(frame, 0)):
            self.touch(c)
        if not _is_ndarray(c):
            return
        s = self.src.get(id(c))
        idx = _E.peek(frame, 0)
        if s is None or s[2] == "opaque" or not _static_index(idx):
            return

        def finish(fr: types.FrameType) -> None:
            r = _E.peek(fr, 0)
            if (_is_ndarray(r) or type(r).__module__ == "numpy") and id(r) not in self.src:
                self.src[id(r)] = (f"{s[0]}[{self._lit(idx)}]", f"{s[1]}[{idx!r}]", s[2])
                self.keep.append(r)
        self.pending[frame] = finish

    def op_contains_op(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        """`key in c`: a lazily guarded container is guarded now, but a plain dict asked for
        a str or int key, which its guarded keys decide (flow_roots._flow_dict_keys: the
        items' values stay unguarded, `if n in self.cache: self.cache["hits"] += 1`)."""
        if not self.lazy:
            return
        c, key = _E.peek(frame, 0), _E.peek(frame, 1)
        if id(key) in self.lazy:
            self.touch(key)
        if id(c) in self.lazy and not self._flow_dict_keys(c, key):
            self.touch(c)

    def op_load_attr(self, frame: types.FrameType | None, arg: int | None, name: str, obj: Any = _NULL) -> None:
        if obj is _NULL:
            obj = _E.peek(frame, 0)
        if self.flow_stores:   # a float this call stored (flow_writes.py), or the whole __dict__
            for key in [k for k in self.flow_stores if k[0] == id(obj) and (k[1] == name or name == "__dict__")]:
                if frame is not None and key[1] == name and self._flow_store_load(frame, *key):
                    return   # read back, followed as the store's expression
                self._flow_store_read(*key)
        s = self.src.get(id(obj))
        if isinstance(obj, torch.Tensor):
            self._tensor_attr(obj, name, s)
            return
        if s is None and isinstance(obj, type) and _class_dicts(obj):
            # a class reached otherwise than through a read (`cls` of a classmethod,
            # `type(self)`): the class object is the same at replay, its attributes are
            # what changes
            s = (self.const(obj), obj.__qualname__, False)
        if s is None or type(obj) in _PRIM:
            return
        expr, pretty, kind = s
        if kind == "opaque":
            if callable(_mro_lookup(type(obj), name)[1]) and name not in getattr(obj, "__dict__", ()):
                return   # a method of its (guarded) type: calling it is a replayed call
            if frame is not None and _ffi(obj):
                # a function of a foreign library (`lib.abs` of a `ctypes.CDLL` an uncapturable
                # call returned): an opaque value too, rebuilt by the same attribute read; data
                # (`c_int(n).value`) is read again there and guarded by value
                def finish(fr: types.FrameType) -> None:
                    r = _E.peek(fr, 0)
                    if id(r) in self.src:
                        return
                    if callable(r) or _ffi(r):
                        self.src[id(r)] = (f"{expr}.{name}", f"{pretty}.{name}", "opaque")
                        self.keep.append(r)
                    else:
                        self._source(r, f"{expr}.{name}", f"{pretty}.{name}", argrooted=True)
                self.pending[frame] = finish
                return
            raise Unreplayable(f"attribute {name!r} read from an opaque value returned by an uncapturable call")
        if kind == "fresh":   # a module the call made (module_factories.py)
            if isinstance(obj, torch.nn.Module):
                self._fresh_module_attr(obj, name, expr, pretty)
            return
        if (id(obj), name) in self.counters and self._counter_read(frame, obj, obj.__dict__, name, "", pretty, ()):
            return
        if (id(obj), name) in self.dirty:
            return
        if name == "__dict__":
            d = getattr(obj, "__dict__", None)
            if id(obj) in self.lazy_objs:
                self.full_obj(obj)
            if type(d) is dict and not isinstance(obj, type) and _BARE_CONST.fullmatch(expr):
                # an identity-guarded object's instance dict (copy.deepcopy's reduction reads
                # it: reductions.py): read as that dict itself, its keys and items guarded by
                # its version tag as attribute reads are (through `C[k].__dict__`, an object
                # with a Python __getattribute__ (transformers' configs) paid ~1 us per guard,
                # 60-90 us a call for an encoder-decoder model's config); the object is
                # guarded to still hold it (`obj.__dict__ = {...}` replaces it)
                self.guard(Is(f"{expr}.__dict__", f"vars({pretty})", d, "the same dict"))
                self.read(self.const(d, f"vars({pretty})"), f"vars({pretty})", d, group=(d,))
            elif isinstance(d, dict):
                self.read(f"{expr}.__dict__", f"vars({pretty})", d)
            elif isinstance(obj, type) and not obj.__flags__ & _IMMUTABLETYPE and _class_dicts(obj):
                # vars(cls) / cls.__dict__: a new mappingproxy of the class's dict at each read,
                # which the program then reads untracked (vars(C)["k"] was the recording's
                # value after C.k changed): the class's own dict is guarded whole now
                cd = _class_dicts(obj)[0]
                self.read(self.const(cd, f"vars({pretty})"), f"vars({pretty})", cd, group=(cd,))
                self.touch(cd)
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
            if name in d and type(d[name]) is int and \
                    self._counter_read(frame, obj, d, name, f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", (d,)):
                return
            if name in d:
                e = f"{self.const(d)}[{name!r}]"
                if not self._flow_attr(frame, e, f"{pretty}.{name}", d[name], id(obj), name, (d,)):
                    self.read(e, f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
                return
            for store in ("_parameters", "_buffers", "_modules"):
                sd = d.get(store)
                if sd is not None and name in sd:
                    # (the module still holds that dict: ModuleList's `del` rebuilds it)
                    self.guard(Is(f"{self.const(d)}[{store!r}]", f"{pretty}.{store}", sd, "the same dict"),
                               group=(d,))
                    self.read(f"{self.const(sd)}[{name!r}]", f"{pretty}.{name}", sd[name], id(obj), name,
                              group=(sd,))
                    return
            if raw is _MISSING and (id(obj), name) not in self.dirty:
                # on neither the instance, its parameters, buffers, submodules nor its class
                # (`hasattr(self, "head")` before a head created lazily, `getattr(self, "cache",
                # None)`): guarded to stay so, as for other objects
                self.guard(NoKey(self.const(d), pretty, name), group=(d,))
                for store in ("_parameters", "_buffers", "_modules"):
                    sd = d.get(store)
                    if type(sd) is dict:
                        self.guard(Is(f"{self.const(d)}[{store!r}]", f"{pretty}.{store}", sd, "the same dict"),
                                   group=(d,))
                        self.guard(NoKey(self.const(sd), f"{pretty}.{store}", name), group=(sd,))
                self._class_guard(type(obj), name, _MISSING, f"type({pretty}).{name}")
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
        if type(obj) is types.CodeType:
            return  # immutable: its attributes are what the object (identity-guarded) was made with
        argrooted = kind is True
        cls = type(obj)
        if not argrooted and _BARE_CONST.fullmatch(expr) and _class_dicts(cls):
            # an identity-guarded object: `obj.__class__ = Other` keeps the object and
            # changes where its attributes come from
            self.guard(TypeIs(expr, f"type({pretty})", cls))
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
            if not argrooted and type(d[name]) is int and id(obj) in self.lazy_objs and \
                    self._counter_read(frame, obj, d, name, f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", (d,)):
                return
            if not argrooted:
                e = f"{self.const(d)}[{name!r}]"
                if not self._flow_attr(frame, e, f"{pretty}.{name}", d[name], id(obj), name, (d,)):
                    self.read(e, f"{pretty}.{name}", d[name], id(obj), name, group=(d,))
            return
        if raw is _MISSING:
            ga = _mro_lookup(cls, "__getattr__")[1]
            code = getattr(getattr(ga, "__func__", ga), "__code__", None)
            if ga is not _MISSING and not (type(code) is types.CodeType and _classify(code) == "user"):
                # `__getattr__` answers, and it is code the tracer does not see (AttrDict's
                # `__getattr__ = dict.__getitem__`: cfg.scale was the recording's value after
                # cfg["scale"] changed): guarded against monkeypatching, and what it may read,
                # the object, guarded whole (as for an explicit call of untraced code)
                self._class_guard(cls, "__getattr__", ga, f"type({pretty}).__getattr__")
                self.touch_deep([obj])
        if raw is not _MISSING:
            self._class_attr(obj, name, pretty, argrooted)
        elif type(d) is dict and not argrooted:
            # on neither the instance nor its class (`__getattr__` answers, or it raises):
            # guarded to stay so, as a class attribute or instance attribute set later is
            # found first
            self.guard(NoKey(self.const(d), pretty, name), group=(d,))
            self._class_guard(cls, name, _MISSING, f"type({pretty}).{name}")

    def _tensor_attr(self, t: torch.Tensor, name: str, s: tuple | None) -> None:
        """An attribute read on a tensor: Python attributes set on it (`t.tag`) are guarded
        by value, methods and properties against monkeypatching of the tensor class."""
        cls = type(t)
        if name == "grad":
            self._grad_read(t)   # (a write to it waiting for the open graph: that graph ends first)
        if name == "grad" and s is not None and s[2] != "opaque" and t.is_leaf:
            # `p.grad`: None or a tensor, deciding branches (`if p.grad is not None`) and
            # read by the graph (getattr(p, 'grad')): guarded as it is now
            g = t.grad
            if g is None:
                self.guard(Is(f"{s[0]}.grad", f"{s[1]}.grad", None, "None"))
            else:
                self.guard(self._tensor_match(f"{s[0]}.grad", f"{s[1]}.grad", g))
        _, raw = _mro_lookup(cls, name)
        if (raw is _MISSING or not _is_data_descr(raw)) and s is not None and s[2] != "opaque":
            expr, pretty = s[0], s[1]
            if (id(t), name) in self.dirty:
                return
            d = t.__dict__
            keys = list(d)
            self.guard(Keys(f"{expr}.__dict__", f"vars({pretty})", tuple(keys)))
            if name in d:
                self.read(f"{expr}.__dict__[{name!r}]", f"{pretty}.{name}", d[name], id(t), name)
                return
        self._class_guard(cls, name, raw, f"{cls.__name__}.{name}")

    def _class_attr(self, obj: object, name: str, pretty: str, argrooted: bool = False) -> None:
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
                self.guard(NoKey(self.const(d), pretty, name), group=(d,))
        self._class_guard(cls, name, raw, f"type({pretty}).{name}")
        if type(raw) is property and type(raw.fget) is types.FunctionType and raw.fget.__closure__ and \
                id(raw.fget) not in self.src and _classify(raw.fget.__code__) == "user":
            # a getter made by a factory (nn.utils.parametrize's get_parametrized, a closure over
            # its module and name): sourced through the guarded property (a property's fget is
            # read-only), so the cells it reads are external state the recording guards (the
            # module in its closure is the one it was made for: a deep copy's is the original's)
            self._source(raw.fget, f"{self.const(raw)}.fget", f"type({pretty}).{name}.fget", False)

    def _class_guard(self, cls: type, name: str, raw: object, pretty: str) -> None:
        """Guard what `name` resolves to on `cls` (the raw MRO entry, or its absence)."""
        group = _class_dicts(cls)
        if not group:
            return  # immutable (C) types cannot be monkeypatched
        cc = self.const(cls)
        # the class dicts decide the lookup along this MRO; `cls.__bases__ = ...` (on it or
        # a base) makes another one without writing any dict: the MRO tuple, kept while it
        # stands, is guarded (once per class)
        self.guard(Is(f"{cc}.__mro__", f"{cls.__qualname__}.__mro__", cls.__mro__, "the same MRO"))
        if raw is _MISSING:
            self.guard(NoClassAttr(cls, name, pretty), group=group)
            return
        get = getattr(type(raw), "__get__", None)
        if type(get) is types.FunctionType:
            # a descriptor written in Python: reading it through the class runs its __get__
            # (a counting descriptor counted the recorder's read too): the raw entry compared
            vis = _MISSING
        else:
            try:
                vis = getattr(cls, name)
            except Exception:
                vis = _MISSING
        if vis is raw or (type(raw) is staticmethod and vis is raw.__func__):
            self.read(f"{cc}.{name}", pretty, vis, id(cls), name, group=group)
        else:  # classmethod or a custom descriptor: compare the raw MRO entry
            self.guard(ClassAttr(cls, name, raw, pretty), group=group)
            if type(get) is types.FunctionType and id(raw) not in self.src and \
                    type(getattr(raw, "__dict__", None)) is dict:
                # its __get__ (traced) reads and writes the descriptor's own state (a counter,
                # a cache): tracked like an object the program reads, so those reads are
                # guarded and the writes replayed (before: the recorded value every call)
                self.read(f"{self.const(_static_lookup)}({cc}, {name!r})", pretty, raw)

    def op_load_deref(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        cell = _E.local_raw(frame, arg)
        e = self.ext_cells.get(id(cell))
        if e is None or (id(cell), "cell") in self.dirty:
            return
        try:
            v = cell.cell_contents
        except ValueError:
            return
        if type(v) is int and self._flow_attr(frame, f"{e[0]}.cell_contents", e[1], v, id(cell), "cell", ()):
            return   # an int closure variable seen with two values (flow_roots._varies)
        self.read(f"{e[0]}.cell_contents", e[1], v, id(cell), "cell")

    def _state_dict_tree(self, root: torch.nn.Module) -> None:
        """`m.state_dict()` runs in torch code we do not trace: when no module of the subtree
        customizes it (state_dict / _save_to_state_dict / get_extra_state overridden, state
        dict hooks), source the subtree (the parameters and buffers it returns are known and
        guarded) and guard what else it reads: no hooks, the non-persistent buffer names, the
        class methods."""
        base = torch.nn.Module
        mods = list(root.modules())
        if any(id(m) in self.fresh_modules for m in mods):
            return   # (made by the call: its tensors are read through its result, not sourced here)
        for m in mods:
            cls = type(m)
            if any(getattr(cls, n, None) is not getattr(base, n) for n in _STATE_DICT_METHODS) or \
                    m._state_dict_hooks or m._state_dict_pre_hooks:
                return
        self._source_module_tree(root)
        for m in mods:
            s = self.src.get(id(m))
            if s is None:
                return
            hooks = (m._state_dict_hooks, m._state_dict_pre_hooks)
            self.guard(Lengths(hooks, (0, 0), f"{s[1]} state_dict"), group=hooks)
            nps = m._non_persistent_buffers_set
            self.guard(Equals(self.const(nps), f"{s[1]}._non_persistent_buffers_set", set(nps)))
            for n in _STATE_DICT_METHODS:
                self._class_attr(m, n, s[1])

    def _source_module_tree(self, m: torch.nn.Module, seen: set[int] | None = None) -> None:
        seen = set() if seen is None else seen
        if id(m) in seen:
            return
        seen.add(id(m))
        s = self.src.get(id(m))
        if s is None:
            return
        if s[2] == "fresh":   # a module the call made: read through its result (module_factories.py)
            self._fresh_module_tree(m, s[0], s[1], seen)
            return
        for store in ("_parameters", "_buffers", "_modules"):
            d = m.__dict__[store]
            dc = self.const(d)
            md = m.__dict__
            self.guard(Is(f"{self.const(md)}[{store!r}]", f"{s[1]}.{store}", d, "the same dict"), group=(md,))
            self.guard(Keys(dc, f"{s[1]}.{store}", tuple(d.keys())), group=(d,))
            for k, v in d.items():
                self.read(f"{dc}[{k!r}]", f"{s[1]}.{k}", v, id(m), k, group=(d,))
                if isinstance(v, torch.nn.Module):
                    self._source_module_tree(v, seen)

    def _source_defaults(self, f: Any, args: list, kwargs: dict) -> None:
        """A traced function called without some of its arguments gets their default values,
        which live on the function (`__defaults__`, `__kwdefaults__`): a mutable one (a dict
        used as a cache across calls, `def positions(n, _cache={})`) or a tensor is external
        state, read (guarded, its writes replayed) through that location."""
        fn = f.__func__ if type(f) is types.MethodType else f
        if type(fn) is not types.FunctionType or not (fn.__defaults__ or fn.__kwdefaults__) or \
                _classify(fn.__code__) != "user":
            return
        code, defs = fn.__code__, fn.__defaults__ or ()
        given = len(args) + (type(f) is types.MethodType)
        first = code.co_argcount - len(defs)
        todo = [(f"__defaults__[{j}]", v) for j, v in enumerate(defs)
                if first + j >= given and code.co_varnames[first + j] not in kwargs]
        todo += [(f"__kwdefaults__[{k!r}]", v) for k, v in (fn.__kwdefaults__ or {}).items() if k not in kwargs]
        for where, v in todo:
            if isinstance(v, _STATE_DEFAULTS):
                self.read(f"{self.const(fn)}.{where}", f"{fn.__qualname__}.{where}", v)

    def _fake_load_attr(self, obj: object, name: str) -> None:
        self.op_load_attr(None, None, name, obj)


_STATE_DEFAULTS = (list, dict, set, collections.deque, torch.Tensor)
_STATE_DICT_METHODS = ("state_dict", "_save_to_state_dict", "get_extra_state")
