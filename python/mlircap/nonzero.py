"""nonzero_static as a static-shape computation: torch-mlir cannot lower it.

`nonzero_static(x, size=k, fill_value=f)` is a (k, x.dim()) int64 tensor: the indices
of x's first k nonzero elements in row-major order, rows past the count filled with f.
Each element's rank among the nonzeros is a sum over a lower-triangular mask (as
frontend's cumsum), and output row r selects the element of rank r: both O(n * max(n, k))
multiply-adds, so only up to _MAX_WORK; larger inputs keep the op (an eager island).
"""
from __future__ import annotations

import torch

_MAX_WORK = 1 << 20


def nonzero_static(x, *, size, fill_value=-1):
    if not isinstance(x, torch.Tensor) or x.is_complex() or not isinstance(size, int):
        return NotImplemented
    n = x.numel()
    if n == 0 or size == 0 or x.dim() == 0 or n * max(n, size) > _MAX_WORK:
        return NotImplemented
    nz = (x != 0).reshape(n).to(torch.int64)
    below = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()   # j <= i
    rank = (below.to(torch.int64) * nz).sum(1) - 1                         # among nonzeros, at i
    rows = torch.arange(size, dtype=torch.int64, device=x.device)
    pick = (rank.unsqueeze(0) == rows.unsqueeze(1)) & (nz.unsqueeze(0) == 1)   # [size, n]
    flat = (pick.to(torch.int64) * torch.arange(n, dtype=torch.int64, device=x.device)).sum(1)
    found = pick.any(1)
    sizes = list(x.shape)
    cols = []
    stride = n
    for s in sizes:
        stride //= s
        cols.append((flat // stride) % s)
    idx = torch.stack(cols, 1)
    return torch.where(found.unsqueeze(1), idx, torch.full_like(idx, fill_value))
