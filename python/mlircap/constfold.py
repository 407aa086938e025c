"""Constant folding with torch's own semantics, before torch-mlir sees the graph.

torch-mlir folds ops whose operands are splat literals, and some of those folds
are wrong: a float splat compared with an integer scalar compares the float's
bit pattern (`torch.ones(4) == 1` became all False, `full_like(x, 1) > 2` all
True), `add(c, c, alpha=-1)` read alpha as unsigned (1.8e19), comparisons of
f16/bf16/f64 splats and `where` over a constant condition gave wrong values.
Those results were silently wrong (`F.cosine_embedding_loss` returned 0).

So mlircap folds first: every node whose value the graph's inputs do not decide
(factories, `*_like`/`new_*` fills, which read only their input's shape, small
tensor constants, and deterministic ops on those) is computed here by torch, on
the graph's device, and the ones read by the rest of the graph become constants
(a fill when the value is one repeated element, else a tensor constant of at
most `CONST_LIMIT` elements). What torch-mlir gets then has no op left whose
operands are all literals. Random, mutating, uninitialized (`empty*`) and
nondeterministic ops are never folded; nor is anything larger than `_EVAL_LIMIT`
elements.
"""
from __future__ import annotations

import operator
import warnings

import torch
import torch.fx as fx

from .fxutil import op_name

_EVAL_LIMIT = 1 << 22    # elements of any tensor computed at compile time
CONST_LIMIT = 1024       # elements of a folded result that is not one repeated value
_LIKE = {"aten::full_like", "aten::zeros_like", "aten::ones_like", "aten::new_full", "aten::new_zeros",
         "aten::new_ones", "aten::scalar_tensor"}
_NEVER = ("empty", "rand", "normal", "bernoulli", "dropout", "multinomial", "poisson", "exponential",
          "_assert", "_local_scalar_dense", "item", "print", "_make_token", "_sink_tokens")


def _tensors(val) -> list | None:
    """The tensors of a node's value (one, or a tuple/list of them), or None."""
    vals = [val] if isinstance(val, torch.Tensor) else list(val) if isinstance(val, (tuple, list)) else None
    if not vals or not all(isinstance(v, torch.Tensor) and v.layout == torch.strided and not v.is_complex()
                           and not v.is_quantized and v.numel() <= _EVAL_LIMIT for v in vals):
        return None
    return vals


def _foldable(node: fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    name = op_name(target)
    tags = getattr(target, "tags", ())
    if target._schema.is_mutable or any(w in name for w in _NEVER) or \
            torch.Tag.nondeterministic_seeded in tags or torch.Tag.nondeterministic_bitwise in tags:
        return False
    return _tensors(node.meta.get("val")) is not None


def real_like(v: torch.Tensor) -> torch.Tensor:
    """A real (uninitialized) tensor with fake tensor `v`'s metadata, for ops that read
    only its shape (full_like) or tensors with no elements (nothing to read)."""
    return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device=v.device)


def is_uniform(t: torch.Tensor) -> bool:
    """`t` is one repeated value (NaN equals NaN; -0.0 is not 0.0), or has no elements."""
    flat = t.reshape(-1)
    if flat.numel() == 0:
        return True
    if not flat.is_floating_point():
        return bool((flat == flat[0]).all())
    nan = flat != flat
    return bool((nan == nan[0]).all()) and bool(((flat == flat[0]) | nan).all()) and \
        bool((flat.signbit() == flat[0].signbit()).all())


def fill_node(graph: fx.Graph, v: torch.Tensor, scalar) -> fx.Node:
    """`aten.full` of fake tensor `v`'s shape, dtype and device, at the insertion point."""
    return graph.call_function(torch.ops.aten.full.default, (list(v.shape), scalar),
                               {"dtype": v.dtype, "device": v.device})


def constant_node(gm: fx.GraphModule, v: torch.Tensor, t: torch.Tensor, attr: str) -> fx.Node | None:
    """A node giving value `t` for a node whose value metadata is `v`, at the graph's
    insertion point: a fill when `t` is one repeated value, else a get_attr of a
    contiguous copy of `t` stored as `gm.<attr>` (at most CONST_LIMIT elements; None
    for a larger one)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():   # `t` is real; compile time may run under a FakeTensorMode
        if is_uniform(t):
            return fill_node(gm.graph, v, t.reshape(-1)[0].item() if t.numel() else 0)
        if t.numel() > CONST_LIMIT:
            return None
        # a plain attribute, not a buffer: copies of gm share their buffer dict
        setattr(gm, attr, t.detach().clone().contiguous().to(v.device))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # FX warns about get_attr of a non-buffer
        return gm.graph.get_attr(attr)


def _get_attr(gm: fx.GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _evaluate(gm: fx.GraphModule) -> dict[fx.Node, list[torch.Tensor]]:
    """Real values of the nodes the graph's inputs do not decide (one list per node)."""
    from torch._subclasses.fake_tensor import FakeTensor

    known: dict[fx.Node, list[torch.Tensor]] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            t = _get_attr(gm, node.target)
            if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) and not isinstance(t, torch.nn.Parameter) \
                    and _tensors(t) is not None:
                known[node] = [t]
            continue
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in known:
            vals = known[node.args[0]]
            if isinstance(node.args[1], int) and 0 <= node.args[1] < len(vals):
                known[node] = [vals[node.args[1]]]
            continue
        if not _foldable(node):
            continue
        like = op_name(node.target) in _LIKE
        ins = node.all_input_nodes
        if not like and not all(n in known for n in ins):
            continue
        if like and not all(n in known or isinstance(n.meta.get("val"), torch.Tensor) for n in ins):
            continue
        vals = _tensors(node.meta["val"])
        try:
            args, kwargs = fx.node.map_arg(
                (node.args, node.kwargs),
                lambda n: (known[n][0] if len(known[n]) == 1 else tuple(known[n])) if n in known else real_like(n.meta["val"]))
            out = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - torch rejects it here: the graph keeps the op
            continue
        outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else []
        if len(outs) != len(vals) or not all(isinstance(o, torch.Tensor) and o.shape == v.shape and o.dtype == v.dtype
                                             and o.device == v.device for o, v in zip(outs, vals)):
            continue
        known[node] = [o.detach() for o in outs]
    return known


def fold_constants(gm: fx.GraphModule) -> int:
    """Replaces each computed node whose value is known (see the module docstring) and
    that a node of unknown value (or the output) reads by that value. Returns how many
    nodes became constants."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():   # compile time may run under a FakeTensorMode
        return _fold(gm)


def _fold(gm: fx.GraphModule) -> int:
    known = _evaluate(gm)
    # A view of a known value stays a view of it: folded into constants of their own, an output
    # and a view of it came back as two tensors where eager's share memory (`b = ones(3, 4) * 3;
    # return b, b[1:]`: a write through one was not seen through the other), and the base is
    # folded as read by the view. (Only views the graph returns, or views of them: others fold.)
    views: set[fx.Node] = set()
    for n in reversed(list(gm.graph.nodes)):
        if n in known and getattr(n.target, "is_view", False) and n.args and n.args[0] in known and \
                any(u.op == "output" or u in views for u in n.users):
            views.add(n)
    folded = 0
    for node in list(gm.graph.nodes):
        if node not in known or node in views or node.op != "call_function" or not node.all_input_nodes or \
                len(known[node]) != 1:
            continue   # inputs' constants, factories and tuples stay as they are
        if all(u in known and u not in views for u in node.users):
            continue   # only read by nodes folded themselves
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        with gm.graph.inserting_before(node):
            new = constant_node(gm, val, known[node][0], f"_mlircap_const_{node.name}")
            if new is None:
                continue
            if new.op == "get_attr" and any(u.op == "output" for u in node.users):
                # the partitioner places call_functions: a graph output is one
                new.meta = dict(node.meta)
                new = gm.graph.call_function(torch.ops.aten.clone.default, (new,))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        folded += 1
    if folded:
        for node in reversed(list(gm.graph.nodes)):
            if node in known and not node.users and node.op == "call_function":
                gm.graph.erase_node(node)
        gm.graph.lint()
    return folded
