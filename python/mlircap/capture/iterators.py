"""Iterators that outlive the captured call: `next(self.sched)` on an `itertools.cycle` a
module holds, `next(_IDS)` on a global `itertools.count()`, a generator object kept on the
module.  Each call advances them, so their value is no constant of the recording: such a
`next` is an uncapturable call, run at replay (a step whose result the program uses, as a
graph break's).  An iterator the call creates itself (a generator helper, `iter(list)`,
`zip`, ...) stays traced: nothing outside the call can see its state."""
from __future__ import annotations

import builtins
import types
import warnings
from typing import Any

# C iterators whose __next__ runs no Python code of their own (their items' __next__ aside:
# itertools' take those of their inputs, which are checked the same way)
_C_ITERS = {"list_iterator", "tuple_iterator", "range_iterator", "str_ascii_iterator", "str_iterator",
            "dict_keyiterator", "dict_valueiterator", "dict_itemiterator", "set_iterator"}
_ITERTOOLS_INPUTS = {"cycle", "count", "repeat", "islice", "chain", "accumulate", "zip_longest", "starmap",
                     "compress", "takewhile", "dropwhile", "pairwise", "batched"}


def next_receiver(f: Any, args: list) -> object | None:
    """The iterator `f(*args)` advances when it is `next(it[, default])` or a bound or
    unbound `__next__` (None otherwise)."""
    if f is builtins.next:
        return args[0] if args else None
    if getattr(f, "__name__", None) != "__next__":
        return None
    so = getattr(f, "__self__", None)
    if so is not None and not isinstance(so, type):
        return so
    return args[0] if args else None


def stateful_next(f: Any, args: list, src: dict) -> bool:
    """`next` on an iterator the call did not create: one read from the program's state (an
    attribute, a global, an argument: in `src`)."""
    it = next_receiver(f, args)
    return it is not None and id(it) in src and (isinstance(it, types.GeneratorType) or
                                                hasattr(type(it), "__next__"))


def pure_draw(f: Any, args: list) -> bool:
    """A `next` on an iterator whose advance runs no Python code and touches nothing but its
    own position (a C iterator, an itertools object over one of numbers): like a draw from
    a Python RNG, the replay may run it before the open graph (graph_steps._hoisted_step)."""
    it = next_receiver(f, args)
    return it is not None and _plain_c_iterator(it)


def _plain_c_iterator(it: object) -> bool:
    t = type(it)
    if t.__module__ == "builtins":
        return t.__name__ in _C_ITERS
    if t.__module__ == "itertools" and t.__name__ in _ITERTOOLS_INPUTS:
        # (pickle's view of the state names the inputs: cycle(it) keeps a list and the source)
        try:
            with warnings.catch_warnings():   # (deprecated for itertools from Python 3.12)
                warnings.simplefilter("ignore")
                red = it.__reduce__()
        except Exception:
            return False
        return all(_plain_state(x) for x in red[1:])
    return False


def _plain_state(x: object, depth: int = 0) -> bool:
    if x is None or type(x) in (bool, int, float, str):
        return True
    if depth > 3:
        return False
    if type(x) in (tuple, list):
        return all(_plain_state(y, depth + 1) for y in x)
    return _plain_c_iterator(x)
