"""Long reductions over few rows, computed in two levels (CUDA).

A reduction kernel runs one thread block per row. GroupNorm's statistics
reduce N*G rows of C/G*H*W elements: 32 rows of 262,144 in the UNet of
bench/gpu.py (bf16, 8x64x128x128, 4 groups), so 32 blocks on an H200's 132
SMs, at about 134 GB/s: 0.125 ms per statistic, and four of them took 0.5 ms of
the UNet's 2.1 ms of kernels (H200, 2026-12-02).

``split_reductions`` rewrites, in the aten graph after aot_autograd, each
``var_mean``/``var``/``mean``/``sum`` over the trailing dims of a float tensor
with fewer than ``_MAX_ROWS`` rows of at least ``_MIN_ROW`` elements: the
rows are viewed as [R, S, N/S], summed over the last dim (R*S blocks) and then
over the S partial sums. It is the same math in another summation order
(two-level, as pairwise summation), accumulated in float32 for bfloat16 and
float16 inputs (as eager's CUDA kernels do) and rounded once at the end.
The variance is the mean of squared deviations from the mean, as in the
single-level decomposition. MLIRCAP_SPLIT_REDUCTIONS=0 turns this off; force
applies it on any device (tests).

``channel_stats`` rewrites GroupNorm's statistics before that (CUDA, channels-last
convolutions on; MLIRCAP_GPU_GROUP_STATS=0 turns it off): a reduction over the trailing dims of ``x.view(N, G, ...)``,
``x`` an [N, C, H, W] tensor, whose reduced dims are each group's (C/G)*H*W
elements, becomes sums over W, then H (per channel), then over the group's
channels: ``x.sum(3).sum(2)`` is read along x's own dims, so
mlircap-conv-channels-last can keep the convolution that writes x in NHWC (its
readers then reduce columns of contiguous channels) where the view's groups
would have made it stay NCHW, between cuDNN's transposes in and out.
"""
from __future__ import annotations

import contextlib
import math
import operator

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode

from . import config, logs
from .target import device_type

aten = torch.ops.aten
_MIN_ROW = 1 << 14        # elements per row from which a row is split (8 rows of 62,720:
                          # poolformer's third-stage GroupNorm, 50 us in 8 blocks, H200)
_MAX_ROWS = 256           # rows below which one block per row leaves SMs idle
_BLOCKS = 1024            # blocks to aim for (R * S)
_MIN_SLICE = 2048         # elements per slice at least
_OPS = {aten.var_mean.correction, aten.var.correction, aten.mean.dim, aten.sum.dim_IntList,
        aten.mean.default, aten.sum.default}
_ALL_DIMS = {aten.mean.default, aten.sum.default}
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _mode() -> str:
    return (config.env("MLIRCAP_SPLIT_REDUCTIONS") or "1").strip().lower()


def _splits(rows: int, n: int) -> int:
    """S for R rows of n elements: a power of two with R*S near _BLOCKS, n % S == 0
    and slices of at least _MIN_SLICE elements; 1 when no split pays."""
    s = 1 << max(0, math.ceil(math.log2(max(1, _BLOCKS // rows))))
    while s > 1 and (n % s or n // s < _MIN_SLICE):
        s //= 2
    return s


def _keepdim(n: fx.Node) -> bool:
    # var(_mean).correction(x, dim, *, correction, keepdim); mean.dim / sum.dim_IntList(x, dim, keepdim)
    return n.kwargs.get("keepdim", n.args[2] if len(n.args) > 2 and n.target in (aten.mean.dim,
                                                                                  aten.sum.dim_IntList) else False)


def _plan(n: fx.Node) -> tuple[int, int, int, tuple[int, ...]] | None:
    """(R, N, S, output shape) when node `n` is a reduction to split, else None."""
    if n.op != "call_function" or n.target not in _OPS or not n.args:
        return None
    x = n.args[0].meta.get("val") if isinstance(n.args[0], fx.Node) else None
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOATS or x.dim() == 0:
        return None
    dims = None if n.target in _ALL_DIMS else n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
    if n.kwargs.get("dtype") is not None:
        return None
    if not isinstance(dims, int) and dims is not None and len(dims) == 0:
        if n.target not in (aten.sum.dim_IntList, aten.mean.dim):
            return None
        dims = None                 # sum's and mean's dim=[]: every dim
    if dims is None:
        dims = range(x.dim())
    dims = sorted({d % x.dim() for d in ([dims] if isinstance(dims, int) else dims)})
    k = x.dim() - len(dims)
    if not dims or dims != list(range(k, x.dim())):
        return None   # trailing dims only: the rows are [R, N] of the input
    keepdim = _keepdim(n)
    rows, size = math.prod(x.shape[:k]), math.prod(x.shape[k:])
    if rows >= _MAX_ROWS or size < _MIN_ROW:
        return None
    s = _splits(rows, size)
    if s < 2:
        return None
    out = tuple(x.shape[:k]) + ((1,) * len(dims) if keepdim else ())
    return rows, size, s, out


def _replacement(target, rows: int, size: int, s: int, out: tuple[int, ...], correction):
    def fn(x):
        acc = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
        xr = x.reshape(rows, s, size // s).to(acc)
        total = xr.sum(-1).sum(-1)
        if target in (aten.sum.dim_IntList, aten.sum.default):
            return total.to(x.dtype).reshape(out)
        mean = total / size
        if target in (aten.mean.dim, aten.mean.default):
            return mean.to(x.dtype).reshape(out)
        d = xr - mean.reshape(rows, 1, 1)
        var = (d * d).sum(-1).sum(-1) / (size - correction)
        var = var.to(x.dtype).reshape(out)
        if target is aten.var.correction:
            return var
        return var, mean.to(x.dtype).reshape(out)
    return fn


def _group_plan(n: fx.Node) -> tuple[int, int, int, int, tuple[int, ...]] | None:
    """(N, C, G, H*W, output shape) when `n` reduces each group of ``x.view(N, G, ...)``
    (x: [N, C, H, W], float, the reduced dims exactly the group's C/G*H*W elements)."""
    if n.op != "call_function" or n.target not in _OPS - _ALL_DIMS or len(n.args) < 2 or n.kwargs.get("dtype"):
        return None
    v = n.args[0]
    if not isinstance(v, fx.Node) or v.op != "call_function" or v.target not in (
            aten.view.default, aten.reshape.default, aten._unsafe_view.default):
        return None
    x, y = v.args[0].meta.get("val") if isinstance(v.args[0], fx.Node) else None, v.meta.get("val")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.dim() != 4 or \
            x.dtype not in _FLOATS or y.dim() < 3:
        return None
    dims = n.args[1]
    dims = sorted({d % y.dim() for d in ([dims] if isinstance(dims, int) else dims)})
    big, c, g = x.shape[0], x.shape[1], y.shape[1]
    if dims != list(range(2, y.dim())) or y.shape[0] != big or g < 1 or c % g or \
            math.prod(y.shape[2:]) != (c // g) * x.shape[2] * x.shape[3]:
        return None
    keepdim = _keepdim(n)
    return big, c, g, x.shape[2] * x.shape[3], tuple(y.shape[:2]) + ((1,) * len(dims) if keepdim else ())


def _group_replacement(target, big: int, c: int, g: int, hw: int, out: tuple[int, ...], correction):
    """The group statistics from per-channel ones: sums over W then H (each a
    reduction along x's dims), the group's mean from its channels' sums, and its
    sum of squared deviations merged from the channels' (Chan et al.'s parallel
    variance: M2_g = sum_c M2_c + hw * (mean_c - mean_g)^2, exact, and no
    cancellation of large sums as E[x^2] - E[x]^2 would have)."""
    def fn(x):
        acc = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
        xf = x.to(acc)
        size = (c // g) * hw
        per_channel = xf.sum(3).sum(2)
        total = per_channel.reshape(big, g, c // g).sum(-1)
        if target is aten.sum.dim_IntList:
            return total.to(x.dtype).reshape(out)
        mean = total / size
        if target is aten.mean.dim:
            return mean.to(x.dtype).reshape(out)
        mean_c = per_channel / hw
        d = xf - mean_c.reshape(big, c, 1, 1)
        m2_c = d.square().sum(3).sum(2)
        spread = mean_c.reshape(big, g, c // g) - mean.reshape(big, g, 1)
        m2 = (m2_c.reshape(big, g, c // g) + hw * (spread * spread)).sum(-1)
        var = (m2 / (size - correction)).to(x.dtype).reshape(out)
        if target is aten.var.correction:
            return var
        return var, mean.to(x.dtype).reshape(out)
    return fn


def _correction(n: fx.Node) -> int:
    correction = n.kwargs.get("correction", 1 if n.target in (aten.var_mean.correction,
                                                               aten.var.correction) else 0)
    return 1 if correction is None else correction


def _replace(gm: fx.GraphModule, n: fx.Node, x: fx.Node, fn) -> None:
    traced = _trace(fn, [x.meta["val"]])
    results = _inline(gm, traced, n, x)
    if n.target is aten.var_mean.correction:
        for u in list(n.users):
            u.replace_all_uses_with(results[u.args[1]])
            gm.graph.erase_node(u)
    else:
        n.replace_all_uses_with(results[0])
    gm.graph.erase_node(n)


def _trace(fn, vals: list):
    from .attention import _trace as trace

    return trace(fn, vals)


_ELEMENTWISE = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor}
_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


def _ungroup(gm: fx.GraphModule, view: fx.Node, x: fx.Node, skip: frozenset = frozenset(),
             dry: bool = False) -> bool:
    """Rewrites elementwise ops on the grouped view `view` of x ([N, C, H, W]) that
    come back to x's shape through a view (GroupNorm normalizing each group:
    ``((x.view(N, G, -1) - mean) * rstd).view(N, C, H, W)``) as the same ops on x with
    their per-group operands ([N or 1, G, 1, ...]) broadcast per channel, so x is only
    read along its own dims. False (graph unchanged) when the ops are anything else.
    Users of the view in `skip` are left out; `dry` only answers whether it would."""
    xs, vs = tuple(x.meta["val"].shape), tuple(view.meta["val"].shape)
    big, c, g = xs[0], xs[1], vs[1]

    def per_group(a) -> bool:
        t = a.meta.get("val") if isinstance(a, fx.Node) else None
        return isinstance(t, torch.Tensor) and t.dim() == len(vs) and t.shape[0] in (1, big) and \
            t.shape[1] in (1, g) and all(d == 1 for d in t.shape[2:])

    inside, order, ends = {view}, [], []
    todo = [view]
    while todo:
        for u in todo.pop().users:
            if u in inside or u in ends or u in skip:
                continue
            if u.op == "call_function" and u.target in _VIEWS and tuple(u.meta["val"].shape) == xs:
                ends.append(u)
            elif u.op == "call_function" and u.target in _ELEMENTWISE and not u.kwargs and \
                    tuple(u.meta["val"].shape) == vs and all(
                        (isinstance(a, fx.Node) and (a in inside or per_group(a))) or isinstance(a, (int, float))
                        for a in u.args):
                inside.add(u)
                order.append(u)
                todo.append(u)
            else:
                return False
    if not ends or any(e.args[0] is view for e in ends):
        return False
    if dry:
        return True
    nodes = {n: i for i, n in enumerate(gm.graph.nodes)}
    order.sort(key=nodes.__getitem__)
    graph = gm.graph
    mode = detect_fake_mode([x.meta["val"]])

    def call(target, args, at):
        with graph.inserting_before(at):
            node = graph.call_function(target, args)
        vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
        with mode or contextlib.nullcontext():
            node.meta["val"] = target(*vals)
        node.meta["stack_trace"] = at.meta.get("stack_trace")
        return node

    new: dict[fx.Node, fx.Node] = {view: x}
    for u in order:
        args = []
        for a in u.args:
            if isinstance(a, fx.Node) and a in new:
                args.append(new[a])
            elif isinstance(a, fx.Node):
                n0, g0 = a.meta["val"].shape[:2]
                r = call(aten.view.default, (a, [n0, g0, 1]), u)
                r = call(aten.expand.default, (r, [n0, g, c // g]), u)
                r = call(aten.clone.default, (r,), u)
                args.append(call(aten.view.default, (r, [n0, c, 1, 1]), u))
            else:
                args.append(a)
        new[u] = call(u.target, tuple(args), u)
    for e in ends:
        e.replace_all_uses_with(new[e.args[0]])
        graph.erase_node(e)
    for u in reversed(order):
        if not u.users:
            graph.erase_node(u)
    return True


def _from_convolution(x: fx.Node, depth: int = 4) -> bool:
    """Whether `x` is a convolution's result, directly or through a dtype conversion
    or elementwise ops of one tensor operand (a bias, an activation)."""
    while depth >= 0 and isinstance(x, fx.Node) and x.op == "call_function":
        if x.target is aten.convolution.default:
            return True
        tensors = [a for a in x.args if isinstance(a, fx.Node)]
        if x.target not in _ELEMENTWISE and x.target is not torch.ops.prims.convert_element_type.default \
                and x.target is not aten._to_copy.default:
            return False
        big = [a for a in tensors if a.meta.get("val") is not None and
               a.meta["val"].shape == x.meta["val"].shape]
        if len(big) != 1:
            return False
        x, depth = big[0], depth - 1
    return False


def channel_stats(gm: fx.GraphModule) -> int:
    """Rewrites GroupNorm-style statistics of `gm` as per-channel spatial sums (see the
    module docstring), and the normalization of the groups per channel (_ungroup), on
    CUDA with channels-last convolutions unless MLIRCAP_GPU_GROUP_STATS=0 (any
    device with force). Returns how many; the caller recompiles `gm`."""
    mode = (config.env("MLIRCAP_GPU_GROUP_STATS") or "1").strip().lower()
    if mode not in ("1", "force") or config.env("MLIRCAP_GPU_CHANNELS_LAST") == "0":
        return 0
    done = 0
    for n in list(gm.graph.nodes):
        found = _group_plan(n)
        if found is None:
            continue
        x = n.args[0].args[0]
        if mode != "force" and device_type(x.meta["val"]) != "cuda":
            continue
        if n.target is aten.var_mean.correction and any(u.target is not operator.getitem for u in n.users):
            continue
        view = n.args[0]
        # Only where it lets the convolution writing x run NHWC: x read along its own
        # dims only, the group normalization on the view included (on CUDA torch
        # normalizes the grouped view); elsewhere it only adds kernels.
        if not _from_convolution(x) or (len(view.users) > 1 and not _ungroup(gm, view, x, frozenset({n}), True)):
            continue
        _replace(gm, n, x, _group_replacement(n.target, *found, _correction(n)))
        if view.users:
            _ungroup(gm, view, x)
        if not view.users:
            gm.graph.erase_node(view)
        done += 1
    if done:
        logs.log("passes", f"channel_stats: {done} group statistic(s) as per-channel spatial sums")
    return done


def split_reductions(gm: fx.GraphModule) -> int:
    """Splits `gm`'s long reductions over few rows (see the module docstring) when
    they run on CUDA (any device with MLIRCAP_SPLIT_REDUCTIONS=force). Returns how
    many; the caller recompiles `gm`."""
    mode = _mode()
    if mode in ("0", "false", "off"):
        return 0
    done = 0
    for n in list(gm.graph.nodes):
        found = _plan(n)
        if found is None:
            continue
        x = n.args[0]
        if mode != "force" and device_type(x.meta["val"]) != "cuda":
            continue
        if n.target is aten.var_mean.correction and any(u.target is not operator.getitem for u in n.users):
            continue
        _replace(gm, n, x, _replacement(n.target, *found, _correction(n)))
        done += 1
    if done:
        logs.log("passes", f"split_reductions: {done} long reduction(s) over few rows in two levels")
    return done


def _inline(gm: fx.GraphModule, traced: fx.GraphModule, at: fx.Node, x: fx.Node) -> list[fx.Node]:
    """Copies `traced` (one placeholder, bound to `x`) into gm before `at`; its outputs."""
    env: dict[fx.Node, fx.Node] = {}
    outs: list[fx.Node] = []
    stack = at.meta.get("stack_trace")
    with gm.graph.inserting_before(at):
        for t in traced.graph.nodes:
            if t.op == "placeholder":
                env[t] = x
            elif t.op == "output":
                res = t.args[0]
                outs = [env[r] for r in (res if isinstance(res, (tuple, list)) else [res])]
            else:
                new = gm.graph.node_copy(t, lambda a: env[a])
                if stack is not None:
                    new.meta.setdefault("stack_trace", stack)
                env[t] = new
    return outs
