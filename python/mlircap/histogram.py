"""aten.histc compiled as eager's CPU kernel counts (torch-mlir has no lowering: it ran
through torch).

Eager (ATen/native/cpu/HistogramKernel.cpp: histc's linear interpolation, without the
local search torch.histogram makes) makes bins + 1 edges with linspace(min, max) in the
input's dtype, skips elements outside [left, right] = [edges[0], edges[-1]] (NaN too), and
puts element x in bin

    pos = int64((x - left) * bins / (right - left))     (each step in the dtype:
                                                         c10::BFloat16 rounds every one)
    pos = bins - 1 where pos == bins                    (the last bin holds its right edge)

adding 1 in the dtype (an element on an inner edge may land in the bin below it, as in
eager). Here the end edges of Python-number bounds are eager's own linspace, evaluated
when the graph is traced, the position is computed with the same roundings, and each
bin counts its elements (one-hot comparisons: only up to MAX_WORK element x bin pairs). Counts are exact where eager's
are: float32 below 2^24 elements, bfloat16 up to 256, float16 up to 2048 (past that not
every count is a number of the dtype, and how eager's accumulation rounds is not modelled;
c10::Half rounds every step as c10::BFloat16 does). min == max (the bounds taken from the data) and other cases return
NotImplemented: the op stays whole and runs through torch.

CUDA (SummaryOps.cu, getBin): float32 with Python-number bounds is counted alike there,
`(x - min) * nbins / (max - min)` in float32 truncated, the last bin holding its right edge,
[min, max] the bounds (the end edges of the CPU's linspace are those numbers in float32), a
count exact below 2^24: the same decomposition. bfloat16 there computes the position in
float32 (at::acc_type), not in rounded steps: it keeps its island, as do the bounds from the
data (rewrite: an error flag needs the rerun).

min == max takes the bounds from the data (rewrite(), from bounds.add_bounds_checks): eager
uses the smallest and the largest element (each rounded to the dtype as its linspace's end
edges are; one apart where they are equal: min - 1 and max + 1, computed exactly and rounded
once), and raises where they are not finite (a NaN or infinite element). Here they are the
graph's amin / amax, with the same position arithmetic; a non-finite bound, or bounds that
are still equal after the rounding (min - 1 == min at 1e8 in float32: eager's 0 / 0), set
the error flag, and the call reruns eagerly (eager's error, or its value).
"""
from __future__ import annotations

import math

import torch
from .target import device_type

MAX_WORK = 1 << 22
_MAX_COUNT = {torch.float32: 1 << 24, torch.bfloat16: 256, torch.float16: 2048}


def _round(x: torch.Tensor, dtype) -> torch.Tensor:
    """float32 `x` rounded to `dtype` (bfloat16, float16: c10's rounding of each step), as float32."""
    return x if dtype == torch.float32 else x.to(dtype).to(torch.float32)


def _data_bounds(bins: int, dtype):
    """fn(x) -> (histc(x, bins, min=m, max=m) for any m, error flag), module docstring."""
    scale = float(torch.tensor(float(bins)).to(dtype).float())   # bins in the dtype

    def fn(x):
        xf = x.reshape(-1).to(torch.float32)
        lo, hi = torch.amin(xf), torch.amax(xf)
        same = lo == hi
        left = _round(torch.where(same, lo - 1, lo), dtype)
        right = _round(torch.where(same, hi + 1, hi), dtype)
        flag = ~(torch.isfinite(left) & torch.isfinite(right) & (left < right))
        safe = ~flag
        left = torch.where(safe, left, torch.zeros_like(left))
        right = torch.where(safe, right, torch.ones_like(right))
        valid = (xf >= left) & (xf <= right)
        xs = torch.where(valid, xf, left)
        span = _round(right - left, dtype)
        pos = _round(_round(_round(xs - left, dtype) * scale, dtype) / span, dtype)
        pos = pos.to(torch.int64)
        pos = torch.where(pos == bins, pos - 1, pos)
        hit = valid.unsqueeze(-1) & (pos.unsqueeze(-1) == torch.arange(bins))
        return hit.sum(0).to(dtype), flag

    return fn


def rewrite(graph, node):
    """aten.histc with min == max (Python numbers: the bounds from the data) of a CPU
    float32/bfloat16/float16 tensor, replaced by _data_bounds' form: its error flag, or None (left as
    it is: the sizes histc() takes, and an empty input)."""
    import torch.fx as fx

    from .polynomials import inline

    args = list(node.args) + [None] * (4 - len(node.args))
    x, bins, lo, hi = (args[0], node.kwargs.get("bins", args[1] if args[1] is not None else 100),
                       node.kwargs.get("min", args[2] if args[2] is not None else 0),
                       node.kwargs.get("max", args[3] if args[3] is not None else 0))
    v = x.meta.get("val") if isinstance(x, fx.Node) else None
    if not isinstance(v, torch.Tensor) or device_type(v) != "cpu" or v.dtype not in _MAX_COUNT or \
            not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in (bins, lo, hi)) or \
            float(lo) != float(hi) or int(bins) <= 0:
        return None
    n, bins = v.numel(), int(bins)
    if n == 0 or n > _MAX_COUNT[v.dtype] or n * (bins + 1) > MAX_WORK:
        return None
    flag = inline(graph, node, _data_bounds(bins, v.dtype), [x])
    return None if flag is None else [flag]


def histc(x, bins=100, min=0, max=0):  # noqa: A002 - aten's argument names
    """aten.histc on the CPU (module docstring); NotImplemented for what it does not handle."""
    from .ranges import _now

    if not isinstance(x, torch.Tensor) or x.dtype not in _MAX_COUNT or device_type(x) != "cpu" and not (
            device_type(x) == "cuda" and x.dtype == torch.float32):
        return NotImplemented
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (bins, min, max)):
        return NotImplemented
    bins, lo, hi = int(bins), float(min), float(max)
    n = x.numel()
    if bins <= 0 or not lo < hi or not all(math.isfinite(v) for v in (lo, hi)):
        return NotImplemented   # eager raises, or takes the bounds from the data (min == max)
    if n > _MAX_COUNT[x.dtype] or n * (bins + 1) > MAX_WORK:
        return NotImplemented
    dtype = x.dtype
    edges = _now(lambda: torch.linspace(lo, hi, bins + 1, dtype=dtype).to(torch.float32))
    left, right = _now(lambda: (float(edges[0]), float(edges[-1])))
    if not left < right:
        # bounds apart as numbers, one value in the dtype (min=1.0, max=1.0 + 1e-9 in float32):
        # eager's position divides by 0; its count is not modelled (it ran 0 where eager's 1)
        return NotImplemented
    xf = x.reshape(-1).to(torch.float32)          # bfloat16 values exactly
    valid = (xf >= left) & (xf <= right)
    xs = torch.where(valid, xf, torch.full((), left, dtype=torch.float32))
    # the position by division, each step rounded to the dtype as eager's scalar_t arithmetic
    # (right - left and bins, an int64 converted to the dtype, are numbers here)
    span = _now(lambda: float((edges[-1:].to(dtype) - edges[:1].to(dtype)).float()))
    scale = _now(lambda: float(torch.tensor(float(bins)).to(dtype).float()))
    pos = _round(_round(_round(xs - left, dtype) * scale, dtype) / span, dtype)
    pos = pos.to(torch.int64)
    pos = torch.where(pos == bins, pos - 1, pos)
    hit = valid.unsqueeze(-1) & (pos.unsqueeze(-1) == torch.arange(bins))
    return hit.sum(0).to(dtype)


# ----------------------------------------------------------------------------- histogram
# torch.histogram (aten.histogram.bins_tensor / .bin_ct), which torch-mlir cannot lower, as
# eager's CPU kernel (ATen/native/cpu/HistogramKernel.cpp) counts: an element outside
# [edges[0], edges[-1]] (NaN too) is skipped; its bin is std::upper_bound(edges, x) - 1
# (bins_tensor, whatever the order of the edges), or for bin_ct the interpolated
#     pos = int64((x - edges[0]) * (n_edges - 1) / (edges[-1] - edges[0]))   (in the dtype)
# then upper_bound over edges[max(pos - 1, 0) : min(pos + 2, n_edges)]; the last edge
# belongs to the last bin. Here upper_bound is libstdc++'s binary search, step by step for
# every element at once (bit_length(n_edges) masked steps), so the bins are eager's for any
# edges; weights are summed per bin (a sum in another order: the dtype's rounding), and
# density divides by the total and then by the bin widths, as eager does. bin_ct edges are
# eager's linspace of `range`, evaluated when the graph is traced; without a range they
# come from the data (eager raises on a non-finite element): that form stays whole.

_HIST_DTYPES = (torch.float32, torch.float64)


def _upper_bound(edges: torch.Tensor, x: torch.Tensor, first: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """libstdc++'s std::upper_bound(edges + first, edges + first + length, x) - edges for
    each element of `x` (int64 `first` / `length` per element)."""
    n = edges.shape[0]
    for _ in range(n.bit_length()):
        half = torch.div(length, 2, rounding_mode="floor")
        middle = first + half
        v = torch.index_select(edges, 0, torch.clamp(middle, 0, n - 1))
        left = x < v
        active = length > 0
        first = torch.where(active & ~left, middle + 1, first)
        length = torch.where(active, torch.where(left, half, length - half - 1), length)
    return first


def _counted(x, edges, pos, weight, density, bins):
    """The histogram of the elements of `x` at bins `pos` (as eager: outside the edges
    skipped, the last edge in the last bin), with its weights and density."""
    valid = (x >= edges[0]) & (x <= edges[-1])
    pos = torch.where(pos == bins, pos - 1, pos)
    hit = valid.unsqueeze(-1) & (pos.unsqueeze(-1) == torch.arange(bins, device=x.device))
    if weight is None:
        hist = hit.sum(0).to(x.dtype)
    else:
        hist = torch.where(hit, weight.reshape(-1).unsqueeze(-1), torch.zeros((), dtype=x.dtype)).sum(0)
    if density:
        hist = hist / hist.sum()
        hist = hist / (edges[1:] - edges[:-1])
    return hist


def _histogram_args_ok(x, weight, bins) -> bool:
    return isinstance(x, torch.Tensor) and device_type(x) == "cpu" and x.dtype in _HIST_DTYPES and \
        (weight is None or isinstance(weight, torch.Tensor) and weight.dtype == x.dtype and
         weight.shape == x.shape) and 0 < bins and x.numel() * (bins + 1) <= MAX_WORK


def histogram_bins_tensor(x, bins, *, weight=None, density=False):
    """aten.histogram.bins_tensor (the comment above); NotImplemented where not handled."""
    if not isinstance(bins, torch.Tensor) or bins.dim() != 1 or bins.dtype != getattr(x, "dtype", None) or \
            not _histogram_args_ok(x, weight, bins.shape[0] - 1):
        return NotImplemented
    n = bins.shape[0]
    xf = x.reshape(-1)
    zero = torch.zeros(xf.shape, dtype=torch.int64, device=x.device)
    pos = _upper_bound(bins, xf, zero, zero + n) - 1
    return _counted(xf, bins, pos, weight, density, n - 1), bins.clone()


def histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):  # noqa: A002 - aten's names
    """aten.histogram.bin_ct with a `range` (the comment above); NotImplemented otherwise."""
    from .ranges import _now

    if not isinstance(bins, int) or range is None or len(range) != 2 or not _histogram_args_ok(x, weight, bins):
        return NotImplemented
    lo, hi = (float(v) for v in range)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        return NotImplemented   # eager raises
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    dtype, n = x.dtype, bins + 1
    edges = _now(lambda: torch.linspace(lo, hi, n, dtype=dtype))
    left, right = _now(lambda: (edges[0].item(), edges[-1].item()))
    if not left < right:
        return NotImplemented   # one value in the dtype (range=(1.0, 1.0 + 1e-9)): as histc
    span = _now(lambda: (edges[-1] - edges[0]).item())   # in the dtype, as eager's
    edges = torch.ops.aten.lift_fresh_copy.default(edges)   # a constant of the graph
    xf = x.reshape(-1)
    valid = (xf >= left) & (xf <= right)
    # eager: (x - left) * (n_edges - 1) / (right - left), each step in the dtype; int64
    # truncation of a non-negative value (elements outside are skipped: 0 for them here)
    pos = torch.where(valid, (xf - left) * float(n - 1) / span, torch.zeros((), dtype=dtype)).to(torch.int64)
    first = torch.clamp(pos - 1, min=0)
    length = torch.clamp(pos + 2, max=n) - first
    pos = _upper_bound(edges, xf, first, length) - 1
    return _counted(xf, edges, pos, weight, density, bins), edges.clone()
