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


def keep_layout(new, old_val) -> None:
    """`new`, a node traced apart that replaces one whose meta value is `old_val`, given
    `old_val`'s strides and storage offset where its own differ. The views of the replaced
    node (an alias, y[0]) kept meta values computed from `old_val`'s layout; a layout of its
    own (the traced copysign's `where` contiguous, eager's result transposed as its input)
    made backend._output_views remake y[0] as an as_strided of `new`'s buffer with strides
    relative to another layout: elements from the wrong places (--grad seed 537: x.grad)."""
    import torch

    v = new.meta.get("val")
    if not (isinstance(v, torch.Tensor) and isinstance(old_val, torch.Tensor)) or v.shape != old_val.shape or \
            v.dtype != old_val.dtype or (v.stride() == old_val.stride() and
                                         v.storage_offset() == old_val.storage_offset()):
        return
    new.meta["val"] = old_val
