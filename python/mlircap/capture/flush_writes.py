"""Writes flushed before a graph break: where the function wrote external state (an attribute,
a dict or list item, a global) and then makes an uncapturable call that may read it (a callee
an earlier recording gave up in, run eagerly; a library call handed the written object; an
optimizer's step after `group["lr"] = ...`), the replay applies the writes recorded so far
right before that call, in order, instead of at its end, and the capture goes on after the
call, as Dynamo's side-effect codegen does at a graph break.  Before, the whole frame ran
eagerly ("the function wrote state before a call into X").

Only writes whose values the replay names without making a new object are flushed (numbers,
strings, None, constants, tensors the recording tracks or a graph computed, objects it
sources): the callee may mutate what it is handed, which a rebuilt copy would not carry back.
After the call, each flushed location is guarded (mid-replay) to still hold the value written,
since the recording goes on reading what the function stored there; a replay that misses later
puts the flushed locations back (`undo_writes`) before the call records again, so that its own
writes are made once.  A list extended and a set updated are flushed too (guarded after the call
by their lengths, snapshotted again so that the end does not write them twice).  Other kinds
(slices, set discards, deques, ContextVars, a closure cell empty before) keep the old rule: the
frame runs eagerly.

An int counter (`self.step_n += 1`, counters.py) and a followed number stored (`group["lr"] =
f(self.step_n)`, flow_writes.py) are flushed as their expressions of the values the replay binds
at its start (`_c{i}`, `_a{i}`: those bindings are kept however the recording goes on,
`flush_bindings`), not guarded by value; the value written is bound to a name of its own
(`_pv{k}_{i}`), which the guard after the call compares by identity."""
from __future__ import annotations

import collections
import dataclasses
import types
from typing import TYPE_CHECKING, Any

import torch

from .base import Unreplayable, _MISSING
from .classify import _IMMUTABLE_CONST, _PRIM
from .counters import _SymExpr
from .flow_writes import _ATTR_KEYS
from .guard_kinds import Guard, Is, Number, SameAs, Equals
from .lazy_sources import _dict_items
from .rng import _NewLogged, _unlog_raising
from .steps import Write

if TYPE_CHECKING:  # pragma: no cover
    from .recorder import _Recorder


def _names_as_is(rec: _Recorder, v: Any, depth: int = 0) -> bool:
    """v's replay expression names v itself (or an equal immutable value), not a new object."""
    if v is None or type(v) in _PRIM or type(v) is _SymExpr:
        return True
    if isinstance(v, torch.Tensor):
        e = rec.env.get(id(v))
        return id(v) in rec.src or e is not None and e[0] is v
    if id(v) in rec.src:
        return True
    if isinstance(v, types.FunctionType):
        return not v.__closure__ and not rec.fresh_types
    return isinstance(v, _IMMUTABLE_CONST + (types.BuiltinFunctionType, type, types.ModuleType)) and \
        not isinstance(v, torch.nn.Module)


_NEW_TYPES = (dict, list, collections.defaultdict)
_WHOLE = {"extend": list, "update": set}


def _new_container(rec: _Recorder, v: Any) -> bool:
    """v is a plain dict / list / defaultdict the call made (not a tracked object), small, of
    keys and items the replay names as they are (no new object inside, which the program may
    hold apart from it): the replay builds it from its recorded contents, binds it to a name
    (`_nw{i}`) and the recording tracks it by that name from then on (_track_new), so that what
    the call and the function do with it later is done to that one object."""
    if type(v) not in _NEW_TYPES or id(v) in rec.src or len(v) > 64:
        return False
    if type(v) is collections.defaultdict and v.default_factory not in (list, dict, tuple, int, float, set, None):
        return False
    items = list(v.items()) if isinstance(v, dict) else [(0, x) for x in v]
    return all(_names_as_is(rec, k) and _names_as_is(rec, x) for k, x in items)


def _container_expr(rec: _Recorder, v: Any) -> str:
    """The replay's expression building the new container v from its contents."""
    if type(v) is collections.defaultdict:
        f = "None" if v.default_factory is None else rec.const(v.default_factory)
        return f"{rec.const(collections.defaultdict)}({f}, {rec.expr_of(dict(v))})"
    return rec.expr_of(v)


def _track_new(rec: _Recorder, new: dict[int, tuple[str, Any]], what: str) -> None:
    """The new containers flushed: tracked by their names (_nw{i}, bound before the call), not
    guarded before it (the replay built them), lazily guarded where the program next uses them
    after it (their contents then, which the call may have changed: new_epoch_after), their later
    writes replayed into them."""
    if not new:
        return
    rec.nflush_new = rec.__dict__.get("nflush_new", 0) + len(new)
    # (the call they are flushed before, k: its logged result carries them, replay.py)
    rec.__dict__.setdefault("flush_new_at", {})[rec.ncalls] = [name for name, _ in new.values()]
    rec.flush_new_last = (rec.ncalls, [v for _, v in new.values()])
    for name, v in new.values():
        rec.__dict__.setdefault("flush_new", {})[id(v)] = v
        rec.src[id(v)] = (name, f"<the {type(v).__name__} written before {what}>", False)
        rec.keep.append(v)
        rec._snap(v, name, rec.src[id(v)][1])


def new_logged(rec: _Recorder, k: int) -> list[str]:
    """The names of the new containers flushed before call k (the replay logs them with its result)."""
    return (rec.__dict__.get("flush_new_at") or {}).get(k, [])


def _take_contents(mine: list, logged: _NewLogged) -> bool:
    if len(mine) != len(logged.new) or any(type(a) is not type(b) for a, b in zip(mine, logged.new)):
        return False
    for a, b in zip(mine, logged.new):
        if isinstance(a, dict):
            a.clear()
            a.update(b)
        else:
            a[:] = b
    return True


def replay_unlog_new(logged: Any, mine: tuple) -> Any:
    """A replay tried after another missed, taking the logged result of call k (replay.py): its
    own new containers flushed before the call get their contents as the call left them."""
    if type(logged) is _NewLogged and not _take_contents(list(mine), logged):
        raise RuntimeError("mlircap: new containers written before a call differ at a replay")
    return _unlog_raising(logged)


def catch_up_new(rec: _Recorder, logged: Any) -> None:
    """The recording that follows a replay that missed takes the logged result of a call it does
    not run again (external_calls: catch-up).  New containers flushed before that call: those of
    the replay are the ones the call changed (a collector it filled); this recording's own, made
    again by the function, get their contents as the call left them (else: a collector empty)."""
    if type(logged) is not _NewLogged:
        return
    last = rec.__dict__.get("flush_new_last")
    mine = last[1] if last is not None and last[0] == rec.ncalls else []
    if not _take_contents(mine, logged):
        rec.unreplayable = rec.unreplayable or "the new containers written before a call differ at a replay"


def new_epoch_after(rec: _Recorder, k: int) -> None:
    """After uncapturable call k (epochs._new_epoch, which then guards them lazily from their
    contents now, where next used): the new containers flushed before it are snapshotted again,
    from their contents after the call (its own changes are made by the call at replay, not
    written again at the end)."""
    new = rec.__dict__.get("flush_new") or {}
    for vid in list(new):
        v = new.pop(vid)
        if vid in rec.snaps and (vid, "*") not in rec.dirty:
            _, _, name, pretty, _ = rec.snaps.pop(vid)
            rec._snap(v, name, pretty)
    # containers the flushes wrote into, not written since: what the call did to them is its own
    # (made by it at replay; written again at the end, the recording's values were constants
    # there), and they are guarded again from their contents now where next used, as those the
    # function did not write (epochs._new_epoch leaves out those in rec.dirty)
    for vid, v in (rec.__dict__.get("flush_conts") or {}).items():
        sn = rec.snaps.get(vid)
        if sn is None or sn[1] is not v or (vid, "*") in rec.dirty.pending or (vid, "**") in rec.dirty.pending:
            continue
        kind, _, expr, pretty, _ = sn
        now = list(v) if kind == "list" else _dict_items(v) if kind == "dict" else set(v)
        rec.snaps[vid] = (kind, v, expr, pretty, now)
        lz = rec.lazy.get(vid)
        rec.lazy[vid] = (v, expr, pretty, lz[3] if lz else 0, k + 1, None, now)


def sn_is_container(t: Any) -> bool:
    return type(t) in (dict, list, set, collections.defaultdict)


def _loc(rec: _Recorder, w: Write) -> str:
    kl = rec._lit(w.key)
    return f"{w.target}[{kl}]" if w.kind in ("item", "delitem") else f"{w.target}.{w.key}"


def _targets(rec: _Recorder) -> dict[str, Any]:
    """The containers the recording's writes store into, by their replay expressions."""
    out: dict[str, Any] = {}
    for kind, v, expr, _, _ in rec.snaps.values():
        if kind in ("dict", "list", "set"):
            out[expr] = v
        elif kind == "slots":
            out[expr] = v
        elif kind in ("obj", "obj+slots"):
            out[f"{expr}.__dict__"] = v.__dict__
            if kind == "obj+slots":
                out[expr] = v
        elif kind == "module":
            for a in ("__dict__", "_parameters", "_buffers", "_modules"):
                out[f"{expr}.{a}"] = v.__dict__ if a == "__dict__" else getattr(v, a)
    for g, name, _, _ in rec.global_snaps.values():
        if name is not None:
            out[rec.const(g)] = g
        elif id(g) in rec.ext_cells:   # a closure cell (name None): its cell_contents set
            out[rec.ext_cells[id(g)][0]] = g
    return out


def _guard_for(rec: _Recorder, w: Write, t: Any, vexpr: str) -> Guard | None:
    """After the call: the location still holds what the function wrote there (None: the
    value is an expression of the replay, compared by identity with the name it is bound to,
    pre_write_guards)."""
    kl = rec._lit(w.key)
    loc = f"{w.target}[{kl}]" if w.kind in ("item", "delitem") else f"{w.target}.{w.key}"
    name = f"{loc} (written before the call)"
    if w.kind == "delitem":
        return Is(f"({kl} in {w.target})", name + " deleted", False, "False")
    v = w.value
    if type(v) is _SymExpr:
        return None
    if v is None or type(v) is bool:
        return Is(loc, name, v, repr(v))
    if type(v) is str:
        return Equals(loc, name, v, str)
    if type(v) in (int, float, complex, bytes):
        return Number(loc, name, v, type(v))
    return SameAs(loc, name, vexpr, "the value written")


def flush_before_call(rec: _Recorder, what: str) -> bool:
    """Before uncapturable call `what`: the writes recorded since the last flush become the
    call's pre-writes (rec.pre_writes, taken by graph_steps._call_step).  False: they cannot
    be flushed (the caller keeps the old rule, the frame runs eagerly)."""
    if rec.np_env or rec.memo is not None or rec.__dict__.get("pre_writes"):
        return False
    if any(cv.get(_MISSING) is not old for cv, old in rec.cv_snap.items()):
        return False
    if any(key[0] == "cell" and not snap[2] for key, snap in rec.global_snaps.items()):
        return False   # (a closure cell empty before: no value to put back)
    flows = pending_flows(rec)
    try:
        writes = rec.writes()
    except Unreplayable:
        return False
    new: dict[int, tuple[str, Any]] = {}
    whole: dict[int, Any] = {}
    bound: set[str] = set()
    binds: dict[str, str] = {}
    writes = _as_expressions(rec, writes, flows, binds)
    targets = _targets(rec)
    out: list[tuple[Write, Guard]] = []
    for w in writes:
        t = targets.get(w.target, _MISSING)
        if w.setter is not None or t is _MISSING:
            return False
        if w.kind in _WHOLE:   # a list extended, a set updated: by items named as they are
            if type(t) is not _WHOLE[w.kind] or not all(_names_as_is(rec, x) for x in w.value):
                return False
            try:
                vexpr = rec.expr_of(list(w.value)) if type(t) is list else rec.expr_of(set(w.value))
            except Unreplayable:
                return False
            n = len(t)   # (after the call: its length as the function left it)
            out.append((dataclasses.replace(w, value=vexpr),
                        Equals(f"len({w.target})", f"len({w.target}) (written before the call)", n, int)))
            whole[id(t)] = t
            continue
        if w.kind in ("item", "delitem"):
            if type(t) is not dict and not (type(t) is list and w.kind == "item" and type(w.key) is int):
                return False
        elif w.kind != "set" or type(getattr(t, "__dict__", None)) is dict and w.key in t.__dict__:
            return False   # (set: a slot attribute alone)
        nw = None
        if w.kind != "delitem" and not _names_as_is(rec, w.value):
            if not _new_container(rec, w.value):
                return False
            nw = new.get(id(w.value))
            if nw is None:
                nw = new[id(w.value)] = (f"_nw{rec.__dict__.get('nflush_new', 0) + len(new)}", w.value)
        try:
            vexpr = rec.expr_of(w.value) if w.kind != "delitem" and nw is None else "None"
        except Unreplayable:
            return False
        if nw is not None:   # (bound to its name where first written, named after)
            vexpr = nw[0] if nw[0] in bound else f"({nw[0]} := {_container_expr(rec, w.value)})"
            bound.add(nw[0])
            g = SameAs(_loc(rec, w), f"{_loc(rec, w)} (written before the call)", nw[0], f"the new {type(w.value).__name__}")
        else:
            g = _guard_for(rec, w, t, vexpr)
        out.append((dataclasses.replace(w, value=vexpr), g))
    rec.keep.append(writes)
    rec.pre_writes = out
    _track_new(rec, new, what)
    for vid, t in whole.items():   # (made now: the end's writes are those after, not these again)
        kind, v, expr, pretty, snap = rec.snaps[vid]
        lz = rec.lazy.get(vid)
        if lz is not None and len(lz) == 6:   # (still guarded, where used, from its contents before)
            rec.lazy[vid] = lz + (snap,)
        rec.snaps[vid] = (kind, v, expr, pretty, list(t) if kind == "list" else set(t))
    rec.__dict__.setdefault("flush_binds", {}).update(binds)
    # dict items stored while the dict was lazily guarded (read by nobody before): a later guard of
    # its contents leaves their old values out (lazy_sources.touch)
    # made now: not forced again at the end as stored by the code (side_effects.writes), which
    # wrote the recording's value there where a later call changed it (a constant)
    for w, _ in out:
        t = targets[w.target]
        if w.kind in ("item", "set"):
            owner = next((id(sn[1]) for sn in rec.snaps.values()
                          if sn[1] is t or type(getattr(sn[1], "__dict__", None)) is dict and sn[1].__dict__ is t), None)
            st = rec.stored.get(owner) if owner is not None else None
            if st:
                st.discard(("item", w.key) if sn_is_container(t) else w.key)
    conts = rec.__dict__.setdefault("flush_conts", {})   # (new_epoch_after)
    for w, _ in out:
        t = targets[w.target]
        if type(t) in (dict, list, set) and id(t) in rec.snaps:
            conts[id(t)] = t
    # (up to right after the call: there the guard after it holds the item to what was written)
    fi = rec.__dict__.setdefault("flush_items", {})
    for w, _ in out:
        t = targets[w.target]
        if w.kind == "item" and type(t) is dict and id(t) in rec.lazy:
            fi[(id(t), w.key)] = rec.ncalls + 1
    rec.dirty.pending.clear()
    done = rec.__dict__.setdefault("flow_flushed", {})
    for key in flows:
        done[key] = rec.flow_stores[key]
    rec.dirty.first = None
    return True


def _as_expressions(rec: _Recorder, writes: list[Write], flows: list, binds: dict[str, str]) -> list[Write]:
    """The pending writes of int counters (counters.py) and followed numbers (flow_writes.py)
    as their expressions of the values bound at the replay's start (as counter_writes /
    flow_writes give them at its end), the bindings they read put into `binds`.  A followed
    number not so written has its operands guarded by value (as where a flow escapes): the
    value flushed is then the number itself."""
    at: dict[tuple[str, Any], Any] = {}
    for key, c in rec.counters.items():
        if key in rec.dirty.pending and c.symbolic and c.tmpl != "{B}" and c.expect is None:
            d = getattr(c.owner, "__dict__", None)
            snap = rec.snaps.get(id(c.owner))
            if type(d) is dict and type(d.get(c.name)) is int and d[c.name] == c.value and snap is not None:
                at[(f"{snap[2]}.__dict__", c.name)] = c
    for key in flows:
        st = rec.flow_stores[key]
        snap = rec.snaps.get(id(st[3]))
        ok = snap is not None and not rec._flow_stale(st[2]) and \
            all(k in rec.flow_roots or k > -_ATTR_KEYS for k in st[2])
        if ok:
            name = key[1]
            at[(snap[2], name[1]) if type(name) is tuple else (f"{snap[2]}.__dict__", name)] = st
        else:
            rec._flow_escape_keys(st[2])
    out, sym = [], rec.__dict__.setdefault("flush_sym", set())
    for w in writes:
        x = at.pop((w.target, w.key), None) if w.kind == "item" else None
        if x is not None and type(x) is tuple and w.value is x[0]:   # a followed number
            e = x[1]
            for k in x[2]:
                if k <= -_ATTR_KEYS:
                    b = rec._flow_bound(k)
                    e = e.replace(rec.flow_roots[k][0], b)
                    binds[b] = rec.flow_roots[k][0]
            w = dataclasses.replace(w, value=_SymExpr(e))
            sym.add(id(x))
        elif x is not None and type(x) is not tuple and type(w.value) is int and w.value == x.value:   # a counter
            binds[f"_c{x.idx}"] = x.base
            w = dataclasses.replace(w, value=_SymExpr(x.tmpl.replace("{B}", f"_c{x.idx}")))
            sym.add(id(x))
        elif x is not None and type(x) is tuple:
            rec._flow_escape_keys(x[2])
        out.append(w)
    for x in at.values():   # (no write found: the counter's or the number's value guarded)
        if type(x) is tuple:
            rec._flow_escape_keys(x[2])
        else:
            rec._counter_escape(x)
    return out


def flush_bindings(rec: _Recorder) -> list[tuple[str, str]]:
    """(name, expression) the replay binds at its start for the flushed expressions (counters,
    followed numbers): kept even where the recording later guards those values instead."""
    return sorted((rec.__dict__.get("flush_binds") or {}).items())


def flushed_sym(rec: _Recorder, x: Any) -> bool:
    """x (a counter, a followed store) was flushed as its expression: its value is written, and
    guarded after the call to stay so; its write at the end (if any) is the same expression."""
    return id(x) in (rec.__dict__.get("flush_sym") or ())


def pending_flows(rec: _Recorder) -> list:
    """The keys of the followed numbers stored (rec.flow_stores, flows.py) since the last flush."""
    if not rec.flow_stores:
        return []
    done = rec.__dict__.get("flow_flushed") or {}
    return [key for key, st in rec.flow_stores.items() if done.get(key) is not st]


def pre_write_guards(rec: _Recorder, k: int, flushed: list[tuple[Write, Guard]]) -> list[Write]:
    """At call step k with flushed writes: their guards placed after the call; the writes.
    A value given as an expression (None guard) is bound to `_pv{k}_{i}` by the replay."""
    for i, (w, g) in enumerate(flushed):
        if g is None:
            kl = rec._lit(w.key)
            loc = f"{w.target}[{kl}]" if w.kind == "item" else f"{w.target}.{w.key}"
            g = SameAs(loc, f"{loc} (written before the call)", f"_pv{k}_{i}", "the value written")
        rec.guard(g, pos=k + 1)
    return [w for w, _ in flushed]


# -- what the replay calls -----------------------------------------------------------------
def apply_write(undo: list, kind: str, t: Any, key: Any, v: Any) -> None:
    """One flushed write (`kind` item / delitem / set into `t`), its undo record kept."""
    if kind == "set":
        try:
            old = getattr(t, key, _MISSING)
        except ValueError:   # (an empty closure cell: refused at the recording)
            old = _MISSING
        undo.append((t, key, old, True))
        setattr(t, key, v)
    elif type(t) is dict:
        undo.append((t, key, t.get(key, _MISSING), False))
        if kind == "item":
            t[key] = v
        else:
            t.pop(key, None)
    elif type(t) is set:   # updated (validated at the recording)
        undo.append((t, None, set(t), False))
        t.update(v)
    else:   # a list: an item, extended (validated at the recording)
        undo.append((t, None, list(t), False))
        if kind == "item":
            t[key] = v
        else:
            t.extend(v)


def undo_writes(undo: list) -> None:
    """A replay that misses after flushed writes: the locations put back, last first."""
    while undo:
        t, key, old, attr = undo.pop()
        if attr:
            if old is _MISSING:
                delattr(t, key)
            else:
                setattr(t, key, old)
        elif key is None and type(t) is list:
            t[:] = old
        elif key is None and type(t) is set:
            t.clear()
            t.update(old)
        elif old is _MISSING:
            t.pop(key, None)
        else:
            t[key] = old
