"""Eighth real-world-style corpus (issue 10 trust): domains and idioms modules.py .. modules7.py leave out.

Written the way public repositories write them: image restoration and style (SSIM by a grouped
Gaussian conv, AdaIN and Gram-matrix style losses, total variation and PSNR with identical images,
SPADE, StyleGAN2 modulated / demodulated grouped convs, minibatch stddev and pixel norm, R1
penalty with create_graph, PixelCNN masked convs, U-Net center crops), optical flow and geometry
(RAFT correlation pyramids and convex upsampling, backward warping with validity masks,
quaternions and 6D rotations, Rodrigues with a small-angle branch, monodepth back-projection,
Kabsch by SVD, SO(3) log, homographies, Sampson distance, edge-aware smoothness), pose decoding
(heatmap argmax with quarter offsets, OKS, OHKM), attention variants (Transformer-XL rel_shift,
Performer FAVOR+, Reformer LSH buckets, Linformer, Longformer bands, Nystromformer's iterative
pinv, RWKV's WKV recurrence with negative padding, ToMe bipartite merging, GQA repeat_kv with
an offset causal mask, HF extended masks from finfo.min, T5 RMSNorm in float32 on bf16), speech
(Conformer conv module, Griffin-Lim with stft / istft, Autoformer auto-correlation, VAD
energies), generative sampling (EDM preconditioning with Heun steps, DPM-Solver++ history,
guidance rescale, Euler ancestral with a generator, DDPM posterior clipping, LFQ / FSQ
quantizers), RL (C51 projection, DreamerV3 symlog / twohot, MuZero value transform, prioritized
replay by searchsorted), LLM quantization (int4 packing by shifts, NF4 lookup, LLM.int8 outlier
split, float8_e4m3fn casts, SmoothQuant, int8 KV caches), scientific code (Game of Life on
bool boards, Jacobi iterations, lattice Boltzmann by roll, Black-Scholes in float64, GBM paths
with drawdowns, SchNet filters on radius graphs, periodic minimum images, soft-DTW, conjugate
gradient, Muon's Newton-Schulz in bf16, L-BFGS two-loop recursion), bio / retrieval (DNA one-hot
and reverse complement by lookup tables, distogram bins, logQ-corrected sampled softmax, BPR,
SASRec, ColBERT MaxSim), segmentation losses (Lovasz hinge, Tversky, morphological boundaries,
OHEM), and tensor semantics (beta=0 ignoring NaN in addmm / baddbmm, float_power, frexp / ldexp
/ nextafter, kron / block_diag / combinations / vander, cov with weights, int16 wraparound and
shifts past the width, uint8 saturation, bool promotion, zero-size matmuls and reductions,
extreme Python scalars, non-contiguous in-place writes, 0-d promotion, NaN ordering, complex64,
float16 / bfloat16 accumulation, integer division by zero raising).

    python bench/modules8.py [--filter NAME] [--jobs 2] [--timeout 240] [-v]
    python bench/modules8.py --case NAME      # one case in this process, with a traceback
    python bench/modules8.py --inference      # cases that train nothing, under no_grad / inference_mode

Each case runs eager and mlircap.compile side by side on the same inputs (deep copies of one
model), for `ncalls` calls (default 3: calls 0 and 1 on the same values, later calls on new
values, or on other shapes / dtypes where the case's inputs take the call index), in a child
process per worker (a signal is a crash, not the end of the run). Categories: ok (compiled,
one graph, matches eager), breaks (compiled in several graphs, matches), fallback (matches, but
some part ran eagerly), wrong, error (mlircap raised where eager did not), crash, timeout.
The runner is bench/modules5.py's.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars


CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def U(*s, dtype=torch.float32):
    return torch.rand(*s, dtype=dtype)


# ================================================================= image restoration and style
def _gauss_window(size, sigma):
    g = torch.tensor([math.exp(-(x - size // 2) ** 2 / (2 * sigma ** 2)) for x in range(size)])
    g = g / g.sum()
    return g[:, None] @ g[None, :]


class SSIMLoss(nn.Module):
    """pytorch-ssim: an 11x11 Gaussian window registered per channel, local means / variances by
    conv2d(groups=C), the SSIM map with C1 / C2 constants, 1 - mean; odd sizes on the last call."""

    def __init__(self, ch=3, size=11):
        super().__init__()
        self.ch, self.size = ch, size
        self.register_buffer("window", _gauss_window(size, 1.5).expand(ch, 1, size, size).contiguous())

    def forward(self, a, b):
        p = self.size // 2
        mu1 = F.conv2d(a, self.window, padding=p, groups=self.ch)
        mu2 = F.conv2d(b, self.window, padding=p, groups=self.ch)
        s11 = F.conv2d(a * a, self.window, padding=p, groups=self.ch) - mu1.pow(2)
        s22 = F.conv2d(b * b, self.window, padding=p, groups=self.ch) - mu2.pow(2)
        s12 = F.conv2d(a * b, self.window, padding=p, groups=self.ch) - mu1 * mu2
        C1, C2 = 0.01 ** 2, 0.03 ** 2
        m = ((2 * mu1 * mu2 + C1) * (2 * s12 + C2)) / ((mu1.pow(2) + mu2.pow(2) + C1) * (s11 + s22 + C2))
        return 1 - m.mean(), m.mean([1, 2, 3])


case("ssim_gaussian_window_grouped_conv", lambda i=0: (U(2, 3, 16 + i, 16 + 3 * i), U(2, 3, 16 + i, 16 + 3 * i)))(
    lambda: SSIMLoss())


def _gram(f):
    b, c, h, w = f.shape
    f = f.view(b, c, h * w)
    return torch.bmm(f, f.transpose(1, 2)) / (c * h * w)


class AdaINStyle(nn.Module):
    """AdaIN style transfer: content features renormalised to the style's channel mean / std (var
    + eps, unbiased std of a 1x1 map is NaN-free by eps), Gram-matrix style loss, content MSE."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1))

    @staticmethod
    def stats(f, eps=1e-5):
        n, c = f.shape[:2]
        var = f.view(n, c, -1).var(dim=2) + eps
        return f.view(n, c, -1).mean(2).view(n, c, 1, 1), var.sqrt().view(n, c, 1, 1)

    def forward(self, content, style):
        fc, fs = self.enc(content), self.enc(style)
        mc, sc = self.stats(fc)
        ms, ss = self.stats(fs)
        t = (fc - mc.expand(fc.size())) / sc.expand(fc.size()) * ss.expand(fc.size()) + ms.expand(fc.size())
        ft = self.enc(F.interpolate(t[:, :3], size=content.shape[-2:], mode="nearest"))
        style_loss = F.mse_loss(_gram(ft), _gram(fs)) + F.mse_loss(self.stats(ft)[0], ms)
        return t, F.mse_loss(ft, t), style_loss


case("adain_gram_style_content_losses", lambda: (R(2, 3, 12, 12), R(2, 3, 12, 12)))(lambda: AdaINStyle())


@fn_case("total_variation_psnr_identical_images", lambda i=0: (U(3, 3, 9, 7), U(3, 3, 9, 7)))
def total_variation_psnr_identical_images(x, y):
    """TV loss from abs differences of shifted slices, PSNR = 10 log10(1 / mse) per image with one
    pair identical (mse 0: +inf), and clamp_min(1e-10) as the guarded variant."""
    y = y.clone()
    y[0] = x[0]
    tv = (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().sum() + (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().sum()
    mse = ((x - y) ** 2).flatten(1).mean(1)
    psnr = 10 * torch.log10(1.0 / mse)
    safe = -10 * torch.log10(mse.clamp_min(1e-10))
    return tv / x.numel(), psnr, safe, torch.isinf(psnr).sum()


class SPADE(nn.Module):
    """SPADE: parameter-free BatchNorm (train), a one-hot segmentation map resized by nearest
    interpolation to the feature size, gamma / beta from a shared conv."""

    def __init__(self, c=6, labels=4):
        super().__init__()
        self.labels = labels
        self.norm = nn.BatchNorm2d(c, affine=False)
        self.shared = nn.Sequential(nn.Conv2d(labels, 16, 3, padding=1), nn.ReLU())
        self.gamma = nn.Conv2d(16, c, 3, padding=1)
        self.beta = nn.Conv2d(16, c, 3, padding=1)

    def forward(self, x, seg):
        onehot = F.one_hot(seg, self.labels).permute(0, 3, 1, 2).float()
        seg = F.interpolate(onehot, size=x.size()[2:], mode="nearest")
        a = self.shared(seg)
        return self.norm(x) * (1 + self.gamma(a)) + self.beta(a)


case("spade_onehot_interpolate_param_free_bn", lambda: (R(2, 6, 8, 8), I(0, 4, 2, 16, 16)), train=True)(lambda: SPADE())


class ModulatedConv(nn.Module):
    """StyleGAN2 modulated conv: equalised-lr weight scale, per-sample style modulation, weight
    demodulation by rsqrt(sum w^2 + 1e-8), the batch folded into groups of one conv2d, then noise
    injection with a learned strength and a leaky ReLU scaled by sqrt(2)."""

    def __init__(self, cin=4, cout=6, k=3, wdim=8):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, cout, cin, k, k))
        self.scale = 1 / math.sqrt(cin * k * k)
        self.affine = nn.Linear(wdim, cin)
        self.noise_strength = nn.Parameter(torch.full((), 0.1))
        self.pad = k // 2

    def forward(self, x, w, noise):
        b, cin, h, wd = x.shape
        style = self.affine(w).view(b, 1, cin, 1, 1) + 1
        weight = self.scale * self.weight * style
        demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
        weight = weight * demod.view(b, -1, 1, 1, 1)
        weight = weight.view(b * weight.shape[1], cin, *weight.shape[3:])
        out = F.conv2d(x.reshape(1, b * cin, h, wd), weight, padding=self.pad, groups=b)
        out = out.view(b, -1, h, wd) + noise * self.noise_strength
        return F.leaky_relu(out, 0.2) * math.sqrt(2)


case("stylegan2_modulated_demod_grouped_conv", lambda i=0: (R(2 + i, 4, 8, 8), R(2 + i, 8), R(2 + i, 1, 8, 8)))(
    lambda: ModulatedConv())


@fn_case("minibatch_stddev_pixel_norm", lambda i=0: (R(4, 6, 5, 5) * (1 + i),))
def minibatch_stddev_pixel_norm(x):
    """ProGAN / StyleGAN discriminator's minibatch stddev (group of 2, var over the group, sqrt
    + 1e-8, averaged, tiled as a channel) and the generator's pixel norm."""
    b, c, h, w = x.shape
    g = min(2, b)
    y = x.reshape(g, -1, 1, c, h, w)
    y = y - y.mean(dim=0)
    y = y.square().mean(dim=0)
    y = (y + 1e-8).sqrt()
    y = y.mean(dim=[2, 3, 4])
    y = y.reshape(-1, 1, 1, 1).repeat(g, 1, h, w)
    pn = x * (x.square().mean(dim=1, keepdim=True) + 1e-8).rsqrt()
    return torch.cat([x, y], dim=1), pn


class R1Disc(nn.Module):
    """A discriminator step with StyleGAN's R1 penalty: real images requires_grad_, grad of the
    logits' sum by autograd.grad(create_graph=True), softplus losses, backward through both."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(8 * 16, 1))

    def forward(self, real, fake):
        real = real.detach().requires_grad_(True)
        lr, lf = self.net(real), self.net(fake.detach())
        loss = F.softplus(-lr).mean() + F.softplus(lf).mean()
        g, = torch.autograd.grad(lr.sum(), real, create_graph=True)
        r1 = g.square().sum([1, 2, 3]).mean()
        (loss + 5.0 * r1).backward()
        return loss.detach(), r1.detach(), [p.grad.clone() for p in self.net.parameters()]


case("r1_penalty_grad_create_graph_backward", lambda: (R(3, 3, 8, 8), R(3, 3, 8, 8)), train=True)(lambda: R1Disc())


class MaskedConv2d(nn.Conv2d):
    """PixelCNN's masked convolution: a mask buffer (type A excludes the centre) multiplied into
    the weight in place at every forward, as the reference implementation writes it."""

    def __init__(self, mask_type, *a, **k):
        super().__init__(*a, **k)
        self.register_buffer("mask", self.weight.data.clone())
        _, _, kh, kw = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, kh // 2, kw // 2 + (mask_type == "B"):] = 0
        self.mask[:, :, kh // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


class PixelCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(MaskedConv2d("A", 1, 8, 5, padding=2), nn.ReLU(), MaskedConv2d("B", 8, 8, 3, padding=1),
                                 nn.ReLU(), nn.Conv2d(8, 4, 1))

    def forward(self, x):
        logits = self.net(x)
        tgt = (x[:, 0] * 3.999).long().clamp(0, 3)
        return logits, F.cross_entropy(logits, tgt)


case("pixelcnn_masked_conv_weight_data_inplace", lambda: (U(2, 1, 7, 7),))(lambda: PixelCNN())


class UNetUp(nn.Module):
    """A U-Net up block: transposed conv, the skip connection center-cropped to the upsampled size
    by integer arithmetic (odd sizes), concatenated; F.pad of a negative amount on the last call."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.conv = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x, skip):
        u = self.up(x)
        dy, dx = skip.size(2) - u.size(2), skip.size(3) - u.size(3)
        crop = skip[:, :, dy // 2: dy // 2 + u.size(2), dx // 2: dx // 2 + u.size(3)]
        padded = F.pad(u, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([crop, u], 1)), padded


case("unet_center_crop_skip_odd_sizes", lambda i=0: (R(2, 8, 4 + i, 5), R(2, 4, 9 + 2 * i, 11 + i)))(lambda: UNetUp())


# ===================================================================== optical flow and geometry
def _coords_grid(b, h, w):
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([xs, ys], 0).float()[None].repeat(b, 1, 1, 1)


class RAFTCorr(nn.Module):
    """RAFT's CorrBlock: all-pairs correlation by matmul / sqrt(dim), a pyramid by avg_pool2d,
    lookup at coords + a (2r+1)^2 delta grid through grid_sample (align_corners=True after
    normalising by (W-1)), then convex upsampling of a flow with a softmaxed 9-neighbour mask."""

    def __init__(self, r=1, levels=2):
        super().__init__()
        self.r, self.levels = r, levels

    def forward(self, f1, f2, flow, mask):
        b, d, h, w = f1.shape
        corr = torch.matmul(f1.view(b, d, h * w).transpose(1, 2), f2.view(b, d, h * w)) / math.sqrt(d)
        corr = corr.reshape(b * h * w, 1, h, w)
        pyr = [corr]
        for _ in range(self.levels - 1):
            pyr.append(F.avg_pool2d(pyr[-1], 2, stride=2))
        coords = (_coords_grid(b, h, w) + flow).permute(0, 2, 3, 1).reshape(b * h * w, 1, 1, 2)
        dx = torch.linspace(-self.r, self.r, 2 * self.r + 1)
        delta = torch.stack(torch.meshgrid(dx, dx, indexing="ij"), -1).view(1, 2 * self.r + 1, 2 * self.r + 1, 2)
        out = []
        for lvl, c in enumerate(pyr):
            xy = coords / 2 ** lvl + delta
            H, W = c.shape[-2:]
            xg = 2 * xy[..., 0:1] / (W - 1) - 1
            yg = 2 * xy[..., 1:2] / (H - 1) - 1
            out.append(F.grid_sample(c, torch.cat([xg, yg], -1), align_corners=True).view(b, h, w, -1))
        feats = torch.cat(out, -1).permute(0, 3, 1, 2)
        m = torch.softmax(mask.view(b, 1, 9, 2, 2, h, w), dim=2)
        up = F.unfold(2 * flow, [3, 3], padding=1).view(b, 2, 9, 1, 1, h, w)
        up = torch.sum(m * up, dim=2).permute(0, 1, 4, 2, 5, 3).reshape(b, 2, 2 * h, 2 * w)
        return feats, up


case("raft_corr_pyramid_lookup_convex_upsample", lambda: (R(2, 4, 6, 6), R(2, 4, 6, 6), R(2, 2, 6, 6), R(2, 36, 6, 6)))(
    lambda: RAFTCorr())


@fn_case("flow_backward_warp_validity_mask", lambda i=0: (R(2, 3, 7, 9), R(2, 2, 7, 9) * (2 + 4 * i)))
def flow_backward_warp_validity_mask(img, flow):
    """PWC-Net / UnFlow backward warping: base grid + flow normalised to [-1, 1] by (W-1),
    grid_sample, a validity mask from warping ones (< 0.999 zeroed) and an out-of-bounds mask."""
    b, _, h, w = img.shape
    xx = torch.arange(0, w).view(1, -1).repeat(h, 1)
    yy = torch.arange(0, h).view(-1, 1).repeat(1, w)
    grid = torch.cat((xx.view(1, 1, h, w), yy.view(1, 1, h, w)), 1).repeat(b, 1, 1, 1).float()
    vgrid = grid + flow
    vgrid[:, 0] = 2.0 * vgrid[:, 0].clone() / max(w - 1, 1) - 1.0
    vgrid[:, 1] = 2.0 * vgrid[:, 1].clone() / max(h - 1, 1) - 1.0
    vgrid = vgrid.permute(0, 2, 3, 1)
    out = F.grid_sample(img, vgrid, align_corners=True)
    mask = F.grid_sample(torch.ones_like(img), vgrid, align_corners=True)
    mask = (mask >= 0.9999).float()
    oob = (vgrid.abs() > 1).any(-1)
    return out * mask, mask, oob


@fn_case("quaternion_matrix_roundtrip_pytorch3d", lambda i=0: (R(6, 4) * (1 + 10 * i),))
def quaternion_matrix_roundtrip_pytorch3d(q):
    """pytorch3d quaternion_to_matrix (two_s = 2 / |q|^2) and matrix_to_quaternion (the
    _sqrt_positive_part of four candidates, the best chosen by argmax and one_hot), one
    quaternion the identity, one with w = 0 (the other branches)."""
    q = q.clone()
    q[0] = torch.tensor([1.0, 0, 0, 0])
    q[1] = torch.tensor([0.0, 0.6, -0.8, 0])
    r, i, j, k = torch.unbind(q, -1)
    two_s = 2.0 / (q * q).sum(-1)
    o = torch.stack((1 - two_s * (j * j + k * k), two_s * (i * j - k * r), two_s * (i * k + j * r),
                     two_s * (i * j + k * r), 1 - two_s * (i * i + k * k), two_s * (j * k - i * r),
                     two_s * (i * k - j * r), two_s * (j * k + i * r), 1 - two_s * (i * i + j * j)), -1)
    m = o.reshape(q.shape[:-1] + (3, 3))
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = torch.unbind(m.reshape(-1, 9), dim=-1)

    def sqrt_pos(x):
        ret = torch.zeros_like(x)
        pos = x > 0
        ret[pos] = torch.sqrt(x[pos])
        return ret

    q_abs = sqrt_pos(torch.stack([1.0 + m00 + m11 + m22, 1.0 + m00 - m11 - m22,
                                  1.0 - m00 + m11 - m22, 1.0 - m00 - m11 + m22], dim=-1))
    quat_by_rijk = torch.stack([
        torch.stack([q_abs[..., 0] ** 2, m21 - m12, m02 - m20, m10 - m01], dim=-1),
        torch.stack([m21 - m12, q_abs[..., 1] ** 2, m10 + m01, m02 + m20], dim=-1),
        torch.stack([m02 - m20, m10 + m01, q_abs[..., 2] ** 2, m12 + m21], dim=-1),
        torch.stack([m10 - m01, m20 + m02, m21 + m12, q_abs[..., 3] ** 2], dim=-1)], dim=-2)
    flr = torch.tensor(0.1).to(dtype=q_abs.dtype)
    cands = quat_by_rijk / (2.0 * q_abs[..., None].max(flr))
    best = cands[F.one_hot(q_abs.argmax(dim=-1), num_classes=4) > 0.5, :].reshape(-1, 4)
    return m, best * torch.sign(best[:, :1] + (best[:, :1] == 0))


@fn_case("rotation_6d_gram_schmidt_rodrigues_small_angle", lambda i=0: (R(5, 6), R(5, 3) * (0.5 + i)))
def rotation_6d_gram_schmidt_rodrigues_small_angle(d6, aa):
    """Zhou et al.'s 6D representation (normalize, subtract the projection, cross) and axis-angle
    to matrix by Rodrigues' formula with a first-order branch by torch.where for angles near zero
    (one axis-angle exactly zero, one 1e-9)."""
    a1, a2 = d6[..., :3], d6[..., 3:]
    b1 = F.normalize(a1, dim=-1)
    b2 = a2 - (b1 * a2).sum(-1, keepdim=True) * b1
    b2 = F.normalize(b2, dim=-1)
    b3 = torch.cross(b1, b2, dim=-1)
    rot6 = torch.stack((b1, b2, b3), dim=-2)
    aa = aa.clone()
    aa[0] = 0
    aa[1] = 1e-9
    theta = aa.norm(dim=-1, keepdim=True)
    axis = aa / theta.clamp_min(1e-12)
    K = torch.zeros(aa.shape[0], 3, 3)
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
    K = K - K.transpose(1, 2)
    t = theta[..., None]
    eye = torch.eye(3).expand_as(K)
    full = eye + torch.sin(t) * K + (1 - torch.cos(t)) * K @ K
    skew = torch.zeros_like(K)
    skew[:, 0, 1], skew[:, 0, 2], skew[:, 1, 2] = -aa[:, 2], aa[:, 1], -aa[:, 0]
    skew = skew - skew.transpose(1, 2)
    approx = eye + skew
    return rot6, torch.where(t < 1e-6, approx, full), torch.linalg.det(rot6)


class BackprojectProject(nn.Module):
    """monodepth2's BackprojectDepth / Project3D: a pixel grid buffer, depth * K^-1 pix (inverse
    by torch.linalg.inv), a pose 4x4 built from axis-angle + translation, projection divided by
    z + eps, normalised to [-1, 1] and resampled by grid_sample with padding_mode border."""

    def __init__(self, h=6, w=8):
        super().__init__()
        self.h, self.w = h, w
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
        self.register_buffer("pix", torch.stack([xs.flatten(), ys.flatten(), torch.ones(h * w)], 0)[None])

    def forward(self, depth, img, K, t):
        b = depth.shape[0]
        inv_K = torch.linalg.inv(K)
        cam = depth.view(b, 1, -1) * torch.matmul(inv_K[:, :3, :3], self.pix.expand(b, -1, -1))
        cam = torch.cat([cam, torch.ones(b, 1, self.h * self.w)], 1)
        T = torch.eye(4).repeat(b, 1, 1)
        T[:, :3, 3] = t
        P = torch.matmul(K, T)[:, :3, :]
        pc = torch.matmul(P, cam)
        pix = pc[:, :2, :] / (pc[:, 2:3, :] + 1e-7)
        pix = pix.view(b, 2, self.h, self.w).permute(0, 2, 3, 1)
        pix = pix / torch.tensor([self.w - 1, self.h - 1]) * 2 - 1
        return F.grid_sample(img, pix, padding_mode="border", align_corners=False), pc


def _intrinsics(b):
    K = torch.eye(4).repeat(b, 1, 1)
    K[:, 0, 0], K[:, 1, 1], K[:, 0, 2], K[:, 1, 2] = 5.0, 4.0, 4.0, 3.0
    return K


case("monodepth_backproject_project_inv_grid_sample",
     lambda: (U(2, 1, 6, 8) * 5 + 0.1, R(2, 3, 6, 8), _intrinsics(2), R(2, 3) * 0.1))(lambda: BackprojectProject())


@fn_case("kabsch_svd_det_sign_rmsd", lambda i=0: (R(2, 10, 3), R(3, 3), R(3) * (1 + i)))
def kabsch_svd_det_sign_rmsd(P, A, t):
    """Kabsch alignment: centroids, covariance, SVD, the reflection fixed by the sign of det(V U^T)
    on the last singular vector, RMSD after alignment (Q is a rotated, shifted copy of P)."""
    Rq, _ = torch.linalg.qr(A)
    Q = P @ Rq.T + t
    pc, qc = P - P.mean(1, keepdim=True), Q - Q.mean(1, keepdim=True)
    H = pc.transpose(1, 2) @ qc
    U_, S, Vh = torch.linalg.svd(H)
    d = torch.sign(torch.linalg.det(Vh.transpose(1, 2) @ U_.transpose(1, 2)))
    D = torch.diag_embed(torch.stack([torch.ones_like(d), torch.ones_like(d), d], -1))
    Rm = Vh.transpose(1, 2) @ D @ U_.transpose(1, 2)
    aligned = pc @ Rm.transpose(1, 2)
    return ((aligned - qc) ** 2).sum(-1).mean(-1).sqrt(), S


@fn_case("so3_log_acos_clamp_sin_branch", lambda i=0: (R(6, 3) * (1 + i),))
def so3_log_acos_clamp_sin_branch(w):
    """SO(3) exp by matrix_exp of the skew matrix, then log: angle by acos of the trace clamped to
    [-1, 1], the axis from the antisymmetric part over 2 sin(angle), a where for angle ~ 0
    (one rotation the identity)."""
    w = w.clone()
    w[0] = 0
    K = torch.zeros(w.shape[0], 3, 3)
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -w[:, 2], w[:, 1], -w[:, 0]
    K = K - K.transpose(1, 2)
    Rm = torch.linalg.matrix_exp(K)
    tr = Rm.diagonal(dim1=-2, dim2=-1).sum(-1)
    ang = torch.acos(((tr - 1) / 2).clamp(-1 + 1e-7, 1 - 1e-7))
    vee = torch.stack([Rm[:, 2, 1] - Rm[:, 1, 2], Rm[:, 0, 2] - Rm[:, 2, 0], Rm[:, 1, 0] - Rm[:, 0, 1]], -1)
    s = torch.sin(ang)[:, None]
    logw = torch.where(s.abs() < 1e-6, 0.5 * vee, vee * ang[:, None] / (2 * s))
    return Rm, ang, logw


@fn_case("homography_warp_perspective_normalized", lambda i=0: (R(2, 3, 8, 10), torch.eye(3) + R(2, 3, 3) * 0.05 * (1 + i)))
def homography_warp_perspective_normalized(img, Hm):
    """kornia-style warp_perspective: a homogeneous pixel grid transformed by inv(H), divided by w
    with a where guarding |w| < eps, normalised by the size, grid_sample bilinear zeros."""
    b, _, h, w = img.shape
    ys, xs = torch.meshgrid(torch.linspace(0, h - 1, h), torch.linspace(0, w - 1, w), indexing="ij")
    grid = torch.stack([xs, ys, torch.ones_like(xs)], -1).view(1, -1, 3)
    src = grid @ torch.linalg.inv(Hm).transpose(1, 2)
    z = src[..., 2:]
    scale = torch.where(z.abs() > 1e-8, 1.0 / z, torch.ones_like(z))
    xy = src[..., :2] * scale
    xy = xy / torch.tensor([w - 1, h - 1]) * 2 - 1
    return F.grid_sample(img, xy.view(b, h, w, 2), align_corners=True), xy


@fn_case("epipolar_sampson_distance_homogeneous_pad", lambda i=0: (R(2, 7, 2) * 10, R(2, 7, 2) * 10, R(2, 3, 3)))
def epipolar_sampson_distance_homogeneous_pad(x1, x2, Fm):
    """Sampson epipolar distance: points made homogeneous by F.pad(value=1), F x1 and F^T x2 line
    terms, the squared residual over the sum of squared line coefficients."""
    p1, p2 = F.pad(x1, [0, 1], "constant", 1.0), F.pad(x2, [0, 1], "constant", 1.0)
    Fx1 = p1 @ Fm.transpose(-2, -1)
    Ftx2 = p2 @ Fm
    num = (p2 * Fx1).sum(-1).pow(2)
    den = Fx1[..., 0] ** 2 + Fx1[..., 1] ** 2 + Ftx2[..., 0] ** 2 + Ftx2[..., 1] ** 2
    return num / den, (p2 * Fx1).sum(-1).abs()


@fn_case("edge_aware_disparity_smoothness", lambda i=0: (U(2, 1, 6 + i, 9) + 0.01, U(2, 3, 6 + i, 9)))
def edge_aware_disparity_smoothness(disp, img):
    """monodepth2's get_smooth_loss on a mean-normalised disparity: gradients of disparity
    weighted by exp(-mean |grad img|), plus SSIM-free L1 photometric error on shifted images."""
    disp = disp / (disp.mean(2, True).mean(3, True) + 1e-7)
    gx = torch.abs(disp[:, :, :, :-1] - disp[:, :, :, 1:])
    gy = torch.abs(disp[:, :, :-1, :] - disp[:, :, 1:, :])
    ix = torch.mean(torch.abs(img[:, :, :, :-1] - img[:, :, :, 1:]), 1, keepdim=True)
    iy = torch.mean(torch.abs(img[:, :, :-1, :] - img[:, :, 1:, :]), 1, keepdim=True)
    gx = gx * torch.exp(-ix)
    gy = gy * torch.exp(-iy)
    return gx.mean() + gy.mean(), torch.abs(img[..., 1:] - img[..., :-1]).mean(1, True)


# ================================================================================ pose decoding
@fn_case("heatmap_argmax_quarter_offset_decode", lambda i=0: (R(2, 5, 8, 6 + i),))
def heatmap_argmax_quarter_offset_decode(hm):
    """HRNet get_max_preds + quarter offset: argmax over flattened heatmaps, coordinates by % and
    floor division, maxvals <= 0 masking the coords, a 0.25 shift toward the larger neighbour
    through gathers of clamped indices."""
    hm = hm.clone()
    hm[0, 0] = -1.0
    b, j, h, w = hm.shape
    flat = hm.reshape(b, j, -1)
    maxvals, idx = flat.max(2, keepdim=True)
    preds = idx.repeat(1, 1, 2).float()
    preds[:, :, 0] = preds[:, :, 0] % w
    preds[:, :, 1] = torch.floor(preds[:, :, 1] / w)
    mask = (maxvals > 0.0).repeat(1, 1, 2).float()
    preds = preds * mask
    px, py = preds[..., 0].long(), preds[..., 1].long()
    right = flat.gather(2, (py * w + (px + 1).clamp(max=w - 1))[..., None])[..., 0]
    left = flat.gather(2, (py * w + (px - 1).clamp(min=0))[..., None])[..., 0]
    down = flat.gather(2, ((py + 1).clamp(max=h - 1) * w + px)[..., None])[..., 0]
    up = flat.gather(2, ((py - 1).clamp(min=0) * w + px)[..., None])[..., 0]
    off = torch.stack([torch.sign(right - left), torch.sign(down - up)], -1) * 0.25
    return preds + off * mask, maxvals


@fn_case("oks_keypoint_similarity_visibility", lambda i=0: (R(4, 17, 2) * 20, R(3, 17, 2) * 20, I(0, 3, 3, 17), U(3) * 400 + 1))
def oks_keypoint_similarity_visibility(pred, gt, vis, area):
    """COCO OKS between every prediction and ground truth: per-joint sigmas, squared distances
    over 2 s^2 (2 sigma)^2, exp(-e) averaged over visible joints (one gt with none visible:
    count clamped to 1)."""
    vis = vis.clone()
    vis[0] = 0
    sigmas = torch.tensor([.26, .25, .25, .35, .35, .79, .79, .72, .72, .62, .62, 1.07, 1.07, .87, .87, .89, .89]) / 10.0
    d2 = ((pred[:, None] - gt[None]) ** 2).sum(-1)
    e = d2 / ((2 * sigmas) ** 2 * 2 * area[None, :, None] + torch.finfo(torch.float32).eps)
    v = (vis > 0).float()[None]
    oks = (torch.exp(-e) * v).sum(-1) / v.sum(-1).clamp(min=1)
    return oks, oks.argmax(1)


class OHKMLoss(nn.Module):
    """Simple Baselines' JointsOHKMMSELoss: per-joint MSE weighted by target_weight, the top-k
    hardest joints per sample by topk(sorted=False), gathered and averaged."""

    def __init__(self, topk=4):
        super().__init__()
        self.topk = topk

    def forward(self, out, tgt, tw):
        b, j = out.shape[:2]
        po, pt = out.reshape(b, j, -1), tgt.reshape(b, j, -1)
        loss = 0.5 * ((po * tw - pt * tw) ** 2).mean(-1)
        _, idx = torch.topk(loss, k=self.topk, dim=1, sorted=False)
        return torch.gather(loss, 1, idx).sum(1).mean() / self.topk, loss


case("ohkm_topk_joints_weighted_mse", lambda: (R(3, 8, 5, 4), R(3, 8, 5, 4), U(3, 8, 1)))(lambda: OHKMLoss())


# ============================================================================ attention variants
class RelMultiHeadAttn(nn.Module):
    """Transformer-XL relative attention: sinusoid positions from klen-1 down to 0, content term
    with r_w_bias, position term with r_r_bias shifted by _rel_shift (zero pad a column, view as
    (k+1, q), drop the first row), a causal mask by triu(1 + mlen), memory concatenated."""

    def __init__(self, d=8, h=2):
        super().__init__()
        self.h, self.dh = h, d // h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.r_net = nn.Linear(d, d, bias=False)
        self.r_w_bias = nn.Parameter(torch.randn(h, d // h) * 0.1)
        self.r_r_bias = nn.Parameter(torch.randn(h, d // h) * 0.1)
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, d, 2.0) / d)))

    @staticmethod
    def _rel_shift(x):
        zero_pad = torch.zeros((x.size(0), 1) + x.size()[2:], device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=1)
        x_padded = x_padded.view(x.size(1) + 1, x.size(0), *x.size()[2:])
        return x_padded[1:].view_as(x)

    def forward(self, w, mems):
        qlen, bsz = w.shape[:2]
        cat = torch.cat([mems, w], 0)
        klen, mlen = cat.size(0), mems.size(0)
        pos_seq = torch.arange(klen - 1, -1, -1.0)
        sinusoid = torch.ger(pos_seq, self.inv_freq)
        pos_emb = torch.cat([sinusoid.sin(), sinusoid.cos()], -1)[:, None, :]
        heads = self.qkv(cat)
        q, k, v = heads.chunk(3, -1)
        q = q[-qlen:].view(qlen, bsz, self.h, self.dh)
        k, v = k.view(klen, bsz, self.h, self.dh), v.view(klen, bsz, self.h, self.dh)
        rk = self.r_net(pos_emb).view(klen, self.h, self.dh)
        ac = torch.einsum("ibnd,jbnd->ijbn", (q + self.r_w_bias, k))
        bd = self._rel_shift(torch.einsum("ibnd,jnd->ijbn", (q + self.r_r_bias, rk)))
        score = (ac + bd) * (1 / self.dh ** 0.5)
        mask = torch.triu(torch.ones(qlen, klen), diagonal=1 + mlen).bool()[:, :, None, None]
        score = score.float().masked_fill(mask, -float("inf"))
        prob = F.softmax(score, dim=1)
        return torch.einsum("ijbn,jbnd->ibnd", (prob, v)).reshape(qlen, bsz, -1), bd


case("transformer_xl_rel_shift_memory_mask", lambda i=0: (R(5, 2, 8), R(3 + i, 2, 8)))(lambda: RelMultiHeadAttn())


class FAVORPlus(nn.Module):
    """Performer FAVOR+: orthogonal random features (QR of Gaussian blocks at init, a buffer),
    positive features exp(wx - |x|^2 / 2 - max) with the stabiliser taken per row for queries and
    over everything for keys, bidirectional and causal (cumsum of outer products) linear attention."""

    def __init__(self, d=8, m=12):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        blocks = [torch.linalg.qr(torch.randn(d, d, generator=g))[0].T for _ in range(m // d + 1)]
        w = torch.cat(blocks, 0)[:m]
        w = w * torch.randn(m, d, generator=g).norm(dim=1, keepdim=True)
        self.register_buffer("proj", w)
        self.d = d

    def feat(self, x, is_query):
        x = x * self.d ** -0.25
        wx = x @ self.proj.T
        sq = (x ** 2).sum(-1, keepdim=True) / 2
        stab = wx.amax(-1, keepdim=True) if is_query else wx.amax(dim=(-1, -2), keepdim=True)
        return (torch.exp(wx - sq - stab) + 1e-4) / math.sqrt(self.proj.shape[0])

    def forward(self, q, k, v):
        qp, kp = self.feat(q, True), self.feat(k, False)
        kv = torch.einsum("bnm,bnd->bmd", kp, v)
        norm = 1 / (qp @ kp.sum(1)[..., None])
        out = torch.einsum("bnm,bmd->bnd", qp, kv) * norm
        kvc = torch.einsum("bnm,bnd->bnmd", kp, v).cumsum(1)
        den = (qp * kp.cumsum(1)).sum(-1, keepdim=True)
        causal = torch.einsum("bnm,bnmd->bnd", qp, kvc) / den
        return out, causal


case("performer_favor_orthogonal_features_causal", lambda i=0: (R(2, 7 + i, 8), R(2, 7 + i, 8), R(2, 7 + i, 8)))(
    lambda: FAVORPlus())


class LSHAttention(nn.Module):
    """Reformer LSH bucketing: random rotations (a buffer), buckets by argmax over cat([r, -r]),
    offsets per hash round, a stable sort of bucket * seqlen + position, chunked attention inside
    the sorted order with a self-mask of -1e5, then undone by the argsort of the sort indices."""

    def __init__(self, d=8, buckets=4, hashes=2, chunk=4):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.register_buffer("rot", torch.randn(d, hashes, buckets // 2, generator=g))
        self.buckets, self.hashes, self.chunk = buckets, hashes, chunk

    def forward(self, qk, v):
        b, n, d = qk.shape
        rotated = torch.einsum("btf,fhi->bhti", qk, self.rot)
        rotated = torch.cat([rotated, -rotated], dim=-1)
        buckets = torch.argmax(rotated, dim=-1)
        offsets = (torch.arange(self.hashes) * self.buckets).view(1, -1, 1)
        buckets = (buckets + offsets).reshape(b, -1)
        ticker = torch.arange(self.hashes * n).unsqueeze(0).expand_as(buckets)
        key = n * buckets + (ticker % n)
        _, sticker = key.sort(dim=-1, stable=True)
        _, undo = sticker.sort(dim=-1)
        st = sticker % n
        sqk = qk.gather(1, st[..., None].expand(-1, -1, d))
        sv = v.gather(1, st[..., None].expand(-1, -1, d))
        cq = sqk.view(b, -1, self.chunk, d)
        ck = F.normalize(cq, dim=-1)
        dots = torch.einsum("bcie,bcje->bcij", cq, ck) * d ** -0.5
        self_mask = st.view(b, -1, self.chunk)[..., :, None] == st.view(b, -1, self.chunk)[..., None, :]
        dots = dots.masked_fill(self_mask, -1e5)
        lse = torch.logsumexp(dots, -1, keepdim=True)
        out = torch.einsum("bcij,bcje->bcie", torch.exp(dots - lse), sv.view(b, -1, self.chunk, d)).reshape(b, -1, d)
        out = out.gather(1, undo[..., None].expand(-1, -1, d)).view(b, self.hashes, n, d)
        lse = lse.reshape(b, -1).gather(1, undo).view(b, self.hashes, n, 1)
        probs = torch.exp(lse - torch.logsumexp(lse, dim=1, keepdim=True))
        return (out * probs).sum(1), buckets


case("reformer_lsh_buckets_stable_sort_undo", lambda: (R(2, 8, 8), R(2, 8, 8)))(lambda: LSHAttention())


class Linformer(nn.Module):
    """Linformer: keys / values projected along the sequence by E / F sliced to the call's
    sequence length (shorter on later calls), then softmax attention."""

    def __init__(self, d=8, max_len=12, k=4):
        super().__init__()
        self.E = nn.Parameter(torch.randn(max_len, k) / math.sqrt(k))
        self.F = nn.Parameter(torch.randn(max_len, k) / math.sqrt(k))
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        k = torch.einsum("bnd,nk->bkd", k, self.E[:n])
        v = torch.einsum("bnd,nk->bkd", v, self.F[:n])
        a = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
        return a @ v


case("linformer_seq_projection_sliced_by_length", lambda i=0: (R(2, 12 - 3 * i, 8),))(lambda: Linformer())


@fn_case("longformer_sliding_band_global_token", lambda i=0: (R(2, 9 + i, 4), R(2, 9 + i, 4), R(2, 9 + i, 4)))
def longformer_sliding_band_global_token(q, k, v):
    """Sliding-window attention written with unfold: keys padded by w on both sides, windows by
    Tensor.unfold, out-of-range slots masked by a band validity mask, token 0 global (attends
    everywhere and is attended by all)."""
    w = 2
    b, n, d = q.shape
    kp = F.pad(k, (0, 0, w, w))
    vp = F.pad(v, (0, 0, w, w))
    kw = kp.unfold(1, 2 * w + 1, 1).transpose(-1, -2)
    vw = vp.unfold(1, 2 * w + 1, 1).transpose(-1, -2)
    s = (q[:, :, None, :] * kw).sum(-1) / math.sqrt(d)
    pos = torch.arange(n)[:, None] + torch.arange(-w, w + 1)[None]
    valid = (pos >= 0) & (pos < n)
    s = s.masked_fill(~valid, float("-inf"))
    g = (q * k[:, :1]).sum(-1, keepdim=True) / math.sqrt(d)
    s_all = torch.cat([g, s], -1)
    p = s_all.softmax(-1)
    local = p[:, :, :1] * v[:, :1] + (p[:, :, 1:, None] * vw).sum(2)
    glob = (q[:, :1] @ k.transpose(1, 2) / math.sqrt(d)).softmax(-1) @ v
    return torch.cat([glob, local[:, 1:]], 1)


class Nystrom(nn.Module):
    """Nystromformer: landmarks as segment means (reshape + mean), softmax kernels, the
    Moore-Penrose pseudo-inverse by 6 Newton iterations (Z0 = K^T / (max col sum * max row sum))."""

    def __init__(self, m=3, iters=6):
        super().__init__()
        self.m, self.iters = m, iters

    def pinv(self, K):
        I_ = torch.eye(K.size(-1))
        Kabs = K.abs()
        Z = K.transpose(-1, -2) / (torch.max(Kabs.sum(-2)) * torch.max(Kabs.sum(-1)))
        for _ in range(self.iters):
            KZ = K @ Z
            Z = 0.25 * Z @ (13 * I_ - KZ @ (15 * I_ - KZ @ (7 * I_ - KZ)))
        return Z

    def forward(self, q, k, v):
        b, n, d = q.shape
        q = q / d ** 0.25
        k = k / d ** 0.25
        ql = q.reshape(b, self.m, n // self.m, d).mean(-2)
        kl = k.reshape(b, self.m, n // self.m, d).mean(-2)
        k1 = (q @ kl.transpose(-1, -2)).softmax(-1)
        k2 = (ql @ kl.transpose(-1, -2)).softmax(-1)
        k3 = (ql @ k.transpose(-1, -2)).softmax(-1)
        return (k1 @ self.pinv(k2)) @ (k3 @ v)


case("nystromformer_landmarks_newton_pinv", lambda i=0: (R(2, 9 + 3 * i, 4), R(2, 9 + 3 * i, 4), R(2, 9 + 3 * i, 4)))(
    lambda: Nystrom())


class RWKVTimeMix(nn.Module):
    """RWKV-4 time mixing: token shift by nn.ZeroPad2d((0, 0, 1, -1)) (a negative pad crops),
    learned mixes, and the WKV recurrence in its numerically stable form (running max pp, aa / bb
    rescaled by exp(p - max)) as a Python loop over time."""

    def __init__(self, d=6):
        super().__init__()
        self.shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_decay = nn.Parameter(torch.linspace(-2, 1, d))
        self.time_first = nn.Parameter(torch.full((d,), math.log(0.3)))
        self.mix_k = nn.Parameter(torch.rand(1, 1, d))
        self.mix_v = nn.Parameter(torch.rand(1, 1, d))
        self.mix_r = nn.Parameter(torch.rand(1, 1, d))
        self.key, self.value, self.recept = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        xx = self.shift(x)
        k = self.key(x * self.mix_k + xx * (1 - self.mix_k))
        v = self.value(x * self.mix_v + xx * (1 - self.mix_v))
        r = torch.sigmoid(self.recept(x * self.mix_r + xx * (1 - self.mix_r)))
        w = -torch.exp(self.time_decay)
        u = self.time_first
        aa = torch.zeros_like(k[:, 0])
        bb = torch.zeros_like(k[:, 0])
        pp = torch.full_like(k[:, 0], -1e38)
        outs = []
        for t in range(x.shape[1]):
            kt, vt = k[:, t], v[:, t]
            ww = u + kt
            p = torch.maximum(pp, ww)
            e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
            outs.append((e1 * aa + e2 * vt) / (e1 * bb + e2))
            ww = pp + w
            p = torch.maximum(ww, kt)
            e1, e2 = torch.exp(ww - p), torch.exp(kt - p)
            aa, bb, pp = e1 * aa + e2 * vt, e1 * bb + e2, p
        return self.out(r * torch.stack(outs, 1)), pp


case("rwkv4_wkv_stable_loop_negative_zeropad", lambda i=0: (R(2, 5 + i, 6) * (1 + 3 * i),))(lambda: RWKVTimeMix())


@fn_case("tome_bipartite_soft_matching_scatter_mean", lambda i=0: (R(2, 10 + 2 * i, 6), U(2, 10 + 2 * i, 1) + 0.5))
def tome_bipartite_soft_matching_scatter_mean(x, size):
    """Token Merging (ToMe): alternate tokens as sources / destinations, cosine similarity,
    node_max / node_idx, argsort descending, the r most similar sources merged into their
    destinations by scatter_reduce(mean, include_self=True), size-weighted (proportional attn)."""
    r = 3
    metric = x / x.norm(dim=-1, keepdim=True)
    a, b_ = metric[..., ::2, :], metric[..., 1::2, :]
    scores = a @ b_.transpose(-1, -2)
    node_max, node_idx = scores.max(dim=-1)
    edge_idx = node_max.argsort(dim=-1, descending=True)[..., None]
    unm_idx, src_idx = edge_idx[..., r:, :], edge_idx[..., :r, :]
    dst_idx = node_idx[..., None].gather(dim=-2, index=src_idx)

    def merge(t, mode):
        src, dst = t[..., ::2, :], t[..., 1::2, :]
        n, t1, c = src.shape
        unm = src.gather(dim=-2, index=unm_idx.expand(n, t1 - r, c))
        src = src.gather(dim=-2, index=src_idx.expand(n, r, c))
        dst = dst.scatter_reduce(-2, dst_idx.expand(n, r, c), src, reduce=mode)
        return torch.cat([unm, dst], dim=1)

    xs = merge(x * size, "sum")
    s = merge(size, "sum")
    return xs / s, s, merge(x, "mean"), merge(x, "amax")


class GQAOffsetCausal(nn.Module):
    """Llama-style grouped-query attention decoding a chunk after a cache: repeat_kv by expand +
    reshape, the cache concatenated, a causal mask with the past offset built by triu(diagonal=
    past + 1) and passed as attn_mask to scaled_dot_product_attention."""

    def __init__(self, d=16, h=4, kvh=2):
        super().__init__()
        self.h, self.kvh, self.dh = h, kvh, d // h
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * kvh * (d // h), bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x, pk, pv):
        b, n, _ = x.shape
        past = pk.shape[2]
        q = self.q(x).view(b, n, self.h, self.dh).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kvh, self.dh).permute(2, 0, 3, 1, 4)
        k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
        rep = self.h // self.kvh

        def repeat_kv(t):
            bb, kh, s, dh = t.shape
            return t[:, :, None, :, :].expand(bb, kh, rep, s, dh).reshape(bb, kh * rep, s, dh)

        mask = torch.ones(n, past + n, dtype=torch.bool).triu(diagonal=past + 1)
        out = F.scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), attn_mask=~mask)
        return self.o(out.transpose(1, 2).reshape(b, n, -1)), k, v


case("gqa_repeat_kv_offset_causal_sdpa", lambda i=0: (R(2, 3 - i if i < 2 else 1, 16), R(2, 2, 4 + i, 4), R(2, 2, 4 + i, 4)))(
    lambda: GQAOffsetCausal())


class HFExtendedMask(nn.Module):
    """BERT's get_extended_attention_mask: (1.0 - mask) * torch.finfo(dtype).min added to the
    scores, one sequence entirely padded (softmax of finite min values is uniform, not NaN), plus
    a second additive bias of finfo.min (the sum overflows to -inf)."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, am):
        am = am.clone()
        am[0] = 0
        ext = am[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * torch.finfo(x.dtype).min
        q, k, v = self.qkv(x).chunk(3, -1)
        s = q[:, None] @ k[:, None].transpose(-1, -2) / math.sqrt(q.shape[-1]) + ext
        s2 = s + ext
        return s.softmax(-1) @ v[:, None], s2.softmax(-1), torch.isinf(s2).sum()


case("hf_extended_mask_finfo_min_padded_row", lambda: (R(3, 5, 8), I(0, 2, 3, 5)))(lambda: HFExtendedMask())


class T5RMSNormGatedGelu(nn.Module):
    """T5LayerNorm on bf16 hidden states: variance computed in float32, rsqrt, cast back to the
    weight's dtype; then T5's gated-gelu FF with the tanh approximation (gelu_new) in bf16."""

    def __init__(self, d=16):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.wi0, self.wi1 = nn.Linear(d, 24, bias=False), nn.Linear(d, 24, bias=False)
        self.wo = nn.Linear(24, d, bias=False)

    def forward(self, h):
        var = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + 1e-6)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            h = h.to(self.weight.dtype)
        h = self.weight * h
        g = self.wi0(h)
        g = 0.5 * g * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * torch.pow(g, 3.0))))
        return self.wo(g * self.wi1(h)), h


case("t5_rmsnorm_fp32_variance_bf16_gated_gelu", lambda: (R(2, 5, 16, dtype=torch.bfloat16) * 4,))(
    lambda: T5RMSNormGatedGelu().to(torch.bfloat16))


@fn_case("informer_probsparse_topk_queries_scatter", lambda i=0: (R(2, 12, 4), R(2, 12, 4), R(2, 12, 4)))
def informer_probsparse_topk_queries_scatter(q, k, v):
    """Informer ProbSparse attention: keys sampled by a fixed generator's randint, the sparsity
    measure max - mean, top-u queries by topk, their attention scattered over a cumsum context
    (the causal 'lazy' queries' initial values)."""
    b, L, d = q.shape
    g = torch.Generator().manual_seed(7)
    u = 4
    idx = torch.randint(L, (L, u), generator=g)
    k_sample = k[:, idx, :]
    qk_s = (q[:, :, None, :] * k_sample).sum(-1)
    M = qk_s.max(-1)[0] - qk_s.sum(-1) / L
    top = M.topk(u, sorted=False)[1]
    q_red = q.gather(1, top[..., None].expand(-1, -1, d))
    scores = q_red @ k.transpose(-1, -2) / math.sqrt(d)
    mask = torch.ones(L, L, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask[top], -math.inf)
    attn = scores.softmax(-1)
    ctx = v.cumsum(dim=1)
    ctx = ctx.scatter(1, top[..., None].expand(-1, -1, d), attn @ v)
    return ctx, top.sort(-1)[0]


# ======================================================================================== speech
class ConformerConv(nn.Module):
    """Conformer convolution module: LayerNorm, pointwise conv to 2C, GLU over channels, a
    depthwise conv1d with 'same' padding, BatchNorm1d (train), SiLU, pointwise conv; padded frames
    zeroed by masked_fill before the depthwise conv (a length-mask from lengths)."""

    def __init__(self, c=8, k=5):
        super().__init__()
        self.ln = nn.LayerNorm(c)
        self.pw1 = nn.Conv1d(c, 2 * c, 1)
        self.dw = nn.Conv1d(c, c, k, padding=(k - 1) // 2, groups=c)
        self.bn = nn.BatchNorm1d(c)
        self.pw2 = nn.Conv1d(c, c, 1)

    def forward(self, x, lengths):
        pad = torch.arange(x.shape[1])[None] >= lengths[:, None]
        h = self.ln(x).transpose(1, 2)
        h = F.glu(self.pw1(h), dim=1)
        h = h.masked_fill(pad[:, None, :], 0.0)
        h = F.silu(self.bn(self.dw(h)))
        return x + self.pw2(h).transpose(1, 2)


case("conformer_conv_module_glu_depthwise_bn_mask", lambda i=0: (R(3, 10 + i, 8), torch.tensor([10 + i, 6, 1])),
     train=True)(lambda: ConformerConv())


@fn_case("griffin_lim_stft_istft_complex", lambda i=0: (U(65, 9) + 0.01,))
def griffin_lim_stft_istft_complex(mag):
    """torchaudio's Griffin-Lim with a fixed start phase: istft of magnitude * phase, stft of the
    signal, phase = spec / abs().clamp_min(1e-16), momentum term, 3 iterations; complex tensors
    in and out of stft / istft with a Hann window."""
    n_fft, hop = 128, 32
    win = torch.hann_window(n_fft)
    ang = torch.polar(torch.ones_like(mag), torch.linspace(0, 3, mag.numel()).view_as(mag))
    tprev = torch.zeros_like(ang)
    for _ in range(3):
        inv = torch.istft(mag * ang, n_fft=n_fft, hop_length=hop, window=win, length=hop * (mag.shape[1] - 1))
        rebuilt = torch.stft(inv, n_fft=n_fft, hop_length=hop, window=win, return_complex=True)
        ang = rebuilt - tprev * (0.99 / (1 + 0.99))
        ang = ang / ang.abs().clamp_min(1e-16)
        tprev = rebuilt
    wav = torch.istft(mag * ang, n_fft=n_fft, hop_length=hop, window=win, length=hop * (mag.shape[1] - 1))
    return wav, torch.view_as_real(ang)


@fn_case("autoformer_autocorrelation_rfft_delay_gather", lambda i=0: (R(2, 16, 3), R(2, 16, 3), R(2, 16, 3)))
def autoformer_autocorrelation_rfft_delay_gather(q, k, v):
    """Autoformer's AutoCorrelation: period correlations by rfft(q) * conj(rfft(k)) and irfft(n=L),
    top-k lags from the batch-mean, softmaxed weights, time-delay aggregation by gathering a
    doubled value series at (arange + delay)."""
    b, L, c = q.shape
    qf = torch.fft.rfft(q.permute(0, 2, 1).contiguous(), dim=-1)
    kf = torch.fft.rfft(k.permute(0, 2, 1).contiguous(), dim=-1)
    corr = torch.fft.irfft(qf * torch.conj(kf), n=L, dim=-1)
    top_k = int(1 * math.log(L))
    mean_value = torch.mean(corr, dim=1)
    weights, delay = torch.topk(mean_value, top_k, dim=-1)
    tmp_corr = torch.softmax(weights, dim=-1)
    vv = v.permute(0, 2, 1)
    tmp_values = vv.repeat(1, 1, 2)
    init_index = torch.arange(L)[None, None].repeat(b, c, 1)
    agg = torch.zeros_like(vv)
    for i in range(top_k):
        tmp_delay = init_index + delay[:, i][:, None, None]
        pattern = torch.gather(tmp_values, dim=-1, index=tmp_delay)
        agg = agg + pattern * tmp_corr[:, i][:, None, None]
    return agg.permute(0, 2, 1), corr


@fn_case("vad_energy_zero_crossing_hangover", lambda i=0: (R(2, 400 + 37 * i) * torch.linspace(0, 1, 400 + 37 * i),))
def vad_energy_zero_crossing_hangover(wav):
    """An energy / zero-crossing voice activity detector: frames by unfold(25 ms, 10 ms), log10
    energy clamped, zero crossings by sign changes of the diff, thresholds relative to the max, a
    hangover by max_pool1d over decisions (bool -> float -> bool)."""
    frames = wav.unfold(-1, 40, 16)
    energy = 10 * torch.log10(frames.pow(2).mean(-1).clamp_min(1e-10))
    zcr = (torch.sign(frames[..., 1:]) != torch.sign(frames[..., :-1])).float().mean(-1)
    speech = (energy > energy.amax(-1, keepdim=True) - 20) & (zcr < 0.6)
    hang = F.max_pool1d(speech.float()[:, None], 5, stride=1, padding=2)[:, 0] > 0
    return energy, zcr, hang, hang.sum(-1)


# ========================================================================== generative sampling
class EDMDenoiser(nn.Module):
    """Karras et al. EDM: sigmas from a rho=7 Python schedule, c_skip / c_out / c_in / c_noise
    preconditioning around a small net, Heun's second-order steps with the last step Euler."""

    def __init__(self, sigma_data=0.5):
        super().__init__()
        self.sd = sigma_data
        self.net = nn.Sequential(nn.Linear(5, 16), nn.SiLU(), nn.Linear(16, 4))

    def denoise(self, x, sigma):
        c_skip = self.sd ** 2 / (sigma ** 2 + self.sd ** 2)
        c_out = sigma * self.sd / (sigma ** 2 + self.sd ** 2).sqrt()
        c_in = 1 / (self.sd ** 2 + sigma ** 2).sqrt()
        c_noise = sigma.log() / 4
        f = self.net(torch.cat([c_in * x, c_noise.expand(x.shape[0], 1)], -1))
        return c_skip * x + c_out * f

    def forward(self, x, steps: int):
        smin, smax, rho = 0.002, 80.0, 7.0
        i = torch.arange(steps, dtype=torch.float64)
        t = (smax ** (1 / rho) + i / (steps - 1) * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
        t = torch.cat([t, torch.zeros(1, dtype=torch.float64)]).float()
        x = x * t[0]
        for j in range(steps):
            tc, tn = t[j], t[j + 1]
            d = (x - self.denoise(x, tc)) / tc
            xn = x + (tn - tc) * d
            if j < steps - 1:
                d2 = (xn - self.denoise(xn, tn)) / tn
                xn = x + (tn - tc) * (0.5 * d + 0.5 * d2)
            x = xn
        return x


case("edm_preconditioning_heun_sampler", lambda i=0: (R(3, 4), 4 + (i == 2)))(lambda: EDMDenoiser())


class DPMSolverPP(nn.Module):
    """DPM-Solver++(2M): lambda = log alpha - log sigma from a float64 alphas_cumprod, a Python
    list of the previous data predictions, first-order on the first step, second order after."""

    def __init__(self):
        super().__init__()
        betas = torch.linspace(1e-4, 0.02, 100, dtype=torch.float64)
        self.register_buffer("ac", torch.cumprod(1 - betas, 0))
        self.net = nn.Linear(4, 4)

    def forward(self, x, timesteps: list):
        alpha = self.ac.sqrt()
        sigma = (1 - self.ac).sqrt()
        lam = alpha.log() - sigma.log()
        hist = []
        for n, t in enumerate(timesteps):
            eps = self.net(x)
            x0 = (x - sigma[t].float() * eps) / alpha[t].float()
            hist.append(x0)
            if n + 1 == len(timesteps):
                return x0, len(hist)
            s = timesteps[n + 1]
            h = (lam[s] - lam[t]).float()
            if n == 0:
                D = hist[-1]
            else:
                h0 = (lam[t] - lam[timesteps[n - 1]]).float()
                r = h0 / h
                D = hist[-1] + 0.5 / r * (hist[-1] - hist[-2])
            x = (sigma[s] / sigma[t]).float() * x - alpha[s].float() * torch.expm1(-h) * D
        return x, len(hist)


case("dpm_solver_pp_2m_history_list", lambda i=0: (R(3, 4), [99, 70, 40, 10, 0] if i < 2 else [99, 50, 0]))(
    lambda: DPMSolverPP())


@fn_case("cfg_guidance_rescale_std_ratio", lambda i=0: (R(4, 3, 5, 5), 7.5 - 3 * i, 0.7))
def cfg_guidance_rescale_std_ratio(noise, scale: float, phi: float):
    """diffusers' classifier-free guidance with rescale_noise_cfg: chunk into (uncond, text),
    guided = u + s (t - u), std over all non-batch dims (keepdim, list of dims from range),
    rescaled = guided * std_text / std_cfg, mixed with phi."""
    u, t = noise.chunk(2)
    g = u + scale * (t - u)
    std_text = t.std(dim=list(range(1, t.ndim)), keepdim=True)
    std_cfg = g.std(dim=list(range(1, g.ndim)), keepdim=True)
    resc = g * (std_text / std_cfg)
    return phi * resc + (1 - phi) * g


class EulerAncestral(nn.Module):
    """k-diffusion sample_euler_ancestral: sigma_up / sigma_down from consecutive sigmas, noise by
    torch.randn with an explicit generator (seeded in forward), a final step to sigma 0 without
    noise."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x, sigmas):
        g = torch.Generator().manual_seed(11)
        x = x * sigmas[0]
        for j in range(len(sigmas) - 1):
            denoised = x - sigmas[j] * self.net(x)
            s_up = min(sigmas[j + 1], (sigmas[j + 1] ** 2 * (sigmas[j] ** 2 - sigmas[j + 1] ** 2) / sigmas[j] ** 2) ** 0.5)
            s_down = (sigmas[j + 1] ** 2 - s_up ** 2) ** 0.5
            d = (x - denoised) / sigmas[j]
            x = x + d * (s_down - sigmas[j])
            if sigmas[j + 1] > 0:
                x = x + torch.randn(x.shape, generator=g) * s_up
        return x


case("euler_ancestral_generator_noise_python_sigmas", lambda i=0: (R(2, 4), [10.0, 3.0, 1.0, 0.3, 0.0][i:]))(
    lambda: EulerAncestral())


class DDPMPosterior(nn.Module):
    """improved-diffusion's posterior: float64 schedule, posterior variance with its first entry
    replaced for the log (torch.cat of [1], [1:]), _extract_into_tensor by indexing + expand, x0
    predicted from eps and clipped to [-1, 1], posterior mean and log variance."""

    def __init__(self, T=50):
        super().__init__()
        b = torch.linspace(1e-4, 0.05, T, dtype=torch.float64)
        ac = torch.cumprod(1 - b, 0)
        acp = torch.cat([torch.ones(1, dtype=torch.float64), ac[:-1]])
        pv = b * (1 - acp) / (1 - ac)
        self.register_buffer("logvar", torch.log(torch.cat([pv[1:2], pv[1:]])))
        self.register_buffer("c1", b * acp.sqrt() / (1 - ac))
        self.register_buffer("c2", (1 - acp) * (1 - b).sqrt() / (1 - ac))
        self.register_buffer("sr", (1 / ac).sqrt())
        self.register_buffer("srm1", (1 / ac - 1).sqrt())

    @staticmethod
    def ex(arr, t, shape):
        res = arr[t].float()
        while len(res.shape) < len(shape):
            res = res[..., None]
        return res.expand(shape)

    def forward(self, x, t, eps):
        x0 = self.ex(self.sr, t, x.shape) * x - self.ex(self.srm1, t, x.shape) * eps
        x0 = x0.clamp(-1, 1)
        mean = self.ex(self.c1, t, x.shape) * x0 + self.ex(self.c2, t, x.shape) * x
        return mean, self.ex(self.logvar, t, x.shape), x0


case("ddpm_posterior_log_variance_clipped_extract", lambda i=0: (R(4, 2, 3, 3), torch.tensor([0, 1, 25, 49]) if i < 2 else I(0, 50, 4),
                                                                 R(4, 2, 3, 3)))(lambda: DDPMPosterior())


@fn_case("lfq_fsq_quantizers_bits_to_indices", lambda i=0: (R(3, 5, 4) * (1 + i), R(3, 5, 3) * 2))
def lfq_fsq_quantizers_bits_to_indices(z, y):
    """Lookup-free quantization: sign codes (>0 -> 1 else -1; exact zeros), indices by summing bits
    times 2 ** arange, STE by z + (q - z).detach(), per-sample entropy of softmax over the code
    distances; FSQ: tanh bounding with a half-level offset for even levels, round STE, indices
    by a cumprod basis."""
    z = z.clone()
    z[0, 0, 0] = 0.0
    q = torch.where(z > 0, torch.ones_like(z), -torch.ones_like(z))
    mask = 2 ** torch.arange(z.shape[-1] - 1, -1, -1)
    idx = ((q > 0).int() * mask.int()).sum(-1)
    qs = z + (q - z).detach()
    codes = ((torch.arange(16)[:, None] & mask) != 0).float() * 2 - 1
    logits = -((z[..., None, :] - codes) ** 2).sum(-1)
    p = logits.softmax(-1)
    ent = -(p * torch.log(p.clamp_min(1e-5))).sum(-1).mean()
    levels = torch.tensor([8, 5, 5])
    half_l = (levels - 1) * (1 - 1e-3) / 2
    offset = torch.where(levels % 2 == 0, 0.5, 0.0)
    shift = torch.atanh(offset / half_l)
    bounded = torch.tanh(y + shift) * half_l - offset
    qf = bounded + (bounded.round() - bounded).detach()
    basis = torch.cumprod(torch.tensor([1] + levels[:-1].tolist()), dim=0)
    half_w = levels // 2
    fidx = ((qf + half_w) * basis).sum(-1).to(torch.int32)
    return qs, idx, ent, qf / half_w, fidx


# =========================================================================================== RL
class C51Projection(nn.Module):
    """Categorical DQN's distribution projection: Tz clamped to [vmin, vmax], b = (Tz - vmin) / dz,
    l / u by floor / ceil, the l == u fix (l -= 1 where u > 0 and l == u; u += 1 where l < atoms-1
    and l == u), mass split by index_add_ over flattened offsets."""

    def __init__(self, atoms=11, vmin=-5.0, vmax=5.0):
        super().__init__()
        self.atoms, self.vmin, self.vmax = atoms, vmin, vmax
        self.register_buffer("support", torch.linspace(vmin, vmax, atoms))

    def forward(self, probs, rewards, dones, gamma: float):
        b = probs.shape[0]
        dz = (self.vmax - self.vmin) / (self.atoms - 1)
        Tz = rewards[:, None] + (1 - dones[:, None]) * gamma * self.support[None]
        Tz = Tz.clamp(min=self.vmin, max=self.vmax)
        bj = (Tz - self.vmin) / dz
        l, u = bj.floor().to(torch.int64), bj.ceil().to(torch.int64)  # noqa: E741
        l[(u > 0) & (l == u)] -= 1
        u[(l < (self.atoms - 1)) & (l == u)] += 1
        m = probs.new_zeros(b, self.atoms)
        offset = torch.linspace(0, ((b - 1) * self.atoms), b).unsqueeze(1).expand(b, self.atoms).to(l)
        m.view(-1).index_add_(0, (l + offset).view(-1), (probs * (u.float() - bj)).view(-1))
        m.view(-1).index_add_(0, (u + offset).view(-1), (probs * (bj - l.float())).view(-1))
        return m, m.sum(-1)


case("c51_projection_floor_ceil_index_add", lambda i=0: (R(5, 11).softmax(-1), torch.tensor([0.0, 1.0, -2.5, 7.0, -9.0]) * (1 + i),
                                                         torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0]), 0.99 if i < 2 else 1.0))(
    lambda: C51Projection())


@fn_case("dreamerv3_symlog_twohot_lambda_returns", lambda i=0: (R(4, 6) * 50 * (1 + i), R(4, 6), (U(4, 6) > 0.8).float()))
def dreamerv3_symlog_twohot_lambda_returns(x, rew, cont):
    """DreamerV3: symlog / symexp, twohot encoding over 255 bins via bucketize (the below / above
    indices clipped, weights from the distances, equal indices get weight 1), back by the
    weighted sum, and lambda returns by a reversed Python loop."""
    bins = torch.linspace(-20, 20, 255)
    y = torch.sign(x) * torch.log1p(x.abs())
    below = (bins <= y[..., None]).to(torch.int32).sum(-1) - 1
    above = len(bins) - (bins > y[..., None]).to(torch.int32).sum(-1)
    below = torch.clip(below, 0, len(bins) - 1)
    above = torch.clip(above, 0, len(bins) - 1)
    equal = below == above
    dist_to_below = torch.where(equal, 1, torch.abs(bins[below] - y))
    dist_to_above = torch.where(equal, 1, torch.abs(bins[above] - y))
    total = dist_to_below + dist_to_above
    wb, wa = dist_to_above / total, dist_to_below / total
    target = F.one_hot(below.long(), len(bins)) * wb[..., None] + F.one_hot(above.long(), len(bins)) * wa[..., None]
    back = (target * bins).sum(-1)
    symexp = torch.sign(back) * torch.expm1(back.abs())
    bk = torch.bucketize(y, bins)
    ret = [rew[:, -1]]
    for t in reversed(range(rew.shape[1] - 1)):
        ret.append(rew[:, t] + 0.997 * cont[:, t] * (0.05 * rew[:, t + 1] + 0.95 * ret[-1]))
    return target, symexp, bk, torch.stack(ret[::-1], 1)


@fn_case("muzero_value_transform_support_projection", lambda i=0: (R(6) * 30 * (1 + 10 * i),))
def muzero_value_transform_support_projection(v):
    """MuZero's h(x) = sign(x)(sqrt(|x|+1)-1) + eps x, clamped to the support, split into the two
    neighbouring bins with floor, scatter_ into a zero tensor (two writes, the second with
    the upper index clamped), and the inverse h^-1 from the expectation."""
    eps, size = 0.001, 10
    x = torch.sign(v) * (torch.sqrt(torch.abs(v) + 1) - 1) + eps * v
    x = torch.clamp(x, -size, size)
    floor = x.floor()
    prob = x - floor
    logits = torch.zeros(v.shape[0], 2 * size + 1)
    logits.scatter_(1, (floor + size).long()[:, None], (1 - prob)[:, None])
    idx = (floor + size + 1).long()
    prob = prob.masked_fill(2 * size < idx, 0.0)
    idx = idx.masked_fill(2 * size < idx, 0)
    logits.scatter_add_(1, idx[:, None], prob[:, None])
    sup = torch.arange(-size, size + 1).float()
    y = (logits * sup).sum(1)
    inv = torch.sign(y) * (((torch.sqrt(1 + 4 * eps * (torch.abs(y) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1)
    return logits, inv


@fn_case("prioritized_replay_cumsum_searchsorted_is_weights", lambda i=0: (U(20) + (i == 2) * 5, 0.6, 0.4))
def prioritized_replay_cumsum_searchsorted_is_weights(prio, alpha: float, beta: float):
    """Prioritised replay without a sum tree: p ** alpha, cumsum, one uniform draw per segment
    from torch's generator, searchsorted(right=True) clamped, importance weights (N P)^-beta
    normalised by their max."""
    p = prio ** alpha
    c = torch.cumsum(p, 0)
    total = c[-1]
    k = 6
    seg = total / k
    u = (torch.arange(k) + torch.rand(k)) * seg
    idx = torch.searchsorted(c, u, right=True).clamp(max=prio.numel() - 1)
    P = p[idx] / total
    w = (prio.numel() * P) ** (-beta)
    return idx, w / w.max()


# ============================================================================ LLM quantization
@fn_case("int4_pack_unpack_shifts_group_dequant", lambda i=0: (R(6, 16), R(3, 16)))
def int4_pack_unpack_shifts_group_dequant(w, x):
    """GPTQ-style 4-bit weights: per-group (8) asymmetric quantization with round / clamp, eight
    nibbles packed into an int32 by shifts and bitwise_or (the top nibble makes it negative),
    unpacked by >> and & 0xF, dequantized and used in a matmul."""
    g = w.view(6, 2, 8)
    mn, mx = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = (mx - mn).clamp(min=1e-5) / 15
    zero = torch.round(-mn / scale)
    q = torch.clamp(torch.round(g / scale) + zero, 0, 15).to(torch.int32).view(6, 16)
    q8 = q.view(6, 2, 8)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    packed = (q8 << shifts).sum(-1, dtype=torch.int32)
    packed2 = torch.zeros(6, 2, dtype=torch.int32)
    for j in range(8):
        packed2 |= q8[..., j] << (4 * j)
    un = (packed[..., None] >> shifts) & 0xF
    deq = ((un.float() - zero) * scale).view(6, 16)
    return packed, packed2, torch.equal(un.view(6, 16), q), x @ deq.T


@fn_case("nf4_blockwise_absmax_argmin_lookup", lambda i=0: (R(4, 32) * (1 + 100 * (i == 2)),))
def nf4_blockwise_absmax_argmin_lookup(w):
    """bitsandbytes-style NF4: block-wise (16) absmax scaling, the nearest of 16 normal-float
    levels by argmin of |x - code|, two indices per uint8 (<< 4 | ...), dequantized by indexing."""
    code = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                         -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                         0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                         0.7229568362236023, 1.0])
    blocks = w.reshape(-1, 16)
    absmax = blocks.abs().amax(-1, keepdim=True)
    normed = blocks / absmax
    idx = (normed[..., None] - code).abs().argmin(-1).to(torch.uint8)
    packed = (idx[:, ::2] << 4) | idx[:, 1::2]
    hi, lo = packed >> 4, packed & 15
    un = torch.stack([hi, lo], -1).view(idx.shape)
    deq = code[un.long()] * absmax
    return packed, deq.view_as(w), (deq.view_as(w) - w).abs().max()


@fn_case("llm_int8_outlier_split_int32_matmul", lambda i=0: (R(5, 12), R(8, 12)))
def llm_int8_outlier_split_int32_matmul(x, w):
    """LLM.int8(): activation columns with |x| > threshold kept in float, the rest row-wise absmax
    quantized to int8 (round, 127 / absmax), the integer product in int32 from int8 operands
    cast up, rescaled by the outer product of the scales; outliers through a float matmul."""
    x = x.clone()
    x[:, 3] *= 10
    outl = (x.abs() > 6.0).any(0)
    xs = x.masked_fill(outl, 0)
    ws = w.masked_fill(outl, 0)
    sx = xs.abs().amax(1, keepdim=True).clamp_min(1e-8) / 127
    sw = ws.abs().amax(1, keepdim=True).clamp_min(1e-8) / 127
    qx = torch.round(xs / sx).to(torch.int8)
    qw = torch.round(ws / sw).to(torch.int8)
    acc = qx.to(torch.int32) @ qw.to(torch.int32).T
    out = acc.float() * (sx * sw.T) + x[:, outl] @ w[:, outl].T
    return out, acc, outl


@fn_case("float8_e4m3_scaled_cast_roundtrip", lambda i=0: (R(4, 8) * 10 ** i,))
def float8_e4m3_scaled_cast_roundtrip(x):
    """Per-tensor FP8 (e4m3fn) scaling as transformer-engine emulations write it: amax, scale =
    448 / amax, clamp to the representable range, cast to float8_e4m3fn and back, relative error;
    also an unscaled saturating cast of large values."""
    amax = x.abs().amax().clamp_min(1e-12)
    scale = 448.0 / amax
    q = (x * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    deq = q.to(torch.float32) / scale
    sat = x.clamp(-448, 448).to(torch.float8_e4m3fn).to(torch.float32)
    bf = x.to(torch.bfloat16).to(torch.float8_e5m2).float()
    return deq, sat, bf, (deq - x).abs().max() / amax


class SmoothQuantLinear(nn.Module):
    """SmoothQuant: per-input-channel activation absmax tracked in a buffer (torch.maximum in
    no_grad), migration scales a^alpha / w^(1-alpha) clamped to 1e-5, activations divided and
    weights multiplied, then per-tensor int8 fake quantization of both."""

    def __init__(self, d=8, o=6):
        super().__init__()
        self.lin = nn.Linear(d, o)
        self.register_buffer("act_max", torch.zeros(d))

    def forward(self, x):
        with torch.no_grad():
            self.act_max.copy_(torch.maximum(self.act_max, x.abs().reshape(-1, x.shape[-1]).amax(0)))
        wmax = self.lin.weight.abs().amax(0).clamp(min=1e-5)
        s = (self.act_max.pow(0.5) / wmax.pow(0.5)).clamp(min=1e-5)
        xs, ws = x / s, self.lin.weight * s

        def fq(t):
            sc = t.abs().max().clamp(min=1e-5) / 127
            return torch.clamp(torch.round(t / sc), -128, 127) * sc

        return F.linear(fq(xs), fq(ws), self.lin.bias), s


case("smoothquant_act_max_buffer_migration", lambda i=0: (R(3, 4, 8) * (1 + 4 * i),))(lambda: SmoothQuantLinear())


class Int8KVCache(nn.Module):
    """A per-token int8 KV cache: keys / values quantized by absmax / 127 into int8 buffers written
    with slice assignment at a Python position (scales in a float buffer), dequantized for the
    attention over the filled prefix."""

    def __init__(self, d=8, maxlen=12):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.register_buffer("kq", torch.zeros(2, maxlen, d, dtype=torch.int8))
        self.register_buffer("vq", torch.zeros(2, maxlen, d, dtype=torch.int8))
        self.register_buffer("ks", torch.ones(2, maxlen, 1))
        self.register_buffer("vs", torch.ones(2, maxlen, 1))
        self.pos = 0

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        for t, buf, sbuf in ((k, self.kq, self.ks), (v, self.vq, self.vs)):
            s = t.abs().amax(-1, keepdim=True) / 127
            buf[:, self.pos:self.pos + n] = torch.round(t / s).clamp(-127, 127).to(torch.int8)
            sbuf[:, self.pos:self.pos + n] = s
        self.pos += n
        kd = self.kq[:, :self.pos].float() * self.ks[:, :self.pos]
        vd = self.vq[:, :self.pos].float() * self.vs[:, :self.pos]
        a = (q @ kd.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
        return a @ vd


case("int8_kv_cache_per_token_slice_assign_pos", lambda i=0: (R(2, 3 if i == 0 else 1, 8),), ncalls=4)(lambda: Int8KVCache())


# ============================================================================ scientific code
@fn_case("game_of_life_bool_board_circular_conv", lambda i=0: (torch.rand(2, 1, 9 + i, 11) > 0.6, 4 + i))
def game_of_life_bool_board_circular_conv(board, steps: int):
    """Conway's Game of Life on a bool board: a torus by F.pad(mode='circular') of the float board,
    neighbour counts by conv2d with a 3x3 ones kernel minus the centre, the rules as bool algebra
    ((n == 3) | (alive & (n == 2))), population counts per step as int64 sums."""
    k = torch.ones(1, 1, 3, 3)
    k[0, 0, 1, 1] = 0
    pops = []
    for _ in range(steps):
        n = F.conv2d(F.pad(board.float(), (1, 1, 1, 1), mode="circular"), k)
        board = (n == 3) | (board & (n == 2))
        pops.append(board.sum((1, 2, 3)))
    return board, torch.stack(pops, 1), board.to(torch.uint8).sum()


@fn_case("poisson_jacobi_iterations_dirichlet_slices", lambda i=0: (R(1, 1, 10, 12), 20 + 5 * i))
def poisson_jacobi_iterations_dirichlet_slices(f, iters: int):
    """Jacobi iterations for the 2-D Poisson equation: the 5-point Laplacian stencil by conv2d,
    Dirichlet boundaries written by slice assignment every iteration, the residual norm."""
    u = torch.zeros_like(f)
    k = torch.tensor([[0.0, 0.25, 0.0], [0.25, 0.0, 0.25], [0.0, 0.25, 0.0]]).view(1, 1, 3, 3)
    h2 = 0.1 ** 2
    for _ in range(iters):
        u = F.conv2d(u, k, padding=1) + 0.25 * h2 * f
        u[..., 0, :] = 1.0
        u[..., -1, :] = 0.0
        u[..., :, 0] = 0.5
        u[..., :, -1] = -0.5
    lap = torch.tensor([[0.0, 1, 0], [1, -4, 1], [0, 1, 0]]).view(1, 1, 3, 3) / h2
    res = (F.conv2d(u, lap)[..., :, :] + f[..., 1:-1, 1:-1])
    return u, res.norm()


class LatticeBoltzmann(nn.Module):
    """D2Q9 lattice Boltzmann on a periodic box: streaming by torch.roll per lattice velocity (a
    Python list of shifts), macroscopic density / velocity by einsum, BGK collision toward the
    equilibrium, a cylinder of bounce-back cells by flipping the distribution indices."""

    def __init__(self):
        super().__init__()
        self.c = [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, 1), (-1, -1), (1, -1)]
        self.register_buffer("cv", torch.tensor(self.c, dtype=torch.float32))
        self.register_buffer("w", torch.tensor([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4))
        self.opp = [0, 3, 4, 1, 2, 7, 8, 5, 6]

    def forward(self, f, obstacle, steps: int):
        tau = 0.6
        for _ in range(steps):
            f = torch.stack([torch.roll(f[i], shifts=c, dims=(0, 1)) for i, c in enumerate(self.c)])
            bnd = f[:, obstacle]
            f[:, obstacle] = bnd[self.opp]
            rho = f.sum(0)
            u = torch.einsum("ixy,id->dxy", f, self.cv) / rho
            cu = torch.einsum("id,dxy->ixy", self.cv, u)
            usq = (u ** 2).sum(0)
            feq = self.w[:, None, None] * rho * (1 + 3 * cu + 4.5 * cu ** 2 - 1.5 * usq)
            f = f - (f - feq) / tau
        return f, rho, u


def _lbm_inputs(i=0):
    f = (torch.tensor([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4)[:, None, None] * (1 + 0.01 * R(9, 8, 10))).contiguous()
    obs = torch.zeros(8, 10, dtype=torch.bool)
    obs[3:5, 4:6] = True
    return f, obs, 3 + i


case("lattice_boltzmann_roll_streaming_bounce_back", _lbm_inputs)(lambda: LatticeBoltzmann())


@fn_case("black_scholes_float64_erf_greeks_expiry", lambda i=0: (U(6, dtype=torch.float64) * 50 + 75, U(6, dtype=torch.float64) * 2))
def black_scholes_float64_erf_greeks_expiry(S, T):
    """Black-Scholes in float64: d1 / d2 with log(S/K), N(x) by 0.5 (1 + erf(x / sqrt 2)), call and
    put by parity, delta / vega; one option at expiry (T = 0: d1 = +-inf, the where keeps the
    intrinsic value) and one at the money at expiry (0/0: NaN, kept)."""
    K, r, sig = 100.0, 0.03, 0.2
    T = T.clone()
    T[0] = 0
    S = S.clone()
    S[1] = K
    T[1] = 0
    sq = sig * torch.sqrt(T)
    d1 = (torch.log(S / K) + (r + 0.5 * sig ** 2) * T) / sq
    d2 = d1 - sq
    N = lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))  # noqa: E731
    call = S * N(d1) - K * torch.exp(-r * T) * N(d2)
    put = call - S + K * torch.exp(-r * T)
    vega = S * torch.exp(-0.5 * d1 ** 2) / math.sqrt(2 * math.pi) * torch.sqrt(T)
    safe = torch.where(T > 0, call, (S - K).clamp_min(0))
    return call, put, N(d1), vega, safe


@fn_case("gbm_paths_cumsum_drawdown_cummax_pct_change", lambda i=0: (R(4, 30) * 0.02, 100.0))
def gbm_paths_cumsum_drawdown_cummax_pct_change(z, s0: float):
    """Geometric Brownian motion paths from given shocks: log returns cumsum, exp, max drawdown
    from cummax, pct_change with a zero price (division by zero: inf, kept), a rolling mean by
    unfold, and the Sharpe ratio over non-NaN returns."""
    logp = math.log(s0) + torch.cumsum(0.0002 + z, dim=1)
    p = torch.exp(logp)
    peak = torch.cummax(p, dim=1).values
    dd = (p - peak) / peak
    p2 = p.clone()
    p2[0, 5] = 0
    pct = p2[:, 1:] / p2[:, :-1] - 1
    roll = p.unfold(1, 5, 1).mean(-1)
    fin = torch.isfinite(pct)
    mean = torch.where(fin, pct, 0).sum(1) / fin.sum(1)
    return dd.min(1).values, pct, roll, mean


class SchNetInteraction(nn.Module):
    """SchNet: radius graph by cdist < cutoff without self loops (nonzero: data-dependent edges),
    Gaussian smearing of distances, a cosine cutoff, continuous-filter convolution by index_add_
    of neighbour features times filters."""

    def __init__(self, d=8, g=10, cutoff=2.5):
        super().__init__()
        self.cutoff = cutoff
        self.register_buffer("offset", torch.linspace(0, cutoff, g))
        self.coeff = -0.5 / (cutoff / (g - 1)) ** 2
        self.filt = nn.Sequential(nn.Linear(g, d), nn.Softplus(), nn.Linear(d, d))
        self.lin = nn.Linear(d, d)

    def forward(self, h, pos):
        d = torch.cdist(pos, pos)
        mask = (d < self.cutoff) & ~torch.eye(pos.shape[0], dtype=torch.bool)
        src, dst = mask.nonzero(as_tuple=True)
        ew = d[src, dst]
        rbf = torch.exp(self.coeff * (ew[:, None] - self.offset) ** 2)
        C = 0.5 * (torch.cos(ew * math.pi / self.cutoff) + 1.0)
        W = self.filt(rbf) * C[:, None]
        msg = self.lin(h)[src] * W
        out = torch.zeros_like(h).index_add_(0, dst, msg)
        return out, src.numel()


case("schnet_radius_graph_rbf_cosine_cutoff", lambda i=0: (R(7 + i, 8), R(7 + i, 3) * 1.2))(lambda: SchNetInteraction())


@fn_case("periodic_minimum_image_round_half_even_lj", lambda i=0: (U(6, 3) * 4, 4.0))
def periodic_minimum_image_round_half_even_lj(pos, box: float):
    """Molecular dynamics in a periodic box: displacements wrapped by d - box * round(d / box)
    (two pairs exactly half a box apart: round half to even), Lennard-Jones energy with a
    cutoff mask, the diagonal excluded by a large diagonal added to r^2."""
    pos = pos.clone()
    pos[0] = torch.tensor([0.0, 0.0, 0.0])
    pos[1] = torch.tensor([2.0, -2.0, 6.0])
    d = pos[:, None] - pos[None]
    d = d - box * torch.round(d / box)
    r2 = (d ** 2).sum(-1) + torch.eye(pos.shape[0]) * 1e6
    inv6 = (1 / r2) ** 3
    e = 4 * (inv6 ** 2 - inv6)
    e = torch.where(r2 < 2.5 ** 2, e, torch.zeros_like(e))
    return d, e.sum() / 2


@fn_case("soft_dtw_loop_softmin_logsumexp", lambda i=0: (R(2, 5, 3), R(2, 6 + i, 3)))
def soft_dtw_loop_softmin_logsumexp(x, y):
    """Soft-DTW (Cuturi & Blondel): squared-distance cost, an (n+2, m+2) R filled with inf and
    R[0, 0] = 0, a double Python loop writing R[:, i, j] = D + softmin of three neighbours by
    -gamma * logsumexp(-r / gamma)."""
    gamma = 0.1
    D = torch.cdist(x, y) ** 2
    b, n, m = D.shape
    Rm = torch.full((b, n + 2, m + 2), math.inf)
    Rm[:, 0, 0] = 0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            r = torch.stack([Rm[:, i - 1, j - 1], Rm[:, i - 1, j], Rm[:, i, j - 1]], -1)
            Rm[:, i, j] = D[:, i - 1, j - 1] - gamma * torch.logsumexp(-r / gamma, -1)
    return Rm[:, n, m], Rm[:, 1:n + 1, 1:m + 1]


@fn_case("conjugate_gradient_fixed_iters_float64", lambda i=0: (R(2, 6, 6, dtype=torch.float64), R(2, 6, dtype=torch.float64)))
def conjugate_gradient_fixed_iters_float64(A, b):
    """Batched conjugate gradient on SPD systems (A A^T + I) for n - 1 iterations: alpha / beta
    from batched dot products (einsum), residual norms per iteration stacked."""
    A = A @ A.transpose(1, 2) + torch.eye(6, dtype=torch.float64)
    x = torch.zeros_like(b)
    r = b - torch.einsum("bij,bj->bi", A, x)
    p = r.clone()
    rs = (r * r).sum(-1)
    hist = []
    for _ in range(5):
        Ap = torch.einsum("bij,bj->bi", A, p)
        alpha = rs / (p * Ap).sum(-1)
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * Ap
        rs_new = (r * r).sum(-1)
        p = r + (rs_new / rs)[:, None] * p
        rs = rs_new
        hist.append(rs.sqrt())
    return x, torch.stack(hist, 1)


@fn_case("muon_newton_schulz_bf16_orthogonalize", lambda i=0: (R(6, 10) if i < 2 else R(10, 6),))
def muon_newton_schulz_bf16_orthogonalize(G):
    """Muon's zeropower_via_newtonschulz5: bf16 copy, divided by its Frobenius norm + eps, transposed
    when taller than wide, five quintic iterations (a, b, c) = (3.4445, -4.7750, 2.0315)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    X = X / (X.norm() + 1e-7)
    tall = G.size(0) > G.size(1)
    if tall:
        X = X.T
    for _ in range(5):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if tall:
        X = X.T
    return X


@fn_case("lbfgs_two_loop_recursion_python_history", lambda i=0: (R(8), [R(8) for _ in range(3 + i)], [R(8) for _ in range(3 + i)]))
def lbfgs_two_loop_recursion_python_history(g, S, Y):
    """L-BFGS two-loop recursion over Python lists of (s, y) pairs (y made to satisfy s.y > 0):
    rho = 1 / y.s, the first loop backwards storing alphas, H0 = s.y / y.y, the second forwards."""
    Y = [y * 0.1 + s for s, y in zip(S, Y)]
    q = g.clone()
    alphas = []
    for s, y in reversed(list(zip(S, Y))):
        rho = 1.0 / y.dot(s)
        a = rho * s.dot(q)
        q = q - a * y
        alphas.append((a, rho))
    gamma = S[-1].dot(Y[-1]) / Y[-1].dot(Y[-1])
    r = gamma * q
    for (s, y), (a, rho) in zip(zip(S, Y), reversed(alphas)):
        b = rho * y.dot(r)
        r = r + s * (a - b)
    return -r


# ======================================================================== biology and retrieval
def _dna(i=0):
    codes = torch.tensor([65, 67, 71, 84, 78, 97, 99, 103, 116], dtype=torch.uint8)
    return (codes[torch.randint(0, 9, (3, 12 + i))],)


@fn_case("dna_ascii_lookup_one_hot_reverse_complement", _dna)
def dna_ascii_lookup_one_hot_reverse_complement(seq):
    """DNA sequences as uint8 ASCII codes: a 256-entry lookup table (A/C/G/T in either case, N and
    anything else -> 4) indexed by seq.long(), one_hot with the N column dropped (N rows all
    zero), the reverse complement by flip and 3 - idx (N kept), GC content."""
    lut = torch.full((256,), 4, dtype=torch.int64)
    for ch, v in zip("ACGTacgt", [0, 1, 2, 3, 0, 1, 2, 3]):
        lut[ord(ch)] = v
    idx = lut[seq.long()]
    oh = F.one_hot(idx, 5)[..., :4].float()
    rc = torch.where(idx == 4, idx, 3 - idx).flip(-1)
    gc = ((idx == 1) | (idx == 2)).float().sum(-1) / (idx != 4).sum(-1).clamp(min=1)
    return oh, rc, gc


@fn_case("distogram_bucketize_masked_ce", lambda i=0: (R(2, 7 + i, 3) * 6, R(2, 7 + i, 7 + i, 10), torch.rand(2, 7 + i) > 0.2))
def distogram_bucketize_masked_ce(pos, logits, mask):
    """AlphaFold-style distogram loss: pairwise distances binned by bucketize against squared
    breaks (sum of squares vs breaks ** 2), one_hot targets, log_softmax CE masked by the outer
    product of residue masks, normalised by mask sum + eps."""
    breaks = torch.linspace(2.3125, 21.6875, logits.shape[-1] - 1)
    sq = ((pos[:, :, None] - pos[:, None]) ** 2).sum(-1, keepdim=True)
    true_bins = (sq > breaks ** 2).sum(-1)
    ce = -(F.one_hot(true_bins, logits.shape[-1]) * F.log_softmax(logits, -1)).sum(-1)
    sq_mask = mask[:, :, None] & mask[:, None]
    loss = (ce * sq_mask).sum((-1, -2)) / (1e-6 + sq_mask.sum((-1, -2)))
    return loss, true_bins, torch.bucketize(sq[..., 0].sqrt(), breaks)


@fn_case("sampled_softmax_logq_in_batch_duplicates", lambda i=0: (R(6, 8), R(6, 8), torch.tensor([3, 7, 3, 1, 9, 7]), U(10) + 0.01))
def sampled_softmax_logq_in_batch_duplicates(u, v, ids, freq):
    """In-batch sampled softmax for two-tower retrieval: L2-normalised towers, logits / temperature
    minus log Q(item) (logQ correction from a frequency table gathered by id), duplicate items
    off the diagonal masked with -inf (ids equal, not the positive), CE against the diagonal."""
    u, v = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    logits = u @ v.T / 0.05 - torch.log(freq[ids])[None]
    dup = (ids[:, None] == ids[None]) & ~torch.eye(ids.numel(), dtype=torch.bool)
    logits = logits.masked_fill(dup, float("-inf"))
    labels = torch.arange(ids.numel())
    return F.cross_entropy(logits, labels), logits.argmax(-1)


class BPRTwoTower(nn.Module):
    """BPR with embedding tables: user / positive / negative rows, -logsigmoid(pos - neg), L2 on the
    batch's rows divided by the batch size, backward to sparse-free dense grads."""

    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(10, 6)
        self.item = nn.Embedding(15, 6)

    def forward(self, u, i, j):
        eu, ei, ej = self.user(u), self.item(i), self.item(j)
        x = (eu * ei).sum(-1) - (eu * ej).sum(-1)
        reg = (eu.norm(dim=1).pow(2) + ei.norm(dim=1).pow(2) + ej.norm(dim=1).pow(2)).sum() / u.shape[0]
        loss = -F.logsigmoid(x).mean() + 1e-3 * reg
        loss.backward()
        return loss.detach(), self.item.weight.grad.clone()


case("bpr_logsigmoid_embedding_reg_backward", lambda: (I(0, 10, 8), I(0, 15, 8), I(0, 15, 8)), train=True)(lambda: BPRTwoTower())


class SASRec(nn.Module):
    """SASRec: item embeddings * sqrt(d), learned positions, a timeline mask from padding id 0
    multiplied in, causal attention through nn.MultiheadAttention with a bool attn_mask,
    LayerNorm, logits against positive and negative items."""

    def __init__(self, n=20, d=8, L=6):
        super().__init__()
        self.item = nn.Embedding(n, d, padding_idx=0)
        self.pos = nn.Embedding(L, d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ln = nn.LayerNorm(d)

    def forward(self, seq, pos_items, neg_items):
        x = self.item(seq) * self.item.embedding_dim ** 0.5
        x = x + self.pos(torch.arange(seq.shape[1]))[None]
        tl = (seq != 0)[..., None]
        x = x * tl
        L = seq.shape[1]
        causal = ~torch.tril(torch.ones(L, L, dtype=torch.bool))
        h, _ = self.attn(self.ln(x), x, x, attn_mask=causal)
        h = self.ln(h + x) * tl
        return (h * self.item(pos_items)).sum(-1), (h * self.item(neg_items)).sum(-1)


def _sasrec_in(i=0):
    s = I(1, 20, 3, 6)
    s[0, :3] = 0
    s[1, :] = 0
    return s, I(1, 20, 3, 6), I(1, 20, 3, 6)


case("sasrec_timeline_mask_causal_mha", _sasrec_in)(lambda: SASRec().eval())


@fn_case("colbert_maxsim_padded_doc_tokens", lambda i=0: (R(3, 4, 8), R(5, 7, 8), I(1, 8, 5)))
def colbert_maxsim_padded_doc_tokens(q, d, dlen):
    """ColBERT late interaction: normalized token embeddings, einsum of every query against every
    document, padded document tokens masked with -inf before the max over document tokens
    (one empty document: all -inf, max -inf, kept), sum over query tokens."""
    dlen = dlen.clone()
    dlen[0] = 0
    q, d = F.normalize(q, dim=-1), F.normalize(d, dim=-1)
    s = torch.einsum("qid,pjd->qpij", q, d)
    mask = torch.arange(d.shape[1])[None] < dlen[:, None]
    s = s.masked_fill(~mask[None, :, None, :], float("-inf"))
    mx = s.max(-1).values
    return mx.sum(-1), mx.nan_to_num(neginf=0.0).sum(-1)


# ========================================================================= segmentation losses
def _lovasz_grad(gt_sorted):
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1.0 - intersection / union
    if p > 1:
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


@fn_case("lovasz_hinge_sort_descending_grad_cumsum", lambda i=0: (R(2, 5, 6), torch.rand(2, 5, 6) > 0.5))
def lovasz_hinge_sort_descending_grad_cumsum(logits, labels):
    """Lovasz hinge per image (Berman et al.): signs 2y - 1, hinge errors sorted descending with
    their permutation, the Lovasz extension gradient by cumsums (an in-place difference of a
    slice), dot(relu(errors_sorted), grad); one image with no positives."""
    labels = labels.clone()
    labels[1] = False
    losses = []
    for lg, lb in zip(logits, labels):
        lg, lb = lg.view(-1), lb.view(-1).float()
        signs = 2.0 * lb - 1.0
        errors = 1.0 - lg * signs
        errors_sorted, perm = torch.sort(errors, dim=0, descending=True)
        grad = _lovasz_grad(lb[perm])
        losses.append(torch.dot(F.relu(errors_sorted), grad))
    return torch.stack(losses)


@fn_case("tversky_focal_one_hot_permute_ignore", lambda i=0: (R(2, 4, 6, 5), I(0, 4, 2, 6, 5)))
def tversky_focal_one_hot_permute_ignore(logits, tgt):
    """Focal Tversky loss (alpha 0.7, beta 0.3, gamma 0.75): softmax probabilities, one_hot targets
    permuted to NCHW, the class 0 (background) excluded by slicing, TP / FP / FN sums per class."""
    p = logits.softmax(1)
    oh = F.one_hot(tgt, 4).permute(0, 3, 1, 2).float()
    p, oh = p[:, 1:], oh[:, 1:]
    dims = (0, 2, 3)
    tp = (p * oh).sum(dims)
    fp = (p * (1 - oh)).sum(dims)
    fn = ((1 - p) * oh).sum(dims)
    tv = (tp + 1.0) / (tp + 0.7 * fn + 0.3 * fp + 1.0)
    return torch.pow(1 - tv, 0.75).mean(), tv


@fn_case("morphological_boundary_weighted_bce", lambda i=0: (R(2, 1, 9, 9), (torch.rand(2, 1, 9, 9) > 0.5).float()))
def morphological_boundary_weighted_bce(logits, mask):
    """Boundary-aware BCE: a boundary map as dilation minus erosion of the mask (max_pool2d of
    mask and of -mask), weights 1 + 4 * boundary, binary_cross_entropy_with_logits(weight=)."""
    dil = F.max_pool2d(mask, 3, 1, 1)
    ero = -F.max_pool2d(-mask, 3, 1, 1)
    bnd = dil - ero
    w = 1 + 4 * bnd
    return F.binary_cross_entropy_with_logits(logits, mask, weight=w), bnd.sum()


@fn_case("ohem_ce_sorted_threshold_min_kept", lambda i=0: (R(2, 3, 6, 6) * (1 + 2 * i), I(0, 3, 2, 6, 6)))
def ohem_ce_sorted_threshold_min_kept(logits, tgt):
    """OHEM cross entropy (semantic segmentation repos): pixels of ignore 255 dropped, the
    probability of the true class, sorted; the threshold is max(sorted[min_kept], 0.7); the mean
    loss over pixels whose prob is below it (data-dependent count)."""
    tgt = tgt.clone()
    tgt[0, :2] = 255
    loss = F.cross_entropy(logits, tgt, ignore_index=255, reduction="none").view(-1)
    valid = tgt.view(-1) != 255
    prob = F.softmax(logits, 1).permute(0, 2, 3, 1).reshape(-1, 3)
    t = tgt.view(-1).clone()
    t[~valid] = 0
    pt = prob.gather(1, t[:, None])[:, 0][valid]
    loss = loss[valid]
    sp, idx = pt.sort()
    min_kept = 10
    thr = max(sp[min(min_kept, sp.numel() - 1)].item(), 0.7)
    keep = loss[idx][sp < thr]
    return keep.mean(), keep.numel()


# ============================================================================ tensor semantics
@fn_case("addmm_baddbmm_beta_zero_ignores_nan_input", lambda i=0: (R(3, 4), R(3, 5), R(5, 4), R(2, 3, 5), R(2, 5, 4)))
def addmm_baddbmm_beta_zero_ignores_nan_input(inp, a, b, ba, bb):
    """With beta=0 addmm / baddbmm / addmv / addr ignore their input (NaN and inf in it are not
    propagated, as documented); with beta=1 they are; alpha scales the product."""
    inp = inp.clone()
    inp[0, 0] = float("nan")
    inp[1, 2] = float("inf")
    b3 = inp.expand(2, 3, 4)
    return (torch.addmm(inp, a, b, beta=0), torch.addmm(inp, a, b, beta=0, alpha=2.0), torch.addmm(inp, a, b),
            torch.baddbmm(b3, ba, bb, beta=0.0), torch.addmv(inp[:, 0], a, b[:, 1], beta=0),
            torch.addr(inp, a[:, 0], b[0], beta=0, alpha=-1))


@fn_case("float_power_pow_negative_bases_zero_zero", lambda i=0: (R(6) * 3, I(-3, 4, 6)))
def float_power_pow_negative_bases_zero_zero(x, n):
    """float_power (always float64), pow of negative bases to fractional exponents (NaN), 0 ** 0 = 1,
    0 ** -1 = inf, integer tensors to non-negative integer powers, a Python base to a tensor power,
    and pow(int, float scalar) promoting to float."""
    x = x.clone()
    x[0] = 0
    x[1] = -8
    nn_ = n.clone()
    nn_[0] = 0
    return (torch.float_power(x, 2), torch.float_power(x, 1 / 3), x ** (1 / 3), x ** nn_.float(), torch.pow(0.0, x),
            nn_.abs() ** 2, 2 ** nn_.abs(), nn_ ** 0.5, torch.pow(x, 0), x.abs() ** -1.5)


@fn_case("frexp_ldexp_nextafter_signbit_copysign", lambda i=0: (R(7) * 10 ** (3 * i),))
def frexp_ldexp_nextafter_signbit_copysign(x):
    """Float bit-level helpers: frexp (mantissa in [0.5, 1), int exponent; zero, inf and -0
    included), ldexp back, nextafter toward +inf and 0, signbit of -0.0, copysign with -0.0."""
    x = x.clone()
    x[0] = 0.0
    x[1] = -0.0
    x[2] = float("inf")
    m, e = torch.frexp(x)
    return (m, e, torch.ldexp(m, e), torch.nextafter(x, torch.full_like(x, float("inf"))),
            torch.nextafter(x, torch.zeros_like(x)), torch.signbit(x), torch.copysign(torch.ones_like(x), x),
            torch.copysign(x, torch.tensor(-0.0)))


@fn_case("kron_block_diag_combinations_vander_cartesian", lambda i=0: (R(2, 3), R(3, 2), R(4 + i)))
def kron_block_diag_combinations_vander_cartesian(a, b, v):
    """Structured constructors: kron of non-square matrices, block_diag with a 0-d and a 1-d
    block, combinations (r=2, with_replacement), cartesian_prod, vander(increasing=True)."""
    return (torch.kron(a, b), torch.block_diag(a, b, torch.tensor(5.0), v[:2]), torch.combinations(v, 2),
            torch.combinations(v[:3], 2, with_replacement=True), torch.cartesian_prod(v[:2], v[2:4]),
            torch.vander(v, N=3, increasing=True), torch.linalg.vander(v[:3]))


@fn_case("cov_fweights_aweights_corrcoef_constant_row", lambda i=0: (R(3, 8), I(1, 4, 8), U(8)))
def cov_fweights_aweights_corrcoef_constant_row(x, fw, aw):
    """torch.cov with integer frequency weights and float analytic weights, correction 0 and 1,
    corrcoef with one constant row (zero variance: NaN row and column)."""
    x = x.clone()
    x[2] = 1.5
    return (torch.cov(x), torch.cov(x, correction=0), torch.cov(x, fweights=fw), torch.cov(x, aweights=aw),
            torch.cov(x, fweights=fw, aweights=aw, correction=0), torch.corrcoef(x))


@fn_case("int16_wraparound_shifts_past_width", lambda i=0: (I(-30000, 30000, 8, dtype=torch.int16), I(0, 20, 8, dtype=torch.int16)))
def int16_wraparound_shifts_past_width(a, s):
    """int16 arithmetic: add / mul wrapping around, floor_divide and remainder of negatives by
    negative divisors, shifts by amounts from 0 up to past the width (16, 19), arithmetic right
    shift of negatives, bitwise xor / not, and promotion with an int32 tensor."""
    d = torch.tensor([-7, 3, -1, 5, -2, 9, -30000, 1], dtype=torch.int16)
    return (a + a, a * 3, a // d, a % d, torch.fmod(a, d), a << s, a >> s, a ^ s, ~a,
            a + torch.ones(8, dtype=torch.int32) * 70000, (a >> 15).sum())


@fn_case("uint8_saturating_sub_abs_diff_mean", lambda i=0: (I(0, 256, 4, 6, dtype=torch.uint8), I(0, 256, 4, 6, dtype=torch.uint8)))
def uint8_saturating_sub_abs_diff_mean(a, b):
    """uint8 image arithmetic: wrapping a - b, saturating by going through int16 and clamping,
    absolute difference as max - min, sums (promoted to int64), mean over a float cast, and
    uint8 * float scalar (float result), uint8 // 3, negation wrapping."""
    sat = (a.to(torch.int16) - b.to(torch.int16)).clamp(0, 255).to(torch.uint8)
    ad = torch.max(a, b) - torch.min(a, b)
    return a - b, sat, ad, ad.sum(), ad.float().mean(), a * 0.5, a // 3, -a, a.sum(1, dtype=torch.uint8)


@fn_case("bool_promotion_cumsum_logical_xor_empty_any", lambda i=0: (torch.rand(3, 5) > 0.5, R(3, 5)))
def bool_promotion_cumsum_logical_xor_empty_any(m, x):
    """bool tensors: sum / cumsum give int64, bool * float, bool + bool (int64... no: bool + bool is
    bool or), ~ and ^, logical_xor with a float, any / all over an empty dim, argmax of bools,
    mean of bool via float, bool as index into a float."""
    e = m[:, :0]
    return (m.sum(1), m.cumsum(1), m * x, m + m, m ^ ~m, torch.logical_xor(m, x), e.any(1), e.all(1),
            m.int().argmax(1), m.float().mean(), x[m], m & (x > 0), m.to(torch.float16) + 1)


@fn_case("zero_size_matmul_reductions_topk_cat", lambda i=0: (R(3, i), R(i, 4), R(0, 5)))
def zero_size_matmul_reductions_topk_cat(a, b, e):
    """Zero-size dimensions: (3, 0) @ (0, 4) is zeros (and nonzero sizes on the last call), sum of
    an empty dim 0 and prod 1, logsumexp -inf, softmax of an empty batch, topk(k=0), cat with an
    empty tensor, mean of empty (NaN), empty bmm."""
    return (a @ b, e.sum(0), e.prod(0), torch.logsumexp(e, 0), e.softmax(-1), torch.topk(a, 0, dim=1)[0],
            torch.cat([e, torch.ones(2, 5)], 0), e.mean(0), torch.bmm(a[None], b[None]), e.amax(1), e.std(0))


@fn_case("python_scalar_extremes_overflow_subnormal", lambda i=0: (R(5), I(-5, 5, 5), I(-5, 5, 5, dtype=torch.int32)))
def python_scalar_extremes_overflow_subnormal(x, n, m):
    """Python scalars of extreme magnitude with float32 / int tensors: * 1e308 (inf in float32),
    / 1e-320 (the scalar is 0 in float32), + 2 ** 62 on int64, int32 * 2 ** 20 wrapping, a huge int
    scalar with a float tensor, 1e-45 (float32's smallest subnormal), -0.0 * x."""
    return (x * 1e308, x / 1e-320, x * 1e-320, n + 2 ** 62, (n + 2 ** 62) * 2, m * 2 ** 20 * 4096, x + float(2 ** 70),
            x * 1e-45, -0.0 * x, x - 1e38 * 10, torch.full_like(x, 3.4e38) * 2)


class NoncontigInplace(nn.Module):
    """In-place writes through strided views of an input and of a buffer: every other column
    mul_, a transposed view add_, diagonal fill_, narrow().copy_, an unfold window read after,
    index_put_ through a permuted view."""

    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(4, 6))

    def forward(self, x):
        x[:, ::2].mul_(2)
        x.t()[1:3].add_(1)
        x.diagonal().fill_(-1)
        self.acc.narrow(1, 2, 3).copy_(x[:, :3])
        self.acc.t()[::2] += 0.5
        w = x.unfold(1, 3, 2)
        y = x.permute(1, 0)
        y[torch.tensor([0, 5]), torch.tensor([1, 3])] = 7.0
        return w.sum(-1), x * 1, self.acc.clone()


case("noncontiguous_strided_views_written_in_place", lambda i=0: (R(4, 6),))(lambda: NoncontigInplace())


@fn_case("zero_d_promotion_index_and_bool", lambda i=0: (I(0, 5, 3, 4, dtype=torch.int32), torch.tensor(2.5), torch.tensor(3),
                                                        torch.tensor(True), R(3, 4, dtype=torch.float16)))
def zero_d_promotion_index_and_bool(a, f0, i0, b0, h):
    """0-d tensors in promotion: int32 tensor + 0-d float32 (float32, not int), float16 tensor
    + 0-d float32 (stays float16), int32 * 0-d int64 (stays int32), 0-d int as an index, 0-d
    bool in where, 0-d results of reductions multiplied by 1-d."""
    return (a + f0, h + f0, a * i0, a[i0 - 1], torch.where(b0, a, -a), h * a, (a.sum() * f0).dtype == torch.float32,
            a.max() * torch.ones(2, dtype=torch.float16), i0 / 2, i0 // f0)


@fn_case("nan_inf_ordering_maximum_fmax_sort_topk", lambda i=0: (R(3, 6),))
def nan_inf_ordering_maximum_fmax_sort_topk(x):
    """NaN / inf placement: maximum propagates NaN, fmax ignores it, clamp keeps NaN, sort puts NaN
    last (ascending) and first (descending), topk treats NaN as the largest, argmax picks the
    NaN, logsumexp of an all -inf row, softmax with +inf (NaN), amax/amin, nansum."""
    x = x.clone()
    x[0, 1] = float("nan")
    x[1, 2] = float("inf")
    x[1, 4] = float("-inf")
    x[2] = float("-inf")
    y = torch.zeros_like(x)
    return (torch.maximum(x, y), torch.fmax(x, y), torch.fmin(x, y), x.clamp(-1, 1), x.sort(1), x.sort(1, descending=True),
            x.topk(2, 1), x.argmax(1), torch.logsumexp(x, 1), x.softmax(1), x.amax(1), x.amin(1), x.nansum(1))


@fn_case("complex64_mul_conj_abs_angle_exp_views", lambda i=0: (R(4, 3, 2), R(4, 3, 2)))
def complex64_mul_conj_abs_angle_exp_views(a, b):
    """complex64 through view_as_complex: products with conj, abs / angle (angle of 0 is 0), exp,
    division by a complex with a zero, matmul, view_as_real of the result, real / imag views."""
    za, zb = torch.view_as_complex(a), torch.view_as_complex(b.contiguous())
    za = za.clone()
    za[0, 0] = 0
    p = za * zb.conj()
    return (torch.view_as_real(p), p.abs(), za.angle(), torch.view_as_real(torch.exp(za)), torch.view_as_real(zb / za),
            torch.view_as_real(za.T @ zb), p.real, p.imag.sum())


@fn_case("float16_bfloat16_cpu_accumulation_rounding", lambda i=0: (R(4096) * 10, R(4, 300)))
def float16_bfloat16_cpu_accumulation_rounding(x, y):
    """Low precision on CPU: float16 and bfloat16 sums of 4096 elements (eager accumulates in
    float32 and rounds once), cumsum in float16, mean, softmax / log_softmax in bf16, an
    elementwise chain rounded after every op, bf16 + fp16 promoting to float32."""
    h, bf = x.half(), x.bfloat16()
    yh, yb = y.half(), y.bfloat16()
    return (h.sum(), bf.sum(), h[:500].cumsum(0), yb.mean(1), yb.softmax(-1), yh.log_softmax(-1),
            (yh * 1.1 + 0.3) * yh - 1, yb.exp() * yb, (bf[:4] + h[:4]).dtype == torch.float32, yh.var(1), yb.norm(dim=1))


@fn_case("integer_division_by_zero_raises", lambda i=0: (I(-9, 9, 6), I(1, 5, 6) * (0 if i == 2 else 1)))
def integer_division_by_zero_raises(a, d):
    """Integer floor_divide / remainder by a zero tensor raise ZeroDivisionError in eager (a
    RuntimeError), also on the compiled side; true division of ints by zero gives inf / NaN."""
    t = a / d
    return a // d, a % d, t


@fn_case("lerp_weight_outside_unit_addcdiv_value", lambda i=0: (R(6), R(6), torch.tensor([-1.5, -0.4, 0.0, 0.5, 0.7, 2.0])))
def lerp_weight_outside_unit_addcdiv_value(a, b, w):
    """lerp with tensor and scalar weights below 0, above 1 and around 0.5 (eager switches
    formulas at |w| < 0.5), addcdiv / addcmul with value=, torch.lerp_ on a clone."""
    c = a.clone()
    c.lerp_(b, 0.75)
    return (torch.lerp(a, b, w), torch.lerp(a, b, 1.5), torch.addcdiv(a, b, w.abs() + 1, value=-0.5),
            torch.addcmul(a, b, w, value=3), c)


@fn_case("xlogy_sinc_hypot_heaviside_logaddexp2_edges", lambda i=0: (R(6), R(6)))
def xlogy_sinc_hypot_heaviside_logaddexp2_edges(x, y):
    """Special elementwise functions at their edge points: xlogy(0, 0) = 0 and xlogy(0, NaN) = NaN,
    xlog1py, sinc(0) = 1, hypot with inf, heaviside with zero inputs, logaddexp2 of -inf pairs,
    i0 / special.i1e, erfcx for large arguments."""
    x = x.clone()
    y = y.clone()
    x[0], y[0] = 0, 0
    x[1], y[1] = 0, float("nan")
    x[2], y[2] = float("-inf"), float("-inf")
    x[3] = float("inf")
    return (torch.xlogy(x, y), torch.special.xlog1py(x, y), torch.sinc(x), torch.hypot(x, y),
            torch.heaviside(x.nan_to_num(), torch.tensor(0.5)), torch.logaddexp2(x, y), torch.i0(y.nan_to_num()),
            torch.special.i1e(y.nan_to_num()), torch.special.erfcx(y.nan_to_num() * 10))


@fn_case("gcd_lcm_isin_invert_count_nonzero", lambda i=0: (I(-20, 20, 8), I(-6, 6, 8)))
def gcd_lcm_isin_invert_count_nonzero(a, b):
    """Integer helpers: gcd / lcm of negatives and zeros (gcd(0, 0) = 0), isin with invert and
    assume_unique, count_nonzero over a dim, bincount of a shifted input."""
    a = a.clone()
    a[0], b[0] = 0, 0
    return (torch.gcd(a, b), torch.lcm(a, b), torch.isin(a, b), torch.isin(a, torch.tensor([0, 3, -4]), invert=True),
            torch.count_nonzero(torch.stack([a, b]), dim=1), torch.bincount(a + 20, minlength=41))


@fn_case("take_along_dim_index_reduce_renorm_kthvalue", lambda i=0: (R(4, 5), I(0, 4, 3)))
def take_along_dim_index_reduce_renorm_kthvalue(x, idx):
    """take_along_dim with argsort indices and with a broadcast index, index_reduce prod / amax with
    include_self=False (a row never indexed keeps its value), renorm(p=2, maxnorm), kthvalue,
    cummin (ties), nanquantile."""
    srt = torch.take_along_dim(x, x.argsort(1), dim=1)
    bc = torch.take_along_dim(x, torch.tensor([[0], [2], [4], [1]]), dim=1)
    src = torch.arange(15.0).view(3, 5) - 5
    pr = x.clone().index_reduce_(0, idx, src, "prod", include_self=False)
    am = x.clone().index_reduce_(0, idx, src, "amax", include_self=False)
    rn = torch.renorm(x, 2, 0, 1.0)
    xt = x.round()
    return srt, bc, pr, am, rn, torch.kthvalue(x, 2, 1), torch.cummin(xt, 1), torch.nanquantile(x, 0.3, dim=1)


@fn_case("tensordot_multi_dot_matrix_power_negative", lambda i=0: (R(2, 3, 4), R(4, 3, 5), R(3, 3)))
def tensordot_multi_dot_matrix_power_negative(a, b, m):
    """tensordot with paired dim lists and an int, linalg.multi_dot of three, matrix_power with
    0, 3 and -2 (through the inverse) of a well-conditioned matrix, chain of einsum outer."""
    m = m + 4 * torch.eye(3)
    return (torch.tensordot(a, b, dims=([1, 2], [1, 0])), torch.tensordot(a, b[..., 0], dims=1),
            torch.linalg.multi_dot([m, a[0], b[:, :, 0]]), torch.linalg.matrix_power(m, 0),
            torch.linalg.matrix_power(m, 3), torch.linalg.matrix_power(m, -2), torch.einsum("i,j->ij", m[0], a[0, 0]))


@fn_case("broadcast_size_one_inplace_resize_error", lambda i=0: (R(3, 1), R(1, 4), R(4) if i < 2 else R(5)))
def broadcast_size_one_inplace_resize_error(a, b, c):
    """Broadcasting corners: (3, 1) + (1, 4), a size-1 dim against 0, expand(-1, ...), an in-place
    add whose broadcast result is larger than the target (RuntimeError in eager on every call) is
    caught; a later call's mismatched shape raises (both sides)."""
    out = a + b
    z = a[:0] * b
    e = a.expand(-1, 4) * 2
    try:
        a.clone().add_(b)
        ok = 1
    except RuntimeError:
        ok = 0
    return out + c, z, e, ok


@fn_case("grad_clip_value_norm_nonfinite_backward", lambda i=0: (R(5, 4), R(5, 3), 1.0 if i < 2 else float("inf")),
         train=True)
def grad_clip_value_norm_nonfinite_backward(x, y, scale: float):
    """A training step calling clip_grad_value_ and clip_grad_norm_ (which returns the total norm
    and scales by max_norm / (norm + 1e-6) clamped to 1): with an inf loss scale the grads are
    non-finite and the norm inf (error_if_nonfinite=False), NaN-scaled grads kept."""
    w = torch.ones(4, 3, requires_grad=True)
    v = torch.full((3,), 0.5, requires_grad=True)
    loss = ((x @ w + v - y) ** 2).mean() * scale
    loss.backward()
    torch.nn.utils.clip_grad_value_([v], 0.1)
    total = torch.nn.utils.clip_grad_norm_([w, v], max_norm=1.0)
    return total, w.grad, v.grad



# ================================================================== harder edges, varying calls
@fn_case("float_to_uint8_out_of_range_image_save", lambda i=0: (U(2, 3, 4, 5) * 2 - 0.5, R(6) * 10 ** (3 + 3 * i)))
def float_to_uint8_out_of_range_image_save(img, big):
    """Image-saving code that forgets to clamp: (img * 255).byte(), .to(torch.uint8) of values
    below 0 and above 255 (eager wraps through int32: -1 -> 255, 300 -> 44), .round().to(int16),
    int64 / int32 of huge values and of NaN / inf, bool of NaN (True)."""
    big = big.clone()
    big[0] = float("nan")
    big[1] = float("inf")
    return ((img * 255).byte(), (img * 255).round().to(torch.uint8), (img * 1000).to(torch.int16),
            (img * 300).to(torch.int8), big.to(torch.int64), big.to(torch.int32), big.bool(), big.to(torch.uint8))


@fn_case("shift_amounts_negative_and_past_width", lambda i=0: (I(-100, 100, 8), I(-3, 70, 8), I(0, 256, 8, dtype=torch.uint8)))
def shift_amounts_negative_and_past_width(a, s, u):
    """Shifts whose amount is negative or at least the width: eager gives 0 for << and the sign
    fill for >> (no undefined behaviour); uint8 shifted by 8 and 9; Python int amounts too."""
    su = (s.abs() % 12).to(torch.uint8)
    return a << s, a >> s, u << su, u >> su, a << 63, a >> 64, u << 8, torch.bitwise_left_shift(a, 65)


def _oob(i, n):
    return torch.tensor([0, n - 1, n + 3 if i == 2 else 1])


@fn_case("gather_index_out_of_bounds_later_call", lambda i=0: (R(4, 6), _oob(i, 6).view(1, 3).expand(4, 3).contiguous()))
def gather_index_out_of_bounds_later_call(x, idx):
    """gather with an index past the dim on the last call: eager raises RuntimeError, the compiled
    call must raise too (not read out of bounds)."""
    return torch.gather(x * 2, 1, idx) + 1


@fn_case("index_add_scatter_out_of_bounds_later_call", lambda i=0: (R(5, 3), _oob(i, 5), R(3, 3)))
def index_add_scatter_out_of_bounds_later_call(x, idx, src):
    """index_add_ and scatter_add_ writing through an out-of-range index on the last call (eager:
    IndexError / RuntimeError before any write)."""
    out = (x + 1).index_add_(0, idx, src)
    return out, torch.zeros(6).scatter_add_(0, idx, src[:, 0])


@fn_case("embedding_take_index_put_out_of_bounds_later_call", lambda i=0: (R(6, 4), _oob(i, 6)))
def embedding_take_index_put_out_of_bounds_later_call(w, idx):
    """F.embedding, torch.take and an index_put through advanced indexing with an index past the
    end on the last call: IndexError in eager."""
    e = F.embedding(idx, w) * 2
    t = torch.take(w, idx * 3)
    y = torch.zeros(6)
    y[idx] = 1.0
    return e, t, y


@fn_case("negative_index_tensors_wrap_index_select_raises", lambda i=0: (R(5, 4), torch.tensor([-1, -5, 2]) if i < 2 else torch.tensor([-6, 0, 1])))
def negative_index_tensors_wrap_index_select_raises(x, idx):
    """Negative index tensors: x[idx] and index_put wrap (-1 is the last row), x[:, idx] wraps on
    the dim; -6 on a dim of 5 raises IndexError on the last call."""
    y = x.clone()
    y[idx] = 0.0
    return x[idx] * 2, y, x.t()[:, idx[:2]].sum(0)


@fn_case("one_hot_num_classes_exceeded_later_call", lambda i=0: (torch.tensor([0, 2, 1]) + (i == 2) * 2, R(3, 3)))
def one_hot_num_classes_exceeded_later_call(t, logits):
    """one_hot with num_classes fixed at 3 receiving class 4 on the last call (eager raises
    RuntimeError: class values must be smaller than num_classes)."""
    oh = F.one_hot(t, 3).float()
    return (oh * logits.log_softmax(-1)).sum(-1)


def _dtypes(i=0):
    return (R(3, 5).to([torch.float32, torch.float64, torch.float16, torch.bfloat16][i]),)


@fn_case("same_function_four_dtypes_across_calls", _dtypes, ncalls=4)
def same_function_four_dtypes_across_calls(x):
    """One function called with float32, float64, float16 and bfloat16 inputs in turn: softmax,
    layer_norm, a pow / exp chain, var, a Python float constant, integer conversion of the
    rounded result."""
    y = x * 1.7 - 0.3
    return (y.softmax(-1), F.layer_norm(y, (5,)), y.pow(3).exp() / 10, y.var(0), (y * 4).round().to(torch.int64),
            y.sum(dtype=torch.float32))


def _nan_later(i=0):
    x = R(4, 8)
    if i == 2:
        x[0, 3] = float("nan")
        x[1] = 5.0
        x[2, 1] = float("inf")
        x[3, :4] = float("-inf")
    return (x,)


@fn_case("nan_inf_constant_rows_on_later_call_norms", _nan_later)
def nan_inf_constant_rows_on_later_call_norms(x):
    """Reductions and norms given finite inputs first, then NaN / inf / a constant row on the last
    call: layer_norm (zero variance row: exact output 0), F.normalize, var / std, max / argmax,
    logsumexp, cumsum, softmax, RMS norm, group_norm."""
    return (F.layer_norm(x, (8,)), F.normalize(x, dim=1), x.var(1), x.std(1, correction=0), x.max(1), x.argmax(1),
            x.logsumexp(1), x.cumsum(1), x.softmax(1), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
            F.group_norm(x[None], 2)[0], x.min(), x.argmin())


def _big(i=0):
    x = R(1 << 18)
    x[1000] = 9.0
    x[200000] = 9.0
    if i == 2:
        x[150000] = float("nan")
        x[7] = float("nan")
    return x, I(-1000, 1000, 1 << 18, dtype=torch.int32)


@fn_case("large_parallel_reductions_ties_nan_int32_sums", _big)
def large_parallel_reductions_ties_nan_int32_sums(x, n):
    """Reductions over 256K elements (past the parallel threshold): argmax with a tie between
    chunks (first index), max with NaN in two chunks on the last call, int32 sum (int64 result)
    and prod-free mean of its float cast, cumsum of int32 (int64), amin of a strided view."""
    return (x.argmax(), x.max(), x.view(512, 512).argmax(1), n.sum(), n.float().mean(), n.cumsum(0)[-5:],
            x[::3].amin(), (x * 2 + 1).view(64, -1).sum(1), n.view(512, 512).amax(0))


def _layouts(i=0):
    base = R(6, 8)
    return ((base, base.t(), base[::2, 1::2], base.expand(3, 6, 8)[1])[i % 3 if i < 3 else 3],)


@fn_case("input_layouts_change_transposed_strided_expanded", _layouts, ncalls=4)
def input_layouts_change_transposed_strided_expanded(x):
    """The same function fed a contiguous input, then its transpose, then a strided slice, then an
    expanded view: matmul with its transpose, softmax on dim 0, a reduction over the last dim,
    an in-place write on a clone and an output view of the input."""
    y = x.clone()
    y[:, 0] = -1
    return x @ x.t(), x.softmax(0), x.sum(-1), y, x[:, 1:]


def _sizes(i=0):
    return (R([1, 4, 0, 1][i], 5),)


@fn_case("batch_sizes_one_four_zero_one", _sizes, ncalls=4)
def batch_sizes_one_four_zero_one(x):
    """Batch sizes 1, 4, 0, 1 in turn: softmax, layer_norm, a matmul, mean over the batch (NaN
    when empty), sum, a size-1 broadcast against a fixed (3, 1, 5) tensor, amax over dim 1."""
    w = torch.linspace(-1, 1, 25).view(5, 5)
    c = torch.arange(15.0).view(3, 1, 5)
    return (x.softmax(-1), F.layer_norm(x, (5,)), x @ w, x.mean(0), x.sum(0), x[None] * c, x.amax(1) if x.numel() else x.sum(1))


@fn_case("fp16_bf16_intermediate_overflow_rounding_chain", lambda i=0: (R(6, 5) * (4 + 40 * i),))
def fp16_bf16_intermediate_overflow_rounding_chain(x):
    """float16 and bfloat16 chains where eager rounds after every op: (h * 300) * 300 / 300 overflows
    to inf in float16 (not in float32), (b + 1000) - 1000 loses the fraction in bf16, exp of
    12 in fp16 (162754.8 -> inf), a division of two rounded values."""
    h, b = x.half(), x.bfloat16()
    return ((h * 300) * 300 / 300, (b + 1000) - 1000, (h + 12).exp(), h / (h * 3), (b * b).sqrt(), h.float() * 300 * 300 / 300)


@fn_case("clamp_where_int_float_promotion_bounds", lambda i=0: (I(-5, 5, 6), I(-5, 5, 6, dtype=torch.int32), torch.rand(6) > 0.5))
def clamp_where_int_float_promotion_bounds(a, b, m):
    """Promotion in clamp / where with Python floats: clamp of int64 by a float bound gives float,
    by int bounds stays int64, min > max (all max), where(mask, int32, 0.5) float32, where with two
    Python scalars, int32 clamp_ in place by a float (stays int32? eager: error or truncation)."""
    c = b.clone()
    c.clamp_(min=-2, max=2)
    return (a.clamp(min=0.5), a.clamp(-2, 3), a.clamp(min=3, max=-1), torch.where(m, b, 0.5), torch.where(m, 1, -1),
            torch.where(m, b, a), c, torch.clamp(b, max=torch.tensor(1)), a.clamp(min=-1.5, max=2.5))



# ============================================================================ autograd machinery
class CompressedActivations(nn.Module):
    """Activation compression as memory-saving training code writes it: saved_tensors_hooks whose
    pack stores every saved activation in float16 (bfloat16 for the second block) and unpack
    returns float32, so the gradients are computed from the rounded activations; a counter of
    packed tensors kept on the module."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)
        self.packed = 0

    def forward(self, x):
        def pack(t):
            self.packed += 1
            return t.to(torch.float16)

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t.to(torch.float32)):
            h = torch.tanh(self.l1(x)) * 3.3
            y = torch.sigmoid(self.l2(h)).pow(2)
        loss = y.sum()
        loss.backward()
        return loss.detach(), self.l1.weight.grad.clone(), self.packed


case("saved_tensors_hooks_fp16_compressed_activations", lambda: (R(4, 6) * 3,), train=True)(lambda: CompressedActivations())


class ForwardADJvp(nn.Module):
    """Forward-mode AD with dual tensors: a jvp of a small network at x along t inside
    fwAD.dual_level(), make_dual / unpack_dual, on every call."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 4)

    def forward(self, x, t):
        import torch.autograd.forward_ad as fwAD
        with fwAD.dual_level():
            d = fwAD.make_dual(x, t)
            y = torch.sin(self.l(d)) * d.sum(-1, keepdim=True)
            p, tan = fwAD.unpack_dual(y)
        return p, tan


case("forward_ad_dual_level_jvp", lambda: (R(2, 3), R(2, 3)))(lambda: ForwardADJvp())


class RetainGraphTwice(nn.Module):
    """Two backward passes over one graph: backward(retain_graph=True), the grad cloned, a second
    backward of a multiple of the same loss accumulating into .grad (GAN / multi-loss code)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)

    def forward(self, x):
        y = torch.tanh(self.l(x)).sum()
        y.backward(retain_graph=True)
        g1 = self.l.weight.grad.clone()
        (y * 2).backward()
        return g1, self.l.weight.grad.clone(), y.detach()


case("backward_retain_graph_twice_accumulates", lambda: (R(4, 3),), train=True)(lambda: RetainGraphTwice())



class AnomalyCaughtNaN(nn.Module):
    """Debugging code left in a training step: detect_anomaly(check_nan=True) around a forward
    whose sqrt of negative values makes a NaN gradient; the backward's RuntimeError is caught and
    the step skipped (the grads eager leaves are None)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        with torch.autograd.detect_anomaly(check_nan=True):
            y = torch.sqrt(self.l(x))
            try:
                y.sum().backward()
                ok = 1
            except RuntimeError:
                ok = 0
        return y.detach(), ok, self.l.weight.grad


case("detect_anomaly_caught_nan_backward", lambda: (R(2, 3),), train=True)(lambda: AnomalyCaughtNaN())


class NodeHooks(nn.Module):
    """Hooks on autograd nodes: y.grad_fn.register_hook halving the gradient its node passes on,
    and a prehook tripling what reaches another node; removed after the backward."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(3, 3), nn.Linear(3, 2)

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        y = torch.sigmoid(self.l2(h))
        a = h.grad_fn.register_hook(lambda gi, go: (gi[0] * 0.5,))
        b = y.grad_fn.register_prehook(lambda go: (go[0] * 3,))
        y.sum().backward()
        a.remove()
        b.remove()
        return self.l1.weight.grad.clone(), self.l2.weight.grad.clone()


case("grad_fn_register_hook_prehook_scaling", lambda: (R(4, 3),), train=True)(lambda: NodeHooks())


class MutateSaved(nn.Module):
    """allow_mutation_on_saved_tensors: an activation saved for sin's backward is then doubled in
    place (a TorchDispatchMode clones it before the write), backward inside the context."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        with torch.autograd.graph.allow_mutation_on_saved_tensors():
            y = self.l(x)
            z = y.sin()
            y.mul_(2)
            z.sum().backward()
        return self.l.weight.grad.clone(), y.detach()


case("allow_mutation_on_saved_tensors_dispatch_mode", lambda: (R(2, 3),), train=True)(lambda: MutateSaved())



class ModuleFullBackwardHooks(nn.Module):
    """nn.Module full backward hooks: a hook logging grad_output norms (a Python list on the
    module) and halving grad_input, and a backward pre-hook doubling grad_output."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)
        self.log = []
        self.a.register_full_backward_hook(self._log_and_halve)   # (bound methods: deep copies call their own)
        self.b.register_full_backward_pre_hook(self._double)

    def _log_and_halve(self, m, gi, go):
        self.log.append(go[0].norm().item())
        return (gi[0] * 0.5,)

    def _double(self, m, go):
        return (go[0] * 2,)

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        y.sum().backward()
        return y.detach(), len(self.log), self.log[-1], x.grad.clone()


case("module_full_backward_hooks_log_scale", lambda: (R(2, 3).requires_grad_(),), train=True)(lambda: ModuleFullBackwardHooks())


class WGANGPBatchNormDropout(nn.Module):
    """WGAN-GP with a critic that has BatchNorm (train: running stats written) and Dropout (the
    RNG): interpolates by torch.rand, the input gradient by autograd.grad(create_graph=True),
    the penalty and the critic losses backpropagated together."""

    def __init__(self):
        super().__init__()
        self.d = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.LeakyReLU(0.2), nn.Dropout(0.3), nn.Linear(8, 1))

    def forward(self, real, fake):
        a = torch.rand(real.shape[0], 1)
        xi = (a * real + (1 - a) * fake).requires_grad_(True)
        g, = torch.autograd.grad(self.d(xi).sum(), xi, create_graph=True)
        gp = ((g.norm(2, dim=1) - 1) ** 2).mean()
        loss = self.d(fake).mean() - self.d(real).mean() + 10 * gp
        loss.backward()
        return loss.detach(), gp.detach(), [p.grad.clone() for p in self.d.parameters()]


case("wgan_gp_critic_batchnorm_dropout_create_graph", lambda: (R(6, 4), R(6, 4)), train=True)(lambda: WGANGPBatchNormDropout())


class PathLengthReg(nn.Module):
    """StyleGAN2 path length regularisation: grad of (img * noise).sum() with respect to the
    latents with create_graph, the running mean path length lerped in a no_grad buffer."""

    def __init__(self):
        super().__init__()
        self.g = nn.Sequential(nn.Linear(4, 16), nn.LeakyReLU(0.2), nn.Linear(16, 12))
        self.register_buffer("mean_path", torch.zeros(()))

    def forward(self, w):
        w = w.requires_grad_(True)
        img = self.g(w)
        g, = torch.autograd.grad((img * torch.randn_like(img) / 3).sum(), w, create_graph=True)
        pl = g.square().sum(1).sqrt()
        with torch.no_grad():
            self.mean_path.lerp_(pl.mean(), 0.01)
        pen = (pl - self.mean_path).square().mean()
        pen.backward()
        return pen.detach(), [p.grad.clone() for p in self.g.parameters() if p.grad is not None]


case("stylegan2_path_length_regularization", lambda: (R(5, 4),), train=True)(lambda: PathLengthReg())


class GradScalerCPU(nn.Module):
    """A CPU mixed-precision step with torch.amp.GradScaler: scale, backward, unscale_, clip,
    scaler.step (skipped when the grads are inf), update (scale halved or grown every 2 steps);
    inputs of 1e38 on the third call overflow."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.l.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.l(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.l.parameters(), 1.0)
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach(), self.scaler.get_scale()


case("grad_scaler_cpu_inf_step_skipped", lambda i=0: (R(3, 4) * (1e38 if i == 2 else 1), R(3, 2)), train=True, ncalls=4)(
    lambda: GradScalerCPU())


class ReentrantCheckpoint(nn.Module):
    """Reentrant activation checkpointing (use_reentrant=True, RNG preserved for the dropout) and
    checkpoint_sequential of the same block, both backpropagated."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Dropout(0.2), nn.Linear(4, 4))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint, checkpoint_sequential
        h = checkpoint(self.a, x, use_reentrant=True, preserve_rng_state=True)
        h2 = checkpoint_sequential(self.a, 2, x, use_reentrant=False)
        (h.sum() + h2.pow(2).sum()).backward()
        return h.detach(), [p.grad.clone() for p in self.parameters()]


case("checkpoint_reentrant_and_sequential_dropout", lambda: (R(3, 4).requires_grad_(),), train=True)(
    lambda: ReentrantCheckpoint())


class SchedulersInside(nn.Module):
    """OneCycleLR over AdamW and an AveragedModel EMA (get_ema_multi_avg_fn) updated inside the
    step: the learning rate a Python float from the scheduler, n_averaged a buffer."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)
        self.opt = torch.optim.AdamW(self.l.parameters(), lr=0.1)
        self.sch = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=0.5, total_steps=10)
        self.avg = torch.optim.swa_utils.AveragedModel(self.l, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))

    def forward(self, x):
        self.opt.zero_grad()
        self.l(x).pow(2).mean().backward()
        self.opt.step()
        self.sch.step()
        self.avg.update_parameters(self.l)
        return self.sch.get_last_lr()[0], self.avg(x), self.avg.n_averaged.clone()


case("onecycle_adamw_swa_ema_inside_step", lambda: (R(3, 4),), train=True, ncalls=4)(lambda: SchedulersInside())


class ScaleMulMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 10 if func is torch.mul else out


@fn_case("torch_function_mode_entered_inside", lambda: (R(2, 3),))
def torch_function_mode_entered_inside(x):
    """A TorchFunctionMode (torch.mul results scaled by 10) entered inside the function around
    part of it, the rest outside the mode."""
    with ScaleMulMode():
        y = torch.mul(x.tanh(), 2)
    return y, torch.mul(x, 2)


@fn_case("quantized_tensors_per_tensor_per_channel", lambda: (R(2, 4) * 3,))
def quantized_tensors_per_tensor_per_channel(x):
    """Post-training quantization helpers on quantized dtypes: quantize_per_tensor to quint8,
    quantize_per_channel to qint8, int_repr, dequantize, q_scale / q_zero_point, quantized add."""
    q = torch.quantize_per_tensor(x * 2, 0.05, 10, torch.quint8)
    qc = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2]), torch.tensor([0, 3]), 0, torch.qint8)
    a = torch.ops.quantized.add(q, q, 0.2, 0)
    return q.int_repr(), q.dequantize(), qc.dequantize(), qc.int_repr(), a.dequantize(), q.q_scale(), q.q_zero_point()


@fn_case("sparse_coo_csr_masked_nested", lambda: (R(2, 4), R(4, 3), torch.rand(2, 4) > 0.3, R(3, 4)))
def sparse_coo_csr_masked_nested(x, w, m, b):
    """Tensor layouts and wrappers: a COO tensor from a thresholded input (sparse.mm, coalesce,
    sparse.sum), CSR @ dense, torch.masked reductions, and a nested tensor padded back."""
    sp = (x * (x > 0.5)).to_sparse()
    csr = x.relu().to_sparse_csr()
    nt = torch.nested.nested_tensor([x, b])
    return (torch.sparse.mm(sp, w), sp.coalesce().values(), csr @ w, torch.sparse.sum(sp, dim=1).to_dense(),
            torch.masked.sum(x, 1, mask=m),
            torch.masked.softmax(x, 1, mask=m), torch.nested.to_padded_tensor(nt, 0.0))


def _nonneg(i=0):
    x = torch.rand(3, 4)
    if i == 2:
        x[1, 1] = -1
    return (x,)


@fn_case("asserts_on_tensor_conditions_later_call", _nonneg)
def asserts_on_tensor_conditions_later_call(x):
    """Input validation written with assert / torch._assert / torch._check on tensor conditions;
    the last call's input violates them (eager raises AssertionError, compiled must too)."""
    assert torch.all(x >= 0), "negative input"
    torch._assert(x.shape[1] == 4, "four features")
    torch._check(bool((x <= 1).all()), lambda: "above one")
    return x.sqrt()



def _enc_in(i=0):
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0, 3 + i % 2:] = True
    pad[1, 5:] = True
    return R(3, 6, 16), pad


def _inference_ctx(i):
    return torch.inference_mode() if i == 1 else torch.no_grad()


class PaddedEncoder(nn.Module):
    """A text encoder at inference (no_grad / inference_mode, eval): nn.TransformerEncoder with a
    src_key_padding_mask, which eager runs on its nested-tensor fast path (padded positions 0)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2,
                                         enable_nested_tensor=True)

    def forward(self, x, pad):
        return self.enc(x, src_key_padding_mask=pad)


case("transformer_encoder_padding_mask_no_grad_inference", _enc_in, context=_inference_ctx)(
    lambda: PaddedEncoder().eval())



class PaddedSelfAttention(nn.Module):
    """nn.MultiheadAttention at inference (eval, no_grad) with a key_padding_mask that pads one
    whole sequence, need_weights=False: eager runs its fused fast path."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x, pad):
        pad = pad.clone()
        pad[0] = True
        return self.mha(x, x, x, key_padding_mask=pad, need_weights=False)[0]


case("mha_fully_padded_row_no_grad_fast_path", _enc_in, context=_inference_ctx)(lambda: PaddedSelfAttention().eval())


# =============================================================================== runner
# bench/modules5.py's runner (the same case records, comparison and categories) over this corpus's CASES.
if __name__ == "__main__":
    import modules5
    modules5.main(CASES, __file__, __doc__)
