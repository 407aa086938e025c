"""Fourth real-world-style corpus for bench/modules.py (source "new4").

What the first three corpora leave out: integer overflow that wraps (int32 products, int8 sums,
uint8 offsets, float-to-int casts of large values, int sums that widen), Python scalars meeting
int / bool / half tensors (promotion), where / masked_fill / clamp / fill with scalars of
another kind, NaN in sorts, top-k, arg-reductions and cumulative extremes, bit reinterpretation
(fast inverse square root through view(torch.int32)), inputs that alias each other (the same
tensor twice, two views of one base) and are written in place, out= arguments, setitem with
steps / negative indices / broadcasts, MoCo's queue with a tensor pointer, Welford-free running
stats with num_batches_tracked, hand-written GRU/LSTM/peephole cells unrolled over time with
length masks, audio framing with unfold and a Hann window, pre-emphasis, deltas, embedding_bag
with padding_idx and include_last_offset, scatter_reduce amax/amin/prod/mean and index_add on
ints with duplicate indices, einsum traces / diagonals / ellipses / bilinear forms, interpolate
downsampling and align_corners to size 1, pad with negative widths (crops) and circular 3-D,
LocalResponseNorm, RMSNorm, functional batch_norm without running stats, group_norm with 1 and
C groups, losses not in the earlier corpora (gaussian_nll, cosine_embedding, multilabel soft
margin, hinge embedding, weighted nll mean), random ops under the generator (rand_like,
bernoulli_, normal_ on a buffer, randperm, multinomial, dropout masks), autocast with a nested
disabled region, inference_mode and set_grad_enabled inside, and outputs that are Python ints,
floats, strings, torch.Size, OrderedDicts and nested namedtuples.

    python bench/modules.py --source new4 --jobs 2 --timeout 240
"""
from __future__ import annotations

import collections
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from modules2 import box_iou_union
from modules3 import R  # noqa: F401 - the shared input helper (bench/ is on sys.path)

CASES = []


def case(name, inputs, train=False):
    """Registers a model factory (bench/modules.py's case format)."""
    return lambda factory: CASES.append((name, factory, inputs, train)) or factory


def fn_case(name, inputs, train=False):
    """A case whose model is a plain forward function (no parameters)."""
    def deco(forward):
        cls = type(forward.__name__, (nn.Module,), {"forward": lambda self, *a: forward(*a)})
        CASES.append((name, cls, inputs, train))
        return forward
    return deco


def I(lo, hi, *s, dtype=torch.int64):  # noqa: E743 - reads like R (the integer inputs)
    return torch.randint(lo, hi, s, dtype=dtype)


# ======================================================================= integer wraparound
@fn_case("int32_hash_mul_overflow", lambda: (I(-2**31, 2**31 - 1, 6, 5, dtype=torch.int32),))
def int32_hash_mul_overflow(h):
    """FNV-style hashing in int32: products wrap, xor, and a modulo of the wrapped value."""
    a = h * 16777619
    b = (a ^ (a >> 13)) * -1640531535
    c = b + 2147483647
    return a, b, c, c % 1000, (c & 0x7FFFFFFF) % 97, h.sum(1), h.sum(1, dtype=torch.int32), h.prod(1)


@fn_case("int8_uint8_wraparound", lambda: (I(-128, 128, 4, 6, dtype=torch.int8), I(0, 256, 4, 6, dtype=torch.uint8)))
def int8_uint8_wraparound(a, u):
    """int8 sums, negation of -128, uint8 minus a larger value, uint8 * 3, cumsum widening to int64."""
    return (a + a, -a, a.abs(), a * a, u - 200, u * 3, u + a.to(torch.uint8), a.cumsum(1), u.cumsum(0),
            a.sum(), u.sum(0), (u.to(torch.int16) * 300), a.to(torch.int16) * 300, torch.neg(a.int()) * 2**30)


@fn_case("int64_mix_lcg_random", lambda: (I(0, 2**62, 8, dtype=torch.int64),))
def int64_mix_lcg_random(s):
    """A 64-bit LCG and splitmix64 (wrapping int64 products, logical shifts emulated by masks)."""
    x = s * 6364136223846793005 + 1442695040888963407
    z = x + -7046029254386353131
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * -4658895280553007687
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * -7723592293110705685
    u = ((z >> 11) & ((1 << 53) - 1)).double() / float(1 << 53)
    return x, z, u


@fn_case("float_to_int_casts_in_range", lambda: (R(5, 6) * 100,))
def float_to_int_casts_in_range(x):
    """Casts that eager defines: truncation toward zero, to uint8 of values in [0, 255], to int16 and back."""
    return (x.int(), x.to(torch.int16), x.abs().clamp(max=255).to(torch.uint8), x.long().float(), (-x).trunc().int(),
            x.to(torch.int32).to(torch.int8), (x * 1e3).long(), x.round().to(torch.int64))


# ======================================================================= promotion with scalars
@fn_case("python_scalar_promotion_ints", lambda: (I(-5, 6, 3, 4), I(-5, 6, 3, 4, dtype=torch.int32),
                                                   torch.rand(3, 4) > 0.5, I(0, 200, 3, 4, dtype=torch.uint8)))
def python_scalar_promotion_ints(i64, i32, b, u8):
    """int tensor op Python float (-> float32), int32 * Python int stays int32, bool + int, bool * float,
    uint8 - Python int wraps, true division of ints, int ** Python int, 2 ** int tensor."""
    return (i64 * 2.5, i32 * 3, i32 + 2**20, b + 1, b * 0.5, b + b, u8 - 1, u8 + 300 - 300, i64 / 3, i32 / i32.abs().clamp(min=1),
            i64 ** 2, 2 ** i32.abs(), i32 // 2.0, i64 % 2.5, torch.true_divide(i32, 4), b.sum() * 1.5, -b.int(), ~b, b & True)


@fn_case("zero_dim_tensor_promotion", lambda: (R(3, 4), torch.tensor(2.5, dtype=torch.float64), torch.tensor(3),
                                               I(0, 10, 3, 4, dtype=torch.int32), R(3, 4).half()))
def zero_dim_tensor_promotion(x, d0, i0, i32, h):
    """A 0-dim float64 does not widen a float32 tensor; a 0-dim int64 does not widen int32; a 0-dim float
    turns int32 into float32 (the default dtype); half meets a Python float that overflows half."""
    return (x * d0, i32 * i0, i32 * d0, h * d0, h * 70000.0, h + 1e-4, x + i0, (h * 2).float(), h.sum(), h.mean(),
            torch.add(i32, i0, alpha=2), torch.mul(h, x), d0 * i0)


@fn_case("where_masked_fill_scalars", lambda: (R(4, 5), I(-3, 4, 4, 5), torch.rand(4, 5) > 0.4))
def where_masked_fill_scalars(x, n, m):
    """where with two Python scalars (int64 / float32 result), with a bool and an int, masked_fill of an int
    tensor with a float (truncated), of a bool tensor, where of an int tensor and a float scalar."""
    return (torch.where(m, 1, 0), torch.where(m, 1.5, -2), torch.where(m, x, 0), torch.where(m, n, 2.5),
            torch.where(m, True, n > 0), n.masked_fill(m, 7.9), n.masked_fill(~m, -3), (n > 0).masked_fill(m, False),
            x.masked_fill(m, float("-inf")).softmax(-1).nan_to_num(), torch.where(n > 0, n, -n).float().mean(),
            x.masked_fill(m, torch.tensor(3)), torch.where(m, x.half(), 2.0))


@fn_case("clamp_mixed_kinds", lambda: (R(4, 5) * 3, I(-6, 7, 4, 5), R(5), R(5) + 2))
def clamp_mixed_kinds(x, n, lo, hi):
    """clamp of an int tensor with float bounds (promotes), min > max (every element is max), clamp with
    tensor bounds that broadcast, clamp_min/clamp_max of ints, hardtanh with swapped-looking bounds."""
    return (n.clamp(-2.5, 2.5), n.clamp(min=1), x.clamp(2.0, -1.0), n.clamp(3, -3), x.clamp(lo, hi), x.clamp(min=lo),
            torch.clamp_min(n, 0), torch.clamp_max(n, 0.5), F.hardtanh(x, -0.5, 0.5), x.clamp(max=hi.min()),
            torch.clip(n, torch.tensor(-1), torch.tensor(1)))


# ======================================================================= NaN and ties in ordering
@fn_case("sort_topk_argmax_nan", lambda: (torch.tensor([[1.0, float("nan"), 3.0, 3.0, -1.0],
                                                        [2.0, 2.0, 2.0, float("nan"), float("nan")],
                                                        [0.5, -0.0, 0.0, 4.0, 4.0]]) + torch.randn(1).abs() * 0,))
def sort_topk_argmax_nan(x):
    """NaN sorts last ascending and first descending, topk treats NaN as the largest, argmax/max/amax
    return NaN's index, argmin ties on -0.0 vs 0.0, cummax/cummin through NaN, kthvalue with NaN."""
    return (x.sort(1), x.sort(1, descending=True), x.topk(2, 1), x.argmax(1), x.max(1), x.amax(1), x.argmin(1),
            x.min(1), x.cummax(1), x.cummin(1), x.argsort(dim=1, stable=True), x.nan_to_num().argmax(1), x.msort(),
            torch.maximum(x, x.flip(1)), torch.fmax(x, x.flip(1)), x.nanmean(1), x.nansum(1), x.nanmedian(1))


@fn_case("argmax_ties_flat_keepdim", lambda: (I(0, 3, 4, 6).float(), I(0, 3, 4, 6)))
def argmax_ties_flat_keepdim(x, n):
    """Ties everywhere: argmax over the flattened tensor, keepdim, dim 0, int inputs, max(dim) indices,
    cummax indices (last tie), mode, topk of ties, sort stable of ints and its inverse permutation."""
    s, idx = n.sort(dim=1, stable=True)
    inv = torch.empty_like(idx).scatter_(1, idx, torch.arange(6).expand(4, 6))
    return (x.argmax(), x.argmax(1, keepdim=True), x.argmin(0), n.argmax(1), n.max(0), x.cummax(1).indices,
            n.cummin(0).indices, torch.mode(n, 1), s, idx, inv, (n == n.max(1, keepdim=True).values).float().argmax(1))


@fn_case("cumsum_cumprod_dtypes", lambda: (torch.rand(3, 7) > 0.3, I(1, 4, 3, 7, dtype=torch.int32), R(3, 7).half(), R(3, 7)))
def cumsum_cumprod_dtypes(b, i32, h, x):
    """cumsum of bool (int64), of int32 (int64), with dtype=, of half, reversed via flip, cumprod of ints
    that overflow int64 after 40 steps, logcumsumexp of -inf, cumsum on dim 0 of a transposed view."""
    big = i32.long().repeat(1, 6) * 1000
    return (b.cumsum(1), i32.cumsum(1), i32.cumsum(1, dtype=torch.int32), h.cumsum(1), x.flip(1).cumsum(1).flip(1),
            big.cumprod(1), x.masked_fill(b, float("-inf")).logcumsumexp(1), x.t().cumsum(0), b.cumprod(1),
            torch.cumsum(x, -1, dtype=torch.float64), h.cumprod(0))


# ======================================================================= bits and views
class FastInvSqrt(nn.Module):
    """Quake's fast inverse square root: float bits read as int32 with view(), the magic constant, one
    Newton step; also float sign bit tricks, bfloat16 truncation by masking, and view back to float."""

    def forward(self, x):
        x = x.abs() + 0.1
        i = x.view(torch.int32)
        i = 0x5F3759DF - (i >> 1)
        y = i.view(torch.float32)
        y = y * (1.5 - 0.5 * x * y * y)
        bf = (x.view(torch.int32) & -65536).view(torch.float32)
        neg = (x.view(torch.int32) | (-2**31)).view(torch.float32)
        u8 = x.view(torch.uint8).reshape(x.shape[0], -1, 4)[..., 3]
        return y, bf, neg, u8, x.view(torch.int16).shape


case("fast_inverse_sqrt_bitcast", lambda: (R(4, 6),))(lambda: FastInvSqrt())


@fn_case("aliasing_inputs_same_tensor", lambda: (lambda t: (t, t, t[1:], t[:, ::2]))(R(4, 6)))
def aliasing_inputs_same_tensor(a, b, v, s):
    """The same tensor passed twice and two views of it; one argument is written in place, the others are
    read after the write (they see it), a strided view is written too."""
    a.mul_(2)
    r1 = b + 1
    v.add_(a[:-1].clone())
    s.zero_()
    return r1, b.sum(), v.clone(), a * 3


@fn_case("out_arguments", lambda: (R(3, 4), R(3, 4), torch.empty(3, 4), torch.empty(0), torch.empty(3, dtype=torch.int64)))
def out_arguments(x, y, buf, empty, ibuf):
    """torch functions with out=: the out tensor is an input (written, returned), out of size 0 is resized,
    an int out for argmax, torch.max(dim, out=(values, indices))."""
    torch.add(x, y, alpha=2, out=buf)
    torch.mul(x, y, out=empty)
    torch.argmax(x, 1, out=ibuf)
    vals, idx = torch.empty(3), torch.empty(3, dtype=torch.int64)
    torch.max(y, 1, out=(vals, idx))
    return buf, empty, ibuf, vals, idx, torch.sigmoid(x, out=torch.empty_like(x))


@fn_case("setitem_steps_negative_broadcast", lambda: (R(5, 6), R(6), torch.tensor([-1, 0, 2])))
def setitem_steps_negative_broadcast(x, row, idx):
    """Writes through basic and advanced indexing on a clone: step slices, negative indices, a broadcast
    row, a tensor index with negatives, an Ellipsis, a bool-tensor row mask, index_put_ with a scalar."""
    y = x.clone()
    y[::2, 1::3] = 0.5
    y[-1] = row
    y[idx, -2] = torch.tensor([7.0, 8.0, 9.0])
    y[..., 0] += 1
    y[torch.tensor([True, False, True, False, False])] *= -1
    y.index_put_((torch.tensor([1, 1]), torch.tensor([2, 2])), torch.tensor(4.0))
    y[1:3, 1:3] = y[3:5, 3:5].t()
    x[0, :3] = row[:3]      # the input itself
    return y, x.sum(0)


class MoCoQueue(nn.Module):
    """MoCo: key encoder updated by momentum, the queue buffer overwritten at a tensor pointer read
    with int(), the pointer advanced modulo K, logits against the queue (clone before the write)."""

    def __init__(self, d=4, k=12):
        super().__init__()
        self.q_enc, self.k_enc = nn.Linear(5, d), nn.Linear(5, d)
        self.k_enc.load_state_dict(self.q_enc.state_dict())
        self.register_buffer("queue", F.normalize(torch.randn(d, k), dim=0))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))
        self.K, self.m = k, 0.99

    def forward(self, xq, xk):
        q = F.normalize(self.q_enc(xq), dim=1)
        with torch.no_grad():
            for pq, pk in zip(self.q_enc.parameters(), self.k_enc.parameters()):
                pk.data = pk.data * self.m + pq.data * (1.0 - self.m)
            k = F.normalize(self.k_enc(xk), dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], 1) / 0.07
        bs = k.shape[0]
        p = int(self.ptr)
        self.queue[:, p:p + bs] = k.T
        self.ptr[0] = (p + bs) % self.K
        return F.cross_entropy(logits, torch.zeros(bs, dtype=torch.long))


case("moco_queue_tensor_pointer", lambda: (R(4, 5), R(4, 5)), train=True)(lambda: MoCoQueue())


class BNStatsCounters(nn.Module):
    """BatchNorm momentum=None (cumulative average through num_batches_tracked), a custom counter buffer
    incremented with add_, a running max with torch.max(out=...)-free maximum_, and eval inside train."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4, momentum=None)
        self.bn2 = nn.BatchNorm2d(4, affine=False)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("peak", torch.full((4,), -1e9))
        self.register_buffer("hist", torch.zeros(5, dtype=torch.int32))

    def forward(self, x):
        h = self.bn(x)
        self.count.add_(x.shape[0])
        self.peak.copy_(torch.maximum(self.peak, h.detach().amax(0)))
        b = torch.bucketize(h.detach().flatten(), torch.tensor([-1.0, -0.3, 0.3, 1.0]))
        self.hist.index_add_(0, b, torch.ones_like(b, dtype=torch.int32))
        g = self.bn2(h.view(-1, 4, 1, 1).expand(-1, 4, 2, 2).contiguous())
        return h, g.mean(), self.count * 1


case("bn_cumulative_counters_train", lambda: (R(6, 4),), train=True)(lambda: BNStatsCounters())


class EMABufferLerpFoldIn(nn.Module):
    """A shadow copy of the weights as buffers, lerp_ toward the parameters under no_grad with a decay
    from a step counter buffer, the shadow used for the output in eval; in-place on buffer views."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("shadow_w", self.fc.weight.detach().clone())
        self.register_buffer("shadow_b", self.fc.bias.detach().clone())
        self.register_buffer("steps", torch.tensor(0.0))

    def forward(self, x):
        y = self.fc(x)
        with torch.no_grad():
            self.steps += 1
            decay = torch.clamp((1 + self.steps) / (10 + self.steps), max=0.999)
            self.shadow_w.lerp_(self.fc.weight, 1 - decay)
            self.shadow_b.mul_(decay).add_((1 - decay) * self.fc.bias)
            self.shadow_w[:, 0].clamp_(-0.5, 0.5)
        return y, F.linear(x, self.shadow_w, self.shadow_b)


case("ema_shadow_lerp_buffers", lambda: (R(5, 4),))(lambda: EMABufferLerpFoldIn())


# ======================================================================= layouts
@fn_case("expanded_stride0_inputs", lambda: (R(1, 5).expand(4, 5), R(3, 1, 1).expand(3, 4, 6), torch.tensor(2.0).expand(3, 3),
                                              R(4, 5)))
def expanded_stride0_inputs(a, b, c, d):
    """Stride-0 inputs: reductions over the expanded dim, elementwise with a real tensor, cumsum along it,
    contiguous() of it, matmul with it, sort along it, and a clone written in place."""
    e = a.clone()
    e[0] += 1
    return (a.sum(0), a * d, a.cumsum(0), b.softmax(-1), b.contiguous().view(3, -1), a @ d.T, c.sum(), b.amax((1, 2)),
            e, a.sort(0).values, (a - a.mean(0)).pow(2).sum(), torch.cat([a, d], 0).std(0))


@fn_case("channels_last_3d_and_permuted", lambda: (R(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d),
                                                   R(2, 6, 5, 4).permute(0, 3, 1, 2), R(8, 4)[::2]))
def channels_last_3d_and_permuted(v, p, s):
    """A channels_last_3d volume through avg_pool3d / interpolate, a permuted input whose strides are not
    contiguous through group_norm and softmax over the channel, a strided-row input through layer_norm."""
    return (F.avg_pool3d(v, 2), v.mean((2, 3, 4)), F.interpolate(v, scale_factor=0.5, mode="nearest"), v.amax(1),
            F.group_norm(p, 2), p.softmax(1), p.flatten(2).transpose(1, 2).sum(1), F.layer_norm(s, (4,)),
            F.max_pool3d(v, (1, 2, 2)), v.permute(0, 2, 3, 4, 1).reshape(-1, 3).var(0))


@fn_case("zero_size_tensor_flow", lambda: (R(0, 4), R(3, 0), R(2, 0, 5), torch.empty(0, dtype=torch.int64)))
def zero_size_tensor_flow(a, b, c, i):
    """Zero-size tensors through linear algebra and reductions: (0,4)@(4,3), (3,0)@(0,2) is zeros, sum/prod/
    amax over the non-empty dim, softmax, cat with non-empty, topk k=0, index_select with an empty index,
    sum of an empty int tensor, mean over an empty dim (NaN), logsumexp (-inf)."""
    w = torch.ones(4, 3)
    return (a @ w, b @ torch.ones(0, 2), a.sum(0), b.sum(1), b.prod(1), c.sum(1), a.softmax(-1), torch.cat([a, w.T], 0),
            w.topk(0, 1).values, w.index_select(0, i), i.sum(), b.mean(1), b.logsumexp(1), c.amax(2).shape, a.t().cumsum(1),
            F.layer_norm(a, (4,)), F.relu(c).view(2, 0, 5, 1).shape)


# ======================================================================= detection geometry
@fn_case("box_iou_degenerate_clip", lambda: (torch.tensor([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 1.0, 3.0], [5.0, 5.0, 4.0, 6.0],
                                                           [-1.0, -1.0, 9.0, 9.0]]) + R(4, 4).abs() * 0.1,
                                             torch.tensor([[0.0, 0.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0], [0.5, 0.5, 1.5, 1.5]]),
                                             torch.tensor([6.0, 8.0])))
def box_iou_degenerate_clip(a, b, hw):
    """torchvision box_iou with zero-area boxes (0/0 is NaN in eager too), clip_boxes_to_image with a tensor
    size, remove_small_boxes as a mask, box_area, GIoU with degenerate enclosures, matcher argmax ties."""
    iou, union = box_iou_union(a, b)
    elt = torch.min(a[:, None, :2], b[:, :2])
    erb = torch.max(a[:, None, 2:], b[:, 2:])
    earea = (erb - elt).clamp(min=0).prod(-1)
    giou = iou - (earea - union) / earea
    x = a[:, 0::2].clamp(min=0, max=hw[1])
    y = a[:, 1::2].clamp(min=0, max=hw[0])
    clipped = torch.stack((x, y), dim=2).reshape(a.shape)
    keep = ((clipped[:, 2] - clipped[:, 0]) >= 1e-2) & ((clipped[:, 3] - clipped[:, 1]) >= 1e-2)
    vals, matches = iou.nan_to_num(-1).max(0)
    return iou, giou, clipped, keep, vals, matches, torch.where(vals < 0.3, -1, matches)


class AnchorGenerator(nn.Module):
    """torchvision AnchorGenerator: base anchors from scales x ratios rounded, shifts from arange * stride
    over a meshgrid(indexing='ij'), anchors (shifts.view(-1,1,4) + base.view(1,-1,4)).reshape(-1, 4)."""

    def __init__(self, sizes=((16, 32), (64,)), ratios=((0.5, 1.0, 2.0),) * 2):
        super().__init__()
        self.cell = []
        for s, r in zip(sizes, ratios):
            scales, ar = torch.as_tensor(s, dtype=torch.float32), torch.as_tensor(r, dtype=torch.float32)
            hr = torch.sqrt(ar)
            ws = (1 / hr[:, None] * scales[None, :]).view(-1)
            hs = (hr[:, None] * scales[None, :]).view(-1)
            self.cell.append((torch.stack([-ws, -hs, ws, hs], dim=1) / 2).round())

    def forward(self, img, f1, f2):
        out = []
        for feat, base in zip((f1, f2), self.cell):
            gh, gw = feat.shape[-2:]
            sh, sw = img.shape[-2] // gh, img.shape[-1] // gw
            sx = torch.arange(0, gw, dtype=torch.int32) * sw
            sy = torch.arange(0, gh, dtype=torch.int32) * sh
            yy, xx = torch.meshgrid(sy, sx, indexing="ij")
            xx, yy = xx.reshape(-1), yy.reshape(-1)
            shifts = torch.stack((xx, yy, xx, yy), dim=1)
            out.append((shifts.view(-1, 1, 4) + base.view(1, -1, 4)).reshape(-1, 4))
        return torch.cat(out), [a.shape[0] for a in out]


case("torchvision_anchor_generator", lambda: (R(1, 3, 32, 48), R(1, 4, 4, 6), R(1, 4, 2, 3)))(lambda: AnchorGenerator())


class BoxCoderWeights(nn.Module):
    """Faster R-CNN BoxCoder encode/decode with weights (10, 10, 5, 5), bbox_xform_clip on dw/dh, decode of
    the encode round-trips; proposals with +1 widths (legacy)."""

    def forward(self, ref, prop, codes):
        wx, wy, ww, wh = 10.0, 10.0, 5.0, 5.0
        pw, ph = prop[:, 2] - prop[:, 0] + 1, prop[:, 3] - prop[:, 1] + 1
        px, py = prop[:, 0] + 0.5 * pw, prop[:, 1] + 0.5 * ph
        gw, gh = ref[:, 2] - ref[:, 0] + 1, ref[:, 3] - ref[:, 1] + 1
        gx, gy = ref[:, 0] + 0.5 * gw, ref[:, 1] + 0.5 * gh
        enc = torch.stack((wx * (gx - px) / pw, wy * (gy - py) / ph, ww * torch.log(gw / pw), wh * torch.log(gh / ph)), 1)
        dx, dy = codes[:, 0::4] / wx, codes[:, 1::4] / wy
        dw = (codes[:, 2::4] / ww).clamp(max=math.log(1000.0 / 16))
        dh = (codes[:, 3::4] / wh).clamp(max=math.log(1000.0 / 16))
        cx, cy = dx * pw[:, None] + px[:, None], dy * ph[:, None] + py[:, None]
        w, h = torch.exp(dw) * pw[:, None], torch.exp(dh) * ph[:, None]
        dec = torch.stack((cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w - 1, cy + 0.5 * h - 1), dim=2).flatten(1)
        return enc, dec


def _boxes(n):
    xy = torch.rand(n, 2) * 20
    return torch.cat([xy, xy + torch.rand(n, 2) * 10 + 1], 1)


case("box_coder_weights_legacy_plus1", lambda: (_boxes(5), _boxes(5), R(5, 8) * 3))(lambda: BoxCoderWeights())


# ======================================================================= recurrent cells by hand
class HandGRU(nn.Module):
    """A GRU written out (PyTorch gate order r, z, n; n uses r * (W_hn h + b_hn)), unrolled over time with a
    length mask that freezes finished sequences, compared with nn.GRU's weights."""

    def __init__(self, d=4, h=5):
        super().__init__()
        self.gru = nn.GRU(d, h, batch_first=True)
        self.h = h

    def forward(self, x, lengths):
        w_ih, w_hh, b_ih, b_hh = self.gru.weight_ih_l0, self.gru.weight_hh_l0, self.gru.bias_ih_l0, self.gru.bias_hh_l0
        h = x.new_zeros(x.shape[0], self.h)
        outs = []
        for t in range(x.shape[1]):
            gi = F.linear(x[:, t], w_ih, b_ih)
            gh = F.linear(h, w_hh, b_hh)
            i_r, i_z, i_n = gi.chunk(3, 1)
            h_r, h_z, h_n = gh.chunk(3, 1)
            r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            hn = (1 - z) * n + z * h
            m = (t < lengths).unsqueeze(1).to(x.dtype)
            h = m * hn + (1 - m) * h
            outs.append(h * m)
        ref, _ = self.gru(x)
        return torch.stack(outs, 1), h, ref


case("hand_gru_length_mask", lambda: (R(3, 5, 4), torch.tensor([5, 2, 3])))(lambda: HandGRU())


class PeepholeLNLSTM(nn.Module):
    """LSTM cell with peephole connections and LayerNorm on the gates (Graves / Ba), forget bias 1.0,
    cell clipping, zoneout-style interpolation with a fixed mask, unrolled."""

    def __init__(self, d=3, h=4):
        super().__init__()
        self.ih, self.hh = nn.Linear(d, 4 * h, bias=False), nn.Linear(h, 4 * h, bias=False)
        self.ln_g, self.ln_c = nn.LayerNorm(4 * h), nn.LayerNorm(h)
        self.peep = nn.Parameter(torch.randn(3, h) * 0.1)
        self.register_buffer("zone", (torch.rand(h) > 0.5).float())
        self.h = h

    def forward(self, x):
        b = x.shape[1]
        h = c = x.new_zeros(b, self.h)
        for t in range(x.shape[0]):
            g = self.ln_g(self.ih(x[t]) + self.hh(h))
            i, f, o, u = g.chunk(4, -1)
            i = torch.sigmoid(i + self.peep[0] * c)
            f = torch.sigmoid(f + 1.0 + self.peep[1] * c)
            c_new = (f * c + i * torch.tanh(u)).clamp(-3, 3)
            o = torch.sigmoid(o + self.peep[2] * c_new)
            h_new = o * torch.tanh(self.ln_c(c_new))
            h = self.zone * h + (1 - self.zone) * h_new
            c = c_new
        return h, c


case("peephole_layernorm_lstm", lambda: (R(6, 2, 3),))(lambda: PeepholeLNLSTM())


class RNNCellStack(nn.Module):
    """nn.RNNCell (relu) / GRUCell / LSTMCell stacked, with teacher forcing from a schedule of Python bools
    and an autoregressive feedback otherwise, outputs stacked."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.RNNCell(3, 4, nonlinearity="relu"), nn.GRUCell(4, 4), nn.LSTMCell(4, 3)

    def forward(self, x):
        h1 = h2 = torch.zeros(x.shape[1], 4)
        hc = None
        inp, outs = x[0], []
        for t, teach in enumerate([True, False, True, False, False]):
            h1 = self.c1(inp, h1)
            h2 = self.c2(h1, h2)
            hc = self.c3(h2, hc)
            outs.append(hc[0])
            inp = x[t + 1] if teach else hc[0]
        return torch.stack(outs)


case("rnn_gru_lstm_cells_teacher_forcing", lambda: (R(6, 2, 3),))(lambda: RNNCellStack())


# ======================================================================= audio framing
class LogMelFrames(nn.Module):
    """Audio front end without STFT: pre-emphasis via cat, reflect pad, frames by unfold(size, hop), Hann
    window (periodic), power spectrum by a DFT matmul, mel filterbank matmul, log(clamp), CMVN, deltas by
    a conv1d over replicate-padded frames."""

    def __init__(self, n_fft=16, hop=4, n_mels=5):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("win", torch.hann_window(n_fft, periodic=True))
        k = torch.arange(n_fft // 2 + 1, dtype=torch.float32)[:, None]
        n = torch.arange(n_fft, dtype=torch.float32)[None]
        self.register_buffer("cos", torch.cos(2 * math.pi * k * n / n_fft))
        self.register_buffer("sin", -torch.sin(2 * math.pi * k * n / n_fft))
        self.register_buffer("mel", torch.rand(n_fft // 2 + 1, n_mels))
        self.register_buffer("dk", torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]).view(1, 1, 5) / 10)

    def forward(self, wav):
        emph = torch.cat([wav[:, :1], wav[:, 1:] - 0.97 * wav[:, :-1]], 1)
        padded = F.pad(emph.unsqueeze(1), (self.n_fft // 2, self.n_fft // 2), mode="reflect").squeeze(1)
        frames = padded.unfold(-1, self.n_fft, self.hop) * self.win
        re, im = frames @ self.cos.T, frames @ self.sin.T
        power = re.pow(2) + im.pow(2)
        logmel = torch.log(torch.clamp(power @ self.mel, min=1e-10))
        cmvn = (logmel - logmel.mean(1, keepdim=True)) / (logmel.std(1, keepdim=True) + 1e-5)
        b, t, m = cmvn.shape
        seq = cmvn.transpose(1, 2).reshape(b * m, 1, t)
        delta = F.conv1d(F.pad(seq, (2, 2), mode="replicate"), self.dk).view(b, m, t)
        return frames.shape, cmvn, delta, wav.unfold(1, 8, 8).abs().amax(-1)


case("audio_unfold_frames_logmel_deltas", lambda: (R(2, 64),))(lambda: LogMelFrames())


# ======================================================================= sparse-style reductions
@fn_case("embedding_bag_padding_last_offset", lambda: (torch.tensor([1, 0, 3, 0, 4, 2, 0, 5]), torch.tensor([0, 2, 2, 5, 8]),
                                                        I(0, 6, 3, 4), torch.rand(8)))
def embedding_bag_padding_last_offset(ids, offsets, ids2d, psw):
    """embedding_bag with padding_idx (skipped in sums and means, an all-padding bag is zeros), with
    include_last_offset=True, an empty bag in max mode, 2-D input mean, per-sample weights with padding."""
    torch.manual_seed(0)
    w = torch.randn(6, 3)
    return (F.embedding_bag(ids, w, offsets[:-1], mode="sum", padding_idx=0),
            F.embedding_bag(ids, w, offsets, mode="mean", include_last_offset=True, padding_idx=0),
            F.embedding_bag(ids, w, offsets, mode="max", include_last_offset=True),
            F.embedding_bag(ids2d, w, mode="mean"), F.embedding_bag(ids, w, offsets[:-1], mode="sum", per_sample_weights=psw,
                                                                    padding_idx=0),
            F.embedding(ids2d, w, padding_idx=2))


@fn_case("scatter_reduce_dup_int_index_add", lambda: (R(7, 3), torch.tensor([0, 2, 2, 0, 4, 2, 0]), I(-9, 10, 7, 3)))
def scatter_reduce_dup_int_index_add(x, idx, n):
    """scatter_reduce amax/amin/prod/mean with include_self False and True over duplicates, on ints too;
    index_add on an int64 tensor with alpha, index_add with duplicates into a float buffer, scatter_add
    of ints, a row that receives nothing (keeps self / zero)."""
    j = idx[:, None].expand(-1, 3)
    base = torch.full((5, 3), 0.5)
    return (base.scatter_reduce(0, j, x, "amax", include_self=False), base.scatter_reduce(0, j, x, "amin"),
            base.scatter_reduce(0, j, x, "prod", include_self=False), base.scatter_reduce(0, j, x, "mean"),
            base.scatter_reduce(0, j, x, "mean", include_self=False), torch.zeros(5, 3, dtype=torch.int64).scatter_reduce(0, j, n, "sum"),
            torch.ones(5, 3, dtype=torch.int64).scatter_reduce(0, j, n, "prod", include_self=False),
            torch.zeros(5, 3, dtype=torch.int64).index_add(0, idx, n, alpha=3), base.index_add(0, idx, x),
            torch.zeros(5, 3, dtype=torch.int64).scatter_add(0, j, n), torch.zeros(5, 3).index_add_(0, idx, x, alpha=-0.5))


@fn_case("einsum_traces_diagonals_ellipsis", lambda: (R(4, 4), R(2, 3, 3), R(2, 5), R(3, 5, 4), R(2, 4), R(2, 3, 4, 5)))
def einsum_traces_diagonals_ellipsis(sq, bsq, a, w3, b, e4):
    """einsum forms outside the batched matmul family: a trace, a diagonal, a batched diagonal, an outer
    product, a full sum, a bilinear form, ellipses in front and behind, repeated index across operands,
    a transpose only, three operands with a contraction order, and an integer einsum."""
    return (torch.einsum("ii->", sq), torch.einsum("ii->i", sq), torch.einsum("bii->bi", bsq), torch.einsum("i,j->ij", a[0], b[0]),
            torch.einsum("ij->", a), torch.einsum("bn,anm,bm->ba", a, w3, b), torch.einsum("...ij,...jk->...ik", e4, e4.transpose(-1, -2)),
            torch.einsum("b...,b...->b", e4, e4), torch.einsum("ij,ij,ij->i", a, a, a), torch.einsum("ij->ji", a),
            torch.einsum("bij,bjk,bkl->bil", bsq, bsq, bsq), torch.einsum("ij,jk->ik", sq.long(), sq.long()),
            torch.einsum("bhqd,bhkd->bhqk", e4, e4), torch.einsum("iij->j", torch.stack([sq] * 4, -1)))


# ======================================================================= resampling and padding
@fn_case("interpolate_downsample_align_size1", lambda: (R(2, 3, 7, 9), R(2, 3, 8), R(1, 2, 3, 4, 5)))
def interpolate_downsample_align_size1(x, s, v):
    """Downsampling: nearest with scale 0.5 (floor), bilinear with align_corners True to size 1 and to
    (1, 5), area to an uneven size, bicubic downsample, linear 1-D with a non-integer scale, trilinear to an
    odd size, nearest-exact downsample, bilinear antialias downsample, scale_factor tuple."""
    return (F.interpolate(x, scale_factor=0.5, mode="nearest"), F.interpolate(x, size=1, mode="bilinear", align_corners=True),
            F.interpolate(x, size=(1, 5), mode="bilinear", align_corners=True), F.interpolate(x, size=(3, 4), mode="area"),
            F.interpolate(x, size=(4, 5), mode="bicubic", align_corners=False), F.interpolate(s, scale_factor=0.7, mode="linear"),
            F.interpolate(v, size=(5, 3, 3), mode="trilinear", align_corners=False), F.interpolate(x, size=(4, 4), mode="nearest-exact"),
            F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True), F.interpolate(x, scale_factor=(0.5, 1.5), mode="nearest"),
            F.interpolate(s, size=1, mode="linear", align_corners=True), F.upsample_nearest(s, size=11))


@fn_case("pad_negative_circular_3d", lambda: (R(2, 3, 5, 6), R(1, 2, 3, 4, 5), R(2, 4, 7), I(0, 9, 2, 5)))
def pad_negative_circular_3d(x, v, s, n):
    """F.pad with negative widths (crops) in constant mode, mixed negative / positive, circular on a volume,
    replicate and reflect on 3-D, reflect on 1-D with pad = size-1, constant pad of an int tensor with a value,
    torch.constant_pad_nd, ZeroPad2d / ReflectionPad2d / ReplicationPad1d modules."""
    return (F.pad(x, (-1, -2, 1, -1)), F.pad(x, (2, -1, -2, 0), value=3.0), F.pad(v, (1, 2, 1, 0, 2, 1), mode="circular"),
            F.pad(v, (1, 1, 2, 0, 0, 1), mode="replicate"), F.pad(v, (2, 1, 1, 2, 1, 1), mode="reflect"),
            F.pad(s, (6, 6), mode="reflect"), F.pad(n, (1, 2), value=-7), torch.constant_pad_nd(x, (0, 0, 0, 0, 1, 1), -1.0),
            nn.ZeroPad2d((1, 0, 2, -1))(x), nn.ReflectionPad2d(2)(x), nn.ReplicationPad1d((3, 0))(s), F.pad(x, (0, 0, 0, 0, 0, 0, 1, 0)))


@fn_case("pixel_shuffle_views_layouts", lambda: (R(2, 8, 3, 3).to(memory_format=torch.channels_last), R(1, 3, 4, 6)[..., ::1, 1:5],
                                                 R(2, 4, 2, 4, 4)))
def pixel_shuffle_views_layouts(cl, sl, b5):
    """pixel_shuffle of a channels_last input, pixel_unshuffle of a sliced (offset, non-contiguous) input,
    pixel_shuffle over extra batch dims, and their round trip."""
    return (F.pixel_shuffle(cl, 2), F.pixel_unshuffle(sl, 2), F.pixel_shuffle(b5.reshape(2, 8, 4, 4), 2), F.pixel_unshuffle(F.pixel_shuffle(cl, 2), 2) - cl,
            F.pixel_shuffle(cl[:, :4], 2).sum((2, 3)))


# ======================================================================= norms
class NormZoo(nn.Module):
    """LocalResponseNorm (AlexNet), RMSNorm with and without weight, functional batch_norm in training mode
    without running stats, group_norm with 1 and C groups, instance_norm with use_input_stats=False and
    given running stats, layer_norm over the last two dims without affine, F.normalize with p=1 and inf."""

    def __init__(self):
        super().__init__()
        self.lrn = nn.LocalResponseNorm(3, alpha=1e-2, beta=0.75, k=2.0)
        self.rms, self.rms0 = nn.RMSNorm(5), nn.RMSNorm(5, elementwise_affine=False, eps=None)
        self.register_buffer("rm", torch.rand(4))
        self.register_buffer("rv", torch.rand(4) + 0.5)

    def forward(self, x, t):
        return (self.lrn(x), self.rms(t), self.rms0(t), F.batch_norm(x, None, None, training=True),
                F.group_norm(x, 1), F.group_norm(x, 4), F.instance_norm(x, self.rm, self.rv, use_input_stats=False),
                F.layer_norm(x, x.shape[-2:]), F.normalize(t, p=1, dim=-1), F.normalize(t, p=float("inf"), dim=0),
                F.local_response_norm(x[:, :, 0], 2))


case("norm_zoo_lrn_rms_functional", lambda: (R(2, 4, 3, 5), R(3, 5)))(lambda: NormZoo())


class WeightNormedConvTrainStep(nn.Module):
    """torch.nn.utils.parametrizations.weight_norm on a Conv1d and a Linear, one SGD step by hand on the
    parametrization's original0/original1, output after the step."""

    def __init__(self):
        super().__init__()
        P = torch.nn.utils.parametrizations
        self.conv = P.weight_norm(nn.Conv1d(2, 3, 3, padding=1))
        self.fc = P.weight_norm(nn.Linear(3, 2), dim=None)

    def forward(self, x):
        y = self.fc(self.conv(x).mean(-1))
        loss = y.square().sum()
        loss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        return loss.detach(), self.fc(self.conv(x).mean(-1)).detach()


case("weight_norm_param_manual_sgd", lambda: (R(2, 2, 6),), train=True)(lambda: WeightNormedConvTrainStep())


# ======================================================================= losses
class LossZoo4(nn.Module):
    """Losses the earlier corpora do not call: gaussian_nll (full, eps clamp), cosine_embedding with margin,
    multilabel_soft_margin with weight, hinge_embedding, soft_margin, multilabel_margin (-1 padded targets),
    weighted nll mean with ignore_index (divides by the weights of the kept targets), kl_div log_target,
    huber with delta, margin_ranking, poisson_nll full, l1 sum, triplet_margin swap."""

    def forward(self, x, y, var, lab, t, yy):
        lw = torch.tensor([0.2, 1.0, 3.0, 0.5])
        logp = x.log_softmax(-1)
        return (F.gaussian_nll_loss(x, y, var, full=True), F.gaussian_nll_loss(x, y, var * 0, eps=1e-3),
                F.cosine_embedding_loss(x, y, t, margin=0.2), F.multilabel_soft_margin_loss(x, (y > 0).float(), weight=lw),
                F.hinge_embedding_loss(x, t[:, None].expand_as(x), margin=0.5), F.soft_margin_loss(x, t[:, None].expand_as(x)),
                F.multilabel_margin_loss(x, torch.tensor([[3, 0, -1, 1], [1, -1, 2, 2], [0, 1, 2, 3]])),
                F.nll_loss(logp, lab, weight=lw, ignore_index=2), F.nll_loss(logp, lab, weight=lw, reduction="sum"),
                F.kl_div(logp, y.log_softmax(-1), log_target=True, reduction="batchmean"), F.huber_loss(x, y, delta=0.3),
                F.margin_ranking_loss(x[:, 0], y[:, 0], t, margin=0.1), F.poisson_nll_loss(x.exp(), yy, log_input=False, full=True),
                F.l1_loss(x, y, reduction="sum"), F.triplet_margin_loss(x, y, x.flip(0), swap=True, p=1.5))


case("loss_zoo_gaussian_cosine_multilabel", lambda: (R(3, 4), R(3, 4), torch.rand(3, 4), torch.tensor([2, 0, 3]),
                                                     torch.tensor([1.0, -1.0, 1.0]), I(0, 5, 3, 4).float()))(lambda: LossZoo4())


class LossBackwardWeighted(nn.Module):
    """Backward through weighted cross entropy with label smoothing and class weights, through ignore_index
    in the middle of a sequence, and through BCE with a weight that broadcasts; grads compared."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 5)
        self.register_buffer("w", torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0]))

    def forward(self, x, tgt):
        logits = self.fc(x)
        l1 = F.cross_entropy(logits.view(-1, 5), tgt.view(-1), weight=self.w, label_smoothing=0.1, ignore_index=-1)
        l2 = F.binary_cross_entropy(torch.sigmoid(logits), (logits > 0).float().detach(), weight=self.w)
        loss = l1 + l2
        loss.backward()
        return loss.detach(), self.fc.weight.grad.clone()


case("loss_backward_weighted_smoothing_ignore", lambda: (R(2, 3, 4), torch.tensor([[1, -1, 4], [-1, 0, 2]])), train=True)(
    lambda: LossBackwardWeighted())


# ======================================================================= randomness under the generator
class RandomOpsZoo(nn.Module):
    """Random draws from torch's generator in the compiled function: rand_like, randn with a shape from an
    input, bernoulli_ in place, normal_ on a buffer, uniform_ on a slice, randperm, randint_like, multinomial
    with and without replacement, exponential_, dropout in train, a Gumbel top-k."""

    def __init__(self):
        super().__init__()
        self.register_buffer("noise", torch.zeros(3, 4))

    def forward(self, x, p):
        a = torch.rand_like(x)
        b = torch.randn(x.shape[0], 2)
        c = torch.empty_like(x).bernoulli_(0.3)
        self.noise.normal_(0.0, 0.5)
        d = x.clone()
        d[:, 1:3].uniform_(-1, 1)
        perm = torch.randperm(x.shape[0])
        ri = torch.randint_like(x, 0, 10)
        m1 = torch.multinomial(p, 2, replacement=True)
        m2 = torch.multinomial(p, 3)
        e = torch.empty(5).exponential_(2.0)
        dr = F.dropout(x, 0.4, training=True)
        g = -torch.log(-torch.log(torch.rand_like(p).clamp(1e-9, 1 - 1e-9)))
        top = (p.log() + g).topk(2, -1).indices
        return a, b, c, self.noise * 1, d, x[perm], ri, m1, m2, e, dr, top


case("random_ops_under_generator", lambda: (R(3, 4), torch.rand(3, 5) + 0.1), train=True)(lambda: RandomOpsZoo())


class SeededInsideFork(nn.Module):
    """Reseeding inside the function: torch.manual_seed(k) then rand, a fork_rng block whose draws do not
    advance the outer generator, and get_rng_state / set_rng_state to replay a draw."""

    def forward(self, x):
        torch.manual_seed(123)
        a = torch.rand(3)
        with torch.random.fork_rng():
            torch.manual_seed(7)
            b = torch.randn(2)
        st = torch.get_rng_state()
        c1 = torch.rand(2)
        torch.set_rng_state(st)
        c2 = torch.rand(2)
        return x + a.sum(), b, c1, c2, torch.rand(1)


case("seeded_fork_rng_replay", lambda: (R(2, 3),))(lambda: SeededInsideFork())


# ======================================================================= grad and autocast modes
class AutocastNested(nn.Module):
    """autocast(cpu, bf16) around linear + softmax, a nested autocast(enabled=False) with a .float() cast,
    a float16 autocast region, and results used outside in float32."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.a(x)
            s = h.softmax(-1)
            with torch.autocast("cpu", enabled=False):
                g = self.b(h.float())
            k = self.b(h)
        with torch.autocast("cpu", dtype=torch.float16):
            m = torch.mm(x, x.T)
        return h.dtype, s, g, k, m, (g + k.float()).sum(-1)


case("autocast_nested_disabled_fp16", lambda: (R(3, 6),))(lambda: AutocastNested())


class InferenceModeInside(nn.Module):
    """torch.inference_mode() and set_grad_enabled(False) blocks inside a training forward, a tensor made
    in inference mode used later only under no_grad, and is_grad_enabled as a branch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with torch.inference_mode():
            stats = self.fc(x).mean(0)
        with torch.set_grad_enabled(False):
            frozen = self.fc(x) * 2
        y = self.fc(x)
        if torch.is_grad_enabled():
            y = y + frozen.detach()
        loss = y.sum()
        loss.backward()
        return loss.detach(), stats.clone(), self.fc.bias.grad.clone()


case("inference_mode_set_grad_enabled_train", lambda: (R(3, 4),), train=True)(lambda: InferenceModeInside())


# ======================================================================= python outputs
Stats = collections.namedtuple("Stats", "mean std extra")
Extra = collections.namedtuple("Extra", "n shape name")


@fn_case("python_value_outputs", lambda: (R(3, 5), 0.25, 3))
def python_value_outputs(x, tau, k):
    """Outputs that are not tensors: torch.Size, ints from shapes and arithmetic, floats from Python math
    on arguments, a string, None, an OrderedDict, nested namedtuples, a list of tuples, a bool."""
    y = x / tau
    od = collections.OrderedDict(logits=y, probs=y.softmax(-1))
    od["k"] = k * 2
    return (x.shape, x.size(1) * k, math.sqrt(tau) + 1, f"k={k}", None, od,
            Stats(x.mean(), x.std(), Extra(x.numel(), tuple(x.shape[::-1]), "x")), [(i, x[i].sum()) for i in range(2)],
            x.dim() == 2, x.dtype, float(k) / 7)


# ======================================================================= numerics at the edges
@fn_case("overflow_underflow_transcendentals", lambda: (torch.tensor([-1e4, -100.0, -20.0, -1e-8, 0.0, 1e-8, 20.0, 88.0, 89.0, 1e4]),))
def overflow_underflow_transcendentals(x):
    """Functions at the limits of float32: exp overflow to inf and underflow to 0, expm1 / log1p of tiny
    values (relative accuracy), softplus threshold, sigmoid / logsigmoid / tanh saturation, erf / erfc of
    large values, log of 0, pow of large exponents, sinh / cosh overflow, xlogy, logaddexp with -inf."""
    return (x.exp(), x.expm1(), (x * 1e-30).log1p(), F.softplus(x), F.softplus(x, beta=2, threshold=5), x.sigmoid(),
            F.logsigmoid(x), x.tanh(), x.erf(), x.erfc(), (x.clamp(min=0)).log(), x.clamp(-10, 10).exp2(), torch.sinh(x / 10),
            torch.cosh(x / 10), torch.logaddexp(x, torch.full_like(x, float("-inf"))), torch.logaddexp2(x, x), F.silu(x),
            F.gelu(x), F.mish(x), F.elu(x), F.selu(x), F.celu(x, 0.5), torch.special.expit(x), torch.special.log_softmax(x, 0))


@fn_case("var_std_corrections_edges", lambda: (R(4, 6), R(1, 6), R(3, 1)))
def var_std_corrections_edges(x, one, col):
    """var / std with correction 0 and 2, unbiased over a single element (NaN / inf), std_mean, var_mean
    over several dims, logsumexp with all -inf rows, prod of an all-zero row, norm p=0/inf/-inf/3,
    aminmax, count_nonzero, nansum with NaN, mean with dtype, sum of bool, prod of bool."""
    xi = x.masked_fill(x > 1, float("-inf"))
    xi[0] = float("-inf")
    return (x.var(1, correction=0), x.std(0, correction=2), one.var(0), col.std(1), torch.std_mean(x, 1), torch.var_mean(x, (0, 1)),
            xi.logsumexp(1), x.masked_fill(x < 0, 0).prod(1), x.norm(0, 1), x.norm(float("inf"), 1), x.norm(float("-inf"), 0),
            x.norm(3), torch.aminmax(x, dim=1), x.count_nonzero(1), (x > 0).sum(1), (x > -2).prod(1), x.mean(1, dtype=torch.float64),
            torch.linalg.vector_norm(x, 2.5, dim=1), torch.linalg.matrix_norm(x[:3, :3], "fro"))


@fn_case("rounding_half_even_decimals", lambda: (torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.125, 2.675, 1e10 + 0.5, -0.0]),))
def rounding_half_even_decimals(x):
    """round half to even, round with decimals (positive and negative), trunc / frac / floor / ceil of -0.0,
    sign / sgn / signbit of -0.0, fix, nan_to_num defaults (inf to the float max)."""
    y = torch.cat([x, torch.tensor([float("inf"), float("-inf"), float("nan")])])
    return (x.round(), x.round(decimals=2), x.round(decimals=-1), x.trunc(), x.frac(), x.floor(), x.ceil(), x.sign(),
            x.signbit(), torch.fix(x), y.nan_to_num(), y.nan_to_num(1.0, 2.0, -2.0), y.half().nan_to_num(), (x * 3).round() / 3)


@fn_case("integer_math_functions", lambda: (I(-20, 21, 4, 5), I(1, 30, 4, 5), I(0, 2, 4, 5).bool()))
def integer_math_functions(a, b, m):
    """Integer ops with their own semantics: gcd / lcm (negative inputs), int pow to a tensor exponent, int
    abs / sign / neg, bitwise and/or/xor with bool, logical ops on ints, min/max of mixed int dtypes,
    int div modes, sqrt of int (float32), mean of int via float, isin, bitwise_left_shift tensor."""
    return (torch.gcd(a, b), torch.lcm(a, b), a.pow(b % 4), a.abs(), a.sign(), torch.minimum(a, b.int()), torch.maximum(a.short(), b),
            a & m, a | m.long(), a ^ b, torch.logical_and(a, b), torch.logical_xor(a, m), torch.div(a, b, rounding_mode="floor"),
            torch.div(a, b, rounding_mode="trunc"), a.sqrt(), a.float().mean(), torch.isin(a, b), a << (b % 5), a.bitwise_not(),
            a.sum(dtype=torch.int8), (a * 1000).to(torch.int16) * 40)


# ======================================================================= assorted real-world blocks
class FocalModulation(nn.Module):
    """FocalNet focal modulation: linear to q / ctx / gates, hierarchical depthwise convs with GELU, gated
    aggregation, global context by mean, 1x1 conv modulator, all on channels_last-permuted tensors."""

    def __init__(self, d=8, levels=2):
        super().__init__()
        self.f = nn.Linear(d, 2 * d + levels + 1)
        self.h = nn.Conv2d(d, d, 1)
        self.focal = nn.ModuleList(nn.Sequential(nn.Conv2d(d, d, 3 + 2 * k, padding=1 + k, groups=d, bias=False), nn.GELU())
                                   for k in range(levels))
        self.proj = nn.Linear(d, d)
        self.levels, self.d = levels, d

    def forward(self, x):        # (B, H, W, C)
        x = self.f(x).permute(0, 3, 1, 2).contiguous()
        q, ctx, gates = torch.split(x, (self.d, self.d, self.levels + 1), 1)
        ctx_all = 0
        for lvl in range(self.levels):
            ctx = self.focal[lvl](ctx)
            ctx_all = ctx_all + ctx * gates[:, lvl:lvl + 1]
        ctx_global = F.gelu(ctx.mean(2, keepdim=True).mean(3, keepdim=True))
        ctx_all = ctx_all + ctx_global * gates[:, self.levels:]
        out = q * self.h(ctx_all)
        return self.proj(out.permute(0, 2, 3, 1).contiguous())


case("focalnet_modulation", lambda: (R(2, 5, 5, 8),))(lambda: FocalModulation())


class ConvNeXtV2GRN(nn.Module):
    """ConvNeXt-V2 block: depthwise 7x7, channels-last LayerNorm, GRN (global response norm: L2 over H, W,
    divided by the channel mean), layer scale and stochastic depth in eval."""

    def __init__(self, d=8):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, 4 * d) * 0.1)
        self.beta = nn.Parameter(torch.randn(1, 1, 1, 4 * d) * 0.1)

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = F.gelu(self.pw1(self.norm(h)))
        gx = torch.norm(h, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        h = self.gamma * (h * nx) + self.beta + h
        return x + self.pw2(h).permute(0, 3, 1, 2)


case("convnextv2_grn_block", lambda: (R(2, 8, 9, 9),))(lambda: ConvNeXtV2GRN())


class PerceiverLatentAttention(nn.Module):
    """Perceiver cross-attention from learned latents to a padded input (key padding mask from lengths via
    arange < lengths), with -finfo.max fill, then a latent self-attention via nn.MultiheadAttention."""

    def __init__(self, d=8, n_lat=3):
        super().__init__()
        self.lat = nn.Parameter(torch.randn(n_lat, d))
        self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
        self.mha = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x, lengths):
        b, n, d = x.shape
        mask = torch.arange(n)[None] < lengths[:, None]
        q = self.q(self.lat).expand(b, -1, -1)
        k, v = self.kv(x).chunk(2, -1)
        sim = q @ k.transpose(1, 2) * d ** -0.5
        sim = sim.masked_fill(~mask[:, None], -torch.finfo(sim.dtype).max)
        lat = sim.softmax(-1) @ v
        out, w = self.mha(lat, lat, lat, need_weights=True, average_attn_weights=False)
        return out, w


case("perceiver_latent_cross_attention", lambda: (R(2, 6, 8), torch.tensor([6, 2])))(lambda: PerceiverLatentAttention())


class XPosRetention(nn.Module):
    """RetNet-style retention: a decay mask built from arange with tril and exp of (i - j) * log(gamma) per
    head, masked by -inf-free tril, scaled per row by its sum's sqrt, theta rotation with cos/sin."""

    def __init__(self, heads=2, d=4):
        super().__init__()
        self.register_buffer("gamma", 1 - 2.0 ** (-5 - torch.arange(heads, dtype=torch.float32)))
        self.register_buffer("theta", 1.0 / (10000 ** torch.linspace(0, 1, d // 2)))

    def forward(self, q, k, v):      # (B, H, N, D)
        n = q.shape[2]
        idx = torch.arange(n, dtype=torch.float32)
        diff = idx[:, None] - idx[None]
        decay = torch.exp(diff * torch.log(self.gamma)[:, None, None]).tril()
        decay = torch.where(diff >= 0, decay, torch.zeros_like(decay))
        decay = decay / decay.sum(-1, keepdim=True).sqrt()
        ang = idx[:, None] * self.theta[None]
        sin, cos = ang.sin().repeat_interleave(2, -1), ang.cos().repeat_interleave(2, -1)

        def rot(t):
            t2 = torch.stack((-t[..., 1::2], t[..., ::2]), -1).flatten(-2)
            return t * cos + t2 * sin
        qk = rot(q) @ rot(k).transpose(-1, -2) * decay
        qk = qk / qk.abs().sum(-1, keepdim=True).clamp(min=1)
        return qk @ v


case("retnet_retention_decay_xpos", lambda: (R(2, 2, 5, 4), R(2, 2, 5, 4), R(2, 2, 5, 4)))(lambda: XPosRetention())


class SwiGLUMoEDense(nn.Module):
    """Dense MoE (soft routing): router softmax, top-2 weights renormalised, every expert's SwiGLU computed
    batched by einsum over stacked weights, combine by gather of the top-2 experts' outputs."""

    def __init__(self, d=6, e=4, h=8):
        super().__init__()
        self.router = nn.Linear(d, e, bias=False)
        self.w1, self.w3 = nn.Parameter(torch.randn(e, d, h) * 0.3), nn.Parameter(torch.randn(e, d, h) * 0.3)
        self.w2 = nn.Parameter(torch.randn(e, h, d) * 0.3)

    def forward(self, x):
        p = self.router(x).softmax(-1)
        w, sel = p.topk(2, -1)
        w = w / w.sum(-1, keepdim=True)
        hid = F.silu(torch.einsum("nd,edh->neh", x, self.w1)) * torch.einsum("nd,edh->neh", x, self.w3)
        outs = torch.einsum("neh,ehd->ned", hid, self.w2)
        chosen = outs.gather(1, sel[..., None].expand(-1, -1, x.shape[-1]))
        aux = (p.mean(0) * F.one_hot(sel[:, 0], p.shape[-1]).float().mean(0)).sum() * p.shape[-1]
        return (chosen * w[..., None]).sum(1), aux


case("moe_dense_swiglu_topk_gather", lambda: (R(7, 6),))(lambda: SwiGLUMoEDense())


class SpatialSoftmaxKeypoints(nn.Module):
    """Robot-learning spatial softmax with a learned temperature, expected x/y from linspace grids,
    a keypoint heatmap rendered back with exp(-d^2 / sigma), and unravel of argmax with // and %."""

    def __init__(self):
        super().__init__()
        self.temp = nn.Parameter(torch.tensor(0.7))

    def forward(self, f):      # (B, K, H, W)
        b, k, h, w = f.shape
        p = (f.flatten(2) / self.temp).softmax(-1).view(b, k, h, w)
        ys, xs = torch.linspace(-1, 1, h), torch.linspace(-1, 1, w)
        ex, ey = (p.sum(2) * xs).sum(-1), (p.sum(3) * ys).sum(-1)
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        d2 = (gx - ex[..., None, None]) ** 2 + (gy - ey[..., None, None]) ** 2
        heat = torch.exp(-d2 / 0.1)
        am = f.flatten(2).argmax(-1)
        return ex, ey, heat, torch.stack([am // w, am % w], -1)


case("spatial_softmax_keypoints_unravel", lambda: (R(2, 3, 5, 6),))(lambda: SpatialSoftmaxKeypoints())


class CharCNNHighway(nn.Module):
    """ELMo-style character CNN: embedding with padding_idx 0, conv1d of several widths, max over time, two
    highway layers (sigmoid gate carries x), and a mask from ids > 0 applied by multiplication."""

    def __init__(self, v=20, e=4):
        super().__init__()
        self.emb = nn.Embedding(v, e, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(e, c, w) for w, c in ((1, 2), (2, 3), (3, 3)))
        self.hw = nn.ModuleList(nn.Linear(8, 16) for _ in range(2))

    def forward(self, ids):       # (B, T, C)
        b, t, c = ids.shape
        x = self.emb(ids.view(-1, c)).transpose(1, 2)
        h = torch.cat([torch.relu(conv(x)).max(-1).values for conv in self.convs], -1)
        for lay in self.hw:
            nl, gate = lay(h).chunk(2, -1)
            g = torch.sigmoid(gate)
            h = g * h + (1 - g) * F.relu(nl)
        mask = (ids.view(-1, c) > 0).any(-1, keepdim=True)
        return (h * mask).view(b, t, -1)


case("elmo_char_cnn_highway", lambda: (I(0, 20, 2, 3, 5),))(lambda: CharCNNHighway())


class CRFViterbiForward(nn.Module):
    """Linear-chain CRF (BiLSTM-CRF tutorial): forward algorithm with logsumexp over broadcast transitions and
    a mask, gold path score with gather, Viterbi with max / argmax and a backtrace by gather in Python."""

    def __init__(self, k=4):
        super().__init__()
        self.trans = nn.Parameter(torch.randn(k, k))
        self.start, self.end = nn.Parameter(torch.randn(k)), nn.Parameter(torch.randn(k))

    def forward(self, em, tags, mask):      # (T, B, K), (T, B), (T, B) bool
        T = em.shape[0]
        score = self.start + em[0]
        vit = score.clone()
        bps = []
        for t in range(1, T):
            nxt = torch.logsumexp(score[:, :, None] + self.trans + em[t][:, None], 1)
            score = torch.where(mask[t][:, None], nxt, score)
            v, bp = (vit[:, :, None] + self.trans).max(1)
            vit = torch.where(mask[t][:, None], v + em[t], vit)
            bps.append(bp)
        logz = torch.logsumexp(score + self.end, 1)
        gold = self.start[tags[0]] + em[0].gather(1, tags[0][:, None]).squeeze(1)
        for t in range(1, T):
            step = self.trans[tags[t - 1], tags[t]] + em[t].gather(1, tags[t][:, None]).squeeze(1)
            gold = gold + step * mask[t]
        best = (vit + self.end).argmax(1)
        path = [best]
        for bp in reversed(bps):
            best = bp.gather(1, best[:, None]).squeeze(1)
            path.append(best)
        return logz - gold, torch.stack(path[::-1])


case("crf_forward_viterbi_backtrace", lambda: (R(5, 3, 4), I(0, 4, 5, 3), torch.tensor([[1, 1, 1]] * 3 + [[1, 0, 1]] * 2).bool()))(
    lambda: CRFViterbiForward())


class NeRFPositionalHash(nn.Module):
    """Instant-NGP style multiresolution hash encoding: per-level scaled coordinates, floor to int64 corners,
    prime-multiply xor hashing modulo the table size, trilinear weights from the fractional part, gather."""

    def __init__(self, levels=3, table=64, f=2):
        super().__init__()
        self.tables = nn.Parameter(torch.randn(levels, table, f) * 0.1)
        self.res = [4, 8, 16]
        self.T = table

    def forward(self, xyz):     # (N, 3) in [0, 1)
        feats = []
        primes = torch.tensor([1, 2654435761, 805459861])
        for lvl, r in enumerate(self.res):
            p = xyz * r
            p0 = p.floor().long()
            w = p - p0
            acc = 0
            for corner in range(8):
                off = torch.tensor([(corner >> i) & 1 for i in range(3)])
                c = p0 + off
                h = ((c * primes)[:, 0] ^ (c * primes)[:, 1] ^ (c * primes)[:, 2]) % self.T
                cw = torch.where(off.bool(), w, 1 - w).prod(-1, keepdim=True)
                acc = acc + cw * self.tables[lvl][h]
            feats.append(acc)
        return torch.cat(feats, -1)


case("instant_ngp_hash_encoding", lambda: (torch.rand(6, 3),))(lambda: NeRFPositionalHash())


class TCNCausalDilatedCache(nn.Module):
    """Streaming causal TCN: left padding by F.pad per dilation, a buffer cache of the last inputs per layer
    concatenated in front and then replaced (in-place copy_ into a buffer slice), residual with 1x1 conv."""

    def __init__(self, c=3, dil=(1, 2)):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(c, c, 2, dilation=d) for d in dil)
        self.dil = dil
        for i, d in enumerate(dil):
            self.register_buffer(f"cache{i}", torch.zeros(1, c, d))

    def forward(self, x):         # (1, C, T) chunk
        for i, (conv, d) in enumerate(zip(self.convs, self.dil)):
            cache = getattr(self, f"cache{i}")
            inp = torch.cat([cache, x], -1)
            cache.copy_(inp[..., -d:])
            x = x + torch.tanh(conv(inp))
        return x


case("streaming_tcn_cache_buffers", lambda: (R(1, 3, 5),))(lambda: TCNCausalDilatedCache())


class OnlineSoftmaxChunks(nn.Module):
    """Flash-attention's online softmax written in Python over key chunks: running max m, denominator l,
    rescaled accumulator with exp(m_old - m_new), -inf padding in the last chunk, compared with softmax."""

    def forward(self, q, k, v):
        n = k.shape[1]
        m = torch.full(q.shape[:2] + (1,), float("-inf"))
        l_ = torch.zeros_like(m)
        acc = torch.zeros_like(q)
        for s in range(0, n, 3):
            kc, vc = k[:, s:s + 3], v[:, s:s + 3]
            sc = q @ kc.transpose(1, 2)
            if kc.shape[1] < 3:
                sc = F.pad(sc, (0, 3 - kc.shape[1]), value=float("-inf"))
                vc = F.pad(vc, (0, 0, 0, 3 - kc.shape[1]))
            m_new = torch.maximum(m, sc.amax(-1, keepdim=True))
            p = torch.exp(sc - m_new)
            alpha = torch.exp(m - m_new)
            l_ = l_ * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p @ vc
            m = m_new
        return acc / l_, (q @ k.transpose(1, 2)).softmax(-1) @ v


case("online_softmax_chunked_attention", lambda: (R(2, 4, 5), R(2, 7, 5), R(2, 7, 5)))(lambda: OnlineSoftmaxChunks())


class FakeQuantPerChannel(nn.Module):
    """Per-channel int8 weight quantization (symmetric, scale from amax / 127, round, clamp, int8 storage),
    dequantized matmul, per-tensor uint8 activation fake quant with zero point, and torch's
    fake_quantize_per_channel_affine / per_tensor_affine for comparison."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        s = self.w.abs().amax(1, keepdim=True) / 127
        q = torch.clamp(torch.round(self.w / s), -128, 127).to(torch.int8)
        wq = q.float() * s
        lo, hi = x.min(), x.max()
        sc = (hi - lo) / 255
        zp = torch.clamp(torch.round(-lo / sc), 0, 255)
        xq = (torch.clamp(torch.round(x / sc) + zp, 0, 255) - zp) * sc
        ref_w = torch.fake_quantize_per_channel_affine(self.w, s.squeeze(1).detach(), torch.zeros(4, dtype=torch.int32), 0, -128, 127)
        ref_x = torch.fake_quantize_per_tensor_affine(x, 0.05, 10, 0, 255)
        return q, xq @ wq.T, ref_w, ref_x


case("int8_per_channel_fake_quant", lambda: (R(3, 6),))(lambda: FakeQuantPerChannel())


class DictKVCache(nn.Module):
    """A KV cache kept in a Python dict attribute of tensors, grown by cat on every call (shapes change per
    call), the attention over everything cached, and the cache length returned as an int."""

    def __init__(self, d=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.cache = {}

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        if "k" in self.cache:
            k = torch.cat([self.cache["k"], k], 1)
            v = torch.cat([self.cache["v"], v], 1)
        self.cache["k"], self.cache["v"] = k.detach(), v.detach()
        att = (q @ k.transpose(1, 2) / 2).softmax(-1)
        return att @ v, k.shape[1]


case("dict_kv_cache_growing", lambda: (R(1, 2, 4),))(lambda: DictKVCache())


class TokenDropAndRestore(nn.Module):
    """MAE random masking: noise argsort to ids_shuffle, ids_restore by argsort again, keep by gather, mask
    tokens appended and unshuffled by gather with ids_restore, binary mask scattered back."""

    def __init__(self, d=4, ratio=0.5):
        super().__init__()
        self.mask_token = nn.Parameter(torch.randn(1, 1, d))
        self.ratio = ratio

    def forward(self, x, noise):
        n, length, d = x.shape
        keep = int(length * (1 - self.ratio))
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :keep]
        xk = torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, d))
        mask = torch.ones(n, length)
        mask[:, :keep] = 0
        mask = torch.gather(mask, 1, ids_restore)
        toks = self.mask_token.repeat(n, length - keep, 1)
        full = torch.cat([xk * 2, toks], 1)
        full = torch.gather(full, 1, ids_restore.unsqueeze(-1).repeat(1, 1, d))
        return full, mask, ids_restore


case("mae_random_masking_restore", lambda: (R(2, 6, 4), torch.rand(2, 6)))(lambda: TokenDropAndRestore())


class ConvBNFoldInference(nn.Module):
    """Conv-BN folding at run time (as deployment scripts do): w * (gamma / sqrt(var + eps)) reshaped per
    out channel, folded bias, F.conv2d with the folded weights, compared with the unfused pair in eval."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        bn = self.bn
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        w = self.conv.weight * scale.reshape(-1, 1, 1, 1)
        b = bn.bias - bn.running_mean * scale
        return F.conv2d(x, w, b, padding=1), self.bn(self.conv(x))


case("conv_bn_fold_runtime", lambda: (R(2, 3, 6, 6),))(lambda: ConvBNFoldInference())


class PoolingReturnIndicesDilation(nn.Module):
    """max_pool2d with dilation and return_indices, max_unpool2d with output_size, avg_pool2d with
    count_include_pad False and ceil_mode, lp_pool2d, max_pool1d with padding, adaptive_max_pool2d indices."""

    def forward(self, x):
        p, idx = F.max_pool2d(x, 2, stride=2, dilation=2, return_indices=True)
        p2, idx2 = F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)
        up = F.max_unpool2d(p2, idx2, 3, stride=2, padding=1, output_size=x.shape[-2:])
        return (p, idx, up, F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False), F.lp_pool2d(x, 2, 2),
                F.max_pool1d(x.flatten(2), 4, 3, padding=2), F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
                F.avg_pool2d(x, (2, 3), stride=(1, 2), divisor_override=4))


case("pool_return_indices_dilation_unpool", lambda: (R(2, 2, 7, 8),))(lambda: PoolingReturnIndicesDilation())


class TensorSplitStackZoo(nn.Module):
    """tensor_split by indices and sections, split with sizes, chunk uneven, unbind, hsplit / vsplit /
    dsplit, stack of 0-dim tensors, cat of empty (0,) legacy tensors with others, block_diag, cartesian_prod,
    column_stack / row_stack, atleast_3d."""

    def forward(self, x, v):
        return (x.tensor_split([1, 4], 1), x.tensor_split(3, 0), x.split([2, 1, 3], 1), x.chunk(4, 1), x.unbind(0),
                torch.hsplit(x, 2), torch.vsplit(x, [1]), torch.dsplit(x[None], 3), torch.stack([x.sum(), x.mean(), v[0]]),
                torch.cat([torch.empty(0), v]), torch.block_diag(x[:2, :2], v[None]), torch.cartesian_prod(v[:2], v[2:]),
                torch.column_stack([v, v]), torch.row_stack([v, v]), torch.atleast_3d(v).shape)


case("tensor_split_stack_zoo", lambda: (R(3, 6), R(4)))(lambda: TensorSplitStackZoo())


class InplaceChainTransposedInput(nn.Module):
    """In-place chains on an input that arrives transposed and on a slice of another input: add_, relu_,
    mul_ by a broadcast row, clamp_, masked_fill_, an in-place op on a diagonal view, fill_diagonal_."""

    def forward(self, xt, y):
        xt.add_(1).relu_().mul_(y[0, :xt.shape[1]])
        s = y[1:, 1:]
        s.clamp_(-0.5, 0.5).masked_fill_(s > 0.4, 9.0)
        y.diagonal().sub_(1)
        z = torch.zeros(3, 3)
        z.fill_diagonal_(2.5)
        return xt.sum(), y.clone(), z


case("inplace_chain_transposed_input", lambda: (R(4, 3).t(), R(4, 4)))(lambda: InplaceChainTransposedInput())


class InplaceDtypeErrors(nn.Module):
    """In-place ops eager rejects: an int tensor add_ of a float (result type Float can't be cast to Long),
    a broadcast that would resize (3,1).add_((3,4)); the compiled function must raise the same error."""

    def forward(self, n, x, y):
        out = x * 2
        if y.shape[1] == 1:
            y.add_(x)
        else:
            n.add_(0.5)
        return out


case("inplace_dtype_broadcast_errors", lambda: (I(0, 5, 3, 4), R(3, 4), R(3, 4)))(lambda: InplaceDtypeErrors())
case("inplace_broadcast_resize_error", lambda: (I(0, 5, 3, 4), R(3, 4), R(3, 1)))(lambda: InplaceDtypeErrors())


class UnfoldFoldDilated(nn.Module):
    """F.unfold with dilation, padding and stride, a per-patch linear (im2col conv), fold back with overlap
    divided by the fold of ones (overlap count), and Tensor.unfold with step larger than size (gaps)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 2 * 9))

    def forward(self, x):
        cols = F.unfold(x, 3, dilation=2, padding=2, stride=(1, 2))
        y = self.w @ cols
        back = F.fold(cols, x.shape[-2:], 3, dilation=2, padding=2, stride=(1, 2))
        cnt = F.fold(torch.ones_like(cols), x.shape[-2:], 3, dilation=2, padding=2, stride=(1, 2))
        return y, back / cnt, x.unfold(3, 2, 3), x.unfold(2, 1, 1).shape


case("unfold_fold_dilated_overlap_count", lambda: (R(2, 2, 5, 7),))(lambda: UnfoldFoldDilated())


class StatefulPythonFloatsAndLists(nn.Module):
    """Python state a training loop keeps on the module: a list of loss floats appended every call (item()),
    an exponential moving average float, a best-so-far with a branch, and a tensor built from the list."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)
        self.history = []
        self.ema = 0.0
        self.best = float("inf")

    def forward(self, x, y):
        loss = F.mse_loss(self.fc(x), y)
        v = loss.item()
        self.history.append(v)
        self.ema = 0.9 * self.ema + 0.1 * v
        improved = v < self.best
        if improved:
            self.best = v
        return loss, torch.tensor(self.history[-3:]).mean(), self.ema, improved


case("python_float_state_history", lambda: (R(4, 3), R(4, 1)))(lambda: StatefulPythonFloatsAndLists())


class GatherScatterNegativeDims(nn.Module):
    """gather / scatter / index_select / take_along_dim with negative dims, scatter_ with a src broadcast
    needing expand, index_copy_ on dim -1, narrow with a negative start, select_scatter / slice_scatter /
    diagonal_scatter / as_strided_scatter."""

    def forward(self, x, idx):
        z = torch.zeros_like(x)
        return (x.gather(-1, idx), z.scatter(-1, idx, x), x.index_select(-2, idx[0, 0]), torch.take_along_dim(x, idx, -1),
                z.clone().index_copy_(-1, torch.tensor([0, 2]), x[..., :2]), x.narrow(-1, -3, 2),
                torch.select_scatter(x, x[:, 0] * 0, 1, 0), torch.slice_scatter(x, x[:, ::2] + 1, 1, 0, None, 2),
                torch.diagonal_scatter(x[0], torch.ones(3), 0), torch.as_strided_scatter(x.flatten(), torch.zeros(3), (3,), (2,), 1))


case("gather_scatter_negative_dims_scatters", lambda: (R(3, 3, 4), I(0, 4, 3, 3, 2)))(lambda: GatherScatterNegativeDims())


class HalfPrecisionBlock(nn.Module):
    """A float16 model on the CPU without autocast: linear, layer_norm, softmax(dtype=float32) then back to half,
    an fp16 sum that overflows half (inf), a mean of a half tensor (accumulates in float), and a half
    matmul against a float32 cast."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8).half()
        self.ln = nn.LayerNorm(8).half()

    def forward(self, x):
        h = self.ln(self.fc(x))
        p = h.softmax(-1, dtype=torch.float32).half()
        big = (x * 3000).sum(-1)
        return h, p, big, (x * 3000).mean(), x.float() @ x.float().T, torch.var(h, -1), (h.abs() + 1).log()


case("float16_cpu_model_overflow", lambda: (R(3, 8).half() * 4,))(lambda: HalfPrecisionBlock())


class ComplexViewsAudio(nn.Module):
    """Complex math through view_as_complex / view_as_real: rotation by polar, multiply, conj, abs/angle,
    complex matmul (Real weights in view), and a complex exponential phase vocoder step."""

    def forward(self, x, phase):
        c = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        rot = torch.polar(torch.ones_like(phase), phase)
        y = c * rot
        z = y * y.conj()
        w = torch.exp(1j * phase) * c
        return torch.view_as_real(y), z.real, y.abs(), y.angle(), torch.view_as_real(w), (c.real ** 2 + c.imag ** 2).sqrt()


case("complex_polar_rotation_views", lambda: (R(3, 8), R(3, 4)))(lambda: ComplexViewsAudio())


class BucketizedEmbeddingsFeatures(nn.Module):
    """Tabular model features: bucketize continuous features, clamp ids, per-column embedding via offsets
    added to ids (one big table), log1p of counts, one_hot of a categorical and a cross feature by
    a * n + b hashing modulo size."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(4 * 6 + 11, 3)
        self.register_buffer("bounds", torch.tensor([-1.0, 0.0, 0.5, 1.5]))
        self.register_buffer("offs", torch.tensor([0, 6, 12, 18]))

    def forward(self, cont, cat, counts):
        b = torch.bucketize(cont, self.bounds)
        ids = torch.cat([b, cat.clamp(0, 5)], 1) + self.offs
        cross = (cat[:, 0] * 7 + cat[:, 1]) % 11 + 24
        e = torch.cat([self.emb(ids).flatten(1), self.emb(cross)], 1)
        return e, torch.log1p(counts.float()), F.one_hot(cat[:, 0].clamp(0, 5), 6)


case("tabular_bucketize_offsets_cross", lambda: (R(5, 2), I(-2, 9, 5, 2), I(0, 1000, 5, 3)))(lambda: BucketizedEmbeddingsFeatures())


class LossScalingAMPStep(nn.Module):
    """A GradScaler written by hand: loss * scale, backward, unscale grads, check for inf/nan with
    isfinite().all() (.item() branch), skip or step, scale halved or grown by a counter."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.scale = 2.0 ** 15
        self.good = 0

    def forward(self, x, y):
        loss = F.mse_loss(self.fc(x), y)
        (loss * self.scale).backward()
        grads = [p.grad for p in self.fc.parameters()]
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        with torch.no_grad():
            if finite:
                for p in self.fc.parameters():
                    p.sub_(0.1 * p.grad / self.scale)
                self.good += 1
                if self.good % 2 == 0:
                    self.scale *= 2
            else:
                self.scale /= 2
                self.good = 0
            for p in self.fc.parameters():
                p.grad = None
        return loss.detach()


case("manual_grad_scaler_step", lambda: (R(4, 3) * 1e4, R(4, 2)), train=True)(lambda: LossScalingAMPStep())
