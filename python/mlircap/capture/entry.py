"""Public entry points: `capture()` (with the module wrapper) and `explain()`."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._wrap import module_attr
from .base import INLINE_CODES, INLINE_TYPES
from .cache import _Captured
from .explanation import ExplainOutput


def capture(fn: Callable, backend: Callable, *, cache_limit: int = 8, strict: bool = False,
            break_limit: int = 64) -> Callable:
    """Return a callable behaving like `fn` whose tensor graphs run through `backend`.

    cache_limit: variants (guard sets) per function before it runs eagerly.
    break_limit: graph breaks in one call past which that call stops recording and the
    function runs eagerly for these arguments (one warning names the cause).
    strict: raise MlircapCompileError (mlircap.backend) instead of running any part of
    the program uncompiled: capture giving up on a function or a side effect (too many
    graph breaks included), cache_limit, a backend that fails on a captured graph.  A
    graph break alone does not raise: the graphs on both sides of it are compiled."""
    c = _Captured(fn, backend, cache_limit, strict=strict, break_limit=break_limit)
    if isinstance(fn, torch.nn.Module):
        wrapper = _CapturedModuleCall(c)
    else:
        import functools

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return c(*args, **kwargs)
        INLINE_CODES.add(wrapper.__code__)   # called from captured code: c.fn is (base.inline_path)
    wrapper._mlircap_capture = c  # type: ignore[attr-defined]
    wrapper.explain = lambda: ExplainOutput(c)  # type: ignore[attr-defined]
    return wrapper


class _CapturedModuleCall:
    """The captured callable of an nn.Module: behaves like the module.  Attribute reads,
    writes and deletes reach the module; module methods that return the module itself
    (eval, train, to, ...) return this wrapper, so the captured path is kept."""
    _OWN_ATTRS = frozenset({"_mlircap_capture", "module", "explain"})
    _mlircap_capture: _Captured
    module: torch.nn.Module

    def __init__(self, c: _Captured) -> None:
        object.__setattr__(self, "_mlircap_capture", c)
        object.__setattr__(self, "module", c.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._mlircap_capture(*args, **kwargs)

    def explain(self) -> ExplainOutput:
        return ExplainOutput(self._mlircap_capture)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if "module" not in d:
            raise AttributeError(name)
        return module_attr(self, d["module"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CapturedModuleCall._OWN_ATTRS:
            object.__setattr__(self, name, value)
        else:
            setattr(self.__dict__["module"], name, value)

    def __delattr__(self, name: str) -> None:
        if name in _CapturedModuleCall._OWN_ATTRS:
            object.__delattr__(self, name)
        else:
            delattr(self.__dict__["module"], name)


INLINE_TYPES[_CapturedModuleCall] = "_mlircap_capture"   # (base.inline_path)


def explain(fn: Callable, backend: Callable | None = None) -> Callable[..., ExplainOutput]:
    """`explain(fn)(*args)` -> ExplainOutput: graphs, each break with its reason and user
    source file:line, guards in readable form, recompile reasons.  The returned runner keeps
    its cache, so calling it again with other arguments accumulates variants and
    recompile reasons: `ex = explain(f); ex(a); print(ex(b))`."""
    backend = backend or (lambda gm, ex: gm.forward)
    w = capture(fn, backend)

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        w(*args, **kwargs)
        return ExplainOutput(w._mlircap_capture)
    run.captured = w  # type: ignore[attr-defined]
    return run
