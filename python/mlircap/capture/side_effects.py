"""Side effects: STORE_* opcodes mark external state dirty, and at the end of the
recording the touched state is diffed against its snapshot into replayed writes
(`_SideEffectMixin`)."""
from __future__ import annotations

import collections
import types
from collections.abc import Collection
from typing import Any

import torch

from .base import Unreplayable, _MISSING
from .steps import Write
from .frame_hook import _E
from .classify import _C_BUFFERS, _PRIM
from .guard_kinds import Lengths
from .typeinfo import _is_data_descr, _is_ndarray, _mro_lookup, _slot_values


# immutable values a same-value attribute store may leave in place (`_same_value_store`)
_SAME_STORE_TYPES = (torch.dtype, torch.device, torch.layout, torch.memory_format, bool, type(None), str)


class _SideEffectMixin:
    """Side effects for `_Recorder`: STORE_*/DELETE_* opcode handlers mark external
    state dirty; `writes()` diffs the touched state against its snapshots."""

    def op_store_deref(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        cell = _E.local_raw(frame, arg)
        if id(cell) in self.ext_cells:
            if (id(cell), "cell") not in self.dirty:
                try:
                    old = (True, cell.cell_contents)
                except ValueError:
                    old = (False, None)
                self.global_snaps[("cell", id(cell))] = (cell, None, old[0], old[1])
            self.dirty.add((id(cell), "cell"))

    def op_store_global(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        g = frame.f_globals
        key = (id(g), name)
        if key not in self.global_snaps:
            self.global_snaps[key] = (g, name, name in g, g.get(name))
        self.dirty.add(key)

    def op_store_attr(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        obj = _E.peek(frame, 0)
        if name == "requires_grad" and isinstance(obj, torch.Tensor):
            # as Tensor.requires_grad_(): a step between graphs (graph.py)
            self._autograd_state_step(torch.Tensor.requires_grad_, (obj, bool(_E.peek(frame, 1))))
            return
        if self.counters:
            self._counter_store(frame, obj, name)
        if id(obj) in self.src:
            if isinstance(obj, _C_BUFFERS):
                raise Unreplayable(f"write to {type(obj).__name__}.{name} (a C buffer)")
            if isinstance(obj, torch.Tensor):
                self._tensor_dict_store(obj, name)
            if isinstance(obj, torch.nn.Module) and (self._same_submodule_store(obj, name, _E.peek(frame, 1)) or
                                                     self._same_value_store(obj, name, _E.peek(frame, 1))):
                return
            self.dirty.add((id(obj), name))
            self.stored[id(obj)].add(name)

    def _tensor_dict_store(self, t: torch.Tensor, name: str) -> None:
        """`p.org = p.data.clone()` (BinaryNet keeps a parameter's real-valued weights on it): a
        Python attribute stored on a tensor the recording tracks writes the tensor's instance
        dict, snapshotted here (before the store) so that writes() replays it as an object's.
        Before, nothing was replayed: every later call saw the recording's tensor there.  The
        tensor class's own descriptors (.data, .grad, ...) are not the dict's."""
        expr, pretty, how = self.src[id(t)]
        if how != "opaque" and not _is_data_descr(_mro_lookup(type(t), name)[1]) and \
                type(getattr(t, "__dict__", None)) is dict:
            self._snap(t, expr, pretty)

    def _same_submodule_store(self, m: torch.nn.Module, name: str, v: object) -> bool:
        """`m.name = v` where v is the submodule m already holds under that name
        (`self.classifier = self.classifier.to(self.dtype)`, a .to() converting nothing):
        nn.Module.__setattr__ puts it back where it was, so no write (it made the frame one
        that wrote state, given up on where a callee after it runs eagerly).  Guarded: the
        class's __setattr__ is nn.Module's, no global module registration hook (which may
        replace the value)."""
        d = m.__dict__
        mods = d.get("_modules")
        if type(mods) is not dict or mods.get(name, _MISSING) is not v or name in d or \
                name in d.get("_parameters", ()) or name in d.get("_buffers", ()):
            return False
        _, raw = _mro_lookup(type(m), "__setattr__")
        gs = (torch.nn.modules.module._global_module_registration_hooks,)
        if raw is not torch.nn.Module.__setattr__ or gs[0]:
            return False
        pretty = self.src[id(m)][1]
        self._class_guard(type(m), "__setattr__", raw, f"type({pretty}).__setattr__")
        self.guard(Lengths(gs, (0,), "global module registration hooks"), group=gs)
        return True

    def _same_value_store(self, m: torch.nn.Module, name: str, v: object) -> bool:
        """`m.name = v` where the module's instance dict already holds that very immutable value
        (`self.input_dtype = hidden_states.dtype` of a Switch-Transformers router on its second
        call): no write, the value it holds guarded instead (a replay where it holds another
        records again).  A write made the frame one that wrote state, run eagerly where a
        callee after it is.  Guarded as _same_submodule_store: nn.Module's __setattr__, no data
        descriptor of that name on the class."""
        d = m.__dict__
        if type(v) not in _SAME_STORE_TYPES or d.get(name, _MISSING) is not v or (id(m), name) in self.dirty or \
                any(name in (d.get(s) or ()) for s in ("_parameters", "_buffers", "_modules")):
            return False
        _, raw = _mro_lookup(type(m), "__setattr__")
        if raw is not torch.nn.Module.__setattr__ or _mro_lookup(type(m), name)[1] is not _MISSING:
            return False
        pretty = self.src[id(m)][1]
        self._class_guard(type(m), "__setattr__", raw, f"type({pretty}).__setattr__")
        self._class_guard(type(m), name, _MISSING, f"type({pretty}).{name}")
        self.read(f"{self.const(d)}[{name!r}]", f"{pretty}.{name}", v, id(m), name, group=(d,))
        return True

    def op_store_subscr(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        obj = _E.peek(frame, 1)
        if self.flow_stores:
            self._flow_items_written(obj, frame)
        if id(obj) in self.src:
            if _is_ndarray(obj):
                raise Unreplayable("in-place write to a numpy array")
            if isinstance(obj, _C_BUFFERS):
                raise Unreplayable(f"in-place write to a {type(obj).__name__} (a C buffer)")
            self.dirty.add((id(obj), "*"))
            key = _E.peek(frame, 0)
            if type(obj) is dict and type(key) in (str, int) and type(_E.peek(frame, 2)) is int:
                self._int_item_stored(obj, key, _E.peek(frame, 2))
            try:
                hash(key)
                self.stored[id(obj)].add(("item", key))
            except TypeError:
                pass

    def _int_item_stored(self, d: dict, key: str | int, v: int) -> None:
        """An int stored into a dict the recording tracks (`self.stats["calls"] += 1`,
        `G["tokens"] = G.get("tokens", 0) + n`), another than the item held before the call:
        the next call reads another value there, so recordings follow it from the next one on
        (flow_roots._varies) instead of guarding the value and recompiling once more first."""
        snap = self.snaps.get(id(d))
        dyn = getattr(self.captured, "dyn_ints", None)
        if snap is None or snap[0] != "dict" or dyn is None or snap[4].get(key, _MISSING) == v and \
                type(snap[4].get(key)) is int:
            return
        if len(dyn) < 4096:
            dyn.add(("ditem", id(d), key))

    def op_binary_op(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:
        # `arr += 1` mutates a numpy array in C without a call the tracer sees
        if arg is not None and arg >= 13:  # NB_INPLACE_* (dis._nb_ops)
            obj = _E.peek(frame, 1)
            if _is_ndarray(obj) and id(obj) in self.src:
                raise Unreplayable("in-place operator on a numpy array")
            if isinstance(obj, _C_BUFFERS) and id(obj) in self.src:
                raise Unreplayable(f"in-place operator on a {type(obj).__name__} (a C buffer)")

    def op_store_slice(self, frame: types.FrameType, arg: int | None, argval: Any) -> None:  # 3.12: [value, container, start, stop]
        obj = _E.peek(frame, 2)
        if self.flow_stores:
            self._flow_items_written(obj)
        if id(obj) in self.src:
            if isinstance(obj, _C_BUFFERS):
                raise Unreplayable(f"in-place write to a {type(obj).__name__} (a C buffer)")
            self.dirty.add((id(obj), "*"))

    # -- finalisation ------------------------------------------------------------------
    def writes(self) -> list[Write]:
        """Compare touched external state with its snapshot: the writes to replay."""
        out = []
        for cv, old in self.cv_snap.items():
            now = cv.get(_MISSING)
            if now is not old:
                if now is _MISSING:
                    raise Unreplayable("ContextVar left unset")
                out.append(Write("cvset", self.const(cv), None, now))
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
                    out.append(Write("set", f"{e}", "cell_contents", now[1]))
                elif had:
                    raise Unreplayable("closure cell deleted")
                continue
            c = self.const(g)
            if name in g:  # stored (STORE_GLOBAL) by the code: replayed even if unchanged
                out.append(Write("item", c, name, g[name]))
            elif had:
                out.append(Write("delitem", c, name, None))
        for vid, (kind, v, expr, pretty, snap) in self.snaps.items():
            stored = self.stored.get(vid, ())
            items = {k[1] for k in stored if type(k) is tuple and len(k) == 2 and k[0] == "item"}
            names = {k for k in stored if type(k) is str}
            if kind == "tuple":
                continue   # (immutable: a lazily guarded tuple of numbers, sources.py)
            if kind == "list":
                # items holding a followed number this call stored (flow_writes._flow_store_item)
                fl = {k[1][1]: st[0] for k, st in self.flow_stores.items() if k[0] == vid and type(k[1]) is tuple}
                # and items stored by STORE_SUBSCR, no method since, the length unchanged (`N[-1] = x`
                # beside a followed counter N[0]): written as items, not the whole list
                own = {k + len(v) if k < 0 else k for k in items if type(k) is int and -len(v) <= k < len(v)} \
                    if len(v) == len(snap) and (vid, "**") not in self.dirty else ()
                if len(v) >= len(snap) and all(a is b or i in fl and a is fl[i] or i in own
                                               for i, (a, b) in enumerate(zip(v, snap))):
                    # unchanged prefix: the stored indices (lst[i] = x), then the appended tail
                    for i in sorted(k for k in items if type(k) is int and -len(snap) <= k < len(snap)):
                        out.append(Write("item", expr, i, v[i]))
                    if len(v) > len(snap):
                        out.append(Write("extend", expr, None, v[len(snap):]))
                else:
                    if vid in self.lazy:  # the new contents depend on the old ones: guard them
                        self.touch(v)
                        for i, x in enumerate(snap):
                            if id(x) not in self.src and type(x) not in _PRIM:
                                raise Unreplayable("list rewritten in place")
                    out.append(Write("slice", expr, None, list(v)))
            elif kind == "deque":
                if len(v) >= len(snap) and all(a is b for a, b in zip(v, snap)):
                    if len(v) > len(snap):   # appended (as at replay: through the deque's maxlen)
                        out.append(Write("extend", expr, None, list(v)[len(snap):]))
                elif len(v) != len(snap) or any(a is not b for a, b in zip(v, snap)):
                    # dropped at maxlen, popped, rotated, ...: the new contents are set whole,
                    # and depend on the old ones, which are guarded
                    if vid in self.lazy:
                        self.touch(v)
                    for x in snap:
                        if id(x) not in self.src and type(x) not in _PRIM and any(x is y for y in v):
                            raise Unreplayable("deque rewritten in place")
                    out.append(Write("item", expr, None, list(v), self.const(_deque_assign)))
            elif kind == "set":
                if v != snap:
                    add, rem = v - snap, snap - v
                    if rem:
                        out.append(Write("discard", expr, None, rem))
                    if add:
                        out.append(Write("update", expr, None, add))
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
                        out.append(Write("set", expr, k, x))
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

    def _dict_diff(self, out: list[Write], de: str, d: dict, snap: dict, skip: Collection = (),
                   force: Collection = ()) -> None:
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
                out.append(Write("item", de, k, x, setter))
        for k in snap:
            if k not in d and k not in skip:
                out.append(Write("delitem", de, k, None, deleter))
        # the writes above keep the old keys' places and append the new ones: where the call
        # reordered keys (OrderedDict.move_to_end, pop and reinsert), the order is set too
        now = list(_keys(d))
        if now != [k for k in snap if k in d] + [k for k in dict.keys(d) if k not in snap]:
            out.append(Write("item", de, None, now, self.const(_dict_reorder)))


def _keys(d: dict) -> Any:
    """The keys of `d` in its own order (an OrderedDict's links, not its dict storage)."""
    return collections.OrderedDict.keys(d) if isinstance(d, collections.OrderedDict) else dict.keys(d)


def _dict_reorder(d: dict, _key: None, order: list) -> None:
    """Replay of a dict's key order after a call that reordered it (a Write of kind item
    with this setter): each key moved to the end in turn, values kept."""
    if isinstance(d, collections.OrderedDict):
        for k in order:
            collections.OrderedDict.move_to_end(d, k)
    else:
        for k in order:
            dict.__setitem__(d, k, dict.pop(d, k))


def _deque_assign(d: collections.deque, _key: None, items: list) -> None:
    """Replay of a deque's new contents (a Write of kind item with this setter)."""
    d.clear()
    d.extend(items)
