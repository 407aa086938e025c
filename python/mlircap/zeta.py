"""Hurwitz zeta (`special.zeta`) compiled as eager's Cephes loop, bounded, with a flag.

torch-mlir has no lowering for it. Eager (ATen/native/Math.h `zeta`) computes in double
for float32 and float64: special cases (x == 1: inf; x < 1: NaN; q <= 0 an integer: inf;
q <= 0 and x not an integer: NaN), then s = pow(q, -x) in the input's type, a direct sum
of (q + i)^-x while i < 9 or q + i <= 9, stopping early once a term is below MACHEP * s,
then up to 12 Euler-Maclaurin terms, stopping once one is below MACHEP relative to s. Here
both loops are unrolled with masks (the sum to `SUM_STEPS` steps: it runs while i < 9 or
q + i <= 9, at most 10 steps for q > 0, 9 - q for a negative q with an integer x, where
pow's negative bases give the sign of the integer power as std::pow does), each step the
same float64 operations in the same order. Elements whose sum would run longer (q < -14)
set the error flag (bounds.py): the call reruns eagerly. bfloat16/float16 as eager's
zeta<scalar_t> computes them: acc_type float instead of double (s = pow(q, -x) of floats),
the result rounded once. CPU only.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .polynomials import inline
from .target import device_type

MAX_TERMS = 12      # Euler-Maclaurin terms (eager's loop)
SUM_STEPS = 24      # direct-sum steps unrolled: q > -15 (eager's loop has no bound)
_MACHEP = 1.11022302462515654042E-16
_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
      -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
      1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta(dtype: torch.dtype):
    acc = torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32   # at::acc_type

    def fn(x, q):
        x, q = torch.broadcast_tensors(x.to(dtype), q.to(dtype))
        inf = torch.full_like(x, float("inf"))
        nan = torch.full_like(x, float("nan"))
        special_val = torch.where(x == 1, inf, torch.where(x < 1, nan, torch.where(q == torch.floor(q), inf, nan)))
        nonpos = q <= 0
        special = (x == 1) | (x < 1) | (nonpos & ((q == torch.floor(q)) | (x != torch.floor(x))))
        x64 = x.to(acc)
        safe_q = torch.where(special, torch.ones_like(q), q)
        # std::pow in the input's type (bfloat16/float16: of floats, kept a float)
        wide = dtype if acc == torch.float64 else torch.float32
        s = torch.pow(safe_q.to(wide), -x.to(wide)).to(acc)
        a = safe_q.to(acc)
        b = torch.zeros_like(a)
        live = ~special                          # in the direct sum
        result = torch.zeros_like(a)
        finished = torch.zeros_like(live)
        for i in range(SUM_STEPS):
            step = live if i < 9 else live & (a <= 9.0)
            a = torch.where(step, a + 1.0, a)
            b = torch.where(step, torch.pow(a, -x64), b)
            s = torch.where(step, s + b, s)
            early = step & (-_MACHEP * s < b) & (b < _MACHEP * s)
            result = torch.where(early, s, result)
            finished = finished | early
            live = step & ~early                 # a false loop condition leaves for the series
        longer = live & (a <= 9.0)   # (SUM_STEPS >= 9)
        series = ~special & ~finished
        w = a
        s = s + b * w / (x64 - 1.0)
        s = s - 0.5 * b
        aa = torch.ones_like(a)
        k = torch.zeros_like(a)
        done = torch.zeros_like(series)
        for coef in _A:
            aa = aa * (x64 + k)
            b = b / w
            t = aa * b / coef
            s = s + t
            stop = ~done & (torch.abs(t / s) < _MACHEP)
            result = torch.where(series & stop, s, result)
            done = done | stop
            k = k + 1.0
            aa = aa * (x64 + k)
            b = b / w
            k = k + 1.0
        result = torch.where(series & ~done, s, result)
        out = torch.where(special, special_val, result.to(dtype))
        return out, longer.any()

    return fn


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """Replaces `node` (aten.special_zeta of two tensors) by the unrolled form traced into
    `graph`: its error flag, or None (left as it is)."""
    if len(node.args) != 2 or node.kwargs or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    vals = [a.meta.get("val") for a in node.args]
    want = node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in vals) or not isinstance(want, torch.Tensor) or \
            want.dtype not in (torch.float32, torch.float64) or device_type(want) != "cpu":
        return None
    flag = inline(graph, node, _zeta(want.dtype), list(node.args))
    return None if flag is None else [flag]


def polygamma_rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """aten.polygamma(n, x) with n >= 2 as eager's calc_polygamma computes it:
    (-1)^(n+1) * exp(lgamma(n + 1)) * zeta(n + 1, x) in x's float type (the factorial a
    constant computed by torch here), zeta as above with its flag. bfloat16/float16: n + 1
    in the type, lgamma and exp of floats, the product in float with zeta's rounded result,
    rounded once (c10's mixed operators; bit for bit over 40000 values for n = 2..7).
    n = 0 is digamma, n = 1 trigamma (special.py)."""
    if len(node.args) != 2 or node.kwargs or not isinstance(node.args[0], int) or node.args[0] < 2 or \
            not isinstance(node.args[1], fx.Node):
        return None
    n = node.args[0]
    want = node.meta.get("val")
    if not isinstance(want, torch.Tensor) or \
            want.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16) or \
            device_type(want) != "cpu":
        return None
    from .view_ops import _real

    acc = want.dtype if want.dtype in (torch.float32, torch.float64) else torch.float32
    with _real():
        n1 = torch.tensor(float(n), dtype=want.dtype) + 1   # static_cast<scalar_t>(n) + one
        factor = float(n1.to(acc).lgamma().exp())
    sign = 1.0 if n % 2 else -1.0
    zeta_fn = _zeta(want.dtype)

    def fn(x):
        x = x.to(want.dtype)
        z, flag = zeta_fn(torch.full_like(x, float(n1)), x)
        return (sign * factor * z.to(acc)).to(want.dtype), flag

    flag = inline(graph, node, fn, [node.args[1]])
    return None if flag is None else [flag]
