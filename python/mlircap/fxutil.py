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


def bool_like(v, shape):
    """A bool meta value on `v`'s device, made in `v`'s own fake mode (the mode
    active while a graph is compiled may be another one: a split graph's values
    come from the capture's mode, and FakeTensor refuses to mix modes)."""
    import torch

    return tensor_like(v, shape, torch.bool)


def tensor_like(v, shape, dtype=None):
    """A meta value of `v`'s dtype (or `dtype`) and device and the given shape, made
    in `v`'s own fake mode (see bool_like)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    dtype = v.dtype if dtype is None else dtype
    mode = getattr(v, "fake_mode", None)
    with unset_fake_temporarily():
        if mode is None:
            return torch.empty(shape, dtype=dtype, device="meta")
        with mode:
            return torch.empty(shape, dtype=dtype, device=v.device)


def adopt_fake_vals(graph, fake, copied) -> None:
    """The meta values of `graph`'s nodes as tensors of its fake mode `fake`: real tensors
    converted, and fake tensors of another mode among the nodes `copied` into it from a
    graph traced apart with make_fx (in real mode make_fx gives its values a FakeTensorMode
    of their own) made again in `fake`. Left in another mode, the next rewrite reading them
    failed in detect_fake_mode ("fake mode ... doesn't match mode ...") and the graph ran
    eagerly (mem.index_copy_(0, i, x) then mem[i] *= 0.5)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

    if fake is None:
        return
    for n in graph.nodes:
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor) or (isinstance(v, FakeTensor) and (v.fake_mode is fake or n not in copied)):
            continue
        with unset_fake_temporarily():
            if not isinstance(v, FakeTensor):
                n.meta["val"] = fake.from_tensor(v)
            else:
                with fake:
                    n.meta["val"] = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
