"""grid_sampler_3d as torch's own decomposition of grid_sampler_2d does the 2-D case.

torch-mlir has no lowering for the 3-D op and torch has no decomposition of it. This is
torch's `_grid_sampler_2d` (torch/_decomp/decompositions.py) with a third coordinate:
coordinates unnormalized from [-1, 1], padded (zeros: out-of-range corners weigh 0;
border: clamped; reflection: reflected, then clamped), then trilinear (the 8 corners
weighted like eager's tnw ... bse) or nearest (round half to even, as nearbyint). The
gathers' indices come from the grid, clamped into the input (they compile like the 2-D
decomposition's, bounds.py). Float32/float64 only (partition.EAGER_NUMERICS keeps
low-precision grid sampling whole); bicubic is not defined in 3-D.
"""
from __future__ import annotations

import torch


def grid_sampler_3d(a, grid, interpolation_mode=0, padding_mode=0, align_corners=False):
    if not (isinstance(a, torch.Tensor) and isinstance(grid, torch.Tensor)) or a.dim() != 5 or \
            grid.dim() != 5 or grid.shape[-1] != 3 or interpolation_mode not in (0, 1) or \
            padding_mode not in (0, 1, 2) or a.dtype not in (torch.float32, torch.float64) or \
            grid.dtype != a.dtype or a.numel() == 0 or grid.numel() == 0:
        return NotImplemented
    N, C, iD, iH, iW = a.shape
    _, oD, oH, oW, _ = grid.shape

    def unnormalize(coords, size):
        mul = (size * 0.5 - 0.5) if align_corners else (size * 0.5)
        return coords * mul + (size * 0.5 - 0.5)

    def reflect(coords, twice_low, twice_high):
        if twice_low == twice_high:
            return torch.zeros_like(coords)
        low = twice_low / 2
        span = (twice_high - twice_low) / 2
        c2 = (coords - low).abs()
        # torch's decomposition takes fmod(c2, span), which torch-mlir cannot lower: the
        # same remainder from the whole number of spans (exact but where c2 / span rounds
        # across an integer, and reflection is continuous there)
        flips = (c2 / span).floor()
        extra = c2 - flips * span
        return torch.where(flips - 2 * (flips / 2).floor() == 0, extra + low, span + low - extra)

    def source_index(coords, size):
        c = unnormalize(coords, size)
        if padding_mode == 1:
            return torch.clamp(c, 0, size - 1)
        if padding_mode == 2:
            c = reflect(c, 0, 2 * (size - 1)) if align_corners else reflect(c, -1, 2 * size - 1)
            return torch.clamp(c, 0, size - 1)
        return c

    g = grid.view(N, 1, oD, oH, oW, 3).expand(N, C, oD, oH, oW, 3)
    ix = source_index(g[..., 0], iW)
    iy = source_index(g[..., 1], iH)
    iz = source_index(g[..., 2], iD)
    n_idx = torch.arange(N, device=a.device).view(N, 1, 1, 1, 1)
    c_idx = torch.arange(C, device=a.device).view(1, C, 1, 1, 1)

    def summand(xs, ys, zs, w):
        inside = (xs >= 0) & (xs < iW) & (ys >= 0) & (ys < iH) & (zs >= 0) & (zs < iD)
        xi, yi, zi = (torch.where(inside, t, 0).to(torch.int64) for t in (xs, ys, zs))
        value = a[n_idx, c_idx, zi, yi, xi]
        # a corner outside adds nothing (not 0 * a value that may be inf or NaN)
        return torch.where(inside, value if w is None else value * w, 0)

    if interpolation_mode == 1:
        return summand(ix.round(), iy.round(), iz.round(), None)
    x0, y0, z0 = ix.floor(), iy.floor(), iz.floor()
    x1, y1, z1 = x0 + 1, y0 + 1, z0 + 1
    out = None
    # eager's order: tnw, tne, tsw, tse, bnw, bne, bsw, bse (t: z0, b: z1; n: y0, s: y1; w: x0, e: x1)
    for zs, wz in ((z0, z1 - iz), (z1, iz - z0)):
        for ys, wy in ((y0, y1 - iy), (y1, iy - y0)):
            for xs, wx in ((x0, x1 - ix), (x1, ix - x0)):
                term = summand(xs, ys, zs, wx * wy * wz)
                out = term if out is None else out + term
    return out
