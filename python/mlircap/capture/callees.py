"""The callees of a frame that runs eagerly (replay._SkipFrameVariant), each captured on
its own: `_Callees` hands their frames to their own `_Captured` (cache.py) while the frame
runs, as Dynamo compiles the callees of a frame it skips."""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch

from .base import _MISSING
from .dispatch_args import _hook_acquire, _hook_release
from .frame_hook import CALLEES, _E_real, _active, _call_bound

if TYPE_CHECKING:  # annotations only: cache imports this module
    from .cache import _Captured


def _first_positional(code: types.CodeType, args: tuple) -> Any:
    """The first positional argument of a call of `code`, from its frame-bound arguments
    (positional, keyword-only, *args, **kwargs): of a `def wrapper(*args)` (a decorated
    forward: `return fn(*args)`), the first item of its *args tuple, where the module is;
    _MISSING where there is none."""
    if code.co_argcount:
        return args[0] if args else _MISSING
    if code.co_flags & 0x04:   # CO_VARARGS
        i = code.co_kwonlyargcount
        if i < len(args) and type(args[i]) is tuple and args[i]:
            return args[i][0]
    return _MISSING


class _Callees:
    """The modules and functions called by a frame that runs eagerly (replay._SkipFrameVariant),
    each captured on its own: while the frame runs, the frame hook hands their frames to
    their own `_Captured` (frame_hook._hook_cb), as Dynamo compiles the callees of a frame it
    skips.  A module is matched by instance, a function by identity."""

    def __init__(self, parent: _Captured) -> None:
        self.parent = parent
        self.by_key: dict[tuple, tuple[object, _Captured]] = {}
        self.seen: set[int] = set()
        self.keep: list = []

    def add(self, mods: list[torch.nn.Module], funcs: list[types.FunctionType]) -> None:
        p = self.parent
        for o in mods + funcs:
            if id(o) in self.seen or o is p.fn or o is p.func:
                continue
            self.seen.add(id(o))
            self.keep.append(o)
            if isinstance(o, torch.nn.Module) and type(o).forward is torch.nn.Module.forward:
                continue   # a container (ModuleList, ModuleDict): never called
            ch = type(p)(o, p.backend, p.cache_limit, strict=p.strict, break_limit=p.break_limit)
            if ch.code is None or ch.code is p.code:
                continue
            # the callees the frame's recordings gave up in: broken around from the first recording
            ch.break_codes = {c: w for c, w in p.break_codes.items() if c is not ch.code}
            ch.pass_codes = set(p.pass_codes)
            who = o if isinstance(o, torch.nn.Module) else ch.func
            self.by_key[(ch.code, id(who))] = (who, ch)

    def lookup(self, code: types.CodeType, func: types.FunctionType, args: tuple) -> _Captured | None:
        """The capture of a frame (`code`, `func`, bound `args`) the eager frame calls, or None."""
        first = _first_positional(code, args)
        if first is not _MISSING:
            r = self.by_key.get((code, id(first)))
            # (a wrapper's code is shared by every function its decorator wraps: another
            # decorated method of the same module is not its forward)
            if r is not None and r[0] is first and (code.co_argcount or r[1].func is func):
                return r[1]
        r = self.by_key.get((code, id(func)))
        return r[1] if r is not None and r[0] is func else None

    def run(self, func: types.FunctionType, code: types.CodeType, args: tuple) -> Any:
        """Run the frame eagerly, its callees' frames dispatched to their captures."""
        if not self.by_key:
            return _call_bound(func, code, args)
        a = _active()
        a.append([self, CALLEES])
        _hook_acquire()
        # reached through the frame hook (a module with hooks, not dispatched directly):
        # the hook ignores every frame while its callback runs, the callees' too
        depth = _E_real.suspend_callback() if _E_real is not None else 0
        try:
            return _call_bound(func, code, args)
        finally:
            if depth:
                _E_real.resume_callback(depth)
            _hook_release()
            a.pop()
