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
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from . import config, logs

aten = torch.ops.aten
_MIN_ROW = 1 << 16        # elements per row from which a row is split
_MAX_ROWS = 256           # rows below which one block per row leaves SMs idle
_BLOCKS = 1024            # blocks to aim for (R * S)
_MIN_SLICE = 4096         # elements per slice at least
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
    # var(_mean).correction(x, dim, *, correction, keepdim); mean.dim / sum.dim_IntList(x, dim, keepdim)
    keepdim = n.kwargs.get("keepdim", n.args[2] if len(n.args) > 2 and n.target in (aten.mean.dim,
                                                                                     aten.sum.dim_IntList) else False)
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
        d = xr - mean[:, None, None]
        var = (d * d).sum(-1).sum(-1) / (size - correction)
        var = var.to(x.dtype).reshape(out)
        if target is aten.var.correction:
            return var
        return var, mean.to(x.dtype).reshape(out)
    return fn


def split_reductions(gm: fx.GraphModule) -> int:
    """Splits `gm`'s long reductions over few rows (see the module docstring) when
    they run on CUDA (any device with MLIRCAP_SPLIT_REDUCTIONS=force). Returns how
    many; the caller recompiles `gm`."""
    from .attention import _trace

    mode = _mode()
    if mode in ("0", "false", "off"):
        return 0
    done = 0
    for n in list(gm.graph.nodes):
        found = _plan(n)
        if found is None:
            continue
        x = n.args[0]
        if mode != "force" and x.meta["val"].device.type != "cuda":
            continue
        if n.target is aten.var_mean.correction and any(u.target is not operator.getitem for u in n.users):
            continue
        correction = n.kwargs.get("correction", 1 if n.target in (aten.var_mean.correction,
                                                                   aten.var.correction) else 0)
        if correction is None:
            correction = 1
        traced = _trace(_replacement(n.target, *found, correction), [x.meta["val"]])
        results = _inline(gm, traced, n, x)
        if n.target is aten.var_mean.correction:
            for u in list(n.users):
                u.replace_all_uses_with(results[u.args[1]])
                gm.graph.erase_node(u)
        else:
            n.replace_all_uses_with(results[0])
        gm.graph.erase_node(n)
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
