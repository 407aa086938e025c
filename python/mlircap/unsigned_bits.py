"""uint16 / uint32 / uint64 in compiled code: held as the signed integer of the same width.

torch-mlir has no unsigned integers, and eager itself computes almost nothing in these
dtypes: they appear as bit patterns (`x.view(torch.uint64)`, `torch.hash_tensor`'s result).
A graph whose unsigned values are only made by a bit view (`view(dtype)` of a same-width
dtype) and moved (views, copies, concatenations: `MOVES_BITS`) compiles with each such
value held in the signed dtype of its width, the same bits (`hold_signed`): a view to the
unsigned dtype becomes the value itself (or a view to the signed dtype), a view of it to
another dtype reads the held bits. Unsigned inputs are viewed as signed before the compiled
code runs and unsigned outputs viewed back after it (`CompiledGraph.__call__`): views, no
copy, the bits unchanged. Every other op on these dtypes (arithmetic, comparisons,
conversions of the value) runs through torch (partition.py: 'dtype uint64').

`hash_tensor` (mode 0, the only one eager has: the xor of the elements' bits, each upcast
to float64 or int64 first) decomposes to that upcast, a bit view as int64, an xor
reduction (halving folds) and a bit view as uint64. It ran through torch ('aten.hash_tensor
(dtype uint64)': OpInfo hash_tensor in every dtype).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .fxutil import leaves, op_name

aten = torch.ops.aten

SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}

# Ops that only move elements (no dtype argument, no arithmetic): on an unsigned value
# held as signed they move the same bits.
MOVES_BITS = {f"aten::{n}" for n in (
    "view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "squeeze", "unsqueeze",
    "slice", "select", "narrow", "unbind", "split", "split_with_sizes", "chunk", "cat", "stack", "flip",
    "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "view_copy", "permute_copy",
    "expand_copy", "squeeze_copy", "unsqueeze_copy", "slice_copy", "select_copy", "transpose_copy",
    "t_copy", "alias_copy", "detach_copy", "unbind_copy", "split_copy", "split_with_sizes_copy",
    "diagonal", "diagonal_copy", "movedim")} | {"prims::view_of", "prims::squeeze"}


def _unsigned(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dtype in SIGNED


def _bit_view(node: fx.Node) -> bool:
    """`node` is a view(dtype) between an unsigned dtype and another of its width."""
    if node.target is not aten.view.dtype or not isinstance(node.args[0], fx.Node):
        return False
    src, dst = node.args[0].meta.get("val"), node.args[1]
    return isinstance(src, torch.Tensor) and isinstance(dst, torch.dtype) and not src.is_complex() and \
        not dst.is_complex and src.element_size() == torch.empty((), dtype=dst).element_size() and \
        (src.dtype in SIGNED or dst in SIGNED) and src.dtype != torch.bool and dst != torch.bool


# Factories whose unsigned result has the same bits in the signed dtype: zeros (a fill of
# 0, or no element: an empty result, constfold's full), and uninitialized memory.
_FACTORIES = {"aten::full": 1, "aten::zeros": None, "aten::empty": None, "aten::empty_strided": None}


def _zero_factory(node: fx.Node) -> bool:
    name = op_name(node.target) if isinstance(node.target, torch._ops.OpOverload) else None
    if name not in _FACTORIES or node.kwargs.get("dtype") not in SIGNED:
        return False
    v, pos = node.meta.get("val"), _FACTORIES[name]
    fill = node.args[pos] if pos is not None and pos < len(node.args) else 0
    return isinstance(v, torch.Tensor) and (v.numel() == 0 or (type(fill) in (int, bool) and fill == 0))


def moves_bits(node: fx.Node) -> bool:
    """Whether `node`, with unsigned wide operands or results, compiles with them held as
    signed (see the module docstring)."""
    if node.op != "call_function":
        return True
    if _bit_view(node) or _zero_factory(node):
        return True
    if isinstance(node.target, torch._ops.OpOverload) and op_name(node.target) in MOVES_BITS:
        return not any(isinstance(a, torch.dtype) for a in leaves((node.args, tuple(node.kwargs.values())),
                                                                 torch.dtype))
    return node.target.__name__ == "getitem" if callable(node.target) else False


def hold_signed(gm: fx.GraphModule) -> tuple[fx.GraphModule, list, list] | None:
    """(a copy of gm holding each unsigned wide value as the signed dtype of its width, the
    signed dtype each input is viewed as (None: as it is), the unsigned dtype each output is
    viewed back as (None: as it is)), or None when gm has no such value or an op other than
    moves_bits touches one."""
    nodes = list(gm.graph.nodes)
    if not any(_unsigned(v) for n in nodes for v in leaves(n.meta.get("val"), torch.Tensor)):
        return None
    if any(n.op == "get_attr" and any(_unsigned(v) for v in leaves(getattr(gm, n.target, None), torch.Tensor))
           for n in nodes if "." not in str(n.target)) or any(
            n.op == "get_attr" and "." in str(n.target) for n in nodes):
        return None   # unsigned constants: not rewritten (none known)
    if not all(moves_bits(n) for n in nodes
               if any(_unsigned(v) for v in leaves((n.meta.get("val"), [a.meta.get("val") for a in n.all_input_nodes]),
                                                   torch.Tensor))):
        return None
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    inputs, fakes = [], []
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    for n in nodes:
        if n.op == "output":
            continue
        if n.op == "call_function" and _bit_view(n):
            src, dst = env[n.args[0]], SIGNED.get(n.args[1], n.args[1])
            held = n.args[0].meta["val"].dtype
            env[n] = src if SIGNED.get(held, held) == dst else new.call_function(aten.view.dtype, (src, dst))
            continue
        m = new.node_copy(n, lambda a: env[a])
        m.meta = {k: v for k, v in n.meta.items() if k not in ("val", "tensor_meta", "example_value")}
        if n.op == "call_function" and _zero_factory(n):
            m.kwargs = {**m.kwargs, "dtype": SIGNED[n.kwargs["dtype"]]}
        env[n] = m
        if n.op == "placeholder":
            v = n.meta.get("val")
            inputs.append(SIGNED[v.dtype] if _unsigned(v) else None)
            if isinstance(v, torch.Tensor):
                with mode:
                    v = torch.empty_strided(v.shape, v.stride(), dtype=SIGNED.get(v.dtype, v.dtype), device=v.device)
            fakes.append(v)
    out = gm.graph.output_node()
    new.output(fx.map_arg(out.args[0], lambda a: env[a]))
    outs = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    outputs = [o.meta["val"].dtype if isinstance(o, fx.Node) and _unsigned(o.meta.get("val")) else None
               for o in outs]
    new.eliminate_dead_code()
    new.lint()
    held = fx.GraphModule(gm, new)
    FakeTensorProp(held, mode).propagate(*fakes)
    return held, inputs, outputs


def view_inputs(args, dtypes: list) -> list:
    """Unsigned inputs viewed as the signed dtype the compiled code holds them in."""
    return [a.view(d) if d is not None else a for a, d in zip(args, dtypes)]


def view_outputs(res, dtypes: list):
    """Outputs held as signed viewed back as their unsigned dtype."""
    single = not isinstance(res, (list, tuple))
    res = [r.view(d) if d is not None else r for r, d in zip([res] if single else res, dtypes)]
    return res[0] if single else res


# ------------------------------------------------------------------------------ hash_tensor

def _xor_fold(bits: torch.Tensor) -> torch.Tensor:
    """The xor of the last dim's elements (at least one), keeping it as size 1: halves
    xor-ed together (an odd one out joins the first half's first element)."""
    while bits.shape[-1] > 1:
        n = bits.shape[-1]
        h = n // 2
        folded = torch.bitwise_xor(bits[..., :h], bits[..., h:2 * h])
        if n % 2:
            folded = torch.cat([torch.bitwise_xor(folded[..., :1], bits[..., 2 * h:]), folded[..., 1:]], -1)
        bits = folded
    return bits


def hash_tensor(x, dim=(), keepdim=False, mode=0):
    """aten.hash_tensor; NotImplemented (the op stays whole) for what it does not handle."""
    if not isinstance(x, torch.Tensor) or mode != 0 or x.is_complex() or x.layout != torch.strided:
        return NotImplemented
    dims = [dim] if isinstance(dim, int) else list(dim or ())
    nd = x.dim()
    if nd == 0:
        if any(d not in (0, -1) for d in dims):
            return NotImplemented   # eager raises
        dims = []
    else:
        if any(not -nd <= d < nd for d in dims):
            return NotImplemented
        dims = sorted({d % nd for d in dims}) if dims else list(range(nd))
    if x.is_floating_point():
        bits = x.to(torch.float64).view(torch.int64)
    else:
        bits = x.to(torch.int64)   # sign-extended (bool and uint8: 0..255)
    kept = [d for d in range(nd) if d not in dims]
    out_shape = [1 if d in dims else x.shape[d] for d in range(nd)] if keepdim else [x.shape[d] for d in kept]
    n = 1
    for d in dims:
        n *= x.shape[d]
    if n == 0:
        return NotImplemented   # eager raises: a reduced dim of size 0
    flat = bits.permute(kept + dims).reshape([x.shape[d] for d in kept] + [n])
    # one element per hash: its bits, a new tensor as eager's (no view of x)
    res = (_xor_fold(flat) if n > 1 else flat.clone()).reshape(out_shape)
    return res.view(torch.uint64)
