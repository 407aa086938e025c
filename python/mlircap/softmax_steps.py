"""softmax over the last dim of a CPU tensor in the steps of eager's kernel.

ATen's ``_vec_softmax_lastdim`` computes ``e = exp(x - max)`` per row, then ``e``
times the reciprocal of its sum; bfloat16/float16 rows in float32, rounded once.
torch-mlir's lowering of ``aten._softmax`` divides every element by the sum
instead: a vector division per element, about 30% of a 256x1024 float32 softmax's
time on one thread (0.97x eager; 1.04x with the product), and results one unit
away from eager's where the two roundings differ.

``softmax_like_eager`` rewrites each such ``aten._softmax`` node of an aten graph
into those steps. It runs after attention.fuse_attention, which matches the
``_softmax`` node of hand-written attention. Other dims (eager divides there),
other devices, 0-d, empty and half_to_float softmaxes are left as they are.
"""
from __future__ import annotations

import torch
from torch import fx

from . import logs
from .target import device_type

aten = torch.ops.aten


def _last_dim_softmax(x: torch.Tensor) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    e = torch.exp(xf - torch.amax(xf, -1, keepdim=True))
    return (e * torch.reciprocal(e.sum(-1, keepdim=True))).to(x.dtype)


def _rewritable(n: fx.Node) -> bool:
    if n.op != "call_function" or n.target is not aten._softmax.default or len(n.args) != 3:
        return False
    x, dim, half_to_float = n.args
    v = x.meta.get("val") if isinstance(x, fx.Node) else None
    return (isinstance(v, torch.Tensor) and device_type(v) == "cpu" and v.is_floating_point()
            and v.dim() > 0 and v.numel() > 0 and not half_to_float and isinstance(dim, int)
            and dim % v.dim() == v.dim() - 1)


def softmax_like_eager(gm: fx.GraphModule) -> int:
    """Rewrites `gm`'s CPU softmaxes over the last dim (see the module docstring);
    returns how many. The caller recompiles `gm`."""
    from .split_reductions import _replace

    done = 0
    for n in list(gm.graph.nodes):
        if _rewritable(n):
            _replace(gm, n, n.args[0], _last_dim_softmax)
            done += 1
    if done:
        logs.log("passes", f"softmax_like_eager: {done} softmax(es) over the last dim as eager's kernel")
    return done
