"""linalg.pinv as eager's composite (ATen LinearAlgebra.cpp, linalg_pinv with tensor
tolerances): an SVD (or, hermitian, an eigendecomposition) through torch as a library
call, the rest compiled. torch-mlir cannot import aten.linalg_pinv.atol_rtol_tensor,
which aot_autograd keeps whole: every pinv ran as an eager island.

Eager's steps, followed here operation for operation (the tolerances in float64, as
get_atol_rtol makes them):
    atol = atol or 0;  rtol = rtol or (0 where atol > 0 else eps(dtype) * max(m, n))
    U, S, V = svd(A)                (V = Vh^H; S in descending order)
    tol = max(atol[..., None], rtol[..., None] * S[..., :1])
    S+ = where(S > tol, 1 / S, 0).to(A.dtype)
    pinv = (V * S+[..., None, :]) @ U^H
hermitian: S, U = eigh(A), max over |S|, `|S| > tol`, pinv = (U * S+[..., None, :]) @ U^H.
Real float32/float64 inputs with elements only (complex runs through torch; eager's
empty-input branch too)."""
from __future__ import annotations

import torch

_EPS = {torch.float32: torch.finfo(torch.float32).eps, torch.float64: torch.finfo(torch.float64).eps}


def pinv(a, atol=None, rtol=None, hermitian=False):
    if not isinstance(a, torch.Tensor) or a.dtype not in _EPS or a.dim() < 2 or a.numel() == 0:
        return NotImplemented
    if any(t is not None and (not isinstance(t, torch.Tensor) or t.is_complex()) for t in (atol, rtol)):
        return NotImplemented
    f64 = torch.float64
    zero = torch.zeros((), dtype=f64, device=a.device)
    if rtol is None:
        default = torch.full((), _EPS[a.dtype] * max(a.shape[-1], a.shape[-2]), dtype=f64, device=a.device)
        rtol = default if atol is None else torch.where(atol > 0, zero, default)
    if atol is None:
        atol = zero
    if hermitian:
        s, u = torch.linalg.eigh(a)
        size = s.abs()
        top = size.amax(-1, keepdim=True)
        left = u
    else:
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        size = s
        top = s.narrow(-1, 0, 1)
        left = vh.mH
    tol = torch.max(atol.unsqueeze(-1), rtol.unsqueeze(-1) * top)
    s_inv = torch.where(size > tol, s.reciprocal(), torch.zeros((), dtype=s.dtype, device=s.device)).to(a.dtype)
    return torch.matmul(left * s_inv.unsqueeze(-2), u.mH)
