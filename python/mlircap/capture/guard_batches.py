"""Batched guards: many guards of one kind checked by one call into the capture
extension (`_evalframe.cpp`) instead of one Python expression each.  A variant of a large
module (a transformer from `transformers`: hundreds of guards on module, config and class
dicts, on the functions its decorators wrap, on their closure cells) checks them in a
few calls.  Each batch keeps its members: `check` (explain, recompile reasons, tests) is
theirs, one by one, and the batch's code is only a faster form of the same fact."""
from __future__ import annotations

import operator
import re
from typing import Any

from .guard_kinds import Consts, DictVersions, FunctionCode, Guard, GuardEnv, Is, TypeIs, _record
from .typeinfo import _dict_version, _pack_versions

try:
    from . import _ext
    _funcs_unchanged: Any = _ext.load().funcs_unchanged
    _cells_hold: Any = _ext.load().cells_hold
except Exception:  # no extension: nothing is captured, nothing batched
    _funcs_unchanged = _cells_hold = None


@_record
class AllDictVersions(Guard):
    """Every DictVersions group of a variant, checked first by one call comparing all their
    version tags (`_dvs`, a C loop: a few ns a dict); when any dict changed, group by group
    (each with its own fast path, or its members alone)."""
    groups: tuple[DictVersions, ...]
    slow_code: tuple[str, ...]

    @property
    def dicts(self) -> tuple:
        return tuple(d for g in self.groups for d in g.dicts)

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(v for g in self.groups for v in g.versions)

    def code(self, k: Consts) -> str:
        slow = " and ".join(f"({e})" for e in self.slow_code)
        d, tags = k.const(self.dicts), k.const([_pack_versions(self.versions)])
        # When a dict changed but every guard still holds (an unrelated global or class
        # attribute was set once), the tags are retaken: they name a state on which every
        # member holds, as at install, and the fast path serves the calls after it.
        return f"_dvs({d}, {tags}[0]) or (({slow}) and {k.const(retag)}({d}, {tags}))"

    def check(self, env: GuardEnv) -> bool:
        return all(g.check(env) for g in self.groups)

    def describe(self) -> str:
        return f"{sum(len(g.members) for g in self.groups)} guards on {len(self.dicts)} unchanged dicts"


def retag(dicts: tuple, tags: list) -> bool:
    """Stores the current version tags of `dicts` in tags[0] (AllDictVersions' fast path);
    called only after every guard of the batch held on the current state."""
    tags[0] = _pack_versions(tuple(map(_dict_version, dicts)))
    return True


_CONST = re.compile(r"C\[(\d+)\]")
_CELL = re.compile(r"(C\[\d+\])\.__closure__\[(\d+)\]\.cell_contents")


def const_index(src: str) -> int | None:
    """k where src is exactly the constant `C[k]`."""
    m = _CONST.fullmatch(src)
    return int(m.group(1)) if m else None


@_record
class FunctionCodes(Guard):
    """FunctionCode guards on constant functions (`C[k]`), all in one C call."""
    members: tuple[FunctionCode, ...]
    funcs: tuple

    def code(self, k: Consts) -> str:
        exp = tuple(x for m in self.members for x in (m.code_obj, m.defaults, m.kwdefaults))
        return f"_fcs({k.const(self.funcs)}, {k.const(exp)})"

    def check(self, env: GuardEnv) -> bool:
        return all(m.check(env) for m in self.members)

    def describe(self) -> str:
        return f"{len(self.members)} functions keep their __code__ and defaults"


@_record
class CellsHold(Guard):
    """Is guards on closure cells of constant functions (`C[k].__closure__[i].cell_contents
    is obj`: a function's __closure__ cannot be replaced, so the cell is fixed), in one call."""
    members: tuple[Is, ...]
    cells: tuple

    def code(self, k: Consts) -> str:
        return f"_cells({k.const(self.cells)}, {k.const(tuple(m.obj for m in self.members))})"

    def check(self, env: GuardEnv) -> bool:
        return all(m.check(env) for m in self.members)

    def describe(self) -> str:
        return f"{len(self.members)} closure cells hold the same objects"


@_record
class TypesHold(Guard):
    """TypeIs guards on constant objects (`type(C[k]) is T`: the modules a call runs, whose
    `__class__` may be reassigned in place), in one call of C-level loops (_types_hold)."""
    members: tuple[TypeIs, ...]
    objs: tuple
    types: tuple

    def code(self, k: Consts) -> str:
        return f"_types({k.const(self.objs)}, {k.const(self.types)})"

    def check(self, env: GuardEnv) -> bool:
        return all(m.check(env) for m in self.members)

    def describe(self) -> str:
        return f"{len(self.members)} objects keep their types"


def _types_hold_py(objs: tuple, types: tuple, _is: Any = operator.is_) -> bool:
    """type(o) is t for each pair (the extension's types_hold, where a build lacks it)."""
    return all(map(_is, map(type, objs), types))


_types_hold: Any = getattr(_ext.load(), "types_hold", None) if _funcs_unchanged is not None else None
_types_hold = _types_hold or _types_hold_py


def batch_types(guards: list[Guard]) -> list[Guard]:
    """The TypeIs guards on constants (`type(C[k]) is T`) among guards."""
    return [g for g in guards if type(g) is TypeIs and const_index(g.src) is not None]


def make_types_hold(members: list[TypeIs], consts: list) -> TypesHold:
    return TypesHold(tuple(members), tuple(consts[const_index(m.src)] for m in members),
                     tuple(m.type for m in members))


def batch_functions(guards: list[Guard], consts: list) -> tuple[list[Guard], list[Guard]]:
    """(FunctionCode guards on constants, Is guards on constant functions' cells) among
    guards, the ones a FunctionCodes / CellsHold batch can take."""
    if _funcs_unchanged is None:
        return [], []
    fcs = [g for g in guards if type(g) is FunctionCode and const_index(g.src) is not None]
    cells = []
    for g in guards:
        if type(g) is Is:
            m = _CELL.fullmatch(g.src)
            if m is not None and type(consts[const_index(m.group(1))]).__name__ == "function":
                cells.append(g)
    return fcs, cells


def make_function_codes(members: list[FunctionCode], consts: list) -> FunctionCodes:
    return FunctionCodes(tuple(members), tuple(consts[const_index(m.src)] for m in members))


def make_cells_hold(members: list[Is], consts: list) -> CellsHold:
    cells = []
    for g in members:
        m = _CELL.fullmatch(g.src)
        cells.append(consts[const_index(m.group(1))].__closure__[int(m.group(2))])
    return CellsHold(tuple(members), tuple(cells))
