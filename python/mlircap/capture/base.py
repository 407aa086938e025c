"""Sentinels and exceptions shared by every layer of the capture package."""
from __future__ import annotations

import sys
from typing import Any


PY312 = sys.version_info >= (3, 12)


class _Missing:
    def __repr__(self) -> str:
        return "<unset>"


_MISSING = _Missing()


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
        return self.value


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
