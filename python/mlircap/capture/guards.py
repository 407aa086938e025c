"""Guards: the recorder's guard building (`_GuardMixin`), the global torch state a
variant depends on, and compiling the pre-call guards into one Python function."""
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .typeinfo import _dict_version

if TYPE_CHECKING:  # annotations only: recorder imports this module
    from .recorder import _Recorder


def _ambient() -> tuple:
    return (torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))


def _tensor_guards(*ts: torch.Tensor):
    """torch's C++ TensorGuards for these example tensors (static sizes and strides)."""
    from torch._C._dynamo.guards import TensorGuards
    return TensorGuards(*ts, dynamic_dims_sizes=[list(t.shape) for t in ts],
                        dynamic_dims_strides=[list(t.stride()) for t in ts])


def _merge_guards(rec: "_Recorder", pre: list) -> list:
    """The pre-call guards as the variant checks them (explain() and recompile reasons
    keep the individual ones):
    * guards that only depend on entries of the same dicts (module globals, module and
      class attributes, builtins), three or more, become one check of the dicts' version
      tags (~50 ns each) that falls back to the individual guards when a dict changed;
    * every tensor metadata check is merged into one TensorGuards call (about 80 ns a
      tensor), placed last so cheap identity checks fail first."""
    groups: dict[tuple, list[str]] = {}
    for e, _ in pre:
        k = rec.vgroup_of.get(e)
        if k is not None:
            groups.setdefault(k, []).append(e)
    out, done = [], set()
    for e, p in pre:
        k = rec.vgroup_of.get(e)
        if k is None or len(groups[k]) < 3:
            out.append((e, p))
        elif k not in done:
            done.add(k)
            slow = " and ".join(f"({x})" for x in groups[k])
            out.append((f"({rec.vgroups[k]}) or ({slow})", f"{len(groups[k])} guards on unchanged dicts"))
    pre = out
    tm = [e for e, _ in pre if e in rec.tensor_meta]
    if len(tm) < 2:
        return pre
    exprs = [rec.tensor_meta[e][0] for e in tm]
    examples = [rec.tensor_meta[e][1] for e in tm]
    tg = _tensor_guards(*examples)
    rest = [(e, p) for e, p in pre if e not in rec.tensor_meta]
    out = rest + [(f"{rec.const(tg)}.check({', '.join(exprs)})", "tensor metadata")]
    if any(t._version != ver for t, ver in rec.versions.values()):
        # The recording wrote to a tensor in place: the graph is only right for inputs
        # sharing storage exactly as the recorded ones did (r08: two views of one
        # tensor, one written, the other read).
        # Parameters are left out (weights aliasing an input is not a pattern models use,
        # and a module has hundreds of them).
        keep = [i for i, t in enumerate(examples) if not isinstance(t, torch.nn.Parameter)]
        if len(keep) >= 2:
            pattern = _alias_pattern(*(examples[i] for i in keep))
            args = ", ".join(exprs[i] for i in keep)
            out.append((f"{rec.const(_alias_pattern)}({args}) == {pattern!r}", "storage aliasing"))
    return out


def _alias_pattern(*ts: torch.Tensor) -> tuple:
    """For each tensor, the index of the first one sharing its storage."""
    first: dict[int, int] = {}
    out = []
    for i, t in enumerate(ts):
        try:
            key = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            key = -1 - i
        out.append(first.setdefault(key, i) if key else i)
    return tuple(out)


_CONST_REF = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?<![\w.\]])C\[(\d+)\]""")


def _bind_consts(body: str) -> "tuple[str, set[int]]":
    """`C[k]` -> a closure variable `_ck` bound once (one opcode instead of three per use);
    string literals are left alone."""
    used: set[int] = set()

    def sub(m):
        if m.group(1) is not None:
            return m.group(1)
        used.add(int(m.group(2)))
        return f"_c{m.group(2)}"
    return _CONST_REF.sub(sub, body), used


class _GlobalState:
    """The global torch state a variant was recorded under: grad mode, inference mode and
    autocast, plus (through torch's C++ GlobalStateGuard, one ~100 ns check) default
    dtype, deterministic algorithms, TF32 flags and thread count."""

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.ambient = _ambient()
        try:
            from torch._C._dynamo.guards import GlobalStateGuard
            self.guard = GlobalStateGuard()
        except Exception:  # pragma: no cover - older torch
            self.guard = None

    def expr(self) -> str:
        inf, ac_cpu, ac_cuda = self.ambient
        if self.guard is not None:  # grad mode and autocast are part of GlobalStateGuard
            return f"(_gs.check() and _inf() is {inf})"
        return f"(_ge() is {self.grad} and _inf() is {inf} and _ac('cpu') is {ac_cpu} and _ac('cuda') is {ac_cuda})"


def _compile_guard(pre: list, consts: list, state: "_GlobalState | None") -> Callable[[tuple, object], bool]:
    """The pre-call guard function `guard(L, F) -> bool` (L: the frame's arguments, F: the
    function) checking all of `pre` and the global torch state."""
    parts = [f"({e})" for e, _ in pre]
    if state is not None:
        parts.insert(0, state.expr())
    body, used = _bind_consts(" and ".join(parts) or "True")
    binds = "".join(f"    _c{k} = C[{k}]\n" for k in sorted(used))
    src = ("def _make(C, _ge, _inf, _ac, _gs, _dv):\n" + binds +
           "    def __guard(L, F):\n"
           "        try:\n"
           f"            return {body}\n"
           "        except Exception:\n"
           "            return False\n"
           "    return __guard\n")
    ns = {}
    exec(compile(src, "<mlircap guard>", "exec"), ns)
    return ns["_make"](consts, torch.is_grad_enabled, torch.is_inference_mode_enabled, torch.is_autocast_enabled,
                       state.guard if state is not None else None, _dict_version)


class _GuardMixin:
    """Guard building for `_Recorder`: exact number guards, tensor metadata guards, the
    guard list with its positions (before the call / after a break) and dict-version groups."""

    def _number_guard(self, expr: str, v, tname: str) -> str:
        """Exact guard for a number: -0.0 is not 0.0 (1/x, copysign, atan2 tell them
        apart) and a NaN matches a NaN (NaN != NaN would fail the guard on every call)."""
        tg = f"type({expr}) is {tname}"
        if isinstance(v, complex):
            # repr tells -0.0 from 0.0 and matches NaN parts; only for the rare complex
            return f"{tg} and {self.const(repr)}({self.const(complex)}({expr})) == {repr(complex(v))!r}"
        if isinstance(v, float):
            if v != v:
                return f"{tg} and {expr} != {expr}"
            if v == 0.0:
                sign = math.copysign(1.0, v)
                return f"{tg} and {expr} == 0.0 and {self.const(math.copysign)}(1.0, {expr}) == {sign!r}"
            return f"{tg} and {expr} == {self._lit(float(v))}"
        return f"{tg} and {expr} == {self._lit(v if type(v) in (int, bytes) else int(v))}"

    def _tensor_guard(self, expr: str, t: torch.Tensor) -> str:
        """Metadata guard for a tensor: Python type, dispatch keys (device, autograd),
        dtype, shape, strides and requires_grad, checked in C++ by torch's TensorGuards.
        The variant's pre-call guard merges all of them into one check."""
        tg = _tensor_guards(t)
        g = f"{self.const(tg)}.check({expr})"
        self.tensor_meta[g] = (expr, t)
        return g

    def guard(self, expr, pretty, pos=None, group: "tuple | None" = None):
        """Add a guard checked before the call (pos 0) or after break `pos - 1`.  `group`:
        the dicts (module / class / instance dicts) whose contents alone decide this guard;
        the variant checks a group of such guards through the dicts' version tags first."""
        if expr in self.guard_exprs:
            return
        self.guard_exprs.add(expr)
        pos = self.ncalls if pos is None else pos
        self.guards.append((pos, expr, pretty))
        if group and pos == 0 and _dict_version is not None:
            self.vgroup_of[expr] = self._group_key(group)

    def _group_key(self, group: tuple) -> tuple:
        key = tuple(id(d) for d in group)
        if key not in self.vgroups and _dict_version is not None:
            # versions as of the first read: a dict's version tag is unique to one state of
            # it, so the fast path only passes if nothing was written since
            self.vgroups[key] = " and ".join(f"_dv({self.const(d)}) == {_dict_version(d)}" for d in group)
        return key

    def final_guards(self):
        saved, self.ncalls = self.ncalls, 0
        try:
            for g, names in self.builtin_reads.values():
                self.guard(f"{self.const(g)}.keys().isdisjoint({self.const(frozenset(names))})",
                           f"module {g.get('__name__')!r} does not shadow builtins {sorted(names)}",
                           group=(g,) if self._group_key((g,)) in self.vgroups else None)
            if len(self.arg_tensors) > 1 and self.has_inplace:
                n = len(self.arg_tensors)
                self.guard("len({" + "".join(f"id({e}), " for e in self.arg_tensors) + f"}}) == {n}",
                           "tensor arguments are distinct objects (the graph mutates inputs)")
        finally:
            self.ncalls = saved
