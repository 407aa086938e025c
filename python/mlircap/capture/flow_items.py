"""Items of lazily guarded containers followed as numbers, for `_FlowRootMixin` (flow_roots.py):
a float (or varying int) item of a list, tuple or plain dict read by subscript (`_flow_item`,
`self.weights[0]`, `stats["calls"] += 1`), `d.get(k)` / `k in d` / `len(c)` decided by the
container's keys or length (`_flow_dict_call`, `_flow_dict_keys`, `_flow_len`), and every item
guarded by value when the container escapes (`_flow_items_escape`)."""
from __future__ import annotations

import collections
import types
from typing import Any

from ._bytecode import _instrs, _order
from .flow_state import _followable
from .guard_kinds import Equals, Keys, TypeIs, TypeLen


class _FlowItemMixin:
    """Container items followed like float attributes; the roots and escapes are flow_roots.py's."""

    def _flow_item(self, frame: types.FrameType, c: Any, idx: Any) -> bool:
        """`self.weights[0]`: a float item (or an int one seen with two values, `_varies`:
        `N[0]`, a step counter) of a lazily guarded list (an attribute, a global, a cell), read
        by BINARY_SUBSCR with an int index, followed like a float attribute:
        the list is guarded for its type and length, its float items for their types, each
        item's value only where the program needs it.  A schedule changing the floats
        between calls then does not recompile.  So is an item of a lazily guarded plain dict
        read with a str or int key it has (`self.stats["calls"] += 1`, a global dict of
        counters, `d.get(k)`: `_flow_dict_call`): the dict's keys are guarded instead of its
        length.  Any other use of the container (iterating it, handing it to a call, reading
        it after a break) guards every followed item by value (`_flow_items_escape`,
        through touch).  False: not such a read (touch the container)."""
        is_dict = type(c) is dict
        if is_dict and type(idx) in (str, int) and idx in c and ("item", idx) in self.stored.get(id(c), ()) and \
                (id(c), "**") not in self.dirty and (id(c), ("item", idx)) not in self.flow_stores:
            # a key this call stored itself by STORE_SUBSCR, no method since (`stats["mean"] = m` then
            # `x - stats["mean"]`): the value read is that store's, computed by the call from values
            # guarded or in the graph (a followed number stored there is read by _flow_item_load or
            # guarded); the dict's other items (a followed counter) are not read
            return True
        if is_dict:
            # a followed dict this call stored other keys of (`d["calls"] += 1` then
            # `d.get("tokens", 0)`) still holds the other keys' values at the call
            if type(idx) not in (str, int) or idx not in c or (id(c), "*") in self.dirty and \
                    (id(c) not in self.float_items or (id(c), "**") in self.dirty or
                     ("item", idx) in self.stored.get(id(c), ())):
                return False
        elif (id(c), "*") in self.dirty or type(c) not in (list, tuple) or type(idx) is not int:
            return False
        hint = idx if is_dict and frame is not None and _augmented_subscript(frame) else None
        fi = self._flow_container(c, need=not is_dict, hint=hint)
        if fi is None:
            return False
        if is_dict:
            at = idx
            v = c[idx]
        else:
            n = len(c)
            at = idx + n if -n <= idx < 0 else idx
            v = c[idx] if at in fi[1] else None
        k = fi[1].get(at)
        if k is None:
            return True   # an item guarded by value, or an IndexError
        if k in self.flows_guarded:
            return True
        if self.flow_vals[k] is not v or self.flow_pos[k] != self.ncalls and \
                (self.flow_ext.get(k) != self.ext_writes or self.flow_bwd.get(k) != self.backward_steps):
            if self.flow_vals[k] is not v or self.flow_ext.get(k) != self.ext_writes or k not in self.flow_roots:
                # an uncapturable call that may write it since it was read: guarded by the value
                # read then (other breaks leave it: the replay writes the program's state at its
                # end, so the item still holds the value bound as the replay started)
                self._flow_escape(k)
                return True
            # only a backward since (its hooks may write it): read here again, as a float attribute
            # read after it is (`p.data.add_(p.grad, alpha=-st["lr"])` after `loss.backward()`:
            # its value was guarded, a recompile per learning rate), its type guarded here
            ie, ip, _, _, group = self.flow_roots[k]
            self.guard(TypeIs(ie, ip, type(v)), group=group)
            k = fi[1][at] = self._flow_root(None, ie, ip, v, pos=self.ncalls, group=group)
        self._flow_load(frame, self.flow_roots[k][0], frozenset((k,)), v)
        return True

    def _flow_container(self, c: Any, need: bool = True, hint: Any = None) -> tuple | None:
        """The followed items of the lazily guarded list, tuple or plain dict c, its guards
        placed on the first call: (c, {index or key: flow key}).  None: c is not lazily
        guarded as it was at the call, or (need) none of its items is followed (touch it).
        A dict is followed even so: its keys are guarded and each item by value, as touch
        does, and later reads of other items and of its keys (`k in d`, `d.get(k)`) need no
        more guards.  hint: the key of an int item the call updates in place (`d[k] += 1`,
        `_augmented_subscript`), followed from the first recording on: a counter."""
        fi = self.float_items.get(id(c))
        if fi is not None:
            return fi
        lz = self.lazy.get(id(c))
        if lz is None:
            return None
        is_dict = type(c) is dict
        v, expr, pretty, depth, pos, group = lz[:6]
        kind, _, _, _, snap = self.snaps[id(c)]
        if len(lz) > 6:   # its contents after an uncapturable call (epochs._new_epoch)
            snap = lz[6]
        if pos != self.ncalls or len(snap) != len(c):
            return None
        if is_dict:
            if kind != "dict" or list(snap) != list(c) or any(snap[k] is not c[k] for k in snap):
                return None
            items = list(snap.items())
            follow = [_followable(x) or type(x) is int and type(k) in (str, int) and
                      (k == hint and type(k) is type(hint) or self._varies(("ditem", id(c), k), x))
                      for k, x in items]
        else:
            if kind not in ("list", "tuple") or any(a is not b for a, b in zip(snap, c)):
                return None
            items = list(enumerate(snap))
            follow = [_followable(x) or type(x) is int and self._varies(("list", id(c), i), x)
                      for i, x in items]
        if need and not any(follow):
            return None
        del self.lazy[id(c)]   # (touch() must not guard it again)
        keys: dict[Any, int] = {}
        # (as touch: a dict read from a dict group's entry is guarded in that group)
        dgroup = group + (v,) if group and is_dict else None
        saved, self.ncalls = self.ncalls, pos
        try:
            self.guard(TypeLen(expr, pretty, type(c), len(snap)), group=dgroup)
            if is_dict:
                self.guard(Keys(expr, pretty, tuple(snap)), group=dgroup)
            for f, (i, x) in zip(follow, items):
                ie, ip = self._item(v, expr, i), f"{pretty}[{i!r}]"
                if f:
                    self.guard(TypeIs(ie, ip, type(x)), group=dgroup)
                    keys[i] = self._flow_root(None, ie, ip, x, pos=self.ncalls, group=dgroup)
                else:
                    self._source(x, ie, ip, False, depth + 1, dgroup)
        finally:
            self.ncalls = saved
        fi = self.float_items[id(c)] = (c, keys)
        self.lazy[id(c)] = lz   # other uses still touch it
        return fi

    def _flow_dict_keys(self, d: Any, key: Any) -> bool:
        """`key in d`, `d.get(key)` where d is a lazily guarded plain dict the call has not
        changed by a method: decided by its keys (guarded by `_flow_container`) and the
        call's own stores, not by its items' values.  True: nothing else to guard."""
        if type(d) is not dict or type(key) not in (str, int) or (id(d), "**") in self.dirty:
            return False
        if id(d) in self.float_items:
            return True
        return (id(d), "*") not in self.dirty and self._flow_container(d, need=False) is not None

    def _flow_dict_call(self, frame: types.FrameType, f: Any, args: list, kwargs: dict) -> bool:
        """`d.get(k)`, `d.get(k, default)`, `d.setdefault(k, default)` on a lazily guarded
        plain dict that has the key k (a str or int): the item read, as `d[k]`
        (`_flow_item`; setdefault writes nothing then); `d.get(k, default)` of a key it does
        not have: decided by its keys (`_flow_dict_keys`).  True: handled (nothing else to do
        for the call); False: any other call."""
        if f is len and len(args) == 1 and not kwargs:
            return self._flow_len(args[0])
        if kwargs or type(f) not in (types.BuiltinMethodType, types.MethodDescriptorType):
            return False
        name = getattr(f, "__name__", "")
        if name not in ("get", "setdefault"):
            return False
        if type(f) is types.MethodDescriptorType:
            if f.__objclass__ is not dict or not args:
                return False
            d, rest = args[0], args[1:]
        else:
            d, rest = f.__self__, args
        if type(d) is not dict or id(d) not in self.lazy or not 1 <= len(rest) <= 2:
            return False
        key = rest[0]
        if type(key) not in (str, int):
            return False
        if key not in d:
            return name == "get" and self._flow_dict_keys(d, key)
        return self._flow_item(frame, d, key)

    def _flow_len(self, c: Any) -> bool:
        """`len(c)` of a lazily guarded list, tuple, deque or plain dict: decided by its type and
        length, guarded as they were when it was read, its items still guarded only where the
        program reads them. As any other call it guarded every item by value (touch): an int
        step counter in an optimizer's per-parameter state (`if len(state) == 0: ...;
        state["step"] += 1`) or the floats of a history list (`hist.append(float(n)); if
        len(hist) > 4: hist.pop(0)`) recompiled every call.  True: handled."""
        if type(c) not in (list, tuple, dict, collections.deque):
            return False
        if id(c) in self.float_items:
            return True   # (its type and length guarded by _flow_container)
        lz = self.lazy.get(id(c))
        if lz is None:
            return False
        v, expr, pretty, depth, pos, group = lz[:6]
        snap = lz[6] if len(lz) > 6 else self.snaps[id(c)][4]
        # (as touch: a dict read from a dict group's entry is guarded in that group)
        group = group + (v,) if group and type(v) is dict else None
        saved, self.ncalls = self.ncalls, pos
        try:
            self.guard(TypeLen(expr, pretty, type(v), len(snap)), group=group)
            if type(v) is collections.deque:
                self.guard(Equals(f"{expr}.maxlen", f"{pretty}.maxlen", v.maxlen))
        finally:
            self.ncalls = saved
        return True

    def _flow_items_escape(self, c: Any) -> bool:
        """Any use of a list whose float items are followed (`_flow_item`) but a subscript:
        every float item guarded by value.  False: no such list."""
        fi = self.float_items.pop(id(c), None)
        if fi is None:
            return False
        self.lazy.pop(id(c), None)
        for k in fi[1].values():
            self._flow_escape(k)
        return True


def _augmented_subscript(frame: types.FrameType) -> bool:
    """The BINARY_SUBSCR about to run in frame reads the item of an augmented assignment
    (`d[k] += 1`: COPY 2, COPY 2, BINARY_SUBSCR, ..., STORE_SUBSCR)."""
    offs, index = _order(frame.f_code)
    i = index.get(frame.f_lasti)
    if i is None or i < 2:
        return False
    ins = _instrs(frame.f_code)
    a, b = ins[offs[i - 2]], ins[offs[i - 1]]
    return a[0] == "COPY" and a[1] == 2 and b[0] == "COPY" and b[1] == 2
