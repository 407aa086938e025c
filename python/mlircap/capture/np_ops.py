"""The NumPy operations `np_interop` translates, as plain functions and tables: the opcodes and
operators it records (`_BINOPS`, `_CMPOPS`, `_UNARY`), the opcodes that only move values, how
a translation runs (`_np_apply` through torch._numpy, `_wrapper`: one graph call target per
operation), the replay steps of a break (`_np_call`, `_np_from_tensor`, `_np_to_tensor`) and
the check that a translation holds NumPy's real result (`_matches`)."""
from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from ._bytecode import _stack_depths
from .fx_targets import _fx_target

_BINOPS: dict[str, Callable] = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv, "<<": operator.lshift,
    "@": operator.matmul, "*": operator.mul, "%": operator.mod, "|": operator.or_, "**": operator.pow,
    ">>": operator.rshift, "-": operator.sub, "/": operator.truediv, "^": operator.xor,
}
_CMPOPS: dict[str, Callable] = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
                                ">": operator.gt, ">=": operator.ge}
_UNARY: dict[str, Callable] = {"UNARY_NEGATIVE": operator.neg, "UNARY_POSITIVE": operator.pos,
                               "UNARY_INVERT": operator.invert}
# opcodes that only move values between the stack and local variables (a tracked array
# stays where the recorder sees it)
_MOVES = frozenset({
    "NOP", "RESUME", "CACHE", "PRECALL", "KW_NAMES", "PUSH_NULL", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "RETURN_CONST", "LOAD_GLOBAL", "LOAD_DEREF",
    "LOAD_CLOSURE", "LOAD_NAME", "LOAD_CLASSDEREF", "STORE_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST",
    "DELETE_FAST", "POP_TOP", "COPY", "SWAP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
    "JUMP", "JUMP_NO_INTERRUPT", "EXTENDED_ARG", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_ASSERTION_ERROR",
    "END_FOR", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
})
# what may run between an instruction and the captured frame's RETURN_VALUE for the values
# it consumes to count as returned (loads and container builds only)
_RETURN_PATH = frozenset({"LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP",
                          "BUILD_CONST_KEY_MAP", "NOP", "CACHE", "LIST_TO_TUPLE"})
# ndarray attributes that are metadata (static: the shadow's shape and dtype are guarded)
_META_ATTRS = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes"})
# ndarray attributes read as values (translated)
_VALUE_ATTRS = frozenset({"T"})


def _np() -> Any:
    return sys.modules.get("numpy")


def _tnp() -> Any:
    import torch._numpy as tnp
    return tnp


def _to_tnp(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return _tnp().ndarray(x)
    if type(x) in (tuple, list):
        return type(x)(_to_tnp(y) for y in x)
    return x


def _np_apply(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """`fn` on torch._numpy arrays wrapping the tensor arguments; the array result's tensor."""
    r = fn(*_to_tnp(args), **{k: _to_tnp(v) for k, v in kwargs.items()})
    tnp = _tnp()
    if isinstance(r, tnp.ndarray):
        return r.tensor
    raise TypeError(f"torch._numpy result of type {type(r).__name__}")


_WRAPPERS: dict[tuple, Callable] = {}


def _wrapper(key: tuple, fn: Callable) -> Callable:
    """The graph's call target for one NumPy operation (one per operation, made resolvable
    for FX code generation by `_fx_target`)."""
    w = _WRAPPERS.get(key)
    if w is None:
        def w(*a: Any, **k: Any) -> Any:
            return _np_apply(fn, a, k)
        w.__name__ = w.__qualname__ = "np_" + "_".join(str(p) for p in key if isinstance(p, str))
        w = _WRAPPERS[key] = _fx_target(w)
    return w


def _method(name: str) -> Callable:
    def m(arr: Any, *a: Any, **k: Any) -> Any:
        return getattr(arr, name)(*a, **k)
    return m


def _np_call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Replay step of an operation the graph does not hold: NumPy's own, on the arrays of
    the shadow tensors (`fn` is the NumPy callable, the operator, or an attribute getter)."""
    conv = lambda x: x.numpy() if isinstance(x, torch.Tensor) else x  # noqa: E731
    return fn(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})


def _np_from_tensor(t: torch.Tensor, scalar: bool) -> Any:
    """Replay step materializing a tracked array (or NumPy scalar) from its shadow."""
    a = t.detach().numpy()
    return a[()] if scalar else a


def _np_to_tensor(t: torch.Tensor, copy: bool, dtype: torch.dtype | None) -> torch.Tensor:
    """`torch.from_numpy(a)` / `torch.as_tensor(a, dtype)` / `torch.tensor(a, dtype)` of a
    tracked array, on its shadow: an alias (from_numpy, as_tensor of the same dtype) or a copy."""
    r = t.detach()
    if dtype is not None and dtype != r.dtype:
        return r.to(dtype)
    return r.clone() if copy else r


def _matches(res: Any, sr: Any) -> bool:
    """The translation's tensor holds NumPy's real result: same dtype, shape and values
    (floating point within torch.testing's default tolerances: a few ulps)."""
    np = _np()
    if not isinstance(sr, torch.Tensor) or np is None:
        return False
    if isinstance(res, np.ndarray):
        arr = res
    elif isinstance(res, np.generic):
        arr = np.asarray(res)
    else:
        return False
    try:
        rt = torch.from_numpy(np.array(arr, order="C", copy=True))
    except Exception:
        return False
    return _close(rt, sr)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    try:
        torch.testing.assert_close(b.detach(), a.detach(), equal_nan=True, check_stride=False)
    except Exception:
        return False
    return True


def _static_index(i: Any) -> bool:
    if type(i) is tuple:
        return all(_static_index(x) for x in i)
    return i is None or i is Ellipsis or type(i) in (int, bool) or \
        (type(i) is slice and all(v is None or type(v) is int for v in (i.start, i.stop, i.step)))


_depths: dict[types.CodeType, dict[int, int]] = {}


def _static_depth(code: types.CodeType, offset: int) -> int | None:
    """The value-stack depth before the instruction at `offset` (computed statically)."""
    d = _depths.get(code)
    if d is None:
        import dis
        d = _depths[code] = _stack_depths(code, list(dis.get_instructions(code)))
    return d.get(offset)


def _use(op: str) -> str:
    """What an opcode does with a tracked value, for the break reason."""
    if op.startswith("POP_JUMP") or op in ("TO_BOOL", "UNARY_NOT"):
        return "branch on"
    if op.startswith("CALL"):
        return "call with"
    if op.startswith("FORMAT") or op == "BUILD_STRING":
        return "formatting of"
    if op in ("RETURN_VALUE", "YIELD_VALUE"):
        return "return of"
    if op.startswith("STORE") or op.startswith("BUILD") or op.endswith(("_APPEND", "_ADD", "_EXTEND", "_UPDATE")):
        return "store of"
    if op in ("GET_ITER", "UNPACK_SEQUENCE", "UNPACK_EX"):
        return "iteration over"
    return f"{op} on"


def _nb_ops() -> list:
    import dis
    return list(enumerate(s for _, s in dis._nb_ops))
