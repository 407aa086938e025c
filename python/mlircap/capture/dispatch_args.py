"""What `_Captured` (cache.py) needs around dispatching a call: binding its arguments into a
frame's fast locals as CPython does (`_bind_args`), whether a module call goes straight to
its forward (`_module_direct`), argument signatures for the cache-limit report
(`_arg_signature`), the stacklevel of its warnings (`_callers_level`), the profile function
a recording replaced (`_restore_profile`) and the frame hook's count of users
(`_hook_acquire` / `_hook_release`)."""
from __future__ import annotations

import os
import sys
import types
from typing import Any

import torch

from .classify import _TORCH_DIR
from .frame_hook import _E_real, _HOOK_LOCK, _HOOK_USERS, _hook_cb


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _arg_signature(args: tuple) -> tuple | None:
    """The tensors' shapes, strides, dtypes, devices and requires_grad and the Python
    numbers, strings and None among `args` (the bound arguments); other objects by type.
    None where an argument is a container (what it holds is not looked at)."""
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
        elif a is None or isinstance(a, (bool, int, float, str)):
            sig.append((type(a), a))
        elif isinstance(a, (list, tuple, dict, set)):
            return None
        else:
            sig.append(type(a))
    return tuple(sig)


def _callers_level() -> int:
    """The `stacklevel` of warnings.warn, called by our caller, that points at the code
    calling the captured function (the first frame outside mlircap and torch)."""
    f, n = sys._getframe(2), 2   # stacklevel 2: our caller's caller
    while f is not None and (f.f_code.co_filename.startswith(_PKG_DIR) or
                             f.f_code.co_filename.startswith(_TORCH_DIR)):
        f, n = f.f_back, n + 1
    return n if f is not None else 1


_CONTEXT_DECORATORS = (os.path.join("utils", "_contextlib.py"), os.path.join("amp", "autocast_mode.py"))


def _restore_profile(old: Any) -> None:
    """Puts back the profile function a recording replaced.  Under cProfile (3.11: a C
    profile function) sys.getprofile() returns the Profile object, which sys.setprofile
    rejects ('Profile' object is not callable, raised to a user profiling a compiled call):
    its enable() installs it again.  A C profiler with no such method cannot be restored
    from Python and stays off (it loses the events of this thread, not the call)."""
    if old is None or callable(old):
        sys.setprofile(old)
    elif callable(getattr(old, "enable", None)):
        sys.setprofile(None)
        old.enable()
    else:
        sys.setprofile(None)


def _hook_acquire() -> None:
    """One more user of the frame hook (installed while any captured call or recording of
    any thread is in flight)."""
    with _HOOK_LOCK:
        _HOOK_USERS[0] += 1
        if _HOOK_USERS[0] == 1:
            _E_real.set_callback(_hook_cb)


def _hook_release() -> None:
    with _HOOK_LOCK:
        _HOOK_USERS[0] -= 1
        if _HOOK_USERS[0] == 0:
            _E_real.set_callback(None)


_VARARGS, _VARKEYWORDS = 0x04, 0x08


def _bind_args(code: types.CodeType, func: types.FunctionType, args: tuple, kwargs: dict) -> tuple | None:
    """The arguments of a frame of `func` called with `args` and `kwargs`, as CPython binds
    them into its first fast locals (positional parameters, keyword-only ones, the *args
    tuple, the **kwargs dict: what the frame hook hands to dispatch), or None where the
    call does not bind (CPython's TypeError is then raised by the call itself)."""
    n = code.co_argcount
    flags = code.co_flags
    if not kwargs and len(args) == n and not code.co_kwonlyargcount and not flags & (_VARARGS | _VARKEYWORDS):
        return args
    if len(args) > n and not flags & _VARARGS:
        return None
    names = code.co_varnames
    kw = dict(kwargs)
    posonly = code.co_posonlyargcount
    for i in range(posonly, min(len(args), n)):
        if names[i] in kw:   # given by position and by keyword
            return None
    vals = list(args[:n])
    defaults = func.__defaults__ or ()
    first_default = n - len(defaults)
    for i in range(len(vals), n):
        name = names[i]
        if i >= posonly and name in kw:
            vals.append(kw.pop(name))
        elif i >= first_default:
            vals.append(defaults[i - first_default])
        else:
            return None
    if code.co_kwonlyargcount:
        kwdefaults = func.__kwdefaults__ or {}
        for name in names[n:n + code.co_kwonlyargcount]:
            if name in kw:
                vals.append(kw.pop(name))
            elif name in kwdefaults:
                vals.append(kwdefaults[name])
            else:
                return None
    if flags & _VARARGS:
        vals.append(tuple(args[n:]))
    if flags & _VARKEYWORDS:
        vals.append(kw)
    elif kw:
        return None
    return tuple(vals)


_Module = torch.nn.Module
_module_call = torch.nn.Module.__call__
_mm = sys.modules[torch.nn.Module.__module__]   # torch.nn.modules.module: the global hooks
_tracing_state = torch._C._get_tracing_state


def _module_direct(m: torch.nn.Module, func: types.FunctionType) -> bool:
    """`m(*args)` would call `func` (its class's forward) right away: Module.__call__
    taking its path without hooks (no module or global forward/backward hooks, not
    torch.compile'd, not under torch.jit tracing) and no `forward` set on the instance."""
    t = type(m)
    return t.__call__ is _module_call and t.forward is func and m._compiled_call_impl is None and \
        not (m._backward_hooks or m._backward_pre_hooks or m._forward_hooks or m._forward_pre_hooks or
             _mm._global_backward_pre_hooks or _mm._global_backward_hooks or _mm._global_forward_hooks or
             _mm._global_forward_pre_hooks) and "forward" not in m.__dict__ and not _tracing_state()
