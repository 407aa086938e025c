"""Orthogonal polynomials compiled with a bounded loop and an error flag: Chebyshev
(`special.chebyshev_polynomial_{t,u,v,w}` and their shifted forms), Hermite
(`special.hermite_polynomial_{h,he}`), Laguerre (`special.laguerre_polynomial_l`) and
Legendre (`special.legendre_polynomial_p`; recurrence() for the last four, float32 only).

torch-mlir has no lowering for them, and eager's kernel (ATen/native/Math.h) runs a loop
whose trip count is the degree `n`, an input tensor: `r = 2y * q - p` for k = 2..n, after
special cases (n < 0: 0; y at the ends of [-1, 1]: a closed value; n above a threshold
with |y| < 1: a trigonometric closed form; n = 0, 1). Here the special cases are
`where`, and the loop is unrolled to `MAX_DEGREE` steps, each masked by `k <= n`, in the
same float arithmetic as eager's (same operations in the same order). An element that
would need more steps, takes the trigonometric closed form (ill-conditioned: one ulp of
libm's float acos is past the tolerance; but at y = 0, where acos is pi / 2 in the dtype,
it compiles), or whose degree is not finite (eager casts it
to int64), sets an error flag: bounds.py appends it to the graph's outputs, and a call where it is set reruns
the captured graph eagerly (rerun_on_bad_index), as for an out-of-range index. CPU only
(bounds.py); the shifted forms evaluate at y = 2x - 1 (`x + x - 1`, as eager writes it).
"""
from __future__ import annotations

import math

import torch
import torch.fx as fx

from .fxutil import adopt_fake_vals, keep_layout, op_name
from .target import device_type

MAX_DEGREE = 16

# kind -> (shifted, closed-form threshold)
_KINDS = {
    "aten::special_chebyshev_polynomial_t": ("t", False, 6),
    "aten::special_chebyshev_polynomial_u": ("u", False, 8),
    "aten::special_chebyshev_polynomial_v": ("v", False, 8),
    "aten::special_chebyshev_polynomial_w": ("w", False, 8),
    "aten::special_shifted_chebyshev_polynomial_t": ("t", True, 6),
    "aten::special_shifted_chebyshev_polynomial_u": ("u", True, 6),
    "aten::special_shifted_chebyshev_polynomial_v": ("v", True, 6),
    "aten::special_shifted_chebyshev_polynomial_w": ("w", True, 4),
}
# Hermite, Laguerre and Legendre polynomials: eager's three-term recurrences (Math.h), whose
# CPU kernel the compiler contracts to a fused multiply-add: r = fma(a, q, -(k * p)) (then
# / (k + 1) for Laguerre and Legendre). Without the contraction 1/3 of float32 values
# differed from eager's in the last bits. kind -> the recurrence's steps for a degree n.
_RECURRENCES = {
    "aten::special_hermite_polynomial_h": "h",
    "aten::special_hermite_polynomial_he": "he",
    "aten::special_laguerre_polynomial_l": "l",
    "aten::special_legendre_polynomial_p": "p",
}
OPS = frozenset(_KINDS) | frozenset(_RECURRENCES)


def scalar_overloads() -> dict:
    """Decompositions of the ops' .x_scalar / .n_scalar overloads (a Python number for x or
    n: `special.chebyshev_polynomial_t(x, 3)`), which were left as they are and ran through
    torch: the .default overload with the number as a 0-dim tensor of the dtype eager
    converts it to (the result type of the tensor and the number), which rewrite() takes."""
    aten = torch.ops.aten
    table = {}
    for name in OPS:
        packet = getattr(aten, name.split("::")[1])
        table[packet.x_scalar] = _with_number(packet.default, 0)
        table[packet.n_scalar] = _with_number(packet.default, 1)
    return table


def _with_number(op, which: int):
    def decomposition(x, n):
        number, tensor = (x, n) if which == 0 else (n, x)
        if not isinstance(tensor, torch.Tensor) or not isinstance(number, (int, float)) or tensor.is_complex():
            return NotImplemented
        t = torch.ops.aten.full.default([], number, dtype=torch.result_type(tensor, number), device=tensor.device)
        return op(t, tensor) if which == 0 else op(tensor, t)

    return decomposition


def _signed(n, even_val, odd_val):
    return torch.where(n % 2 == 0, even_val, odd_val)


def chebyshev(kind: str, shifted: bool, threshold: int, dtype: torch.dtype):
    """fn(x, n) -> (eager's value, flag: some element needs more than MAX_DEGREE steps)."""

    def fn(x, n):
        x, nf = torch.broadcast_tensors(x.to(dtype), n.to(dtype))
        bad = (~torch.isfinite(nf)).any()
        ni = torch.where(torch.isfinite(nf), nf, torch.zeros_like(nf)).to(torch.int64)   # static_cast<int64_t>
        y = x + x - 1 if shifted else x
        one = torch.ones_like(x)
        two_n1 = (ni + ni + 1).to(dtype)
        # values at the ends of the interval: y == 1 (pos) and y == -1 (neg)
        if shifted:
            pos, neg = x == 1, (x == 0) & (x != 1)
        else:
            pos, neg = (x.abs() == 1) & (x > 0), (x.abs() == 1) & ~(x > 0)
        if kind == "t":
            pos_val, neg_val = one, _signed(ni, one, -one)
        elif kind == "u":
            pos_val, neg_val = (ni + 1).to(dtype), _signed(ni, (ni + 1).to(dtype), (-(ni + 1)).to(dtype))
        elif kind == "v":
            pos_val, neg_val = one, _signed(ni, two_n1, -two_n1)
        else:
            pos_val, neg_val = two_n1, _signed(ni, one, -one)
        if not shifted and kind in ("t", "u"):
            # eager: abs(x) == 1 -> (x > 0 || n % 2 == 0) ? pos : -pos
            neg_val = _signed(ni, pos_val, -pos_val)
        # eager's trigonometric closed form (n > threshold, |y| < 1) is ill-conditioned:
        # (n + 1) * acos(y) turns one ulp of libm's float acos into more than float32's
        # tolerance, and compiled acos is not libm's bit for bit (2 of 508 elements off):
        # such elements set the flag (eager computes them)
        closed = (ni > threshold) & (y.abs() < 1)
        q0 = {"t": y, "u": y + y, "v": y + y - 1, "w": y + y + 1}[kind]
        p, q = one, q0
        two_y = y + y
        for k in range(2, MAX_DEGREE + 1):
            active = ni >= k
            r = two_y * q - p
            p, q = torch.where(active, q, p), torch.where(active, r, q)
        # ... except at y == 0, where acos(y) is pi / 2 rounded to the dtype (libm's acos of 0,
        # exact there): the closed form's argument is eager's float product, its value from an
        # accurate sin / cos (an integer x of 0 with a degree past the threshold set the flag)
        zero = closed & (y == 0)
        loops = ((ni > MAX_DEGREE) | closed) & ~zero & ~pos & ~neg & (ni >= 0)
        res = torch.where(ni == 0, one, q)
        res = torch.where(zero, _closed_form_at_zero(kind, ni, dtype), res)
        res = torch.where(neg, neg_val, res)
        res = torch.where(pos, pos_val, res)
        res = torch.where(ni < 0, torch.zeros_like(res), res)
        return res, bad | loops.any()

    return fn


def _closed_form_at_zero(kind: str, ni, dtype):
    """Eager's trigonometric closed form (Math.h) of the Chebyshev polynomial of `kind` and
    degree `ni` (past its threshold) at y = 0, with acos(0) = pi / 2 in the dtype: cos(n a) (t),
    sin((n + 1) a) / sin(a) (u), cos((n + 0.5) a) / cos(a / 2) (v), sin((n + 0.5) a) / sin(a / 2)
    (w); each integer converted to the dtype as C++ converts it in those products."""
    a = torch.full((), math.pi / 2, dtype=dtype)
    n = ni.to(dtype)
    if kind == "t":
        return torch.cos(n * a)
    if kind == "u":
        return torch.sin((ni + 1).to(dtype) * a) / torch.sin(a)
    if kind == "v":
        return torch.cos((n + 0.5) * a) / torch.cos(a / 2)
    return torch.sin((n + 0.5) * a) / torch.sin(a / 2)


def _fma32(a, b, c):
    """float32 a * b + c rounded once, as a fused multiply-add: the product of two floats
    is exact in double, the double sum rounded to float (a second rounding of the double
    sum differs from the fma's single one only where the exact sum lies within 2^-29 ulp
    of a float midpoint)."""
    return (a.double() * b.double() + c.double()).float()


def recurrence(kind: str):
    """fn(x, n) -> (eager's float32 value of the Hermite (h, he), Laguerre (l) or Legendre
    (p) polynomial of degree n at x, flag: some element needs more than MAX_DEGREE
    steps or has a non-finite degree)."""

    def fn(x, n):
        x, nf = torch.broadcast_tensors(x.to(torch.float32), n.to(torch.float32))
        finite = torch.isfinite(nf)
        ni = torch.where(finite, nf, torch.zeros_like(nf)).to(torch.int64)   # static_cast<int64_t>
        one, zero = torch.ones_like(x), torch.zeros_like(x)
        if kind == "h":
            p, q = one, x + x
        elif kind == "l":
            p, q = one, 1 - x
        else:
            p, q = one, x
        # eager's loop runs for k = 1 .. n - 1 (Hermite H: k = 2, 4, .., 2n - 2): step k is
        # masked by k < n
        for k in range(1, MAX_DEGREE):
            if kind == "h":
                r = _fma32(x + x, q, -(2 * k * p))
            elif kind == "he":
                r = _fma32(x, q, -(k * p))
            elif kind == "l":
                r = _fma32((k + k) + (1 - x), q, -(k * p)) / (k + 1)
            else:
                r = _fma32((k + k + 1) * x, q, -(k * p)) / (k + 1)
            active = ni > k
            p, q = torch.where(active, q, p), torch.where(active, r, q)
        res = torch.where(ni == 0, one, q)
        if kind == "l":
            res = torch.where(x.abs() == 0, one, res)
        elif kind == "p":
            res = torch.where(x.abs() == 1, torch.where((x > 0) | (ni % 2 == 0), one, -one), res)
        res = torch.where(ni < 0, zero, res)
        bad = ~finite | (ni > MAX_DEGREE)
        if kind in ("l", "p"):
            # eager's scalar loop (the elements past its last full vector) returns 0 for a
            # NaN x of degree 2 or more, its vector loop NaN: such elements set the flag
            bad = bad | (torch.isnan(x) & (ni >= 2))
        return res, bad.any()

    return fn


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """Replaces `node` (an op in OPS, tensor operands) by the bounded form traced into
    `graph`: its error flag, or None (left as it is)."""
    name = op_name(node.target)
    if name in _RECURRENCES:
        return _rewrite_recurrence(graph, node, _RECURRENCES[name])
    kind, shifted, threshold = _KINDS[name]
    if len(node.args) != 2 or node.kwargs or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    vals = [a.meta.get("val") for a in node.args]
    want = node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in vals) or not isinstance(want, torch.Tensor) or \
            want.dtype not in (torch.float32, torch.float64) or device_type(want) != "cpu":
        return None
    flag = inline(graph, node, chebyshev(kind, shifted, threshold, want.dtype), list(node.args))
    return None if flag is None else [flag]


def _rewrite_recurrence(graph: fx.Graph, node: fx.Node, kind: str) -> list[fx.Node] | None:
    """rewrite() of a Hermite/Laguerre/Legendre polynomial with a float32 result (float32
    or integer operands: the default dtype): the fused multiply-add is exact only there."""
    if len(node.args) != 2 or node.kwargs or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    vals = [a.meta.get("val") for a in node.args]
    want = node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) and (v.dtype == torch.float32 or not v.is_floating_point())
               and not v.is_complex() for v in vals) or not isinstance(want, torch.Tensor) or \
            want.dtype != torch.float32 or device_type(want) != "cpu":
        return None
    flag = inline(graph, node, recurrence(kind), list(node.args))
    return None if flag is None else [flag]


def inline(graph: fx.Graph, node: fx.Node, fn, inputs: list) -> fx.Node | None:
    """Replaces `node` by `fn(*inputs)` -> (value, error flag) traced into `graph` (on
    real zero tensors laid out as the inputs, meta values then as the graph's fake
    tensors, the value's with `node`'s strides: keep_layout); returns the flag's node, or
    None (`node` left as it is) where tracing fails or the value is not `node`'s shape
    and dtype."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx

    from .frontend import decomposition_table

    vals = [a.meta.get("val") for a in inputs]
    want = node.meta.get("val")
    fake = detect_fake_mode(vals)
    try:
        with unset_fake_temporarily(), disable_proxy_modes_tracing():
            examples = [torch.zeros_like(torch.empty_strided(v.shape, v.stride(), dtype=v.dtype)) for v in vals]
            sub = make_fx(fn, decomposition_table=decomposition_table())(*examples)
    except Exception:   # noqa: BLE001 - anything it does not handle stays an island
        return None
    out_vals = [n.meta.get("val") for n in sub.graph.output_node().args[0]]
    if any(n.op == "get_attr" for n in sub.graph.nodes) or out_vals[0].shape != want.shape or \
            out_vals[0].dtype != want.dtype:
        return None
    phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    before = set(graph.nodes)
    with graph.inserting_before(node):
        res, flag = graph.graph_copy(sub.graph, dict(zip(phs, inputs)))
    adopt_fake_vals(graph, fake, set(graph.nodes) - before)
    keep_layout(res, want)
    res.meta["mlircap_bounds_checked"] = True
    node.replace_all_uses_with(res)
    graph.erase_node(node)
    return flag
