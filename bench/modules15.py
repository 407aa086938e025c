"""Fifteenth real-world-style corpus (issue 10 trust): held-out programs as model zoos, paper
reference code and notebooks write them, each a whole program rather than one op.

This part: vision and generative reference code (milesial's UNet with padded skips, PixelCNN's
masked convolution writing its weight through .data in forward, Transformer-XL's relative shift by
the pad-and-view trick, capsule routing by agreement, a spatial transformer, ESPCN pixel shuffle,
CBAM, a ViT whose position embedding is interpolated when the image size changes, ConvNeXt with
stochastic depth, DETR's sine position embedding from a padding mask carried in a NestedTensor-like
class, Swin's relative position index buffer, deformable-style bilinear sampling with computed
indices, a mixture density network returning a NamedTuple, VQ-VAE's codebook with EMA updates,
NeRF's hierarchical sampling by searchsorted, a diffusion DDIM step loop with a timestep schedule).
bench/modules15_train.py: training programs (optimizers, schedulers, autocast, GradScaler,
custom Functions, hooks, checkpointing, parametrizations); bench/modules15_seq.py: sequences
(packed RNN / GRU / LSTM, CTC, beam search, recursion, generators, dataclass configs of
transformers-style modules); bench/modules15_misc.py: dtypes, views, masks, 0-size dims,
non-contiguous inputs, containers; bench/modules15_extra.py: losses, heads and small generative /
physical models from Kaggle and papers (ArcFace, CutMix, NT-Xent, MLM masking, WaveNet, MBConv,
Lovasz, TSM, Set Transformer, RK4 neural ODE, Sinkhorn, RealNVP, Kalman, an EMA by functional_call).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import R, U, registrars, run

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ UNet / masked conv
class Up(nn.Module):
    """milesial/Pytorch-UNet's Up: upsample, pad the smaller map by the size difference (odd sizes),
    concatenate with the skip, double conv."""

    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size()[2] - x1.size()[2], x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True))
        self.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True))
        self.up = Up(16, 8)
        self.outc = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        x1 = self.inc(x)
        return self.outc(self.up(self.down(x1), x1))


case("unet_odd_sizes_pad_by_difference", lambda i=0: (R(2, 3, 9 + 2 * (i // 2), 11),), train=True, ncalls=4)(
    lambda: TinyUNet())


class MaskedConv2d(nn.Conv2d):
    """PixelCNN's mask 'A' / 'B' kept in a buffer, applied to the weight through .data in forward
    (`self.weight.data *= self.mask`) before Conv2d.forward, as the reference code does."""

    def __init__(self, mask_type, *a, **k):
        super().__init__(*a, **k)
        self.register_buffer("mask", self.weight.data.clone().fill_(1))
        _, _, h, w = self.weight.size()
        self.mask[:, :, h // 2, w // 2 + (mask_type == "B"):] = 0
        self.mask[:, :, h // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


class PixelCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(MaskedConv2d("A", 1, 8, 5, padding=2), nn.ReLU(),
                                 MaskedConv2d("B", 8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))

    def forward(self, x):
        logits = self.net(x)
        target = (x * 3).round().clamp(0, 3).long().squeeze(1)
        return F.cross_entropy(logits, target), logits.argmax(1)


case("pixelcnn_masked_conv_weight_data_in_forward", lambda: (U(2, 1, 6, 6),), train=True)(lambda: PixelCNN())


@fn_case("transformer_xl_rel_shift_pad_view", lambda i=0: (R(2, 2, 5 + i, 5 + i),))
def rel_shift(x):
    """Transformer-XL's _rel_shift: a zero column padded in front, the buffer viewed one row longer,
    the first row dropped and viewed back; then the causal part kept by triu."""
    b, h, q, k = x.size()
    zero = torch.zeros((b, h, q, 1), dtype=x.dtype)
    padded = torch.cat([zero, x], dim=-1).view(b, h, k + 1, q)
    shifted = padded[:, :, 1:].view_as(x)
    ones = torch.ones((q, k), dtype=torch.bool)
    return shifted, shifted.masked_fill(torch.triu(ones, 1)[None, None], 0.0)


class CapsuleRouting(nn.Module):
    """Sabour et al.'s dynamic routing: u_hat by a batched matmul of a 5-d weight, 3 routing
    iterations in a Python loop, squash, b updated by agreement (detached on all but the last)."""

    def __init__(self, n_in=6, d_in=4, n_out=3, d_out=5, iters=3):
        super().__init__()
        self.W = nn.Parameter(0.1 * torch.randn(1, n_in, n_out, d_out, d_in))
        self.iters = iters

    @staticmethod
    def squash(s, dim=-1):
        n2 = (s ** 2).sum(dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, u):
        b = u.shape[0]
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)        # b, n_in, n_out, d_out
        logits = torch.zeros(b, u_hat.shape[1], u_hat.shape[2])
        for it in range(self.iters):
            c = logits.softmax(2)
            uh = u_hat if it == self.iters - 1 else u_hat.detach()
            v = self.squash((c[..., None] * uh).sum(1))
            if it < self.iters - 1:
                logits = logits + (uh * v[:, None]).sum(-1)
        return v, v.norm(dim=-1)


case("capsule_dynamic_routing_detach_iters", lambda: (R(3, 6, 4),), train=True)(lambda: CapsuleRouting())


class STN(nn.Module):
    """The spatial transformer tutorial: a localisation net regressing theta initialised to the
    identity, affine_grid + grid_sample (align_corners False), then a classifier."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 3 * 3, 6))
        self.loc[-1].weight.data.mul_(0.1)
        self.loc[-1].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
        self.cls = nn.Linear(64, 3)

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        y = F.grid_sample(x, grid, align_corners=False, padding_mode="border")
        return F.log_softmax(self.cls(y.flatten(1)), 1), theta


case("spatial_transformer_affine_grid_sample", lambda: (R(2, 1, 8, 8),))(lambda: STN())


class ESPCN(nn.Module):
    def __init__(self, r=2):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.Tanh(), nn.Conv2d(8, r * r, 3, padding=1))
        self.ps = nn.PixelShuffle(r)

    def forward(self, lr, hr):
        sr = self.ps(self.body(lr)).clamp(0.0, 1.0)
        mse = F.mse_loss(sr, hr)
        return sr, 10 * torch.log10(1.0 / mse), F.pixel_unshuffle(sr, 2).shape[1]


case("espcn_pixel_shuffle_psnr", lambda: (U(2, 1, 5, 5), U(2, 1, 10, 10)))(lambda: ESPCN())


class CBAM(nn.Module):
    """CBAM: channel attention from avg- and max-pooled descriptors through a shared MLP, spatial
    attention from channel mean / max concatenated, a 7x7 conv."""

    def __init__(self, c=8, r=2):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(c, c // r, 1, bias=False), nn.ReLU(), nn.Conv2d(c // r, c, 1, bias=False))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3, bias=False)

    def forward(self, x):
        ca = torch.sigmoid(self.mlp(F.adaptive_avg_pool2d(x, 1)) + self.mlp(F.adaptive_max_pool2d(x, 1)))
        x = x * ca
        sa = torch.cat([x.mean(1, keepdim=True), x.max(1, keepdim=True)[0]], 1)
        return x * torch.sigmoid(self.spatial(sa))


case("cbam_channel_spatial_attention_channels_last",
     lambda: (R(2, 8, 6, 7).contiguous(memory_format=torch.channels_last),))(lambda: CBAM())


class ViTInterp(nn.Module):
    """A ViT whose learned position embedding is resized by bicubic interpolation when the number
    of patches differs from the pretraining grid (DINO's interpolate_pos_encoding), cls token kept."""

    def __init__(self, p=4, d=16, grid=3):
        super().__init__()
        self.p, self.grid = p, grid
        self.proj = nn.Conv2d(3, d, p, stride=p)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + grid * grid, d) * 0.02)
        self.blk = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True, norm_first=True)

    def interpolate_pos_encoding(self, n, h, w):
        if n == self.pos.shape[1] - 1 and h == w:
            return self.pos
        cls_pos, patch = self.pos[:, :1], self.pos[:, 1:]
        patch = patch.reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        patch = F.interpolate(patch, size=(h, w), mode="bicubic", align_corners=False)
        return torch.cat([cls_pos, patch.permute(0, 2, 3, 1).flatten(1, 2)], 1)

    def forward(self, img):
        x = self.proj(img)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        x = x + self.interpolate_pos_encoding(h * w, h, w)
        return self.blk(x)[:, 0]


case("vit_interpolate_pos_encoding_on_new_size",
     lambda i=0: (R(2, 3, *[(12, 12), (12, 12), (16, 12), (20, 20)][i]),), ncalls=4)(lambda: ViTInterp())


def drop_path(x, p, training):
    if p == 0.0 or not training:
        return x
    keep = 1 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask.div_(keep)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt: depthwise 7x7, permute to channels-last, LayerNorm, MLP, layer scale gamma,
    permute back, stochastic depth by a per-sample Bernoulli mask (timm's drop_path)."""

    def __init__(self, d=8, p=0.3):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(1e-1 * torch.ones(d))
        self.p = p

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + drop_path(y.permute(0, 3, 1, 2), self.p, self.training)


case("convnext_block_drop_path_train_eval", lambda: (R(4, 8, 6, 6),), train=True, ncalls=4,
     between=lambda m, i: m.eval() if i == 3 else None)(lambda: ConvNeXtBlock())


class NestedTensor:
    def __init__(self, tensors, mask):
        self.tensors, self.mask = tensors, mask

    def decompose(self):
        return self.tensors, self.mask


class DETRSine(nn.Module):
    """DETR's PositionEmbeddingSine from the padding mask of a NestedTensor: cumsum of the
    not-mask, normalised by the last row / column, interleaved sin / cos by stack + flatten."""

    def __init__(self, feats=4, temperature=10000):
        super().__init__()
        self.f, self.t = feats, temperature
        self.backbone = nn.Conv2d(3, 8, 3, stride=2, padding=1)

    def forward(self, samples: NestedTensor):
        x, mask = samples.decompose()
        feat = self.backbone(x)
        m = F.interpolate(mask[None].float(), size=feat.shape[-2:])[0].to(torch.bool)
        not_mask = ~m
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        eps, scale = 1e-6, 2 * math.pi
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
        dim_t = torch.arange(self.f, dtype=torch.float32)
        dim_t = self.t ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.f)
        px, py = x_embed[:, :, :, None] / dim_t, y_embed[:, :, :, None] / dim_t
        px = torch.stack((px[..., 0::2].sin(), px[..., 1::2].cos()), dim=4).flatten(3)
        py = torch.stack((py[..., 0::2].sin(), py[..., 1::2].cos()), dim=4).flatten(3)
        return feat, torch.cat((py, px), dim=3).permute(0, 3, 1, 2), m


def _nested(i=0):
    x = R(2, 3, 8, 10)
    mask = torch.zeros(2, 8, 10, dtype=torch.bool)
    mask[0, :, 7 - i:] = True
    mask[1, 6:] = True
    return (NestedTensor(x * ~mask[:, None], mask),)


case("detr_sine_position_from_nested_tensor_mask", _nested)(lambda: DETRSine())


class SwinRelBias(nn.Module):
    """Swin's relative position bias: the index buffer built in __init__ from meshgrid / permute /
    sums, the table gathered by the flattened index, window attention with a shifted-window mask."""

    def __init__(self, ws=3, heads=2, d=8):
        super().__init__()
        self.ws, self.h = ws, heads
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        c = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("index", rel.sum(-1))
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, attn_mask):
        bw, n, d = x.shape
        q, k, v = self.qkv(x).reshape(bw, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        attn = (q * (d // self.h) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = attn + bias[None]
        nw = attn_mask.shape[0]
        attn = attn.view(bw // nw, nw, self.h, n, n) + attn_mask[None, :, None]
        return (attn.view(-1, self.h, n, n).softmax(-1) @ v).transpose(1, 2).reshape(bw, n, d)


def _swin_in():
    m = torch.zeros(2, 9, 9)
    m[1, :4, 4:] = -100.0
    m[1, 4:, :4] = -100.0
    return R(4, 9, 8), m


case("swin_relative_index_buffer_shift_mask", _swin_in)(lambda: SwinRelBias())


@fn_case("bilinear_sample_computed_corner_indices", lambda: (R(2, 4, 6, 7), U(2, 5, 2) * torch.tensor([6.5, 5.5]) - 0.5))
def bilinear_gather(feat, pts):
    """Deformable-DETR-style sampling written by hand: floor corners, clamped integer indices,
    flattened y * W + x gathered per batch, weights from the fractional parts, out-of-range masked."""
    b, c, h, w = feat.shape
    x, y = pts[..., 0], pts[..., 1]
    x0, y0 = x.floor().long(), y.floor().long()
    x1, y1 = x0 + 1, y0 + 1
    flat = feat.flatten(2)

    def tap(xi, yi):
        valid = ((xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)).float()
        idx = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1))[:, None].expand(-1, c, -1)
        return flat.gather(2, idx) * valid[:, None]

    wx1, wy1 = x - x0.float(), y - y0.float()
    wx0, wy0 = 1 - wx1, 1 - wy1
    out = tap(x0, y0) * (wx0 * wy0)[:, None] + tap(x1, y0) * (wx1 * wy0)[:, None] + \
        tap(x0, y1) * (wx0 * wy1)[:, None] + tap(x1, y1) * (wx1 * wy1)[:, None]
    return out


class MDNOut(NamedTuple):
    pi: torch.Tensor
    mu: torch.Tensor
    sigma: torch.Tensor


class MDN(nn.Module):
    """A mixture density network (Bishop): pi / mu / sigma heads returned as a NamedTuple, the
    negative log-likelihood by logsumexp over components, a sample drawn by multinomial + gather."""

    def __init__(self, k=3, d=2):
        super().__init__()
        self.k, self.d = k, d
        self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
        self.heads = nn.ModuleDict({"pi": nn.Linear(16, k), "mu": nn.Linear(16, k * d), "sigma": nn.Linear(16, k * d)})

    def forward(self, x, y):
        h = self.body(x)
        out = MDNOut(self.heads["pi"](h).log_softmax(-1), self.heads["mu"](h).view(-1, self.k, self.d),
                     F.elu(self.heads["sigma"](h)).add(1 + 1e-4).view(-1, self.k, self.d))
        logp = torch.distributions.Normal(out.mu, out.sigma).log_prob(y[:, None]).sum(-1)
        nll = -torch.logsumexp(out.pi + logp, -1).mean()
        comp = torch.multinomial(out.pi.exp(), 1)
        sample = out.mu.gather(1, comp[..., None].expand(-1, 1, self.d)).squeeze(1)
        return out, nll, sample


case("mixture_density_namedtuple_nll_sample", lambda: (R(5, 4), R(5, 2)))(lambda: MDN())


class VQEMA(nn.Module):
    """VQ-VAE-2's quantizer with EMA codebook updates in train mode: distances by the expanded
    square, argmin, one-hot by scatter, cluster sizes and sums decayed in buffers, Laplace smoothing,
    the embedding rewritten with copy_, the straight-through output."""

    def __init__(self, k=6, d=4, decay=0.9, eps=1e-5):
        super().__init__()
        self.decay, self.eps = decay, eps
        self.register_buffer("embed", torch.randn(d, k))
        self.register_buffer("cluster_size", torch.zeros(k))
        self.register_buffer("embed_avg", self.embed.clone())

    def forward(self, z):
        flat = z.reshape(-1, z.shape[-1])
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embed + self.embed.pow(2).sum(0, keepdim=True)
        ind = (-dist).max(1)[1]
        onehot = torch.zeros(flat.shape[0], self.embed.shape[1]).scatter_(1, ind[:, None], 1.0)
        q = F.embedding(ind.view(z.shape[:-1]), self.embed.t())
        if self.training:
            self.cluster_size.data.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
            self.embed_avg.data.mul_(self.decay).add_(flat.t() @ onehot, alpha=1 - self.decay)
            n = self.cluster_size.sum()
            size = (self.cluster_size + self.eps) / (n + onehot.shape[1] * self.eps) * n
            self.embed.data.copy_(self.embed_avg / size[None])
        diff = (q.detach() - z).pow(2).mean()
        return z + (q - z).detach(), diff, ind


case("vqvae2_ema_codebook_buffers_data_copy", lambda: (R(2, 5, 4),), train=True, ncalls=4)(lambda: VQEMA())


@fn_case("nerf_hierarchical_sample_pdf_searchsorted", lambda: (torch.linspace(2, 6, 9).expand(3, 9).contiguous(),
                                                                U(3, 7) + 1e-3, U(3, 5)))
def sample_pdf(bins, weights, u):
    """NeRF's sample_pdf: pdf normalised, cdf with a zero prepended, searchsorted(right=True) of the
    uniform samples, below / above clamped, gathered on a 2-wide stacked index, linear inversion."""
    pdf = weights / weights.sum(-1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[..., :1]), torch.cumsum(pdf, -1)], -1)
    inds = torch.searchsorted(cdf, u.contiguous(), right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    g = torch.stack([below, above], -1)
    shape = [g.shape[0], g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(shape), 2, g)
    bins_g = torch.gather(bins[..., :-1].unsqueeze(1).expand(shape), 2, g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0]), inds


class DDIM(nn.Module):
    """A DDIM sampler loop: alphas_cumprod from a cosine schedule buffer, timesteps from
    torch.linspace flipped and .long(), a Python loop over them with the model conditioned on a
    sinusoidal timestep embedding, eta = 0, x0 clipped to [-1, 1]."""

    def __init__(self, T=50, steps=4):
        super().__init__()
        s = torch.linspace(0, T, T + 1) / T
        ac = torch.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
        self.register_buffer("alphas_cumprod", (ac / ac[0])[1:].clamp(min=1e-4))
        self.steps, self.T = steps, T
        self.net = nn.Sequential(nn.Linear(4 + 8, 16), nn.SiLU(), nn.Linear(16, 4))

    def temb(self, t):
        half = 4
        f = torch.exp(-math.log(10000) * torch.arange(half) / half)
        a = t.float()[:, None] * f[None]
        return torch.cat([a.sin(), a.cos()], -1)

    def forward(self, x):
        ts = torch.linspace(self.T - 1, 0, self.steps).long()
        for i, t in enumerate(ts):
            tb = t.expand(x.shape[0])
            eps = self.net(torch.cat([x, self.temb(tb)], -1))
            a = self.alphas_cumprod[t]
            a_prev = self.alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0)
            x0 = ((x - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
        return x


case("ddim_sampler_loop_over_linspace_timesteps", lambda: (R(3, 4),))(lambda: DDIM())


# the training, sequence and miscellaneous parts
import modules15_extra  # noqa: E402
import modules15_misc  # noqa: E402
import modules15_seq  # noqa: E402
import modules15_train  # noqa: E402

CASES += modules15_train.CASES + modules15_seq.CASES + modules15_misc.CASES + \
    modules15_extra.CASES


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
