"""Calls that run a torch.func transform (`torch.func.grad(f)(x)`, `jacrev`, `jacfwd`, `hessian`,
`vjp`, `jvp`, `linearize`, ...) from traced code: uncapturable calls, run eagerly between graphs.
Recorded like torch's other Python code, their ops saw the transform's wrapped tensors (no
storage), which made the recorder raise out of the user's call.  The transform's function (a
closure of torch's wrapper over the user's function) is rebuilt at replay from its code and the
replay's values of its cells (`rebuilt_function`); where a cell holds what the replay cannot
make again, the function runs eagerly (external_calls: the call runs unrecorded).
`torch.vmap` has its own handling (special_calls: a graph node where its function is pure); a
reverse-mode transform of pure tensor code is a graph node too (transform_nodes.py)."""
from __future__ import annotations

import os
import types
from typing import Any

import torch

from ._bytecode import _instrs
from .base import Unreplayable
from .classify import _PRIM

_FUNCTORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "_functorch") + os.sep
_TRANSFORM_FILES = tuple(_FUNCTORCH_DIR + f for f in ("apis.py", "eager_transforms.py"))


def _factories() -> frozenset:
    """The transforms' constructors: they make a wrapper function, running nothing."""
    import torch._functorch.apis as apis
    import torch._functorch.eager_transforms as et
    fs = (apis.vmap, apis.grad, apis.grad_and_value, getattr(apis, "chunk_vmap", None), et.jacrev, et.jacfwd,
          et.hessian, et.functionalize)
    return frozenset(getattr(f, "__wrapped__", f).__code__ for f in fs if f is not None) | \
        frozenset(f.__code__ for f in fs if type(f) is types.FunctionType)


_FACTORY_CODES = _factories()


def transform_call(f: Any) -> bool:
    """Calling f runs a torch.func transform: a function of torch's transform modules that is not
    a constructor (the wrappers grad / jacrev / ... return, `vjp`, `jvp`, `linearize`, the
    function `vjp` returns)."""
    fn = f.__func__ if type(f) is types.MethodType else f
    if type(fn) is not types.FunctionType:
        return False
    code = fn.__code__
    return code.co_filename in _TRANSFORM_FILES and code not in _FACTORY_CODES


def _make_function(code: types.CodeType, globals_: dict, name: str, defaults: tuple | None, kwdefaults: dict | None,
                   values: tuple) -> types.FunctionType:
    f = types.FunctionType(code, globals_, name, defaults, tuple(types.CellType(v) for v in values))
    if kwdefaults:
        f.__kwdefaults__ = dict(kwdefaults)
    return f


def _writes_cells(code: types.CodeType) -> bool:
    """code writes a cell of its closure (`nonlocal n; n += 1`; its own cells are its locals)."""
    return any(ins[0] in ("STORE_DEREF", "DELETE_DEREF") and ins[2] in code.co_freevars
               for ins in _instrs(code).values())


def rebuilt_function(rec: Any, fn: Any, depth: int = 0) -> str:
    """The replay's expression of fn: rec.expr_of(fn), or for a closure made during the call (a
    transform's wrapper, the user's lambda it wraps) a new function of the same code whose cells
    hold the replay's values of its cells.  Only where no cell is written by the function (its
    writes would reach the new cells, not the program's) and every cell holds a value the replay
    reads and no call can have changed: numbers, strings, None, tensors, modules and objects the
    recording tracks (their source), tuples of those, and such functions again."""
    if type(fn) is not types.FunctionType or not fn.__closure__ or id(fn) in rec.src:
        return rec.expr_of(fn)
    if depth > 4 or _writes_cells(fn.__code__):
        raise Unreplayable(f"a closure {fn.__qualname__} handed to a torch.func transform")
    cells = []
    for c in fn.__closure__:
        try:
            v = c.cell_contents
        except ValueError:
            raise Unreplayable(f"an empty cell of {fn.__qualname__} handed to a torch.func transform") from None
        cells.append(_cell_expr(rec, fn, v, depth))
    defaults = rec.expr_of(fn.__defaults__) if fn.__defaults__ else "None"
    kwd = rec.expr_of(fn.__kwdefaults__) if fn.__kwdefaults__ else "None"
    return (f"{rec.const(_make_function)}({rec.const(fn.__code__)}, {rec.const(fn.__globals__)}, "
            f"{fn.__name__!r}, {defaults}, {kwd}, ({''.join(c + ', ' for c in cells)}))")


def _cell_expr(rec: Any, fn: Any, v: Any, depth: int) -> str:
    if type(v) is types.FunctionType:
        return rebuilt_function(rec, v, depth + 1)
    if type(v) is tuple:
        return "(" + "".join(_cell_expr(rec, fn, x, depth) + ", " for x in v) + ")"
    if v is None or type(v) in _PRIM or isinstance(v, torch.Tensor) or id(v) in rec.src or \
            isinstance(v, (types.BuiltinFunctionType, types.ModuleType)):
        return rec.expr_of(v)
    if type(v) is types.MethodType and type(v.__func__) is types.FunctionType and not v.__func__.__closure__:
        return rec.expr_of(v)
    raise Unreplayable(f"a {type(v).__name__} in a cell of {fn.__qualname__} handed to a torch.func transform")
