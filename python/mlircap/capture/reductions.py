"""`copy.deepcopy(obj)` / `copy.copy(obj)` of a plain Python object (a config, a dataclass
instance) traced through: copy.py (traced) asks the object for `__reduce_ex__(4)`, C code the
recording cannot see into, which made every such copy an uncapturable call and a graph
break (transformers' `config.get_text_config(decoder=True)` deep-copies an encoder-decoder
model's config inside its forward: bart, t5, pegasus, marian broke in two graphs there).

For an object whose class takes the default reduction (`object.__reduce_ex__`, no
`__reduce__` / `__getstate__` / `__getnewargs__` of its own, no `__slots__`, Python classes
over `object` alone) the call is replaced by `plain_reduce_ex`, the same computation in
Python, which the tracer follows: the object's `__dict__` is read where the program's other
reads are (guarded where copy.py reads its items), and the new object is made by
`plain_newobj` (`cls.__new__(cls)`, as `copyreg.__newobj__`), an object of the call as any
other it makes."""
from __future__ import annotations

import copyreg
import types
from typing import Any

from .classify import _code_kind

_HEAPTYPE = 1 << 9


def plain_newobj(cls: type, *args: Any) -> Any:
    """copyreg.__newobj__ (untraced library code) as traced code."""
    return cls.__new__(cls, *args)


def plain_reduce_ex(obj: Any, protocol: int) -> tuple:
    """object.__reduce_ex__(obj, protocol) for protocol >= 2 of an object `plain_reducible`
    accepts: (copyreg.__newobj__, (type(obj),), its __dict__ (None when empty), None, None);
    the constructor given as plain_newobj, the traced equivalent."""
    d = obj.__dict__
    return plain_newobj, (type(obj),), (d if d else None), None, None


for _f in (plain_newobj, plain_reduce_ex):
    _code_kind[_f.__code__] = "user"

_PLAIN: dict[type, bool] = {}


def _plain_class(cls: type) -> bool:
    """Instances of cls reduce as object.__reduce_ex__ does by default: Python classes over
    object alone (no C base with state of its own), no __slots__, no reduction hooks."""
    got = _PLAIN.get(cls)
    if got is None:
        mro = cls.__mro__
        got = mro[-1] is object and all(
            c.__flags__ & _HEAPTYPE and "__slots__" not in c.__dict__ for c in mro[:-1]) and \
            all(getattr(cls, n, None) is getattr(object, n, None)
                for n in ("__reduce_ex__", "__reduce__", "__getstate__", "__getnewargs__", "__getnewargs_ex__",
                          "__new__")) and \
            copyreg.dispatch_table.get(cls) is None
        if len(_PLAIN) < 4096:
            _PLAIN[cls] = got
    return got


def plain_reducer(f: Any, args: list, kwargs: dict) -> Any:
    """The traced replacement of `f(*args)` where f is an object's default `__reduce_ex__`
    (bound: `x.__reduce_ex__(4)` in copy.deepcopy; the descriptor: `cls.__reduce_ex__(x, 4)` in
    copy.copy) and the object `plain_reducible`: a callable taking the same arguments.  None:
    any other call."""
    if kwargs or getattr(f, "__name__", None) != "__reduce_ex__":
        return None
    if type(f) is types.BuiltinMethodType:
        obj, rest = f.__self__, args
        if getattr(type(obj), "__reduce_ex__", None) is not object.__reduce_ex__:
            return None
        bound = True
    elif f is object.__reduce_ex__ and args:
        obj, rest = args[0], args[1:]
        bound = False
    else:
        return None
    if len(rest) != 1 or type(rest[0]) is not int or rest[0] < 2 or not _plain_class(type(obj)):
        return None
    return types.MethodType(plain_reduce_ex, obj) if bound else plain_reduce_ex
