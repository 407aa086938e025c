"""aten._pdist_forward (F.pdist) as a gather of row pairs and a reduction (torch-mlir has no
lowering: it ran through torch, 'aten._pdist_forward (unsupported)').

Eager (ATen/native/cpu/DistanceOpsKernel.cpp) computes, for each pair i < j of rows in
row-major order (i, then j), the p-norm of |x[i] - x[j]| with one of its reductions:

    p == 0:    sum of min(ceil(|d|), 1)       (a NaN difference gives NaN)
    p == 1:    sum of |d|
    p == 2:    sqrt of the sum of d * d
    p == inf:  max of |d| (NaN propagates), 0 for rows of no element
    else:      (sum of |d| ** p) ** (1 / p)

Here the pairs are the constant indices of torch.triu_indices(n, n, 1) (the same order),
the differences gathered at once ((pairs, m) elements: only up to MAX_WORK) and reduced
along the row: eager's values up to the order of the sum (float32 / float64, the dtypes
eager's kernel takes). The backward stays eager's _pdist_backward (autograd runs above the
decomposition)."""
from __future__ import annotations

import math

import torch

MAX_WORK = 1 << 22


def pdist_forward(x, p=2.0):
    """aten._pdist_forward; NotImplemented for what it does not handle (the op stays whole)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in (torch.float32, torch.float64) or \
            not isinstance(p, (int, float)) or isinstance(p, bool) or math.isnan(p) or p < 0:
        return NotImplemented
    n, m = x.shape
    pairs = n * (n - 1) // 2
    if pairs * max(m, 1) > MAX_WORK:
        return NotImplemented
    if pairs == 0:
        return x.new_zeros((0,))
    if m == 0:
        return x.new_zeros((pairs,))
    idx = torch.triu_indices(n, n, 1, device=x.device)
    d = (torch.index_select(x, 0, idx[0]) - torch.index_select(x, 0, idx[1])).abs()
    p = float(p)
    if p == 0:
        return torch.clamp(torch.ceil(d), max=1.0).sum(-1)
    if p == 1:
        return d.sum(-1)
    if p == 2:
        return torch.sqrt((d * d).sum(-1))
    if math.isinf(p):
        return d.amax(-1)
    return d.pow(p).sum(-1).pow(1.0 / p)
