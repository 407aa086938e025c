"""Guards: the recorder's guard building (`_GuardMixin`), the global torch state a
variant depends on, and compiling the pre-call guards into one Python function (the
guard kinds themselves are in guard_kinds.py and guard_tensors.py)."""
from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .guard_batches import AllDictVersions, _cells_hold, _funcs_unchanged, _types_hold, batch_functions, \
    batch_types, make_cells_hold, make_function_codes, make_types_hold
from .guard_kinds import DictVersions, Distinct, Guard, Keys, NoShadowedBuiltins
from .guard_tensors import StorageAliasing, TensorMatch, TensorMatchAll, _alias_pattern
from .typeinfo import _dict_version, _dicts_unchanged
from .. import thread_reads

if TYPE_CHECKING:  # annotations only: recorder imports this module
    from .recorder import _Recorder


# what a guard's code may name to be checked earlier in the replay (`start_state`)
_START_NAMES = frozenset({"L", "F", "C", "type", "len", "tuple", "isinstance", "int", "float", "bool", "str",
                          "set", "frozenset", "_dv", "vars"})
# tensor state the steps between graphs write (optimizer steps, .grad / .data writes, backward)
_TENSOR_ATTRS = frozenset({"grad", "data", "is_leaf", "grad_fn", "retains_grad", "output_nr", "_is_view",
                           "_version", "shape", "dtype", "device", "requires_grad", "layout", "size", "stride",
                           "_base", "state"})


def start_state(g: Guard, code: str, consts: list | None = None) -> bool:
    """Whether guard `g` (compiled to `code`) reads only Python state of the call's start:
    the arguments, the function and constants (`L`, `F`, `C`), not a tensor's metadata or
    autograd state, a replay's own values (`b3`, `n0_add`, bindings) or an optimizer's
    state.  Within one epoch (no uncapturable call that may write any state in between) it
    decides the same anywhere in the replay: the replay applies the function's writes at
    its end.  `consts` (the recording's C): an attribute of a class constant named as a
    tensor's state is a class attribute (`Parameter.data is <attribute 'data'>`)."""
    if isinstance(g, (TensorMatch, TensorMatchAll, StorageAliasing, Distinct)):
        return False
    try:
        tree = ast.parse(code, mode="eval")
    except SyntaxError:
        return False
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id not in _START_NAMES or \
                isinstance(n, ast.Attribute) and n.attr in _TENSOR_ATTRS and not _class_const(n.value, consts):
            return False
    return True


def _class_const(n: ast.expr, consts: list | None) -> bool:
    """n is `C[i]` naming a class in consts."""
    if consts is None or not (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "C"
                              and isinstance(n.slice, ast.Constant) and type(n.slice.value) is int):
        return False
    i = n.slice.value
    return 0 <= i < len(consts) and isinstance(consts[i], type)


def start_tensor(g: Guard) -> bool:
    """Whether `g` is the metadata guard of a tensor reached from the call's start state (its
    location passes start_state): first read after an optimizer's step that starts no epoch
    (classify._optimizer_owning_call), it has the metadata it had before that step, whose
    in-place writes change the data of tensors alone (guard_misses._hoist_before)."""
    return isinstance(g, TensorMatch) and start_state(Guard(), g.src)


@dataclass(slots=True)
class Placed:
    """A guard in a recording: `pos` 0 is checked before the call, `pos` k + 1 after graph
    break k (mid-replay); `expr` is its compiled code; `group` the key of the dicts whose
    contents alone decide it (see DictVersions), None if it depends on anything else."""
    guard: Guard
    pos: int
    expr: str
    group: tuple | None = None


def _ambient() -> tuple:
    return (torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))


def _merge_guards(rec: _Recorder, pre: list[Placed]) -> list[Placed]:
    """The pre-call guards as the variant checks them (explain() and recompile reasons
    keep the individual ones):
    * guards that only depend on entries of the same dicts (module globals, module, object
      and class attributes, module registries and hooks, builtins) form one DictVersions
      group per set of dicts, which falls back to the individual guards when a dict changed.
      The version tags are taken at install, where every member of the group holds (one
      that does not, e.g. a flag the call flipped: the group is left as its members); the
      groups are checked first all at once (AllDictVersions: one C call over every tag),
      where the first of them stands;
    * every TensorMatch is merged into one TensorGuards call (TensorMatchAll), placed
      last so cheap identity checks fail first."""
    groups: dict[tuple, list[Placed]] = {}
    for p in pre:
        if p.group is not None:
            groups.setdefault(p.group, []).append(p)
    merged: dict[tuple, DictVersions] = {}
    for k, members in groups.items():
        dicts = rec.vgroups[k][0]
        codes = tuple(m.expr for m in members)
        if _hold_now(codes, rec.consts):
            # the tags now name the dicts' state after the recording, on which every member
            # holds: unchanged tags at a call mean the members hold then too
            versions = tuple(_dict_version(d) for d in dicts)
            merged[k] = DictVersions(dicts, versions, tuple(m.guard for m in members), codes)
    combined = _dicts_unchanged is not None and len(merged) >= 2
    out: list[Placed] = []
    done: set[tuple] = set()
    for p in pre:
        k = p.group
        if k is None or k not in merged or not combined and len(groups[k]) < 3:
            out.append(p)   # (a group written by the recording: its members alone)
        elif k not in done:
            done.add(k)
            if combined:
                gs = tuple(merged.values())
                slow = tuple(g.code(rec) if len(g.members) >= 3 else " and ".join(f"({e})" for e in g.member_code)
                             for g in gs)
                done.update(merged)
                a = AllDictVersions(gs, slow)
                out.append(Placed(a, 0, a.code(rec)))
            else:
                out.append(Placed(merged[k], 0, merged[k].code(rec)))
    # FunctionCode guards on constant functions, and identity guards on their closure
    # cells: one C call each, where the first of them stands
    fcs, cells = batch_functions([p.guard for p in out], rec.consts)
    types = batch_types([p.guard for p in out])
    for members, make in ((fcs, make_function_codes), (cells, make_cells_hold), (types, make_types_hold)):
        if len(members) >= 2:
            ids = {id(g) for g in members}
            b = make(members, rec.consts)
            first = next(i for i, p in enumerate(out) if id(p.guard) in ids)
            rest = [p for p in out if id(p.guard) not in ids]
            out = rest[:first] + [Placed(b, 0, b.code(rec))] + rest[first:]
    # The merged TensorGuards is built from the examples now (install time, the caller's
    # dispatch state): only those whose metadata the recording left as it was first read.
    tm = [p for p in out if type(p.guard) is TensorMatch and p.guard.unchanged()]
    if len(tm) < 2:
        return out
    g = TensorMatchAll.of(tuple(p.guard for p in tm))
    merged_tm = {id(p) for p in tm}
    return [p for p in out if id(p) not in merged_tm] + [Placed(g, 0, g.code(rec))]


def _hold_now(codes: tuple[str, ...], consts: list) -> bool:
    """Every guard expression in `codes` (of constants only: a dict group's members) holds
    on the current state."""
    env = {"C": consts}
    try:
        return all(eval(compile(c, "<mlircap guard>", "eval"), env) for c in codes)
    except Exception:
        return False


_CONST_REF = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?<![\w.\]])C\[(\d+)\]""")


def _bind_consts(body: str) -> tuple[str, set[int]]:
    """`C[k]` -> a global `_ck` of the guard's namespace (one specialized LOAD_GLOBAL instead
    of three opcodes per use); string literals are left alone."""
    used: set[int] = set()

    def sub(m: re.Match) -> str:
        if m.group(1) is not None:
            return m.group(1)
        used.add(int(m.group(2)))
        return f"_c{m.group(2)}"
    return _CONST_REF.sub(sub, body), used


class _GlobalState:
    """The global torch state a variant was recorded under: grad mode, inference mode and
    autocast, plus (through torch's C++ GlobalStateGuard, one ~100 ns check) default
    dtype, deterministic algorithms, TF32 flags and thread count.  Another thread count
    alone does not miss (`other_threads`) where nothing the variant compiled read it
    (thread_reads: `thread_reads`, filled by the variant's compile) and the recording did
    not either (a call of torch.get_num_threads() is guarded by its value)."""

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.ambient = _ambient()
        self.thread_reads: list[int] = []
        self.others: list = []   # GlobalStateGuards of the other thread counts the variant ran at
        self.tainted = [False]   # a compile-time read no variant owned came after it ran at one
        try:
            from torch._C._dynamo.guards import GlobalStateGuard
            self.guard = GlobalStateGuard()
        except Exception:  # pragma: no cover - older torch
            self.guard = None

    def expr(self) -> str:
        inf, ac_cpu, ac_cuda = self.ambient
        if self.guard is not None:  # grad mode and autocast are part of GlobalStateGuard
            return f"((_gs.check() and not _gt[0] or _gso()) and _inf() is {inf})"
        return f"(_ge() is {self.grad} and _inf() is {inf} and _ac('cpu') is {ac_cpu} and _ac('cuda') is {ac_cuda})"

    def other_threads(self) -> bool:
        """The global state is the recording's but for torch's thread count, and the variant
        runs at this count too: compiled CPU code follows the count at each call, and nothing
        compiled for the variant depends on it."""
        if self.guard is None or self.tainted[0] or self.thread_reads or thread_reads.any_unattributed():
            return False
        for g in self.others:
            if g.check():
                return True
        if self.guard.reason().split() != ["num_threads"]:
            return False
        if len(self.others) < 8:
            from torch._C._dynamo.guards import GlobalStateGuard
            self.others.append(GlobalStateGuard())
        thread_reads.crossed(self)
        return True

    def holds(self) -> bool:
        """Whether the state guard holds now (what the compiled guard's first part checks)."""
        return self.guard is None or (self.guard.check() and not self.tainted[0]) or self.other_threads()

    def taint(self) -> None:
        self.tainted[0] = True


def _compile_guard(exprs: list[str], consts: list, state: _GlobalState | None) -> Callable[[tuple, object], bool]:
    """The pre-call guard function `guard(L, F) -> bool` (L: the frame's arguments, F: the
    function) checking the guard expressions `exprs` (Placed.expr: the records' code) and
    the global torch state, compiled once when the variant is installed."""
    parts = [f"({e})" for e in exprs]
    if state is not None:
        parts.insert(0, state.expr())
    body, used = _bind_consts(" and ".join(parts) or "True")
    # The constants are globals of the guard's own namespace, not closure cells: a call
    # copies every free variable of a closure into its frame (COPY_FREE_VARS), which with
    # a transformer's ~2,000 constants cost more than the checks themselves.
    ns: dict[str, Any] = {f"_c{k}": consts[k] for k in used}
    ns.update(C=consts, _ge=torch.is_grad_enabled, _inf=torch.is_inference_mode_enabled,
              _ac=torch.is_autocast_enabled, _gs=state.guard if state is not None else None,
              _gt=state.tainted if state is not None else None, _gso=state.other_threads if state is not None else None,
              _dv=_dict_version,
              _dvs=_dicts_unchanged, _fcs=_funcs_unchanged, _cells=_cells_hold, _types=_types_hold)
    src = ("def __guard(L, F):\n"
           "    try:\n"
           f"        return {body}\n"
           "    except Exception:\n"
           "        return False\n")
    exec(compile(src, "<mlircap guard>", "exec"), ns)
    return ns["__guard"]


class _GuardMixin:
    """Guard building for `_Recorder`: the guard list (records with their positions:
    before the call / after a break) and the dict-version groups."""
    guards: list[Placed]
    tls0: tuple   # the caller's thread-local dispatch key sets (included, excluded)
    guard_exprs: set[tuple[str, int]]
    epoch_starts: list[int]
    vgroups: dict[tuple, tuple[tuple, tuple[int, ...]]]
    ncalls: int
    builtin_reads: dict
    arg_tensors: list[str]
    has_inplace: bool
    versions: dict
    data_aliases: dict
    unversioned: set

    def _tensor_match(self, expr: str, pretty: str, t: torch.Tensor) -> TensorMatch:
        """TensorMatch for `t` as first read, its dispatch keys as the caller's thread state
        gives them (a tensor read inside `with torch.autocast(...)` is still checked at the
        call, outside it)."""
        inc, exc = self.tls0
        if torch._C._dispatch_tls_local_include_set() == inc and torch._C._dispatch_tls_local_exclude_set() == exc:
            return TensorMatch.of(expr, pretty, t)
        with torch._C._ForceDispatchKeyGuard(inc, exc):
            return TensorMatch.of(expr, pretty, t)

    def guard(self, g: Guard, pos: int | None = None, group: tuple | None = None) -> None:
        """Add guard `g`, checked before the call (pos 0) or after break `pos - 1`.  `group`:
        the dicts (module / class / instance dicts) whose contents alone decide `g`; the
        variant checks a group of such guards through the dicts' version tags first."""
        expr = g.code(self)
        pos = self.ncalls if pos is None else pos
        if self.__dict__.get("defer_window") is not None:   # (reads pending after the open graph)
            pos = self.defer_guard_pos(expr, pos)
        # once per epoch (the stretch between uncapturable calls, which may change any state)
        key = (expr, bisect.bisect_right(self.epoch_starts, pos))
        if key in self.guard_exprs:
            return
        self.guard_exprs.add(key)
        if group and not all(type(d) is dict or isinstance(d, dict) and type(g) is not Keys for d in group):
            group = None   # (an OrderedDict's order changes without a new version tag: move_to_end)
        key = self._group_key(group) if group and pos == 0 and _dict_version is not None else None
        self.guards.append(Placed(g, pos, expr, key))

    def _group_key(self, group: tuple) -> tuple:
        key = tuple(id(d) for d in group)
        if key not in self.vgroups and _dict_version is not None:
            # versions as of the first read: a dict's version tag is unique to one state of
            # it, so the fast path only passes if nothing was written since
            self.vgroups[key] = (tuple(group), tuple(_dict_version(d) for d in group))
        return key

    def mutated_ids(self) -> set[int]:
        """The ids of the external tensors the recording wrote to in place (directly, or
        through `t.data`, whose writes leave `t._version` unchanged, or as the running
        statistics of a batch norm in training, which its kernels update without a version
        bump: graph_steps.py `_note_unversioned`)."""
        out = {vid for vid, (t, ver) in self.versions.items() if t._version != ver}
        out.update(id(base) for a, base, ver in self.data_aliases.values() if a._version != ver)
        out.update(vid for vid in self.unversioned if vid in self.versions)
        return out

    def final_guards(self) -> None:
        saved, self.ncalls = self.ncalls, 0
        try:
            for g, names in self.builtin_reads.values():
                self.guard(NoShadowedBuiltins(g, frozenset(names)), group=(g,))
            if len(self.arg_tensors) > 1 and (self.has_inplace or torch.is_grad_enabled()):
                # also under grad mode: aot_autograd's graph and backward were traced for
                # distinct inputs; one tensor passed twice (f(x, x) after f(x, w)) gave
                # wrong gradients where the tensor-guard extension let it match
                self.guard(Distinct(tuple(self.arg_tensors),
                                    "tensor arguments are distinct objects (the graph mutates inputs "
                                    "or is differentiated)"))
            if self.mutated_ids():
                # The recording wrote to a tensor in place: the graph is only right for inputs
                # sharing storage exactly as the recorded ones did.  Parameters are left out
                # (weights aliasing an input is not a pattern models use, and a module has
                # hundreds of them).
                tms = [p.guard for p in self.guards if p.pos == 0 and type(p.guard) is TensorMatch
                       and not isinstance(p.guard.example, torch.nn.Parameter)]
                if len(tms) >= 2:
                    self.guard(StorageAliasing(tuple(t.src for t in tms),
                                               _alias_pattern(*(t.example for t in tms))))
        finally:
            self.ncalls = saved
