"""Small helpers for reading aten FX graphs, shared by partition.py and widen.py."""
from __future__ import annotations


def op_name(target) -> str:
    """`aten::add` for an OpOverload, else the target's str()."""
    schema = getattr(target, "_schema", None)
    return schema.name if schema is not None else str(target)


def leaves(x, cls: type):
    """The `cls` instances in `x`, a value nested in lists and tuples."""
    if isinstance(x, cls):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from leaves(v, cls)
