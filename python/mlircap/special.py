"""Special functions torch-mlir has no lowering for, as eager's CPU kernels compute them.

* trigamma (polygamma with n = 1): eager's calc_trigamma, see trigamma().
* digamma (and polygamma with n = 0, which is digamma): eager's calc_digamma
  (aten/src/ATen/native/Math.h) in the input's float type: 0 gives -copysign(inf, x),
  negative integers NaN, other negative x the reflection digamma(1 - x) - pi / tan(pi * r)
  (r the fractional part of x, the tangent in double), then `result -= 1 / x; x += 1`
  while x < 10 (at most 10 times for x > 0: unrolled, elements already past 10 keep
  their value), x == 10 exactly gives result + psi(10), else the asymptotic series
  log(x) - 0.5 / x - z * polevl(z, A) with z = 1 / x^2 (0 from 1e17). bfloat16/float16
  are computed in float32 and rounded once, as eager's kernel does; integers in float32.
* hypot: sqrt(a^2 + b^2) in float64 for float32/bfloat16/float16 (no overflow, rounded
  once: eager's std::hypot is correctly rounded up to half an ulp), float64 scaled by
  the larger magnitude; an infinite operand gives inf even with a NaN (C's hypot).
* lgamma: log|Gamma(x)| in float64 (Lanczos' approximation, the reflection below 0.5),
  rounded to the result's dtype (eager's lgammaf is within rounding of it).
* angle of real tensors (pi below zero, NaN kept), dist (the vector norm of a - b) and cdist
  (direct per-pair distances where eager does not use its matrix-product form).
* unary(), horner(), chbevl(): the dtype handling and the polynomial evaluations that
  special_bessel.py (Bessel, Airy) and special_erf.py (erfc, erfcx, log_ndtr, ndtri) share.
"""
from __future__ import annotations

import math
import struct

import torch
from .target import device_type

_PSI_10 = 2.25175258906672110764
_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
      -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
      8.33333333333333333333E-2)


def _digamma_positive(x: torch.Tensor) -> torch.Tensor:
    """calc_digamma's steps for x > 0 (x in its computation dtype)."""
    result = torch.zeros_like(x)
    for _ in range(10):
        below = x < 10
        result = torch.where(below, result - 1 / x, result)
        x = torch.where(below, x + 1, x)
    z = 1 / (x * x)
    poly = torch.full_like(x, _A[0])
    for c in _A[1:]:
        poly = poly * z + c
    y = torch.where(x < 1.0e17, z * poly, torch.zeros_like(x))
    series = result + torch.log(x) - (0.5 / x) - y
    return torch.where(x == 10, result + _PSI_10, series)


def digamma(x):
    """aten.digamma on the CPU (module docstring); other inputs: NotImplemented."""
    if not isinstance(x, torch.Tensor) or device_type(x) != "cpu" or x.is_complex():
        return NotImplemented
    out = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    t = x.to(torch.float32 if out in (torch.bfloat16, torch.float16) else out)
    neg = t < 0
    is_int = t == torch.trunc(t)
    # reflection for negative x: digamma(1 - x) - pi / tan(pi * r), r = x - trunc(x)
    r = (t - torch.trunc(t)).to(torch.float64)
    pi_over_tan = (math.pi / torch.tan(math.pi * r)).to(t.dtype)
    pos = torch.where(neg, 1 - t, t)
    pos = torch.where(pos > 0, pos, torch.ones_like(pos))   # 0 and NaN handled below
    res = _digamma_positive(pos)
    res = torch.where(neg, res - pi_over_tan, res)
    res = torch.where(neg & is_int, torch.full_like(res, float("nan")), res)
    zero = t == 0   # -copysign(inf, x): 1 / x is -inf for -0.0 (torch-mlir cannot lower signbit)
    res = torch.where(zero, torch.where(1 / t < 0, torch.full_like(res, float("inf")),
                                        torch.full_like(res, float("-inf"))), res)
    res = torch.where(torch.isnan(t), t, res)
    res = torch.where(t == float("inf"), t, res)   # log(inf) - 0 - 0
    return res.to(out)


def polygamma(n, x):
    """aten.polygamma with n = 0 (digamma) or 1 (trigamma); other n: NotImplemented
    (n >= 2: zeta.polygamma_rewrite)."""
    if not isinstance(n, int) or n not in (0, 1):
        return NotImplemented
    return digamma(x) if n == 0 else trigamma(x)


def _to_float32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def trigamma(x):
    """polygamma(1, x) as eager's CPU calc_trigamma computes it in float32/float64
    (integers in the default float dtype): below 0.5 the reflection -pi^2 / sin(pi x)^2
    (pi x rounded to the dtype first) with x = 1 - x and the sign flipped at the end,
    six steps of result += 1 / x^2, x += 1, then the asymptotic tail
    (1 + 1 / (2x) + ixx (1/6 - ixx (1/30 - ixx / 42))) / x, ixx = 1 / x^2, all in the
    dtype (float32: equal to eager's bits but for 29 of 200000 values in [0.5, 20.5], one
    ulp: eager's AVX2 kernel contracts multiply-adds). bfloat16/float16: in float32, rounded
    once (eager's calc_trigamma computes in acc_type, float: bit for bit over 42000 values,
    negative and huge ones included). Other devices: NotImplemented."""
    if not isinstance(x, torch.Tensor) or device_type(x) != "cpu" or x.is_complex():
        return NotImplemented
    if x.dtype in (torch.bfloat16, torch.float16):
        return trigamma(x.float()).to(x.dtype)
    t = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    if t.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    pi = math.pi if t.dtype == torch.float64 else _to_float32(math.pi)   # c10::pi<scalar_t>
    pi2 = pi * pi if t.dtype == torch.float64 else _to_float32(pi * pi)   # pi * pi in the dtype
    reflect = t < 0.5
    sin_pi_x = torch.sin(t * pi)
    result = torch.where(reflect, -(pi2 / (sin_pi_x * sin_pi_x)), torch.zeros_like(t))
    x = torch.where(reflect, 1 - t, t)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return torch.where(reflect, -result, result)


def hypot(a, b):
    """aten.hypot of floating tensors (module docstring); other inputs: NotImplemented."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dtype != b.dtype or \
            not a.is_floating_point():
        return NotImplemented
    a, b = torch.broadcast_tensors(a, b)
    inf = torch.isinf(a) | torch.isinf(b)
    if a.dtype == torch.float64:
        x, y = a.abs(), b.abs()
        m, s = torch.maximum(x, y), torch.minimum(x, y)
        safe = torch.where(m == 0, torch.ones_like(m), m)
        q = s / safe
        r = torch.where(m == 0, torch.zeros_like(m), m * torch.sqrt(1 + q * q))
    else:
        x, y = a.to(torch.float64), b.to(torch.float64)
        r = torch.sqrt(x * x + y * y)
    r = torch.where(inf, torch.full_like(r, float("inf")), r)
    return r.to(a.dtype)


def angle(x):
    """aten.angle of a real tensor (eager's angle_impl): pi where x < 0, else 0, NaN kept;
    integers and bool give the default float dtype. Complex inputs: NotImplemented
    (complex_pairs.py computes them)."""
    if not isinstance(x, torch.Tensor) or x.is_complex():
        return NotImplemented
    out = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    t = x.to(out)
    res = torch.where(t < 0, torch.full_like(t, math.pi), torch.zeros_like(t))
    return torch.where(torch.isnan(t), t, res)


def dist(a, b, p=2):
    """aten.dist of floating tensors: the p-norm of a - b (eager computes norm(a - b, p));
    other inputs: NotImplemented."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or not a.is_floating_point() or \
            a.dtype != b.dtype or isinstance(p, complex):
        return NotImplemented
    return torch.linalg.vector_norm(a - b, p)


def cdist(x1, x2, p, compute_mode=None):
    """aten._cdist_forward computed directly, as eager's CPU kernel does where it does not
    take its matrix-product form for p = 2 (compute_mode 1, or unset/0 with more than 25
    rows: NotImplemented, the op stays whole): per pair, the count of differing features
    (p = 0), the sum of |d| (p = 1), sqrt of the sum of d^2 (p = 2), the largest |d|
    (p = inf), else (sum |d|^p)^(1/p). Floating inputs with features only."""
    if not (isinstance(x1, torch.Tensor) and isinstance(x2, torch.Tensor)) or not x1.is_floating_point() or \
            x1.dtype != x2.dtype or x1.shape[-1] == 0 or device_type(x1) != "cpu" or not isinstance(p, (int, float)):
        return NotImplemented
    r1, r2 = x1.shape[-2], x2.shape[-2]
    if p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (r1 > 25 or r2 > 25))):
        return NotImplemented
    d = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == 0:
        return (d != 0).sum(-1).to(x1.dtype)
    if p == 1:
        return d.abs().sum(-1)
    if p == 2:
        return torch.sqrt((d * d).sum(-1))
    if p == math.inf:
        return d.abs().amax(-1)
    return torch.pow(torch.pow(d.abs(), p).sum(-1), 1.0 / p)


# Lanczos' approximation, g = 7, 9 terms (relative error of Gamma about 1e-15 in double)
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _lgamma_from_half(x: torch.Tensor) -> torch.Tensor:
    """log|Gamma(x)| for x >= 0.5 (float64), by Lanczos' approximation."""
    xm = x - 1
    a = torch.full_like(x, _LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], 1):
        a = a + c / (xm + i)
    t = xm + _LANCZOS_G + 0.5
    return 0.5 * math.log(2 * math.pi) + (xm + 0.5) * torch.log(t) - t + torch.log(a)


def lgamma(x):
    """aten.lgamma on the CPU: log|Gamma(x)| computed in float64 and rounded to the
    result's dtype (eager: C's lgamma in the input's float type; bfloat16/float16 in
    float32, rounded once; integers in float32). float64 keeps torch-mlir's way (none:
    NotImplemented). x < 0.5 by the reflection log(pi / |sin(pi x)|) - lgamma(1 - x), the
    sine of pi times the distance of x to the nearest integer (exact in double), so the
    poles (0 and negative integers) give inf; +-inf give inf, NaN stays NaN."""
    if not isinstance(x, torch.Tensor) or device_type(x) != "cpu" or x.is_complex() or x.dtype == torch.float64:
        return NotImplemented
    out = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    if out == torch.float64:
        return NotImplemented
    t = x.to(torch.float64)
    small = t < 0.5
    frac = t - torch.floor(t)
    near = torch.minimum(frac, 1 - frac)
    reflect = math.log(math.pi) - torch.log(torch.sin(math.pi * near))
    res = torch.where(small, reflect - _lgamma_from_half(torch.where(small, 1 - t, t)), _lgamma_from_half(
        torch.where(small, torch.ones_like(t), t)))
    res = torch.where(torch.isinf(t), torch.full_like(t, float("inf")), res)
    res = torch.where(torch.isnan(t), t, res)
    return res.to(torch.float32).to(out)


def avg_pool2d_divisor_override(fallback):
    """aten.avg_pool2d with a divisor_override d (torch-mlir cannot lower it): each window's
    sum over the input divided by d, as the window's mean over its input elements
    (count_include_pad=False, the op torch-mlir lowers) times (their count / d), the
    count a constant of the shapes (eager's own pooling of ones, evaluated now). Other
    calls to `fallback`."""

    def decomposition(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                      divisor_override=None):
        if divisor_override is None or not isinstance(x, torch.Tensor) or not x.is_floating_point() or \
                x.dim() not in (3, 4) or device_type(x) != "cpu":
            return NotImplemented if fallback is None else fallback(
                x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        from .ranges import _now

        def pair(v):
            v = [v] if isinstance(v, int) else list(v)
            return v * 2 if len(v) == 1 else v
        kernel_size = pair(kernel_size)
        stride = pair(stride) if stride else list(kernel_size)
        padding = pair(padding)
        shape = tuple(x.shape[-2:])
        count = _now(lambda: torch.ops.aten.avg_pool2d.default(
            torch.ones((1, 1) + shape, dtype=torch.float64), kernel_size, stride, padding, ceil_mode, True, 1))
        if _now(lambda: bool((count == 0).any())) or count.numel() > (1 << 16):
            return NotImplemented
        scale = _now(lambda: (count[0, 0] / float(divisor_override)).to(torch.float32))
        mean = torch.ops.aten.avg_pool2d.default(x, kernel_size, stride, padding, ceil_mode, False, None)
        factor = torch.ops.aten.lift_fresh_copy.default(scale).to(x.device)
        return (mean.to(torch.float32) * factor).to(x.dtype)

    return decomposition


# ---------------------------------------------------------------- shared by special_bessel.py, special_erf.py
def unary(compute, low_precision=True):
    """The decomposition of a unary special function of CPU real tensors: integers and bool
    promoted to the default float dtype (eager's INT_TO_FLOAT kernels), bfloat16/float16
    computed in float32 and rounded once (eager's kernels upcast them; where eager has no
    such kernel, `low_precision=False`: NotImplemented, the op stays whole and raises as
    eager does), `compute(t)` on t float32/float64. Other inputs: NotImplemented."""

    def decomposition(x):
        if not isinstance(x, torch.Tensor) or device_type(x) != "cpu" or x.is_complex():
            return NotImplemented
        out = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        work = torch.float32 if out in (torch.bfloat16, torch.float16) else out
        if work not in (torch.float32, torch.float64) or (work != out and not low_precision):
            return NotImplemented
        return compute(x.to(work)).to(out)

    return decomposition


def horner(z: torch.Tensor, coeffs) -> torch.Tensor:
    """coeffs[0] z^n + ... + coeffs[n] by Horner's rule in z's dtype (Cephes' polevl, and
    eager's `acc = acc * z + c` loops from 0)."""
    acc = torch.full_like(z, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * z + c
    return acc


def chbevl(y: torch.Tensor, coeffs) -> torch.Tensor:
    """The Chebyshev series sum' coeffs[i] T_i(y / 2) by Clenshaw's recurrence in y's dtype,
    as Cephes' chbevl (and eager's Bessel loops, b0 = y b1 - b2 + c) evaluates it."""
    b0, b1 = torch.full_like(y, coeffs[0]), torch.zeros_like(y)
    b2 = b1
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + c
    return 0.5 * (b0 - b2)


def integers_in_float(op, fn):
    """`op` (a unary op whose integer and bool inputs eager promotes to the default float
    dtype: logit) on such an input as the same op on the promoted tensor, which `fn`
    decomposes; floating inputs go to `fn` (none: NotImplemented keeps the op)."""

    def decomposition(x, *args, **kwargs):
        if isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex() and \
                device_type(x) == "cpu":
            return op(x.to(torch.get_default_dtype()), *args, **kwargs)
        return fn(x, *args, **kwargs) if fn is not None else NotImplemented

    return decomposition
