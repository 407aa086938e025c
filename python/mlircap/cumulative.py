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
CUDA's kernel (a parallel scan in float32) keeps its island.
"""
from __future__ import annotations

import torch

_MAX_LEN = 1024
_MAX_WORK = 1 << 24   # elements x axis length
_ACC = {torch.float32: torch.float64, torch.float64: torch.float64, torch.bfloat16: torch.float32,
        torch.float16: torch.float32}


def cumprod(x, dim, dtype=None):
    """aten.cumprod; NotImplemented for what it does not handle."""
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu" or x.is_complex() or not isinstance(dim, int):
        return NotImplemented
    out_dtype = dtype if dtype is not None else (x.dtype if x.is_floating_point() else torch.int64)
    if out_dtype.is_complex or out_dtype == torch.bool:
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
    return res.to(out_dtype).movedim(-1, dim)
