"""Where the coefficients of the CPU erf (lib/Transforms/MathApprox.cpp, ErfRational) come from.

    python bench/fit_erf.py [--clamp 3.95] [--degrees 5,5]

erf(x) = copysign(min(a * P(a^2) / Q(a^2), 1), x) with a = min(|x|, 4). P / Q is
fitted to erf(a)/a over a^2 in [0, clamp^2], minimax in relative error: Lawson's
iteratively reweighted least squares on the linearized problem P(t) - f(t) Q(t)
(with Q's current values as weights, Sanathanan-Koerner), on Chebyshev nodes.
Then the f32 evaluation the kernel performs (Horner with FMAs, f32 coefficients)
is emulated with numpy and compared with erf in double on a dense grid,
next to torch.erf.
"""
import argparse
import math

import numpy as np
import torch
from mpmath import erf as mp_erf
from mpmath import mp, mpf

mp.dps = 40
F32 = np.float32


def erf_over_x(t: float) -> float:
    if t == 0:
        return 2 / math.sqrt(math.pi)
    s = mpf(t) ** 0.5
    return float(mp_erf(s) / s)


def fit(m: int, n: int, top: float, points: int = 4000, iters: int = 60):
    """(P, Q, max relative error in double) with Q[0] = 1."""
    t = (1 - np.cos(np.linspace(0, np.pi, points))) / 2 * top
    f = np.array([erf_over_x(v) for v in t])
    w = np.ones(points) / points
    q = np.ones(points)
    for _ in range(iters):
        for _ in range(3):
            a = np.hstack([np.vander(t, m + 1, increasing=True),
                           -f[:, None] * np.vander(t, n + 1, increasing=True)[:, 1:]])
            sw = np.sqrt(w) / (np.abs(q) * f)
            coef, *_ = np.linalg.lstsq(a * sw[:, None], f * sw, rcond=None)
            p_c, q_c = coef[:m + 1], np.concatenate([[1.0], coef[m + 1:]])
            q = np.polyval(q_c[::-1], t)
        err = np.abs(np.polyval(p_c[::-1], t) / q / f - 1)
        w = w * err
        w /= w.sum()
    return p_c, q_c, err.max()


def fma(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def erf_f32(p_c, q_c, x):
    """The kernel's arithmetic in f32 (a clamped at 4, as ErfRational does)."""
    a = np.minimum(np.abs(x), F32(4)).astype(F32)
    t = (a * a).astype(F32)
    p = np.full_like(t, F32(p_c[-1]))
    for c in p_c[-2::-1]:
        p = fma(p, t, np.full_like(t, F32(c)))
    q = np.full_like(t, F32(q_c[-1]))
    for c in q_c[-2::-1]:
        q = fma(q, t, np.full_like(t, F32(c)))
    r = np.minimum(((a * p).astype(F32) / q).astype(F32), F32(1))
    return np.copysign(r, x)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clamp", type=float, default=3.95)
    ap.add_argument("--degrees", default="5,5")
    a = ap.parse_args()
    m, n = (int(d) for d in a.degrees.split(","))
    p_c, q_c, rel = fit(m, n, a.clamp * a.clamp)
    print(f"P (degree {m}):", ", ".join(repr(float(F32(c))) for c in p_c))
    print(f"Q (degree {n}):", ", ".join(repr(float(F32(c))) for c in q_c))
    print(f"fit: max relative error {rel:.2e} in double")
    x = np.concatenate([np.linspace(-5, 5, 2000001, dtype=F32), np.geomspace(1e-30, 1e-2, 20001).astype(F32)])
    exact = torch.erf(torch.from_numpy(x).double()).numpy()
    ulp = np.spacing(np.abs(exact).astype(F32)).astype(np.float64)
    for name, got in (("f32 rational", erf_f32(p_c, q_c, x)), ("torch.erf", torch.erf(torch.from_numpy(x)).numpy())):
        e = np.abs(got.astype(np.float64) - exact)
        print(f"{name:<13} max abs error {e.max():.2e} at {x[e.argmax()]:.4f}, max {np.max(e / ulp):.2f} ulp, "
              f"mean {np.mean(e / ulp):.3f} ulp")


if __name__ == "__main__":
    main()
