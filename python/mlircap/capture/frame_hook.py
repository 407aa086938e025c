"""Glue to the C++ frame hook (`_evalframe.cpp`): the extension handle `_E` (with the
3.12 static-stack-depth shim), the per-thread stack of active captured calls and the
callback that hands a captured function's frame to its `_Captured.dispatch`."""
from __future__ import annotations

import threading
import types
from typing import Any

from . import _ext
from ._bytecode import _STATIC_DEPTH


_E = _ext.load()
HOOK = "pep523" if _E is not None else "python-fallback"
_NULL = _E.NULL if _E is not None else object()
NOT_HANDLED = _E.NOT_HANDLED if _E is not None else object()


_E_real = _E   # the extension itself (None without it); _E may become the shim below
_REC_TLS = threading.local()   # the recorder of this thread (for 3.12 static stack depths)
if _E is not None:
    _raw_peek = _E.peek

    class _EShim:
        NULL = _E.NULL

        @staticmethod
        def peek(frame: types.FrameType, n: int) -> Any:
            if _STATIC_DEPTH:
                return _E_real.peek_at(frame, _REC_TLS.rec.cur_depth, n)
            return _raw_peek(frame, n)

        @staticmethod
        def poke(frame: types.FrameType, n: int, value: Any) -> Any:
            if _STATIC_DEPTH:
                return _E_real.poke_at(frame, _REC_TLS.rec.cur_depth, n, value)
            return _E_real.poke(frame, n, value)

        local_raw = staticmethod(_E.local_raw)
    _E = _EShim


_TLS = threading.local()
_RECORD_LOCK = threading.RLock()   # one recording run (opcode tracing) at a time in the process
_HOOK_USERS = [0]   # captured calls in flight (all threads): the frame hook stays installed meanwhile
_HOOK_LOCK = threading.Lock()


def _active() -> list:
    a = getattr(_TLS, "active", None)
    if a is None:
        a = _TLS.active = []
    return a


CALLEES = object()   # the mark of an _active() entry [callees, CALLEES] (callees._Callees)


def _hook_cb(code: types.CodeType, func: types.FunctionType, args: tuple) -> Any:
    # The frame is dispatched to the innermost captured call of this thread only if it is
    # that call's own frame: the wrapper's function (and, for a module or bound method,
    # its own instance), and only once per call.  Other functions sharing the code object
    # (closures made by one `def`, other instances of a module class, e.g. called from a
    # forward pre-hook) and recursive frames run normally.
    a = _active()
    if not a:
        return NOT_HANDLED
    e = a[-1]
    st = e[0]
    if e[1] is CALLEES:
        # a frame running eagerly whose callees are captured on their own (callees._Callees)
        ch = st.lookup(code, func, args)
        if ch is None or st.parent.pass_codes and (code, id(type(args[0])) if args else None) in st.parent.pass_codes:
            return NOT_HANDLED   # (give_ups.pass_through_codes: run as it is, its callees looked up here)
        a.append([ch, False])   # its own frames and callees: dispatched / recorded by it
        try:
            return ch.dispatch(func, args)
        finally:
            a.pop()
    if not e[1] or code is not st.code or func is not st.func or \
            (st.bound is not None and (not args or args[0] is not st.bound)):
        return NOT_HANDLED
    e[1] = False
    return st.dispatch(func, args)


def _call_bound(func: types.FunctionType, code: types.CodeType, args: tuple) -> Any:
    """Call func with the frame-bound argument tuple of `code` (positional, keyword-only,
    *args, **kwargs in that order)."""
    n = code.co_argcount
    pos = list(args[:n])
    i = n
    kw = {}
    for name in code.co_varnames[n:n + code.co_kwonlyargcount]:
        kw[name] = args[i]
        i += 1
    if code.co_flags & 0x04:
        pos.extend(args[i])
        i += 1
    if code.co_flags & 0x08:
        kw.update(args[i])
    return func(*pos, **kw)
