"""cumprod as a product under a lower-triangular mask (CPU).

torch-mlir lowers cumprod to its private tm_tensor.scan, for which the CPU launch
plan has no kernel ("no CPU kernel": it ran through torch). Eager's CPU kernel
(cpu_cum_base_kernel) converts the input to the result's dtype and multiplies
along the axis in at::acc_type (double for float32, float for bfloat16/float16,
int64 for integers), rounding each prefix product to the result's dtype. Here
element i is the product of elements 0..i (a masked product reduction, O(n^2) work,
only up to _MAX_WORK), in the same wider type, rounded once: the factors are those
of eager's prefix, multiplied in another order in a type with 29 (float32) or 16
(bfloat16) more bits than the result, so the rounded result is eager's except for
products within a rounding error of a tie; integers (wrapping products) are exact.
CUDA's kernel (a parallel scan in float32) keeps its island for floating results; integer
results (the same wrapping products in any order) compile there too.

Each result is contiguous, as eager's cumulative ops return (the masked reduction along
the last dim moved back is a transposed view): the trace's layout is the one an eager
island reading it gets (backend._EagerIsland), and a random op there (uniform_ of a
cumsum's result, randint_like of cummin's indices) draws in memory order.
"""
from __future__ import annotations

import torch
from .target import device_type

_MAX_LEN = 1024
_MAX_WORK = 1 << 24   # elements x axis length
_ACC = {torch.float32: torch.float64, torch.float64: torch.float64, torch.bfloat16: torch.float32,
        torch.float16: torch.float32}


def cumprod(x, dim, dtype=None):
    """aten.cumprod; NotImplemented for what it does not handle. Other devices than the CPU:
    integer results only (wrapping products are the same in any order, CUDA's scan's too)."""
    if not isinstance(x, torch.Tensor) or x.is_complex() or not isinstance(dim, int):
        return NotImplemented
    out_dtype = dtype if dtype is not None else (x.dtype if x.is_floating_point() else torch.int64)
    if out_dtype.is_complex or out_dtype == torch.bool or device_type(x) != "cpu" and out_dtype.is_floating_point:
        return NotImplemented
    if x.ndim == 0:
        return x.to(out_dtype).clone()
    n = int(x.shape[dim])
    if n == 0 or n > _MAX_LEN or x.numel() * n > _MAX_WORK:
        return NotImplemented
    acc = _ACC.get(out_dtype, torch.int64)
    xt = x.to(out_dtype).to(acc).movedim(dim, -1)
    mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
    one = torch.ones((), dtype=acc, device=x.device)
    res = torch.where(mask, xt.unsqueeze(-2), one).prod(-1)
    return res.to(out_dtype).movedim(-1, dim).contiguous()


def _prefix_mask(n: int, device) -> torch.Tensor:
    """[i, j]: j <= i."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _cum_extreme(x, dim, largest: bool):
    """cummax (largest) / cummin of x along dim as eager's CPU kernel
    (cummax_cummin_helper) computes them: element i holds the extreme of elements
    0..i and the index of its last occurrence (`>=` / `<=` take later ties); a NaN
    makes the value NaN from there on, its index that of the latest NaN. Here each
    row i is a masked reduction over j <= i (O(n^2), only up to _MAX_WORK); the
    value is the element at the index found (so a -0.0 / 0.0 tie keeps eager's sign).
    Other inputs: NotImplemented."""
    if not isinstance(x, torch.Tensor) or device_type(x) != "cpu" or x.is_complex() or not isinstance(dim, int):
        return NotImplemented
    if x.ndim == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    n = int(x.shape[dim])
    if n == 0 or n > _MAX_LEN or x.numel() * n > _MAX_WORK:
        return NotImplemented
    xt = x.movedim(dim, -1)
    if xt.dtype == torch.bool:
        xt = xt.to(torch.int32)
    mask = _prefix_mask(n, x.device)                                    # [i, j]
    xj = xt.unsqueeze(-2)                                                # [..., 1, j]
    pos = torch.arange(n, dtype=torch.int64, device=x.device)
    none = torch.full((), -1, dtype=torch.int64, device=x.device)
    if xt.is_floating_point():
        low = torch.full((), float("-inf") if largest else float("inf"), dtype=xt.dtype, device=x.device)
        nan = xj != xj
        keep = mask & ~nan
    else:
        info = torch.iinfo(xt.dtype)
        low = torch.full((), info.min if largest else info.max, dtype=xt.dtype, device=x.device)
        nan, keep = None, mask.expand(xj.shape[:-2] + (n, n))
    masked = torch.where(keep, xj, low)
    best = masked.amax(-1, keepdim=True) if largest else masked.amin(-1, keepdim=True)   # [..., i, 1]
    idx = torch.where(keep & (xj == best), pos, none).amax(-1)           # last occurrence
    if nan is not None:
        last_nan = torch.where(mask & nan, pos, none).amax(-1)
        idx = torch.where(last_nan >= 0, last_nan, idx)
    # the element at idx, exactly: the only one the mask keeps
    pick = pos == idx.unsqueeze(-1)
    lowest = torch.full((), float("-inf"), dtype=xt.dtype, device=x.device) if xt.is_floating_point() else \
        torch.full((), torch.iinfo(xt.dtype).min, dtype=xt.dtype, device=x.device)
    values = torch.where(pick, xj, lowest).amax(-1)
    if x.dtype == torch.bool:
        values = values.to(torch.bool)
    return values.movedim(-1, dim).contiguous(), idx.movedim(-1, dim).contiguous()


def cummax(x, dim):
    """aten.cummax (see _cum_extreme)."""
    return _cum_extreme(x, dim, True)


def cummin(x, dim):
    """aten.cummin (see _cum_extreme)."""
    return _cum_extreme(x, dim, False)


def logcumsumexp(x, dim):
    """aten.logcumsumexp: torch-mlir lowers it to its scan (no CPU kernel). Element i is
    the log-sum-exp of elements 0..i (a masked logsumexp, -inf outside the prefix, O(n^2),
    only up to _MAX_WORK) in float64, as eager's CPU kernel accumulates floats in double
    (bfloat16/float16 in float), rounded once; infinities and NaN as torch.logsumexp
    (an all -inf prefix gives -inf, +inf gives +inf, NaN propagates). Other inputs:
    NotImplemented."""
    if not isinstance(x, torch.Tensor) or device_type(x) != "cpu" or not x.is_floating_point() or \
            not isinstance(dim, int):
        return NotImplemented
    if x.ndim == 0:
        return x.clone()
    n = int(x.shape[dim])
    if n == 0 or n > _MAX_LEN or x.numel() * n > _MAX_WORK:
        return NotImplemented
    xt = x.movedim(dim, -1).to(torch.float64)
    low = torch.full((), float("-inf"), dtype=torch.float64, device=x.device)
    masked = torch.where(_prefix_mask(n, x.device), xt.unsqueeze(-2), low)
    return torch.logsumexp(masked, -1).to(x.dtype).movedim(-1, dim).contiguous()
