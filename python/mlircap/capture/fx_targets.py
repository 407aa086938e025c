"""FX call targets: torch callables as `call_function` targets FX's code generation can
name (`_fx_target`), constant arguments FX cannot write as code bound into the target
(`_bind_constants`), and a torch function's name as the user wrote it (`_op_name`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .classify import _fname, _func_qualname
from .typeinfo import _is_frozen_dataclass

_fx_ok: dict[Callable, Callable] = {}


def _fx_target(f: Callable) -> Callable:
    """FX codegen names call_function targets by module + name; some torch callables
    (e.g. Tensor dunder wrappers in torch/_tensor.py) do not resolve that way.  Such
    targets are routed through a resolvable module-level trampoline."""
    try:
        r = _fx_ok.get(f)
    except TypeError:
        r = None
    if r is not None:
        return r
    from torch.fx.node import _get_qualified_name
    ok = False
    try:
        q = _get_qualified_name(f)
        mod, _, attr = q.rpartition(".")
        import importlib
        obj = None
        parts = q.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except Exception:
                continue
            for p_ in parts[i:]:
                obj = getattr(obj, p_)
            break
        ok = obj is f or obj == f
    except Exception:
        ok = False
    if ok:
        r = f
    else:
        n = len(_fx_ok)
        name = f"_fx_target_{n}_" + "".join(ch if ch.isalnum() else "_" for ch in _fname(f))

        def tramp(*a: Any, **k: Any) -> Any:
            return f(*a, **k)
        tramp.__name__ = tramp.__qualname__ = name
        tramp.__module__ = __name__
        globals()[name] = tramp
        r = tramp
    try:
        _fx_ok[f] = r
    except TypeError:
        pass
    return r


def _op_name(func: Callable) -> str:
    """A torch function's name as the user wrote it, for messages: Tensor.mul_, Tensor.data,
    torch.stack (not TensorBase.mul_, getset_descriptor.__get__, _VariableFunctionsClass.stack)."""
    if getattr(func, "__name__", None) in ("__get__", "__set__"):
        attr = getattr(getattr(func, "__self__", None), "__name__", None)
        if attr is not None:
            return f"Tensor.{attr}" + (" = ..." if func.__name__ == "__set__" else "")
    n = _func_qualname(func)
    for prefix, user in (("TensorBase.", "Tensor."), ("_VariableFunctionsClass.", "torch."),
                         ("_TensorBase.", "Tensor.")):
        if n.startswith(prefix):
            return user + n[len(prefix):]
    mod = getattr(func, "__module__", None)
    if mod and "." not in n and mod.startswith("torch"):
        return f"{mod}.{n}"
    return n



def _has_dataclass(x: Any) -> bool:
    return _is_frozen_dataclass(x) or isinstance(x, tuple) and any(_has_dataclass(y) for y in x)


def _bind_constants(func: Callable, args: dict[int, Any], kwargs: dict[str, Any]) -> Callable:
    """func with the constant arguments FX cannot write as code (frozen dataclasses: a
    torch function's options object) bound: the graph passes None in their places."""
    def bound(*a: Any, **k: Any) -> Any:
        a2 = list(a)
        for i, v in args.items():
            a2[i] = v
        return func(*a2, **k, **kwargs)
    bound.__name__ = bound.__qualname__ = f"{_fname(func)}_with_constants"
    return bound
