"""Lazily guarded sources (`_LazySourceMixin`): containers and objects read from external
locations guarded from their snapshot where the program first uses them (`touch`, `full_obj`,
`touch_deep`); the snapshots (`_snap`) writes are diffed against."""
from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import torch

from .base import Unreplayable
from .guard_kinds import Equals, Keys, TypeLen
from .classify import _ID_HASHED, _PRIM
from .typeinfo import _slot_values


def _dict_items(d: dict) -> dict:
    """The items d holds, in its iteration order, without calling a subclass's __getitem__:
    `dict(d)` of a mapping that is not a plain dict reads each item through it, and HF's
    `ACT2FN` (an OrderedDict whose __getitem__ instantiates the activation class it holds)
    then made a module per snapshot, guarded by identity against the class the replay reads
    (a recompile per call)."""
    return dict(d) if type(d) is dict else {k: dict.__getitem__(d, k) for k in d}


class _LazySourceMixin:
    """Lazy sources for `_SourceMixin`: guarded where first used; snapshots for writes."""

    # Lazy containers: lists/dicts/sets reached through attributes, globals or cells are
    # only guarded (from their snapshot, i.e. the pre-call state) once the program reads
    # them; append-only / store-only use (logs, caches, histories) needs no guard at all.
    def touch(self, obj: object, untraced: bool = False) -> None:
        if self.flow_stores:   # a list item this call stored, used otherwise (flow_writes.py)
            self._flow_items_written(obj, keep_flushed=untraced)
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
        # (a dict read as itself with its own group, `vars(obj)` of a constant: that group)
        group = (group if any(g is v for g in group) else group + (v,)) if group and t is dict else None
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
                # (not an item the function wrote before a break, unread, written right before it:
                # its old value is read by nobody, and right after the call a guard holds it to the
                # value written, flush_writes.py)
                fl = self.__dict__.get("flush_items") or {}
                for k in keys:
                    if fl.get((id(v), k), -1) < pos:
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
            # (not a store written as its expression before this call, flush_writes.py: the call
            # reads the value the replay computed there)
            flushed = self.__dict__.get("flush_sym") or ()
            for oid, name in [k for k, st in self.flow_stores.items() if k[0] in ids and id(st) not in flushed]:
                self._flow_store_read(oid, name)
        if not self.lazy and not self.lazy_objs:
            return
        for o in objs:
            if id(o) in self.lazy_objs:
                self.full_obj(o)
            if id(o) in self.lazy:
                self.touch(o, untraced=True)
            d = getattr(o, "__dict__", None) if not isinstance(o, type) else None
            if isinstance(d, dict):
                for x in list(d.values()):
                    if id(x) in self.lazy:
                        self.touch(x, untraced=True)
            if isinstance(o, (list, tuple)) and len(o) < 64:
                for x in o:
                    if id(x) in self.lazy:
                        self.touch(x, untraced=True)

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
