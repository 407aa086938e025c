"""Held-out set 11: programs from domains and idioms the earlier sets leave out, written the way those domains'
reference code writes them: image processing as kornia writes it (Gaussian and Sobel filters by grouped conv2d
with per-sample sigmas, RGB -> HSV -> RGB with torch.where over hue sectors and a gather, YUV, seeded affine
augmentations through affine_grid / grid_sample, a bilateral filter over unfolded windows), optical flow (RAFT's
all-pairs correlation pyramid and its lookup through grid_sample, an unsupervised flow loss with backward
warping and a forward-backward occlusion mask), super-resolution (a channels_last EDSR with pixel_shuffle and a
frozen MeanShift, its PSNR under torch.inference_mode inside the training step), tabular (entmax-1.5 by sort /
cumsum with its own backward), time series (Informer's ProbSparse attention with sampled keys, topk queries
and advanced-index writes; a TFT gated residual / variable selection network), LLM serving (HF-style logits
processors: repetition penalty by gather / scatter, top-k, top-p by sort / cumsum / scatter, min-p, a
generation loop with unfinished-sequence bookkeeping; a static KV cache written by index_copy_ with
dynamic-NTK RoPE and a sliding window; a prefix-LM mask), weight-only quantization (int4 packed two to a
uint8 by shifts, & and |, group scales and zeros; NF4 with a lookup table and double-quantized absmax;
LLM.int8's outlier decomposition with an integer matmul), hand-written optimizers (Adafactor's factored
second moments, Muon's Newton-Schulz iteration in bf16, SophiaG's clipped update with a sampled-label
Gauss-Newton estimate every k steps), physics and simulation (D2Q9 lattice Boltzmann streaming by torch.roll,
Lennard-Jones molecular dynamics with periodic boundaries by remainder and minimum images, an Ising
checkerboard Metropolis sweep from an owned generator, Conway's life by conv2d with circular padding until it
settles), numerical methods (preconditioned conjugate gradient to a tolerance, power iteration with deflation,
Newton's method on Kepler's equation through autograd.grad), evolution strategies (antithetic noise, rank
fitness shaping), a soft rasterizer with sigmoid edges and a soft z-buffer, LLM training tricks (a Switch
router's z-loss, load-balancing loss by one_hot, capacity-limited token dropping by cumsum, expert counts by
bincount), and forward pre-hooks (one with kwargs) that edit inputs and are removed between calls.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state,
counters, the global RNG's state after the call, arguments): bench/heldout4.py's runner and report
(imported, same options):

    python bench/heldout11.py --threads 1 --dtypes fp32
    python bench/heldout11.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout11.py --threads 1 --models kornia_canny,raft_corr --json /tmp/h11.jsonl
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from heldout7 import _opt_state, _state  # noqa: E402  (parameters / gradients / optimizer state as compared)
from heldout9 import _make_ix_like, quantile_loss  # noqa: E402  (entmax's index helper; a pinball loss)
import heldout4  # noqa: E402  (the runner: run_case, diff, main)


# ------------------------------------------------------------------------------------------------ image processing
def gaussian(window_size, sigma):
    """kornia.filters.kernels.gaussian: one 1-D kernel per batch row of sigma (B, 1)."""
    x = (torch.arange(window_size, dtype=sigma.dtype) - window_size // 2).expand(sigma.shape[0], -1)
    if window_size % 2 == 0:
        x = x + 0.5
    gauss = torch.exp(-x.pow(2.0) / (2 * sigma.pow(2.0)))
    return gauss / gauss.sum(-1, keepdim=True)


def filter2d(input, kernel, border_type="reflect"):
    """kornia.filters.filter2d: one kernel per sample, applied to every channel by a grouped conv2d."""
    b, c, h, w = input.shape
    tmp_kernel = kernel[:, None, ...].to(input.dtype)
    tmp_kernel = tmp_kernel.expand(-1, c, -1, -1)
    height, width = tmp_kernel.shape[-2:]
    padding_shape = [(width - 1) // 2, width // 2, (height - 1) // 2, height // 2]
    input = F.pad(input, padding_shape, mode=border_type)
    tmp_kernel = tmp_kernel.reshape(-1, 1, height, width)
    input = input.view(-1, tmp_kernel.size(0), input.size(-2), input.size(-1))
    output = F.conv2d(input, tmp_kernel, groups=tmp_kernel.size(0), padding=0, stride=1)
    return output.view(b, c, h, w)


def gaussian_blur2d(input, kernel_size, sigma):
    ky = gaussian(kernel_size[0], sigma[:, 1:2])
    kx = gaussian(kernel_size[1], sigma[:, 0:1])
    out = filter2d(input, kx[:, None, :])
    return filter2d(out, ky[:, :, None])


def get_sobel_kernel2d(dtype):
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], dtype=dtype)
    return torch.stack([kx, kx.transpose(0, 1)])


def spatial_gradient(input, normalized=True):
    b, c, h, w = input.shape
    kernel = get_sobel_kernel2d(input.dtype)
    if normalized:
        kernel = kernel / kernel.abs().sum(dim=(-2, -1), keepdim=True)
    tmp_kernel = kernel[:, None, ...]
    spatial_pad = [1, 1, 1, 1]
    padded = F.pad(input.reshape(b * c, 1, h, w), spatial_pad, "replicate")
    out = F.conv2d(padded, tmp_kernel, groups=1, padding=0, stride=1)
    return out.reshape(b, c, 2, h, w)


def rgb_to_grayscale(image):
    r, g, b = image.unbind(-3)
    return (0.299 * r + 0.587 * g + 0.114 * b).unsqueeze(-3)


def canny(input, low_threshold=0.1, high_threshold=0.2, kernel_size=(5, 5), sigma=None, eps=1e-6):
    """kornia.filters.canny, its non-maximum suppression by a neighbour filter bank and its hysteresis by
    repeated 3x3 max pooling until the edge map stops changing."""
    x_gray = rgb_to_grayscale(input)
    blurred = gaussian_blur2d(x_gray, kernel_size, sigma)
    gradients = spatial_gradient(blurred, normalized=False)
    gx, gy = gradients[:, :, 0], gradients[:, :, 1]
    magnitude = torch.sqrt(gx * gx + gy * gy + eps)
    angle = torch.atan2(gy, gx)
    angle = 180.0 * angle / math.pi
    angle = torch.round(angle / 45) * 45
    nms_kernels = torch.zeros(8, 1, 3, 3, dtype=input.dtype)
    for k, (dy, dx) in enumerate([(0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1)]):
        nms_kernels[k, 0, 1, 1] = 1.0
        nms_kernels[k, 0, 1 + dy, 1 + dx] = -1.0
    nms_magnitude = F.conv2d(magnitude, nms_kernels, padding=1)
    positive_idx = (angle / 45) % 8
    positive_idx = positive_idx.long()
    negative_idx = ((angle / 45) + 4) % 8
    negative_idx = negative_idx.long()
    channel_select_filtered_positive = torch.gather(nms_magnitude, 1, positive_idx)
    channel_select_filtered_negative = torch.gather(nms_magnitude, 1, negative_idx)
    channel_select_filtered = torch.stack([channel_select_filtered_positive, channel_select_filtered_negative], 1)
    is_max = channel_select_filtered.min(dim=1)[0] > 0.0
    magnitude = magnitude * is_max
    edges = F.threshold(magnitude, low_threshold, 0.0)
    low = magnitude > low_threshold
    high = magnitude > high_threshold
    edges = low * 0.5 + high * 0.5
    edges = edges.to(input.dtype)
    edges_old = -torch.ones(edges.shape, dtype=input.dtype)
    n_iter = 0
    while ((edges_old - edges).abs() != 0).sum() != 0:
        weak = (edges == 0.5).float()
        strong = (edges == 1).float()
        hysteresis_magnitude = F.max_pool2d(strong, 3, stride=1, padding=1)
        hysteresis_magnitude = (hysteresis_magnitude == 1).float() * weak + strong
        edges_old = edges.clone()
        edges = hysteresis_magnitude + (hysteresis_magnitude == 0) * weak * 0.5
        n_iter += 1
    edges = hysteresis_magnitude
    return magnitude, edges, n_iter


def make_canny(dt):
    def run(image, sigma):
        return canny(image, 0.05, 0.15, (5, 5), sigma)
    return run, lambda: None


def canny_inputs(i, dt):
    x = torch.rand(2, 3, 20 + 2 * i, 18, dtype=dt)
    x[:, :, 5:12, 4:10] += 0.8
    return x, torch.rand(2, 2, dtype=dt) + 0.6


def rgb_to_hsv(image, eps=1e-8):
    """kornia.color.rgb_to_hsv: max / argmax, the hue sector chosen by gather over a stacked candidate."""
    max_rgb, argmax_rgb = image.max(-3)
    min_rgb, argmin_rgb = image.min(-3)
    deltac = max_rgb - min_rgb
    v = max_rgb
    s = deltac / (max_rgb + eps)
    deltac = torch.where(deltac == 0, torch.ones_like(deltac), deltac)
    rc, gc, bc = torch.unbind((max_rgb.unsqueeze(-3) - image), dim=-3)
    h1 = bc - gc
    h2 = (rc - bc) + 2.0 * deltac
    h3 = (gc - rc) + 4.0 * deltac
    h = torch.stack((h1, h2, h3), dim=-3) / deltac.unsqueeze(-3)
    h = torch.gather(h, dim=-3, index=argmax_rgb.unsqueeze(-3)).squeeze(-3)
    h = (h / 6.0) % 1.0
    h = 2.0 * math.pi * h
    return torch.stack((h, s, v), dim=-3)


def hsv_to_rgb(image):
    h = image[..., 0, :, :] / (2 * math.pi)
    s = image[..., 1, :, :]
    v = image[..., 2, :, :]
    hi = torch.floor(h * 6) % 6
    f = ((h * 6) % 6) - hi
    one = torch.tensor(1.0, dtype=image.dtype)
    p = v * (one - s)
    q = v * (one - f * s)
    t = v * (one - (one - f) * s)
    hi = hi.long()
    indices = torch.stack([hi, hi + 6, hi + 12], dim=-3)
    out = torch.stack((v, q, p, p, t, v, t, v, v, q, p, p, p, p, t, v, v, q), dim=-3)
    return torch.gather(out, -3, indices)


def rgb_to_yuv(image):
    r, g, b = image[..., 0, :, :], image[..., 1, :, :], image[..., 2, :, :]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = -0.147 * r - 0.289 * g + 0.436 * b
    v = 0.615 * r - 0.515 * g - 0.100 * b
    return torch.stack([y, u, v], -3)


def make_color_jitter(dt):
    """kornia's ColorJitter written out: per-sample hue / saturation / brightness factors from an owned
    generator, hue shifted in HSV (fmod on 2 pi), saturation scaled and clamped, back to RGB; the YUV of the
    result and its luma histogram by torch.histc."""
    gen = torch.Generator().manual_seed(11)

    def jitter(img, hue=0.1, saturation=0.4, brightness=0.2):
        b = img.shape[0]
        hue_f = (torch.rand(b, generator=gen, dtype=img.dtype) * 2 - 1) * hue
        sat_f = 1 + (torch.rand(b, generator=gen, dtype=img.dtype) * 2 - 1) * saturation
        bri_f = (torch.rand(b, generator=gen, dtype=img.dtype) * 2 - 1) * brightness
        hsv = rgb_to_hsv(img)
        h, s, v = torch.chunk(hsv, chunks=3, dim=-3)
        h_out = torch.fmod(h + hue_f.view(-1, 1, 1, 1) * 2 * math.pi, 2 * math.pi)
        h_out = torch.where(h_out < 0, h_out + 2 * math.pi, h_out)
        s_out = torch.clamp(s * sat_f.view(-1, 1, 1, 1), min=0, max=1)
        out = hsv_to_rgb(torch.cat([h_out, s_out, v], dim=-3))
        out = torch.clamp(out + bri_f.view(-1, 1, 1, 1), 0.0, 1.0)
        yuv = rgb_to_yuv(out)
        hist = torch.histc(yuv[:, 0].float(), bins=8, min=0.0, max=1.0)
        return out, yuv, hist
    return jitter, lambda: gen.get_state()


def jitter_inputs(i, dt):
    return (torch.rand(3, 3, 12, 10 + 2 * i, dtype=dt),)


def make_random_affine(dt):
    """kornia / torchvision RandomAffine for a batch: angle, scale, translation and shear drawn per sample
    from an owned generator, the 2x3 matrices built by hand around the image centre, affine_grid +
    grid_sample (reflection padding), a flip by torch.where on a drawn mask; the flipped labels' keypoints
    moved the same way."""
    gen = torch.Generator().manual_seed(5)

    def augment(images, keypoints, degrees=20.0, translate=0.1, scale=(0.8, 1.2), shear=10.0, p_flip=0.5):
        B, C, H, W = images.shape
        angle = (torch.rand(B, generator=gen) * 2 - 1) * degrees
        sc = torch.empty(B).uniform_(scale[0], scale[1], generator=gen)
        tx = (torch.rand(B, generator=gen) * 2 - 1) * translate
        ty = (torch.rand(B, generator=gen) * 2 - 1) * translate
        sh = torch.deg2rad((torch.rand(B, generator=gen) * 2 - 1) * shear)
        flip = torch.rand(B, generator=gen) < p_flip
        a = torch.deg2rad(angle)
        cos, sin = torch.cos(a), torch.sin(a)
        theta = torch.zeros(B, 2, 3)
        theta[:, 0, 0] = cos / sc
        theta[:, 0, 1] = (-sin + torch.tan(sh) * cos) / sc
        theta[:, 1, 0] = sin / sc
        theta[:, 1, 1] = (cos + torch.tan(sh) * sin) / sc
        theta[:, 0, 2] = tx
        theta[:, 1, 2] = ty
        theta[:, 0, :] = torch.where(flip[:, None], -theta[:, 0, :], theta[:, 0, :])
        theta = theta.to(images.dtype)
        grid = F.affine_grid(theta, [B, C, H, W], align_corners=False)
        out = F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        A = torch.cat([theta, torch.tensor([0.0, 0.0, 1.0], dtype=theta.dtype).expand(B, 1, 3)], 1)
        kp = torch.cat([keypoints, torch.ones_like(keypoints[..., :1])], -1)
        kp_out = torch.linalg.solve(A, kp.transpose(1, 2)).transpose(1, 2)[..., :2]
        visible = (kp_out.abs() <= 1).all(-1)
        return out, kp_out, visible, int(flip.sum())
    return augment, lambda: gen.get_state()


def affine_inputs(i, dt):
    return torch.rand(4, 3, 14 + i, 16, dtype=dt), torch.rand(4, 5, 2, dtype=dt) * 2 - 1


def bilateral_blur(input, kernel_size=5, sigma_color=0.1, sigma_space=(1.5, 1.5), border_type="reflect",
                   color_distance_type="l1"):
    """kornia.filters.bilateral_blur: unfold every window, a spatial Gaussian times a range Gaussian on the
    colour distance to the centre pixel, normalised."""
    ky, kx = kernel_size, kernel_size
    pad_y, pad_x = (ky - 1) // 2, (kx - 1) // 2
    padded_input = F.pad(input, (pad_x, pad_x, pad_y, pad_y), mode=border_type)
    unfolded_input = padded_input.unfold(2, ky, 1).unfold(3, kx, 1).flatten(-2)
    guidance = input
    unfolded_guidance = unfolded_input
    diff = unfolded_guidance - guidance.unsqueeze(-1)
    if color_distance_type == "l1":
        color_distance_sq = diff.abs().sum(1, keepdim=True).square()
    else:
        color_distance_sq = diff.square().sum(1, keepdim=True)
    color_kernel = (-0.5 / sigma_color ** 2 * color_distance_sq).exp()
    sig = torch.tensor(sigma_space, dtype=input.dtype).view(1, 2)
    space_kernel = gaussian(ky, sig[:, 1:2])[:, :, None] * gaussian(kx, sig[:, 0:1])[:, None, :]
    space_kernel = space_kernel.view(-1, 1, 1, 1, kx * ky)
    kernel = space_kernel * color_kernel
    out = (unfolded_input * kernel).sum(-1) / kernel.sum(-1)
    return out


def make_bilateral(dt):
    def denoise(noisy, sigma_color, iters):
        out = noisy
        for _ in range(iters):
            out = bilateral_blur(out, 5, sigma_color, (1.5, 1.5), "reflect", "l1" if iters % 2 else "l2")
        return out, F.mse_loss(out, noisy)
    return denoise, lambda: None


def bilateral_inputs(i, dt):
    return torch.rand(2, 3, 12, 14 + i, dtype=dt), [0.1, 0.2, 0.1, 0.3][i], 1 + i % 2


# ------------------------------------------------------------------------------------------------ optical flow
def coords_grid(batch, ht, wd, dtype):
    coords = torch.meshgrid(torch.arange(ht, dtype=dtype), torch.arange(wd, dtype=dtype), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0)
    return coords[None].repeat(batch, 1, 1, 1)


def bilinear_sampler(img, coords):
    """RAFT's core/utils/utils.py: pixel coordinates to [-1, 1] and grid_sample with align_corners."""
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    ygrid = 2 * ygrid / (H - 1) - 1
    grid = torch.cat([xgrid, ygrid], dim=-1)
    return F.grid_sample(img, grid, align_corners=True)


class CorrBlock:
    """RAFT's all-pairs correlation volume, its average-pooled pyramid and the windowed lookup."""

    def __init__(self, fmap1, fmap2, num_levels=2, radius=2):
        self.num_levels, self.radius = num_levels, radius
        self.corr_pyramid = []
        corr = CorrBlock.corr(fmap1, fmap2)
        batch, h1, w1, dim, h2, w2 = corr.shape
        corr = corr.reshape(batch * h1 * w1, dim, h2, w2)
        self.corr_pyramid.append(corr)
        for i in range(self.num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.corr_pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape
        out_pyramid = []
        for i in range(self.num_levels):
            corr = self.corr_pyramid[i]
            dx = torch.linspace(-r, r, 2 * r + 1, dtype=coords.dtype)
            dy = torch.linspace(-r, r, 2 * r + 1, dtype=coords.dtype)
            delta = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), axis=-1)
            centroid_lvl = coords.reshape(batch * h1 * w1, 1, 1, 2) / 2 ** i
            delta_lvl = delta.view(1, 2 * r + 1, 2 * r + 1, 2)
            coords_lvl = centroid_lvl + delta_lvl
            corr = bilinear_sampler(corr, coords_lvl)
            corr = corr.view(batch, h1, w1, -1)
            out_pyramid.append(corr)
        out = torch.cat(out_pyramid, dim=-1)
        return out.permute(0, 3, 1, 2).contiguous().float()

    @staticmethod
    def corr(fmap1, fmap2):
        batch, dim, ht, wd = fmap1.shape
        fmap1 = fmap1.view(batch, dim, ht * wd)
        fmap2 = fmap2.view(batch, dim, ht * wd)
        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch, ht, wd, 1, ht, wd)
        return corr / torch.sqrt(torch.tensor(dim).float())


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim, input_dim):
        super().__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


class TinyRAFT(nn.Module):
    def __init__(self, fdim=16, hdim=12, levels=2, radius=2):
        super().__init__()
        self.levels, self.radius = levels, radius
        self.fnet = nn.Sequential(nn.Conv2d(3, fdim, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(fdim, fdim, 3, stride=2, padding=1))
        self.cnet = nn.Sequential(nn.Conv2d(3, 2 * hdim, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(2 * hdim, 2 * hdim, 3, stride=2, padding=1))
        cor_planes = levels * (2 * radius + 1) ** 2
        self.encoder = nn.Conv2d(cor_planes + 2, hdim, 3, padding=1)
        self.gru = ConvGRU(hdim, 2 * hdim)
        self.flow_head = nn.Sequential(nn.Conv2d(hdim, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 2, 3, padding=1))
        self.hdim = hdim

    def forward(self, image1, image2, iters=3, flow_init=None):
        image1 = 2 * image1 - 1.0
        image2 = 2 * image2 - 1.0
        fmap1, fmap2 = self.fnet(image1), self.fnet(image2)
        corr_fn = CorrBlock(fmap1.float(), fmap2.float(), num_levels=self.levels, radius=self.radius)
        net, inp = torch.split(self.cnet(image1), [self.hdim, self.hdim], dim=1)
        net, inp = torch.tanh(net), torch.relu(inp)
        N, _, H, W = image1.shape
        coords0 = coords_grid(N, H // 4, W // 4, image1.dtype)
        coords1 = coords_grid(N, H // 4, W // 4, image1.dtype)
        if flow_init is not None:
            coords1 = coords1 + flow_init
        flow_predictions = []
        for itr in range(iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1).to(image1.dtype)
            flow = coords1 - coords0
            motion = F.relu(self.encoder(torch.cat([corr, flow], dim=1)))
            net = self.gru(net, torch.cat([inp, motion], dim=1))
            delta_flow = self.flow_head(net)
            coords1 = coords1 + delta_flow
            flow_up = 4 * F.interpolate(coords1 - coords0, scale_factor=4, mode="bilinear", align_corners=True)
            flow_predictions.append(flow_up)
        return flow_predictions


def sequence_loss(flow_preds, flow_gt, valid, gamma=0.8, max_flow=400):
    n_predictions = len(flow_preds)
    flow_loss = 0.0
    mag = torch.sum(flow_gt ** 2, dim=1).sqrt()
    valid = (valid >= 0.5) & (mag < max_flow)
    for i in range(n_predictions):
        i_weight = gamma ** (n_predictions - i - 1)
        i_loss = (flow_preds[i] - flow_gt).abs()
        flow_loss += i_weight * (valid[:, None] * i_loss).mean()
    epe = torch.sum((flow_preds[-1] - flow_gt) ** 2, dim=1).sqrt()
    epe = epe.view(-1)[valid.view(-1)]
    metrics = {"epe": epe.mean().item(), "1px": (epe < 1).float().mean().item(), "3px": (epe < 3).float().mean().item()}
    return flow_loss, metrics


def make_raft(dt):
    """RAFT's train.py step: sequence loss over the iterations' upsampled flows, clip_grad_norm_, AdamW with
    a OneCycleLR schedule, the metrics dict by .item()."""
    model = TinyRAFT().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-5, eps=1e-8)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 4e-4, 100, pct_start=0.05, cycle_momentum=False,
                                                anneal_strategy="linear")

    def train_step(image1, image2, flow, valid, iters):
        opt.zero_grad()
        flow_predictions = model(image1, image2, iters=iters)
        loss, metrics = sequence_loss(flow_predictions, flow, valid)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.detach(), metrics
    return train_step, lambda: (_state(model), _opt_state(opt, sched))


def raft_inputs(i, dt):
    H, W = 16, 16 + 8 * (i % 2)
    return (torch.rand(2, 3, H, W, dtype=dt), torch.rand(2, 3, H, W, dtype=dt), torch.randn(2, 2, H, W, dtype=dt) * 2,
            (torch.rand(2, H, W) > 0.1).to(dt), 2 + i % 2)


def flow_warp(x, flow, padding_mode="zeros"):
    """backward warping (UnFlow / ARFlow's flow_warp): a base grid plus the flow, normalised to [-1, 1]."""
    B, C, H, W = x.size()
    xx = torch.arange(0, W).view(1, -1).repeat(H, 1)
    yy = torch.arange(0, H).view(-1, 1).repeat(1, W)
    grid = torch.stack([xx, yy], 0).to(x.dtype).unsqueeze(0).repeat(B, 1, 1, 1)
    vgrid = grid + flow
    vgrid_x = 2.0 * vgrid[:, 0] / max(W - 1, 1) - 1.0
    vgrid_y = 2.0 * vgrid[:, 1] / max(H - 1, 1) - 1.0
    vgrid = torch.stack([vgrid_x, vgrid_y], dim=3)
    return F.grid_sample(x, vgrid, padding_mode=padding_mode, align_corners=True)


def get_occu_mask_bidirection(flow12, flow21, scale=0.01, bias=0.5):
    flow21_warped = flow_warp(flow21, flow12, padding_mode="zeros")
    flow12_diff = flow12 + flow21_warped
    mag = (flow12 * flow12).sum(1, keepdim=True) + (flow21_warped * flow21_warped).sum(1, keepdim=True)
    occ_thresh = scale * mag + bias
    occ = (flow12_diff * flow12_diff).sum(1, keepdim=True) > occ_thresh
    return occ.float()


def smooth_grad_1st(flo, image, alpha=10.0):
    img_dx = image[:, :, :, 1:] - image[:, :, :, :-1]
    img_dy = image[:, :, 1:, :] - image[:, :, :-1, :]
    weights_x = torch.exp(-torch.mean(torch.abs(img_dx), 1, keepdim=True) * alpha)
    weights_y = torch.exp(-torch.mean(torch.abs(img_dy), 1, keepdim=True) * alpha)
    dx = flo[:, :, :, 1:] - flo[:, :, :, :-1]
    dy = flo[:, :, 1:, :] - flo[:, :, :-1, :]
    return (weights_x * dx.abs()).mean() / 2.0 + (weights_y * dy.abs()).mean() / 2.0


class FlowNetS(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(6, c, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(c, c, 3, padding=1),
                                 nn.LeakyReLU(0.1))
        self.flow = nn.Conv2d(c, 2, 3, padding=1)

    def forward(self, a, b):
        return self.flow(self.enc(torch.cat([a, b], 1)))


def make_unflow(dt):
    """ARFlow's unsupervised loss: both directions' flows, occlusion masks by forward-backward consistency,
    a masked Charbonnier photometric loss on warped images and an edge-aware smoothness term; Adam."""
    model = FlowNetS().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(img1, img2, w_smooth):
        flow12 = model(img1, img2)
        flow21 = model(img2, img1)
        occu_mask1 = 1 - get_occu_mask_bidirection(flow12, flow21)
        occu_mask2 = 1 - get_occu_mask_bidirection(flow21, flow12)
        img1_recons = flow_warp(img2, flow12)
        img2_recons = flow_warp(img1, flow21)
        charb = lambda d: ((d ** 2 + 1e-6) ** 0.45)  # noqa: E731
        l1 = (charb(img1_recons - img1) * occu_mask1).mean() / occu_mask1.mean().clamp(min=1e-3)
        l2 = (charb(img2_recons - img2) * occu_mask2).mean() / occu_mask2.mean().clamp(min=1e-3)
        loss = l1 + l2 + w_smooth * (smooth_grad_1st(flow12, img1) + smooth_grad_1st(flow21, img2))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), occu_mask1.mean()
    return step, lambda: (_state(model), _opt_state(opt))


def unflow_inputs(i, dt):
    img1 = torch.rand(2, 3, 12, 14 + 2 * i, dtype=dt)
    return img1, torch.roll(img1, 1, dims=3) + 0.02 * torch.randn_like(img1), [50.0, 10.0, 75.0, 50.0][i]


# ------------------------------------------------------------------------------------------------ super-resolution
class MeanShift(nn.Conv2d):
    """EDSR's common.MeanShift: a frozen 1x1 conv subtracting (or adding) the dataset's RGB mean."""

    def __init__(self, rgb_range, rgb_mean=(0.4488, 0.4371, 0.4040), rgb_std=(1.0, 1.0, 1.0), sign=-1):
        super().__init__(3, 3, kernel_size=1)
        std = torch.Tensor(rgb_std)
        self.weight.data = torch.eye(3).view(3, 3, 1, 1) / std.view(3, 1, 1, 1)
        self.bias.data = sign * rgb_range * torch.Tensor(rgb_mean) / std
        for p in self.parameters():
            p.requires_grad = False


class ResBlock(nn.Module):
    def __init__(self, n_feats, kernel_size=3, res_scale=0.1):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(n_feats, n_feats, kernel_size, padding=kernel_size // 2), nn.ReLU(True),
                                  nn.Conv2d(n_feats, n_feats, kernel_size, padding=kernel_size // 2))
        self.res_scale = res_scale

    def forward(self, x):
        res = self.body(x).mul(self.res_scale)
        res += x
        return res


class EDSR(nn.Module):
    def __init__(self, n_resblocks=3, n_feats=16, scale=2, rgb_range=1.0):
        super().__init__()
        self.sub_mean = MeanShift(rgb_range)
        self.add_mean = MeanShift(rgb_range, sign=1)
        self.head = nn.Conv2d(3, n_feats, 3, padding=1)
        self.body = nn.Sequential(*[ResBlock(n_feats) for _ in range(n_resblocks)], nn.Conv2d(n_feats, n_feats, 3, padding=1))
        self.tail = nn.Sequential(nn.Conv2d(n_feats, scale * scale * n_feats, 3, padding=1), nn.PixelShuffle(scale),
                                  nn.Conv2d(n_feats, 3, 3, padding=1))

    def forward(self, x):
        x = self.sub_mean(x)
        x = self.head(x)
        res = self.body(x)
        res += x
        x = self.tail(res)
        return self.add_mean(x)


def calc_psnr(sr, hr, scale, rgb_range):
    diff = (sr - hr) / rgb_range
    shave = scale + 6
    valid = diff[..., shave:-shave, shave:-shave]
    mse = valid.pow(2).mean()
    return -10 * math.log10(mse)


def make_edsr(dt):
    """EDSR's trainer on channels_last tensors: L1 loss, Adam with a step schedule, gradient clipping by
    value, the validation PSNR (quantised to 255 levels) computed under torch.inference_mode inside the same
    step, the best PSNR kept in a dict."""
    model = EDSR().to(dt).to(memory_format=torch.channels_last)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    log = {"best": -1e9, "best_step": -1, "step": 0}

    def quantize(img, rgb_range):
        pixel_range = 255 / rgb_range
        return img.mul(pixel_range).clamp(0, 255).round().div(pixel_range)

    def train_step(lr, hr, lr_val, hr_val):
        model.train()
        lr, hr = lr.contiguous(memory_format=torch.channels_last), hr.contiguous(memory_format=torch.channels_last)
        opt.zero_grad()
        sr = model(lr)
        loss = F.l1_loss(sr, hr)
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), 0.5)
        opt.step()
        sched.step()
        log["step"] += 1
        model.eval()
        with torch.inference_mode():
            sr_val = quantize(model(lr_val.contiguous(memory_format=torch.channels_last)), 1.0)
            psnr = calc_psnr(sr_val.float(), hr_val.float(), 2, 1.0)
        if psnr > log["best"]:
            log["best"], log["best_step"] = psnr, log["step"]
        return loss.detach(), sr_val, psnr
    return train_step, lambda: (_state(model), _opt_state(opt, sched), dict(log))


def edsr_inputs(i, dt):
    hr = torch.rand(2, 3, 32, 32 + 4 * (i % 2), dtype=dt)
    hr_val = torch.rand(1, 3, 32, 32, dtype=dt)
    return F.avg_pool2d(hr, 2), hr, F.avg_pool2d(hr_val, 2), hr_val


# ------------------------------------------------------------------------------------------------ tabular
def _entmax_threshold_and_support(X, dim=-1):
    Xsrt, _ = torch.sort(X, descending=True, dim=dim)
    rho = _make_ix_like(X, dim)
    mean = Xsrt.cumsum(dim) / rho
    mean_sq = (Xsrt ** 2).cumsum(dim) / rho
    ss = rho * (mean_sq - mean ** 2)
    delta = (1 - ss) / rho
    delta_nz = torch.clamp(delta, 0)
    tau = mean - torch.sqrt(delta_nz)
    support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
    tau_star = tau.gather(dim, support_size - 1)
    return tau_star, support_size


class Entmax15Function(torch.autograd.Function):
    """entmax's Entmax15Function (Peters et al. 2019), as pytorch-tabnet and NODE vendor it."""

    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input = input - max_val
        input = input / 2
        tau_star, _ = _entmax_threshold_and_support(input, dim)
        output = torch.clamp(input - tau_star, min=0) ** 2
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (Y,) = ctx.saved_tensors
        gppr = Y.sqrt()
        dX = grad_output * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None


class AttentiveTransformer(nn.Module):
    def __init__(self, d_in, n_features, momentum=0.02):
        super().__init__()
        self.fc = nn.Linear(d_in, n_features, bias=False)
        self.bn = nn.BatchNorm1d(n_features, momentum=momentum)

    def forward(self, priors, processed_feat):
        x = self.bn(self.fc(processed_feat))
        x = torch.mul(x, priors)
        return Entmax15Function.apply(x, -1)


class EntmaxTabNet(nn.Module):
    """TabNet's encoder with mask_type="entmax": masks through entmax-1.5, the prior updated by
    (gamma - M), the sparsity regulariser M * log(M + eps)."""

    def __init__(self, n_features=10, n_d=8, n_steps=3, gamma=1.3, n_classes=3):
        super().__init__()
        self.n_steps, self.gamma, self.n_d = n_steps, gamma, n_d
        self.initial_bn = nn.BatchNorm1d(n_features, momentum=0.01)
        self.shared = nn.Linear(n_features, 2 * (2 * n_d))
        self.att = nn.ModuleList([AttentiveTransformer(n_d, n_features) for _ in range(n_steps)])
        self.final = nn.Linear(n_d, n_classes)
        self.epsilon = 1e-15

    def feat(self, x):
        return F.glu(self.shared(x))

    def forward(self, x):
        x = self.initial_bn(x)
        prior = torch.ones(x.shape, dtype=x.dtype)
        M_loss = 0
        att = self.feat(x)[:, self.n_d:]
        steps_output = []
        for step in range(self.n_steps):
            M = self.att[step](prior, att)
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + self.epsilon)), dim=1))
            prior = torch.mul(self.gamma - M, prior)
            out = self.feat(torch.mul(M, x))
            d = F.relu(out[:, :self.n_d])
            steps_output.append(d)
            att = out[:, self.n_d:]
        M_loss /= self.n_steps
        return self.final(torch.sum(torch.stack(steps_output, dim=0), dim=0)), M_loss


def make_entmax_tabnet(dt):
    model = EntmaxTabNet().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.95)

    def step(x, y, lambda_sparse):
        model.train()
        opt.zero_grad()
        out, M_loss = model(x)
        loss = F.cross_entropy(out, y) - lambda_sparse * M_loss
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1)
        opt.step()
        sched.step()
        return loss.detach(), M_loss.detach()
    return step, lambda: (_state(model), _opt_state(opt, sched))


def entmax_inputs(i, dt):
    return torch.randn(24 + 8 * (i % 2), 10, dtype=dt), torch.randint(0, 3, (24 + 8 * (i % 2),)), [1e-3, 1e-4, 1e-3, 0.0][i]


# ------------------------------------------------------------------------------------------------ time series
class ProbAttention(nn.Module):
    """Informer's ProbSparse self-attention: keys sampled by torch.randint, the sparsity measure M = max -
    mean, the top-u queries by topk, their context written into the mean (or cumsum) context by advanced
    indexing."""

    def __init__(self, mask_flag=True, factor=2, scale=None):
        super().__init__()
        self.factor, self.scale, self.mask_flag = factor, scale, mask_flag

    def _prob_QK(self, Q, K, sample_k, n_top):
        B, H, L_K, E = K.shape
        _, _, L_Q, _ = Q.shape
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        index_sample = torch.randint(L_K, (L_Q, sample_k))
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]
        Q_reduce = Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], M_top, :]
        Q_K = torch.matmul(Q_reduce, K.transpose(-2, -1))
        return Q_K, M_top

    def _get_initial_context(self, V, L_Q):
        B, H, L_V, D = V.shape
        if not self.mask_flag:
            V_sum = V.mean(dim=-2)
            return V_sum.unsqueeze(-2).expand(B, H, L_Q, V_sum.shape[-1]).clone()
        return V.cumsum(dim=-2)

    def _update_context(self, context_in, V, scores, index, L_Q):
        B, H, L_V, D = V.shape
        if self.mask_flag:
            _mask = torch.ones(L_Q, scores.shape[-1], dtype=torch.bool).triu(1)
            _mask_ex = _mask[None, None, :].expand(B, H, L_Q, scores.shape[-1])
            indicator = _mask_ex[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :]
            scores.masked_fill_(indicator, -math.inf)
        attn = torch.softmax(scores, dim=-1)
        context_in[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = \
            torch.matmul(attn, V).type_as(context_in)
        return context_in

    def forward(self, queries, keys, values):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries, keys, values = queries.transpose(2, 1), keys.transpose(2, 1), values.transpose(2, 1)
        U_part = self.factor * int(math.ceil(math.log(L_K)))
        u = self.factor * int(math.ceil(math.log(L_Q)))
        U_part = U_part if U_part < L_K else L_K
        u = u if u < L_Q else L_Q
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        scale = self.scale or 1.0 / math.sqrt(D)
        scores_top = scores_top * scale
        context = self._get_initial_context(values, L_Q)
        context = self._update_context(context, values, scores_top, index, L_Q)
        return context.transpose(2, 1).contiguous()


class InformerLayer(nn.Module):
    def __init__(self, d_model=16, n_heads=2, mask_flag=True):
        super().__init__()
        self.attn = ProbAttention(mask_flag)
        self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.o = nn.Linear(d_model, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Conv1d(d_model, 2 * d_model, 1), nn.GELU(), nn.Conv1d(2 * d_model, d_model, 1))
        self.h = n_heads

    def forward(self, x):
        B, L, _ = x.shape
        q = self.q(x).view(B, L, self.h, -1)
        k = self.k(x).view(B, L, self.h, -1)
        v = self.v(x).view(B, L, self.h, -1)
        x = self.norm1(x + F.dropout(self.o(self.attn(q, k, v).view(B, L, -1)), 0.05, self.training))
        return self.norm2(x + self.ff(x.transpose(-1, 1)).transpose(-1, 1))


class Informer(nn.Module):
    def __init__(self, c_in=3, d_model=16, pred_len=4):
        super().__init__()
        self.embed = nn.Conv1d(c_in, d_model, 3, padding=1, padding_mode="circular")
        self.enc = InformerLayer(d_model, mask_flag=False)
        self.distil = nn.Sequential(nn.Conv1d(d_model, d_model, 3, padding=1, padding_mode="circular"),
                                    nn.BatchNorm1d(d_model), nn.ELU(), nn.MaxPool1d(3, 2, 1))
        self.dec = InformerLayer(d_model, mask_flag=True)
        self.proj = nn.Linear(d_model, c_in)
        self.pred_len = pred_len

    def forward(self, x_enc, x_dec):
        enc = self.enc(self.embed(x_enc.permute(0, 2, 1)).transpose(1, 2))
        enc = self.distil(enc.permute(0, 2, 1)).transpose(1, 2)
        dec = self.embed(x_dec.permute(0, 2, 1)).transpose(1, 2) + enc.mean(1, keepdim=True)
        return self.proj(self.dec(dec))[:, -self.pred_len:, :]


def make_informer(dt):
    """Informer's exp_informer.train step: the decoder input is the label window followed by zeros, MSE on
    the prediction window, Adam at Informer's default learning rate 1e-4 (the key projection's bias and the
    conv bias before BatchNorm have an exact gradient of 0: Adam moves them by about lr per step on rounding
    noise, eager's as much as the compiled one's); the sampled keys draw from the global RNG."""
    model = Informer().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(batch_x, batch_y, label_len, pred_len):
        model.train()
        opt.zero_grad()
        dec_inp = torch.zeros_like(batch_y[:, -pred_len:, :])
        dec_inp = torch.cat([batch_y[:, :label_len, :], dec_inp], dim=1)
        outputs = model(batch_x, dec_inp)
        loss = F.mse_loss(outputs, batch_y[:, -pred_len:, :])
        loss.backward()
        opt.step()
        return loss.detach(), outputs.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def informer_inputs(i, dt):
    L = 16 + 4 * (i % 2)
    return torch.randn(4, L, 3, dtype=dt), torch.randn(4, 8 + 4, 3, dtype=dt), 8, 4


class GatedLinearUnit(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_rate=None):
        super().__init__()
        self.dropout = nn.Dropout(dropout_rate) if dropout_rate is not None else None
        self.W4 = nn.Linear(input_size, hidden_size)
        self.W5 = nn.Linear(input_size, hidden_size)

    def forward(self, x):
        if self.dropout is not None:
            x = self.dropout(x)
        return torch.sigmoid(self.W4(x)) * self.W5(x)


class GatedResidualNetwork(nn.Module):
    """TFT's GRN: ELU(W2 a + W3 c) -> W1 -> GLU -> LayerNorm(skip + .), an optional static context."""

    def __init__(self, input_size, hidden_size, output_size, dropout_rate, context_size=None):
        super().__init__()
        self.skip = nn.Linear(input_size, output_size) if input_size != output_size else None
        self.W2 = nn.Linear(input_size, hidden_size)
        self.W3 = nn.Linear(context_size, hidden_size, bias=False) if context_size is not None else None
        self.W1 = nn.Linear(hidden_size, hidden_size)
        self.glu = GatedLinearUnit(hidden_size, output_size, dropout_rate)
        self.norm = nn.LayerNorm(output_size)

    def forward(self, a, c=None):
        residual = self.skip(a) if self.skip is not None else a
        n2 = self.W2(a)
        if c is not None:
            n2 = n2 + self.W3(c)
        n2 = F.elu(n2)
        n1 = self.W1(n2)
        return self.norm(residual + self.glu(n1))


class VariableSelectionNetwork(nn.Module):
    def __init__(self, input_size, num_inputs, hidden_size, dropout, context_size=None):
        super().__init__()
        self.num_inputs, self.input_size = num_inputs, input_size
        self.flattened_grn = GatedResidualNetwork(num_inputs * input_size, hidden_size, num_inputs, dropout, context_size)
        self.single_variable_grns = nn.ModuleList(
            [GatedResidualNetwork(input_size, hidden_size, hidden_size, dropout) for _ in range(num_inputs)])

    def forward(self, embedding, context=None):
        sparse_weights = self.flattened_grn(embedding, context)
        sparse_weights = torch.softmax(sparse_weights, dim=-1).unsqueeze(-2)
        var_outputs = []
        for i in range(self.num_inputs):
            var_outputs.append(self.single_variable_grns[i](embedding[..., i * self.input_size:(i + 1) * self.input_size]))
        var_outputs = torch.stack(var_outputs, dim=-1)
        outputs = (var_outputs * sparse_weights).sum(dim=-1)
        return outputs, sparse_weights


class TinyTFT(nn.Module):
    def __init__(self, n_vars=4, emb=4, hidden=16, n_static=3, horizon=3, quantiles=(0.1, 0.5, 0.9)):
        super().__init__()
        self.var_emb = nn.ModuleList([nn.Linear(1, emb) for _ in range(n_vars)])
        self.static_emb = nn.Embedding(n_static, hidden)
        self.static_ctx = GatedResidualNetwork(hidden, hidden, hidden, 0.1)
        self.vsn = VariableSelectionNetwork(emb, n_vars, hidden, 0.1, context_size=hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.post = GatedResidualNetwork(hidden, hidden, hidden, 0.1, context_size=hidden)
        self.attn = nn.MultiheadAttention(hidden, 2, batch_first=True)
        self.out = nn.Linear(hidden, horizon * len(quantiles))
        self.horizon, self.nq = horizon, len(quantiles)

    def forward(self, x, static_id):
        B, T, V = x.shape
        emb = torch.cat([self.var_emb[v](x[..., v:v + 1]) for v in range(V)], dim=-1)
        cs = self.static_ctx(self.static_emb(static_id))
        sel, weights = self.vsn(emb, cs.unsqueeze(1).expand(B, T, -1))
        h, _ = self.lstm(sel)
        h = self.post(h, cs.unsqueeze(1).expand(B, T, -1))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        a, attn_w = self.attn(h, h, h, attn_mask=mask)
        out = self.out(a[:, -1]).view(B, self.horizon, self.nq)
        return out, weights.squeeze(-2).mean((0, 1)), attn_w


def make_tft(dt):
    model = TinyTFT().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    quantiles = (0.1, 0.5, 0.9)

    def step(x, static_id, target):
        model.train()
        opt.zero_grad()
        pred, var_importance, _ = model(x, static_id)
        loss = quantile_loss(pred, target, quantiles)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.01 * 100)
        opt.step()
        return loss.detach(), var_importance.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def tft_inputs(i, dt):
    T = 8 + 2 * (i % 2)
    return torch.randn(5, T, 4, dtype=dt), torch.randint(0, 3, (5,)), torch.randn(5, 3, dtype=dt)


# ------------------------------------------------------------------------------------------------ LLM serving
class RepetitionPenaltyLogitsProcessor:
    def __init__(self, penalty):
        self.penalty = penalty

    def __call__(self, input_ids, scores):
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        return scores.scatter(1, input_ids, score)


class TemperatureLogitsWarper:
    def __init__(self, temperature):
        self.temperature = temperature

    def __call__(self, input_ids, scores):
        return scores / self.temperature


class TopKLogitsWarper:
    def __init__(self, top_k, filter_value=-float("inf"), min_tokens_to_keep=1):
        self.top_k, self.filter_value = max(top_k, min_tokens_to_keep), filter_value

    def __call__(self, input_ids, scores):
        top_k = min(self.top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        return scores.masked_fill(indices_to_remove, self.filter_value)


class TopPLogitsWarper:
    def __init__(self, top_p, filter_value=-float("inf"), min_tokens_to_keep=1):
        self.top_p, self.filter_value, self.min_tokens_to_keep = top_p, filter_value, min_tokens_to_keep

    def __call__(self, input_ids, scores):
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)
        sorted_indices_to_remove[..., -self.min_tokens_to_keep:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        return scores.masked_fill(indices_to_remove, self.filter_value)


class MinPLogitsWarper:
    def __init__(self, min_p, filter_value=-float("inf"), min_tokens_to_keep=1):
        self.min_p, self.filter_value, self.min_tokens_to_keep = min_p, filter_value, min_tokens_to_keep

    def __call__(self, input_ids, scores):
        probs = torch.softmax(scores, dim=-1)
        top_probs, _ = probs.max(dim=-1, keepdim=True)
        scaled_min_p = self.min_p * top_probs
        tokens_to_remove = probs < scaled_min_p
        sorted_indices = torch.argsort(scores, descending=True, dim=-1)
        sorted_indices_to_remove = torch.gather(tokens_to_remove, dim=-1, index=sorted_indices)
        sorted_indices_to_remove[..., :self.min_tokens_to_keep] = False
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        return scores.masked_fill(indices_to_remove, self.filter_value)


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=32, d=16, heads=2, max_len=64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.block = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, attention_mask):
        T = input_ids.shape[1]
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        h = self.wte(input_ids) + self.wpe(pos)
        causal = torch.triu(torch.full((T, T), float("-inf"), dtype=h.dtype), 1)
        h = self.block(h, src_mask=causal, src_key_padding_mask=~attention_mask.bool(), is_causal=False)
        return self.head(self.ln(h))


def make_hf_sample(dt):
    """transformers' GenerationMixin._sample without a cache: a processor list (repetition penalty,
    temperature, top-k, top-p, min-p) applied in order, torch.multinomial from an owned generator, finished
    rows padded via unfinished_sequences, stop when every row has hit EOS or max_new_tokens."""
    model = TinyCausalLM().to(dt).eval()
    gen = torch.Generator().manual_seed(3)
    eos_token_id, pad_token_id = 1, 0

    @torch.no_grad()
    def generate(input_ids, attention_mask, max_new_tokens, temperature, top_p):
        processors = [RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(temperature),
                      TopKLogitsWarper(12), TopPLogitsWarper(top_p), MinPLogitsWarper(0.02)]
        batch_size = input_ids.shape[0]
        unfinished_sequences = torch.ones(batch_size, dtype=torch.long)
        this_peer_finished = False
        steps = 0
        while not this_peer_finished:
            logits = model(input_ids, attention_mask)
            next_token_logits = logits[:, -1, :].to(copy=True, dtype=torch.float32)
            next_token_scores = next_token_logits
            for p in processors:
                next_token_scores = p(input_ids, next_token_scores)
            probs = F.softmax(next_token_scores, dim=-1)
            next_tokens = torch.multinomial(probs, num_samples=1, generator=gen).squeeze(1)
            next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch_size, 1))], dim=-1)
            unfinished_sequences = unfinished_sequences & ~(next_tokens == eos_token_id)
            steps += 1
            this_peer_finished = unfinished_sequences.max() == 0 or steps >= max_new_tokens
        return input_ids, steps
    return generate, lambda: gen.get_state()


def hf_sample_inputs(i, dt):
    ids = torch.randint(2, 32, (3, 5))
    mask = torch.ones(3, 5, dtype=torch.long)
    mask[0, :2] = 0
    ids[0, :2] = 0
    return ids, mask, 6 + 2 * i, [0.7, 1.0, 1.3, 0.9][i], [0.9, 0.8, 0.95, 0.7][i]


class DynamicNTKRotaryEmbedding(nn.Module):
    """transformers' dynamic-NTK RoPE: the base grows with the sequence length past the trained length and
    inv_freq is recomputed (a buffer reassigned) when it does."""

    def __init__(self, dim, max_position_embeddings=16, base=10000.0, scaling_factor=2.0):
        super().__init__()
        self.dim, self.base, self.scaling_factor = dim, base, scaling_factor
        self.original_max_seq_len = self.max_seq_len_cached = max_position_embeddings
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.original_inv_freq = inv_freq

    def _dynamic_frequency_update(self, position_ids):
        seq_len = torch.max(position_ids) + 1
        if seq_len > self.max_seq_len_cached:
            base = self.base * ((self.scaling_factor * seq_len / self.original_max_seq_len)
                                - (self.scaling_factor - 1)) ** (self.dim / (self.dim - 2))
            inv_freq = 1.0 / (base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)
            self.max_seq_len_cached = seq_len
        if seq_len < self.original_max_seq_len and self.max_seq_len_cached > self.original_max_seq_len:
            self.register_buffer("inv_freq", self.original_inv_freq, persistent=False)
            self.max_seq_len_cached = self.original_max_seq_len

    @torch.no_grad()
    def forward(self, x, position_ids):
        self._dynamic_frequency_update(position_ids)
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class StaticCacheAttention(nn.Module):
    """an attention layer over a StaticCache: keys / values written at cache_position by index_copy_, a
    sliding-window causal mask built from cache_position against the cache's slots."""

    def __init__(self, d=16, heads=2, kv_heads=1, max_cache_len=40, window=6):
        super().__init__()
        self.h, self.kvh, self.hd, self.window = heads, kv_heads, d // heads, window
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.register_buffer("key_cache", torch.zeros(1, kv_heads, max_cache_len, self.hd), persistent=False)
        self.register_buffer("value_cache", torch.zeros(1, kv_heads, max_cache_len, self.hd), persistent=False)

    def forward(self, x, cos, sin, cache_position):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        self.key_cache.index_copy_(2, cache_position, k)
        self.value_cache.index_copy_(2, cache_position, v)
        k_all = self.key_cache.repeat_interleave(self.h // self.kvh, dim=1)
        v_all = self.value_cache.repeat_interleave(self.h // self.kvh, dim=1)
        slots = torch.arange(self.key_cache.shape[2])
        allowed = (slots[None, :] <= cache_position[:, None]) & (slots[None, :] > cache_position[:, None] - self.window)
        mask = torch.zeros(allowed.shape, dtype=q.dtype).masked_fill(~allowed, torch.finfo(q.dtype).min)
        out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask[None, None])
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class StaticCacheLM(nn.Module):
    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rope = DynamicNTKRotaryEmbedding(d // 2)
        self.attn = StaticCacheAttention(d)
        self.mlp = nn.Sequential(nn.Linear(d, 32), nn.SiLU(), nn.Linear(32, d))
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids, cache_position):
        h = self.embed(ids)
        cos, sin = self.rope(h, cache_position[None])
        h = h + self.attn(self.norm1(h), cos, sin, cache_position)
        h = h + self.mlp(self.norm2(h))
        return self.lm_head(h)


def make_static_cache(dt):
    """greedy decoding over a static cache (gpt-fast / transformers' StaticCache style): the cache zeroed
    between requests, prefill over the prompt's positions, one token per step at cache_position = [pos];
    prompts past the RoPE's trained length switch the NTK base (and back)."""
    model = StaticCacheLM().to(dt).eval()

    @torch.inference_mode()
    def decode(prompt, max_new_tokens):
        model.attn.key_cache.zero_()
        model.attn.value_cache.zero_()
        T = prompt.shape[1]
        cache_position = torch.arange(T)
        logits = model(prompt, cache_position)
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        out = [next_token]
        for _ in range(max_new_tokens - 1):
            cache_position = cache_position[-1:] + 1
            logits = model(next_token, cache_position)
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(next_token)
        return torch.cat(out, 1), model.rope.inv_freq.clone(), int(model.rope.max_seq_len_cached)
    return decode, lambda: (model.attn.key_cache, model.attn.value_cache, model.rope.inv_freq)


def static_cache_inputs(i, dt):
    return torch.randint(0, 40, (1, [5, 12, 7, 3][i])), [8, 9, 6, 10][i]


def prefix_lm_mask(prefix_lengths, seq_len, window=None):
    """a prefix-LM mask (T5 / UL2 / PaliGemma): bidirectional over each row's prefix, causal after it,
    optionally a sliding window on the causal part; True = attend."""
    q = torch.arange(seq_len)[:, None]
    k = torch.arange(seq_len)[None, :]
    causal = k <= q
    if window is not None:
        causal = causal & (q - k < window)
    in_prefix = k[None] < prefix_lengths[:, None, None]
    both_prefix = in_prefix & (q[None] < prefix_lengths[:, None, None])
    return causal[None] | both_prefix


class PrefixLM(nn.Module):
    def __init__(self, vocab=30, d=16, heads=2, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(64, d) * 0.02)
        self.qkv = nn.ModuleList([nn.Linear(d, 3 * d) for _ in range(layers)])
        self.proj = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])
        self.ln = nn.ModuleList([nn.LayerNorm(d) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)
        self.h = heads

    def forward(self, ids, mask):
        B, T = ids.shape
        x = self.emb(ids) + self.pos[:T]
        for qkv, proj, ln in zip(self.qkv, self.proj, self.ln):
            q, k, v = qkv(ln(x)).view(B, T, 3, self.h, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
            x = x + proj(a.transpose(1, 2).reshape(B, T, -1))
        return self.head(x)


def make_prefix_lm(dt):
    """a UL2-style prefix-LM training step: per-row prefix lengths, the loss only on the targets (labels
    -100 over the prefix and the padding), a sliding window on some calls, AdamW with a cosine schedule."""
    model = PrefixLM().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)

    def step(ids, prefix_lengths, lengths, window):
        T = ids.shape[1]
        mask = prefix_lm_mask(prefix_lengths, T, window)
        labels = ids.clone()
        pos = torch.arange(T)[None]
        labels[(pos < prefix_lengths[:, None]) | (pos >= lengths[:, None])] = -100
        logits = model(ids, mask)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        n_tok = (labels[:, 1:] != -100).sum()
        return loss.detach(), n_tok
    return step, lambda: (_state(model), _opt_state(opt, sched))


def prefix_lm_inputs(i, dt):
    T = 10 + 2 * (i % 2)
    return (torch.randint(0, 30, (3, T)), torch.tensor([3, 1 + i, 5]), torch.tensor([T, T - 2, T - 1 - i]),
            [None, 4, None, 3][i])


# ------------------------------------------------------------------------------------------------ weight-only quantization
def pack_int4(q):
    """two unsigned 4-bit values per uint8, low nibble first (AWQ / HQQ's 4-bit packing along the input)."""
    q = q.to(torch.uint8)
    return q[:, 0::2] | (q[:, 1::2] << 4)


def unpack_int4(packed):
    low = packed & 0x0F
    high = (packed >> 4) & 0x0F
    return torch.stack([low, high], dim=-1).view(packed.shape[0], -1)


class WQLinearInt4(nn.Module):
    """a weight-only int4 linear: asymmetric group-wise quantisation (scale, zero per group of the input
    dimension) at construction, unpacked by shifts and masks in forward, the zero points packed too."""

    def __init__(self, weight, bias, group_size=8):
        super().__init__()
        out_f, in_f = weight.shape
        self.group_size, self.in_features, self.out_features = group_size, in_f, out_f
        w = weight.reshape(out_f, in_f // group_size, group_size)
        wmax, wmin = w.amax(-1, keepdim=True), w.amin(-1, keepdim=True)
        scales = ((wmax - wmin).clamp(min=1e-5) / 15)
        zeros = (-torch.round(wmin / scales)).clamp(0, 15)
        q = torch.clamp(torch.round(w / scales) + zeros, 0, 15).reshape(out_f, in_f)
        self.register_buffer("qweight", pack_int4(q))
        self.register_buffer("qzeros", pack_int4(zeros.reshape(out_f, -1).t().contiguous()))
        self.register_buffer("scales", scales.reshape(out_f, -1).to(weight.dtype))
        self.register_buffer("bias", bias.detach().clone())

    def dequantize(self):
        q = unpack_int4(self.qweight).to(self.scales.dtype)
        z = unpack_int4(self.qzeros).t().to(self.scales.dtype)
        q = q.view(self.out_features, -1, self.group_size)
        return ((q - z[..., None]) * self.scales[..., None]).view(self.out_features, self.in_features)

    def forward(self, x):
        return F.linear(x, self.dequantize(), self.bias)


def make_int4_mlp(dt):
    """an MLP whose linears were replaced by int4 weight-only modules, next to its float original: the
    outputs, the quantisation error and the packed bytes' popcount (bit twiddling on uint8)."""
    ref = nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.Linear(48, 16)).to(dt)
    q = nn.Sequential(WQLinearInt4(ref[0].weight.data, ref[0].bias.data), nn.GELU(),
                      WQLinearInt4(ref[2].weight.data, ref[2].bias.data))

    def popcount(b):
        b = b - ((b >> 1) & 0x55)
        b = (b & 0x33) + ((b >> 2) & 0x33)
        return (b + (b >> 4)) & 0x0F

    @torch.no_grad()
    def run(x):
        yq, yr = q(x), ref(x)
        err = (yq - yr).abs().max() / yr.abs().max()
        bits = sum(int(popcount(m.qweight).sum()) for m in q if isinstance(m, WQLinearInt4))
        return yq, err, bits
    return run, lambda: None


NF4_CODE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
            -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
            0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
            0.7229568362236023, 1.0]


def quantize_nf4(w, blocksize=16, dq_blocksize=4):
    """bitsandbytes' quantize_4bit(quant_type="nf4", compress_statistics=True) written in torch: absmax per
    block, the nearest code by argmin, two codes per uint8 (first in the high nibble); the absmax themselves
    quantized to int8 blocks around their mean (double quantization)."""
    code = torch.tensor(NF4_CODE, dtype=torch.float32)
    flat = w.float().reshape(-1, blocksize)
    absmax = flat.abs().amax(-1)
    normed = flat / absmax[:, None]
    idx = (normed[..., None] - code).abs().argmin(-1).to(torch.uint8).reshape(-1)
    packed = (idx[0::2] << 4) | idx[1::2]
    offset = absmax.mean()
    am = (absmax - offset).reshape(-1, dq_blocksize)
    am_scale = am.abs().amax(-1).clamp(min=1e-12)
    am_q = torch.round(am / am_scale[:, None] * 127).to(torch.int8)
    return packed, am_q, am_scale, offset


def dequantize_nf4(packed, am_q, am_scale, offset, shape, dtype, blocksize=16):
    code = torch.tensor(NF4_CODE, dtype=torch.float32)
    absmax = (am_q.float() / 127 * am_scale[:, None]).reshape(-1) + offset
    idx = torch.stack([(packed >> 4).long(), (packed & 0xF).long()], -1).reshape(-1, blocksize)
    return (code[idx] * absmax[:, None]).reshape(shape).to(dtype)


class Linear4bit(nn.Module):
    def __init__(self, linear):
        super().__init__()
        self.shape, self.dtype = linear.weight.shape, linear.weight.dtype
        packed, am_q, am_scale, offset = quantize_nf4(linear.weight.data)
        for n, t in (("packed", packed), ("am_q", am_q), ("am_scale", am_scale), ("offset", offset)):
            self.register_buffer(n, t)
        self.bias = linear.bias

    def forward(self, x):
        w = dequantize_nf4(self.packed, self.am_q, self.am_scale, self.offset, self.shape, x.dtype)
        return F.linear(x, w, self.bias.to(x.dtype))


def make_qlora(dt):
    """a QLoRA step: a frozen NF4 base with LoRA adapters (A Kaiming, B zero, scaled by alpha / r) trained by
    AdamW through the dequantised weight; the base re-quantised from a float copy every other call (the
    buffers reassigned), counted in a dict."""
    base = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).to(dt)
    qbase = [Linear4bit(base[0]), Linear4bit(base[2])]
    for m in qbase:
        m.bias.requires_grad_(False)
    r, alpha = 4, 8
    lora = nn.ParameterList()
    for m in qbase:
        A = nn.Parameter(torch.empty(r, m.shape[1], dtype=dt))
        nn.init.kaiming_uniform_(A, a=math.sqrt(5))
        lora.append(A)
        lora.append(nn.Parameter(torch.zeros(m.shape[0], r, dtype=dt)))
    opt = torch.optim.AdamW(lora.parameters(), lr=1e-2)
    st = {"requant": 0, "calls": 0}

    def forward(x):
        for j, m in enumerate(qbase):
            x = m(x) + (x @ lora[2 * j].t() @ lora[2 * j + 1].t()) * (alpha / r)
            if j == 0:
                x = F.relu(x)
        return x

    def step(x, y):
        st["calls"] += 1
        if st["calls"] % 2 == 0:
            with torch.no_grad():
                base[0].weight.mul_(0.99)
                packed, am_q, am_scale, offset = quantize_nf4(base[0].weight)
                qbase[0].packed, qbase[0].am_q, qbase[0].am_scale, qbase[0].offset = packed, am_q, am_scale, offset
            st["requant"] += 1
        loss = F.mse_loss(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_flat_params(lora), _opt_state(opt), qbase[0].packed, qbase[0].am_q, dict(st))


def _flat_params(ps):
    return torch.cat([p.detach().flatten() for p in ps]), torch.cat([p.grad.flatten() for p in ps if p.grad is not None])


def qlora_inputs(i, dt):
    return torch.randn(12, 16, dtype=dt), torch.randn(12, 8, dtype=dt)


def int8_vectorwise_quant(A, threshold=0.0):
    """bitsandbytes' int8_vectorwise_quant: row-wise absmax to int8 over the values under the threshold, the
    outlier columns (any |A| >= threshold) zeroed in the int8 result and returned."""
    outlier_cols = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold
        if outliers.any():
            outlier_cols = torch.argwhere(outliers.any(dim=0)).view(-1)
            A = A.masked_fill(outliers, 0.0)
    row_stats = torch.max(A.abs(), dim=1).values.float()
    out_row = torch.round(A * (127.0 / row_stats.unsqueeze(-1))).to(torch.int8)
    if outlier_cols is not None:
        out_row[:, outlier_cols] = 0
    return out_row, row_stats, outlier_cols


def make_int8_outliers(dt):
    """LLM.int8()'s matmul: activations and weights quantised row-wise, the int8 product accumulated in
    int32 by torch.matmul on integer tensors and rescaled, the outlier feature columns multiplied in float and
    added back; returns the outlier count as a Python int."""
    W = torch.randn(24, 32, dtype=dt) * 0.5
    CB, SCB, _ = int8_vectorwise_quant(W)

    @torch.no_grad()
    def matmul_8bit(A, threshold):
        CA, SCA, outlier_cols = int8_vectorwise_quant(A, threshold)
        out32 = torch.matmul(CA.to(torch.int32), CB.to(torch.int32).t())
        output = (out32.float() * SCA[:, None] * SCB[None, :] / (127.0 * 127.0)).to(A.dtype)
        n_out = 0
        if outlier_cols is not None:
            subA = A[:, outlier_cols]
            output = output + torch.matmul(subA, W[:, outlier_cols].t())
            n_out = outlier_cols.numel()
        return output, n_out, (output - A @ W.t()).abs().max()
    return matmul_8bit, lambda: None


def int8_inputs(i, dt):
    A = torch.randn(10, 32, dtype=dt)
    A[:, [3, 17][: i % 3]] *= 12
    return A, [6.0, 6.0, 0.0, 6.0][i]


# ------------------------------------------------------------------------------------------------ optimizers
class Adafactor(torch.optim.Optimizer):
    """fairseq / transformers' Adafactor: factored second moments (row and column running means) for
    matrices, a full one for vectors, a relative step size 1 / sqrt(step) times the parameter's RMS, update
    clipping by its RMS, beta2 decaying as 1 - step ** -0.8; the step counter a Python int in the state."""

    def __init__(self, params, lr=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None,
                 weight_decay=0.0, scale_parameter=True, relative_step=True, warmup_init=False):
        defaults = dict(lr=lr, eps=eps, clip_threshold=clip_threshold, decay_rate=decay_rate, beta1=beta1,
                        weight_decay=weight_decay, scale_parameter=scale_parameter, relative_step=relative_step,
                        warmup_init=warmup_init)
        super().__init__(params, defaults)

    @staticmethod
    def _get_lr(param_group, param_state):
        rel_step_sz = param_group["lr"]
        if param_group["relative_step"]:
            min_step = 1e-6 * param_state["step"] if param_group["warmup_init"] else 1e-2
            rel_step_sz = min(min_step, 1.0 / math.sqrt(param_state["step"]))
        param_scale = 1.0
        if param_group["scale_parameter"]:
            param_scale = max(param_group["eps"][1], param_state["RMS"])
        return param_scale * rel_step_sz

    @staticmethod
    def _rms(tensor):
        return tensor.norm(2) / (tensor.numel() ** 0.5)

    @staticmethod
    def _approx_sq_grad(exp_avg_sq_row, exp_avg_sq_col):
        r_factor = (exp_avg_sq_row / exp_avg_sq_row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        c_factor = exp_avg_sq_col.unsqueeze(-2).rsqrt()
        return torch.mul(r_factor, c_factor)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.dtype in {torch.float16, torch.bfloat16}:
                    grad = grad.float()
                state = self.state[p]
                grad_shape = grad.shape
                factored = len(grad_shape) >= 2
                use_first_moment = group["beta1"] is not None
                if len(state) == 0:
                    state["step"] = 0
                    if use_first_moment:
                        state["exp_avg"] = torch.zeros_like(grad)
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad_shape[:-1]).to(grad)
                        state["exp_avg_sq_col"] = torch.zeros(grad_shape[:-2] + grad_shape[-1:]).to(grad)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["RMS"] = 0
                p_data_fp32 = p
                if p.dtype in {torch.float16, torch.bfloat16}:
                    p_data_fp32 = p_data_fp32.float()
                state["step"] += 1
                state["RMS"] = self._rms(p_data_fp32)
                lr = self._get_lr(group, state)
                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = (grad ** 2) + group["eps"][0]
                if factored:
                    exp_avg_sq_row, exp_avg_sq_col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                    exp_avg_sq_row.mul_(beta2t).add_(update.mean(dim=-1), alpha=(1.0 - beta2t))
                    exp_avg_sq_col.mul_(beta2t).add_(update.mean(dim=-2), alpha=(1.0 - beta2t))
                    update = self._approx_sq_grad(exp_avg_sq_row, exp_avg_sq_col)
                    update.mul_(grad)
                else:
                    exp_avg_sq = state["exp_avg_sq"]
                    exp_avg_sq.mul_(beta2t).add_(update, alpha=(1.0 - beta2t))
                    update = exp_avg_sq.rsqrt().mul_(grad)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                if use_first_moment:
                    exp_avg = state["exp_avg"]
                    exp_avg.mul_(group["beta1"]).add_(update, alpha=(1 - group["beta1"]))
                    update = exp_avg
                if group["weight_decay"] != 0:
                    p_data_fp32.add_(p_data_fp32, alpha=(-group["weight_decay"] * lr))
                p_data_fp32.add_(-update)
                if p.dtype in {torch.float16, torch.bfloat16}:
                    p.copy_(p_data_fp32)


def _mlp(dt, d_in=12, hidden=24, d_out=4):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, d_out)).to(dt)


def make_adafactor(dt):
    model = _mlp(dt)
    opt = Adafactor(model.parameters(), beta1=0.9, weight_decay=1e-3)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(model), opt.state)


def _cls_inputs(i, dt):
    return torch.randn(16, 12, dtype=dt), torch.randint(0, 4, (16,))


def zeropower_via_newtonschulz5(G, steps=5):
    """Muon's quintic Newton-Schulz iteration for the orthogonal factor, in bf16, on the wide orientation."""
    assert G.ndim >= 2
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update(grad, momentum, beta=0.95, ns_steps=5, nesterov=True):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    if update.ndim == 4:
        update = update.view(len(update), -1)
    update = zeropower_via_newtonschulz5(update, steps=ns_steps)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    return update


class MuonWithAuxAdam(torch.optim.Optimizer):
    """KellerJordan/Muon's SingleDeviceMuonWithAuxAdam: Muon for the hidden matrices, Adam (hand-written,
    per-parameter Python step) for the rest, chosen by a use_muon flag per group."""

    def __init__(self, param_groups):
        for group in param_groups:
            if group["use_muon"]:
                group.setdefault("lr", 0.02)
                group.setdefault("momentum", 0.95)
                group.setdefault("weight_decay", 0)
            else:
                group.setdefault("lr", 3e-4)
                group.setdefault("betas", (0.9, 0.95))
                group.setdefault("eps", 1e-10)
                group.setdefault("weight_decay", 0)
        super().__init__(param_groups, dict())

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            if group["use_muon"]:
                for p in group["params"]:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    state = self.state[p]
                    if len(state) == 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update.reshape(p.shape), alpha=-group["lr"])
            else:
                for p in group["params"]:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    state = self.state[p]
                    if len(state) == 0:
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                        state["step"] = 0
                    state["step"] += 1
                    buf1, buf2 = state["exp_avg"], state["exp_avg_sq"]
                    buf1.lerp_(p.grad, 1 - group["betas"][0])
                    buf2.lerp_(p.grad.square(), 1 - group["betas"][1])
                    buf1c = buf1 / (1 - group["betas"][0] ** state["step"])
                    buf2c = buf2 / (1 - group["betas"][1] ** state["step"])
                    update = buf1c / (buf2c.sqrt() + group["eps"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update, alpha=-group["lr"])


def make_muon(dt):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5)).to(dt)
    hidden_weights = [p for n, p in model.named_parameters() if p.ndim >= 2 and n not in ("0.weight", "8.weight")]
    other = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and n not in ("0.weight", "8.weight"))]
    opt = MuonWithAuxAdam([dict(params=hidden_weights, use_muon=True, lr=0.02, weight_decay=0.01),
                           dict(params=other, use_muon=False, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)])

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        model.zero_grad(set_to_none=True)
        return loss.detach()
    return step, lambda: (_state(model), opt.state)


def muon_inputs(i, dt):
    return torch.randn(6, 3, 8, 8, dtype=dt), torch.randint(0, 5, (6,))


class SophiaG(torch.optim.Optimizer):
    """Liu et al.'s SophiaG: an EMA of gradients, an EMA of a Gauss-Newton-Bartlett Hessian diagonal updated
    by update_hessian() every k steps, the update clamp(exp_avg / (rho * bs * hess + eps), -1, 1), a tensor
    step counter in the state."""

    def __init__(self, params, lr=1e-3, betas=(0.965, 0.99), rho=0.04, weight_decay=1e-1):
        super().__init__(params, dict(lr=lr, betas=betas, rho=rho, weight_decay=weight_decay))

    @torch.no_grad()
    def update_hessian(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.zeros((1,), dtype=torch.float)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["hessian"] = torch.zeros_like(p)
                state["hessian"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)

    @torch.no_grad()
    def step(self, bs):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.zeros((1,), dtype=torch.float)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["hessian"] = torch.zeros_like(p)
                state["step"] += 1
                p.mul_(1 - group["lr"] * group["weight_decay"])
                state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                ratio = (state["exp_avg"].abs() / (group["rho"] * bs * state["hessian"] + 1e-15)).clamp(None, 1)
                p.addcmul_(state["exp_avg"].sign(), ratio, value=-group["lr"])


def make_sophia(dt):
    """nanoGPT-Sophia's training loop: every k iterations, labels sampled from the model's own softmax
    (torch.multinomial, global RNG), their loss's gradient squared into the Hessian EMA."""
    model = _mlp(dt)
    opt = SophiaG(model.parameters(), lr=2e-3, rho=0.05)
    st = {"iter": 0, "k": 2}

    def step(x, y):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step(bs=x.shape[0])
        opt.zero_grad(set_to_none=True)
        if st["iter"] % st["k"] == st["k"] - 1:
            logits = model(x)
            samp_dist = torch.distributions.Categorical(logits=logits)
            y_sample = samp_dist.sample()
            loss_sampled = F.cross_entropy(logits.view(-1, logits.size(-1)), y_sample.view(-1), ignore_index=-1)
            loss_sampled.backward()
            opt.update_hessian()
            opt.zero_grad(set_to_none=True)
        st["iter"] += 1
        return loss.detach()
    return step, lambda: (_state(model), _opt_state(opt), dict(st))


# ------------------------------------------------------------------------------------------------ physics and simulation
LBM_C = [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, 1), (-1, -1), (1, -1)]
LBM_W = [4 / 9] + [1 / 9] * 4 + [1 / 36] * 4
LBM_OPP = [0, 3, 4, 1, 2, 7, 8, 5, 6]


def lbm_equilibrium(rho, ux, uy, dt):
    feq = []
    usq = ux * ux + uy * uy
    for i, (cx, cy) in enumerate(LBM_C):
        cu = 3.0 * (cx * ux + cy * uy)
        feq.append(rho * LBM_W[i] * (1 + cu + 0.5 * cu * cu - 1.5 * usq))
    return torch.stack(feq)


def make_lbm(dt):
    """a D2Q9 BGK lattice Boltzmann channel flow (Palabos / the "LBM in 100 lines" tutorials): streaming by
    torch.roll per lattice velocity, full-way bounce-back on a cylinder mask with torch.where, an inflow
    profile re-imposed on the left column, drag by momentum exchange; the population carried between calls."""
    state = {"f": None, "steps": 0}

    def simulate(obstacle, n_steps, tau, u_in):
        ny, nx = obstacle.shape
        if state["f"] is None or state["f"].shape[1:] != obstacle.shape:
            rho0 = torch.ones(ny, nx, dtype=dt)
            state["f"] = lbm_equilibrium(rho0, torch.full_like(rho0, u_in), torch.zeros_like(rho0), dt)
        f = state["f"]
        drag = []
        for _ in range(n_steps):
            rho = f.sum(0)
            ux = sum(cx * f[i] for i, (cx, cy) in enumerate(LBM_C)) / rho
            uy = sum(cy * f[i] for i, (cx, cy) in enumerate(LBM_C)) / rho
            ux[:, 0] = u_in
            uy[:, 0] = 0.0
            rho[:, 0] = 1.0
            feq = lbm_equilibrium(rho, ux, uy, dt)
            fout = f - (f - feq) / tau
            fout[:, :, 0] = feq[:, :, 0]
            bounced = torch.stack([f[LBM_OPP[i]] for i in range(9)])
            fout = torch.where(obstacle[None], bounced, fout)
            drag.append((2 * (bounced - f) * torch.tensor([c[0] for c in LBM_C], dtype=dt)[:, None, None] * obstacle).sum())
            f = torch.stack([torch.roll(fout[i], shifts=(cy, cx), dims=(0, 1)) for i, (cx, cy) in enumerate(LBM_C)])
            state["steps"] += 1
        state["f"] = f
        return f.sum(0), torch.stack(drag), state["steps"]
    return simulate, lambda: (state["f"], state["steps"])


def lbm_inputs(i, dt):
    ny, nx = 10, 20
    yy, xx = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
    obstacle = (xx - 5 - i) ** 2 + (yy - ny // 2) ** 2 < 4
    return obstacle, 3 + i % 2, [0.6, 0.7, 0.6, 0.8][i], 0.04


def make_md(dt):
    """Lennard-Jones molecular dynamics in a periodic box: minimum-image displacements by round, a cutoff
    mask, forces by autograd.grad of the potential energy, velocity Verlet, positions wrapped by
    torch.remainder, a Berendsen thermostat; positions and velocities carried between calls."""
    state = {"pos": None, "vel": None, "t": 0.0}

    def potential(pos, box, rc=2.5):
        d = pos[:, None, :] - pos[None, :, :]
        d = d - box * torch.round(d / box)
        r2 = (d * d).sum(-1)
        n = pos.shape[0]
        mask = (r2 < rc * rc) & ~torch.eye(n, dtype=torch.bool)
        r2 = torch.where(mask, r2, torch.ones_like(r2))
        inv6 = (1.0 / r2) ** 3
        e = 4 * (inv6 * inv6 - inv6)
        return 0.5 * torch.where(mask, e, torch.zeros_like(e)).sum()

    def forces(pos, box):
        pos = pos.detach().requires_grad_(True)
        u = potential(pos, box)
        (g,) = torch.autograd.grad(u, pos)
        return -g, u.detach()

    def run(init_pos, box, n_steps, dt_, target_T):
        if state["pos"] is None or state["pos"].shape != init_pos.shape:
            state["pos"], state["vel"] = init_pos.clone(), torch.zeros_like(init_pos)
        pos, vel = state["pos"], state["vel"]
        f, u = forces(pos, box)
        energies = []
        for _ in range(n_steps):
            vel = vel + 0.5 * dt_ * f
            pos = torch.remainder(pos + dt_ * vel, box)
            f, u = forces(pos, box)
            vel = vel + 0.5 * dt_ * f
            ke = 0.5 * (vel * vel).sum()
            T = 2 * ke / (3 * pos.shape[0])
            lam = torch.sqrt(1 + dt_ / 0.1 * (target_T / T - 1))
            vel = vel * lam
            energies.append(torch.stack([u, ke]))
            state["t"] += dt_
        state["pos"], state["vel"] = pos, vel
        return torch.stack(energies), pos
    return run, lambda: (state["pos"], state["vel"], state["t"])


def md_inputs(i, dt):
    g = torch.stack(torch.meshgrid(*[torch.arange(3, dtype=dt)] * 3, indexing="ij"), -1).reshape(-1, 3)
    return g * 1.3 + 0.05 * torch.randn(27, 3, dtype=dt), 3.9, 3, 0.002, [1.0, 0.8, 1.2, 1.0][i]


def make_ising(dt):
    """a checkerboard Metropolis sweep of the 2-D Ising model (the GPU Ising tutorials): neighbour sums by
    torch.roll, acceptance exp(-2 beta dE) against torch.rand from an owned generator, black then white
    sites; magnetisation and energy per sweep; the lattice carried between calls."""
    gen = torch.Generator().manual_seed(17)
    st = {"spins": None, "sweeps": 0}

    def sweeps(n, beta, L):
        if st["spins"] is None or st["spins"].shape[0] != L:
            st["spins"] = torch.where(torch.rand(L, L, generator=gen) < 0.5, -1.0, 1.0).to(dt)
        s = st["spins"]
        ii, jj = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
        black = (ii + jj) % 2 == 0
        mags, ens = [], []
        for _ in range(n):
            for color in (black, ~black):
                nb = torch.roll(s, 1, 0) + torch.roll(s, -1, 0) + torch.roll(s, 1, 1) + torch.roll(s, -1, 1)
                dE = 2 * s * nb
                acc = torch.rand(L, L, generator=gen) < torch.exp(-beta * dE)
                s = torch.where(color & acc, -s, s)
            mags.append(s.mean().abs())
            ens.append(-(s * (torch.roll(s, 1, 0) + torch.roll(s, 1, 1))).mean())
            st["sweeps"] += 1
        st["spins"] = s
        return torch.stack(mags), torch.stack(ens)
    return sweeps, lambda: (st["spins"], st["sweeps"], gen.get_state())


def make_life(dt):
    """Conway's game of life by conv2d with a 3x3 neighbour kernel and circular padding, run until the board
    repeats its previous state or max_gens; population per generation as Python ints."""
    kernel = torch.ones(1, 1, 3, 3, dtype=dt)
    kernel[0, 0, 1, 1] = 0

    def life(board, max_gens):
        x = board[None, None].to(dt)
        pops = []
        prev = None
        for gen_ in range(max_gens):
            n = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), kernel)
            x_new = ((n == 3) | ((x == 1) & (n == 2))).to(dt)
            pops.append(int(x_new.sum().item()))
            if torch.equal(x_new, x) or (prev is not None and torch.equal(x_new, prev)):
                x = x_new
                break
            prev, x = x, x_new
        return x[0, 0].bool(), pops, gen_
    return life, lambda: None


def life_inputs(i, dt):
    g = torch.Generator().manual_seed(i)
    b = torch.rand(12, 12 + 2 * i, generator=g) < 0.35
    if i == 1:
        b = torch.zeros(8, 8, dtype=torch.bool)
        b[1, 2] = b[2, 3] = b[3, 1] = b[3, 2] = b[3, 3] = True
    return b, [12, 40, 15, 10][i]


# ------------------------------------------------------------------------------------------------ numerical methods
def make_pcg(dt):
    """Jacobi-preconditioned conjugate gradient on an SPD system, to a relative residual tolerance checked by
    .item() every iteration (scipy.sparse.linalg.cg's loop), the residual history returned."""

    def pcg(A, b, tol=1e-5, maxiter=100):
        x = torch.zeros_like(b)
        Minv = 1.0 / torch.diagonal(A)
        r = b - A @ x
        z = Minv * r
        p = z.clone()
        rz = torch.dot(r, z)
        bnorm = torch.linalg.vector_norm(b)
        hist = []
        it = 0
        for it in range(1, maxiter + 1):
            Ap = A @ p
            alpha = rz / torch.dot(p, Ap)
            x = x + alpha * p
            r = r - alpha * Ap
            res = (torch.linalg.vector_norm(r) / bnorm).item()
            hist.append(res)
            if res < tol:
                break
            z = Minv * r
            rz_new = torch.dot(r, z)
            beta = rz_new / rz
            p = z + beta * p
            rz = rz_new
        return x, it, hist
    return pcg, lambda: None


def pcg_inputs(i, dt):
    n = 12 + 4 * i
    M = torch.randn(n, n, dtype=dt)
    A = M @ M.T / n + torch.diag(torch.rand(n, dtype=dt) * 5 + 0.5)
    return A, torch.randn(n, dtype=dt)


def make_power_iter(dt):
    """top-k eigenpairs of a symmetric matrix by power iteration to a tolerance on the Rayleigh quotient,
    Hotelling deflation between them; the iteration counts as Python ints."""

    def top_eigs(A, k, tol=1e-6, max_iter=300, seed=0):
        g = torch.Generator().manual_seed(seed)
        vals, vecs, iters = [], [], []
        B = A.clone()
        for _ in range(k):
            v = torch.randn(A.shape[0], generator=g, dtype=A.dtype)
            v = v / v.norm()
            lam = torch.tensor(0.0, dtype=A.dtype)
            for it in range(max_iter):
                w = B @ v
                lam_new = torch.dot(v, w)
                v = w / w.norm()
                if abs(lam_new - lam) < tol * abs(lam_new):
                    lam = lam_new
                    break
                lam = lam_new
            vals.append(lam)
            vecs.append(v)
            iters.append(it)
            B = B - lam * torch.outer(v, v)
        V = torch.stack(vecs, 1)
        return torch.stack(vals), V.abs(), iters
    return top_eigs, lambda: None


def power_inputs(i, dt):
    n = 10 + 2 * i
    Q, _ = torch.linalg.qr(torch.randn(n, n, dtype=dt))
    d = torch.linspace(1, 10, n, dtype=dt) ** 2
    return (Q * d) @ Q.T, 2 + i % 2


def make_kepler(dt):
    """Newton's method on Kepler's equation E - e sin E = M for a batch of orbits, the derivative by
    torch.autograd.grad of the summed residual, iterated until max |f| < tol; true anomalies from E."""

    def solve(M, e, tol=1e-6, max_iter=50):
        E = torch.where(e > 0.8, torch.full_like(M, math.pi), M)
        n = 0
        for n in range(max_iter):
            E = E.detach().requires_grad_(True)
            f = E - e * torch.sin(E) - M
            (df,) = torch.autograd.grad(f.sum(), E)
            E = (E - f / df).detach()
            if f.abs().max() < tol:
                break
        nu = 2 * torch.atan2(torch.sqrt(1 + e) * torch.sin(E / 2), torch.sqrt(1 - e) * torch.cos(E / 2))
        return E, nu, n
    return solve, lambda: None


def kepler_inputs(i, dt):
    return torch.rand(20 + i, dtype=dt) * 2 * math.pi, torch.rand(20 + i, dtype=dt) * 0.95


# ------------------------------------------------------------------------------------------------ evolution strategies
def centered_ranks(x):
    """OpenAI ES's compute_centered_ranks: argsort of argsort, scaled to [-0.5, 0.5]."""
    ranks = torch.empty_like(x)
    ranks[x.argsort()] = torch.arange(len(x), dtype=x.dtype)
    return ranks / (len(x) - 1) - 0.5


def make_es(dt):
    """an evolution-strategies step for a linear-tanh policy as a flat vector: antithetic noise from an owned
    generator, the population's returns evaluated in one batched bmm rollout, centred-rank shaping, weight
    decay, Adam on the flat vector (torch.optim on a plain tensor)."""
    obs_dim, act_dim = 6, 2
    theta = torch.zeros(obs_dim * act_dim + act_dim, dtype=dt, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.05)
    gen = torch.Generator().manual_seed(23)
    A_env = torch.randn(obs_dim, obs_dim, dtype=dt) * 0.3
    B_env = torch.randn(act_dim, obs_dim, dtype=dt) * 0.5

    def rollout(params, s0, T):
        W = params[:, :obs_dim * act_dim].view(-1, obs_dim, act_dim)
        b = params[:, obs_dim * act_dim:].view(-1, 1, act_dim)
        s = s0.expand(params.shape[0], -1, -1)
        ret = torch.zeros(params.shape[0], dtype=params.dtype)
        for _ in range(T):
            a = torch.tanh(torch.bmm(s, W) + b)
            s = torch.tanh(s @ A_env + a @ B_env)
            ret = ret - (s ** 2).sum((1, 2)) - 0.01 * (a ** 2).sum((1, 2))
        return ret

    def es_step(s0, npop, sigma, T):
        with torch.no_grad():
            eps = torch.randn(npop // 2, theta.numel(), generator=gen, dtype=dt)
            eps = torch.cat([eps, -eps])
            returns = rollout(theta.detach() + sigma * eps, s0, T)
            shaped = centered_ranks(returns)
            grad = -(shaped @ eps) / (npop * sigma) + 0.005 * theta
        theta.grad = grad
        opt.step()
        return returns.mean(), returns.max(), shaped
    return es_step, lambda: (theta.detach(), _opt_state(opt), gen.get_state())


def es_inputs(i, dt):
    return torch.randn(1, 3, 6, dtype=dt), [16, 20, 16, 24][i], 0.1, 4 + i % 2


# ------------------------------------------------------------------------------------------------ differentiable rendering
def soft_rasterize(verts2d, depth, faces, H, W, sigma=1e-3, gamma=1e-2, eps=1e-3):
    """SoftRas (Liu et al. 2019) for silhouettes and depth-colours: each pixel's signed squared distance to
    each triangle by barycentrics and edge distances, a sigmoid coverage, the soft z-buffer as a softmax over
    faces (and the background) by inverse depth / gamma."""
    ys = (torch.arange(H, dtype=verts2d.dtype) + 0.5) / H * 2 - 1
    xs = (torch.arange(W, dtype=verts2d.dtype) + 0.5) / W * 2 - 1
    py, px = torch.meshgrid(ys, xs, indexing="ij")
    p = torch.stack([px, py], -1).view(-1, 1, 2)
    tri = verts2d[faces]
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    v0, v1, v2 = b - a, c - a, p - a
    d00 = (v0 * v0).sum(-1)
    d01 = (v0 * v1).sum(-1)
    d11 = (v1 * v1).sum(-1)
    d20 = (v2 * v0).sum(-1)
    d21 = (v2 * v1).sum(-1)
    denom = d00 * d11 - d01 * d01
    w1 = (d11 * d20 - d01 * d21) / denom
    w2 = (d00 * d21 - d01 * d20) / denom
    w0 = 1 - w1 - w2
    inside = (w0 >= 0) & (w1 >= 0) & (w2 >= 0)

    def seg_dist2(p, s0, s1):
        d = s1 - s0
        t = ((p - s0) * d).sum(-1) / (d * d).sum(-1).clamp(min=1e-12)
        t = t.clamp(0, 1)
        q = s0 + t[..., None] * d
        return ((p - q) ** 2).sum(-1)
    dist2 = torch.minimum(torch.minimum(seg_dist2(p, a, b), seg_dist2(p, b, c)), seg_dist2(p, c, a))
    sign = torch.where(inside, 1.0, -1.0).to(verts2d.dtype)
    D = torch.sigmoid(sign * dist2 / sigma)
    silhouette = 1 - torch.prod(1 - D, dim=-1)
    zf = (depth[faces] * torch.stack([w0, w1, w2], -1).clamp(0, 1)).sum(-1)
    z_inv = (1.0 / zf.clamp(min=1e-3))
    z_max = z_inv.max(-1, keepdim=True)[0].clamp(min=eps)
    wts = D * torch.exp((z_inv - z_max) / gamma)
    w_bg = torch.exp((eps - z_max) / gamma)
    depth_img = (wts * zf).sum(-1) / (wts.sum(-1) + w_bg.squeeze(-1))
    return silhouette.view(H, W), depth_img.view(H, W)


def make_soft_raster(dt):
    """fitting a mesh's 2-D vertex offsets to a target silhouette through the soft rasterizer (SoftRas's
    deform example): IoU loss plus a Laplacian smoothness term, Adam."""
    base = torch.tensor([[0.0, 0.0], [0.6, 0.0], [0.3, 0.5], [-0.3, 0.5], [-0.6, 0.0], [-0.3, -0.5], [0.3, -0.5]],
                        dtype=dt)
    depth = torch.tensor([1.0, 1.2, 1.4, 1.3, 1.1, 1.5, 1.2], dtype=dt)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3], [0, 3, 4], [0, 4, 5], [0, 5, 6], [0, 6, 1]])
    offsets = torch.zeros_like(base, requires_grad=True)
    opt = torch.optim.Adam([offsets], lr=0.02)
    nbrs = [[1, 2, 3, 4, 5, 6], [0, 2, 6], [0, 1, 3], [0, 2, 4], [0, 3, 5], [0, 4, 6], [0, 5, 1]]

    def step(target, H, W):
        verts = base + offsets
        sil, dimg = soft_rasterize(verts, depth, faces, H, W)
        iou = (sil * target).sum() / (sil + target - sil * target).sum()
        lap = torch.stack([verts[i] - verts[n].mean(0) for i, n in enumerate(nbrs)])
        loss = 1 - iou + 0.1 * (lap ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), sil.detach(), dimg.detach()
    return step, lambda: (offsets.detach(), offsets.grad, _opt_state(opt))


def raster_inputs(i, dt):
    H, W = 12 + 2 * i, 12
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, H), torch.linspace(-1, 1, W), indexing="ij")
    return ((xs ** 2 / 0.5 + ys ** 2 / 0.3) < 1).to(dt), H, W


# ------------------------------------------------------------------------------------------------ LLM training tricks
class SwitchFFN(nn.Module):
    """a Switch Transformer MoE layer (Fedus et al.; mesh-tensorflow's / t5x's router written in torch): router
    z-loss, top-1 routing with jitter noise in training, the load-balancing loss E * sum(f_i * P_i) by
    one_hot, each expert's capacity enforced by a cumsum position, the dropped tokens passed through."""

    def __init__(self, d=16, n_experts=4, hidden=24, capacity_factor=1.25, jitter=0.01):
        super().__init__()
        self.router = nn.Linear(d, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_experts, d, hidden) * d ** -0.5)
        self.w2 = nn.Parameter(torch.randn(n_experts, hidden, d) * hidden ** -0.5)
        self.n_experts, self.capacity_factor, self.jitter = n_experts, capacity_factor, jitter

    def forward(self, x):
        B, T, D = x.shape
        tokens = x.reshape(-1, D)
        n = tokens.shape[0]
        if self.training and self.jitter > 0:
            tokens_r = tokens * torch.empty_like(tokens).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        else:
            tokens_r = tokens
        router_logits = self.router(tokens_r).float()
        z_loss = torch.logsumexp(router_logits, dim=-1).pow(2).mean()
        router_probs = router_logits.softmax(-1)
        expert_index = router_probs.argmax(-1)
        expert_mask = F.one_hot(expert_index, self.n_experts)
        tokens_per_expert = expert_mask.float().mean(0)
        prob_per_expert = router_probs.mean(0)
        aux_loss = self.n_experts * (tokens_per_expert * prob_per_expert).sum()
        capacity = int(self.capacity_factor * n / self.n_experts)
        position_in_expert = (torch.cumsum(expert_mask, dim=0) * expert_mask).sum(-1) - 1
        keep = position_in_expert < capacity
        gate = router_probs.gather(1, expert_index[:, None]).squeeze(1).to(x.dtype)
        out = tokens.clone()
        for e in range(self.n_experts):
            idx = torch.nonzero((expert_index == e) & keep).squeeze(1)
            if idx.numel() == 0:
                continue
            h = F.gelu(tokens[idx] @ self.w1[e]) @ self.w2[e]
            out[idx] = h * gate[idx, None]
        counts = torch.bincount(expert_index, minlength=self.n_experts)
        return out.view(B, T, D), z_loss, aux_loss, counts, (~keep).sum()


class MoEBlock(nn.Module):
    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.moe = SwitchFFN(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.emb(ids)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=torch.triu(torch.ones(T, T, dtype=torch.bool), 1), need_weights=False)[0]
        m, z, aux, counts, dropped = self.moe(self.ln2(x))
        return self.head(x + m), z, aux, counts, dropped


def make_switch_moe(dt):
    """an LM step with the router losses (PaLM's z-loss on the output logits too), expert counts accumulated in
    a buffer-like tensor across calls, the dropped-token fraction logged as a Python float."""
    model = MoEBlock().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    stats = {"counts": torch.zeros(4, dtype=torch.long), "dropped": []}

    def step(ids, aux_coef, z_coef):
        model.train()
        logits, z_loss, aux_loss, counts, dropped = model(ids[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
        out_z = 1e-4 * torch.logsumexp(logits.float(), -1).pow(2).mean()
        loss = ce + aux_coef * aux_loss + z_coef * z_loss + out_z
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        stats["counts"] += counts
        stats["dropped"].append(dropped.item() / ids[:, :-1].numel())
        return loss.detach(), ce.detach(), aux_loss.detach()
    return step, lambda: (_state(model), _opt_state(opt), stats)


def moe_inputs(i, dt):
    return torch.randint(0, 40, (3, 9 + 2 * (i % 2))), 1e-2, [1e-3, 1e-3, 0.0, 1e-3][i]


# ------------------------------------------------------------------------------------------------ forward pre-hooks
class Backbone(nn.Module):
    def __init__(self, d=12, n_classes=3):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, 24), nn.ReLU(), nn.Linear(24, 24))
        self.classifier = nn.Linear(24, n_classes)

    def forward(self, x, mask=None):
        h = self.encoder(x)
        if mask is not None:
            h = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        else:
            h = h.mean(1)
        return self.classifier(h)


def make_pre_hooks(dt):
    """forward pre-hooks that edit inputs, as libraries install them: a standardising hook returning new args
    (running statistics kept on the hook's closure), a with_kwargs hook inserting a padding mask computed
    from the input, a pre-hook on a submodule adding Gaussian input noise in training; the noise hook removed
    after the second call through its handle; SGD with Nesterov momentum."""
    model = Backbone().to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    stats = {"mean": torch.zeros(12, dtype=dt), "n": 0, "calls": 0}

    def standardize(module, args):
        (x,) = args[:1]
        if module.training:
            stats["mean"] = 0.9 * stats["mean"] + 0.1 * x.mean((0, 1)).detach()
            stats["n"] += 1
        return (x - stats["mean"],) + tuple(args[1:])

    def add_mask(module, args, kwargs):
        if kwargs.get("mask") is None:
            kwargs = dict(kwargs)
            kwargs["mask"] = (args[0].abs().sum(-1) > 0).to(args[0].dtype)
        return args, kwargs

    def noise(module, args):
        if module.training:
            return (args[0] + 0.05 * torch.randn_like(args[0]),)

    model.register_forward_pre_hook(add_mask, with_kwargs=True)
    model.register_forward_pre_hook(standardize, prepend=True)
    handle = {"noise": model.encoder[2].register_forward_pre_hook(noise)}

    def step(x, y):
        stats["calls"] += 1
        if stats["calls"] == 3 and handle["noise"] is not None:
            handle["noise"].remove()
            handle["noise"] = None
        model.train()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x).argmax(-1)
        return loss.detach(), pred
    return step, lambda: (_state(model), _opt_state(opt), stats)


def pre_hook_inputs(i, dt):
    x = torch.randn(6, 5 + i % 2, 12, dtype=dt)
    x[0, -2:] = 0
    x[3, -1:] = 0
    return x, torch.randint(0, 3, (6,))


# ------------------------------------------------------------------------------------------------ the cases
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("kornia_canny", make_canny, canny_inputs, 4, False),
    ("hsv_color_jitter", make_color_jitter, jitter_inputs, 4, False),
    ("random_affine_kp", make_random_affine, affine_inputs, 4, False),
    ("bilateral_filter", make_bilateral, bilateral_inputs, 4, True),
    ("raft_corr", make_raft, raft_inputs, 4, False),
    ("unflow_occlusion", make_unflow, unflow_inputs, 4, False),
    ("edsr_channels_last", make_edsr, edsr_inputs, 4, True),
    ("entmax_tabnet", make_entmax_tabnet, entmax_inputs, 4, False),
    ("informer_probsparse", make_informer, informer_inputs, 4, False),
    ("tft_grn_vsn", make_tft, tft_inputs, 4, True),
    ("hf_logits_processors", make_hf_sample, hf_sample_inputs, 4, False),
    ("static_kv_ntk_rope", make_static_cache, static_cache_inputs, 4, False),
    ("prefix_lm_window", make_prefix_lm, prefix_lm_inputs, 4, True),
    ("int4_pack_dequant", make_int4_mlp, lambda i, dt: (torch.randn(5 + i, 32, dtype=dt),), 4, True),
    ("qlora_nf4", make_qlora, qlora_inputs, 4, False),
    ("llm_int8_outliers", make_int8_outliers, int8_inputs, 4, False),
    ("adafactor", make_adafactor, _cls_inputs, 5, True),
    ("muon_newton_schulz", make_muon, muon_inputs, 4, False),
    ("sophia_gnb", make_sophia, _cls_inputs, 5, False),
    ("lbm_d2q9", make_lbm, lbm_inputs, 4, False),
    ("md_lennard_jones", make_md, md_inputs, 4, False),
    ("ising_checkerboard", make_ising, lambda i, dt: (2, [0.3, 0.44, 0.6, 0.44][i], [8, 8, 10, 8][i]), 4, False),
    ("game_of_life", make_life, life_inputs, 4, False),
    ("pcg_tolerance", make_pcg, pcg_inputs, 4, False),
    ("power_iteration", make_power_iter, power_inputs, 4, False),
    ("newton_kepler", make_kepler, kepler_inputs, 4, False),
    ("es_antithetic", make_es, es_inputs, 4, False),
    ("soft_rasterizer", make_soft_raster, raster_inputs, 4, False),
    ("switch_moe_zloss", make_switch_moe, moe_inputs, 4, False),
    ("pre_hooks_edit", make_pre_hooks, pre_hook_inputs, 4, False),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout11.py")
