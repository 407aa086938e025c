"""Eleventh real-world-style corpus (issue 10 trust): domains and idioms modules.py .. modules10.py leave out.

Written the way public repositories write them: detection heads (anchor generation and box-delta
decoding, IoU matrices, NMS-like suppression by masks, YOLO grid decoding, focal loss, target
assignment by argmax over IoU), diffusion models (sinusoidal timestep embeddings, GroupNorm
ResBlocks with FiLM, self-attention over feature maps, DDPM / DDIM steps gathering the noise
schedule by timestep, classifier-free guidance), audio front-ends (pre-emphasis, framing by unfold,
hand-built mel filterbanks and DCT for MFCC, deltas, SpecAugment masks, conv1d stacks, torch.stft
magnitudes), RL (Categorical / Normal / tanh-squashed policies with log_prob and entropy, PPO
clipped losses, GAE and n-step returns by reverse loops, dueling and distributional DQN heads),
GNNs (GCN / GraphSAGE / GAT / GIN / edge-conv message passing by index_add_ / scatter_add_ /
scatter_reduce, global pooling by graph index), point clouds (kNN by cdist + topk, neighbour
gathering, farthest point sampling, ball queries, chamfer distance), quantization-aware training
(fake_quantize per tensor / per channel, straight-through estimators, LSQ), custom
torch.autograd.Function (gradient reversal, STE sign, saved tensors, once_differentiable, mark
non-differentiable, needs_input_grad), EMA buffers (mean teacher, running scalars), training steps
with torch.optim (inside the compiled function and outside it), LoRA adapters, CPU bf16 autocast,
in-place ops on views, dict / list / dataclass inputs and outputs, and transformers models not yet
covered (YOLOS, XLNet, MPT, Mamba2, MobileNetV1, TimeSeriesTransformer, PatchTSMixer, Longformer,
BigBird, Encodec, LayoutLM, Ernie).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars, run

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ detection
def make_anchors(fh, fw, stride, sizes=(16.0, 32.0), ratios=(0.5, 1.0, 2.0)):
    ws, hs = [], []
    for s in sizes:
        for r in ratios:
            ws.append(s * math.sqrt(1.0 / r))
            hs.append(s * math.sqrt(r))
    base = torch.tensor([[-w / 2, -h / 2, w / 2, h / 2] for w, h in zip(ws, hs)])
    sx = (torch.arange(fw, dtype=torch.float32) + 0.5) * stride
    sy = (torch.arange(fh, dtype=torch.float32) + 0.5) * stride
    yy, xx = torch.meshgrid(sy, sx, indexing="ij")
    shifts = torch.stack([xx, yy, xx, yy], dim=-1).reshape(-1, 1, 4)
    return (shifts + base[None]).reshape(-1, 4)


def decode_boxes(deltas, anchors, clip=math.log(1000.0 / 16)):
    widths = anchors[:, 2] - anchors[:, 0]
    heights = anchors[:, 3] - anchors[:, 1]
    cx = anchors[:, 0] + 0.5 * widths
    cy = anchors[:, 1] + 0.5 * heights
    dx, dy, dw, dh = deltas.unbind(-1)
    dw = dw.clamp(max=clip)
    dh = dh.clamp(max=clip)
    pcx = dx * widths + cx
    pcy = dy * heights + cy
    pw = torch.exp(dw) * widths
    ph = torch.exp(dh) * heights
    return torch.stack([pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw, pcy + 0.5 * ph], dim=-1)


def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None] - inter)


class RetinaHead(nn.Module):
    """RetinaNet-style head: shared conv towers, cls logits with the prior-probability bias,
    box deltas decoded against grid anchors, clipped to the image, scores by sigmoid."""

    def __init__(self, c=8, na=6, nc=3):
        super().__init__()
        self.cls = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, na * nc, 3, padding=1))
        self.box = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, na * 4, 3, padding=1))
        nn.init.constant_(self.cls[-1].bias, -math.log((1 - 0.01) / 0.01))
        self.nc, self.na = nc, na

    def forward(self, feat):
        n, _, h, w = feat.shape
        logits = self.cls(feat).permute(0, 2, 3, 1).reshape(n, -1, self.nc)
        deltas = self.box(feat).permute(0, 2, 3, 1).reshape(n, -1, 4)
        anchors = make_anchors(h, w, 8)
        boxes = torch.stack([decode_boxes(d, anchors) for d in deltas])
        boxes[..., 0::2] = boxes[..., 0::2].clamp(0, w * 8)
        boxes[..., 1::2] = boxes[..., 1::2].clamp(0, h * 8)
        return boxes, logits.sigmoid()


case("det_retina_head_anchor_decode_clip", lambda: (R(2, 8, 4, 5),))(lambda: RetinaHead())


@fn_case("det_iou_matrix_nms_by_suppression_mask", lambda i=0: (U(12, 2) * 40, U(12, 2) * 20 + 4, U(12)))
def det_iou_matrix_nms_by_suppression_mask(xy, wh, scores):
    """Fixed-size NMS without a loop: sort by score, IoU matrix, upper triangle, a box is kept when
    no higher-scored box overlaps it beyond the threshold (the 'fast NMS' of YOLACT)."""
    boxes = torch.cat([xy, xy + wh], 1)
    order = scores.argsort(descending=True)
    b = boxes[order]
    iou = box_iou(b, b).triu(diagonal=1)
    max_iou, _ = iou.max(dim=0)
    keep = max_iou <= 0.5
    kept_scores = torch.where(keep, scores[order], torch.zeros_like(scores))
    return order, keep, kept_scores, b * keep[:, None]


@fn_case("det_batched_nms_offsets_greedy_loop", lambda i=0: (U(10, 2) * 30, U(10, 2) * 15 + 2, U(10), I(0, 3, 10)))
def det_batched_nms_offsets_greedy_loop(xy, wh, scores, labels):
    """torchvision's batched_nms trick (offset boxes per class so classes never overlap), then a
    greedy NMS by a Python loop over the sorted candidates with .item()."""
    boxes = torch.cat([xy, xy + wh], 1)
    offs = labels.to(boxes) * (boxes.max() + 1)
    b = boxes + offs[:, None]
    order = scores.argsort(descending=True)
    iou = box_iou(b, b)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for idx in order.tolist():
        if suppressed[idx]:
            continue
        keep.append(idx)
        suppressed |= iou[idx] > 0.4
    return torch.tensor(keep, dtype=torch.long), boxes[keep]


class YOLODecode(nn.Module):
    """YOLOv3/v5 head decode: (n, na*(5+nc), h, w) -> view / permute, grid by meshgrid, sigmoid
    xy * 2 - 0.5 + grid, (sigmoid wh * 2) ** 2 * anchors, objectness * class conf, confidence mask."""

    def __init__(self, c=8, nc=2):
        super().__init__()
        self.na, self.no = 3, 5 + nc
        self.m = nn.Conv2d(c, self.na * self.no, 1)
        self.register_buffer("anchor_grid", torch.tensor([[10., 13.], [16., 30.], [33., 23.]]).view(1, 3, 1, 1, 2))
        self.stride = 8

    def forward(self, x):
        bs, _, ny, nx = x.shape
        p = self.m(x).view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
        y = p.sigmoid()
        xy = (y[..., 0:2] * 2 - 0.5 + grid) * self.stride
        wh = (y[..., 2:4] * 2) ** 2 * self.anchor_grid
        conf = y[..., 4:5] * y[..., 5:]
        out = torch.cat((xy, wh, conf), -1).view(bs, -1, 2 + 2 + self.no - 5)
        mask = out[..., 4:].amax(-1) > 0.3
        return out, mask, mask.sum(1)


case("det_yolo_grid_decode_conf_mask", lambda: (R(2, 8, 3, 4),))(lambda: YOLODecode())


@fn_case("det_focal_loss_sigmoid_alpha_gamma", lambda i=0: (R(6, 4), I(0, 2, 6, 4).float()))
def det_focal_loss_sigmoid_alpha_gamma(logits, targets):
    """sigmoid_focal_loss as torchvision writes it, reductions none / mean / sum, normalised by
    the number of positives clamped to 1."""
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** 2.0)
    alpha_t = 0.25 * targets + 0.75 * (1 - targets)
    loss = alpha_t * loss
    npos = targets.sum().clamp(min=1.0)
    return loss, loss.mean(), loss.sum() / npos


@fn_case("det_anchor_target_assign_argmax_iou", lambda i=0: (U(20, 2) * 30, U(4, 2) * 30, I(0, 5, 4)))
def det_anchor_target_assign_argmax_iou(axy, gxy, glabels):
    """Faster R-CNN's Matcher: IoU of anchors vs gt, max over gt, thresholds to fg / bg / ignore
    (-1 / -2), allow_low_quality_matches by the gt's best anchors, labels gathered by the match,
    box regression targets encoded back to deltas."""
    anchors = torch.cat([axy, axy + 8], 1)
    gt = torch.cat([gxy, gxy + 10], 1)
    iou = box_iou(gt, anchors)
    matched_vals, matches = iou.max(dim=0)
    below = matched_vals < 0.3
    between = (matched_vals >= 0.3) & (matched_vals < 0.5)
    all_matches = matches.clone()
    matches[below] = -1
    matches[between] = -2
    best_per_gt, _ = iou.max(dim=1)
    gt_idx, pred_idx = torch.where(iou == best_per_gt[:, None])
    matches[pred_idx] = all_matches[pred_idx]
    labels = glabels[matches.clamp(min=0)] + 1
    labels[matches == -1] = 0
    labels[matches == -2] = -1
    g = gt[matches.clamp(min=0)]
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    gw, gh = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    tx = ((g[:, 0] + g[:, 2]) / 2 - (anchors[:, 0] + anchors[:, 2]) / 2) / aw
    tw = torch.log(gw / aw)
    return matches, labels, torch.stack([tx, tw, torch.log(gh / ah)], 1)


@fn_case("det_giou_diou_losses_box_ops", lambda i=0: (U(7, 2) * 10, U(7, 2) * 5 + 1, U(7, 2) * 10, U(7, 2) * 5 + 1))
def det_giou_diou_losses_box_ops(p1, pwh, t1, twh):
    """Generalized / distance IoU losses elementwise (torchvision.ops style), box_convert cxcywh."""
    a = torch.cat([p1, p1 + pwh], -1)
    b = torch.cat([t1, t1 + twh], -1)
    x1, y1, x2, y2 = a.unbind(-1)
    x1g, y1g, x2g, y2g = b.unbind(-1)
    xkis1, ykis1 = torch.max(x1, x1g), torch.max(y1, y1g)
    xkis2, ykis2 = torch.min(x2, x2g), torch.min(y2, y2g)
    intsct = torch.zeros_like(x1)
    mask = (ykis2 > ykis1) & (xkis2 > xkis1)
    intsct[mask] = (xkis2[mask] - xkis1[mask]) * (ykis2[mask] - ykis1[mask])
    union = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsct
    iou = intsct / (union + 1e-7)
    xc1, yc1 = torch.min(x1, x1g), torch.min(y1, y1g)
    xc2, yc2 = torch.max(x2, x2g), torch.max(y2, y2g)
    area_c = (xc2 - xc1) * (yc2 - yc1)
    giou = 1 - (iou - (area_c - union) / (area_c + 1e-7))
    diag = (xc2 - xc1) ** 2 + (yc2 - yc1) ** 2 + 1e-7
    cent = ((x1 + x2 - x1g - x2g) / 2) ** 2 + ((y1 + y2 - y1g - y2g) / 2) ** 2
    cxcywh = torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], -1)
    return giou.mean(), (1 - iou + cent / diag).sum(), cxcywh


@fn_case("det_topk_candidates_per_level_cat", lambda i=0: (R(2, 30), R(2, 12), R(2, 6)))
def det_topk_candidates_per_level_cat(l0, l1, l2):
    """Per-FPN-level top-k candidates (k = min(k, numel)), level offsets added to indices,
    concatenated and re-sorted: the pre-NMS candidate selection of detectors."""
    out_s, out_i = [], []
    off = 0
    for lv in (l0, l1, l2):
        k = min(8, lv.shape[1])
        s, idx = lv.sigmoid().topk(k, dim=1)
        out_s.append(s)
        out_i.append(idx + off)
        off += lv.shape[1]
    s = torch.cat(out_s, 1)
    i = torch.cat(out_i, 1)
    s2, o = s.sort(dim=1, descending=True)
    return s2, i.gather(1, o)


# ============================================================================ diffusion
def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class ResBlockT(nn.Module):
    def __init__(self, cin, cout, tdim, groups=4, scale_shift=False):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(tdim, cout * (2 if scale_shift else 1))
        self.norm2 = nn.GroupNorm(groups, cout)
        self.drop = nn.Dropout(0.1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        self.scale_shift = scale_shift

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        e = self.emb(F.silu(emb))[:, :, None, None]
        if self.scale_shift:
            scale, shift = e.chunk(2, dim=1)
            h = self.norm2(h) * (1 + scale) + shift
            h = F.silu(h)
        else:
            h = F.silu(self.norm2(h + e))
        return self.skip(x) + self.conv2(self.drop(h))


class AttnBlock2d(nn.Module):
    def __init__(self, c, heads=2):
        super().__init__()
        self.norm = nn.GroupNorm(4, c)
        self.qkv = nn.Conv1d(c, 3 * c, 1)
        self.proj = nn.Conv1d(c, c, 1)
        self.heads = heads

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.qkv(self.norm(x).reshape(b, c, -1))
        q, k, v = qkv.reshape(b * self.heads, 3 * c // self.heads, h * w).split(c // self.heads, dim=1)
        scale = 1 / math.sqrt(math.sqrt(c // self.heads))
        wgt = torch.einsum("bct,bcs->bts", q * scale, k * scale).softmax(dim=-1)
        a = torch.einsum("bts,bcs->bct", wgt, v).reshape(b, c, -1)
        return x + self.proj(a).reshape(b, c, h, w)


class TinyUNet(nn.Module):
    """A guided-diffusion style UNet: timestep MLP, ResBlocks with GroupNorm and the embedding,
    attention at the bottom, strided conv down, nearest upsample + conv, skip concatenation."""

    def __init__(self, c=8, scale_shift=False):
        super().__init__()
        self.tdim = 16
        self.temb = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 16))
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.d1 = ResBlockT(c, c, 16, scale_shift=scale_shift)
        self.down = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.mid1 = ResBlockT(c, 2 * c, 16, scale_shift=scale_shift)
        self.attn = AttnBlock2d(2 * c)
        self.mid2 = ResBlockT(2 * c, c, 16, scale_shift=scale_shift)
        self.up = nn.Conv2d(c, c, 3, padding=1)
        self.u1 = ResBlockT(2 * c, c, 16, scale_shift=scale_shift)
        self.out = nn.Sequential(nn.GroupNorm(4, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

    def forward(self, x, t):
        emb = self.temb(timestep_embedding(t, 8))
        h0 = self.d1(self.inp(x), emb)
        h = self.down(h0)
        h = self.mid2(self.attn(self.mid1(h, emb)), emb)
        h = self.up(F.interpolate(h, scale_factor=2, mode="nearest"))
        h = self.u1(torch.cat([h, h0], dim=1), emb)
        return self.out(h)


case("diff_unet_timestep_groupnorm_attention", lambda: (R(2, 3, 8, 8), I(0, 1000, 2)))(lambda: TinyUNet())
case("diff_unet_scale_shift_norm_train_dropout", lambda: (R(2, 3, 8, 8), I(0, 1000, 2)), train=True)(
    lambda: TinyUNet(scale_shift=True))


class DDPMTrain(nn.Module):
    """A DDPM training step: a schedule of betas as buffers, alphas_cumprod gathered by a random
    timestep (t drawn inside), q_sample, epsilon-prediction MSE, backward and Adam step."""

    def __init__(self):
        super().__init__()
        self.net = TinyUNet(c=4)
        betas = torch.linspace(1e-4, 0.02, 100)
        ac = torch.cumprod(1 - betas, 0)
        self.register_buffer("sqrt_ac", ac.sqrt())
        self.register_buffer("sqrt_1m_ac", (1 - ac).sqrt())
        # (eps 1e-3: the attention's key bias and the conv biases before a GroupNorm of one channel
        # per group have gradients of exactly zero in exact arithmetic (softmax / the norm remove
        # them); Adam with a small eps turns their rounding noise, 1e-10 .. 1e-8 and not the same
        # in any two summation orders, into steps of up to lr)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3, eps=1e-3)

    def forward(self, x0):
        t = torch.randint(0, 100, (x0.shape[0],))
        noise = torch.randn_like(x0)
        xt = self.sqrt_ac[t].view(-1, 1, 1, 1) * x0 + self.sqrt_1m_ac[t].view(-1, 1, 1, 1) * noise
        loss = F.mse_loss(self.net(xt, t), noise)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach()


case("diff_ddpm_train_step_random_timesteps_adam", lambda: (R(2, 3, 8, 8),), train=True, context=grad_ctx)(
    lambda: DDPMTrain())


class DDIMSampler(nn.Module):
    """DDIM sampling loop over a Python list of timesteps with classifier-free guidance (the
    batch doubled, cond / uncond chunks), eta=0, x0 clipped, schedule values by .item()-free
    indexing of a buffer."""

    def __init__(self):
        super().__init__()
        self.net = TinyUNet(c=4)
        self.null = nn.Parameter(torch.zeros(1, 3, 1, 1))
        ac = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 50), 0)
        self.register_buffer("ac", ac)

    @torch.no_grad()
    def forward(self, x, cond):
        ts = [40, 30, 20, 10, 0]
        for i, t in enumerate(ts):
            tt = torch.full((x.shape[0] * 2,), t, dtype=torch.long)
            inp = torch.cat([x + cond, x + self.null])
            e_c, e_u = self.net(inp, tt).chunk(2)
            eps = e_u + 3.0 * (e_c - e_u)
            a_t = self.ac[t]
            a_prev = self.ac[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0)
            x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
        return x


case("diff_ddim_cfg_sampling_loop", lambda: (R(1, 3, 8, 8), R(1, 3, 1, 1)))(lambda: DDIMSampler())


class AdaGNBlock(nn.Module):
    """DiT-style adaLN-Zero modulation on a token sequence: the conditioning MLP produces
    shift / scale / gate for two branches (chunk(6)), zero-initialised."""

    def __init__(self, d=16):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        nn.init.normal_(self.ada[1].weight, std=0.02)

    def forward(self, x, c):
        sm, scm, gm, sp, scp, gp = self.ada(c).chunk(6, dim=1)
        h = self.norm1(x) * (1 + scm.unsqueeze(1)) + sm.unsqueeze(1)
        x = x + gm.unsqueeze(1) * self.attn(h, h, h, need_weights=False)[0]
        h = self.norm2(x) * (1 + scp.unsqueeze(1)) + sp.unsqueeze(1)
        return x + gp.unsqueeze(1) * self.mlp(h)


case("diff_dit_adaln_zero_modulation", lambda: (R(2, 5, 16), R(2, 16)))(lambda: AdaGNBlock())


@fn_case("diff_karras_sigmas_euler_ancestral_noise", lambda i=0: (R(1, 4, 4),))
def diff_karras_sigmas_euler_ancestral_noise(x):
    """k-diffusion: Karras sigmas (rho=7), an Euler ancestral loop with sigma_up / sigma_down and
    torch.randn_like noise, a toy denoiser."""
    n, smin, smax, rho = 5, 0.1, 10.0, 7.0
    ramp = torch.linspace(0, 1, n)
    sigmas = (smax ** (1 / rho) + ramp * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    sigmas = torch.cat([sigmas, sigmas.new_zeros([1])])
    x = x * sigmas[0]
    for i in range(n):
        denoised = x / (1 + sigmas[i] ** 2).sqrt()
        s_up = (sigmas[i + 1] ** 2 * (sigmas[i] ** 2 - sigmas[i + 1] ** 2) / sigmas[i] ** 2).sqrt()
        s_down = (sigmas[i + 1] ** 2 - s_up ** 2).sqrt()
        d = (x - denoised) / sigmas[i]
        x = x + d * (s_down - sigmas[i])
        if sigmas[i + 1] > 0:
            x = x + torch.randn_like(x) * s_up
    return x, sigmas


# ============================================================================ audio
def mel_filterbank(n_mels, n_fft, sr, fmin=0.0, fmax=None):
    fmax = fmax or sr / 2

    def hz2mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz2mel(fmin), hz2mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    fb = torch.zeros(n_mels, n_fft // 2 + 1)
    for m in range(1, n_mels + 1):
        lo, c, hi = hz[m - 1], hz[m], hz[m + 1]
        up = (bins - lo) / (c - lo)
        down = (hi - bins) / (hi - c)
        fb[m - 1] = torch.clamp(torch.min(up, down), min=0)
    return fb


class LogMelFrontend(nn.Module):
    """Whisper / Kaldi-like front end: pre-emphasis, torch.stft with a Hann window buffer,
    power spectrum, a mel filterbank buffer, log10 clamped to max - 8, scaled."""

    def __init__(self, n_fft=64, hop=16, n_mels=10):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", mel_filterbank(n_mels, n_fft, 8000))

    def forward(self, wav):
        wav = torch.cat([wav[:, :1], wav[:, 1:] - 0.97 * wav[:, :-1]], dim=1)
        spec = torch.stft(wav, self.n_fft, self.hop, window=self.window, return_complex=True)
        mag = spec[..., :-1].abs() ** 2
        mel = self.fb @ mag
        log_spec = torch.clamp(mel, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.amax(dim=(-2, -1), keepdim=True) - 8.0)
        return (log_spec + 4.0) / 4.0


case("audio_logmel_stft_preemphasis_whisper_clamp", lambda: (R(2, 400),))(lambda: LogMelFrontend())


class MFCC(nn.Module):
    """MFCC by hand: frames by unfold, Hamming window, rfft power, mel, log, DCT-II matrix (ortho),
    liftering, deltas by a padded conv1d, CMVN over time."""

    def __init__(self, n_fft=32, hop=8, n_mels=12, n_mfcc=6):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("win", torch.hamming_window(n_fft, periodic=False))
        self.register_buffer("fb", mel_filterbank(n_mels, n_fft, 16000))
        n = torch.arange(n_mels).float()
        k = torch.arange(n_mfcc).float()[:, None]
        dct = torch.cos(math.pi / n_mels * (n + 0.5) * k) * math.sqrt(2.0 / n_mels)
        dct[0] *= 1 / math.sqrt(2)
        self.register_buffer("dct", dct)
        self.register_buffer("lifter", 1 + 11 * torch.sin(math.pi * torch.arange(n_mfcc) / 22))
        self.register_buffer("dk", torch.tensor([-2., -1., 0., 1., 2.]).view(1, 1, 5) / 10)

    def forward(self, wav):
        frames = wav.unfold(-1, self.n_fft, self.hop) * self.win
        pw = torch.fft.rfft(frames, dim=-1).abs().pow(2) / self.n_fft
        mel = torch.log(pw @ self.fb.T + 1e-6)
        c = (mel @ self.dct.T) * self.lifter
        b, t, k = c.shape
        ct = c.transpose(1, 2).reshape(b * k, 1, t)
        d = F.conv1d(F.pad(ct, (2, 2), mode="replicate"), self.dk).reshape(b, k, t).transpose(1, 2)
        feats = torch.cat([c, d], -1)
        return (feats - feats.mean(1, keepdim=True)) / (feats.std(1, keepdim=True) + 1e-5)


case("audio_mfcc_unfold_frames_dct_deltas_cmvn", lambda: (R(2, 200),))(lambda: MFCC())


class SpecAugment(nn.Module):
    """SpecAugment with masks drawn by torch.randint per example (time / freq masks built from
    arange comparisons, masked_fill with the mean), only in training."""

    def forward(self, spec):
        if not self.training:
            return spec
        b, f, t = spec.shape
        fw = torch.randint(0, 4, (b, 1, 1))
        f0 = torch.randint(0, f - 4, (b, 1, 1))
        tw = torch.randint(0, 6, (b, 1, 1))
        t0 = torch.randint(0, t - 6, (b, 1, 1))
        fr = torch.arange(f).view(1, -1, 1)
        tr = torch.arange(t).view(1, 1, -1)
        mask = ((fr >= f0) & (fr < f0 + fw)) | ((tr >= t0) & (tr < t0 + tw))
        return spec.masked_fill(mask, 0.0) + mask * spec.mean()


case("audio_specaugment_random_masks_train", lambda: (R(3, 12, 20),), train=True)(lambda: SpecAugment())


class Wav2Letter(nn.Module):
    """A conv1d acoustic model: strided conv, dilated convs, BatchNorm1d, GLU, CTC log-softmax
    over time; plus a CTC loss against padded targets."""

    def __init__(self, nin=10, nc=6):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(nin, 32, 5, stride=2, padding=2), nn.BatchNorm1d(32), nn.GLU(dim=1),
            nn.Conv1d(16, 32, 3, dilation=2, padding=2), nn.BatchNorm1d(32), nn.GLU(dim=1),
            nn.Conv1d(16, nc, 1))

    def forward(self, x, targets, tlen):
        lp = self.net(x).permute(2, 0, 1).log_softmax(-1)
        ilen = torch.full((x.shape[0],), lp.shape[0], dtype=torch.long)
        return lp, F.ctc_loss(lp, targets, ilen, tlen, blank=0, zero_infinity=True)


case("audio_wav2letter_glu_ctc_loss", lambda: (R(2, 10, 24), I(1, 6, 2, 4), torch.tensor([4, 3])), train=True)(
    lambda: Wav2Letter())


class SincConvLite(nn.Module):
    """SincNet's learnable band-pass filters: low / band frequencies as parameters, the sinc
    kernels built every forward from them and a Hamming window, then conv1d."""

    def __init__(self, n=4, k=17, sr=8000):
        super().__init__()
        self.low = nn.Parameter(torch.linspace(30, 2000, n).view(-1, 1))
        self.band = nn.Parameter(torch.full((n, 1), 300.0))
        nh = (k - 1) // 2
        self.register_buffer("n_", 2 * math.pi * torch.arange(-nh, 0).view(1, -1) / sr)
        self.register_buffer("win", torch.hamming_window(k)[:nh])
        self.sr = sr

    def forward(self, x):
        low = 50 + self.low.abs()
        high = torch.clamp(low + 50 + self.band.abs(), 50, self.sr / 2)
        left = ((torch.sin(high * self.n_) - torch.sin(low * self.n_)) / (self.n_ / 2)) * self.win
        center = 2 * (high - low)
        bp = torch.cat([left, center, left.flip(1)], 1) / (2 * (high - low))
        return F.conv1d(x, bp.unsqueeze(1), padding=8)


case("audio_sincnet_learned_filters_conv1d", lambda: (R(2, 1, 64),), train=True)(lambda: SincConvLite())


@fn_case("audio_griffin_lim_two_iters_istft", lambda i=0: (U(17, 9) + 0.1,))
def audio_griffin_lim_two_iters_istft(mag):
    """Griffin-Lim: random phase from a fixed angle tensor, istft / stft alternation, momentum."""
    win = torch.hann_window(32)
    angles = torch.polar(torch.ones_like(mag), torch.linspace(0, 6.0, mag.numel()).view_as(mag))
    prev = torch.zeros_like(angles)
    for _ in range(2):
        y = torch.istft(mag * angles, 32, 8, window=win, length=64)
        rebuilt = torch.stft(y, 32, 8, window=win, return_complex=True)
        angles = rebuilt - (0.99 / 1.99) * prev
        angles = angles / (angles.abs() + 1e-16)
        prev = rebuilt
    return torch.istft(mag * angles, 32, 8, window=win, length=64)


class ConvTasNetTCN(nn.Module):
    """Conv-TasNet separator block: cLN-free global layer norm (mean / var over C and T), depthwise
    dilated conv1d, PReLU, residual + skip outputs, mask by sigmoid times the encoder output."""

    def __init__(self, c=8, h=12):
        super().__init__()
        self.enc = nn.Conv1d(1, c, 8, stride=4, bias=False)
        self.blocks = nn.ModuleList()
        for d in (1, 2, 4):
            self.blocks.append(nn.ModuleDict(dict(
                inp=nn.Conv1d(c, h, 1), act=nn.PReLU(), dw=nn.Conv1d(h, h, 3, dilation=d, padding=d, groups=h),
                res=nn.Conv1d(h, c, 1), skip=nn.Conv1d(h, c, 1))))
        self.gamma = nn.Parameter(torch.ones(1, h, 1))
        self.beta = nn.Parameter(torch.zeros(1, h, 1))
        self.mask = nn.Conv1d(c, 2 * c, 1)
        self.dec = nn.ConvTranspose1d(c, 1, 8, stride=4, bias=False)

    def gln(self, y):
        mean = y.mean(dim=(1, 2), keepdim=True)
        var = ((y - mean) ** 2).mean(dim=(1, 2), keepdim=True)
        return self.gamma * (y - mean) / torch.pow(var + 1e-8, 0.5) + self.beta

    def forward(self, wav):
        w = F.relu(self.enc(wav))
        x, skip = w, 0
        for b in self.blocks:
            y = self.gln(b["act"](b["inp"](x)))
            y = b["dw"](y)
            x = x + b["res"](y)
            skip = skip + b["skip"](y)
        m = torch.sigmoid(self.mask(skip)).view(wav.shape[0], 2, w.shape[1], -1)
        return torch.stack([self.dec(w * m[:, i]) for i in range(2)], 1)


case("audio_convtasnet_gln_depthwise_masks", lambda: (R(2, 1, 64),))(lambda: ConvTasNetTCN())


# ============================================================================ reinforcement learning
class ActorCritic(nn.Module):
    """PPO actor-critic: Categorical over logits with an invalid-action mask (-1e8), log_prob of the
    taken actions, entropy, the clipped surrogate loss, value loss, returned as a dict."""

    def __init__(self, obs=6, na=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, 16), nn.Tanh())
        self.pi = nn.Linear(16, na)
        self.v = nn.Linear(16, 1)

    def forward(self, obs, actions, old_logp, adv, ret, mask):
        h = self.body(obs)
        logits = self.pi(h).masked_fill(~mask, -1e8)
        dist = torch.distributions.Categorical(logits=logits)
        logp = dist.log_prob(actions)
        ratio = torch.exp(logp - old_logp)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        s1 = ratio * adv
        s2 = torch.clamp(ratio, 0.8, 1.2) * adv
        pg = -torch.min(s1, s2).mean()
        v = self.v(h).squeeze(-1)
        vloss = 0.5 * (ret - v).pow(2).mean()
        ent = dist.entropy().mean()
        clipfrac = ((ratio - 1.0).abs() > 0.2).float().mean()
        return {"loss": pg + 0.5 * vloss - 0.01 * ent, "entropy": ent, "clipfrac": clipfrac,
                "approx_kl": ((ratio - 1) - (logp - old_logp)).mean()}


def _ppo_inputs(i=0):
    mask = torch.ones(8, 4, dtype=torch.bool)
    mask[::3, 2] = False
    return R(8, 6), I(0, 2, 8), R(8) - 1.3, R(8), R(8), mask


case("rl_ppo_masked_categorical_clipped_loss_dict", _ppo_inputs, train=True)(lambda: ActorCritic())


class SACActor(nn.Module):
    """SAC's squashed Gaussian actor: mean / log_std heads, log_std clamped by tanh rescale,
    Normal rsample with a seeded generator-free randn, tanh squash with the log-det correction."""

    def __init__(self, obs=5, act=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs, 16), nn.ReLU())
        self.mu = nn.Linear(16, act)
        self.log_std = nn.Linear(16, act)

    def forward(self, obs):
        h = self.net(obs)
        mu = self.mu(h)
        log_std = torch.tanh(self.log_std(h))
        log_std = -5 + 0.5 * (2 - (-5)) * (log_std + 1)
        std = log_std.exp()
        normal = torch.distributions.Normal(mu, std)
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * 2.0 + 0.5
        logp = normal.log_prob(x_t) - torch.log(2.0 * (1 - y_t.pow(2)) + 1e-6)
        return action, logp.sum(1, keepdim=True), torch.tanh(mu) * 2.0 + 0.5


case("rl_sac_tanh_normal_rsample_logdet", lambda: (R(4, 5),), train=True)(lambda: SACActor())


@fn_case("rl_gae_reverse_loop_dones", lambda i=0: (R(6, 3), R(7, 3), (U(6, 3) > 0.8).float()))
def rl_gae_reverse_loop_dones(rewards, values, dones):
    """Generalized advantage estimation by a reversed Python loop over time (CleanRL style)."""
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(T)):
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + 0.99 * values[t + 1] * nonterminal - values[t]
        adv[t] = lastgaelam = delta + 0.99 * 0.95 * nonterminal * lastgaelam
    return adv, adv + values[:-1]


@fn_case("rl_discounted_returns_cumsum_flip_trick", lambda i=0: (R(3, 10),))
def rl_discounted_returns_cumsum_flip_trick(r):
    """Discounted returns without a loop: gamma powers, flip / cumsum / flip, divided back."""
    T = r.shape[1]
    g = 0.9 ** torch.arange(T, dtype=r.dtype)
    ret = torch.flip(torch.cumsum(torch.flip(r * g, [1]), 1), [1]) / g
    return ret, (ret - ret.mean(1, keepdim=True)) / (ret.std(1, keepdim=True) + 1e-8)


class DuelingDQN(nn.Module):
    """Dueling DQN with double-Q targets: online argmax, target gather, Huber TD loss, a target
    network updated by Polyak averaging in no_grad (param.data.mul_().add_())."""

    def __init__(self, obs=4, na=3):
        super().__init__()
        self.online = nn.ModuleDict(dict(f=nn.Linear(obs, 16), v=nn.Linear(16, 1), a=nn.Linear(16, na)))
        self.target = nn.ModuleDict(dict(f=nn.Linear(obs, 16), v=nn.Linear(16, 1), a=nn.Linear(16, na)))
        self.target.load_state_dict(self.online.state_dict())
        self.opt = torch.optim.SGD(self.online.parameters(), lr=0.05)

    @staticmethod
    def q(net, s):
        h = F.relu(net["f"](s))
        a = net["a"](h)
        return net["v"](h) + a - a.mean(1, keepdim=True)

    def forward(self, s, a, r, s2, done):
        q = self.q(self.online, s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            a2 = self.q(self.online, s2).argmax(1, keepdim=True)
            q2 = self.q(self.target, s2).gather(1, a2).squeeze(1)
            tgt = r + 0.99 * (1 - done) * q2
        loss = F.smooth_l1_loss(q, tgt)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            for p, tp in zip(self.online.parameters(), self.target.parameters()):
                tp.data.mul_(0.9).add_(0.1 * p.data)
        return loss.detach()


case("rl_dueling_double_dqn_polyak_step", lambda: (R(6, 4), I(0, 3, 6), R(6), R(6, 4), (U(6) > 0.7).float()),
     train=True, ncalls=4, context=grad_ctx)(lambda: DuelingDQN())


class C51Head(nn.Module):
    """Distributional RL (C51): softmax over atoms, expected Q, the categorical projection of the
    target distribution onto the support by floor / ceil and index_add_ (put with accumulate)."""

    def __init__(self, obs=4, na=2, atoms=11):
        super().__init__()
        self.net = nn.Linear(obs, na * atoms)
        self.na, self.atoms = na, atoms
        self.register_buffer("support", torch.linspace(-5, 5, atoms))

    def forward(self, s, r, done):
        p = self.net(s).view(-1, self.na, self.atoms).softmax(-1)
        q = (p * self.support).sum(-1)
        best = q.argmax(1)
        pb = p[torch.arange(s.shape[0]), best]
        dz = 10 / (self.atoms - 1)
        tz = (r[:, None] + 0.99 * (1 - done[:, None]) * self.support).clamp(-5, 5)
        b = (tz + 5) / dz
        lo, hi = b.floor().long(), b.ceil().long()
        lo[(hi > 0) & (lo == hi)] -= 1
        hi[(lo < self.atoms - 1) & (lo == hi)] += 1
        m = torch.zeros_like(pb)
        offset = (torch.arange(s.shape[0]) * self.atoms)[:, None].expand_as(lo)
        m.view(-1).index_add_(0, (lo + offset).view(-1), (pb * (hi.float() - b)).view(-1))
        m.view(-1).index_add_(0, (hi + offset).view(-1), (pb * (b - lo.float())).view(-1))
        return q, m


case("rl_c51_projection_floor_ceil_index_add", lambda: (R(5, 4), R(5), (U(5) > 0.6).float()))(lambda: C51Head())


@fn_case("rl_normal_independent_kl_entropy_clamp", lambda i=0: (R(4, 3), R(4, 3), R(4, 3), R(4, 3)))
def rl_normal_independent_kl_entropy_clamp(mu1, ls1, mu2, ls2):
    """Independent(Normal) policies: KL between old and new, entropy, log_prob of the mean,
    sample under a seed, cdf / icdf of a clamp."""
    d1 = torch.distributions.Independent(torch.distributions.Normal(mu1, ls1.exp()), 1)
    d2 = torch.distributions.Independent(torch.distributions.Normal(mu2, ls2.exp()), 1)
    kl = torch.distributions.kl_divergence(d1, d2)
    n = torch.distributions.Normal(mu1, ls1.exp())
    u = n.cdf(mu2).clamp(0.01, 0.99)
    return kl, d1.entropy(), d2.log_prob(mu1), n.icdf(u)


class GumbelActor(nn.Module):
    """Discrete actions by Gumbel-softmax (hard, straight-through) from logits, the one-hot used
    to select embeddings; OneHotCategorical log_prob and mode."""

    def __init__(self):
        super().__init__()
        self.f = nn.Linear(6, 5)
        self.emb = nn.Linear(5, 3, bias=False)

    def forward(self, x):
        logits = self.f(x)
        y = F.gumbel_softmax(logits, tau=0.5, hard=True)
        d = torch.distributions.OneHotCategorical(logits=logits)
        return self.emb(y), d.log_prob(y), d.mode, y.argmax(-1)


case("rl_gumbel_softmax_hard_onehot_categorical", lambda: (R(4, 6),), train=True)(lambda: GumbelActor())


# ============================================================================ graph neural networks
def _graph(i=0, n=7, e=16):
    ei = torch.randint(0, n, (2, e))
    return R(n, 5), ei


class GCNLayer(nn.Module):
    """Kipf GCN by hand: self loops added, degree by index_add_, symmetric normalisation,
    messages x[src] * norm summed into dst by index_add_."""

    def __init__(self, cin=5, cout=6):
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n).unsqueeze(0).repeat(2, 1)
        ei = torch.cat([edge_index, loops], 1)
        src, dst = ei
        deg = torch.zeros(n).index_add_(0, dst, torch.ones(dst.numel()))
        dinv = deg.pow(-0.5)
        dinv[torch.isinf(dinv)] = 0
        norm = dinv[src] * dinv[dst]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * norm[:, None])
        return F.relu(out + self.bias)


case("gnn_gcn_index_add_sym_norm", _graph, train=True)(lambda: GCNLayer())


class SAGEMean(nn.Module):
    """GraphSAGE mean aggregator: scatter_add_ with an expanded index, counts by bincount with
    minlength, clamp(min=1), concat with the root, L2 normalize."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(10, 8)
        self.l2 = nn.Linear(16, 4)

    def agg(self, x, ei):
        src, dst = ei
        s = torch.zeros(x.size(0), x.size(1)).scatter_add_(0, dst.unsqueeze(1).expand(-1, x.size(1)), x[src])
        cnt = torch.bincount(dst, minlength=x.size(0)).clamp(min=1).unsqueeze(1)
        return s / cnt

    def forward(self, x, ei):
        h = F.normalize(F.relu(self.l1(torch.cat([x, self.agg(x, ei)], 1))), p=2, dim=-1)
        return self.l2(torch.cat([h, self.agg(h, ei)], 1))


case("gnn_graphsage_scatter_add_mean_bincount", _graph, train=True)(lambda: SAGEMean())


class GATLayer(nn.Module):
    """GAT: per-edge attention logits from src / dst halves, LeakyReLU, a softmax per destination
    by scatter_reduce amax (include_self=False) and index_add_ of exp, multi-head mean."""

    def __init__(self, cin=5, cout=4, heads=2):
        super().__init__()
        self.lin = nn.Linear(cin, heads * cout, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, cout))
        self.att_dst = nn.Parameter(torch.randn(1, heads, cout))
        self.h, self.c = heads, cout

    def forward(self, x, ei):
        n = x.size(0)
        src, dst = ei
        h = self.lin(x).view(n, self.h, self.c)
        a_s = (h * self.att_src).sum(-1)
        a_d = (h * self.att_dst).sum(-1)
        e = F.leaky_relu(a_s[src] + a_d[dst], 0.2)
        emax = torch.full((n, self.h), float("-inf")).scatter_reduce(
            0, dst[:, None].expand(-1, self.h), e, reduce="amax", include_self=False)
        ex = (e - emax[dst]).exp()
        den = torch.zeros(n, self.h).index_add_(0, dst, ex)
        alpha = ex / (den[dst] + 1e-16)
        out = torch.zeros(n, self.h, self.c).index_add_(0, dst, h[src] * alpha.unsqueeze(-1))
        return out.mean(1), alpha


case("gnn_gat_scatter_softmax_amax_include_self_false", _graph, train=True)(lambda: GATLayer())


class GINGraphClassifier(nn.Module):
    """GIN with (1 + eps) * x + sum of neighbours (index_add), BatchNorm, a batch vector for
    several graphs, global add / mean / max pooling by index_add / scatter_reduce, readout."""

    def __init__(self):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(2))
        self.mlps = nn.ModuleList([nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU()),
                                   nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU())])
        self.out = nn.Linear(24, 2)

    def forward(self, x, ei, batch):
        src, dst = ei
        for i, mlp in enumerate(self.mlps):
            agg = torch.zeros_like(x).index_add_(0, dst, x[src])
            x = mlp((1 + self.eps[i]) * x + agg)
        ng = int(batch.max()) + 1
        s = torch.zeros(ng, x.size(1)).index_add_(0, batch, x)
        c = torch.bincount(batch, minlength=ng).unsqueeze(1).float()
        mx = torch.zeros(ng, x.size(1)).scatter_reduce(0, batch[:, None].expand_as(x), x, "amax", include_self=False)
        return self.out(torch.cat([s, s / c, mx], 1))


case("gnn_gin_batch_vector_global_pools", lambda: (R(9, 5), I(0, 9, 2, 20), torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2])),
     train=True)(lambda: GINGraphClassifier())


class EdgeConv(nn.Module):
    """DGCNN EdgeConv on a dynamic kNN graph: pairwise distances by -2xy + |x|^2 + |y|^2, topk
    neighbours, gather the features, MLP on [x_i, x_j - x_i], max over neighbours."""

    def __init__(self, c=3, k=4):
        super().__init__()
        self.k = k
        self.mlp = nn.Sequential(nn.Conv2d(2 * c, 8, 1, bias=False), nn.BatchNorm2d(8), nn.LeakyReLU(0.2))

    def forward(self, x):   # (b, c, n)
        b, c, n = x.shape
        inner = -2 * torch.matmul(x.transpose(2, 1), x)
        xx = torch.sum(x ** 2, dim=1, keepdim=True)
        pd = -xx - inner - xx.transpose(2, 1)
        idx = pd.topk(k=self.k, dim=-1)[1]
        idx = (idx + torch.arange(b).view(-1, 1, 1) * n).view(-1)
        xt = x.transpose(2, 1).contiguous()
        feat = xt.view(b * n, -1)[idx, :].view(b, n, self.k, c)
        xt = xt.view(b, n, 1, c).repeat(1, 1, self.k, 1)
        f = torch.cat((feat - xt, xt), dim=3).permute(0, 3, 1, 2).contiguous()
        return self.mlp(f).max(dim=-1, keepdim=False)[0]


case("gnn_dgcnn_edgeconv_knn_topk_gather", lambda: (R(2, 3, 10),), train=True)(lambda: EdgeConv())


@fn_case("gnn_sparse_adj_to_dense_laplacian_power", lambda i=0: (I(0, 6, 2, 12), U(12)))
def gnn_sparse_adj_to_dense_laplacian_power(ei, w):
    """Build a dense adjacency from edge_index with index_put_ accumulate, symmetrise, normalised
    Laplacian, a few power iterations for the top eigenvector."""
    n = 6
    A = torch.zeros(n, n)
    A.index_put_((ei[0], ei[1]), w, accumulate=True)
    A = (A + A.T) / 2
    A.fill_diagonal_(0)
    d = A.sum(1)
    dinv = torch.where(d > 0, d.rsqrt(), torch.zeros_like(d))
    L = torch.eye(n) - dinv[:, None] * A * dinv[None]
    v = torch.ones(n) / math.sqrt(n)
    for _ in range(5):
        v = L @ v
        v = v / v.norm()
    return L, v, v @ L @ v


# ============================================================================ point clouds
class PointNetSeg(nn.Module):
    """PointNet: a T-net predicting a 3x3 transform (identity added), bmm, shared MLP by conv1d,
    global max feature repeated and concatenated for per-point logits."""

    def __init__(self):
        super().__init__()
        self.t = nn.Sequential(nn.Conv1d(3, 16, 1), nn.ReLU(), nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(16, 9))
        nn.init.zeros_(self.t[-1].weight)
        self.f1 = nn.Sequential(nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16), nn.ReLU())
        self.f2 = nn.Sequential(nn.Conv1d(16, 32, 1), nn.BatchNorm1d(32), nn.ReLU())
        self.seg = nn.Conv1d(48, 4, 1)

    def forward(self, pts):   # (b, n, 3)
        x = pts.transpose(1, 2)
        trans = self.t(x).view(-1, 3, 3) + torch.eye(3)
        x = torch.bmm(trans, x)
        f = self.f1(x)
        g = torch.max(self.f2(f), 2, keepdim=True)[0].expand(-1, -1, x.shape[2])
        return self.seg(torch.cat([f, g], 1)).transpose(1, 2).log_softmax(-1), trans


case("pc_pointnet_tnet_bmm_global_max", lambda: (R(2, 12, 3),), train=True)(lambda: PointNetSeg())


@fn_case("pc_farthest_point_sampling_loop", lambda i=0: (R(2, 20, 3),))
def pc_farthest_point_sampling_loop(xyz):
    """PointNet++ farthest point sampling with a Python loop (deterministic start 0), gather
    by batch indices, then a ball query: radius mask, the first k by sort of masked indices."""
    B, N, _ = xyz.shape
    npoint, k = 5, 4
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.ones(B, N) * 1e10
    farthest = torch.zeros(B, dtype=torch.long)
    bidx = torch.arange(B)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[bidx, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    new_xyz = xyz[bidx[:, None], centroids]
    sqd = torch.cdist(new_xyz, xyz) ** 2
    group_idx = torch.arange(N).view(1, 1, N).repeat(B, npoint, 1)
    group_idx[sqd > 1.0] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :k]
    first = group_idx[:, :, 0:1].repeat(1, 1, k)
    group_idx = torch.where(group_idx == N, first, group_idx)
    return centroids, new_xyz, group_idx


@fn_case("pc_chamfer_distance_cdist_min", lambda i=0: (R(2, 9, 3), R(2, 7, 3)))
def pc_chamfer_distance_cdist_min(a, b):
    """Chamfer distance with cdist (both directions), nearest indices, F-score at a threshold."""
    d = torch.cdist(a, b)
    d1, i1 = d.min(2)
    d2, i2 = d.min(1)
    cham = (d1 ** 2).mean(1) + (d2 ** 2).mean(1)
    prec = (d1 < 0.5).float().mean(1)
    rec = (d2 < 0.5).float().mean(1)
    f = 2 * prec * rec / (prec + rec).clamp(min=1e-8)
    return cham, i1, i2, f


class PointTransformerKNN(nn.Module):
    """Point Transformer layer: kNN by cdist + topk(largest=False), neighbour gather by
    torch.gather on expanded indices, relative positions encoded, vector attention softmax over k."""

    def __init__(self, c=8, k=4):
        super().__init__()
        self.q, self.kk, self.v = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.pos = nn.Sequential(nn.Linear(3, c), nn.ReLU(), nn.Linear(c, c))
        self.attn = nn.Sequential(nn.Linear(c, c), nn.ReLU(), nn.Linear(c, c))
        self.k = k

    def forward(self, xyz, feat):
        b, n, c = feat.shape
        knn = torch.cdist(xyz, xyz).topk(self.k, dim=-1, largest=False).indices   # (b, n, k)
        g = lambda t: torch.gather(t.unsqueeze(1).expand(-1, n, -1, -1), 2,   # noqa: E731
                                   knn.unsqueeze(-1).expand(-1, -1, -1, t.shape[-1]))
        rel = xyz.unsqueeze(2) - g(xyz)
        pe = self.pos(rel)
        w = self.attn(self.q(feat).unsqueeze(2) - g(self.kk(feat)) + pe).softmax(dim=2)
        return (w * (g(self.v(feat)) + pe)).sum(2)


case("pc_point_transformer_knn_gather_vector_attn", lambda: (R(2, 10, 3), R(2, 10, 8)), train=True)(
    lambda: PointTransformerKNN())


@fn_case("pc_voxelize_floor_unique_inverse_scatter_mean", lambda i=0: (U(30, 3) * 2,))
def pc_voxelize_floor_unique_inverse_scatter_mean(pts):
    """Voxelisation: floor by voxel size, linear keys, unique with return_inverse, per-voxel mean by
    index_add_ and counts, points per voxel."""
    vox = torch.floor(pts / 0.5).long()
    key = vox[:, 0] * 16 + vox[:, 1] * 4 + vox[:, 2]
    uniq, inv, counts = torch.unique(key, return_inverse=True, return_counts=True)
    s = torch.zeros(len(uniq), 3).index_add_(0, inv, pts)
    return uniq, s / counts[:, None], counts


@fn_case("pc_normals_by_local_covariance_eigh", lambda i=0: (R(16, 3),))
def pc_normals_by_local_covariance_eigh(p):
    """Point normals: kNN by cdist topk, neighbour covariance by einsum, eigh, the smallest
    eigenvector, oriented towards +z by sign."""
    idx = torch.cdist(p, p).topk(5, largest=False).indices
    nb = p[idx]
    c = nb - nb.mean(1, keepdim=True)
    cov = torch.einsum("nki,nkj->nij", c, c) / 5
    ev, evec = torch.linalg.eigh(cov)
    nrm = evec[..., 0]
    sgn = torch.sign(nrm[:, 2:3])
    sgn[sgn == 0] = 1
    return ev, nrm.abs().sum(-1), (nrm * sgn)[:, 2].abs()


# ============================================================================ quantization-aware
class FakeQuantLinear(nn.Module):
    """QAT linear: weight fake-quantized per output channel (int8 symmetric, scale from absmax),
    activation per tensor with an EMA-observed range (buffers updated in training), both by
    torch.fake_quantize_*."""

    def __init__(self, cin=6, cout=5):
        super().__init__()
        self.lin = nn.Linear(cin, cout)
        self.register_buffer("act_min", torch.tensor(0.0))
        self.register_buffer("act_max", torch.tensor(0.0))
        self.register_buffer("initialized", torch.tensor(False))

    def forward(self, x):
        if self.training:
            mn, mx = x.detach().min(), x.detach().max()
            if not self.initialized:
                self.act_min.copy_(mn)
                self.act_max.copy_(mx)
                self.initialized.fill_(True)
            else:
                self.act_min.mul_(0.9).add_(0.1 * mn)
                self.act_max.mul_(0.9).add_(0.1 * mx)
        scale = ((self.act_max - self.act_min) / 255).clamp(min=1e-8)
        zp = (-self.act_min / scale).round().clamp(0, 255).int()
        xq = torch.fake_quantize_per_tensor_affine(x, scale, zp, 0, 255)
        w = self.lin.weight
        ws = (w.detach().abs().amax(1) / 127).clamp(min=1e-8)
        wq = torch.fake_quantize_per_channel_affine(w, ws, torch.zeros(w.shape[0], dtype=torch.int32), 0, -128, 127)
        return F.linear(xq, wq, self.lin.bias)


case("qat_fake_quant_per_channel_weight_ema_act_range", lambda: (R(4, 6),), train=True, ncalls=4)(
    lambda: FakeQuantLinear())


class STEQuant(nn.Module):
    """Straight-through estimator written the usual way: x + (q(x) - x).detach(), with round and
    clamp, DoReFa weights (tanh normalised), k-bit activations."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        w = torch.tanh(self.conv.weight)
        w = w / (2 * w.abs().max()) + 0.5
        n = 2 ** 4 - 1
        wq = 2 * (w + (torch.round(w * n) / n - w).detach()) - 1
        y = F.conv2d(x, wq, self.conv.bias, padding=1)
        a = y.clamp(0, 1)
        return a + (torch.round(a * n) / n - a).detach()


case("qat_ste_detach_trick_dorefa", lambda: (R(2, 3, 5, 5),), train=True)(lambda: STEQuant())


class LSQ(nn.Module):
    """Learned step-size quantization: step as a parameter, gradient scaled by the
    (y - y*g).detach() + y*g trick, round_pass by detach, init from the first batch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)
        self.s = nn.Parameter(torch.tensor(1.0))
        self.init = False

    def forward(self, x):
        if not self.init:
            with torch.no_grad():
                self.s.copy_(2 * x.abs().mean() / math.sqrt(7))
            self.init = True
        g = 1.0 / math.sqrt(x.numel() * 7)
        s = (self.s - self.s * g).detach() + self.s * g
        v = (x / s).clamp(-8, 7)
        v = (v.round() - v).detach() + v
        return self.lin(v * s)


case("qat_lsq_learned_step_grad_scale", lambda: (R(4, 6),), train=True, ncalls=4)(lambda: LSQ())


@fn_case("qat_quantize_dequantize_int8_manual_roundtrip", lambda i=0: (R(4, 8) * 3,))
def qat_quantize_dequantize_int8_manual_roundtrip(x):
    """Manual asymmetric uint8 quantization by per-row min / max: scale, zero point rounded,
    quantize with round + clamp + to(uint8), dequantize, error stats."""
    mn = x.amin(1, keepdim=True).clamp(max=0)
    mx = x.amax(1, keepdim=True).clamp(min=0)
    scale = (mx - mn) / 255
    zp = (-mn / scale).round().clamp(0, 255)
    q = (x / scale + zp).round().clamp(0, 255).to(torch.uint8)
    dq = (q.float() - zp) * scale
    return q, dq, (dq - x).abs().max()


# ============================================================================ custom autograd.Function
class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.neg() * ctx.lam, None


class DANN(nn.Module):
    """Domain-adversarial training: a gradient reversal Function between the feature extractor and
    the domain classifier; both losses backpropagated, grads checked as state."""

    def __init__(self):
        super().__init__()
        self.feat = nn.Sequential(nn.Linear(5, 8), nn.ReLU())
        self.cls = nn.Linear(8, 3)
        self.dom = nn.Linear(8, 1)

    def forward(self, x, y, d):
        self.zero_grad()
        f = self.feat(x)
        loss = F.cross_entropy(self.cls(f), y) + F.binary_cross_entropy_with_logits(
            self.dom(GradReverse.apply(f, 0.3)).squeeze(1), d)
        loss.backward()
        return loss.detach()


case("autograd_fn_gradient_reversal_dann", lambda: (R(6, 5), I(0, 3, 6), (U(6) > 0.5).float()), train=True,
     context=grad_ctx)(lambda: DANN())


class SignSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 1).to(g.dtype)


class BinaryNet(nn.Module):
    """BinaryConnect / XNOR style: weights and activations binarized by a custom Function with
    saved tensors (hardtanh STE), scaled by mean |w| per channel; used in a forward, backward
    outside by the runner's train mode."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 8)
        self.l2 = nn.Linear(8, 3)

    def forward(self, x):
        wb = SignSTE.apply(self.l1.weight) * self.l1.weight.abs().mean(1, keepdim=True)
        h = SignSTE.apply(F.linear(x, wb, self.l1.bias))
        return self.l2(h)


class BinaryNetTrain(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = BinaryNet()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-2)

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()


case("autograd_fn_sign_ste_saved_tensors_train", lambda: (R(6, 6), I(0, 3, 6)), train=True, ncalls=4,
     context=grad_ctx)(lambda: BinaryNetTrain())


class ClampGrad(torch.autograd.Function):
    """A Function with two outputs, one marked non-differentiable, needs_input_grad checks,
    once_differentiable, and a non-tensor argument."""

    @staticmethod
    def forward(ctx, x, w, k):
        y = x * w
        idx = y.argmax(-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, w)
        ctx.k = k
        return y.clamp(-k, k), idx

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gidx):
        x, w = ctx.saved_tensors
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = gy * w
        if ctx.needs_input_grad[1]:
            gw = (gy * x).sum(0)
        return gx, gw, None


class ClampGradModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5))

    def forward(self, x):
        y, idx = ClampGrad.apply(x, self.w, 0.7)
        y.sum().backward()
        return y.detach(), idx, self.w.grad.clone()


case("autograd_fn_mark_non_differentiable_once_differentiable", lambda: (R(4, 5),), train=True,
     context=grad_ctx)(lambda: ClampGradModel())


class MemEfficientSwish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        x = ctx.saved_tensors[0]
        s = torch.sigmoid(x)
        return g * (s * (1 + x * (1 - s)))


class EffNetSwishBlock(nn.Module):
    """EfficientNet-PyTorch's MemoryEfficientSwish Function inside an MBConv block with SE;
    the runner backpropagates from the output in train mode."""

    def __init__(self, c=8):
        super().__init__()
        self.expand = nn.Conv2d(c, 2 * c, 1, bias=False)
        self.bn0 = nn.BatchNorm2d(2 * c)
        self.dw = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c, bias=False)
        self.bn1 = nn.BatchNorm2d(2 * c)
        self.se_r = nn.Conv2d(2 * c, 2, 1)
        self.se_e = nn.Conv2d(2, 2 * c, 1)
        self.proj = nn.Conv2d(2 * c, c, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = MemEfficientSwish.apply(self.bn0(self.expand(x)))
        h = MemEfficientSwish.apply(self.bn1(self.dw(h)))
        s = F.adaptive_avg_pool2d(h, 1)
        s = self.se_e(MemEfficientSwish.apply(self.se_r(s)))
        h = torch.sigmoid(s) * h
        return x + self.bn2(self.proj(h))


case("autograd_fn_memory_efficient_swish_mbconv", lambda: (R(2, 8, 5, 5),), train=True)(lambda: EffNetSwishBlock())


class StraightThroughArgmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        idx = logits.argmax(-1)
        y = torch.zeros_like(logits).scatter_(-1, idx.unsqueeze(-1), 1.0)
        return y

    @staticmethod
    def backward(ctx, g):
        return g


class VQCodebook(nn.Module):
    """VQ-VAE quantizer: nearest code by squared distances, codebook / commitment losses,
    straight-through by z + (zq - z).detach(), EMA codebook buffers updated in training
    (cluster sizes, embed sums, Laplace smoothing), perplexity."""

    def __init__(self, k=6, d=4):
        super().__init__()
        self.register_buffer("embed", torch.randn(k, d))
        self.register_buffer("cluster_size", torch.zeros(k))
        self.register_buffer("embed_avg", self.embed.clone())
        self.proj = nn.Linear(5, d)
        self.k = k

    def forward(self, x):
        z = self.proj(x)
        flat = z.reshape(-1, z.shape[-1])
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embed.t() + self.embed.pow(2).sum(1)[None]
        ind = (-dist).argmax(1)
        onehot = F.one_hot(ind, self.k).type(flat.dtype)
        zq = F.embedding(ind, self.embed).view_as(z)
        if self.training:
            with torch.no_grad():
                self.cluster_size.mul_(0.9).add_(onehot.sum(0), alpha=0.1)
                self.embed_avg.mul_(0.9).add_(onehot.t() @ flat, alpha=0.1)
                n = self.cluster_size.sum()
                cs = (self.cluster_size + 1e-5) / (n + self.k * 1e-5) * n
                self.embed.copy_(self.embed_avg / cs.unsqueeze(1))
        commit = F.mse_loss(zq.detach(), z)
        zq = z + (zq - z).detach()
        avg = onehot.mean(0)
        return zq, commit, torch.exp(-torch.sum(avg * torch.log(avg + 1e-10))), StraightThroughArgmax.apply(-dist)


case("vq_ema_codebook_straight_through_perplexity", lambda: (R(3, 4, 5),), train=True, ncalls=4)(
    lambda: VQCodebook())


# ============================================================================ EMA buffers
class MeanTeacher(nn.Module):
    """Mean teacher: the student's params copied into an EMA teacher with a warm-up decay
    min(1 - 1/(step+1), 0.99) computed from a Python step counter; buffers (BN stats) copied;
    consistency loss between the two."""

    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        self.teacher = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.step = 0

    def forward(self, x, xn):
        s = self.student(x)
        with torch.no_grad():
            t = self.teacher(xn)
        loss = F.mse_loss(s.softmax(-1), t.softmax(-1))
        self.step += 1
        decay = min(1 - 1 / (self.step + 1), 0.99)
        with torch.no_grad():
            for tp, sp in zip(self.teacher.parameters(), self.student.parameters()):
                tp.mul_(decay).add_(sp, alpha=1 - decay)
            for tb, sb in zip(self.teacher.buffers(), self.student.buffers()):
                tb.copy_(sb)
        return loss


case("ema_mean_teacher_warmup_decay_buffers_copied", lambda: (R(6, 4), R(6, 4)), train=True, ncalls=4)(
    lambda: MeanTeacher())


class RunningLossNormalizer(nn.Module):
    """Scalar EMA buffers: running mean / var of a loss (Welford-free EMA), a debiased mean by
    1 - beta ** step with the step as a buffer; normalised loss returned."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("var", torch.ones(()))
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    def forward(self, x, y):
        loss = F.mse_loss(self.lin(x).squeeze(-1), y, reduction="none")
        with torch.no_grad():
            self.step += 1
            m = loss.mean()
            self.mean.lerp_(m, 0.1)
            self.var.mul_(0.9).add_(0.1 * (m - self.mean) ** 2)
            debiased = self.mean / (1 - 0.9 ** self.step)
        return (loss - debiased) / (self.var.sqrt() + 1e-4), debiased


case("ema_scalar_buffers_lerp_debias_step_buffer", lambda: (R(5, 4), R(5)), ncalls=4)(
    lambda: RunningLossNormalizer())


class EMAWrapper(nn.Module):
    """timm's ModelEmaV2: a deepcopy of the model whose state_dict values are updated with
    ema_v.copy_(ema_v * decay + (1 - decay) * model_v) over state_dict().values() (ints copied)."""

    def __init__(self):
        super().__init__()
        import copy
        self.model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.ema = copy.deepcopy(self.model)

    def forward(self, x):
        out = self.model(x)
        with torch.no_grad():
            for ema_v, model_v in zip(self.ema.state_dict().values(), self.model.state_dict().values()):
                if ema_v.dtype.is_floating_point:
                    ema_v.copy_(ema_v * 0.95 + (1 - 0.95) * model_v)
                else:
                    ema_v.copy_(model_v)
        return out, self.ema(x)


case("ema_timm_model_ema_v2_state_dict_values", lambda: (R(2, 3, 6, 6),), train=True)(lambda: EMAWrapper())


# ============================================================================ optimizers (inside / outside)
class AdamWTrainWithScheduler(nn.Module):
    """A full step inside: AdamW with amsgrad, a OneCycleLR scheduler stepped inside, grad norm
    clipping returning the total norm, label-smoothed CE."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 12), nn.LayerNorm(12), nn.GELU(), nn.Linear(12, 4))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-2, amsgrad=True, weight_decay=0.05)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=0.05, total_steps=20)

    def forward(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(x), y, label_smoothing=0.1)
        loss.backward()
        gn = nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        return loss.detach(), gn, self.sched.get_last_lr()[0]


case("optim_adamw_amsgrad_onecycle_inside_clip", lambda: (R(8, 5), I(0, 4, 8)), train=True, ncalls=4,
     context=grad_ctx)(lambda: AdamWTrainWithScheduler())


class SGDNesterovLossOnly(nn.Module):
    """The compiled function returns only the loss (forward + loss); the runner's train mode
    then backpropagates; here the weights are updated by an SGD Nesterov step called between
    calls, outside the compiled function."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)

    def forward(self, x, y):
        return F.mse_loss(self.net(x), y)


def _outside_step(m, i):
    with torch.enable_grad():
        x = torch.ones(3, 2, 6) * (i + 1) * 0.1
        y = torch.zeros(3, 2)
        m.opt.zero_grad()
        m(x, y).backward()
        m.opt.step()


case("optim_sgd_nesterov_step_outside_between_calls", lambda: (R(3, 2, 6), R(3, 2)), train=True, ncalls=4,
     between=_outside_step)(lambda: SGDNesterovLossOnly())


class LBFGSClosure(nn.Module):
    """torch.optim.LBFGS with a closure called several times per step (strong Wolfe line search)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))
        self.opt = None   # (made at the first call: a deep copy of an LBFGS loses its _params)

    def forward(self, A, b):
        if self.opt is None:
            self.opt = torch.optim.LBFGS([self.w], lr=0.5, max_iter=4, line_search_fn="strong_wolfe")
        def closure():
            self.opt.zero_grad()
            loss = ((A @ self.w - b) ** 2).sum() + 0.1 * self.w.pow(2).sum()
            loss.backward()
            return loss
        loss = self.opt.step(closure)
        return loss.detach(), self.w.detach().clone()


case("optim_lbfgs_closure_strong_wolfe", lambda: (R(6, 3), R(6)), train=True, ncalls=3, context=grad_ctx)(
    lambda: LBFGSClosure())


class SparseAdamEmbedding(nn.Module):
    """Embedding(sparse=True) trained by SparseAdam beside a dense Adam for the rest."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, sparse=True)
        self.head = nn.Linear(4, 2)
        self.o1 = torch.optim.SparseAdam(list(self.emb.parameters()), lr=1e-2)
        self.o2 = torch.optim.Adam(self.head.parameters(), lr=1e-2)

    def forward(self, ids, y):
        self.o1.zero_grad()
        self.o2.zero_grad()
        loss = F.cross_entropy(self.head(self.emb(ids).mean(1)), y)
        loss.backward()
        self.o1.step()
        self.o2.step()
        self.o1.zero_grad(set_to_none=True)   # (the runner compares no sparse .grad)
        return loss.detach()


case("optim_sparse_adam_sparse_embedding_plus_adam", lambda: (I(0, 10, 4, 3), I(0, 2, 4)), train=True, ncalls=4,
     context=grad_ctx)(lambda: SparseAdamEmbedding())


class GradScalerCPU(nn.Module):
    """torch.amp.GradScaler('cpu') with bf16 autocast inside: scale, backward, unscale_, clip,
    step, update; the scale returned."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)

    def forward(self, x, y):
        self.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(self.net(x).float(), y)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach(), self.scaler.get_scale()


case("optim_grad_scaler_cpu_bf16_autocast_unscale_clip", lambda: (R(5, 6), R(5, 2)), train=True, ncalls=4,
     context=grad_ctx)(lambda: GradScalerCPU())


class ZeroGradFalseAccum(nn.Module):
    """zero_grad(set_to_none=False) then two backward passes accumulated, Adagrad step; grads of
    a frozen layer (requires_grad False) stay None."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.l = nn.Linear(4, 2)
        self.opt = torch.optim.Adagrad(self.l.parameters(), lr=0.1)

    def forward(self, x):
        self.opt.zero_grad(set_to_none=False)
        h = self.frozen(x)
        self.l(h).pow(2).mean().backward()
        self.l(h.flip(0)).abs().mean().backward()
        self.opt.step()
        return self.l.weight.grad.clone()


case("optim_zero_grad_set_to_none_false_two_backwards_frozen", lambda: (R(5, 4),), train=True, ncalls=4,
     context=grad_ctx)(lambda: ZeroGradFalseAccum())


# ============================================================================ LoRA
class LoRALinear(nn.Module):
    """peft-style LoRA: frozen base weight, A kaiming / B zeros (B set to small values here so it
    matters), scaling alpha / r, dropout on the input of the adapter, merge / unmerge toggled
    between calls by adding B @ A into the base weight in place."""

    def __init__(self, cin=8, cout=6, r=2, alpha=4):
        super().__init__()
        self.base = nn.Linear(cin, cout)
        self.base.weight.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(r, cin) * 0.1)
        self.B = nn.Parameter(torch.randn(cout, r) * 0.1)
        self.drop = nn.Dropout(0.2)
        self.scaling = alpha / r
        self.merged = False

    def merge(self, on):
        with torch.no_grad():
            if on and not self.merged:
                self.base.weight += (self.B @ self.A) * self.scaling
                self.merged = True
            elif not on and self.merged:
                self.base.weight -= (self.B @ self.A) * self.scaling
                self.merged = False

    def forward(self, x):
        out = self.base(x)
        if not self.merged:
            out = out + (self.drop(x) @ self.A.T @ self.B.T) * self.scaling
        return out


class LoRAAttention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.q = LoRALinear(d, d)
        self.k = nn.Linear(d, d)
        self.v = LoRALinear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (m(x).view(b, t, 2, d // 2).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, d))


def _merge_toggle(m, i):
    m.eval() if i >= 2 else m.train()
    for mod in m.modules():
        if isinstance(mod, LoRALinear):
            mod.merge(i == 2)


case("lora_attention_qv_merge_unmerge_between_calls", lambda: (R(2, 5, 8),), train=True, ncalls=4,
     between=_merge_toggle)(lambda: LoRAAttention())


class LoRATrain(nn.Module):
    """A LoRA fine-tuning step: only adapter params in the optimizer (filtered by name 'lora_'),
    base frozen; AdamW step; the frozen weight's grad stays None."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 8)
        self.lora_A = nn.Parameter(torch.randn(2, 6) * 0.1)
        self.lora_B = nn.Parameter(torch.zeros(8, 2))
        self.l2 = nn.Linear(8, 2)
        for n, p in self.named_parameters():
            if "lora_" not in n:
                p.requires_grad_(False)
        self.opt = torch.optim.AdamW([p for n, p in self.named_parameters() if "lora_" in n], lr=1e-2)

    def forward(self, x, y):
        h = F.relu(self.l1(x) + F.linear(F.linear(x, self.lora_A), self.lora_B) * 2.0)
        loss = F.cross_entropy(self.l2(h), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), self.lora_B.detach().clone()


case("lora_finetune_step_only_adapters_adamw", lambda: (R(6, 6), I(0, 2, 6)), train=True, ncalls=4,
     context=grad_ctx)(lambda: LoRATrain())


class LoRAConv(nn.Module):
    """LoRA on a conv (LoCon): a low-rank conv (k x k down to r channels, 1x1 up), added to a frozen
    conv; the adapter scaled by a Python float changed between calls."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)
        self.conv.requires_grad_(False)
        self.down = nn.Conv2d(4, 2, 3, padding=1, bias=False)
        self.up = nn.Conv2d(2, 6, 1, bias=False)
        nn.init.normal_(self.up.weight, std=0.1)
        self.scale = 1.0

    def forward(self, x):
        return self.conv(x) + self.up(self.down(x)) * self.scale


def _set_scale(m, i):
    m.scale = [1.0, 1.0, 0.5, 0.0][i]


case("lora_conv_locon_scale_changed_between_calls", lambda: (R(2, 4, 5, 5),), train=True, ncalls=4,
     between=_set_scale)(lambda: LoRAConv())


# ============================================================================ CPU bf16 autocast
class AutocastBF16Inference(nn.Module):
    """Inference under torch.autocast('cpu', bfloat16) inside forward: linear / matmul in bf16,
    softmax / layer_norm promoted to fp32 by autocast, output cast back with .float()."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.ln = nn.LayerNorm(8)
        self.o = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q, k, v = self.qkv(self.ln(x)).chunk(3, -1)
            a = (q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1)
            y = self.o(a @ v)
        return y.float(), y.dtype, a.dtype


case("amp_cpu_bf16_autocast_attention_dtypes", lambda: (R(2, 5, 8),))(lambda: AutocastBF16Inference())


class AutocastDisabledRegion(nn.Module):
    """Nested autocast: bf16 outside, enabled=False region that casts to float explicitly (a
    numerically sensitive loss), conv2d + batch norm under autocast."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.relu(self.bn(self.conv(x)))
            logits = self.fc(h.mean((2, 3)))
            with torch.autocast("cpu", enabled=False):
                loss = F.cross_entropy(logits.float(), y)
                lse = torch.logsumexp(logits.float(), -1)
        return logits, loss, lse


case("amp_cpu_bf16_nested_autocast_disabled_loss", lambda: (R(2, 3, 6, 6), I(0, 3, 2)), train=True)(
    lambda: AutocastDisabledRegion())


class BF16Weights(nn.Module):
    """A model cast to bf16 with .to(torch.bfloat16) but LayerNorm kept in float32 (mixed-dtype
    parameters), inputs cast at the boundary, logits cast back to float for the loss."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 8).to(torch.bfloat16)
        self.lin = nn.Linear(8, 8).to(torch.bfloat16)
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, 12).to(torch.bfloat16)

    def forward(self, ids):
        h = self.lin(self.emb(ids))
        h = self.ln(h.float()).to(torch.bfloat16)
        logits = self.head(F.gelu(h))
        return F.cross_entropy(logits.float().view(-1, 12), ids.view(-1)), logits


case("amp_bf16_weights_fp32_layernorm_boundary_casts", lambda: (I(0, 12, 2, 5),), train=True)(lambda: BF16Weights())


@fn_case("amp_autocast_decorator_custom_fwd_cpu", lambda i=0: (R(4, 6), R(6, 3)))
def amp_autocast_decorator_custom_fwd_cpu(x, w):
    """torch.autocast used as a decorator on an inner function, torch.get_autocast_dtype queried,
    addmm / baddbmm / bmm under bf16, an fp32 op (exp) keeping fp32."""
    @torch.autocast("cpu", dtype=torch.bfloat16)
    def inner(a, b):
        m = a @ b
        bb = torch.baddbmm(m.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0))
        return m, bb, torch.addmm(m.float(), a, b)
    m, bb, am = inner(x, w)
    return m.float(), bb.dtype, am, (m.float().exp() + 1).log()


# ============================================================================ in-place ops on views
@fn_case("inplace_views_slices_diagonal_narrow_select", lambda i=0: (R(5, 6),))
def inplace_views_slices_diagonal_narrow_select(x):
    """In-place writes through several views of one clone: a slice mul_, diagonal().add_,
    narrow().copy_, select().zero_, t() view add_, a chunk view clamp_, unsqueeze view div_."""
    y = x.clone()
    y[:, :2].mul_(2)
    y.diagonal().add_(10)
    y.narrow(1, 3, 2).copy_(torch.ones(5, 2))
    y.select(0, 4).zero_()
    y.t()[1].add_(0.5)
    y.chunk(3, dim=1)[2].clamp_(-0.1, 0.1)
    y[1].unsqueeze(0).div_(4)
    return y


@fn_case("inplace_on_input_view_returns_base_and_view", lambda i=0: (R(4, 6),))
def inplace_on_input_view_returns_base_and_view(x):
    """An input written in place through a view (x[..., ::2].relu_()), the input returned beside
    the view; a transposed-view in-place fill through masked_fill_."""
    v = x[..., ::2]
    v.relu_()
    w = x.T
    w.masked_fill_(w > 1.0, 1.0)
    return x, v, w.sum()


class KVRingBuffer(nn.Module):
    """A ring-buffer KV cache: a position buffer, the write slot by position % size, the slot
    written through index_copy_ on a view of the buffer, the mask built from the fill count."""

    def __init__(self, size=4, d=3):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, size, d))
        self.register_buffer("pos", torch.zeros((), dtype=torch.long))
        self.size = size

    def forward(self, knew):
        slot = self.pos % self.size
        self.k[0].index_copy_(0, slot.view(1), knew)
        self.pos += 1
        filled = torch.arange(self.size) < self.pos
        return (self.k[0] * filled[:, None]).sum(0), filled


case("inplace_ring_buffer_index_copy_on_view_of_buffer", lambda: (R(1, 3),), ncalls=6)(lambda: KVRingBuffer())


@fn_case("inplace_unbind_views_swap_and_as_strided", lambda i=0: (R(3, 4),))
def inplace_unbind_views_swap_and_as_strided(x):
    """Rows of unbind written in place (a swap by clone / copy_), as_strided overlapping windows
    read after the write, view(-1) write visible in the base."""
    y = x.clone()
    a, b, c = y.unbind(0)
    tmp = a.clone()
    a.copy_(c)
    c.copy_(tmp)
    b.mul_(-1)
    win = y.as_strided((3, 3), (1, 1))
    y.view(-1)[5] = 100.0
    return y, win.clone()


@fn_case("inplace_squeeze_expand_broadcast_add_out_of_place_base", lambda i=0: (R(1, 4, 1), R(3, 4)))
def inplace_squeeze_expand_broadcast_add_out_of_place_base(a, b):
    """squeeze_ / unsqueeze_ / transpose_ on a tensor (metadata in place), a view of an expanded
    tensor made contiguous then written, t_() on a 2-d clone."""
    z = a.clone()
    z.squeeze_()
    z.unsqueeze_(0)
    e = z.expand(3, 4).contiguous()
    e[1:].add_(b[1:])
    c = b.clone()
    c.t_()
    c[0].mul_(3)
    return z, e, c, c.is_contiguous()


# ============================================================================ containers
@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    mask: torch.Tensor
    labels: Optional[torch.Tensor] = None


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None
    extras: Dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)


class DataclassIO(nn.Module):
    """A dataclass batch in, a dataclass out with an Optional loss only when labels exist and a
    dict field; masked mean pooling."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, batch: Batch) -> Output:
        h = torch.tanh(self.enc(batch.x))
        m = batch.mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
        logits = self.head(pooled)
        out = Output(logits=logits, extras={"pooled": pooled, "n": batch.mask.sum(1)})
        if batch.labels is not None:
            out.loss = F.cross_entropy(logits, batch.labels)
        return out


def _batch(i=0):
    m = torch.ones(3, 5, dtype=torch.bool)
    m[0, 3:] = False
    return (Batch(R(3, 5, 4), m, I(0, 3, 3) if i != 1 else None),)


case("io_dataclass_batch_in_dataclass_out_optional_loss", _batch)(lambda: DataclassIO())


class DictOfListsIO(nn.Module):
    """A dict of lists of tensors in (multi-crop views of different sizes), a list of dicts out;
    crops grouped by resolution with itertools-free loops, a per-group forward."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

    def forward(self, views: Dict[str, List[torch.Tensor]]):
        outs = []
        for key in sorted(views):
            batch = torch.cat(views[key])
            z = self.net(batch)
            outs.append({"key_len": len(views[key]), "z": F.normalize(z, dim=-1), "mean": z.mean(0)})
        return outs


case("io_dict_of_lists_multicrop_list_of_dicts_out", lambda: ({"global": [R(1, 3, 8, 8), R(1, 3, 8, 8)],
                                                                 "local": [R(1, 3, 4, 4)] * 3},))(lambda: DictOfListsIO())


class NamedTupleKwargsIO(nn.Module):
    """**kwargs input with optional entries absent on some calls, a namedtuple-like tuple output,
    None values inside a returned dict."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x, **kw):
        y = self.l(x)
        if kw.get("bias") is not None:
            y = y + kw["bias"]
        scale = kw.get("scale", 1.0)
        return {"y": y * scale, "aux": None if "aux" not in kw else kw["aux"] * 2, "keys": tuple(sorted(kw))}


class _KwCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = NamedTupleKwargsIO()

    def forward(self, x, b, a):
        return self.m(x, bias=b), self.m(x, scale=0.5, aux=a), self.m(x)


case("io_kwargs_optional_entries_none_in_dict_out", lambda: (R(2, 3), R(3), R(2)))(lambda: _KwCall())


@fn_case("io_nested_tuple_list_outputs_with_ints_and_strings", lambda i=0: ([R(2, 3), R(2, 3)], (R(3), 4)))
def io_nested_tuple_list_outputs_with_ints_and_strings(xs, pair):
    """Nested list / tuple inputs with an int inside, outputs mixing tensors, shapes (torch.Size),
    strings, floats from .item(), and a list comprehension over inputs."""
    v, k = pair
    stacked = torch.stack([x * v for x in xs])
    return {"shape": stacked.shape, "name": f"k{k}", "total": float(stacked.sum().item()),
            "parts": [s[:, :k] for s in stacked], "tup": (stacked.max(), k + 1)}


# ============================================================================ misc real-world idioms
class FocalModulation(nn.Module):
    """ConvNeXt-V2's Global Response Normalization and a LayerScale'd block in channels-last."""

    def __init__(self, c=8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.gamma_grn = nn.Parameter(torch.zeros(1, 1, 1, 4 * c) + 0.1)
        self.beta_grn = nn.Parameter(torch.zeros(1, 1, 1, 4 * c))
        self.pw2 = nn.Linear(4 * c, c)

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = F.gelu(self.pw1(self.ln(h)))
        gx = torch.norm(h, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        h = self.gamma_grn * (h * nx) + self.beta_grn + h
        return x + self.pw2(h).permute(0, 3, 1, 2)


case("misc_convnextv2_grn_channels_last_block", lambda: (R(2, 8, 7, 7),), train=True)(lambda: FocalModulation())


class SiameseContrastive(nn.Module):
    """SimCLR NT-Xent: two augmented views, normalized projections, similarity / temperature with
    the diagonal masked by -inf (fill_diagonal_ on a clone), labels by arange roll, CE."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, a, b):
        z = F.normalize(self.enc(torch.cat([a, b])), dim=1)
        n = a.shape[0]
        sim = z @ z.T / 0.2
        sim.fill_diagonal_(float("-inf"))
        labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        return F.cross_entropy(sim, labels), (sim.argmax(1) == labels).float().mean()


case("misc_simclr_ntxent_fill_diagonal_inf", lambda: (R(4, 6), R(4, 6)), train=True)(lambda: SiameseContrastive())


class ArcFace(nn.Module):
    """ArcFace margin: normalized weights, cos theta clamped, theta + m by acos / cos, easy margin
    by where, one-hot by scatter_, scaled logits."""

    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.randn(5, 6))

    def forward(self, emb, labels):
        cos = F.linear(F.normalize(emb), F.normalize(self.W)).clamp(-1 + 1e-7, 1 - 1e-7)
        sin = torch.sqrt(1.0 - cos ** 2)
        phi = cos * math.cos(0.5) - sin * math.sin(0.5)
        phi = torch.where(cos > math.cos(math.pi - 0.5), phi, cos - math.sin(math.pi - 0.5) * 0.5)
        one_hot = torch.zeros_like(cos).scatter_(1, labels.view(-1, 1), 1)
        logits = (one_hot * phi + (1 - one_hot) * cos) * 30.0
        return F.cross_entropy(logits, labels), torch.acos(cos).mean()


case("misc_arcface_margin_acos_scatter_onehot", lambda: (R(6, 6), I(0, 5, 6)), train=True)(lambda: ArcFace())


class CRFViterbi(nn.Module):
    """A linear-chain CRF (pytorch-crf style): forward algorithm by logsumexp over a time loop with a
    mask, gold path score by gathers, Viterbi decode with backpointers and a Python backtrace."""

    def __init__(self, nt=4):
        super().__init__()
        self.trans = nn.Parameter(torch.randn(nt, nt) * 0.1)
        self.start = nn.Parameter(torch.randn(nt) * 0.1)
        self.end = nn.Parameter(torch.randn(nt) * 0.1)

    def forward(self, em, tags, mask):   # em (T, B, nt)
        T, B, _ = em.shape
        score = self.start[tags[0]] + em[0, torch.arange(B), tags[0]]
        for i in range(1, T):
            score = score + (self.trans[tags[i - 1], tags[i]] + em[i, torch.arange(B), tags[i]]) * mask[i]
        seq_ends = mask.long().sum(0) - 1
        score = score + self.end[tags[seq_ends, torch.arange(B)]]
        alpha = self.start + em[0]
        for i in range(1, T):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.trans + em[i].unsqueeze(1), dim=1)
            alpha = torch.where(mask[i].unsqueeze(1).bool(), nxt, alpha)
        logz = torch.logsumexp(alpha + self.end, 1)
        v = self.start + em[0]
        hist = []
        for i in range(1, T):
            nv, idx = (v.unsqueeze(2) + self.trans + em[i].unsqueeze(1)).max(1)
            v = torch.where(mask[i].unsqueeze(1).bool(), nv, v)
            hist.append(idx)
        v = v + self.end
        best = []
        for b in range(B):
            last = v[b].argmax().item()
            path = [last]
            for h in reversed(hist[:int(seq_ends[b])]):
                last = h[b][path[-1]].item()
                path.append(last)
            best.append(path[::-1])
        return (logz - score).mean(), best


def _crf(i=0):
    mask = torch.ones(5, 3)
    mask[3:, 1] = 0
    mask[4:, 2] = 0
    return R(5, 3, 4), I(0, 4, 5, 3), mask


case("misc_crf_forward_algorithm_viterbi_backtrace", _crf, train=True)(lambda: CRFViterbi())


class DeformableSampling(nn.Module):
    """Deformable-DETR-style sampling: offsets predicted per query, reference points + offsets
    normalised to [-1, 1], grid_sample (bilinear, zeros padding, align_corners False), attention
    weights softmaxed over the points."""

    def __init__(self, c=8, npts=4):
        super().__init__()
        self.off = nn.Linear(c, npts * 2)
        self.att = nn.Linear(c, npts)
        self.val = nn.Conv2d(c, c, 1)
        self.n = npts

    def forward(self, q, ref, feat):   # q (b, nq, c), ref (b, nq, 2) in [0, 1], feat (b, c, h, w)
        b, nq, c = q.shape
        h, w = feat.shape[-2:]
        off = self.off(q).view(b, nq, self.n, 2)
        norm = torch.tensor([w, h], dtype=q.dtype)
        loc = ref[:, :, None, :] + off / norm
        grid = 2 * loc - 1
        s = F.grid_sample(self.val(feat), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        a = self.att(q).softmax(-1)
        return (s * a.unsqueeze(1)).sum(-1).transpose(1, 2)


case("det_deformable_attention_grid_sample_offsets", lambda: (R(2, 5, 8), U(2, 5, 2), R(2, 8, 6, 7)), train=True)(
    lambda: DeformableSampling())


class RoIAlignLite(nn.Module):
    """RoIAlign by hand with grid_sample: per-box affine grids (F.affine_grid from box
    coordinates), batch index per box picks the feature map, then a head."""

    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 3 * 3, 5))

    def forward(self, feat, boxes, bidx):   # boxes normalised x1 y1 x2 y2 in [0, 1]
        x1, y1, x2, y2 = boxes.unbind(1)
        theta = torch.zeros(boxes.shape[0], 2, 3)
        theta[:, 0, 0] = (x2 - x1)
        theta[:, 0, 2] = x1 + x2 - 1
        theta[:, 1, 1] = (y2 - y1)
        theta[:, 1, 2] = y1 + y2 - 1
        grid = F.affine_grid(theta, (boxes.shape[0], feat.shape[1], 3, 3), align_corners=False)
        crops = F.grid_sample(feat[bidx], grid, align_corners=False)
        return self.head(crops)


def _roi(i=0):
    lo = U(5, 2) * 0.5
    return R(2, 4, 8, 8), torch.cat([lo, lo + 0.3], 1), I(0, 2, 5)


case("det_roi_align_affine_grid_per_box", _roi, train=True)(lambda: RoIAlignLite())


class MixupCutmix(nn.Module):
    """timm Mixup / CutMix in a train step: lambda from a seeded Beta sample, permutation by
    torch.randperm, cutmix box from lambda, labels mixed as one-hot, soft-target CE."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))

    def forward(self, x, y):
        lam = torch.distributions.Beta(torch.tensor(1.0), torch.tensor(1.0)).sample().item()
        perm = torch.randperm(x.shape[0])
        H, W = x.shape[-2:]
        cut = math.sqrt(1 - lam)
        ch, cw = int(H * cut), int(W * cut)
        cy, cx = int(torch.randint(0, H, ()).item()), int(torch.randint(0, W, ()).item())
        y1, y2 = max(cy - ch // 2, 0), min(cy + ch // 2, H)
        x1, x2 = max(cx - cw // 2, 0), min(cx + cw // 2, W)
        x = x.clone()
        x[:, :, y1:y2, x1:x2] = x[perm, :, y1:y2, x1:x2]
        lam = 1 - (y2 - y1) * (x2 - x1) / (H * W)
        t = F.one_hot(y, 5).float()
        t = lam * t + (1 - lam) * t[perm]
        return torch.sum(-t * F.log_softmax(self.net(x), -1), -1).mean(), lam


case("misc_cutmix_beta_randperm_soft_target_ce", lambda: (R(4, 3, 8, 8), I(0, 5, 4)), train=True)(
    lambda: MixupCutmix())


class SlotAttention(nn.Module):
    """Slot attention: slots sampled from a learned Gaussian (randn * sigma + mu), iterative
    attention softmaxed over slots, weighted mean, GRUCell update, residual MLP."""

    def __init__(self, d=8, ns=3, iters=3):
        super().__init__()
        self.mu = nn.Parameter(torch.randn(1, 1, d))
        self.log_sigma = nn.Parameter(torch.zeros(1, 1, d))
        self.q, self.k, self.v = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.gru = nn.GRUCell(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, d))
        self.ni, self.ln_in, self.ln_s, self.ln_m = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.ns, self.iters, self.d = ns, iters, d

    def forward(self, x):
        b, n, d = x.shape
        slots = self.mu + self.log_sigma.exp() * torch.randn(b, self.ns, d)
        x = self.ln_in(x)
        k, v = self.k(x), self.v(x)
        for _ in range(self.iters):
            prev = slots
            q = self.q(self.ln_s(slots))
            attn = torch.einsum("bid,bjd->bij", q, k) * d ** -0.5
            attn = attn.softmax(dim=1) + 1e-8
            attn = attn / attn.sum(dim=-1, keepdim=True)
            upd = torch.einsum("bjd,bij->bid", v, attn)
            slots = self.gru(upd.reshape(-1, d), prev.reshape(-1, d)).reshape(b, -1, d)
            slots = slots + self.mlp(self.ln_m(slots))
        return slots


case("misc_slot_attention_gru_iterations_random_init", lambda: (R(2, 6, 8),), train=True)(lambda: SlotAttention())


class NeRFRender(nn.Module):
    """NeRF volume rendering: stratified samples along rays (linspace + uniform jitter), positional
    encoding with sin / cos of 2^k, density by softplus, alpha compositing with an exclusive
    cumprod of (1 - alpha), depth and RGB maps."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3 * 9, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, ro, rd):
        n = 6
        t = torch.linspace(2.0, 6.0, n).expand(ro.shape[0], n)
        mids = 0.5 * (t[..., 1:] + t[..., :-1])
        upper = torch.cat([mids, t[..., -1:]], -1)
        lower = torch.cat([t[..., :1], mids], -1)
        t = lower + (upper - lower) * torch.rand(t.shape)
        pts = ro[:, None] + rd[:, None] * t[..., None]
        enc = [pts] + [f(2.0 ** k * pts) for k in range(4) for f in (torch.sin, torch.cos)]
        raw = self.mlp(torch.cat(enc, -1))
        sigma = F.softplus(raw[..., 3])
        rgb = torch.sigmoid(raw[..., :3])
        dists = torch.cat([t[..., 1:] - t[..., :-1], torch.full_like(t[..., :1], 1e10)], -1) * rd.norm(dim=-1, keepdim=True)
        alpha = 1 - torch.exp(-sigma * dists)
        T = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1 - alpha + 1e-10], -1), -1)[..., :-1]
        w = alpha * T
        return (w[..., None] * rgb).sum(-2), (w * t).sum(-1), w.sum(-1)


case("misc_nerf_stratified_sampling_alpha_compositing", lambda: (R(5, 3), R(5, 3)), train=True)(lambda: NeRFRender())


class GaussianNLLHetero(nn.Module):
    """Heteroscedastic regression: mean / variance heads, F.gaussian_nll_loss with full=True,
    PoissonNLL with log_input, beta-NLL weighting by var.detach() ** beta."""

    def __init__(self):
        super().__init__()
        self.f = nn.Linear(4, 6)

    def forward(self, x, y, c):
        mu, raw, rate = self.f(x).chunk(3, -1)
        var = F.softplus(raw) + 1e-6
        g = F.gaussian_nll_loss(mu, y, var, full=True)
        beta = 0.5 * (torch.log(var) + (y - mu) ** 2 / var) * var.detach() ** 0.5
        p = F.poisson_nll_loss(rate, c, log_input=True, full=True)
        return g, beta.mean(), p


case("misc_gaussian_nll_beta_nll_poisson_full", lambda: (R(5, 4), R(5, 2), I(0, 5, 5, 2).float()), train=True)(
    lambda: GaussianNLLHetero())


class Perceiver(nn.Module):
    """Perceiver-style latent cross-attention: a learned latent array expanded over the batch,
    nn.MultiheadAttention with kdim / vdim different from embed_dim and a key_padding_mask,
    then latent self-attention by TransformerEncoderLayer(norm_first=True)."""

    def __init__(self):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(4, 8))
        self.cross = nn.MultiheadAttention(8, 2, kdim=5, vdim=5, batch_first=True)
        self.selfl = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True)

    def forward(self, x, pad):
        lat = self.latents.expand(x.shape[0], -1, -1)
        h, w = self.cross(lat, x, x, key_padding_mask=pad)
        return self.selfl(lat + h), w


def _perc(i=0):
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, 5:] = True
    return R(2, 7, 5), pad


case("misc_perceiver_latent_cross_attn_kdim_vdim_padding", _perc, train=True)(lambda: Perceiver())


class MoEDispatchTop2(nn.Module):
    """A top-2 MoE with capacity: router softmax, top-2, per-expert positions by cumsum over the
    one-hot, tokens over capacity dropped, dispatch by index_select, combine by index_add_,
    the load-balancing aux loss."""

    def __init__(self, d=6, ne=3, cap=4):
        super().__init__()
        self.router = nn.Linear(d, ne, bias=False)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, 8), nn.GELU(), nn.Linear(8, d)) for _ in range(ne)])
        self.ne, self.cap = ne, cap

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        topv, topi = probs.topk(2, -1)
        topv = topv / topv.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for k in range(2):
            oh = F.one_hot(topi[:, k], self.ne)
            pos = (torch.cumsum(oh, 0) - 1) * oh
            keep = (pos < self.cap).all(-1) & (oh.sum(-1) > 0)
            for e in range(self.ne):
                sel = torch.nonzero((topi[:, k] == e) & keep).squeeze(-1)
                if sel.numel() == 0:
                    continue
                y = self.experts[e](x.index_select(0, sel))
                out.index_add_(0, sel, y * topv[sel, k:k + 1])
        frac = F.one_hot(topi[:, 0], self.ne).float().mean(0)
        aux = self.ne * (frac * probs.mean(0)).sum()
        return out, aux


case("misc_moe_top2_capacity_cumsum_index_add", lambda: (R(10, 6),), train=True)(lambda: MoEDispatchTop2())


# ============================================================================ transformers models
def _hf(make):
    """A factory returning a wrapper around a transformers model made by make(transformers)."""
    def factory():
        import transformers as T
        torch.manual_seed(0)
        return make(T)
    return factory


class HFWrap(nn.Module):
    def __init__(self, model, pick):
        super().__init__()
        self.model = model
        self.pick = pick

    def forward(self, *args):
        return self.pick(self.model, *args)


def _hf_case(name, inputs, make, pick, train=False):
    case(name, inputs, train=train)(_hf(lambda T: HFWrap(make(T), pick)))


_hf_case("hf_yolos_object_detection_logits_boxes", lambda: (R(1, 3, 32, 32),),
         lambda T: T.YolosForObjectDetection(T.YolosConfig(
             image_size=[32, 32], patch_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, num_detection_tokens=5, num_labels=3)).eval(),
         lambda m, x: (m(pixel_values=x).logits, m(pixel_values=x).pred_boxes))
_hf_case("hf_xlnet_lm_head_two_stream_free", lambda: (I(0, 50, 2, 7),),
         lambda T: T.XLNetLMHeadModel(T.XLNetConfig(
             vocab_size=50, d_model=16, n_layer=2, n_head=2, d_inner=32, mem_len=0)).eval(),
         lambda m, ids: m(input_ids=ids, use_mems=False).logits)
_hf_case("hf_mpt_causal_lm_alibi", lambda: (I(0, 50, 2, 7),),
         lambda T: T.MptForCausalLM(T.MptConfig(
             vocab_size=50, d_model=16, n_layers=2, n_heads=2, max_seq_len=32, expansion_ratio=2)).eval(),
         lambda m, ids: m(input_ids=ids, use_cache=False).logits)
_hf_case("hf_mamba2_causal_lm_ssd_torch_path", lambda: (I(0, 50, 2, 8),),
         lambda T: T.Mamba2ForCausalLM(T.Mamba2Config(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, num_heads=4, head_dim=8, state_size=8,
             expand=2, n_groups=1, chunk_size=4, conv_kernel=4)).eval(),
         lambda m, ids: m(input_ids=ids, use_cache=False).logits)
_hf_case("hf_mobilenet_v1_image_classification", lambda: (R(2, 3, 32, 32),),
         lambda T: T.MobileNetV1ForImageClassification(T.MobileNetV1Config(
             image_size=32, depth_multiplier=0.25, min_depth=4, num_labels=5)).eval(),
         lambda m, x: m(pixel_values=x).logits)
_hf_case("hf_time_series_transformer_past_future", lambda: (R(2, 11), torch.ones(2, 11), R(2, 4)),
         lambda T: T.TimeSeriesTransformerModel(T.TimeSeriesTransformerConfig(
             prediction_length=4, context_length=8, lags_sequence=[1, 2, 3], d_model=16, encoder_layers=1,
             decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
             decoder_ffn_dim=16, num_time_features=1, scaling="mean")).eval(),
         lambda m, pv, pm, fv: m(past_values=pv, past_time_features=torch.arange(11.).view(1, 11, 1).expand(2, -1, -1),
                                 past_observed_mask=pm, future_values=fv,
                                 future_time_features=torch.arange(11., 15.).view(1, 4, 1).expand(2, -1, -1)
                                 ).last_hidden_state)
_hf_case("hf_patchtsmixer_forecast", lambda: (R(2, 16, 3),),
         lambda T: T.PatchTSMixerForPrediction(T.PatchTSMixerConfig(
             context_length=16, patch_length=4, patch_stride=4, num_input_channels=3, prediction_length=4,
             d_model=8, num_layers=2)).eval(),
         lambda m, x: m(past_values=x).prediction_outputs)
_hf_case("hf_longformer_local_global_attention", lambda: (I(0, 50, 2, 16),),
         lambda T: T.LongformerModel(T.LongformerConfig(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             attention_window=4, max_position_embeddings=64, pad_token_id=1)).eval(),
         lambda m, ids: m(input_ids=ids, global_attention_mask=(torch.arange(16) == 0).long().expand(2, -1)
                          ).last_hidden_state)
_hf_case("hf_bigbird_original_full_attention_short", lambda: (I(0, 50, 2, 12),),
         lambda T: T.BigBirdModel(T.BigBirdConfig(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             max_position_embeddings=64, attention_type="original_full")).eval(),
         lambda m, ids: m(input_ids=ids).pooler_output)
_hf_case("hf_encodec_encode_decode_audio", lambda: (R(1, 1, 320),),
         lambda T: T.EncodecModel(T.EncodecConfig(
             target_bandwidths=[8.0], sampling_rate=8000, audio_channels=1, num_filters=4, hidden_size=8,
             upsampling_ratios=[4, 2], codebook_size=16, num_lstm_layers=1, codebook_dim=8)).eval(),
         lambda m, x: m(input_values=x).audio_values)
_hf_case("hf_layoutlm_bbox_embeddings", lambda: (I(0, 50, 2, 6), I(0, 500, 2, 6, 2)),
         lambda T: T.LayoutLMModel(T.LayoutLMConfig(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             max_2d_position_embeddings=1024)).eval(),
         lambda m, ids, xy: m(input_ids=ids, bbox=torch.cat([xy, xy + 10], -1)).pooler_output)
_hf_case("hf_ernie_task_type_embeddings", lambda: (I(0, 50, 2, 6),),
         lambda T: T.ErnieModel(T.ErnieConfig(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             use_task_id=True, task_type_vocab_size=3)).eval(),
         lambda m, ids: m(input_ids=ids, task_type_ids=torch.ones_like(ids)).last_hidden_state)
_hf_case("hf_gpt2_double_heads_train_loss", lambda: (I(0, 50, 2, 2, 6), torch.tensor([[5, 4], [3, 5]]), torch.tensor([1, 0])),
         lambda T: T.GPT2DoubleHeadsModel(T.GPT2Config(
             vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=32)),
         lambda m, ids, mc, lab: (lambda o: (o.loss, o.mc_loss, o.mc_logits))(
             m(input_ids=ids, mc_token_ids=mc, labels=ids, mc_labels=lab)), train=True)


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
