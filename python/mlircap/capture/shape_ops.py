"""Which torch calls make results whose shape depends on tensor data (`_dyn_shape_op`:
nonzero, boolean-mask indexing, unique, an integer tensor where an op reads a size, ...),
and the shape metadata and splitting functions such results affect."""
from __future__ import annotations

import torch


# Tensor functions whose results' shapes depend on tensor data (nonzero, boolean-mask
# indexing, unique, ...); a shape read of such a result (or of anything computed from
# one) is data-dependent, not metadata the guards cover.
_DYN_SHAPE_OPS = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "_unique", "_unique2",
                  "bincount", "_pack_padded_sequence"}
# Metadata that depends on a tensor's shape.
_SHAPE_META = {"size", "numel", "nelement", "__len__", "shape", "stride", "is_contiguous", "nbytes"}
# Functions whose number of results follows a tensor's shape.
_SPLITTERS = {"unbind", "split", "chunk", "tensor_split", "split_with_sizes", "unsafe_split", "hsplit", "vsplit",
              "dsplit", "unsafe_chunk"}


# Functions an int argument of which sets their results' shapes (a size, count, length, k,
# offset or dim); given a tensor there (torch.arange(lengths.max()), x.view(n, -1),
# F.pad(x, (0, n)), x.topk(k)), torch reads its value, so the result's shape depends on tensor
# data. Factories read their first argument too.
_SHAPE_INT_OPS = {"view", "reshape", "expand", "broadcast_to", "repeat", "tile", "narrow", "unflatten", "unfold",
                  "new_zeros", "new_ones", "new_empty", "new_full", "topk", "one_hot", "pad", "histc", "multinomial",
                  "as_strided", "diag", "diagonal", "diag_embed", "flatten", "unsqueeze", "squeeze", "movedim",
                  "transpose", "permute", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d",
                  "adaptive_max_pool2d"}
_SHAPE_INT_FACTORIES = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace",
                        "logspace", "eye", "tril_indices", "triu_indices", "randperm"}


def _int_tensor(a: object) -> bool:
    return isinstance(a, torch.Tensor) and a.numel() == 1 and not (a.is_floating_point() or a.is_complex())


def _tensor_int_argument(name: str, args: tuple, kwargs: dict) -> bool:
    """`name` takes an integer one-element tensor where it reads an int that sets its results'
    shapes (`_SHAPE_INT_OPS`: past its first argument; factories: anywhere)."""
    rest = list(args if name in _SHAPE_INT_FACTORIES else args[1:]) + list(kwargs.values())
    if name == "arange":   # its length is ceil((end - start) / step): float bounds set it too
        return any(isinstance(a, torch.Tensor) and a.numel() == 1 and not a.is_complex() for a in rest)
    return any(_int_tensor(a) or isinstance(a, (list, tuple)) and any(_int_tensor(b) for b in a) for a in rest)


_INT_TYPES = {"int", "Optional[int]", "List[int]", "Optional[List[int]]"}
_SCHEMA_TYPES: dict = {}


def _overload_types(name: str) -> list:
    """The aten overloads of `name` as (positional argument types, keyword argument types), the
    TorchScript list builtins (`aten::mul(t[] l, int n)`) left out."""
    r = _SCHEMA_TYPES.get(name)
    if r is None:
        r = []
        try:
            schemas = torch._C._jit_get_schemas_for_operator("aten::" + name)
        except Exception:  # noqa: BLE001
            schemas = []
        for sc in schemas:
            a = sc.arguments
            if a and "[t]" in str(a[0].type):
                continue
            r.append(([str(x.type) for x in a if not x.kwarg_only], {x.name: str(x.type) for x in a}))
        _SCHEMA_TYPES[name] = r
    return r


def _int_position(name: str, i: int | str) -> bool:
    """Every aten overload of `name` reads position `i` (an index, or a keyword) as an int or a
    list of ints (a size, count, dim, k or kernel size) where any reads it at all: none takes a
    tensor or a number there. A position past an overload's last positional argument that is a
    list of ints is that list's (`x.view(n, -1)`)."""
    seen = False
    for pos, kw in _overload_types(name):
        if isinstance(i, str):
            t = kw.get(i)
        elif i < len(pos):
            t = pos[i]
        else:
            t = pos[-1] if pos and pos[-1] in ("List[int]", "Optional[List[int]]") and len(pos) > 1 else None
        if t is None:
            continue
        if "Tensor" in t or "number" in t:
            return False
        seen = seen or t in _INT_TYPES
    return seen


def _schema_int_argument(name: str, args: tuple, kwargs: dict) -> bool:
    """An integer one-element tensor (or a list holding one) is passed where the aten op `name`
    reads an int (`torch.sum(x, dim=n)`, `F.avg_pool2d(x, n)`, `torch.cat(ts, dim=n)`)."""
    if name.startswith("__"):
        return False

    def has(a: object) -> bool:
        return _int_tensor(a) or isinstance(a, (list, tuple)) and any(_int_tensor(b) for b in a)

    return any(has(a) and _int_position(name, i) for i, a in enumerate(args)) or \
        any(has(v) and _int_position(name, k) for k, v in kwargs.items())


def _dyn_shape_op(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether `name(*args, **kwargs)` makes a result whose shape depends on tensor data."""
    if name in _DYN_SHAPE_OPS:
        return True
    if (name in _SHAPE_INT_OPS or name in _SHAPE_INT_FACTORIES) and _tensor_int_argument(name, args, kwargs):
        return True
    if _schema_int_argument(name, args, kwargs):
        return True
    if name == "where":   # where(cond): nonzero as a tuple
        return len(args) + len(kwargs) == 1
    if name in ("tensor_split", "hsplit", "vsplit", "dsplit"):   # split at the indices a tensor holds
        return any(isinstance(a, torch.Tensor) and a.dim() == 1 for a in list(args[1:]) + list(kwargs.values()))
    if name == "one_hot":   # one_hot(labels) / num_classes=-1: labels.max() + 1 classes
        nc = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        return isinstance(nc, int) and nc < 0
    if name == "repeat_interleave":   # repeats given as a tensor (or the one-argument form)
        rep = args[1] if len(args) > 1 else kwargs.get("repeats")
        return isinstance(rep, torch.Tensor) or len(args) == 1 and not kwargs
    if name in ("__getitem__", "index"):   # indexing with a boolean mask
        idx = args[1] if len(args) > 1 else None
        idx = idx if isinstance(idx, (tuple, list)) else (idx,)
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in idx)
    return False
