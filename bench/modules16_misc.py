"""bench/modules16.py's miscellaneous part (same runner, its CASES appended there): data augmentation
on tensors with torch.Generator objects (per-sample random resized crops from .item() offsets,
flips by a where on a drawn mask, random erasing by slice assignment, color jitter in uint8, mixup
with a generator argument, a Gaussian blur kernel from a sigma tensor); int / bool / bf16 mixes
(bool arithmetic and promotion, uint8 wraparound and int16 saturation by clamp, bf16 residual
streams with fp32 norms, a 0-d integer tensor as an index); non-contiguous inputs (overlapping
as_strided windows, channels_last_3d, a transposed input written in place, negative-step-free
reversed views by flip, expanded inputs cloned then written); 0-size batches (an encoder layer
with batch 0 on one call, RoI pooling with no boxes, cat of a list that may be empty, top-k with
k = 0 from a length); tiled / test-time inference (sliding windows with a Gaussian importance
map, flip and multi-scale TTA, an image pyramid built in a while loop).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ augmentation with generators
class RandomResizedCrop(nn.Module):
    """torchvision's RandomResizedCrop on a batch, per sample: scale / ratio drawn from a module
    generator, up to 10 tries in a Python loop with a fallback to the center crop, offsets from
    torch.randint(...).item(), each crop resized by bilinear interpolate and stacked."""

    def __init__(self, size=6):
        super().__init__()
        self.g = torch.Generator().manual_seed(21)
        self.size = size
        self.conv = nn.Conv2d(3, 2, 3, padding=1)

    def params(self, h, w):
        area = h * w
        for _ in range(10):
            ta = area * torch.empty(1).uniform_(0.3, 1.0, generator=self.g).item()
            ar = torch.exp(torch.empty(1).uniform_(-0.3, 0.3, generator=self.g)).item()
            cw, ch = int(round((ta * ar) ** 0.5)), int(round((ta / ar) ** 0.5))
            if 0 < cw <= w and 0 < ch <= h:
                i = torch.randint(0, h - ch + 1, (1,), generator=self.g).item()
                j = torch.randint(0, w - cw + 1, (1,), generator=self.g).item()
                return i, j, ch, cw
        return (h - min(h, w)) // 2, (w - min(h, w)) // 2, min(h, w), min(h, w)

    def forward(self, x):
        crops = []
        for img in x:
            i, j, h, w = self.params(*img.shape[-2:])
            crops.append(F.interpolate(img[None, :, i:i + h, j:j + w], size=(self.size, self.size),
                                       mode="bilinear", align_corners=False)[0])
        return self.conv(torch.stack(crops))


case("random_resized_crop_module_generator_item_offsets_retry_loop", lambda: (R(3, 3, 9, 10),), ncalls=3)(
    lambda: RandomResizedCrop())


@fn_case("random_flips_where_mask_generator_arg_boxes_flipped", lambda i=0: (R(4, 3, 5, 6), U(4, 2, 4) * 5,
                                                                             torch.Generator().manual_seed(i)))
def flips(img, boxes, g):
    """Horizontal flips for a detection batch: a per-sample mask from torch.rand(generator=g),
    images by torch.where on the mask, boxes' x coordinates mirrored (x1, x2 = W - x2, W - x1)
    only for the flipped samples."""
    W = img.shape[-1]
    m = torch.rand(img.shape[0], generator=g) < 0.5
    img = torch.where(m[:, None, None, None], img.flip(-1), img)
    fb = boxes.clone()
    fb[..., 0], fb[..., 2] = W - boxes[..., 2], W - boxes[..., 0]
    return img, torch.where(m[:, None, None], fb, boxes), m


class RandomErasing(nn.Module):
    """torchvision RandomErasing written in place on a clone: per sample, with probability p from
    the module generator, a rectangle of random size / place filled by normal noise from the same
    generator through slice assignment."""

    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(4)

    def forward(self, x):
        x = x.clone()
        n_erased = 0
        for b in range(x.shape[0]):
            if torch.rand(1, generator=self.g).item() > 0.6:
                continue
            eh = int(torch.randint(1, x.shape[-2], (1,), generator=self.g))
            ew = int(torch.randint(1, x.shape[-1], (1,), generator=self.g))
            i = int(torch.randint(0, x.shape[-2] - eh + 1, (1,), generator=self.g))
            j = int(torch.randint(0, x.shape[-1] - ew + 1, (1,), generator=self.g))
            x[b, :, i:i + eh, j:j + ew] = torch.randn((x.shape[1], eh, ew), generator=self.g)
            n_erased += 1
        return x, n_erased


case("random_erasing_slice_assign_noise_module_generator", lambda: (R(4, 2, 6, 7),), ncalls=4)(
    lambda: RandomErasing())


@fn_case("color_jitter_uint8_float_roundtrip_hsv_free", lambda: (I(0, 256, 2, 3, 5, 5, dtype=torch.uint8),
                                                                 torch.Generator().manual_seed(9)))
def jitter(img, g):
    """Brightness / contrast / saturation jitter on uint8 images: factors from torch.empty(...)
    .uniform_(generator=g), blend with the grayscale (ITU-R 601 weights, mean for contrast),
    clamp to [0, 255], round back to uint8 (to(torch.uint8) after round)."""
    x = img.float()
    b, c, s = (torch.empty(img.shape[0], 1, 1, 1).uniform_(0.6, 1.4, generator=g) for _ in range(3))
    x = (x * b).clamp(0, 255)
    gray = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])[:, None]
    x = (c * x + (1 - c) * gray.mean((-1, -2), keepdim=True)).clamp(0, 255)
    gray = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])[:, None]
    x = (s * x + (1 - s) * gray).clamp(0, 255)
    return x.round().to(torch.uint8)


class MixupGen(nn.Module):
    """Mixup with a generator passed per call: lambda from a Beta distribution sampled through the
    generator-free torch._standard_gamma by two gammas (as timm does it via numpy, here torch),
    the permutation by torch.randperm(generator=g), soft targets from one_hot; a training step."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(6, 4)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def forward(self, x, y, g):
        lam = torch.rand((), generator=g) * 0.5 + 0.5
        perm = torch.randperm(x.shape[0], generator=g)
        xm = lam * x + (1 - lam) * x[perm]
        ym = lam * F.one_hot(y, 4).float() + (1 - lam) * F.one_hot(y[perm], 4).float()
        with torch.enable_grad():
            loss = torch.sum(-ym * self.net(xm).log_softmax(-1), -1).mean()
            self.opt.zero_grad()
            loss.backward()
        self.opt.step()
        return loss.detach(), perm, lam


case("mixup_generator_argument_randperm_soft_one_hot_step",
     lambda i=0: (R(5, 6), I(0, 4, 5), torch.Generator().manual_seed(3 + i)), train=True)(lambda: MixupGen())


@fn_case("gaussian_blur_kernel_from_sigma_tensor_reflect_separable", lambda i=0: (R(2, 3, 9, 8), U(2) + 0.5))
def blur(x, sigma):
    """Per-sample Gaussian blur with sigma from a tensor: the 1-d kernel size from the largest
    sigma (Python int of ceil), kernels per sample, the image reflect-padded and blurred by two
    grouped convs (rows then columns) after folding the batch into the channels."""
    ks = 2 * int(torch.ceil(sigma.max() * 2).item()) + 1
    r = torch.arange(ks) - ks // 2
    k = torch.exp(-(r[None].float() ** 2) / (2 * sigma[:, None] ** 2))
    k = k / k.sum(1, keepdim=True)
    b, c, h, w = x.shape
    kx = k.repeat_interleave(c, 0)                               # b*c, ks
    y = F.pad(x.reshape(1, b * c, h, w), (ks // 2,) * 4, mode="reflect")
    y = F.conv2d(y, kx[:, None, None, :], groups=b * c)
    y = F.conv2d(y, kx[:, None, :, None], groups=b * c)
    return y.view(b, c, h, w), ks


# ============================================================================ int / bool / bf16 mixes
@fn_case("bool_arith_promotion_bf16_mul_int_sum_dtypes", lambda: (U(4, 5) > 0.5, R(4, 5, dtype=torch.bfloat16),
                                                                    I(-5, 5, 4, 5, dtype=torch.int32)))
def bool_mix(m, xb, xi):
    """Mixed dtypes as utility code meets them: bool.sum() (int64), bool * bf16 (bf16), int32 +
    bool (int32), int32 / int (float), bf16 + int32 (bf16), bool cumsum (int64), bf16 cumsum and
    amax, mean of a bool cast to float, where between int32 and a Python float."""
    return (m.sum(), m * xb, xi + m, xi / 2, xb + xi, m.cumsum(1), xb.cumsum(1), xb.amax(0),
            m.float().mean(1), torch.where(m, xi, 0.5), (~m).int().prod(1), m.to(torch.uint8) << 2)


@fn_case("uint8_wraparound_int16_saturating_clamp", lambda: (I(0, 256, 3, 6, dtype=torch.uint8),
                                                             I(-32000, 32000, 3, 6, dtype=torch.int16)))
def int_wrap(u, s):
    """uint8 arithmetic wrapping (u + 200, u * 3, u - 250), an int16 sum widened by int32 and
    saturated by clamp before the cast back, int16 >> / & / |, abs of int16's min."""
    sat = (s.to(torch.int32) * 2).clamp(-32768, 32767).to(torch.int16)
    return (u + 200, u * 3, u - 250, u // 7, sat, s >> 3, s & 0x0F0F, s | 1,
            torch.tensor([-32768, 5], dtype=torch.int16).abs(), u.to(torch.int8))


class BF16Residual(nn.Module):
    """A bf16 transformer block with the residual stream in bf16 and the norms computed in fp32
    (x.float() then .type_as(x)), the softmax in fp32, logits cast to fp32 at the end."""

    def __init__(self, d=8):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d).bfloat16(), nn.Linear(d, d).bfloat16()
        self.ff = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d)).bfloat16()
        self.head = nn.Linear(d, 5).bfloat16()

    def forward(self, x):
        h = self.n1(x.float()).type_as(x)
        q, k, v = self.qkv(h).chunk(3, -1)
        att = (q @ k.transpose(-1, -2)).float().div(8 ** 0.5).softmax(-1).to(torch.bfloat16)
        x = x + self.o(att @ v)
        x = x + self.ff(self.n2(x.float()).type_as(x))
        return self.head(x).float(), x.dtype


case("bf16_residual_fp32_layernorm_type_as_softmax_fp32", lambda: (R(2, 5, 8, dtype=torch.bfloat16),))(
    lambda: BF16Residual())


@fn_case("zero_dim_int_tensor_index_and_python_int_mix", lambda i=0: (R(5, 4), torch.tensor(1 + i), torch.tensor([3])))
def zdim_index(x, i, j):
    """A 0-d int64 tensor used as an index (x[i], x[:, i], narrow by int(i)), a 1-element tensor
    index (x[j] keeps a dim), an index tensor plus a Python int, range(i) driven by a tensor."""
    rows = [x[k] for k in range(int(i) + 1)]
    return x[i], x[:, i], x[j], x.narrow(0, int(i), 2), x[i + 1], torch.stack(rows).sum(0)


# ============================================================================ non-contiguous inputs
@fn_case("as_strided_overlapping_windows_input_unfold_compare", lambda: (R(20).as_strided((6, 5), (3, 1)),))
def overlapping(x):
    """An input with overlapping memory (as_strided windows of stride 3 over length 5): read-only
    ops on it, a clone written in place, compared against unfold of its storage's base."""
    y = x.clone()
    y[:, 0] = 0
    return x.sum(1), x * 2, y, x.t().contiguous(), x.softmax(-1)


class Conv3dCL(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm3d(4)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return F.adaptive_avg_pool3d(y, 1).flatten(1), y.is_contiguous(memory_format=torch.channels_last_3d)


case("conv3d_channels_last_3d_input_bn_pool",
     lambda: (R(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d),), train=True)(lambda: Conv3dCL())


@fn_case("transposed_input_written_inplace_visible_to_caller", lambda: (R(5, 4).t(), R(4)))
def t_inplace(x, b):
    """A transposed (non-contiguous) input modified in place: add_ of a broadcast bias, a masked
    fill through a view of it, the caller sees both (the input compared after the call)."""
    x.add_(b[:, None])
    x[:, 0].masked_fill_(x[:, 0] < 0, 0.0)
    return x.sum(0), x.is_contiguous()


@fn_case("expanded_input_clone_then_index_put_and_flip_view", lambda: (R(1, 5).expand(4, 5), I(0, 5, 3)))
def expanded(x, idx):
    """An expanded input (stride 0): cloned before writing, index_put_ with accumulate on the
    clone, a flipped view read, the original returned untouched."""
    y = x.clone()
    y.index_put_((torch.arange(3), idx), torch.ones(3), accumulate=True)
    return y, y.flip(0)[::2], x.sum(), x.stride()


@fn_case("stepped_slices_of_inputs_matmul_and_reduction", lambda: (R(8, 10)[::2, 1::3], R(10, 3)[::2].t()))
def stepped(a, b):
    """Inputs that are stepped slices (strides (20, 3) and transposed (1, 6)): a matmul of the
    two, reductions along both dims, a view that needs a copy (reshape)."""
    return a @ b, a.sum(0), a.amax(1), b.reshape(-1), (a[:, :2] * b.t()[:4, :2]).cumsum(0)


# ============================================================================ 0-size batches
class EncoderZeroBatch(nn.Module):
    """A pre-norm attention block whose call 1 gets a batch of 0 sequences (a dataloader's last,
    empty, shard), heads split by view with explicit sizes, a key padding mask of the same batch,
    masked mean pooling (nn.MultiheadAttention itself rejects batch 0 in eager)."""

    def __init__(self, d=8, h=2):
        super().__init__()
        self.h = h
        self.norm = nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, pad):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / (d // self.h) ** 0.5
        att = att.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1)
        y = x + self.o((att @ v).transpose(1, 2).reshape(b, t, d))
        keep = (~pad).float()[..., None]
        return (y * keep).sum(1) / keep.sum(1).clamp(min=1), y.shape[0]


case("encoder_layer_zero_batch_on_one_call_padding_mask",
     lambda i=0: (R(0 if i == 1 else 2, 4, 8), torch.tensor([[False] * 4, [False, False, True, True]])[:0 if i == 1 else 2]))(
    lambda: EncoderZeroBatch().eval())


@fn_case("roi_pool_no_boxes_cat_empty_list_guard", lambda i=0: (R(1, 2, 8, 8), U(3 * (i != 1), 4) * 4))
def roi_empty(feat, boxes):
    """RoI pooling per box by slicing with Python ints from .tolist() and adaptive_max_pool2d,
    the results cat only when the list is not empty (else new_zeros(0, C, 2, 2))."""
    outs = []
    for x1, y1, w, h in boxes.tolist():
        x1, y1 = int(x1), int(y1)
        outs.append(F.adaptive_max_pool2d(feat[:, :, y1:y1 + int(h) + 1, x1:x1 + int(w) + 1], 2))
    out = torch.cat(outs) if outs else feat.new_zeros(0, feat.shape[1], 2, 2)
    return out, out.flatten(1).sum(1), len(outs)


@fn_case("topk_k_from_length_zero_and_empty_reductions", lambda i=0: (R(6), torch.tensor(3 - 3 * (i == 1))))
def topk_zero(x, n):
    """k = int(n) (0 on one call): topk with k 0, the mean of an empty selection (nan), amax over
    an empty dim guarded by numel, sum / prod of empty tensors, an empty index_select."""
    k = int(n)
    v, i = x.topk(k)
    sel = x[:k]
    mx = sel.amax() if sel.numel() else x.new_tensor(float("-inf"))
    return v, i, sel.mean(), mx, sel.sum(), sel.prod(), x.index_select(0, i)


class ZeroDetections(nn.Module):
    """A detection head post-process where the score filter keeps nothing on one call: boxes
    regressed, the kept rows gathered, per-class counts by bincount(minlength) on an empty tensor,
    the loss against no targets 0 by sum over empty."""

    def __init__(self):
        super().__init__()
        self.reg, self.cls = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, feats, thr: float):
        s, c = self.cls(feats).sigmoid().max(1)
        keep = s > thr
        boxes = self.reg(feats)[keep]
        return boxes, torch.bincount(c[keep], minlength=3), boxes.abs().sum(), (boxes[:, 2:] - boxes[:, :2]).prod(1)


case("zero_detections_threshold_empty_bincount_minlength", lambda i=0: (R(6, 4), 0.5 if i != 1 else 1.1), ncalls=3)(
    lambda: ZeroDetections())


# ============================================================================ tiled / test-time inference
class SlidingWindow(nn.Module):
    """nnU-Net / MONAI sliding-window inference: tile starts from Python arithmetic with an
    overlap (the last tile snapped to the border), each tile's prediction weighted by a Gaussian
    importance map and added into the output and a count map by slice add_."""

    def __init__(self, tile=6, overlap=0.5):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 1))
        self.tile, self.step = tile, max(1, int(tile * (1 - overlap)))
        c = torch.arange(tile) - (tile - 1) / 2
        gm = torch.exp(-(c[:, None] ** 2 + c[None] ** 2) / (2 * (tile / 8) ** 2))
        self.register_buffer("importance", (gm / gm.max()).clamp(min=1e-3))

    def starts(self, n):
        s = list(range(0, max(n - self.tile, 0) + 1, self.step))
        if s[-1] + self.tile < n:
            s.append(n - self.tile)
        return s

    def forward(self, x):
        b, _, h, w = x.shape
        out = x.new_zeros(b, 3, h, w)
        cnt = x.new_zeros(1, 1, h, w)
        for y0 in self.starts(h):
            for x0 in self.starts(w):
                p = self.net(x[:, :, y0:y0 + self.tile, x0:x0 + self.tile])
                out[:, :, y0:y0 + self.tile, x0:x0 + self.tile] += p * self.importance
                cnt[:, :, y0:y0 + self.tile, x0:x0 + self.tile] += self.importance
        return (out / cnt).softmax(1)


case("sliding_window_gaussian_importance_slice_accumulate", lambda i=0: (R(1, 2, 9 + i, 11),))(lambda: SlidingWindow())


class FlipTTA(nn.Module):
    """Test-time augmentation: the model on x, x flipped horizontally and vertically, outputs
    flipped back and averaged; a multi-scale pass interpolated back to the input size."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))

    def forward(self, x):
        outs = [self.net(x), self.net(x.flip(-1)).flip(-1), self.net(x.flip(-2)).flip(-2)]
        for s in (0.5, 1.5):
            y = F.interpolate(x, scale_factor=s, mode="bilinear", align_corners=False)
            outs.append(F.interpolate(self.net(y), size=x.shape[-2:], mode="bilinear", align_corners=False))
        return torch.stack(outs).mean(0).softmax(1)


case("flip_multiscale_tta_average_eval", lambda: (R(2, 3, 8, 6),))(lambda: FlipTTA().eval())


@fn_case("image_pyramid_while_min_side_interpolate_downsample", lambda i=0: (R(1, 2, 20 + 4 * i, 17),))
def pyramid(x):
    """A Gaussian pyramid built while the smaller side is at least 5: blur by a fixed 3x3 kernel
    (depthwise conv, reflect pad), downsample by area interpolation to floor(size / 1.5); each
    level's mean returned with the number of levels."""
    k = torch.tensor([1.0, 2.0, 1.0])
    k = (k[:, None] * k[None]) / 16
    c = x.shape[1]
    levels = [x]
    while min(x.shape[-2:]) >= 5:
        x = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), k.expand(c, 1, 3, 3), groups=c)
        x = F.interpolate(x, size=(int(x.shape[-2] / 1.5), int(x.shape[-1] / 1.5)), mode="area")
        levels.append(x)
    return [lv.mean((-1, -2)) for lv in levels], len(levels)
