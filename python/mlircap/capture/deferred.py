"""Numbers read from tensors of the open graph, read after it (`_DeferMixin`): `t.item()`,
`float(t)`, `int(t)` on a one-element CPU tensor end the graph only where the program needs
the number inside it.  The recording keeps the open graph going: the graph outputs a copy of
t (a clone node, so in-place writes later in the graph cannot change what is read) and the
replay reads the number from it by a step right after the graph (`b{k} = ...item()`), whose
result is followed as a break's (flows.py: guarded by the branches it decides, replayed as
the expression it is printed, written or returned as).  Where the number must be inside the
graph (a graph input computed from it: `x / max(m, 1e-6)`, `x.clamp(-s, s)`), the graph is
split there (`split_deferred`), after the ops between; the break counts as before.

Sound because a graph is pure apart from its in-place writes: everything it computes past
the read either is the computation eager makes (the number does not decide it) or is
discarded by a mid-replay guard that fails after the graph (a branch the number decided, a
constant it set), which rolls back what the replay wrote and records again (replay.py wraps
such a graph like one with checks: an exception of the graph is a miss too).  Guards on other
values read while the read is pending keep their place before the graph (`defer_guard_pos`).
Not on another device (a CUDA graph's asserts would fire before the guard is checked), nor
after an uncapturable call that may write state (a guard failing there continues the frame
from its break: resumes.py), nor a second time at one place in one call (a loop)."""
from __future__ import annotations

import ast
import builtins
import re
from typing import Any

import torch

from .guard_kinds import Equals
from .steps import CallStep

_BREAK_NAME = re.compile(r"\bb(\d+)\b")
DEFERRABLE = ("item", "__float__", "__int__", "__format__")
_ARITH = {ast.Add: (torch.add, "add"), ast.Sub: (torch.sub, "sub"), ast.Mult: (torch.mul, "mul"),
          ast.Div: (torch.div, "div")}


def _is_float(v: Any) -> bool:
    return type(v) is float or isinstance(v, torch.Tensor) and v.dtype == torch.float64


class _NotExact(Exception):
    """An expression the open graph does not compute as Python does."""


class _DeferMixin:
    """For `_GraphMixin`: `_defer_data_step` at a data-dependent read, `split_deferred` where
    its number must enter the open graph, `defer_guard_pos` for the guards placed meanwhile."""

    def _defer_data_step(self, func: Any, name: str, t: torch.Tensor, res: Any, fe: str, reason: str,
                         loc: str, more: list[str] = ()) -> bool:
        """`res = t.item()` (func) just ran: read it after the open graph instead of splitting
        the graph here (`f"{t:.3f}"`: Tensor.__format__ of a one-element tensor, `more` its
        format spec, a text).  False: not deferred (a graph break as before)."""
        if self.stopped or type(res) not in ((str,) if name == "__format__" else (int, float)) or \
                t.device.type != "cpu" or t.numel() != 1 or \
                self.__dict__.get("dyn_shape") and id(t) in self.dyn_shape or self._defer_site(loc) in self.defer_sites \
                or self.epoch or loc in self.captured.__dict__.get("defer_off", ()):
            # (a read met again at its place, in a loop: a break, as recorder.LOOP_BREAKS counts;
            # after an uncapturable call that may write state, a guard failing after the read
            # continues the frame from the break (resumes.py), which a deferred read has not;
            # defer_off: read after an optimizer's step, a guard on its number needed one,
            # guard_misses._continuations)
            return False
        if (self.cur is None or not self.cur.nops) and self.steps and isinstance(self.steps[-1], CallStep):
            # right after a break, no graph operation since (`loss.backward(); opt.step();
            # return loss.item()`): read now, a break merged with that one, instead of a
            # graph of one clone
            return False
        self.defer_sites.add(self._defer_site(loc))
        # (a detached copy: the number has no gradient, and a graph input the open graph computes
        # from it (_graph_input_in_graph) carried t's: `s = x.sum().item(); (x * s).sum()` gave
        # x a gradient twice eager's, edges --grad seed 153)
        d = torch.Tensor.detach(t)
        c = torch.Tensor.clone(d)
        try:
            self._record(torch.Tensor.detach, "detach", (t,), {}, d)
            self._record(torch.Tensor.clone, "clone", (d,), {}, c)
        except Exception:  # noqa: BLE001  (a tensor the graph cannot take: a break as before)
            return False
        seg = self.cur
        if seg is None or self.env.get(id(c), (None,))[0] is not c:
            return False
        self.keep.append(c)
        if self.defer_window is None or self.defer_window[0] != seg.idx:
            self.defer_window = (seg.idx, self.ncalls)
        k = self.ncalls
        self.ncalls += 1
        self.steps.append(CallStep(k, fe, [self.expr_of(c), *more], {}, reason, external=False, grad=None))
        self.deferred[k] = (seg.idx, reason, loc, c)
        self.deferred_segs.add(seg.idx)
        self._data_result(k, res)
        return True

    @staticmethod
    def _defer_site(loc: str) -> tuple:
        """The place of a read: its line and the instruction of the user's frame making it (two
        reads on one line, `f"{a.max():.3f} {a.min():.3f}"`, are two places)."""
        from .flow_state import _calling_user_frame   # (a module above this one)
        f = _calling_user_frame()
        return (loc, f.f_lasti if f is not None else -1)

    def _pending_reads(self) -> set[int]:
        w = self.defer_window
        return {k for k, d in self.deferred.items() if w is not None and d[0] == w[0]}

    def split_deferred(self, args: Any) -> None:
        """Before an op of the open graph: where one of its tensors is made by the replay from
        a pending read's number (a graph input `_scalar_tensor(max(b3, 1e-06))`), the graph
        ends here and that read is a graph break after it, as without deferral."""
        pend = self._pending_reads()
        if not pend:
            return
        for a in args:
            s = self.src.get(id(a)) if isinstance(a, torch.Tensor) else None
            if s is None or not any(int(m) in pend for m in _BREAK_NAME.findall(s[0])):
                continue
            if (self.defer_window[0], s[0]) in self.defer_nodes or self._graph_input_in_graph(a, s[0], pend):
                continue
            k = min(pend)
            _, reason, loc, _ = self.deferred[k]
            self._close_seg()
            self._add_break(reason, loc, merge=False)
            return

    def _graph_input_in_graph(self, t: torch.Tensor, made: str, pend: set[int]) -> bool:
        """The graph input t, a 0-d float tensor the replay makes from an expression of pending
        reads and literals (`_scalar_tensor(max(b3, 1e-06))`, scalar_inputs.py), computed by
        the open graph instead: the reads' copies in float64 (a Python float is a double),
        `+ - *`, unary minus, `abs`, `max` / `min` of two or more (Python's: the first operand
        unless a later one compares greater / less: `where`), a division by a nonzero literal,
        literals as 0-d float64 constants, the result cast as the input's maker casts (float32
        rounding alike).  Exact: IEEE double arithmetic is what Python computes; other
        operations (a division by a number, `math.*`, which raise where the graph would not)
        are not taken.  The value is checked bit for bit against t."""
        try:
            tree = ast.parse(made, mode="eval").body
        except SyntaxError:
            return False
        if not (isinstance(tree, ast.Call) and len(tree.args) == 1 and not tree.keywords):
            return False
        mk = self._defer_const(tree.func)
        from .scalar_inputs import _f32_scalar_tensor, _scalar_tensor   # (a module above this one)
        if mk not in (_scalar_tensor, _f32_scalar_tensor) or t.dtype not in (torch.float64, torch.float32) or \
                t.device.type != "cpu" or t.dim() != 0:
            return False
        vals: dict[int, torch.Tensor] = {}
        try:
            r = self._float(self._defer_eval(tree.args[0], pend, vals))
        except (_NotExact, KeyError, IndexError, TypeError):
            return False
        if not isinstance(r, torch.Tensor) or r.dtype != torch.float64:
            return False
        if t.dtype == torch.float32:
            r = self._defer_op(torch.Tensor.to, "to", r, torch.float32)
        if not (r.dtype == t.dtype and r.dim() == 0 and (torch.equal(r, t) or bool(r.isnan()) and bool(t.isnan()))):
            return False
        e = self.env.get(id(r))
        if e is None or e[0] is not r or e[1] != self.defer_window[0]:
            return False
        self.keep.append(r)
        self.defer_nodes[(e[1], made)] = e[2]
        return True

    def _defer_const(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "C" and \
                isinstance(node.slice, ast.Constant) and type(node.slice.value) is int:
            return self.consts[node.slice.value]
        raise _NotExact()

    def _defer_op(self, func: Any, name: str, *args: Any) -> torch.Tensor:
        res = func(*args)
        self._record(func, name, args, {}, res)
        return res

    def _defer_eval(self, node: ast.AST, pend: set[int], vals: dict[int, torch.Tensor]) -> Any:
        """A translated operand: a recorded 0-d float64 tensor, or a literal number.  A part
        without pending reads that is no literal (`C[12]['max_norm']`, an attribute the replay
        reads) is a graph input made by the replay, as scalar_inputs.py makes them."""
        if not isinstance(node, ast.Constant) and \
                not any(isinstance(n, ast.Name) and _BREAK_NAME.fullmatch(n.id) for n in ast.walk(node)):
            src = ast.unparse(node)
            try:
                lit = ast.literal_eval(node)   # (-3, a literal the flows wrote negated)
            except Exception:  # noqa: BLE001  (not a literal)
                lit = None
            if type(lit) in (int, float) and not (type(lit) is int and abs(lit) > 2 ** 53):
                return lit
            v = self._static_value(node)
            if type(v) not in (int, float) or type(v) is int and abs(v) > 2 ** 53:
                raise _NotExact()
            from .scalar_inputs import _scalar_tensor
            t = torch.tensor(float(v), dtype=torch.float64)   # (its own: _scalar_tensor's are shared by value)
            self.keep.append(t)
            self.src[id(t)] = (f"{self.const(_scalar_tensor)}({src})", f"<{src} as a graph input>", True)
            return t
        if isinstance(node, ast.Name) and _BREAK_NAME.fullmatch(node.id):
            k = int(node.id[1:])
            v = self.flow_vals.get(k)
            if k not in pend or type(v) not in (int, float):
                raise _NotExact()
            if k not in vals:
                c = self.deferred[k][3]
                # a float from a float tensor; an int from an integer (not bool) tensor: int64,
                # made a float only where Python makes it one (an operand of float arithmetic)
                if type(v) is float and c.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64) \
                        or type(v) is int and c.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64,
                                                              torch.uint8):
                    raise _NotExact()
                if c.dim():
                    c = self._defer_op(torch.Tensor.reshape, "reshape", c, ())
                vals[k] = self._defer_op(torch.Tensor.to, "to", c, torch.float64 if type(v) is float else torch.int64)
            return vals[k]
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if type(node.value) is int and abs(node.value) > 2 ** 53:
                raise _NotExact()
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self._defer_eval(node.operand, pend, vals)
            if isinstance(v, torch.Tensor) and v.dtype != torch.float64:
                raise _NotExact()   # (an int stays an int in Python)
            return -v if type(v) in (int, float) else self._defer_op(torch.neg, "neg", v)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            a, b = self._defer_eval(node.left, pend, vals), self._defer_eval(node.right, pend, vals)
            if not (_is_float(a) or _is_float(b)):
                raise _NotExact()   # (int arithmetic: exact in Python, wraps in int64; int / int rounds once)
            a, b = self._float(a), self._float(b)
            if type(a) is float and type(b) is float:
                raise _NotExact()   # (the program's own constants: folded by Python already)
            if isinstance(node.op, ast.Div) and b == 0.0:
                raise _NotExact()   # (Python raises ZeroDivisionError where a tensor gives inf)
            fn, nm = _ARITH[type(node.op)]
            r = self._defer_op(fn, nm, self._defer_tensor(a), self._defer_tensor(b))
            if isinstance(node.op, ast.Div) and type(b) is not float:
                # a divisor read after the graph: Python raises ZeroDivisionError for 0.0 (and
                # -0.0): checked after the graph (a miss: the call records again and raises)
                e = self.env.get(id(b))
                if e is None or e[0] is not b:
                    raise _NotExact()
                out = self._use_node(e[1], e[2])
                self.guard(Equals(f"bool({out} != 0)", "a divisor read from a tensor is not 0", True),
                           pos=max(self._pending_reads()) + 1)
            return r
        if isinstance(node, ast.Call) and not node.keywords and node.args:
            f = self._defer_const(node.func)
            ops = [self._defer_eval(a, pend, vals) for a in node.args]
            if f is builtins.float and len(ops) == 1 and isinstance(ops[0], torch.Tensor):
                return self._float(ops[0])
            if any(isinstance(o, torch.Tensor) and o.dtype != torch.float64 for o in ops):
                raise _NotExact()   # (Python compares an int with a float exactly, and keeps its type)
            ops = [float(o) if type(o) is int else o for o in ops]
            if f is builtins.abs and len(ops) == 1 and type(ops[0]) is not float:
                return self._defer_op(torch.abs, "abs", ops[0])
            if f in (builtins.max, builtins.min) and len(ops) >= 2 and any(type(o) is not float for o in ops):
                cmp, cn = (torch.gt, "gt") if f is builtins.max else (torch.lt, "lt")
                cur = self._defer_tensor(ops[0])
                for o in ops[1:]:   # Python's: the item replaces the current one only if it compares so
                    o = self._defer_tensor(o)
                    cur = self._defer_op(torch.where, "where", self._defer_op(cmp, cn, o, cur), o, cur)
                return cur
        raise _NotExact()

    def _static_value(self, node: ast.AST) -> Any:
        """The value now of a replay expression that reads the constants or the arguments by
        subscripts alone (`C[12]['max_norm']`, `L[3]`): plain dicts, lists and tuples, no code
        run (an attribute could be a property)."""
        if isinstance(node, ast.Name) and node.id in ("C", "L"):
            return self.consts if node.id == "C" else self.args
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            obj = self._static_value(node.value)
            if type(obj) not in (dict, list, tuple):
                raise _NotExact()
            try:
                return obj[node.slice.value]
            except (KeyError, IndexError, TypeError):
                raise _NotExact() from None
        raise _NotExact()

    def _float(self, v: Any) -> Any:
        """An operand as float arithmetic takes it: an int read (int64) converted to float64,
        the conversion Python's float(int) makes (round to nearest, ties to even); an int
        literal a float; an int anywhere else (max of ints, a negated int): not taken."""
        if isinstance(v, torch.Tensor) and v.dtype == torch.int64:
            return self._defer_op(torch.Tensor.to, "to", v, torch.float64)
        return float(v) if type(v) is int else v

    def _defer_tensor(self, v: Any) -> torch.Tensor:
        if isinstance(v, torch.Tensor):
            return v
        res = torch.full((), v, dtype=torch.float64)
        self._record(torch.full, "full", ((), v), {"dtype": torch.float64}, res)
        return res

    def defer_guard_pos(self, expr: str, pos: int) -> int:
        """A guard placed while reads after the open graph are pending: one on anything but
        their numbers is checked before that graph, as it was before the reads were deferred
        (a graph must not run on inputs of another shape than recorded)."""
        w = self.defer_window
        if w is None or pos <= w[1] or f"n{w[0]}_" in expr:   # (an output of the open graph)
            return pos
        pend = self._pending_reads()
        if any(int(m) in pend for m in _BREAK_NAME.findall(expr)):
            return pos
        return w[1]

    def close_deferred(self, seg_idx: int) -> None:
        """The open graph ends: its pending reads are steps after it."""
        if self.defer_window is not None and self.defer_window[0] == seg_idx:
            self.defer_window = None
