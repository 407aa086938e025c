"""Where followed numbers start and end, for `_FlowMixin` (flows.py): float arguments,
attributes and variables followed from their loads (`op_load_fast`, `_flow_attr`), results
of graph breaks (`_follow_result`, `_data_result`), and the guard by value a number gets
when it escapes the follower (`_flow_escape`, `close_flows`)."""
from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from .classify import _context_wrapper, _context_wrapper_frame
from .flow_state import _ATTR_KEYS, _Flow, _calling_user_frame, _followable
from .flow_writes import _FlowWriteMixin
from .flow_items import _FlowItemMixin
from .frame_hook import _E
from .guard_kinds import Number, TypeIs


# the result of the call a waiting break result was read in (`math.log10(t)`: flows._flow_float_call)
FLOAT_CALL = object()
# sources and call sites remembered per captured function (`_varies`)
_MAX_INT_SOURCES = 4096
_NOT_PLAIN = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200   # *args, **kwargs, generator, coroutine


class _FlowRootMixin(_FlowItemMixin, _FlowWriteMixin):
    """The roots and escapes of followed numbers; `_flow_tick` (flows.py) advances them."""

    _flow_tick: Callable[[types.FrameType], None]   # (flows.py)

    def _follow_result(self, frame: types.FrameType, k: int, res: Any) -> bool:
        """res (the result of break k, an int or float) is at the top of frame's stack."""
        self.keep.append(res)
        self.flows_open[k] = res
        self.flow_vals[k] = res
        self.flow_frames.setdefault(frame, _Flow()).waiting.append((f"b{k}", frozenset((k,)), res))
        self._flow_tick(frame)
        return True

    def _flow_escape_all(self, fl: _Flow) -> None:
        for _, ks in fl.slots.values():
            for k in ks:
                self._flow_escape(k)
        fl.slots = {}

    def _flow_settled(self, k: int) -> None:
        """Break k's number needs no guard of its own any more (unless still followed)."""
        fl_ks = {k2 for fl in self.flow_frames.values() for _, ks in fl.slots.values() for k2 in ks}
        if k not in fl_ks:
            self.flows_open.pop(k, None)

    def op_load_fast(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        """A float argument of the captured function loaded (`x * scale`, `if t > 0.5`):
        followed like a break's number (key -(i + 1), expression L[i]), so that a new value
        recompiles only where the program needs the value itself.  So is a variable the
        follower stored a followed float into (`s = t.item()`, `lr = base * decay`), while
        it still holds that float."""
        ent = self.flow_locals.get((frame, arg)) if self.flow_locals else None
        if ent is not None:
            expr, ks, obj = ent
            if _E.local_raw(frame, arg) is obj:
                self._flow_load(frame, expr, ks, obj)
                return
            del self.flow_locals[(frame, arg)]
        fa = self.float_args.get(name)
        if fa is None or frame.f_code is not self.code:
            return
        i, a = fa
        if _E.local_raw(frame, arg) is not a:
            return   # the variable holds another value now
        if type(a) is int and (arg != i or not self._flow_root_frame(frame)):
            return   # (an int: another frame of the code may hold that same small int object)
        self._flow_load(frame, f"L[{i}]", frozenset((-(i + 1),)), a)

    def op_store_fast(self, frame: types.FrameType, arg: int | None, name: Any) -> None:
        """STORE_FAST / DELETE_FAST (3.12: LOAD_FAST_AND_CLEAR) of a variable that held a
        followed number (`n = t.item()` then `n = 3`): its loads are not followed any more,
        unless this is the store of a followed number the follower just made (flows.py)."""
        fa = self.float_args.get(name) if self.float_args else None
        if fa is not None and type(fa[1]) is int and fa[0] == arg and frame.f_code is self.code and \
                self._flow_root_frame(frame):
            # an int argument's variable rebound (`n = 3`): its later loads are not the argument,
            # even where the variable holds the very (small int) object it held
            del self.float_args[name]
        if not self.flow_locals:
            return
        key = (frame, arg)
        if key in self.flow_locals and self.flow_stored != (frame, arg, frame.f_lasti):
            del self.flow_locals[key]

    def _flow_callee(self, frame: types.FrameType) -> None:
        """A traced Python function starts (frame) from the CALL that hands it followed numbers
        (flow_call: `F.batch_norm(x, ..., momentum, eps)` in BatchNorm.forward, a helper): its
        parameters holding them are followed variables of its frame (op_load_fast), so what
        it does with them is followed too instead of guarding them at the call.  Only a plain
        function (no *args / **kwargs, no generator) that is the callable of that CALL, each
        number found in exactly one parameter (not a closure cell); otherwise nothing changes
        (the numbers are guarded as values handed to a call)."""
        fc = self.flow_call
        caller = frame.f_back
        code = frame.f_code
        f = fc[4] if fc is not None else None
        if caller is not None and _context_wrapper_frame(caller) and _context_wrapper(getattr(f, "__func__", f)):
            # (`@torch.no_grad()`: torch's wrapper hands the arguments on as they are)
            caller, f = caller.f_back, getattr(f, "__func__", f).__wrapped__
        if fc is None or caller is not fc[0] or caller.f_lasti != fc[1] or code.co_flags & _NOT_PLAIN:
            return
        if getattr(getattr(f, "__func__", f), "__code__", None) is not code:
            return
        n = code.co_argcount + code.co_kwonlyargcount
        params = [_E.local_raw(frame, j) for j in range(n)]
        found = {}
        for j, v in enumerate(params):
            if id(v) in fc[2] and code.co_varnames[j] not in code.co_cellvars and \
                    sum(1 for w in params if w is v) == 1:
                found[j] = v
        if len({id(v) for v in found.values()}) != len(fc[2]):
            return   # a number not bound to a parameter of its own
        for j, v in found.items():
            self.flow_locals[(frame, j)] = (fc[2][id(v)], fc[3], v)
            self.keep.append(v)
        self._flow_call_done(fc)   # followed in the callee (escaping there guards them)

    def _flow_load(self, frame: types.FrameType, expr: str, ks: frozenset[int], obj: Any) -> None:
        """obj (the value of expr, computed from the numbers ks) is pushed by the instruction
        about to run in frame: followed from the next one on."""
        p = self.pending.get(frame)
        if p is not None and p != self._flow_tick:
            self._flow_escape_keys(ks)
            return
        for k in ks:
            if k not in self.flows_guarded:
                self.flows_open[k] = self.flow_vals[k]
        self.flow_frames.setdefault(frame, _Flow()).waiting.append((expr, ks, obj))
        self.pending[frame] = self._flow_tick

    def _varies(self, key: tuple, v: Any) -> bool:
        """Whether recordings of this function have read two different values at `key`.
        An int read from a source (("arg", index), ("item", id(dict), name) for an attribute
        or a global, ("list", id(list), index), ("item", id(cell), "cell")) is followed like
        a float (a graph input where a tensor operator takes it, guarded by the
        branch it decides, by value wherever else it goes: a shape, an index, a call) once a
        recording of this function has read two values there, as Dynamo's automatic dynamic;
        until then it is guarded by value (a constant of the graph, a recompile per value).
        Following is sound for any int; this only decides when it pays.  A torch call site
        taking followed numbers (scalar_inputs._flow_torch_step) runs between graphs once its
        numbers vary.  Values met twice by one recording are not compared with each other."""
        cap = self.captured
        seen, dyn = getattr(cap, "int_seen", None), getattr(cap, "dyn_ints", None)
        if seen is None or dyn is None:
            return False
        if key in dyn:
            return True
        if key not in seen:
            if len(seen) < _MAX_INT_SOURCES:
                seen[key] = v
                self.seen_here.add(key)
            return False
        if key in self.seen_here:
            return False   # two values in one call (a helper called twice): not a change between calls
        if seen[key] != v:
            dyn.add(key)
            return True
        return False

    def _flow_root(self, k: int | None, expr: str, pretty: str, v: Any, pos: int = 0,
                   group: tuple | None = None) -> int:
        """A float read from expr (an argument, an attribute) followed instead of guarded by
        value (its type is guarded where it was read); returns its key (< 0; k, or a new one
        for an attribute: None).  Its guard if it escapes: the value, at pos.  An attribute
        is read again by the replay (a graph input, a guard, a replayed call): followed only
        until the next break (an uncapturable call may write it)."""
        if k is None:
            k = -(_ATTR_KEYS + len(self.flow_pos))
            self.flow_pos[k] = pos
            self.flow_ext[k] = self.ext_writes
            self.flow_bwd[k] = self.backward_steps
        self.flow_roots[k] = (expr, pretty, v, pos, group)
        self.flow_vals[k] = v
        self.keep.append(v)
        return k

    def _flow_attr(self, frame: types.FrameType | None, expr: str, pretty: str, v: Any, owner: int, name: str,
                   group: tuple) -> bool:
        """A float attribute read by LOAD_ATTR (`self.scale`, `cfg.temperature`), or an int
        one seen with two values (`_varies`), or a global (op_load_global): followed like
        a float argument (its type guarded here, its value only where the program needs it),
        so that a schedule changing it between calls does not recompile.  False: read (and
        guarded) as any other value."""
        if frame is None:   # a reflective read (getattr(self, "tau")): its value is used as it is
            k = self.flow_attrs.get(expr)
            if k is not None:
                self._flow_escape(k)
            return False
        if not (_followable(v) or type(v) is int) or (owner, name) in self.dirty:
            return False
        k = self.flow_attrs.get(expr)
        if k is None:
            p = self.pending.get(frame)
            if expr in self.read_exprs or p is not None and p != self._flow_tick:
                return False
            if type(v) is int and not self._varies(("item", id(group[0]) if group else owner, name), v):
                return False
            self.read_exprs[expr] = self.epoch
            self.guard(TypeIs(expr, pretty, type(v)), group=group)
            k = self.flow_attrs[expr] = self._flow_root(None, expr, pretty, v, pos=self.ncalls, group=group)
        elif k in self.flows_guarded:
            return True   # guarded by value
        elif self.flow_vals[k] is not v or self.flow_pos[k] != self.ncalls:
            self._flow_escape(k)   # a break since it was read: guarded by the value read then
            # (and after an uncapturable call, which may have written it, read (and guarded) again)
            return self.read_exprs.get(expr) == self.epoch
        self._flow_load(frame, expr, frozenset((k,)), v)
        return True

    def _flow_guard_pos(self, ks: frozenset[int]) -> int:
        """Where a guard on an expression of the numbers ks goes: after the last break among
        them, or where the attribute among them was read (a float argument: before the call)."""
        return max(k + 1 if k >= 0 else self.flow_pos.get(k, 0) for k in ks)

    def _flow_stale(self, ks: frozenset[int]) -> bool:
        """An attribute among ks was read before the last uncapturable call (which may write
        it): reading it again at the replay's step now may not give the value the program
        read (escape it instead).  A data-dependent tensor operation between (`.item()`, a
        torch function run between graphs) runs no Python code that could write it."""
        return bool(self.flow_ext) and any(self.flow_ext.get(k, self.ext_writes) != self.ext_writes for k in ks)

    def _flow_escape_args(self) -> None:
        """Every float argument and followed variable guarded by value (its frame's variables
        are read otherwise: locals(), vars())."""
        for i, _ in list(self.float_args.values()):
            self._flow_escape(-(i + 1))
        for _, ks, _ in list(self.flow_locals.values()):
            self._flow_escape_keys(ks)

    def _flow_escape_keys(self, ks: frozenset[int]) -> None:
        for k in ks:
            self._flow_escape(k)

    def _flow_escape(self, k: int) -> None:
        """Guard the result of break k by value, right after the break (as `_call_result`);
        a float argument or attribute (k < 0) where it was read."""
        if k < 0:
            root = self.flow_roots.pop(k, None)
            self.flows_open.pop(k, None)
            self.flows_given.pop(k, None)
            self.flows_scalar.pop(k, None)
            if root is None:
                return
            self.flows_guarded.add(k)
            for n, (i, _) in list(self.float_args.items()):
                if -(i + 1) == k:
                    del self.float_args[n]   # guarded: not followed any more
            expr, pretty, a, pos, group = root
            self.guard(Number(expr, pretty, a, type(a)), pos=pos, group=group)
            return
        self.flows_open.pop(k, None)
        self.flows_given.pop(k, None)
        self.flows_scalar.pop(k, None)
        if k in self.flows_guarded or k not in self.flow_vals:
            return
        res = self.flow_vals[k]
        self.flows_guarded.add(k)
        saved, self.ncalls = self.ncalls, k + 1
        try:
            self._call_result(k, res)
        finally:
            self.ncalls = saved

    def _flow_arg(self, frame: types.FrameType, a: Any) -> str | None:
        """The replay expression of argument a of the uncapturable call about to run here, when
        it is a value computed from a followed number (None: any other argument)."""
        fc = self.flow_call
        if fc is None or fc[0] is not frame or fc[1] != frame.f_lasti:
            return None
        e = fc[2].get(id(a))
        if e is not None:
            self._flow_call_done(fc)
        return e

    def _flow_unused(self, frame: types.FrameType) -> None:
        """The call about to run here ignores its arguments (a logger not enabled for the level)."""
        fc = self.flow_call
        if fc is not None and fc[0] is frame and fc[1] == frame.f_lasti:
            self._flow_call_done(fc)

    def _flow_call_done(self, fc: tuple) -> None:
        """The call flow_call fc handed followed numbers to needs no guard on them: replayed
        with their expressions, ignoring them, or following them (`_flow_callee`).  Per call:
        the same numbers handed to another call are guarded unless that one is done too."""
        self.flow_calls_done.add(id(fc))

    def close_flows(self) -> None:
        """End of the recording: numbers still followed, or handed to a call that was not
        replayed with their expression (a traced function, a torch function), are guarded."""
        if self.flow_scalar is not None:   # an operand the operator never took (graph.py)
            self._flow_escape_keys(self.flow_scalar[3])
            self.flow_scalar = None
        dead = self._dead_local_keys()
        for k in list(self.flows_open):
            if k not in dead:
                self._flow_escape(k)
        for fc in self.flow_calls:   # each call handed followed numbers, not done (_flow_call_done)
            if id(fc) not in self.flow_calls_done:
                self._flow_escape_keys(fc[3])
        for k in list(self.flows_scalar):   # (graph.py _scalar_input resolves each use)
            self._flow_escape(k)

    def _dead_local_keys(self) -> set[int]:
        """Break results still followed at the end only in variables of frames that have
        returned (`unused = loss.item()`, never read again): nothing computed from them was
        used, so they need no guard (a recompile per value).  Not in a generator's frame
        (it may run on) nor where a followed stack slot still holds them."""
        live = {k for fl in self.flow_frames.values() for _, ks in fl.slots.values() for k in ks}
        gen = 0x20 | 0x80 | 0x200   # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
        return {k for (fr, _), (_, ks, _) in self.flow_locals.items() if not fr.f_code.co_flags & gen
                for k in ks if k >= 0 and k not in live}

    def _data_result(self, k: int, res: Any) -> None:
        """The number or text a data-dependent operation returned (`loss.item()`, `float(t)`,
        `f"{t.mean():.3f}"`), break k: followed from the user's code calling it, when that is
        where it returns to.  Where the user's code called `math.log10(t)` (a function of one
        number, handed the tensor itself: its Tensor.__float__ is break k), the call's result
        is followed as `math.log10(b{k})` (flows._flow_float_call); it was guarded by value,
        a new recording on every call (EDSR's PSNR, `-10 * math.log10(mse)`)."""
        f = _calling_user_frame() if type(res) in (int, float, str) else None
        if f is None or f in self.pending and self.pending[f] != self._flow_tick:
            self._call_result(k, res)
            return
        self.flows_open[k] = res
        self.flow_vals[k] = res
        self.keep.append(res)
        fc, self.float_call = self.__dict__.get("float_call"), None
        if fc is not None and fc[0] is f and fc[1] == f.f_lasti and type(res) is float:
            self.flow_frames.setdefault(f, _Flow()).waiting.append((f"{fc[2]}(b{k})", frozenset((k,)), FLOAT_CALL))
        else:
            self.flow_frames.setdefault(f, _Flow()).waiting.append((f"b{k}", frozenset((k,)), res))
        self.pending[f] = self._flow_tick
