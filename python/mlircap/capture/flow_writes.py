"""Floats written back to attributes (`self.tau = max(0.5, self.tau * 0.9)`, `self.ema =
0.9 * self.ema + 0.1 * loss.item()`), for `_FlowMixin`: the replayed write is the
expression that computed the value (flows.py follows it), of the values the attribute and
the other operands have at the replay, instead of the number this recording stored; the
attribute needs no guard on its value, so a schedule that changes it on every call does not
recompile.

An attribute read before the first uncapturable call is bound at the start of the replay
(`_a{i}`: the replay writes at its end, after the graphs took the old value as an input).
The followed value (of such attributes, arguments, break results) must reach exactly one
STORE_ATTR to an attribute of an object the recording tracks, before any uncapturable
call, and be what the attribute holds at the end; the attribute read back after the store
is followed as the store's expression (`_flow_store_load`); any other use ends it: the
operands are then guarded by value, as every escaped number."""
from __future__ import annotations

import types
from typing import Any

from ._bytecode import _instrs
from .base import _MISSING
from .counters import _SymExpr
from .frame_hook import _E
from .steps import Write
from .typeinfo import _np_float

_ATTR_KEYS = 1 << 20   # (as flows.py: attribute keys are <= -_ATTR_KEYS)


class _FlowWriteMixin:
    """`_flow_store` at a STORE_ATTR of a followed float, `_flow_store_read` at a read of
    the attribute stored, `flow_bindings` / `flow_writes` for the replay."""

    def _flow_store(self, fr: types.FrameType, name: str, expr: str, ks: frozenset[int]) -> bool:
        """STORE_ATTR about to store the followed float (expression expr of the numbers ks)
        into `obj.name` (obj at the top of the stack): True when its write is replayed as
        the expression (the instruction is then done with the float).  An int too: a counter
        read before its increment (`lr = sched(self.n)` ... `self.n += 1`)."""
        obj, val = _E.peek(fr, 0), _E.peek(fr, 1)
        if not (type(val) in (float, int) or _np_float(val)) or val != val or id(obj) not in self.src or self.ext_writes or \
                self._flow_stale(ks) or (id(obj), name) in self.flow_stores:
            return False
        if any(k <= -_ATTR_KEYS and self.flow_ext.get(k) != 0 for k in ks):
            return False   # (read after an uncapturable call: not the value bound at the start)
        self.flow_stores[(id(obj), name)] = (val, expr, ks, obj)
        self.keep.append(val)
        return True

    def _flow_store_load(self, frame: types.FrameType, oid: int, name: str) -> bool:
        """`obj.name` read back by LOAD_ATTR after this call stored a followed float there
        (`self.amax = max(self.amax, m.item()); s = self.amax / 127`): the value loaded is
        followed as the store's expression (its attributes read mid-replay still hold their
        values at the call: the replay writes at its end), so the write stays an expression.
        False: not such a read (`_flow_store_read` then ends the store)."""
        st = self.flow_stores.get((oid, name))
        if st is None:
            return False
        val, expr, ks, obj = st
        d = getattr(obj, "__dict__", None)
        p = self.pending.get(frame)
        if type(d) is not dict or d.get(name) is not val or self._flow_stale(ks) or \
                p is not None and p != self._flow_tick:
            return False
        self._flow_load(frame, expr, ks, val)
        return True

    def _flow_store_item(self, fr: types.FrameType, expr: str, ks: frozenset[int]) -> bool:
        """STORE_SUBSCR about to store the followed number (expression expr) into `lst[i]`,
        a list the recording tracks (`N[0] = N[0] + 1`: a step counter in a global list):
        True when its write is replayed as the expression (flow_writes).  The list must still
        be lazily guarded, so that every later use of it is seen (lazy_sources.touch); read back
        by a subscript it is followed as the expression (`_flow_item_load`), any other use or
        write of the list (`_flow_items_written`) or an uncapturable call in the recording
        ends it (an int is told from an equal one only by where it was stored)."""
        key, lst, val = _E.peek(fr, 0), _E.peek(fr, 1), _E.peek(fr, 2)
        if not self._flow_item_ok(lst, val, ks):
            return False
        snap = self.snaps[id(lst)]
        if type(lst) is dict:   # `self.stats["calls"] += 1`: a key the dict had before the call
            if snap[0] != "dict" or type(key) not in (str, int) or key not in lst or key not in snap[4]:
                return False
            i = key
        elif type(lst) is not list or type(key) is not int or not -len(lst) <= key < len(lst) or snap[0] != "list":
            return False
        else:
            i = key + len(lst) if key < 0 else key
        old = self.flow_stores.get((id(lst), ("item", i)))
        if old is not None and lst[i] is not old[0]:
            return False
        # (stored again over this call's own followed store, which the item still holds: a counter
        # incremented in a loop, `for _ in range(n): ...; st["steps"] += 1`, its reads back followed
        # as the expression stored before (_flow_item_load); the last store is the one replayed.
        # It was guarded by value, a new recording on every call)
        self.flow_stores[(id(lst), ("item", i))] = (val, expr, ks, lst)
        self.flow_item_at = (fr, fr.f_lasti)
        self.keep.append(val)
        return True

    def _flow_item_ok(self, lst: Any, val: Any, ks: frozenset[int]) -> bool:
        """What a number stored into a container item (`_flow_store_item`) or appended
        (`_flow_store_append`) needs to be written as its expression: a number (not NaN), a
        container still lazily guarded, no uncapturable call before in the recording, no
        attribute among its operands read after one."""
        return ((type(val) is float or _np_float(val)) and val == val or type(val) is int) and id(lst) in self.lazy and \
            id(lst) in self.snaps and not self.ext_writes and not self._flow_stale(ks) and \
            not any(k <= -_ATTR_KEYS and self.flow_ext.get(k) != 0 for k in ks)

    def _flow_store_append(self, fr: types.FrameType, lst: list, expr: str, ks: frozenset[int]) -> bool:
        """`lst.append(v)` about to append the followed number v (expression expr) to a list
        the recording tracks (`self.losses.append(loss.item())`, a timing log): True when the
        appended item is replayed as the expression, as a stored item (`_flow_store_item`,
        the same conditions: a list still lazily guarded, no uncapturable call before); the
        value was guarded instead, a recompile on every call."""
        val = _E.peek(fr, 0)
        if not self._flow_item_ok(lst, val, ks) or self.snaps[id(lst)][0] != "list":
            return False
        key = (id(lst), ("item", len(lst)))
        if key in self.flow_stores:
            return False
        self.flow_stores[key] = (val, expr, ks, lst)
        self.flow_item_at = (fr, fr.f_lasti)
        self.keep.append(val)
        return True

    def _flow_item_load(self, frame: types.FrameType, lst: Any, idx: Any) -> bool:
        """`N[0]` read back by BINARY_SUBSCR after this call stored a followed number there:
        followed as the store's expression.  False: not such a read."""
        if type(lst) is dict:
            if type(idx) not in (str, int) or idx not in lst:
                return False
            st = self.flow_stores.get((id(lst), ("item", idx)))
        elif type(lst) is not list or type(idx) is not int or not -len(lst) <= idx < len(lst):
            return False
        else:
            st = self.flow_stores.get((id(lst), ("item", idx + len(lst) if idx < 0 else idx)))
        if st is None:
            return False
        val, expr, ks, _ = st
        p = self.pending.get(frame)
        if lst[idx] is not val or self._flow_stale(ks) or p is not None and p != self._flow_tick:
            return False
        self._flow_load(frame, expr, ks, val)
        return True

    def _flow_items_written(self, lst: Any, frame: types.FrameType | None = None, keep_flushed: bool = False) -> None:
        """Any use of a list but the followed store just made and a read back
        (`_flow_item_load`): a store, a deletion, a mutating method, a read (lazy_sources.touch):
        its items' followed stores end (the operands guarded).  keep_flushed: a read by an
        uncapturable call (touch_deep), which reads the values a flush wrote before it
        (flush_writes.py) as the replay computed them: those stores stay."""
        if frame is not None and self.flow_item_at == (frame, frame.f_lasti):
            return
        i = self._stored_item(lst, frame)
        if i is not _MISSING:
            # a store to one item (`state["f"] = f` after the loop that counted `state["steps"] += 1`):
            # the followed stores of the other items stand, a followed store to that item ends
            st = self.flow_stores.pop((id(lst), ("item", i)), None)
            if st is not None:
                self._flow_escape_keys(st[2])
            return
        flushed = self.__dict__.get("flush_sym") or () if keep_flushed else ()
        for key in [k for k, st in self.flow_stores.items() if k[0] == id(lst) and type(k[1]) is tuple and
                    id(st) not in flushed]:
            self._flow_escape_keys(self.flow_stores.pop(key)[2])

    @staticmethod
    def _stored_item(lst: Any, frame: types.FrameType | None) -> Any:
        """The item of lst the STORE_SUBSCR about to run in frame writes (a dict's str / int key, a
        list's index from 0): its other items keep their values; _MISSING: another instruction, or
        a key whose item is not told apart by its type (a bool, a float, a slice, ...)."""
        if frame is None or _instrs(frame.f_code).get(frame.f_lasti, ("",))[0] != "STORE_SUBSCR" or \
                _E.peek(frame, 1) is not lst:
            return _MISSING
        key = _E.peek(frame, 0)
        if type(lst) is dict and type(key) in (str, int):
            return key
        if type(lst) is list and type(key) is int and -len(lst) <= key < len(lst):
            return key + len(lst) if key < 0 else key
        return _MISSING

    def _flow_store_read(self, oid: int, name: str) -> None:
        """`obj.name` (obj: id oid) read after this call stored a followed float there: the
        value is this call's, used as it is: the write is replayed as that number, its
        operands guarded."""
        st = self.flow_stores.pop((oid, name), None)
        if st is not None:
            self._flow_escape_keys(st[2])

    def _flow_extend(self, w: Write, by_target: dict, done: set) -> Write:
        """An "extend" write (a list's appended tail) with its followed items as their
        expressions."""
        st0 = next((st for (t, _), st in by_target.items() if t == w.target), None)
        if st0 is None:
            return w
        base = len(self.snaps[id(st0[3])][4])
        vals = list(w.value)
        for j, x in enumerate(vals):
            st = by_target.get((w.target, base + j))
            if st is not None and x is st[0] and all(k > -_ATTR_KEYS for k in st[2]):
                vals[j] = _SymExpr(st[1])
                done.add(id(st))
        return Write(w.kind, w.target, w.key, vals, w.setter)

    def _flow_bound(self, k: int) -> str:
        return f"_a{-k - _ATTR_KEYS}"

    def flow_bindings(self) -> list[tuple[str, str]]:
        """(name, attribute expression) bound at the start of the replay, for the attributes
        the replayed writes' expressions read."""
        out = {}
        for _, _, ks, _ in self.flow_stores.values():
            for k in ks:
                if k <= -_ATTR_KEYS and k in self.flow_roots:
                    out[self._flow_bound(k)] = self.flow_roots[k][0]
        for k, e in self.flow_ret_roots.items():   # (and the returned floats' expressions: flows._flow_returned)
            out[self._flow_bound(k)] = e
        return sorted(out.items())

    def flow_writes(self, writes: list[Write]) -> list[Write]:
        """The replayed writes, a stored float as its expression (attributes read as bound
        at the start); a store not found among the writes as that float (the attribute
        written again, deleted, ...) guards its operands instead."""
        if not self.flow_stores:
            return writes
        by_target: dict[tuple[str, Any], tuple] = {}
        # (stores written as their expressions before a break, flush_writes.py: guarded after it)
        flushed = self.__dict__.get("flush_sym") or ()
        for (_, name), st in self.flow_stores.items():
            snap = self.snaps.get(id(st[3]))
            if snap is not None and type(name) is tuple:   # a list item (`_flow_store_item`)
                if not self.ext_writes or id(st) in flushed:
                    by_target[(snap[2], name[1])] = st
            elif snap is not None:
                by_target[(f"{snap[2]}.__dict__", name)] = st
        out, done = [], set()
        for w in writes:
            if w.kind == "extend" and type(w.value) is list:   # appended items (`_flow_store_append`)
                w = self._flow_extend(w, by_target, done)
            st = by_target.get((w.target, w.key)) if w.kind == "item" else None
            if st is not None and w.value is st[0] and all(k in self.flow_roots or k > -_ATTR_KEYS for k in st[2]):
                e = st[1]
                for k in st[2]:
                    if k <= -_ATTR_KEYS:
                        e = e.replace(self.flow_roots[k][0], self._flow_bound(k))
                w = Write(w.kind, w.target, w.key, _SymExpr(e), w.setter)
                done.add(id(st))
            out.append(w)
        for st in self.flow_stores.values():
            if id(st) not in done and id(st) not in flushed:
                self._flow_escape_keys(st[2])
        return out
