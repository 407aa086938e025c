"""Source locations and short descriptions for messages: the user's file:line of the
current operation, FX `stack_trace` metadata, readable value summaries."""
from __future__ import annotations

import os
import sys
import types

import torch

from .classify import _TORCH_DIR, _classify


_API_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api.py")


def _user_location() -> str:
    f = sys._getframe(1)
    while f is not None:
        if _classify(f.f_code) == "user" and not f.f_code.co_filename.startswith(_TORCH_DIR) and \
                f.f_code.co_filename != _API_FILE:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    f = sys._getframe(1)
    while f is not None:
        if _classify(f.f_code) == "user" and f.f_code.co_filename != _API_FILE:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


def _user_stack_trace() -> str | None:
    """The innermost user frame in traceback form (FX `stack_trace` meta), so
    compilers can point diagnostics at the user's source line."""
    f = sys._getframe(1)
    while f is not None:
        if _classify(f.f_code) == "user" and not f.f_code.co_filename.startswith(_TORCH_DIR):
            return f'  File "{f.f_code.co_filename}", line {f.f_lineno}, in {f.f_code.co_name}\n'
        f = f.f_back
    return None


def _short(v: object) -> str:
    if isinstance(v, torch.nn.Module):
        return f"<{type(v).__name__} module>"
    if isinstance(v, types.FunctionType):
        return f"<function {v.__qualname__}>"
    if isinstance(v, type):
        return f"<class {v.__qualname__}>"
    if isinstance(v, types.ModuleType):
        return f"<module {v.__name__}>"
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


def _frame_loc(frame: types.FrameType | None) -> str:
    if frame is None:
        return _user_location()
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
