"""uint8 in compiled code: computed as int32, wrapped to 0..255 after every op.

torch-mlir's lowering has no unsigned integers (a `ui8` tensor becomes signless
`i8`, so 200 reads as -56 and divisions, comparisons and conversions go wrong).
A compiled graph therefore never sees uint8: `widen_uint8` rewrites a graph so
that every uint8 value is an int32 holding the same number, and re-wraps each
op's uint8 result with `& 255`.  Integer addition, subtraction, multiplication,
negation, left shifts and conversions are exact modulo 256 in int32 (int32
wraps modulo 2**32, a multiple of 256), so the wrap gives the uint8 result;
comparisons, divisions, right shifts and conversions to float read wrapped
values in 0..255, which are the uint8 values.  Inputs are converted to int32
before the compiled code runs and uint8 outputs back to uint8 after it
(`CompiledGraph.__call__`).

Only the ops in `uint8_computable` are rewritten this way (the partitioner runs
the others through torch): pointwise ops, reductions that are sums, products,
minima or maxima, and ops that only move elements.  Ops whose uint8 kernel
rounds in its own way (interpolation, pooling averages) are not among them.
A view of uint8 bits as another dtype (`view(dtype)`, either way) reads the
held value's int8 byte (int32 -> int8 wraps to it) and converts a uint8 result
back to int32.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .fxutil import leaves, op_name

aten = torch.ops.aten
prims = torch.ops.prims

# Ops that only move, select or compare elements, and reductions that commute
# with wrapping modulo 256 (or pick an element).
_UINT8_OPS = {
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::expand", "aten::permute", "aten::t",
    "aten::transpose", "aten::squeeze", "aten::unsqueeze", "aten::slice", "aten::select", "aten::cat",
    "aten::stack", "aten::clone", "aten::contiguous", "aten::flip", "aten::roll", "aten::repeat",
    "aten::unbind", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::narrow",
    "aten::unsafe_split", "aten::unsafe_split_with_sizes", "aten::unsafe_chunk",
    "aten::alias", "aten::detach", "aten::lift_fresh_copy", "aten::_to_copy", "aten::copy",
    "aten::full", "aten::full_like", "aten::zeros", "aten::zeros_like", "aten::ones", "aten::ones_like",
    "aten::scalar_tensor", "aten::arange", "aten::empty", "aten::empty_like", "aten::empty_strided",
    "aten::new_full", "aten::new_zeros", "aten::new_ones", "aten::new_empty", "aten::new_empty_strided", "aten::fill",
    "aten::sum", "aten::prod", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::argmax",
    "aten::argmin", "aten::cumsum", "aten::cumprod", "aten::sort", "aten::topk", "aten::where",
    "aten::masked_fill", "aten::constant_pad_nd", "aten::diagonal", "aten::tril", "aten::triu",
    "aten::index_select", "aten::gather", "aten::index", "aten::_unsafe_index", "aten::embedding", "aten::take",
    "aten::as_strided", "aten::expand_copy", "aten::permute_copy", "aten::view_copy",
    "prims::convert_element_type", "aten::unfold", "aten::movedim", "aten::pixel_shuffle",
    "aten::pixel_unshuffle", "aten::channel_shuffle", "aten::tile", "aten::diag_embed", "prims::squeeze",
    "aten::slice_scatter", "aten::select_scatter", "aten::empty_permuted",
    "aten::rsub",            # other - alpha * self: exact modulo 256 like sub (not tagged pointwise)
    "aten::logsumexp",       # of the values 0..255 converted to float
    "aten::count_nonzero",   # (wrapped values 0..255 are the uint8 values; all/any of uint8:
                             # torch-mlir cannot lower all, its any crashed: SIGSEGV)
    "aten::zero", "aten::rot90", "aten::as_strided_copy",
    # copies of views: they only move elements like the views
    "aten::diagonal_copy", "aten::select_copy", "aten::slice_copy", "aten::transpose_copy", "aten::t_copy",
    "aten::unsqueeze_copy", "aten::squeeze_copy", "aten::unfold_copy", "aten::alias_copy", "aten::detach_copy",
    "aten::narrow_copy", "aten::unbind_copy", "aten::split_copy", "aten::split_with_sizes_copy", "prims::view_of",
    "aten::floor_divide",    # of values 0..255 (not tagged pointwise, unlike div/remainder)
    # matrix products: sums of products, exact modulo 256 in int32 like add and mul
    "aten::mm", "aten::bmm", "aten::matmul", "aten::mv", "aten::dot", "aten::vdot", "aten::addmm",
    "aten::addmv", "aten::baddbmm", "aten::addbmm", "aten::_trilinear",   # (bilinear's)
    "aten::addr",            # beta * input + alpha * outer product (it ran through torch)
    "aten::linalg_cross", "aten::cross",   # differences of products (OpInfo linalg.cross uint8 ran through torch)
    "aten::eye", "aten::_chunk_cat",   # a factory of 0s and 1s; chunks moved into one tensor
    # pads that copy edge or mirrored elements (ran through torch: torch-mlir lowers their int8)
    "aten::reflection_pad1d", "aten::reflection_pad2d", "aten::reflection_pad3d",
    "aten::replication_pad1d", "aten::replication_pad2d", "aten::replication_pad3d",
    # nansum of integers is sum; an accumulating masked index_put adds, exact modulo 256
    # like add (they ran through torch)
    "aten::nansum", "aten::_unsafe_masked_index_put_accumulate",
    "aten::_unsafe_masked_index",   # a gather with a fill where masked (ran through torch)
    "aten::bucketize",       # compares the values 0..255 with the boundaries (ran through torch)
    "aten::trace",           # the diagonal's sum in int64, as sum (OpInfo trace uint8 ran through torch)
    "aten::block_diag",      # the blocks moved into a tensor of zeros (OpInfo block_diag uint8 ran through torch)
}
# Pointwise ops whose integer semantics differ from uint8's beyond wrapping.
_UINT8_POINTWISE_EXCLUDED = {"aten::lerp", "aten::view_as_real", "aten::view_as_complex"}


def uint8_computable(node: fx.Node) -> bool:
    """Whether `node`, with uint8 operands or results, gives uint8's results
    when computed in int32 and wrapped (see the module docstring)."""
    if node.op != "call_function":
        return True
    if node.target is operator.getitem:
        return True
    name = op_name(node.target)
    if name in _UINT8_POINTWISE_EXCLUDED:
        return False
    if name == "aten::view" and "dtype" in str(getattr(node.target, "_overloadname", "")):
        return True   # view(dtype): a bitcast of the wrapped value's int8 (widen_uint8)
    return name in _UINT8_OPS or torch.Tag.pointwise in getattr(node.target, "tags", ())


def _is_uint8(val) -> bool:
    return isinstance(val, torch.Tensor) and val.dtype == torch.uint8


def _replace_dtype(x):
    if x is torch.uint8:
        return torch.int32
    if isinstance(x, (list, tuple)):
        return type(x)(_replace_dtype(v) for v in x)
    return x


def widen_uint8(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[bool], list[bool]] | None:
    """(a copy of gm computing uint8 as int32, which inputs to convert to int32,
    which outputs to convert back to uint8), or None when gm has no uint8."""
    nodes = list(gm.graph.nodes)
    if not any(_is_uint8(v) for n in nodes for v in leaves(n.meta.get("val"), torch.Tensor)):
        return None
    if any(n.op == "get_attr" and "." in n.target and _is_uint8(n.meta.get("val")) for n in nodes):
        return None   # a uint8 constant inside a submodule (shared with gm): not widened
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    orig: dict[fx.Node, object] = {}   # new node -> the original node's val
    inputs: list[bool] = []
    for n in nodes:
        if n.op == "output":
            continue
        if n.op == "call_function" and n.target is aten.view.dtype and _u8_view(n):
            env[n] = m = _u8_view_widened(new, n, env)
            orig[m] = n.meta.get("val")
            continue
        m = new.node_copy(n, lambda a: env[a])
        if n.op == "call_function":
            m.args = _replace_dtype(m.args)
            m.kwargs = {k: _replace_dtype(v) for k, v in m.kwargs.items()}
        m.meta = {k: v for k, v in n.meta.items() if k not in ("val", "tensor_meta", "example_value")}
        env[n] = m
        orig[m] = n.meta.get("val")
        if n.op == "placeholder":
            inputs.append(_is_uint8(n.meta.get("val")))
    _wrap_wider_operands(new, orig)
    out = gm.graph.output_node()
    new.output(fx.map_arg(out.args[0], lambda a: env[a]))
    outs = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    outputs = [isinstance(o, fx.Node) and _is_uint8(o.meta.get("val")) for o in outs]

    # the results of uint8 ops, wrapped; results whose dtype the widening changed
    # by type promotion (uint8 with int8 is int16; int32 with int8 is int32) converted back
    wgm = _module(gm, new)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = []
    for n, is8 in zip([n for n in nodes if n.op == "placeholder"], inputs):
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            with mode:
                v = torch.empty_strided(v.shape, v.stride(), dtype=torch.int32 if is8 else v.dtype,
                                        device=v.device)
        fakes.append(v)
    FakeTensorProp(wgm, mode).propagate(*fakes)
    for m in list(new.nodes):
        if m.op != "call_function":
            continue
        want, got = orig.get(m), m.meta.get("val")
        if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
            continue
        fix = None
        if want.dtype == torch.uint8:
            if got.dtype != torch.int32:
                return None   # an op that keeps its input dtype no more: leave the graph alone
            with new.inserting_after(m):
                fix = new.call_function(aten.bitwise_and.Scalar, (m, 255))
        elif got.dtype != want.dtype:
            with new.inserting_after(m):
                fix = new.call_function(prims.convert_element_type.default, (m, want.dtype))
        if fix is not None:
            m.replace_all_uses_with(fix, delete_user_cb=lambda u, fix=fix: u is not fix)
    new.lint()
    wgm = _module(gm, new)
    FakeTensorProp(wgm, mode).propagate(*fakes)
    return wgm, inputs, outputs


def _u8_view(n: fx.Node) -> bool:
    """`n` (an aten.view.dtype) reads or makes uint8."""
    return n.args[1] is torch.uint8 or (isinstance(n.args[0], fx.Node) and _is_uint8(n.args[0].meta.get("val")))


def _u8_view_widened(graph: fx.Graph, n: fx.Node, env: dict) -> fx.Node:
    """x.view(dtype) of or to uint8 in the widened graph: the same bits as int8 (a uint8
    value held in int32 converted to int8 wraps to the byte it holds), viewed, and a uint8
    result converted back to int32 (widen_uint8 then wraps it with & 255)."""
    x = env[n.args[0]]
    if _is_uint8(n.args[0].meta.get("val")):
        x = graph.call_function(prims.convert_element_type.default, (x, torch.int8))
    if n.args[1] is torch.uint8:
        v = graph.call_function(aten.view.dtype, (x, torch.int8))
        return graph.call_function(prims.convert_element_type.default, (v, torch.int32))
    return graph.call_function(aten.view.dtype, (x, n.args[1]))


def _wrap_wider_operands(graph: fx.Graph, orig: dict) -> None:
    """A pointwise op with a uint8 result reads its other integer tensors (0-d ones, which
    do not take part in type promotion: torch.maximum(u8, torch.tensor(300))) as uint8,
    as eager converts them: wrapped to 0..255 (300 is 44). Computed in int32 they kept
    their value (the maximum was 300, wrapped to 44 for every element)."""
    for m in list(graph.nodes):
        want = orig.get(m)
        if m.op != "call_function" or not _is_uint8(want) or \
                torch.Tag.pointwise not in getattr(m.target, "tags", ()):
            continue
        for a in m.all_input_nodes:
            v = orig.get(a)
            if isinstance(v, torch.Tensor) and v.dtype not in (torch.uint8, torch.bool) and \
                    not v.dtype.is_floating_point and not v.dtype.is_complex:
                with graph.inserting_before(m):
                    i32 = graph.call_function(prims.convert_element_type.default, (a, torch.int32))
                    wrapped = graph.call_function(aten.bitwise_and.Scalar, (i32, 255))
                m.replace_input_with(a, wrapped)


def _module(gm: fx.GraphModule, graph: fx.Graph) -> fx.GraphModule:
    """A module of `graph` whose uint8 tensor constants (get_attr) hold int32."""
    wgm = fx.GraphModule(gm, graph)
    for n in graph.nodes:
        if n.op == "get_attr":
            v = getattr(wgm, n.target, None) if "." not in n.target else None
            if _is_uint8(v):   # (a top-level attribute: set on this module only, not on gm's)
                setattr(wgm, n.target, v.to(torch.int32))
    return wgm

