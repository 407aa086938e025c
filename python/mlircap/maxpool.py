"""max_pool{2,3}d_with_indices as ops torch-mlir lowers for every input, with eager's
values and indices.

torch-mlir lowers max_pool2d_with_indices only for batched floating inputs without
ceil_mode: on integers, unbatched (C, H, W) inputs and ceil_mode it fails (and its
max_pool3d lowering of integers crashes), so those pools ran through torch. Here
the pool is data movement and reductions only: the input padded, one strided slice
per kernel position stacked on a last axis, and per window

* the value: the maximum over the positions inside the input (padding never wins;
  no sentinel value is needed, so int64 works too), NaN where the window holds one;
* the index: eager's kernel (cpu_max_pool) scans the window in order and takes an
  element when `val > maxval || isnan(val)`, starting from the first position inside
  the input: the last NaN of a window that holds one, else the first position inside
  the input whose value is the maximum (ties, and windows of -inf only);
* the flat index into the input plane, from the window's position and the kernel
  offset (integer arithmetic on constants and the local index).

Exact in every dtype: nothing is rounded, values are only compared and selected.
"""
from __future__ import annotations

import itertools
import math

import torch
from .target import device_type

aten = torch.ops.aten


def _expand(val, n: int, default=None) -> list[int]:
    if not isinstance(val, (list, tuple)):
        return [int(val)] * n
    if not val:
        return list(default)
    return [int(v) for v in val] * n if len(val) == 1 else [int(v) for v in val]


def _output_size(size: int, k: int, pad: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    from torch._meta_registrations import pooling_output_shape

    return int(pooling_output_shape(size, k, pad, stride, dilation, ceil_mode))


def max_pool_with_indices(x: torch.Tensor, nd: int, kernel_size, stride=(), padding=(0,), dilation=(1,),
                          ceil_mode: bool = False):
    """(values, indices) of max_pool{nd}d_with_indices(x, ...), as eager computes them
    (see the module docstring); NotImplemented for inputs it does not handle."""
    if x.dtype == torch.bool or x.is_complex() or x.ndim not in (nd + 1, nd + 2) or x.numel() == 0:
        return NotImplemented
    ks = _expand(kernel_size, nd)
    st = _expand(stride, nd, default=ks)
    pa = _expand(padding, nd)
    di = _expand(dilation, nd)
    batched = x.ndim == nd + 2
    if not batched:
        x = x.unsqueeze(0)
    dtype = x.dtype
    if dtype in (torch.bfloat16, torch.float16):
        x = x.float()    # exact; the values selected convert back exactly
    lead = x.ndim - nd
    sizes = [int(s) for s in x.shape[lead:]]
    outs = [_output_size(sizes[d], ks[d], pa[d], st[d], di[d], ceil_mode) for d in range(nd)]
    if any(o <= 0 for o in outs) or not all(
            any(0 <= o * st[d] - pa[d] + k * di[d] < sizes[d] for k in range(ks[d]))
            for d in range(nd) for o in range(outs[d])):
        return NotImplemented   # a window without an element of the input: eager's index is its own
    # pad on both sides so that every window lies inside the padded tensor
    pads = []
    for d in reversed(range(nd)):
        need = (outs[d] - 1) * st[d] + (ks[d] - 1) * di[d] + 1
        pads += [pa[d], max(0, need - sizes[d] - pa[d])]
    xp = aten.constant_pad_nd.default(x, pads, 0)
    # one strided slice per kernel position, stacked on a last axis: (..., out_0, .., out_n-1, K)
    slices = []
    offsets = list(itertools.product(*[range(k) for k in ks]))
    for off in offsets:
        s = xp
        for d in range(nd):
            start = off[d] * di[d]
            s = aten.slice.Tensor(s, lead + d, start, start + (outs[d] - 1) * st[d] + 1, st[d])
        slices.append(s)
    windows = aten.stack.default(slices, -1)
    K = len(offsets)
    # which window positions lie inside the input (not padding): constants of shape (out..., K)
    dev = x.device
    kpos = torch.arange(K, device=dev, dtype=torch.int64)
    valid = None
    div = K
    for d in range(nd):
        div //= ks[d]
        o = torch.arange(outs[d], device=dev, dtype=torch.int64) * st[d] - pa[d]
        k = (kpos // div) % ks[d] * di[d]    # offset along dim d of each kernel position
        coord = o.unsqueeze(1) + k.unsqueeze(0)     # (out_d, K)
        ok = (coord >= 0) & (coord < sizes[d])
        ok = ok.reshape([1] * d + [outs[d]] + [1] * (nd - 1 - d) + [K])
        valid = ok if valid is None else valid & ok
    low = float("-inf") if x.is_floating_point() else torch.iinfo(x.dtype).min
    masked = torch.where(valid, windows, torch.full((), low, dtype=x.dtype, device=dev))
    values = torch.amax(masked, -1)
    first_max = torch.amin(torch.where(valid & (masked == values.unsqueeze(-1)), kpos, K), -1)
    if x.is_floating_point():
        nan = torch.isnan(windows) & valid
        has_nan = torch.any(nan, -1)
        last_nan = torch.amax(torch.where(nan, kpos, -1), -1)
        values = torch.where(has_nan, torch.full((), float("nan"), dtype=x.dtype, device=dev), values)
        local = torch.where(has_nan, last_nan, first_max)
    else:
        local = first_max
    # flat index into the input plane: sum over dims of coord_d * (product of later sizes)
    flat = None
    div = K
    for d in range(nd):
        div //= ks[d]
        kd = (local // div) % ks[d]
        o = torch.arange(outs[d], device=dev, dtype=torch.int64) * st[d] - pa[d]
        o = o.reshape([outs[d]] + [1] * (nd - 1 - d))
        coord = o + kd * di[d]
        flat = coord if flat is None else flat * sizes[d] + coord
    values = values.to(dtype)
    if not batched:
        values, flat = values.squeeze(0), flat.squeeze(0)
    return values, flat


_MAX_BACKWARD_POSITIONS = 64   # kernel positions: one full-size addend each


def _spread(t: torch.Tensor, dim: int, step: int, offset: int, size: int) -> torch.Tensor:
    """`t` laid out along `dim` on a grid of `size` positions: element o goes to position
    o * step + offset, every other position holds zero; elements that land outside
    [0, size) are dropped. Data movement only (pad, reshape, slice)."""
    if step > 1:   # o -> o * step: a zero after each element
        t = t.unsqueeze(dim + 1)
        pads = [0, 0] * (t.ndim - dim - 2) + [0, step - 1]
        t = aten.constant_pad_nd.default(t, pads, 0)
        shape = list(t.shape)
        t = t.reshape(shape[:dim] + [shape[dim] * step] + shape[dim + 2:])
    length = int(t.shape[dim])
    if offset < 0:   # drop the elements before position 0
        t = aten.slice.Tensor(t, dim, min(-offset, length), length)
        offset, length = 0, max(0, length + offset)
    if offset + length > size:   # and those at size or after
        t = aten.slice.Tensor(t, dim, 0, max(0, size - offset))
        length = max(0, size - offset)
    pads = [0, 0] * (t.ndim - dim - 1) + [offset, size - offset - length]
    return aten.constant_pad_nd.default(t, pads, 0)


def max_pool_backward(grad_output: torch.Tensor, x: torch.Tensor, nd: int, kernel_size, stride=(), padding=(0,),
                      dilation=(1,), ceil_mode: bool = False, indices: torch.Tensor | None = None):
    """max_pool{nd}d_with_indices_backward as eager's CPU kernel computes it (and CUDA's
    max_pool2d kernel: bfloat16/float16 summed in float32), without a scatter: eager
    adds each output position's gradient to the input element its index names
    (`grad_input[index] += grad_output`, in the gradient's dtype, output positions
    in row-major order). Here, for each kernel position k (row-major), the gradients of
    the windows whose index is the element under k (compared with constants, so no
    index is ever dereferenced) are laid out on the input grid at that element
    (_spread); the input element of window o under k is o * stride + k * dilation -
    padding, so later windows come from earlier kernel positions: summing the layouts
    over kernel positions in reverse order, from zero, adds each element's gradients in
    eager's order, with eager's rounding. Indices as max_pool_with_indices gives them
    (each inside its window); NotImplemented for what it does not handle."""
    if indices is None or not grad_output.is_floating_point() or x.ndim not in (nd + 1, nd + 2):
        return NotImplemented
    cuda = device_type(grad_output) == "cuda"
    if not (device_type(grad_output) == "cpu" or cuda and nd == 2):
        return NotImplemented   # CUDA's max_pool3d backward adds with atomics, in any order
    if grad_output.shape != indices.shape or grad_output.ndim != x.ndim or x.numel() == 0:
        return NotImplemented
    dtype = grad_output.dtype
    if cuda and dtype in (torch.bfloat16, torch.float16):
        # CUDA's kernel (max_pool_backward_nchw/_nhwc) sums each input element's
        # gradients in the same order, in float32 (accscalar_t), and rounds once
        out = max_pool_backward(grad_output.float(), x, nd, kernel_size, stride, padding, dilation, ceil_mode,
                                indices)
        return out if out is NotImplemented else out.to(dtype)
    ks = _expand(kernel_size, nd)
    st = _expand(stride, nd, default=ks)
    pa = _expand(padding, nd)
    di = _expand(dilation, nd)
    K = 1
    for k in ks:
        K *= k
    if K > _MAX_BACKWARD_POSITIONS:
        return NotImplemented
    lead = x.ndim - nd
    sizes = [int(s) for s in x.shape[lead:]]
    outs = [int(s) for s in grad_output.shape[lead:]]
    dev = grad_output.device
    zero = torch.zeros((), dtype=grad_output.dtype, device=dev)
    grad = torch.zeros(x.shape, dtype=grad_output.dtype, device=dev)
    for off in reversed(list(itertools.product(*[range(k) for k in ks]))):
        # the flat input index of the element under kernel position `off` in each window
        flat = None
        for d in range(nd):
            coord = torch.arange(outs[d], device=dev, dtype=torch.int64) * st[d] - pa[d] + off[d] * di[d]
            coord = coord.reshape([outs[d]] + [1] * (nd - 1 - d))
            flat = coord if flat is None else flat * sizes[d] + coord
        mine = torch.where(indices == flat, grad_output, zero)
        for d in range(nd):
            mine = _spread(mine, lead + d, st[d], off[d] * di[d] - pa[d], sizes[d])
        grad = grad + mine
    return grad


def adaptive_max_pool(nd: int):
    """aten.adaptive_max_pool{nd}d of a floating tensor whose windows are not all one size
    (torch-mlir lowers equal windows only; 8 -> 3 has windows of 3, 4 and 3: the op ran
    through torch). Output element i of a dim of length L covers [floor(i L / O),
    ceil((i + 1) L / O)); each dim is gathered to its O x K windows (K the longest, a
    shorter window repeating its last position, after it in the scan order, so neither
    a first maximum nor a last NaN moves), and per window eager's choice (cpu kernel:
    `val > maxval || isnan(val)` from maxval -inf at the window's first position): the
    last NaN, else the first position of the maximum. Equal windows are a max pool; other
    inputs keep the op."""

    def decomposition(x, output_size):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() not in (nd + 1, nd + 2) \
                or x.numel() == 0:
            return NotImplemented
        sizes, outs = list(x.shape[-nd:]), list(output_size)
        if len(outs) != nd:
            return NotImplemented
        if all(o and length % o == 0 for length, o in zip(sizes, outs)):
            # windows of one size: the max pool of that kernel and stride, whose decomposition
            # (frontend._pool_index_of_last_nan) gives a window holding a NaN eager's index;
            # torch-mlir's adaptive pool left it -1 (and the backward wrote through it:
            # 'double free or corruption', bench/fuzz_graphs.py seed 162 --grad)
            ks = [length // o for length, o in zip(sizes, outs)]
            pool = aten.max_pool2d_with_indices.default if nd == 2 else aten.max_pool3d_with_indices.default
            return pool(x, ks, ks)
        lead = x.dim() - nd
        v, flat = x, None
        for d, (length, o) in enumerate(zip(sizes, outs)):
            k = max(-(-((i + 1) * length) // o) - (i * length) // o for i in range(o))
            i = torch.arange(o, device=x.device)
            start, end = (i * length) // o, ((i + 1) * length + o - 1) // o
            idx = torch.minimum(start[:, None] + torch.arange(k, device=x.device)[None, :], end[:, None] - 1)
            p = lead + 2 * d
            v = v.index_select(p, idx.flatten()).unflatten(p, (o, k))
            inner = 1
            for s in sizes[d + 1:]:
                inner *= s
            term = (idx * inner).reshape([1] * (2 * d) + [o, k] + [1] * (2 * (nd - d - 1)))
            flat = term if flat is None else flat + term
        perm = list(range(lead)) + [lead + 2 * d for d in range(nd)] + [lead + 2 * d + 1 for d in range(nd)]
        v = v.permute(perm).flatten(x.dim())   # (..., O1, .., Ond, window)
        flat = flat.permute([2 * d for d in range(nd)] + [2 * d + 1 for d in range(nd)]).flatten(nd)
        nan = torch.isnan(v)
        order = torch.arange(v.shape[-1], device=x.device, dtype=torch.int32) + 1
        last_nan = torch.argmax(nan.to(torch.int32) * order, -1)
        first_max = torch.argmax((v == torch.amax(v, -1, keepdim=True)).to(torch.int32), -1)
        pick = torch.where(nan.any(-1), last_nan, first_max).unsqueeze(-1)
        values = torch.gather(v, -1, pick).squeeze(-1)
        indices = torch.gather(flat.expand(v.shape), -1, pick).squeeze(-1)
        return values, indices

    return decomposition


# Which random sample of a plane places each spatial dim's windows (ATen's
# FractionalMaxPool2d/3d.cpp): 2d reads W's from sample 0 and H's from sample 1.
_FRACTIONAL_SAMPLE = {2: (1, 0), 3: (0, 1, 2)}


def _rounded(t: torch.Tensor, dtype) -> torch.Tensor:
    """float32 `t` rounded to `dtype` (bfloat16 / float16: c10's rounding of each step)."""
    return t if dtype in (torch.float32, torch.float64) else t.to(dtype).to(torch.float32)


def _fractional_starts(sample: torch.Tensor, size: int, out: int, k: int) -> torch.Tensor:
    """ATen's generate_intervals for every plane: (..., out) int64 window starts,
    start_i = int((i + sample) * alpha) - int(sample * alpha), alpha = (size - k) / (out - 1),
    each step in the dtype, the last window at size - k."""
    dtype = sample.dtype
    last = torch.full((*sample.shape, 1), size - k, dtype=torch.int64, device=sample.device)
    if out <= 1:
        return last
    work = torch.float64 if dtype == torch.float64 else torch.float32
    from .ranges import _now   # (a number computed by eager while the graph is traced)

    alpha = _now(lambda: float((torch.tensor(float(size - k), dtype=dtype)
                                / torch.tensor(float(out - 1), dtype=dtype)).to(work)))
    s = sample.to(work).unsqueeze(-1)
    i = torch.arange(out - 1, device=sample.device).to(work)
    first = _rounded(_rounded(i + s, dtype) * alpha, dtype).to(torch.int32)
    base = _rounded(s * alpha, dtype).to(torch.int32)
    return torch.cat([(first - base).to(torch.int64), last], -1)


def fractional_max_pool(nd: int):
    """aten.fractional_max_pool{nd}d (torch-mlir cannot lower it: it ran through torch) as
    eager's CPU kernel computes it: per plane, each spatial dim's window starts come from
    the plane's random sample (_fractional_starts); each window of `kernel_size` is gathered
    from the flat plane and scanned as eager's kernel does (`val > maxval || isnan(val)`
    from -inf at the window's first element): the last NaN, else the first position of
    the maximum; the index is the flat position in the plane. Inputs eager rejects keep
    the op."""

    def decomposition(x, kernel_size, output_size, random_samples):
        if not isinstance(x, torch.Tensor) or not isinstance(random_samples, torch.Tensor) or \
                device_type(x) != "cpu" or x.dtype not in (torch.float32, torch.float64, torch.bfloat16,
                                                          torch.float16) or \
                random_samples.dtype != x.dtype or x.dim() not in (nd + 1, nd + 2) or x.numel() == 0:
            return NotImplemented
        ks, outs = [int(v) for v in kernel_size], [int(v) for v in output_size]
        sizes = [int(v) for v in x.shape[-nd:]]
        # (eager's 3d check is strict: out + k - 1 < size)
        if len(ks) != nd or len(outs) != nd or any(k <= 0 or o <= 0 or o + k - 1 > s - (nd == 3)
                                                   for k, o, s in zip(ks, outs, sizes)):
            return NotImplemented   # eager raises
        batched = x.dim() == nd + 2
        xb = x if batched else x.unsqueeze(0)
        n, c = int(xb.shape[0]), int(xb.shape[1])
        if tuple(random_samples.shape) != (n, c, nd):
            return NotImplemented
        plane = math.prod(sizes)
        flat = None   # (n, c, out_0.., out_nd-1, k_0.., k_nd-1) flat positions in the plane
        for d in range(nd):
            starts = _fractional_starts(random_samples[:, :, _FRACTIONAL_SAMPLE[nd][d]], sizes[d], outs[d], ks[d])
            pos = starts.unsqueeze(-1) + torch.arange(ks[d], device=x.device)   # (n, c, out_d, k_d)
            pos = _place(pos * math.prod(sizes[d + 1:]), n, c, d, nd, outs, ks)
            flat = pos if flat is None else flat + pos
        window = math.prod(ks)
        flat = flat.expand([n, c] + outs + ks).reshape(n, c, -1, window)
        v = torch.gather(xb.reshape(n, c, plane), 2, flat.reshape(n, c, -1)).reshape(n, c, -1, window)
        nan = torch.isnan(v)
        order = torch.arange(window, device=x.device, dtype=torch.int32) + 1
        last_nan = torch.argmax(nan.to(torch.int32) * order, -1)
        first_max = torch.argmax((v == torch.amax(v, -1, keepdim=True)).to(torch.int32), -1)
        pick = torch.where(nan.any(-1), last_nan, first_max).unsqueeze(-1)
        values = torch.gather(v, -1, pick).reshape([n, c] + outs)
        indices = torch.gather(flat, -1, pick).reshape([n, c] + outs)
        if not batched:
            values, indices = values.squeeze(0), indices.squeeze(0)
        return values, indices

    return decomposition


def _place(pos: torch.Tensor, n: int, c: int, d: int, nd: int, outs: list, ks: list) -> torch.Tensor:
    """(n, c, out_d, k_d) positions of dim d laid on (n, c, out_0.., out_nd-1, k_0.., k_nd-1)
    with size 1 in the other dims."""
    shape = [n, c] + [outs[e] if e == d else 1 for e in range(nd)] + [ks[e] if e == d else 1 for e in range(nd)]
    return pos.reshape(shape)   # (out_d, k_d) keep their order: a reshape inserting 1s


# The int[nd] arguments of the pooling ops (and their backward ops) by position: eager
# reads a list of one number as that number for every spatial dim, torch-mlir's lowering
# rejects it ('torch-mlir cannot lower it': OpInfo avg_pool2d padding=(0,), seed 2212)
_POOL_LISTS = {
    "avg_pool2d": (2, ("kernel_size", "stride", "padding"), 1),
    "avg_pool3d": (3, ("kernel_size", "stride", "padding"), 1),
    "max_pool2d_with_indices": (2, ("kernel_size", "stride", "padding", "dilation"), 1),
    "max_pool3d_with_indices": (3, ("kernel_size", "stride", "padding", "dilation"), 1),
    "avg_pool2d_backward": (2, ("kernel_size", "stride", "padding"), 2),
    "avg_pool3d_backward": (3, ("kernel_size", "stride", "padding"), 2),
    "max_pool2d_with_indices_backward": (2, ("kernel_size", "stride", "padding", "dilation"), 2),
    "max_pool3d_with_indices_backward": (3, ("kernel_size", "stride", "padding", "dilation"), 2),
}


def full_pool_lists(name: str, fallback):
    """The decomposition of pooling op `name` (a key of _POOL_LISTS) whose int list
    arguments of one element become lists of nd equal elements (the op again, whose
    decomposition is then `fallback`); other calls go to `fallback` (None: the op kept)."""
    nd, names, first = _POOL_LISTS[name]
    op = getattr(aten, name).default

    def decomposition(*args, **kwargs):
        args = list(args)
        changed = False
        for i, arg_name in enumerate(names):
            pos = first + i
            in_args = pos < len(args)
            v = args[pos] if in_args else kwargs.get(arg_name)
            if isinstance(v, (list, tuple)) and len(v) == 1 and isinstance(v[0], int):
                changed = True
                if in_args:
                    args[pos] = [int(v[0])] * nd
                else:
                    kwargs[arg_name] = [int(v[0])] * nd
        if changed:
            return op(*args, **kwargs)
        return fallback(*args, **kwargs) if fallback is not None else NotImplemented

    return decomposition
