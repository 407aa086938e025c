"""Regularized incomplete gamma functions (`igamma` = P(a, x), `igammac` = Q(a, x)) compiled
on the CPU for float32/bfloat16/float16 results: torch-mlir has no lowering for them.

Eager (ATen/native/Math.h calc_igamma / calc_igammac) returns, before any series: NaN for
a < 0 or x < 0; for a == 0: P = 1 (Q = 0) where x > 0, else NaN; for x == 0: P = 0 (Q = 1);
for a == inf: NaN where x == inf, else P = 0 (Q = 1); for x == inf: P = 1 (Q = 0). Else it
picks among an asymptotic series, a power series and a continued fraction, in the input's
float type (bfloat16/float16 in float32, rounded once: equal to the float32 kernel rounded
bit for bit), accurate to about 1.4e-6 absolute in float32 (a, x in [0, 1000], against the
float64 kernel). Here the value is computed in float64 to about 1e-13 and rounded to
the result's dtype, so it is within eager's own float32 error of eager (assert_close's float32 tolerance is
1e-5 absolute, and P, Q lie in [0, 1]), as the sum of the series
  P(a, x) = sum_n exp((a + n) log x - x - lgamma(a + n + 1)),   Q = 1 - P,
its first `TERMS` terms computed side by side (a new last dimension, summed: one
reduction, not a loop), lgamma by Lanczos' approximation. The terms after the last one
shrink by at least the ratio r = x / (a + TERMS): an element whose remaining sum may
exceed 1e-14 (x >= a + TERMS, or the last term over (1 - r) above 1e-14) sets the error
flag (bounds.py), and the call reruns eagerly.
float64 results keep the op (eager's float64 is exact to ~1e-16: not reproduced here).
"""
from __future__ import annotations

import math

import torch
import torch.fx as fx

from .polynomials import inline
from .target import device_type

OPS = ("aten::igamma", "aten::igammac")
TERMS = 64
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _lgamma(x: torch.Tensor) -> torch.Tensor:
    """log Gamma(x) for x >= 1 (float64), Lanczos' approximation (g = 7, 9 terms)."""
    xm = x - 1
    s = torch.full_like(x, _LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], 1):
        s = s + c / (xm + i)
    t = xm + _LANCZOS_G + 0.5
    return 0.5 * math.log(2 * math.pi) + (xm + 0.5) * torch.log(t) - t + torch.log(s)


def _igamma(upper: bool, dtype: torch.dtype):
    def fn(a, x):
        a, x = torch.broadcast_tensors(a, x)
        a, x = a.to(torch.float64), x.to(torch.float64)
        nan = torch.full_like(a, float("nan"))
        one, zero = torch.ones_like(a), torch.zeros_like(a)
        lo, hi = (one, zero) if upper else (zero, one)   # the value at x == 0, at x == inf
        inf_a, inf_x = torch.isinf(a), torch.isinf(x)
        # eager's special cases, in its order
        special = (x < 0) | (a < 0) | (a == 0) | (x == 0) | inf_a | inf_x
        val = torch.where(inf_x, hi, zero)
        val = torch.where(inf_a, torch.where(inf_x, nan, lo), val)
        val = torch.where(x == 0, lo, val)
        val = torch.where(a == 0, torch.where(x > 0, hi, nan), val)
        val = torch.where((x < 0) | (a < 0), nan, val)
        # elsewhere (NaN operands fall through to NaN values, as in eager)
        sa = torch.where(special, one, a).unsqueeze(-1)
        sx = torch.where(special, one, x).unsqueeze(-1)
        n = torch.arange(TERMS, dtype=torch.float64)
        terms = torch.exp((sa + n) * torch.log(sx) - sx - _lgamma(sa + n + 1))
        p = terms.sum(-1)
        sa, sx = sa.squeeze(-1), sx.squeeze(-1)
        last = terms[..., -1]
        room = sa + TERMS - sx      # > 0: the terms after the last shrink by x / (a + TERMS)
        open_ = (room <= 0) | (last * (sa + TERMS) > 1e-14 * room)
        res = torch.where(special, val, 1 - p if upper else p)
        flag = (~special & open_).any()
        return res.to(dtype), flag

    return fn


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """aten.igamma / aten.igammac of two CPU tensors with a float32/bfloat16/float16
    result, replaced by the compiled form: its error flag, or None (left as it is)."""
    from .fxutil import op_name

    if op_name(node.target) not in OPS or len(node.args) != 2 or node.kwargs or \
            not all(isinstance(a, fx.Node) for a in node.args):
        return None
    vals = [a.meta.get("val") for a in node.args]
    want = node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) and device_type(v) == "cpu" for v in vals) or \
            not isinstance(want, torch.Tensor) or \
            want.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    upper = op_name(node.target) == "aten::igammac"
    flag = inline(graph, node, _igamma(upper, want.dtype), list(node.args))
    return None if flag is None else [flag]
