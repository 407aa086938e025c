"""Numbers returned by graph breaks, followed opcode by opcode until the program is done with
them (`_FlowMixin`), so that they need no guard on their value:

* compared and branched on (`random.random() < self.p`, `if loss.item() > th:`,
  `if float(t.mean()) < 0:`): the mid-replay guard is the comparison's outcome;
* formatted and handed to an uncapturable call (`print(f"loss {loss.item():.3f}")`,
  `log.info("%.3f", v)`): the replayed call gets the expression of the replay's own value
  (`"loss " + format(b3, ".3f")`) instead of the text this recording printed;
* anything else (the number reaches a graph, a variable, a traced function, a return value,
  an exception): guarded by value right after the break, as every break result was.

The follower models only the stack slots holding values computed from the number, through
a few instructions (loads, arithmetic, comparisons, conditional jumps, f-string formatting,
calls); any other instruction while such a slot is live ends it with the value guard.  Other
operands are the program's own values, guarded where they were read: they enter the
expressions as literals (numbers and strings only).

Where numbers start and where they escape: flow_roots.py; the per-frame state and stack
bookkeeping: flow_state.py; floats written back to attributes: flow_writes.py."""
from __future__ import annotations

import builtins
import math
import operator
import types
from typing import Any

import torch

from ._bytecode import _instrs, _nb_op
from .base import INDEXING, PY312, _MISSING
from .classify import _classify, _context_wrapper_frame
from .flow_boxes import _PASS, _Box, _FlowBoxMixin
from .flow_roots import FLOAT_CALL, _FlowRootMixin
from .flow_state import _JUMPS, _Flow, _followable, _next_offsets, _operand, _pretty, _shift
from .frame_hook import _E, _NULL
from .guard_kinds import Equals
from .typeinfo import _np_float

_CMP = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
        ">=": operator.ge}
_ARITH = {"+", "-", "*", "/", "//", "%", "**"}
_PUSH1 = ("LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF")
_NOOPS = ("PRECALL", "KW_NAMES", "NOP", "EXTENDED_ARG", "CACHE")
_CONV = {0: "{}", 1: "str({})", 2: "repr({})", 3: "ascii({})"}
_MAX_STEPS = 48
# functions of numbers alone: called with followed numbers, their result is followed
_PURE_NUMERIC = {f: n for n, f in [(n, getattr(builtins, n)) for n in ("max", "min", "abs", "float", "round", "pow")] +
                 [(f"math.{n}", getattr(math, n)) for n in (
                     "sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "tanh", "atan",
                     "sinh", "cosh", "erf", "pow", "fabs", "floor", "ceil", "hypot", "copysign")]}
# those of them that read their one argument as a float (Tensor.__float__ for a tensor)
_MATH_OF_FLOAT = {f: n for f, n in _PURE_NUMERIC.items() if n.startswith("math.") and n not in ("math.floor", "math.ceil")}
_BUILDS = ("BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP")
# (pops, pushes) of instructions that only touch their operands: with no followed operand,
# the followed slots below them just move
_EFFECTS = {
    "BINARY_SUBSCR": lambda a: (2, 1), "BINARY_SLICE": lambda a: (3, 1), "BUILD_SLICE": lambda a: (a, 1),
    "BUILD_TUPLE": lambda a: (a, 1), "BUILD_LIST": lambda a: (a, 1), "BUILD_MAP": lambda a: (2 * a, 1),
    "BUILD_CONST_KEY_MAP": lambda a: (a + 1, 1), "UNARY_INVERT": lambda a: (1, 1),
    "UNARY_POSITIVE": lambda a: (1, 1), "CONTAINS_OP": lambda a: (2, 1), "IS_OP": lambda a: (2, 1),
    "STORE_ATTR": lambda a: (2, 0), "STORE_SUBSCR": lambda a: (3, 0), "GET_LEN": lambda a: (1, 2),
}   # flow keys of attributes: -(_ATTR_KEYS + i); of float arguments: -(index + 1)


def _binop(arg: int | None) -> str | None:
    s = _nb_op(arg)
    return s if s in _ARITH else None


def _built_paths(fr: types.FrameType, op: str, arg: int) -> dict[int, Any] | None:
    """Where each stack slot of the container op (a BUILD_* about to run in fr) goes in it: its
    index in a tuple / list, ("key", k) for a dict's value (str / int keys, all distinct); None
    where a dict's keys are not such (a value is placed by its key)."""
    if op in ("BUILD_TUPLE", "BUILD_LIST"):
        return {p: arg - 1 - p for p in range(arg)}
    if op == "BUILD_MAP":
        keys = {p: _E.peek(fr, p + 1) for p in range(0, 2 * arg, 2)}
    else:
        kt = _E.peek(fr, 0)
        if type(kt) is not tuple or len(kt) != arg:
            return None
        keys = {p: kt[arg - p] for p in range(1, arg + 1)}
    if any(type(k) not in (str, int) for k in keys.values()) or len(set(keys.values())) != len(keys):
        return None
    return {p: ("key", k) for p, k in keys.items()}


def _appended_list(fr: types.FrameType, argc: int) -> list | None:
    """The list a CALL about to run appends to (`lst.append(v)`, the method form or a bound
    `lst.append`), else None."""
    m = _E.peek(fr, argc + 1)
    if m is list.append:
        lst = _E.peek(fr, argc)
        return lst if type(lst) is list else None
    if m is _NULL:
        c = _E.peek(fr, argc)
        if type(c) is types.BuiltinMethodType and type(c.__self__) is list and c.__name__ == "append":
            return c.__self__
    return None


class _FlowMixin(_FlowRootMixin, _FlowBoxMixin):
    """For `_Recorder` (through `_TracerMixin`): `_follow_result` after an uncapturable call,
    `_data_result` after a data-dependent operation, `_flow_arg` for the replayed call that
    takes a followed value, `close_flows` at the end of the recording.  A frame's numbers
    advance together, one pending step per instruction (`_flow_tick`)."""

    def _flow_tick(self, fr: types.FrameType) -> None:
        """Advance the numbers followed in frame fr over the instruction about to run."""
        fl = self.flow_frames.get(fr)
        if fl is None:
            return
        code = fr.f_code
        if fl.expect is not None and fr.f_lasti not in fl.expect:
            self._flow_escape_all(fl)   # a step was missed (another pending step ran instead)
        for expr, ks, res in fl.waiting:
            top = _E.peek(fr, 0)
            if (top is res or res is FLOAT_CALL and type(top) is float) and 0 not in fl.slots:
                fl.slots[0] = (expr, ks)
            else:
                for k in ks:
                    self._flow_escape(k)
        fl.waiting = []
        ins = _instrs(code).get(fr.f_lasti)
        if fl.slots and (ins is None or fl.steps > _MAX_STEPS or self._flow_apply(fl, fr, ins) is None):
            self._flow_escape_all(fl)
        fl.steps += 1
        if fl.slots:
            fl.expect = _next_offsets(code, fr.f_lasti, ins)
            self.pending[fr] = self._flow_tick
        else:
            del self.flow_frames[fr]

    def _flow_apply(self, fl: _Flow, fr: types.FrameType, ins: tuple) -> bool | None:
        """Move the followed slots over instruction ins (about to run); None: not followed."""
        op, arg, argval, _ = ins
        arg = arg or 0
        slots = fl.slots
        if any(type(e) is _Box for e, _ in slots.values()):   # a container of followed floats (flow_boxes.py)
            r = self._flow_box_op(fl, fr, ins)
            if r is not _PASS:
                return r
        if op in _NOOPS or op in _JUMPS:
            return True
        if op in _PUSH1 or op == "PUSH_NULL":
            return _shift(fl, 0, 1)
        if op == "LOAD_GLOBAL":
            return _shift(fl, 0, 1 + (arg & 1))
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            if 0 in slots:
                return None
            return _shift(fl, 1, 2 if op == "LOAD_METHOD" or PY312 and arg & 1 else 1)
        if op in ("BINARY_OP", "COMPARE_OP"):
            if 0 not in slots and 1 not in slots:
                return _shift(fl, 2, 1)
            sym = _binop(arg) if op == "BINARY_OP" else (argval if argval in _CMP else None)
            if op == "BINARY_OP" and sym is not None and self._flow_tensor_operand(fl, fr):
                return _shift(fl, 2, 1)   # a tensor: the number became a graph input (or is guarded)
            a, b = _operand(fl, fr, 1, None), _operand(fl, fr, 0, None)
            if sym is None or a is None or b is None:
                return None
            return _shift(fl, 2, 1, (f"({a[0]} {sym} {b[0]})", a[1] | b[1]))
        if op == "POP_TOP":   # a value dropped: nothing computed from it is used
            dropped = slots.get(0)
            _shift(fl, 1, 0)
            for k in dropped[1] if dropped else ():
                self._flow_settled(k)
            return True
        if op == "SWAP":   # `self.tau *= 0.9`: ... COPY 1, LOAD_ATTR, BINARY_OP, SWAP 2, STORE_ATTR
            top, other = slots.pop(0, None), slots.pop(arg - 1, None)
            if top is not None:
                slots[arg - 1] = top
            if other is not None:
                slots[0] = other
            return True
        if op == "COPY":
            return None if arg - 1 in slots else _shift(fl, 0, 1)
        if op == "STORE_ATTR" and 1 in slots and 0 not in slots:   # a float written back: flow_writes.py
            if not self._flow_store(fr, argval, *slots[1]):
                return None
            ks = slots[1][1]
            _shift(fl, 2, 0)
            for k in ks:
                self._flow_settled(k)
            return True
        if op == "STORE_SUBSCR" and 2 in slots and 0 not in slots and 1 not in slots:
            # `N[0] = N[0] + 1`: a number written back into a list item (flow_writes.py)
            if not self._flow_store_item(fr, *slots[2]):
                return None
            ks = slots[2][1]
            _shift(fl, 3, 0)
            for k in ks:
                self._flow_settled(k)
            return True
        if op in ("BINARY_SUBSCR", "STORE_SUBSCR") and 0 in slots and 1 not in slots and 2 not in slots:
            # `betas[t]`, `buf[self.ptr] = x`: a tensor indexed by a followed int, which the
            # graph takes as a 0-d index tensor input (scalar_inputs._index_input) instead of
            # a value guard (a recompile per value: a sampling loop's step, a ring buffer's pointer)
            if not self._flow_index(fr, *slots[0]):
                return None
            return _shift(fl, 2, 1) if op == "BINARY_SUBSCR" else _shift(fl, 3, 0)
        if op == "IS_OP" and (0 in slots) != (1 in slots) and _E.peek(fr, 1 if 0 in slots else 0) is None:
            # `st["best"] is None` of a followed number: the test is followed (its branch guards it)
            e, ks = slots[0 if 0 in slots else 1]
            return _shift(fl, 2, 1, (f"({e} is{' not' if arg else ''} None)", ks))
        eff = _EFFECTS.get(op)
        if eff is not None and op not in _BUILDS:
            pops, pushes = eff(arg)
            return _shift(fl, pops, pushes) if not any(p < pops for p in slots) else None
        if op in ("UNARY_NEGATIVE", "UNARY_NOT"):   # (`if not x.shape[0]:`, a data-dependent row count)
            if 0 in slots:
                slots[0] = (f"({'-' if op == 'UNARY_NEGATIVE' else 'not '}{slots[0][0]})", slots[0][1])
            return True
        if op.startswith("POP_JUMP") and ("IF_FALSE" in op or "IF_TRUE" in op):
            if 0 in slots:
                return self._flow_branch(fl, fr, slots[0], _E.peek(fr, 0))
            return _shift(fl, 1, 0)
        if op.startswith("POP_JUMP") and op.endswith("NONE"):
            if 0 in slots:   # `if st["best"] is None:` of a followed number (3.12 jumps on it)
                return self._flow_branch(fl, fr, (f"({slots[0][0]} is None)", slots[0][1]), _E.peek(fr, 0) is None)
            return _shift(fl, 1, 0)   # `None if a is None else a.item()` below a followed number
        if op == "FORMAT_VALUE":
            spec = bool(arg & 4)
            if 0 in slots and spec:
                return None
            pos = 1 if spec else 0
            if pos not in slots:
                return _shift(fl, pos + 1, 1)
            sp = _E.peek(fr, 0) if spec else ""
            if type(sp) is not str:
                return None
            e, ks = slots[pos]
            return _shift(fl, pos + 1, 1, (f"format({_CONV[arg & 3].format(e)}, {sp!r})", ks))
        if op == "BUILD_STRING":
            if not any(p < arg for p in slots):
                return _shift(fl, arg, 1)
            parts = [_operand(fl, fr, p, True) for p in range(arg - 1, -1, -1)]
            if any(x is None for x in parts):
                return None
            return _shift(fl, arg, 1, ("(" + " + ".join(x[0] for x in parts) + ")",
                                       frozenset().union(*(x[1] for x in parts))))
        if op == "STORE_FAST":
            if 0 not in slots:
                self.flow_locals.pop((fr, arg), None)
                return _shift(fl, 1, 0)
            obj = _E.peek(fr, 0)
            if not (_followable(obj) or type(obj) is int or type(obj) is str and len(obj) > 1):
                return None   # (a text: `s = f"{t.max():.2f}"`, a fresh object unless it is that short)
            # a variable holding a followed number: its loads are followed again (op_load_fast;
            # an int is told from an equal one by op_store_fast dropping every other store)
            self.flow_locals[(fr, arg)] = (*slots[0], obj)
            self.flow_stored = (fr, arg, fr.f_lasti)
            self.keep.append(obj)
            return _shift(fl, 1, 0)
        if op in ("MAP_ADD", "LIST_APPEND") and 0 in slots and self._flow_comp_returned(fr):
            # `return loss, {k: v.item() for k, v in losses.items()}`: a float the comprehension
            # adds to the container the captured function returns at once
            if any(0 < p < (2 if op == "MAP_ADD" else 1) for p in slots):
                return None   # (a followed key)
            return self._flow_returned(fl, fr, (0,), 2 if op == "MAP_ADD" else 1, 0)
        if op == "RETURN_VALUE" and 0 in slots:
            if self._flow_root_frame(fr) and type(slots[0][0]) is _Box:   # its floats, by identity
                return self._flow_returned(fl, fr, (), 1, 0, leaves=[(*t, None) for t in slots[0][0].leaves()])
            if self._flow_root_frame(fr):
                return self._flow_returned(fl, fr, (0,), 1, 0, {0: None})
            return self._flow_return(fl, fr)
        if op in _BUILDS and not any(p < _EFFECTS[op](arg)[0] for p in slots):
            return _shift(fl, *_EFFECTS[op](arg))
        if op in _BUILDS:
            # `return y, lam`, `return {"loss": loss.item()}`: built and returned at once
            n = 2 * arg if op == "BUILD_MAP" else arg + (op == "BUILD_CONST_KEY_MAP")
            nxt = _instrs(fr.f_code).get(_next_offsets(fr.f_code, fr.f_lasti, ins)[0])
            # (BUILD_MAP: key, value pairs, a value on top; BUILD_CONST_KEY_MAP: the keys' tuple on top)
            vals = range(0, n, 2) if op == "BUILD_MAP" else range(1 if op == "BUILD_CONST_KEY_MAP" else 0, n)
            if nxt is None or nxt[0] != "RETURN_VALUE" or not self._flow_root_frame(fr) or \
                    any(type(e) is _Box for p, (e, _) in slots.items() if p < n):
                # kept, moved and returned later (`metrics = {"epe": e.item()}`): flow_boxes.py
                return self._flow_box_build(fl, fr, op, n, vals, _built_paths(fr, op, arg))
            if any(p < n and p not in vals for p in slots):
                return None   # a followed key
            return self._flow_returned(fl, fr, tuple(p for p in vals if p in slots), n, 1, _built_paths(fr, op, arg))
        if op == "CALL":
            if arg in slots or arg + 1 in slots:
                return None   # the callable or the bound receiver
            if arg == 1 and 0 in slots:
                lst = _appended_list(fr, arg)
                if lst is not None and self._flow_store_append(fr, lst, *slots[0]):
                    # `losses.append(loss.item())`: written as its expression (flow_writes.py)
                    ks = slots[0][1]
                    _shift(fl, arg + 2, 1)
                    for k in ks:
                        self._flow_settled(k)
                    return True
            given = {p: t for p, t in slots.items() if p < arg}
            if given:
                pure = self._flow_pure_call(fl, fr, arg)
                if pure is not None:
                    return _shift(fl, arg + 2, 1, pure)
            if given and self._flow_stale(frozenset().union(*(t[1] for t in given.values()))):
                return None
            if given:
                objs = [_E.peek(fr, p) for p in range(arg)]
                for p in given:   # a value another argument also is (a cached small int) is ambiguous
                    if any(objs[q] is objs[p] for q in range(arg) if q not in given):
                        return None
                ks = frozenset().union(*(t[1] for t in given.values()))
                m = _E.peek(fr, arg + 1)
                self.flow_call = (fr, fr.f_lasti, {id(objs[p]): t[0] for p, t in given.items()}, ks,
                                  _E.peek(fr, arg) if m is _NULL else m)
                self.flow_calls.append(self.flow_call)
                self.keep.extend(objs[p] for p in given)
                for k in ks:   # (also one a graph input took: this call needs it too)
                    if k not in self.flows_guarded:
                        self.flows_given[k] = self.flows_open.pop(k, self.flow_vals[k])
            return _shift(fl, arg + 2, 1)
        return None

    def _flow_branch(self, fl: _Flow, fr: types.FrameType, slot: tuple[str, frozenset[int]], value: Any) -> bool | None:
        """A conditional jump pops the followed test slot (its outcome value): guarded by that outcome."""
        expr, ks = slot
        if type(value) in (int, float):   # `if not x.shape[0]:` jumps on the number's truth
            expr, value = f"bool({expr})", bool(value)
        if type(value) is not bool or self._flow_stale(ks):
            return None
        self.guard(Equals(expr, _pretty(expr), value, exact=bool), pos=self._flow_guard_pos(ks))
        _shift(fl, 1, 0)
        for k in ks:
            self._flow_settled(k)
        return True

    def _flow_index(self, fr: types.FrameType, expr: str, ks: frozenset[int]) -> bool:
        """The subscript about to run in fr indexes a tensor by the followed int on top of
        the stack: handed to the indexing op like a call's argument (flow_call), which
        takes it as a graph input where it can (scalar_inputs._index_input); else it is
        guarded by value at the end (close_flows)."""
        idx, base = _E.peek(fr, 0), _E.peek(fr, 1)
        if type(idx) is not int or not isinstance(base, torch.Tensor) or self._flow_stale(ks) or \
                (fr.f_code, fr.f_lasti) in getattr(self.captured, "index_sites_off", ()):
            return False
        self.flow_call = (fr, fr.f_lasti, {id(idx): expr}, ks, INDEXING)
        self.flow_calls.append(self.flow_call)
        self.keep.append(idx)
        for k in ks:
            if k not in self.flows_guarded:
                self.flows_given[k] = self.flows_open.pop(k, self.flow_vals[k])
        return True

    def _flow_pure_call(self, fl: _Flow, fr: types.FrameType, argc: int) -> tuple[str, frozenset[int]] | None:
        """`max(m, 1e-6)`, `math.sqrt(d)`, `float(r)`: a function of numbers alone, with no
        state, called with followed numbers and literals: its result is followed, as the
        expression of the call (None: any other call)."""
        if self.kwnames.get(fr) or _E.peek(fr, argc + 1) is not _NULL:
            return None
        f = _E.peek(fr, argc)
        try:
            name = _PURE_NUMERIC.get(f)
        except TypeError:   # unhashable
            return None
        if name is None:
            return None
        ops = []
        for p in range(argc - 1, -1, -1):
            v = _E.peek(fr, p)
            o = _operand(fl, fr, p, None)
            if o is None or not (type(v) in (int, float) or _np_float(v)):
                return None
            ops.append(o)
        return (f"{self.const(f, name)}({', '.join(o[0] for o in ops)})", frozenset().union(*(o[1] for o in ops)))

    def _flow_float_call(self, fr: types.FrameType, f: Any, args: list) -> None:
        """The CALL about to run in fr is `math.log10(t)` of a tensor: the number its
        Tensor.__float__ returns (a break) is followed through the call (flow_roots._data_result)."""
        if type(f) is types.BuiltinFunctionType and isinstance(args[0], torch.Tensor) and f in _MATH_OF_FLOAT:
            self.float_call = (fr, fr.f_lasti, self.const(f, _MATH_OF_FLOAT[f]))

    def _flow_comp_returned(self, fr: types.FrameType) -> bool:
        """fr is a dict / list comprehension's frame (Python 3.11: a function of its own) called by
        the captured function's frame, which returns its result at once (in a tuple, list or dict
        it builds right there): no code reads the container in between."""
        caller = fr.f_back
        if fr.f_code.co_name not in ("<dictcomp>", "<listcomp>") or caller is None or \
                caller.f_trace is None or not self._flow_root_frame(caller):
            return False
        code, off = caller.f_code, caller.f_lasti
        for i in range(6):   # the comprehension's CALL, then only builds up to the return
            ins = _instrs(code).get(off)
            if ins is None or ins[0] not in ((("CALL",) if i == 0 else ()) + _BUILDS + _NOOPS + ("RETURN_VALUE",)):
                return False
            if ins[0] == "RETURN_VALUE":
                return True
            nxt = _next_offsets(code, off, ins)
            if len(nxt) != 1:
                return False
            off = nxt[0]
        return False

    def _flow_root_frame(self, fr: types.FrameType) -> bool:
        """fr is the captured function's own frame (its return value is the call's)."""
        caller = fr.f_back
        return fr.f_code is self.code and (caller is None or caller.f_trace is None or _classify(caller.f_code) != "user")

    def _flow_returned(self, fl: _Flow, fr: types.FrameType, pos: tuple[int, ...], pops: int, pushes: int,
                       paths: dict[int, Any] | None = None, leaves: list | None = None) -> bool | None:
        """Followed floats the captured function returns (at pos): the replay returns them as
        their expressions (`expr_of`) instead of as the values of this recording, which then
        need no guard.  An attribute in them (`d = min(self.decay, (1 + self.updates) / (10 +
        self.updates))`, an EMA's warmup) is the value it had as the replay starts (flow_bindings),
        where it was read before any break: the return is evaluated after the replay's writes.
        An int (`(pred == y).sum().item()`, a count) may be a shared small-int object: it is
        returned as its expression only at its place in the value returned (`paths`: stack
        position -> None for the value itself, an index of the tuple / list or a dict's key
        built right before the return; values.return_expr), not wherever that object occurs.
        leaves: (expression, keys, float) of a box returned (flow_boxes.py), instead of pos."""
        items = []
        for expr, ks, obj, p in leaves or [(*fl.slots[p], _E.peek(fr, p), p) for p in pos]:
            placed = type(obj) is int and paths is not None and p in paths
            if not (type(obj) is float or _np_float(obj) or type(obj) is str and len(obj) > 1 or placed) or \
                    any(k in self.flow_pos and (not self.flow_pos[k] and self.flow_ext.get(k) or k not in self.flow_roots)
                        for k in ks):
                return None   # (a text of one character or none may be a shared object: guarded)
            for k in ks:
                if k in self.flow_pos and self.flow_pos[k]:
                    # read after break flow_pos[k] - 1 (`sched.get_last_lr()[0]` after the scheduler's
                    # step): bound by the replay right after that break, where it read it (replay.py)
                    name = f"_p{-k}"
                    self.__dict__.setdefault("flow_late_binds", {}).setdefault(self.flow_pos[k], {})[name] = \
                        self.flow_roots[k][0]
                    expr = expr.replace(self.flow_roots[k][0], name)
                elif k in self.flow_pos:
                    expr = expr.replace(self.flow_roots[k][0], self._flow_bound(k))
                    # (its expression kept: a later escape pops k from flow_roots, guarding it by
                    # value, and the returned expression still reads it as bound at the start)
                    self.flow_ret_roots[k] = self.flow_roots[k][0]
            items.append((obj, expr, ks, paths[p] if placed else _MISSING))
        _shift(fl, pops, pushes)
        for obj, expr, ks, path in items:
            if path is _MISSING:
                self.flow_ret[id(obj)] = (obj, expr)
            else:
                self.flow_ret_at[path] = (obj, expr)
            self.keep.append(obj)
            for k in ks:
                self._flow_settled(k)
        return True

    def _flow_return(self, fl: _Flow, fr: types.FrameType) -> bool | None:
        """A traced function returns a followed number (`random.uniform(a, b)`: `a + (b - a) *
        self.random()` in random.py) to the traced code calling it: followed on there (through
        torch's wrapper of a `@torch.no_grad()` function, which returns it as it is)."""
        caller = fr.f_back
        if caller is not None and _context_wrapper_frame(caller):
            caller = caller.f_back
        if caller is None or caller.f_trace is None or not caller.f_trace_opcodes or \
                _classify(caller.f_code) != "user" or caller in self.pending and self.pending[caller] != self._flow_tick:
            return None
        ins = _instrs(caller.f_code).get(caller.f_lasti)
        if ins is None or ins[0] not in ("CALL", "CALL_FUNCTION_EX"):
            return None
        expr, ks = fl.slots.pop(0)
        obj = _E.peek(fr, 0)
        self.keep.append(obj)
        self.flow_frames.setdefault(caller, _Flow()).waiting.append((expr, ks, obj))
        self.pending[caller] = self._flow_tick
        self._flow_escape_all(fl)   # what else this frame followed ends with it
        return True

    def _flow_tensor_operand(self, fl: _Flow, fr: types.FrameType) -> bool:
        """`x * r`, `(1 - r) * x`, `x / r` (a float computed from followed numbers, the other
        operand a tensor): the torch operator that runs next may take the float as a graph
        input (`flow_scalar`, graph.py `_scalar_input`) instead of a constant, so the value
        needs no guard: a new draw of `random.random()` does not recompile.  Where it does
        not, the number is guarded at the end (close_flows), as a value handed to a call."""
        if (0 in fl.slots) == (1 in fl.slots):
            return False
        pos = 0 if 0 in fl.slots else 1
        obj, other = _E.peek(fr, pos), _E.peek(fr, 1 - pos)
        if not (type(obj) in (float, int) or _np_float(obj)) or not isinstance(other, torch.Tensor):
            return False
        expr, ks = fl.slots[pos]
        if self._flow_stale(ks):
            return False
        if self.flow_scalar is not None:   # an operand the operator never took (graph.py)
            self._flow_escape_keys(self.flow_scalar[3])
        self.flow_scalar = (id(obj), obj, expr, ks)
        self.keep.append(obj)
        for k in ks:
            if k in self.flows_open:
                self.flows_scalar[k] = self.flows_open.pop(k)
        return True
