"""Sentinels and exceptions shared by every layer of the capture package."""
from __future__ import annotations

import sys
from typing import Any


PY312 = sys.version_info >= (3, 12)


class _Missing:
    def __repr__(self) -> str:
        return "<unset>"


_MISSING = _Missing()

# a flow_call's callable where the followed number indexes a tensor (flows._flow_index:
# `betas[t]`, `buf[ptr] = x`; taken by scalar_inputs._index_input)
INDEXING = "<subscript>"


class _Miss:
    """A replay whose mid-replay guard failed.  `log`: the results of the uncapturable
    calls it already ran (their side effects happened), in order; the next variant tried
    and a re-recording take these results instead of running the calls again."""
    __slots__ = ("log",)

    def __init__(self, log: list | None = None) -> None:
        self.log = log

    def __repr__(self) -> str:
        return "<MISS>"


MISS = _Miss()


class _Canned:
    """Stands in for an uncapturable callable whose call already ran (catch-up after a
    failed mid-replay guard): returns that call's result."""
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if type(self.value) is _Raised:
            raise self.value.exc
        return self.value


class _Raised:
    """The logged outcome of an uncapturable call that raised at a replay where its
    recording returned (`next(gen)` of an exhausted generator, a KeyError the function
    catches): the replay misses, and the recording that follows raises `exc` there instead of
    calling again (its side effects happened)."""
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Unreplayable(Exception):
    pass


class _CaptureStrictError(RuntimeError):
    """strict=True error when mlircap.backend (MlircapCompileError) cannot be imported."""
    propagate = True


def _strict_error(msg: str) -> Exception:
    """The error strict=True raises for a part of the program that would not run compiled:
    mlircap's MlircapCompileError (imported lazily: the capture layer runs without the
    compiler half)."""
    try:
        from ..backend import MlircapCompileError
    except Exception:  # pragma: no cover - capture used without the compiler
        return _CaptureStrictError(msg)
    return MlircapCompileError(msg)


def _fn_name(fn: object) -> str:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else name


# The capture's own wrappers, whose call is a call of the callable they wrap (a compiled
# child module or function called from a captured one: inlined, as Dynamo inlines an
# OptimizedModule's original module).  INLINE_TYPES: wrapper type -> the instance attribute
# that holds the next wrapper or, for `cache._Captured`, the wrapped callable itself ("fn");
# INLINE_CODES: code objects of function wrappers, whose "_mlircap_capture" attribute holds
# their _Captured.  See inline_target.
INLINE_TYPES: dict[type, str] = {}
INLINE_CODES: set = set()
CAPTURED_ATTR = "fn"


def inline_path(f: Any) -> list[tuple[Any, str]] | None:
    """The attribute reads from the capture wrapper `f` to the callable it calls: a list of
    (object, attribute name) ending with a `_Captured`'s "fn"; None when f is no such
    wrapper (or one of another capture front, e.g. mlircap.compile(..., capture="dynamo"))."""
    path: list[tuple[Any, str]] = []
    o = f
    while True:
        t = type(o)
        if t is _FUNCTION:
            name = "_mlircap_capture" if o.__code__ in INLINE_CODES else None
        else:
            name = INLINE_TYPES.get(t)
        if name is None:
            break
        d = getattr(o, "__dict__", None)
        if type(d) is not dict or name not in d:
            break
        path.append((o, name))
        o = d[name]
        if name == CAPTURED_ATTR:
            return path
    return None


def inline_target(f: Any) -> Any:
    """The callable the capture wrapper `f` calls (see inline_path), or None."""
    path = inline_path(f)
    if path is None:
        return None
    o, name = path[-1]
    return o.__dict__[name]


_FUNCTION = type(inline_path)
