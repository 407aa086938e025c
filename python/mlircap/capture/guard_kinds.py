"""The guard kinds, one frozen record each.  A guard states one fact about the world a
variant was recorded in; each kind has three views of that fact, side by side so a
reviewer can check they agree:

* `check(env)`: the fact, in plain typed Python (explain, recompile reasons, tests);
* `code(k)`:    the same fact as a Python expression, which the variant compiles with
                all its other guards into one function at install time (the hot path);
* `describe()`: the fact in words (explain(), the cache_limit warning).

Values are named by source expressions over `L` (the frame's arguments), `F` (the
function) and `C` (the recording's constant table; `k.const(obj)` interns an object and
returns its `C[i]`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .typeinfo import _dict_version, _np_float, _static_lookup

if TYPE_CHECKING:  # pragma: no cover
    from types import CodeType


# Frozen, slotted, compared by identity (fields hold tensors and dicts).
_record = dataclass(frozen=True, slots=True, eq=False)


class Consts(Protocol):
    """The recorder's constant table, as guard code generation uses it."""

    def const(self, v: object, name: str | None = None) -> str: ...

    def _lit(self, v: object) -> str: ...


_EVAL_CACHE: dict[str, Any] = {}


class GuardEnv:
    """What `check` reads: the frame's arguments L, the function F and the constants C."""
    __slots__ = ("L", "F", "C")

    def __init__(self, L: tuple, F: object, C: list) -> None:
        self.L, self.F, self.C = L, F, C

    def value(self, src: str) -> Any:
        code = _EVAL_CACHE.get(src)
        if code is None:
            code = _EVAL_CACHE[src] = compile(src, "<mlircap guard source>", "eval")
        return eval(code, {"L": self.L, "F": self.F, "C": self.C})


def _exact_float(x: float, v: float) -> bool:
    """x is v exactly: -0.0 is not 0.0 (1/x, copysign and atan2 tell them apart), and a
    NaN matches a NaN (NaN != NaN would fail the guard on every call)."""
    if v != v:
        return x != x
    if v == 0.0:
        return x == 0.0 and math.copysign(1.0, x) == math.copysign(1.0, v)
    return x == v


class Guard:
    """Base of the guard kinds (no fields of its own)."""
    __slots__ = ()

    def code(self, k: Consts) -> str:
        raise NotImplementedError

    def check(self, env: GuardEnv) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def _holds(g: Guard, env: GuardEnv) -> bool:
    """g.check(env), an exception (e.g. an attribute gone) counting as failure, as in
    the compiled guard."""
    try:
        return bool(g.check(env))
    except Exception:
        return False


# -- identity ------------------------------------------------------------------------
@_record
class Is(Guard):
    """`src` is the object `obj` (modules, functions, classes, parameters, None/bools)."""
    src: str
    name: str
    obj: object
    what: str   # obj in words

    def code(self, k: Consts) -> str:
        o = self.obj
        return f"{self.src} is {repr(o) if o is None or type(o) is bool else k.const(o)}"

    def check(self, env: GuardEnv) -> bool:
        return env.value(self.src) is self.obj

    def describe(self) -> str:
        return f"{self.name} is {self.what}"


@_record
class SameAs(Guard):
    """`src` is the object found at `other` (one object reached through two paths)."""
    src: str
    name: str
    other: str
    other_name: str

    def code(self, k: Consts) -> str:
        return f"{self.src} is {self.other}"

    def check(self, env: GuardEnv) -> bool:
        return env.value(self.src) is env.value(self.other)

    def describe(self) -> str:
        return f"{self.name} is {self.other_name}"


@_record
class Distinct(Guard):
    """The objects at `srcs` are pairwise distinct (a graph that mutates an input is
    wrong for two arguments that are one tensor)."""
    srcs: tuple[str, ...]
    name: str

    def code(self, k: Consts) -> str:
        return "len({" + "".join(f"id({e}), " for e in self.srcs) + f"}}) == {len(self.srcs)}"

    def check(self, env: GuardEnv) -> bool:
        return len({id(env.value(e)) for e in self.srcs}) == len(self.srcs)

    def describe(self) -> str:
        return self.name


# -- values --------------------------------------------------------------------------
@_record
class Equals(Guard):
    """`src == value` (strings, immutable constants, sets of primitives); with `exact`,
    also `type(src) is exact` (tuples of ints: a list would compare unequal anyway, a
    tuple subclass would not)."""
    src: str
    name: str
    value: object
    exact: type | None = None

    def code(self, k: Consts) -> str:
        eq = f"{self.src} == {k._lit(self.value)}"
        return eq if self.exact is None else f"type({self.src}) is {k.const(self.exact)} and {eq}"

    def check(self, env: GuardEnv) -> bool:
        x = env.value(self.src)
        return (self.exact is None or type(x) is self.exact) and bool(x == self.value)

    def describe(self) -> str:
        return f"{self.name} == {self.value!r}"


_BUILTIN_NUMBERS = (int, float, bytes, complex)


@_record
class Number(Guard):
    """`src` is a number of exactly type `type` and exactly `value`: -0.0 is not 0.0 and
    a NaN matches a NaN (see _exact_float); complex numbers part by part."""
    src: str
    name: str
    value: object
    type: type

    def code(self, k: Consts) -> str:
        e, v, t = self.src, self.value, self.type
        tg = f"type({e}) is {t.__name__ if t in _BUILTIN_NUMBERS else k.const(t)}"
        if isinstance(v, complex):
            # repr tells -0.0 from 0.0 and matches NaN parts; only for the rare complex
            return f"{tg} and {k.const(repr)}({k.const(complex)}({e})) == {repr(complex(v))!r}"
        if isinstance(v, float) or _np_float(v):   # (np.float32 / float16: not float subclasses)
            if v != v:
                return f"{tg} and {e} != {e}"
            if v == 0.0:
                sign = math.copysign(1.0, v)
                return f"{tg} and {e} == 0.0 and {k.const(math.copysign)}(1.0, {e}) == {sign!r}"
            return f"{tg} and {e} == {k._lit(float(v))}"
        return f"{tg} and {e} == {k._lit(v if type(v) in (int, bytes) else int(v))}"

    def check(self, env: GuardEnv) -> bool:
        x, v = env.value(self.src), self.value
        if type(x) is not self.type:
            return False
        if isinstance(v, complex):
            return repr(complex(x)) == repr(complex(v))
        if isinstance(v, float) or _np_float(v):
            return _exact_float(x, v)
        return x == v

    def describe(self) -> str:
        v = self.value
        return f"{self.name} == {v!r}" if self.type in _BUILTIN_NUMBERS else f"{self.name} == {self.type.__name__}({v!r})"


@_record
class NdarrayContents(Guard):
    """A numpy array: its type, dtype, shape and bytes (arrays change in place without a
    write the tracer sees, so the contents are the state)."""
    src: str
    name: str
    type: type
    dtype: Any
    shape: tuple[int, ...]
    data: bytes

    def code(self, k: Consts) -> str:
        e = self.src
        return (f"type({e}) is {k.const(self.type)} and {e}.dtype == {k.const(self.dtype)} and "
                f"{e}.shape == {self.shape!r} and {e}.tobytes() == {k.const(self.data)}")

    def check(self, env: GuardEnv) -> bool:
        a = env.value(self.src)
        return (type(a) is self.type and a.dtype == self.dtype and a.shape == self.shape
                and a.tobytes() == self.data)

    def describe(self) -> str:
        return f"{self.name}: ndarray[{self.dtype}, shape={self.shape}] with the same contents"


# -- types and containers ------------------------------------------------------------
@_record
class TypeIs(Guard):
    """`type(src) is type` (bound methods, partials, plain objects passed as arguments)."""
    src: str
    name: str
    type: type

    def code(self, k: Consts) -> str:
        return f"type({self.src}) is {k.const(self.type)}"

    def check(self, env: GuardEnv) -> bool:
        return type(env.value(self.src)) is self.type

    def describe(self) -> str:
        return f"type({self.name}) is {self.type.__qualname__}"


@_record
class TypeLen(Guard):
    """`type(src) is type and len(src) == n` (a container whose items are guarded too)."""
    src: str
    name: str
    type: type
    n: int

    def code(self, k: Consts) -> str:
        return f"type({self.src}) is {k.const(self.type)} and len({self.src}) == {self.n}"

    def check(self, env: GuardEnv) -> bool:
        x = env.value(self.src)
        return type(x) is self.type and len(x) == self.n

    def describe(self) -> str:
        return f"type({self.name}) is {self.type.__name__} and len({self.name}) == {self.n}"


@_record
class Keys(Guard):
    """The keys of the dict at `src`, in order (dicts, instance dicts, module registries)."""
    src: str
    name: str
    keys: tuple

    def code(self, k: Consts) -> str:
        return f"not {self.src}" if not self.keys else f"tuple({self.src}) == {k.const(self.keys)}"

    def check(self, env: GuardEnv) -> bool:
        return tuple(env.value(self.src)) == self.keys

    def describe(self) -> str:
        return f"{self.name}.keys() == {list(self.keys)}"


@_record
class NoKey(Guard):
    """`key not in` the dict at `src` (no instance attribute shadows a class attribute)."""
    src: str
    name: str
    key: str

    def code(self, k: Consts) -> str:
        return f"{self.key!r} not in {self.src}"

    def check(self, env: GuardEnv) -> bool:
        return self.key not in env.value(self.src)

    def describe(self) -> str:
        return f"{self.name} has no instance attribute {self.key!r}"


# -- classes and functions (monkeypatching) ------------------------------------------
@_record
class ClassAttr(Guard):
    """The MRO entry for `attr` on class `cls` is `raw` (a classmethod or a custom
    descriptor: the raw entry, as type lookup finds it, before binding)."""
    cls: type
    attr: str
    raw: object
    name: str

    def code(self, k: Consts) -> str:
        return f"{k.const(_static_lookup)}({k.const(self.cls)}, {self.attr!r}) is {k.const(self.raw)}"

    def check(self, env: GuardEnv) -> bool:
        return _static_lookup(self.cls, self.attr) is self.raw

    def describe(self) -> str:
        from .locations import _short
        return f"{self.name} is {_short(self.raw)}"


@_record
class NoClassAttr(Guard):
    """Class `cls` does not define `attr` (anywhere in its MRO)."""
    cls: type
    attr: str
    name: str

    def code(self, k: Consts) -> str:
        return f"not {k.const(hasattr)}({k.const(self.cls)}, {self.attr!r})"

    def check(self, env: GuardEnv) -> bool:
        return not hasattr(self.cls, self.attr)

    def describe(self) -> str:
        return f"{self.name} is not defined"


@_record
class FunctionCode(Guard):
    """The function at `src` keeps its `__code__`, `__defaults__` and `__kwdefaults__`
    (the tracer followed that code; replacing them changes what the function does)."""
    src: str
    name: str
    code_obj: CodeType
    defaults: tuple | None
    kwdefaults: dict | None

    def code(self, k: Consts) -> str:  # (k._lit: None, else the object's constant)
        c = self.src
        return (f"{c}.__code__ is {k.const(self.code_obj)} and {c}.__defaults__ is {k._lit(self.defaults)} "
                f"and {c}.__kwdefaults__ is {k._lit(self.kwdefaults)}")

    def check(self, env: GuardEnv) -> bool:
        f = env.value(self.src)
        return (f.__code__ is self.code_obj and f.__defaults__ is self.defaults
                and f.__kwdefaults__ is self.kwdefaults)

    def describe(self) -> str:
        return f"{self.name} has the same __code__ and defaults"


@_record
class Lengths(Guard):
    """The containers `objs` (hook registries) hold `counts` items each."""
    objs: tuple
    counts: tuple[int, ...]
    name: str

    def code(self, k: Consts) -> str:
        if not any(self.counts):
            return "not (" + " or ".join(k.const(o) for o in self.objs) + ")"
        return "(" + "".join(f"len({k.const(o)}), " for o in self.objs) + f") == {self.counts}"

    def check(self, env: GuardEnv) -> bool:
        return tuple(len(o) for o in self.objs) == self.counts

    def describe(self) -> str:
        return f"{self.name} has no hooks" if not any(self.counts) else f"{self.name} hook counts == {self.counts}"


@_record
class NoShadowedBuiltins(Guard):
    """The module globals `globals` define none of the builtin names `names` the code read."""
    globals: dict
    names: frozenset

    def code(self, k: Consts) -> str:
        return f"{k.const(self.globals)}.keys().isdisjoint({k.const(self.names)})"

    def check(self, env: GuardEnv) -> bool:
        return self.globals.keys().isdisjoint(self.names)

    def describe(self) -> str:
        return f"module {self.globals.get('__name__')!r} does not shadow builtins {sorted(self.names)}"


# -- the dict-version fast path ------------------------------------------------------
@_record
class DictVersions(Guard):
    """Guards that depend only on entries of the dicts `dicts` (module globals, module and
    class attributes), checked first through the dicts' version tags (~50 ns each): a
    version tag is unique to one state of a dict, so unchanged tags mean every member
    still holds; otherwise the members are checked one by one."""
    dicts: tuple
    versions: tuple[int, ...]
    members: tuple[Guard, ...]
    member_code: tuple[str, ...]

    def code(self, k: Consts) -> str:
        fast = " and ".join(f"_dv({k.const(d)}) == {v}" for d, v in zip(self.dicts, self.versions))
        slow = " and ".join(f"({e})" for e in self.member_code)
        return f"({fast}) or ({slow})"

    def unchanged(self) -> bool:
        return _dict_version is not None and all(
            _dict_version(d) == v for d, v in zip(self.dicts, self.versions))

    def check(self, env: GuardEnv) -> bool:
        return self.unchanged() or all(m.check(env) for m in self.members)

    def describe(self) -> str:
        return f"{len(self.members)} guards on unchanged dicts"

