"""Held-out set 10: programs from domains and idioms the earlier sets leave out, written the way those domains'
reference code writes them: diffusion (Karras et al.'s EDM Heun sampler with churn in float64, a DDPM step with a
cosine schedule, v-prediction and min-SNR loss weights gathered by timestep), normalizing flows (nflows' rational-
quadratic spline coupling with boolean-mask tails and searchsorted bins, Glow's LU-parametrised invertible 1x1
convolution with a bits-per-dim loss), an IWAE bound over torch.distributions.Independent with a KL weight annealed
by a step counter, contrastive and metric learning (SupCon's masked log-probabilities, OpenCLIP's loss with a cached
label tensor and a clamped logit_scale, batch-hard triplets by torch.cdist with a center loss and its own
optimizer), decoupled knowledge distillation with an epoch warmup, timm's ModelEmaV3 through torch._foreach_lerp_,
LSQ quantization-aware training with fake_quantize_per_channel / per_tensor, torch.nn.utils.prune between calls,
loralib's merge-on-eval LoRA, SDPA with ALiBi float masks, GQA and is_causal dropout, mamba-minimal's selective
scan, efficient-kan's B-spline layer with a least-squares grid update, BinaryNet's weights with an .org copy,
an autograd.Function with setup_context / mark_non_differentiable / once_differentiable, an orthogonal RNN
through parametrizations, MCMC (Hamiltonian Monte Carlo by autograd.grad leapfrogs, a bootstrap particle filter
with systematic resampling), survival analysis (DeepSurv's Cox loss and Harrell's C), Bayes by backprop,
Poincare embeddings with Riemannian SGD, PGD adversarial training, EWC, FedAvg rounds over deep-copied clients,
growing neural cellular automata, Harris corners with mutual-nearest matching, soft-DTW, speculative sampling
from a generator seeded in the function, GMM EM to a tolerance, an MLM collator feeding checkpointed encoder
layers, MC-dropout BALD with split conformal sets, Deep SVDD's soft boundary, PageRank over a sparse COO matrix.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state,
counters, the global RNG's state after the call, arguments): bench/heldout4.py's runner and report
(imported, same options):

    python bench/heldout10.py --threads 1 --dtypes fp32
    python bench/heldout10.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout10.py --threads 1 --models edm_heun,supcon --json /tmp/h10.jsonl
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.distributions import Bernoulli, Independent, MultivariateNormal, Normal, kl_divergence
from torch.nn.utils import parametrizations, parametrize, prune
from torch.utils.checkpoint import checkpoint

from heldout7 import _opt_state, _state  # noqa: E402  (parameters / gradients / optimizer state as compared)
from heldout8 import TinyUNet  # noqa: E402  (a class-conditional denoiser)
import heldout4  # noqa: E402  (the runner: run_case, diff, main)


# ------------------------------------------------------------------------------------------------ diffusion
class EDMPrecond(nn.Module):
    """Karras et al. (2022) preconditioning around a small MLP denoiser."""

    def __init__(self, d=8, sigma_data=0.5, hidden=48):
        super().__init__()
        self.sigma_data = sigma_data
        self.net = nn.Sequential(nn.Linear(d + 1, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, d))

    def round_sigma(self, sigma):
        return torch.as_tensor(sigma)

    def forward(self, x, sigma):
        dtype = self.net[0].weight.dtype
        x = x.to(dtype)
        sigma = sigma.to(dtype).reshape(-1, 1)
        c_skip = self.sigma_data ** 2 / (sigma ** 2 + self.sigma_data ** 2)
        c_out = sigma * self.sigma_data / (sigma ** 2 + self.sigma_data ** 2).sqrt()
        c_in = 1 / (self.sigma_data ** 2 + sigma ** 2).sqrt()
        c_noise = sigma.log() / 4
        F_x = self.net(torch.cat([c_in * x, c_noise.expand(x.shape[0], 1)], dim=1))
        return c_skip * x + c_out * F_x


def edm_sampler(net, latents, num_steps=6, sigma_min=0.002, sigma_max=80, rho=7, S_churn=10, S_min=0.05,
                S_max=50, S_noise=1.003):
    """NVlabs/edm generate.py's edm_sampler: time steps in float64, stochastic churn where S_min <= t <= S_max,
    Euler step with a second-order (Heun) correction except at the last step."""
    step_indices = torch.arange(num_steps, dtype=torch.float64)
    t_steps = (sigma_max ** (1 / rho) + step_indices / (num_steps - 1) * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
    t_steps = torch.cat([net.round_sigma(t_steps), torch.zeros_like(t_steps[:1])])
    x_next = latents.to(torch.float64) * t_steps[0]
    for i, (t_cur, t_next) in enumerate(zip(t_steps[:-1], t_steps[1:])):
        x_cur = x_next
        gamma = min(S_churn / num_steps, np.sqrt(2) - 1) if S_min <= t_cur <= S_max else 0
        t_hat = net.round_sigma(t_cur + gamma * t_cur)
        x_hat = x_cur + (t_hat ** 2 - t_cur ** 2).sqrt() * S_noise * torch.randn_like(x_cur)
        denoised = net(x_hat, t_hat).to(torch.float64)
        d_cur = (x_hat - denoised) / t_hat
        x_next = x_hat + (t_next - t_hat) * d_cur
        if i < num_steps - 1:
            denoised = net(x_next, t_next).to(torch.float64)
            d_prime = (x_next - denoised) / t_next
            x_next = x_hat + (t_next - t_hat) * (0.5 * d_cur + 0.5 * d_prime)
    return x_next


def make_edm(dt):
    net = EDMPrecond().to(dt).eval()

    @torch.no_grad()
    def generate(latents, num_steps):
        return edm_sampler(net, latents, num_steps=num_steps)
    return generate, lambda: None


def cosine_beta_schedule(timesteps, s=0.008):
    steps = timesteps + 1
    t = torch.linspace(0, timesteps, steps, dtype=torch.float64) / timesteps
    alphas_cumprod = torch.cos((t + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, 0, 0.999)


def extract(a, t, x_shape):
    b, *_ = t.shape
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


class GaussianDiffusion(nn.Module):
    """lucidrains denoising-diffusion-pytorch's GaussianDiffusion (objective 'pred_v', min-SNR loss weight,
    offset noise), around a class-conditional denoiser."""

    def __init__(self, model, timesteps=200, min_snr_gamma=5, offset_noise_strength=0.1):
        super().__init__()
        self.model, self.num_timesteps, self.offset_noise_strength = model, timesteps, offset_noise_strength
        betas = cosine_beta_schedule(timesteps)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)

        def register_buffer(name, val):
            self.register_buffer(name, val.to(torch.float32))
        register_buffer("sqrt_alphas_cumprod", torch.sqrt(alphas_cumprod))
        register_buffer("sqrt_one_minus_alphas_cumprod", torch.sqrt(1.0 - alphas_cumprod))
        snr = alphas_cumprod / (1 - alphas_cumprod)
        maybe_clipped_snr = snr.clone()
        maybe_clipped_snr.clamp_(max=min_snr_gamma)
        register_buffer("loss_weight", maybe_clipped_snr / (snr + 1))

    def q_sample(self, x_start, t, noise):
        return (extract(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
                + extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise)

    def predict_v(self, x_start, t, noise):
        return (extract(self.sqrt_alphas_cumprod, t, x_start.shape) * noise
                - extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * x_start)

    def p_losses(self, x_start, t, classes):
        noise = torch.randn_like(x_start)
        if self.offset_noise_strength > 0.0:
            offset_noise = torch.randn(x_start.shape[:2], dtype=x_start.dtype)
            noise = noise + self.offset_noise_strength * offset_noise[..., None, None]
        x = self.q_sample(x_start=x_start, t=t, noise=noise)
        model_out = self.model(x, t, classes)
        target = self.predict_v(x_start, t, noise)
        loss = F.mse_loss(model_out, target, reduction="none")
        loss = loss.reshape(loss.shape[0], -1).mean(1)
        loss = loss * extract(self.loss_weight, t, loss.shape).to(loss.dtype)
        return loss.mean()

    def forward(self, img, classes):
        b = img.shape[0]
        t = torch.randint(0, self.num_timesteps, (b,)).long()
        img = img * 2 - 1
        return self.p_losses(img, t, classes)


def make_ddpm_vpred(dt):
    diffusion = GaussianDiffusion(TinyUNet()).to(dt)
    opt = torch.optim.Adam(diffusion.parameters(), lr=8e-5, betas=(0.9, 0.99))

    def train_step(img, classes):
        loss = diffusion(img, classes)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return train_step, lambda: (_state(diffusion), _opt_state(opt))


# ------------------------------------------------------------------------------------------------ flows
DEFAULT_MIN_BIN_WIDTH = 1e-3
DEFAULT_MIN_BIN_HEIGHT = 1e-3
DEFAULT_MIN_DERIVATIVE = 1e-3


def searchsorted(bin_locations, inputs, eps=1e-6):
    bin_locations[..., -1] += eps
    return torch.sum(inputs[..., None] >= bin_locations, dim=-1) - 1


def rational_quadratic_spline(inputs, unnormalized_widths, unnormalized_heights, unnormalized_derivatives,
                              left=0.0, right=1.0, bottom=0.0, top=1.0, min_bin_width=DEFAULT_MIN_BIN_WIDTH,
                              min_bin_height=DEFAULT_MIN_BIN_HEIGHT, min_derivative=DEFAULT_MIN_DERIVATIVE):
    """nflows.transforms.splines.rational_quadratic (forward direction)."""
    if torch.min(inputs) < left or torch.max(inputs) > right:
        raise ValueError("input outside domain")
    num_bins = unnormalized_widths.shape[-1]
    widths = F.softmax(unnormalized_widths, dim=-1)
    widths = min_bin_width + (1 - min_bin_width * num_bins) * widths
    cumwidths = torch.cumsum(widths, dim=-1)
    cumwidths = F.pad(cumwidths, pad=(1, 0), mode="constant", value=0.0)
    cumwidths = (right - left) * cumwidths + left
    cumwidths[..., 0] = left
    cumwidths[..., -1] = right
    widths = cumwidths[..., 1:] - cumwidths[..., :-1]
    derivatives = min_derivative + F.softplus(unnormalized_derivatives)
    heights = F.softmax(unnormalized_heights, dim=-1)
    heights = min_bin_height + (1 - min_bin_height * num_bins) * heights
    cumheights = torch.cumsum(heights, dim=-1)
    cumheights = F.pad(cumheights, pad=(1, 0), mode="constant", value=0.0)
    cumheights = (top - bottom) * cumheights + bottom
    cumheights[..., 0] = bottom
    cumheights[..., -1] = top
    heights = cumheights[..., 1:] - cumheights[..., :-1]
    bin_idx = searchsorted(cumwidths, inputs)[..., None]
    input_cumwidths = cumwidths.gather(-1, bin_idx)[..., 0]
    input_bin_widths = widths.gather(-1, bin_idx)[..., 0]
    input_cumheights = cumheights.gather(-1, bin_idx)[..., 0]
    delta = heights / widths
    input_delta = delta.gather(-1, bin_idx)[..., 0]
    input_derivatives = derivatives.gather(-1, bin_idx)[..., 0]
    input_derivatives_plus_one = derivatives[..., 1:].gather(-1, bin_idx)[..., 0]
    input_heights = heights.gather(-1, bin_idx)[..., 0]
    theta = (inputs - input_cumwidths) / input_bin_widths
    theta_one_minus_theta = theta * (1 - theta)
    numerator = input_heights * (input_delta * theta.pow(2) + input_derivatives * theta_one_minus_theta)
    denominator = input_delta + ((input_derivatives + input_derivatives_plus_one - 2 * input_delta)
                                 * theta_one_minus_theta)
    outputs = input_cumheights + numerator / denominator
    derivative_numerator = input_delta.pow(2) * (input_derivatives_plus_one * theta.pow(2)
                                                 + 2 * input_delta * theta_one_minus_theta
                                                 + input_derivatives * (1 - theta).pow(2))
    logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
    return outputs, logabsdet


def unconstrained_rational_quadratic_spline(inputs, unnormalized_widths, unnormalized_heights,
                                            unnormalized_derivatives, tail_bound=1.0,
                                            min_derivative=DEFAULT_MIN_DERIVATIVE):
    """identity (linear) tails outside [-tail_bound, tail_bound], boolean-mask selection inside."""
    inside_interval_mask = (inputs >= -tail_bound) & (inputs <= tail_bound)
    outside_interval_mask = ~inside_interval_mask
    outputs = torch.zeros_like(inputs)
    logabsdet = torch.zeros_like(inputs)
    unnormalized_derivatives = F.pad(unnormalized_derivatives, pad=(1, 1))
    constant = np.log(np.exp(1 - min_derivative) - 1)
    unnormalized_derivatives[..., 0] = constant
    unnormalized_derivatives[..., -1] = constant
    outputs[outside_interval_mask] = inputs[outside_interval_mask]
    logabsdet[outside_interval_mask] = 0
    if torch.any(inside_interval_mask):
        outputs[inside_interval_mask], logabsdet[inside_interval_mask] = rational_quadratic_spline(
            inputs=inputs[inside_interval_mask],
            unnormalized_widths=unnormalized_widths[inside_interval_mask, :],
            unnormalized_heights=unnormalized_heights[inside_interval_mask, :],
            unnormalized_derivatives=unnormalized_derivatives[inside_interval_mask, :],
            left=-tail_bound, right=tail_bound, bottom=-tail_bound, top=tail_bound)
    return outputs, logabsdet


class PiecewiseRQCoupling(nn.Module):
    def __init__(self, features, mask, hidden=32, num_bins=6, tail_bound=3.0):
        super().__init__()
        self.register_buffer("mask", mask)
        self.num_bins, self.tail_bound, self.hidden = num_bins, tail_bound, hidden
        n_id, n_tr = int((mask <= 0).sum()), int((mask > 0).sum())
        self.transform_net = nn.Sequential(nn.Linear(n_id, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                           nn.Linear(hidden, n_tr * (3 * num_bins - 1)))

    def forward(self, inputs):
        identity, transform = inputs[:, self.mask <= 0], inputs[:, self.mask > 0]
        params = self.transform_net(identity).view(inputs.shape[0], transform.shape[1], 3 * self.num_bins - 1)
        uw = params[..., :self.num_bins] / np.sqrt(self.hidden)
        uh = params[..., self.num_bins:2 * self.num_bins] / np.sqrt(self.hidden)
        ud = params[..., 2 * self.num_bins:]
        out_tr, logabsdet = unconstrained_rational_quadratic_spline(transform, uw, uh, ud, tail_bound=self.tail_bound)
        outputs = torch.empty_like(inputs)
        outputs[:, self.mask <= 0] = identity
        outputs[:, self.mask > 0] = out_tr
        return outputs, logabsdet.sum(-1)


def make_rq_spline_flow(dt):
    """nflows-style neural spline flow: two coupling layers with alternating masks, a standard normal base
    through torch.distributions, maximum likelihood with Adam and gradient clipping."""
    d = 4
    layers = nn.ModuleList([PiecewiseRQCoupling(d, torch.tensor([1.0, 0.0, 1.0, 0.0])),
                            PiecewiseRQCoupling(d, torch.tensor([0.0, 1.0, 0.0, 1.0]))]).to(dt)
    opt = torch.optim.Adam(layers.parameters(), lr=1e-3)

    def log_prob(x):
        total = torch.zeros(x.shape[0], dtype=x.dtype)
        for layer in layers:
            x, ld = layer(x)
            total = total + ld
        base = Independent(Normal(torch.zeros(d, dtype=x.dtype), torch.ones(d, dtype=x.dtype)), 1)
        return base.log_prob(x) + total

    def train_step(x):
        opt.zero_grad()
        loss = -log_prob(x).mean()
        loss.backward()
        nn.utils.clip_grad_norm_(layers.parameters(), 5.0)
        opt.step()
        return loss.detach()
    return train_step, lambda: (_state(layers), _opt_state(opt))


def flow_inputs(i, dt):
    x = torch.randn(24 + 4 * (i % 2), 4, dtype=dt) * 1.5
    x[:, 1] = x[:, 0] ** 2 / 3 + 0.3 * x[:, 1]
    return (x,)


logabs = lambda x: torch.log(torch.abs(x))  # noqa: E731  (rosinality/glow-pytorch)


class InvConv2dLU(nn.Module):
    def __init__(self, in_channel):
        super().__init__()
        weight = torch.randn(in_channel, in_channel)
        q, _ = torch.linalg.qr(weight)
        w_p, w_l, w_u = torch.linalg.lu(q)
        w_s = torch.diag(w_u)
        w_u = torch.triu(w_u, 1)
        u_mask = torch.triu(torch.ones_like(w_u), 1)
        l_mask = u_mask.T
        self.register_buffer("w_p", w_p)
        self.register_buffer("u_mask", u_mask)
        self.register_buffer("l_mask", l_mask)
        self.register_buffer("s_sign", torch.sign(w_s))
        self.register_buffer("l_eye", torch.eye(l_mask.shape[0]))
        self.w_l = nn.Parameter(w_l)
        self.w_s = nn.Parameter(logabs(w_s))
        self.w_u = nn.Parameter(w_u)

    def forward(self, input):
        _, _, height, width = input.shape
        weight = self.calc_weight()
        out = F.conv2d(input, weight)
        logdet = height * width * torch.sum(self.w_s)
        return out, logdet

    def calc_weight(self):
        weight = (self.w_p @ (self.w_l * self.l_mask + self.l_eye)
                  @ ((self.w_u * self.u_mask) + torch.diag(self.s_sign * torch.exp(self.w_s))))
        return weight.unsqueeze(2).unsqueeze(3)


class ZeroConv2d(nn.Module):
    def __init__(self, in_channel, out_channel):
        super().__init__()
        self.conv = nn.Conv2d(in_channel, out_channel, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input):
        out = F.pad(input, [1, 1, 1, 1], value=1)
        out = self.conv(out)
        return out * torch.exp(self.scale * 3)


class AffineCoupling(nn.Module):
    def __init__(self, in_channel, filter_size=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(in_channel // 2, filter_size, 3, padding=1), nn.ReLU(inplace=True),
                                 nn.Conv2d(filter_size, filter_size, 1), nn.ReLU(inplace=True),
                                 ZeroConv2d(filter_size, in_channel))
        self.net[0].weight.data.normal_(0, 0.05)
        self.net[0].bias.data.zero_()

    def forward(self, input):
        in_a, in_b = input.chunk(2, 1)
        log_s, t = self.net(in_a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        out_b = (in_b + t) * s
        logdet = torch.sum(torch.log(s).view(input.shape[0], -1), 1)
        return torch.cat([in_a, out_b], 1), logdet


def gaussian_log_p(x, mean, log_sd):
    return -0.5 * math.log(2 * math.pi) - log_sd - 0.5 * (x - mean) ** 2 / torch.exp(2 * log_sd)


def make_glow(dt):
    """one Glow block (squeeze, 1x1 LU convolution, affine coupling, a learned prior) trained on dequantized
    5-bit images by bits per dimension."""
    n_bits, n_channel = 5, 1
    n_bins = 2.0 ** n_bits
    invconv, coupling, prior = InvConv2dLU(4 * n_channel), AffineCoupling(4 * n_channel), ZeroConv2d(2, 4)
    model = nn.ModuleList([invconv, coupling, prior]).to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def forward(input):
        b_size, n_channel, height, width = input.shape
        squeezed = input.view(b_size, n_channel, height // 2, 2, width // 2, 2)
        squeezed = squeezed.permute(0, 1, 3, 5, 2, 4)
        out = squeezed.contiguous().view(b_size, n_channel * 4, height // 2, width // 2)
        out, logdet = invconv(out)
        out, det2 = coupling(out)
        logdet = logdet + det2
        out_a, z_new = out.chunk(2, 1)
        mean, log_sd = prior(out_a).chunk(2, 1)
        log_p = gaussian_log_p(z_new, mean, log_sd).view(b_size, -1).sum(1)
        return log_p, logdet

    def train_step(image):
        image = image * 255
        image = torch.floor(image / 2 ** (8 - n_bits))
        image = image / n_bins - 0.5
        log_p, logdet = forward(image + torch.rand_like(image) / n_bins)
        logdet = logdet.mean()
        n_pixel = image.shape[1] * image.shape[2] * image.shape[3]
        loss = -math.log(n_bins) * n_pixel
        loss = loss + logdet + log_p
        loss = (-loss / (math.log(2) * n_pixel)).mean()
        model.zero_grad()
        loss.backward()
        opt.step()
        return loss.item(), (log_p / (math.log(2) * n_pixel)).mean().item()
    return train_step, lambda: (_state(model), _opt_state(opt))


# ------------------------------------------------------------------------------------------------ VAEs
def make_iwae(dt):
    """an importance-weighted autoencoder (K samples by rsample((K,)) of an Independent Normal), Bernoulli
    likelihood by binary_cross_entropy_with_logits, the prior / posterior term weighted by a KL warmup from a
    step counter; the analytic KL reported."""
    x_dim, z_dim, K = 16, 4, 5
    enc = nn.Sequential(nn.Linear(x_dim, 32), nn.ReLU(), nn.Linear(32, 2 * z_dim)).to(dt)
    dec = nn.Sequential(nn.Linear(z_dim, 32), nn.ReLU(), nn.Linear(32, x_dim)).to(dt)
    opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-3)
    st = {"step": 0, "warmup": 3}

    def train_step(x):
        st["step"] += 1
        beta = min(1.0, st["step"] / st["warmup"])
        mu, logvar = enc(x).chunk(2, -1)
        std = torch.exp(0.5 * logvar)
        q = Independent(Normal(mu, std), 1)
        z = q.rsample((K,))
        logits = dec(z)
        log_px = -F.binary_cross_entropy_with_logits(logits, x.expand_as(logits), reduction="none").sum(-1)
        prior = Independent(Normal(torch.zeros_like(mu), torch.ones_like(std)), 1)
        log_w = log_px + beta * (prior.log_prob(z) - q.log_prob(z))
        iwae = (torch.logsumexp(log_w, 0) - math.log(K)).mean()
        loss = -iwae
        opt.zero_grad()
        loss.backward()
        opt.step()
        kl = kl_divergence(q, prior).mean()
        return loss.detach(), kl.detach(), beta
    return train_step, lambda: (_state(enc), _state(dec), _opt_state(opt), dict(st))


# ------------------------------------------------------------------------------------------------ contrastive / metric
class SupConLoss(nn.Module):
    """HobbitLong/SupContrast's SupConLoss (contrast_mode 'all')."""

    def __init__(self, temperature=0.07, base_temperature=0.07):
        super().__init__()
        self.temperature, self.base_temperature = temperature, base_temperature

    def forward(self, features, labels=None):
        batch_size = features.shape[0]
        if labels is None:
            mask = torch.eye(batch_size, dtype=torch.float32)
        else:
            labels = labels.contiguous().view(-1, 1)
            if labels.shape[0] != batch_size:
                raise ValueError("Num of labels does not match num of features")
            mask = torch.eq(labels, labels.T).float()
        contrast_count = features.shape[1]
        contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
        anchor_feature, anchor_count = contrast_feature, contrast_count
        anchor_dot_contrast = torch.div(torch.matmul(anchor_feature, contrast_feature.T), self.temperature)
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()
        mask = mask.repeat(anchor_count, contrast_count)
        logits_mask = torch.scatter(torch.ones_like(mask), 1, torch.arange(batch_size * anchor_count).view(-1, 1), 0)
        mask = mask * logits_mask
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
        mask_pos_pairs = mask.sum(1)
        mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs
        loss = -(self.temperature / self.base_temperature) * mean_log_prob_pos
        return loss.view(anchor_count, batch_size).mean()


def make_supcon(dt):
    """SupCon training step: two noisy views, an encoder and a normalized projection head, SGD with momentum;
    the unsupervised (SimCLR) form on calls without labels."""
    encoder = nn.Sequential(nn.Linear(12, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 32)).to(dt)
    head = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16)).to(dt)
    criterion = SupConLoss(temperature=0.1)
    opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.05, momentum=0.9,
                          weight_decay=1e-4)

    def train_step(images, labels):
        views = torch.cat([images + 0.1 * torch.randn_like(images), images * (1 + 0.1 * torch.randn_like(images))])
        bsz = labels.shape[0] if labels is not None else images.shape[0]
        features = F.normalize(head(encoder(views)), dim=1)
        f1, f2 = torch.split(features, [bsz, bsz], dim=0)
        features = torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1)
        loss = criterion(features, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return train_step, lambda: (_state(encoder), _state(head), _opt_state(opt))


def supcon_inputs(i, dt):
    n = 10 + 2 * (i % 2)
    return torch.randn(n, 12, dtype=dt), (torch.randint(0, 3, (n,)) if i != 2 else None)


class ClipLoss(nn.Module):
    """open_clip's ClipLoss (one process): the arange labels cached per device and rebuilt when the batch
    size changes."""

    def __init__(self, cache_labels=True):
        super().__init__()
        self.cache_labels, self.prev_num_logits, self.labels = cache_labels, 0, {}

    def get_ground_truth(self, device, num_logits):
        if self.prev_num_logits != num_logits or device not in self.labels:
            labels = torch.arange(num_logits, device=device, dtype=torch.long)
            if self.cache_labels:
                self.labels[device] = labels
                self.prev_num_logits = num_logits
        else:
            labels = self.labels[device]
        return labels

    def forward(self, image_features, text_features, logit_scale, output_dict=False):
        logits_per_image = logit_scale * image_features @ text_features.T
        logits_per_text = logit_scale * text_features @ image_features.T
        labels = self.get_ground_truth(image_features.device, logits_per_image.shape[0])
        total_loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
        return {"contrastive_loss": total_loss} if output_dict else total_loss


class TinyCLIP(nn.Module):
    def __init__(self, vocab=40, dim=24):
        super().__init__()
        self.visual = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(1),
                                    nn.Flatten(), nn.Linear(8, dim))
        self.token_embedding = nn.Embedding(vocab, dim)
        self.ln_final = nn.LayerNorm(dim)
        self.text_projection = nn.Parameter(torch.randn(dim, dim) * dim ** -0.5)
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def encode_text(self, text):
        x = self.ln_final(self.token_embedding(text))
        eot = text.argmax(dim=-1)                                # the end-of-text token has the largest id
        return x[torch.arange(x.shape[0]), eot] @ self.text_projection

    def forward(self, image, text):
        image_features = F.normalize(self.visual(image), dim=-1)
        text_features = F.normalize(self.encode_text(text), dim=-1)
        return image_features, text_features, self.logit_scale.exp()


def make_clip(dt):
    """open_clip's train_one_epoch body: AdamW with gain / bias / logit_scale excluded from weight decay, the
    logit scale clamped to ln(100) after each step, the loss as a dict."""
    model = TinyCLIP().to(dt)
    loss_fn = ClipLoss()
    exclude = lambda n, p: p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n  # noqa: E731
    named = list(model.named_parameters())
    gain_or_bias = [p for n, p in named if exclude(n, p) and p.requires_grad]
    rest = [p for n, p in named if not exclude(n, p) and p.requires_grad]
    opt = torch.optim.AdamW([{"params": gain_or_bias, "weight_decay": 0.0}, {"params": rest, "weight_decay": 0.2}],
                            lr=5e-3, betas=(0.9, 0.98), eps=1e-6)

    def train_step(images, texts):
        model.train()
        image_features, text_features, logit_scale = model(images, texts)
        losses = loss_fn(image_features, text_features, logit_scale, output_dict=True)
        total_loss = sum(losses.values())
        losses["loss"] = total_loss
        opt.zero_grad()
        total_loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        return {k: v.item() for k, v in losses.items()}, logit_scale.item(), loss_fn.prev_num_logits
    return train_step, lambda: (_state(model), _opt_state(opt))


def clip_inputs(i, dt):
    n = [6, 6, 8, 6][i % 4]
    return torch.randn(n, 3, 8, 8, dtype=dt), torch.randint(1, 39, (n, 7))


def batch_hard_triplet_loss(emb, labels, margin=0.3):
    dist = torch.cdist(emb, emb, p=2)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(labels.shape[0], dtype=torch.bool)
    pos_mask, neg_mask = same & ~eye, ~same
    hardest_pos = (dist * pos_mask.float()).max(1)[0]
    max_d = dist.max(1, keepdim=True)[0]
    hardest_neg = (dist + max_d * (~neg_mask).float()).min(1)[0]
    loss = F.relu(hardest_pos - hardest_neg + margin)
    valid = pos_mask.any(1) & neg_mask.any(1)
    return loss[valid].mean(), (loss[valid] > 0).float().mean()


class CenterLoss(nn.Module):
    """KaiyangZhou/pytorch-center-loss."""

    def __init__(self, num_classes=5, feat_dim=8):
        super().__init__()
        self.num_classes, self.feat_dim = num_classes, feat_dim
        self.centers = nn.Parameter(torch.randn(self.num_classes, self.feat_dim))

    def forward(self, x, labels):
        batch_size = x.size(0)
        distmat = (torch.pow(x, 2).sum(dim=1, keepdim=True).expand(batch_size, self.num_classes)
                   + torch.pow(self.centers, 2).sum(dim=1, keepdim=True).expand(self.num_classes, batch_size).t())
        distmat.addmm_(x, self.centers.t(), beta=1, alpha=-2)
        classes = torch.arange(self.num_classes).long()
        labels = labels.unsqueeze(1).expand(batch_size, self.num_classes)
        mask = labels.eq(classes.expand(batch_size, self.num_classes))
        dist = distmat * mask.float()
        return dist.clamp(min=1e-12, max=1e12).sum() / batch_size


def make_triplet_center(dt):
    """re-identification style: batch-hard triplet by torch.cdist with masks, softmax cross-entropy and a
    center loss whose centers have their own SGD, their gradients rescaled by 1 / weight before its step."""
    backbone = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8)).to(dt)
    classifier = nn.Linear(8, 5).to(dt)
    center_loss = CenterLoss(5, 8).to(dt)
    weight_cent = 0.1
    opt = torch.optim.Adam(list(backbone.parameters()) + list(classifier.parameters()), lr=1e-3)
    opt_center = torch.optim.SGD(center_loss.parameters(), lr=0.5)

    def train_step(x, labels):
        feat = backbone(x)
        tri, frac = batch_hard_triplet_loss(feat, labels)
        xent = F.cross_entropy(classifier(feat), labels)
        loss = xent + tri + weight_cent * center_loss(feat, labels)
        opt.zero_grad()
        opt_center.zero_grad()
        loss.backward()
        opt.step()
        for param in center_loss.parameters():
            param.grad.data *= (1. / weight_cent)
        opt_center.step()
        return loss.item(), frac.item()
    return train_step, lambda: (_state(backbone), _state(classifier), _state(center_loss), _opt_state(opt))


def triplet_inputs(i, dt):
    labels = torch.arange(5).repeat_interleave(3)[torch.randperm(15)][: 12 + i % 3]
    return torch.randn(labels.shape[0], 10, dtype=dt) + labels[:, None].to(dt) * 0.3, labels


def _get_gt_mask(logits, target):
    target = target.reshape(-1)
    return torch.zeros_like(logits).scatter_(1, target.unsqueeze(1), 1).bool()


def _get_other_mask(logits, target):
    target = target.reshape(-1)
    return torch.ones_like(logits).scatter_(1, target.unsqueeze(1), 0).bool()


def cat_mask(t, mask1, mask2):
    t1 = (t * mask1).sum(dim=1, keepdims=True)
    t2 = (t * mask2).sum(1, keepdims=True)
    return torch.cat([t1, t2], dim=1)


def dkd_loss(logits_student, logits_teacher, target, alpha, beta, temperature):
    """megvii-research/mdistiller's decoupled knowledge distillation."""
    gt_mask = _get_gt_mask(logits_student, target)
    other_mask = _get_other_mask(logits_student, target)
    pred_student = F.softmax(logits_student / temperature, dim=1)
    pred_teacher = F.softmax(logits_teacher / temperature, dim=1)
    pred_student = cat_mask(pred_student, gt_mask, other_mask)
    pred_teacher = cat_mask(pred_teacher, gt_mask, other_mask)
    log_pred_student = torch.log(pred_student)
    tckd_loss = F.kl_div(log_pred_student, pred_teacher, reduction="sum") * (temperature ** 2) / target.shape[0]
    pred_teacher_part2 = F.softmax(logits_teacher / temperature - 1000.0 * gt_mask, dim=1)
    log_pred_student_part2 = F.log_softmax(logits_student / temperature - 1000.0 * gt_mask, dim=1)
    nckd_loss = (F.kl_div(log_pred_student_part2, pred_teacher_part2, reduction="sum") * (temperature ** 2)
                 / target.shape[0])
    return alpha * tckd_loss + beta * nckd_loss


def make_dkd(dt):
    """a DKD distiller's forward_train with the epoch passed in (the warmup factor min(epoch / warmup, 1)) and
    an SGD step on the student; the teacher in eval mode under no_grad."""
    teacher = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Dropout(0.1), nn.Linear(48, 6)).to(dt).eval()
    student = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 6)).to(dt)
    opt = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    warmup, ce_w, alpha, beta, temp = 3, 1.0, 1.0, 8.0, 4.0

    def forward_train(image, target, epoch):
        logits_student = student(image)
        with torch.no_grad():
            logits_teacher = teacher(image)
        loss_ce = ce_w * F.cross_entropy(logits_student, target)
        loss_dkd = min(epoch / warmup, 1.0) * dkd_loss(logits_student, logits_teacher, target, alpha, beta, temp)
        losses = {"loss_ce": loss_ce, "loss_kd": loss_dkd}
        loss = sum(v.mean() for v in losses.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return logits_student.detach(), {k: v.detach() for k, v in losses.items()}
    return forward_train, lambda: (_state(student), _opt_state(opt))


def dkd_inputs(i, dt):
    return torch.randn(16, 12, dtype=dt), torch.randint(0, 6, (16,)), i + 1


# ------------------------------------------------------------------------------------------------ training machinery
class ModelEmaV3(nn.Module):
    """timm.utils.model_ema.ModelEmaV3 (foreach lerp over the state dict, warmup decay by step)."""

    def __init__(self, model, decay=0.9999, min_decay=0.0, update_after_step=0, use_warmup=False,
                 warmup_gamma=1.0, warmup_power=2 / 3, foreach=True):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay, self.min_decay, self.update_after_step = decay, min_decay, update_after_step
        self.use_warmup, self.warmup_gamma, self.warmup_power, self.foreach = use_warmup, warmup_gamma, warmup_power, foreach

    def get_decay(self, step=None):
        if step is None:
            return self.decay
        step = max(0, step - self.update_after_step - 1)
        if step <= 0:
            return 0.0
        if self.use_warmup:
            decay = 1 - (1 + step / self.warmup_gamma) ** -self.warmup_power
            decay = max(min(decay, self.decay), self.min_decay)
        else:
            decay = self.decay
        return decay

    @torch.no_grad()
    def update(self, model, step=None):
        decay = self.get_decay(step)
        ema_lerp_values, model_lerp_values = [], []
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_lerp_values.append(ema_v)
                model_lerp_values.append(model_v)
            else:
                ema_v.copy_(model_v)
        if self.foreach and hasattr(torch, "_foreach_lerp_"):
            torch._foreach_lerp_(ema_lerp_values, model_lerp_values, weight=1. - decay)
        else:
            torch._foreach_mul_(ema_lerp_values, scalar=decay)
            torch._foreach_add_(ema_lerp_values, model_lerp_values, alpha=1. - decay)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def make_ema_foreach(dt):
    """timm's train loop: a step with label smoothing and Nesterov SGD, then ModelEmaV3.update(model,
    step=num_updates) and the EMA model's evaluation."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 5)).to(dt)
    model_ema = ModelEmaV3(model, decay=0.998, use_warmup=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=2e-5)
    st = {"num_updates": 0}

    def step(x, y):
        model.train()
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        st["num_updates"] += 1
        model_ema.update(model, step=st["num_updates"])
        with torch.no_grad():
            ema_out = model_ema(x)
        return loss.detach(), ema_out
    return step, lambda: (_state(model), _state(model_ema), _opt_state(opt), dict(st))


def grad_scale(x, scale):
    y = x
    y_grad = x * scale
    return (y - y_grad).detach() + y_grad


def round_pass(x):
    y = x.round()
    y_grad = x
    return (y - y_grad).detach() + y_grad


class LsqQuan(nn.Module):
    """zhutmost/lsq-net's LSQ quantizer (per-channel step sizes for weights)."""

    def __init__(self, bit, all_positive=False, symmetric=False, per_channel=True):
        super().__init__()
        if all_positive:
            self.thd_neg, self.thd_pos = 0, 2 ** bit - 1
        elif symmetric:
            self.thd_neg, self.thd_pos = -2 ** (bit - 1) + 1, 2 ** (bit - 1) - 1
        else:
            self.thd_neg, self.thd_pos = -2 ** (bit - 1), 2 ** (bit - 1) - 1
        self.per_channel = per_channel
        self.s = nn.Parameter(torch.ones(1))

    def init_from(self, x):
        if self.per_channel:
            self.s = nn.Parameter(x.detach().abs().mean(dim=list(range(1, x.dim())), keepdim=True) * 2
                                  / (self.thd_pos ** 0.5))
        else:
            self.s = nn.Parameter(x.detach().abs().mean() * 2 / (self.thd_pos ** 0.5))

    def forward(self, x):
        if self.per_channel:
            s_grad_scale = 1.0 / ((self.thd_pos * x.numel()) ** 0.5)
        else:
            s_grad_scale = 1.0 / ((self.thd_pos * x.numel()) ** 0.5)
        s_scale = grad_scale(self.s, s_grad_scale)
        x = x / s_scale
        x = torch.clamp(x, self.thd_neg, self.thd_pos)
        x = round_pass(x)
        return x * s_scale


class QConvBN(nn.Module):
    """a QAT conv: LSQ 4-bit weights, a moving-average min/max observer on the input driving
    fake_quantize_per_tensor_affine (tensor qparams), and a per-channel 8-bit fake-quantized linear head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.quan_w = LsqQuan(4, symmetric=True)
        self.quan_w.init_from(self.conv.weight)
        self.fc = nn.Linear(8, 4)
        self.register_buffer("min_val", torch.tensor(float("inf")))
        self.register_buffer("max_val", torch.tensor(float("-inf")))
        self.averaging_constant = 0.1

    def observe(self, x):
        if self.training:
            x_min, x_max = torch.aminmax(x.detach())
            if self.min_val == float("inf") and self.max_val == float("-inf"):
                self.min_val.copy_(x_min)
                self.max_val.copy_(x_max)
            else:
                self.min_val.copy_(self.min_val + self.averaging_constant * (x_min - self.min_val))
                self.max_val.copy_(self.max_val + self.averaging_constant * (x_max - self.max_val))
        min_neg = torch.clamp(self.min_val, max=0.0)
        max_pos = torch.clamp(self.max_val, min=0.0)
        scale = ((max_pos - min_neg) / 255).clamp(min=1e-8).float().reshape(1)
        zero_point = torch.clamp(-torch.round(min_neg / scale), 0, 255).to(torch.int32).reshape(1)
        return scale, zero_point

    def forward(self, x):
        scale, zero_point = self.observe(x)
        x = torch.fake_quantize_per_tensor_affine(x, scale, zero_point, 0, 255)
        h = F.relu(F.conv2d(x, self.quan_w(self.conv.weight), self.conv.bias, padding=1)).mean((2, 3))
        w = self.fc.weight
        w_scale = (w.detach().abs().amax(1) / 127).clamp(min=1e-8).float()
        w_q = torch.fake_quantize_per_channel_affine(w, w_scale, torch.zeros(w.shape[0], dtype=torch.int32), 0,
                                                     -128, 127)
        return F.linear(h, w_q, self.fc.bias)


def make_lsq_qat(dt):
    model = QConvBN()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    def step(x, y, train):
        model.train(train)
        out = model(x)
        loss = F.cross_entropy(out, y)
        if train:
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss.detach(), out.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def qat_inputs(i, dt):
    return torch.randn(6, 3, 6, 6) * (1 + 0.5 * i), torch.randint(0, 4, (6,)), i != 3


def make_prune(dt):
    """torch.nn.utils.prune: L1 unstructured pruning of the first layer before training, a global L1 pruning of
    two layers on one call (the masks combined by a PruningContainer), removal (weight made permanent) on a
    later one; the sparsity read back."""
    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24), nn.ReLU(), nn.Linear(24, 4)).to(dt)
    prune.l1_unstructured(model[0], name="weight", amount=0.3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y, action):
        if action == "global":
            prune.global_unstructured([(model[0], "weight"), (model[2], "weight")],
                                      pruning_method=prune.L1Unstructured, amount=0.2)
        elif action == "remove":
            prune.remove(model[2], "weight")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sparsity = [float(torch.sum(m.weight == 0)) / m.weight.nelement() for m in (model[0], model[2])]
        return loss.item(), sparsity
    return step, lambda: (dict(model.state_dict()), _opt_state(opt))


def prune_inputs(i, dt):
    return torch.randn(10, 12, dtype=dt), torch.randint(0, 4, (10,)), [None, "global", None, "remove", None][i]


class LoRALayer:
    def __init__(self, r, lora_alpha, lora_dropout, merge_weights):
        self.r, self.lora_alpha = r, lora_alpha
        self.lora_dropout = nn.Dropout(p=lora_dropout) if lora_dropout > 0. else (lambda x: x)
        self.merged, self.merge_weights = False, merge_weights


class LoRALinear(nn.Linear, LoRALayer):
    """microsoft/LoRA loralib.Linear: the update merged into weight.data on eval(), taken out on train()."""

    def __init__(self, in_features, out_features, r=0, lora_alpha=1, lora_dropout=0., fan_in_fan_out=False,
                 merge_weights=True, **kwargs):
        nn.Linear.__init__(self, in_features, out_features, **kwargs)
        LoRALayer.__init__(self, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, merge_weights=merge_weights)
        self.fan_in_fan_out = fan_in_fan_out
        if r > 0:
            self.lora_A = nn.Parameter(self.weight.new_zeros((r, in_features)))
            self.lora_B = nn.Parameter(self.weight.new_zeros((out_features, r)))
            self.scaling = self.lora_alpha / self.r
            self.weight.requires_grad = False
        self.reset_parameters()

    def reset_parameters(self):
        nn.Linear.reset_parameters(self)
        if hasattr(self, "lora_A"):
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            nn.init.normal_(self.lora_B, std=0.02)

    def train(self, mode: bool = True):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        nn.Linear.train(self, mode)
        if mode:
            if self.merge_weights and self.merged:
                if self.r > 0:
                    self.weight.data -= T(self.lora_B @ self.lora_A) * self.scaling
                self.merged = False
        else:
            if self.merge_weights and not self.merged:
                if self.r > 0:
                    self.weight.data += T(self.lora_B @ self.lora_A) * self.scaling
                self.merged = True
        return self

    def forward(self, x):
        def T(w):
            return w.transpose(0, 1) if self.fan_in_fan_out else w
        if self.r > 0 and not self.merged:
            result = F.linear(x, T(self.weight), bias=self.bias)
            result += (self.lora_dropout(x) @ self.lora_A.transpose(0, 1) @ self.lora_B.transpose(0, 1)) * self.scaling
            return result
        return F.linear(x, T(self.weight), bias=self.bias)


def mark_only_lora_as_trainable(model, bias="none"):
    for n, p in model.named_parameters():
        if "lora_" not in n:
            p.requires_grad = False


def make_lora(dt):
    """a LoRA fine-tuning step, then an evaluation in eval mode (weights merged in place) and back to train."""
    model = nn.Sequential(LoRALinear(10, 24, r=4, lora_alpha=8, lora_dropout=0.1), nn.GELU(),
                          LoRALinear(24, 24, r=4, lora_alpha=8, lora_dropout=0.1), nn.GELU(),
                          nn.Linear(24, 3)).to(dt)
    mark_only_lora_as_trainable(model)
    model[4].weight.requires_grad = True
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-3)

    def step(x, y, x_val):
        model.train()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            val = model(x_val).argmax(-1)
        model.train()
        return loss.item(), val
    return step, lambda: (_state(model), _opt_state(opt))


def lora_inputs(i, dt):
    return torch.randn(8, 10, dtype=dt), torch.randint(0, 3, (8,)), torch.randn(5, 10, dtype=dt)


# ------------------------------------------------------------------------------------------------ sequence models
def get_alibi_slopes(n_heads):
    start = 2 ** (-(2 ** -(math.log2(n_heads) - 3)))
    return torch.tensor([start * start ** i for i in range(n_heads)])


class GQAttention(nn.Module):
    """grouped-query attention through F.scaled_dot_product_attention: is_causal with dropout in training
    when nothing is padded, else an ALiBi float mask with a sliding window and the key padding filled -inf."""

    def __init__(self, dim=32, n_heads=4, n_kv_heads=2, dropout=0.1, window=6, max_len=32):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.dropout = n_heads, n_kv_heads, dim // n_heads, dropout
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        pos = torch.arange(max_len)
        rel = pos[None, :] - pos[:, None]
        bias = get_alibi_slopes(n_heads)[:, None, None] * rel[None].float()
        allowed = (rel <= 0) & (rel > -window)
        self.register_buffer("alibi", bias.masked_fill(~allowed, float("-inf")), persistent=False)

    def forward(self, x, pad_mask=None):
        B, T, C = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(B, T, 2 * self.n_kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        if pad_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                               is_causal=True)
        else:
            bias = self.alibi[:, :T, :T].to(x.dtype).unsqueeze(0).masked_fill(~pad_mask[:, None, None, :],
                                                                              float("-inf"))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.wo(y.transpose(1, 2).contiguous().view(B, T, C))


class SmallDecoder(nn.Module):
    def __init__(self, vocab=40, dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(GQAttention(dim) for _ in range(2))
        self.norms = nn.ModuleList(nn.RMSNorm(dim) for _ in range(2))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx, pad_mask=None):
        h = self.emb(idx)
        for norm, blk in zip(self.norms, self.blocks):
            h = h + blk(norm(h), pad_mask)
        return self.head(h)


def make_sdpa_gqa(dt):
    model = SmallDecoder().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step(tokens, lengths):
        pad_mask = None
        if lengths is not None:
            pad_mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
        logits = model(tokens[:, :-1], None if pad_mask is None else pad_mask[:, :-1])
        targets = tokens[:, 1:].clone()
        if pad_mask is not None:
            targets[~pad_mask[:, 1:]] = -1
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            probs = F.softmax(model(tokens[:, :4])[:, -1], -1)
        model.train()
        return loss.detach(), probs
    return step, lambda: (_state(model), _opt_state(opt))


def sdpa_inputs(i, dt):
    T = 12 + 2 * (i % 2)
    lengths = None if i % 2 == 0 else torch.tensor([T, T - 3, T - 5])
    return torch.randint(0, 40, (3, T)), lengths


class MambaBlock(nn.Module):
    """johnma2006/mamba-minimal's MambaBlock (einsum for einops, the selective scan a Python loop)."""

    def __init__(self, d_model=16, expand=2, d_state=8, d_conv=4):
        super().__init__()
        self.d_inner, self.dt_rank = expand * d_model, math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=False)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, bias=True, kernel_size=d_conv, groups=self.d_inner,
                                padding=d_conv - 1)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + d_state * 2, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True)
        A = torch.arange(1, d_state + 1).float().repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, x):
        (b, seqlen, d) = x.shape
        x_and_res = self.in_proj(x)
        (x, res) = x_and_res.split(split_size=[self.d_inner, self.d_inner], dim=-1)
        x = x.transpose(1, 2)
        x = self.conv1d(x)[:, :, :seqlen]
        x = x.transpose(1, 2)
        x = F.silu(x)
        y = self.ssm(x)
        y = y * F.silu(res)
        return self.out_proj(y)

    def ssm(self, x):
        (d_in, n) = self.A_log.shape
        A = -torch.exp(self.A_log.float())
        D = self.D.float()
        x_dbl = self.x_proj(x)
        (delta, B, C) = x_dbl.split(split_size=[self.dt_rank, n, n], dim=-1)
        delta = F.softplus(self.dt_proj(delta))
        return self.selective_scan(x, delta, A, B, C, D)

    def selective_scan(self, u, delta, A, B, C, D):
        (b, seqlen, d_in) = u.shape
        n = A.shape[1]
        deltaA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
        deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
        x = torch.zeros((b, d_in, n), dtype=u.dtype)
        ys = []
        for i in range(seqlen):
            x = deltaA[:, i] * x + deltaB_u[:, i]
            y = torch.einsum("bdn,bn->bd", x, C[:, i, :])
            ys.append(y)
        y = torch.stack(ys, dim=1)
        return y + u * D


class RMSNormM(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba(nn.Module):
    def __init__(self, vocab=30, d_model=16, n_layer=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(mixer=MambaBlock(d_model), norm=RMSNormM(d_model)))
                                    for _ in range(n_layer))
        self.norm_f = RMSNormM(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.embedding.weight

    def forward(self, input_ids):
        x = self.embedding(input_ids)
        for layer in self.layers:
            x = layer["mixer"](layer["norm"](x)) + x
        return self.lm_head(self.norm_f(x))


def make_mamba(dt):
    model = Mamba().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def step(ids):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(model), _opt_state(opt))


class KANLinear(nn.Module):
    """Blealtan/efficient-kan's KANLinear."""

    def __init__(self, in_features, out_features, grid_size=5, spline_order=3, scale_noise=0.1, scale_base=1.0,
                 scale_spline=1.0, base_activation=nn.SiLU, grid_eps=0.02, grid_range=(-1, 1)):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.grid_size, self.spline_order = grid_size, spline_order
        h = (grid_range[1] - grid_range[0]) / grid_size
        grid = ((torch.arange(-spline_order, grid_size + spline_order + 1) * h + grid_range[0])
                .expand(in_features, -1).contiguous())
        self.register_buffer("grid", grid)
        self.base_weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.spline_weight = nn.Parameter(torch.Tensor(out_features, in_features, grid_size + spline_order))
        self.spline_scaler = nn.Parameter(torch.Tensor(out_features, in_features))
        self.scale_noise, self.scale_base, self.scale_spline = scale_noise, scale_base, scale_spline
        self.base_activation, self.grid_eps = base_activation(), grid_eps
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5) * self.scale_base)
        with torch.no_grad():
            noise = ((torch.rand(self.grid_size + 1, self.in_features, self.out_features) - 1 / 2)
                     * self.scale_noise / self.grid_size)
            self.spline_weight.data.copy_(self.curve2coeff(self.grid.T[self.spline_order: -self.spline_order], noise))
            nn.init.kaiming_uniform_(self.spline_scaler, a=math.sqrt(5) * self.scale_spline)

    def b_splines(self, x):
        grid = self.grid
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, self.spline_order + 1):
            bases = (((x - grid[:, : -(k + 1)]) / (grid[:, k:-1] - grid[:, : -(k + 1)]) * bases[:, :, :-1])
                     + ((grid[:, k + 1:] - x) / (grid[:, k + 1:] - grid[:, 1:(-k)]) * bases[:, :, 1:]))
        return bases.contiguous()

    def curve2coeff(self, x, y):
        A = self.b_splines(x).transpose(0, 1)
        B = y.transpose(0, 1)
        solution = torch.linalg.lstsq(A, B).solution
        return solution.permute(2, 0, 1).contiguous()

    @property
    def scaled_spline_weight(self):
        return self.spline_weight * self.spline_scaler.unsqueeze(-1)

    def forward(self, x):
        original_shape = x.shape
        x = x.reshape(-1, self.in_features)
        base_output = F.linear(self.base_activation(x), self.base_weight)
        spline_output = F.linear(self.b_splines(x).view(x.size(0), -1),
                                 self.scaled_spline_weight.view(self.out_features, -1))
        output = base_output + spline_output
        return output.reshape(*original_shape[:-1], self.out_features)

    @torch.no_grad()
    def update_grid(self, x, margin=0.01):
        batch = x.size(0)
        splines = self.b_splines(x).permute(1, 0, 2)
        orig_coeff = self.scaled_spline_weight.permute(1, 2, 0)
        unreduced_spline_output = torch.bmm(splines, orig_coeff).permute(1, 0, 2)
        x_sorted = torch.sort(x, dim=0)[0]
        grid_adaptive = x_sorted[torch.linspace(0, batch - 1, self.grid_size + 1, dtype=torch.int64)]
        uniform_step = (x_sorted[-1] - x_sorted[0] + 2 * margin) / self.grid_size
        grid_uniform = (torch.arange(self.grid_size + 1, dtype=torch.float32).unsqueeze(1) * uniform_step
                        + x_sorted[0] - margin)
        grid = self.grid_eps * grid_uniform + (1 - self.grid_eps) * grid_adaptive
        grid = torch.concatenate([grid[:1] - uniform_step * torch.arange(self.spline_order, 0, -1).unsqueeze(1),
                                  grid,
                                  grid[-1:] + uniform_step * torch.arange(1, self.spline_order + 1).unsqueeze(1)],
                                 dim=0)
        self.grid.copy_(grid.T)
        self.spline_weight.data.copy_(self.curve2coeff(x, unreduced_spline_output))

    def regularization_loss(self, regularize_activation=1.0, regularize_entropy=1.0):
        l1_fake = self.spline_weight.abs().mean(-1)
        regularization_loss_activation = l1_fake.sum()
        p = l1_fake / regularization_loss_activation
        regularization_loss_entropy = -torch.sum(p * p.log())
        return regularize_activation * regularization_loss_activation + regularize_entropy * regularization_loss_entropy


def make_kan(dt):
    """a two-layer KAN regressing a symbolic function, the grids refit to the data (lstsq) on some calls."""
    layers = nn.ModuleList([KANLinear(2, 6), KANLinear(6, 1)])
    opt = torch.optim.Adam(layers.parameters(), lr=1e-2)

    def step(x, y, update_grid):
        h = x
        for layer in layers:
            if update_grid:
                layer.update_grid(h)
            h = layer(h)
        loss = F.mse_loss(h.squeeze(-1), y) + 1e-4 * sum(layer.regularization_loss() for layer in layers)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), h.detach()
    return step, lambda: (_state(layers), _opt_state(opt))


def kan_inputs(i, dt):
    x = torch.rand(32, 2) * 2 - 1
    return x, torch.exp(torch.sin(math.pi * x[:, 0]) + x[:, 1] ** 2), i == 2


# ------------------------------------------------------------------------------------------------ custom autograd / parametrizations
def binarize(tensor):
    return tensor.sign()


class BinarizeLinear(nn.Linear):
    """itayhubara/BinaryNet.pytorch's BinarizeLinear: the real-valued weights kept as weight.org, weight.data
    replaced by their sign in every forward, the (non-first) input's data binarized."""

    def forward(self, input):
        if input.size(1) != 16:
            input.data = binarize(input.data)
        if not hasattr(self.weight, "org"):
            self.weight.org = self.weight.data.clone()
        self.weight.data = binarize(self.weight.org)
        out = F.linear(input, self.weight)
        if self.bias is not None:
            self.bias.org = self.bias.data.clone()
            out += self.bias.view(1, -1).expand_as(out)
        return out


def make_binarynet(dt):
    """BinaryNet's training loop: the real weights restored from .org before the step, clipped to [-1, 1] and
    stored back into .org after it. Ill-conditioned: a hidden activation within rounding of zero flips its
    sign, so eager float32 is itself 1.5e-2 to 4e-2 off float64 in .org over these 4 calls (the compiled
    run ~1e-3 off eager: reported off tolerance, not a compiler error)."""
    # (no bias before a BatchNorm: its gradient is rounding noise, which Adam's normalization turns into
    # steps of lr in either direction, eager's own as far from float64 as from the compiled run's)
    model = nn.Sequential(BinarizeLinear(16, 32, bias=False), nn.BatchNorm1d(32), nn.Hardtanh(),
                          BinarizeLinear(32, 32, bias=False), nn.BatchNorm1d(32), nn.Hardtanh(),
                          BinarizeLinear(32, 4)).to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)

    def train_step(data, target):
        output = model(data)
        loss = F.cross_entropy(output, target)
        opt.zero_grad()
        loss.backward()
        for p in list(model.parameters()):
            if hasattr(p, "org"):
                p.data.copy_(p.org)
        opt.step()
        for p in list(model.parameters()):
            if hasattr(p, "org"):
                p.org.copy_(p.data.clamp_(-1, 1))
        return loss.item(), (output.argmax(1) == target).sum().item()
    return train_step, lambda: (_state(model), _opt_state(opt),
                                [p.org for p in model.parameters() if hasattr(p, "org")])


class MaskedScaledSoftmax(torch.autograd.Function):
    """softmax(scale * x) over the unmasked entries, written the torch 2.x way: forward without ctx,
    setup_context saving what backward needs, the returned mask marked non-differentiable, backward
    once_differentiable and returning a gradient for scale only when one is needed."""

    @staticmethod
    def forward(x, scale, mask):
        z = (x * scale).masked_fill(~mask, float("-inf"))
        y = torch.softmax(z, dim=-1)
        empty = ~mask.any(-1, keepdim=True)
        y = torch.where(empty, torch.zeros_like(y), y)
        return y, empty

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale, mask = inputs
        y, empty = output
        ctx.mark_non_differentiable(empty)
        ctx.save_for_backward(x, scale, y)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y, grad_empty):
        x, scale, y = ctx.saved_tensors
        gz = y * (grad_y - (grad_y * y).sum(-1, keepdim=True))
        gx = gz * scale if ctx.needs_input_grad[0] else None
        gs = (gz * x).sum().reshape(scale.shape) if ctx.needs_input_grad[1] else None
        return gx, gs, None


def make_autograd_ctx(dt):
    """an attention-pooling classifier through MaskedScaledSoftmax (a learned temperature), rows with nothing
    to attend to pooled as zero."""
    proj = nn.Linear(8, 8).to(dt)
    query = nn.Parameter(torch.randn(8, dtype=dt))
    log_scale = nn.Parameter(torch.zeros((), dtype=dt))
    head = nn.Linear(8, 3).to(dt)
    params = list(proj.parameters()) + [query, log_scale] + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)

    def step(x, mask, y):
        k = torch.tanh(proj(x))
        att, empty = MaskedScaledSoftmax.apply(k @ query, log_scale.exp(), mask)
        pooled = (att.unsqueeze(-1) * x).sum(1)
        loss = F.cross_entropy(head(pooled), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), att.detach(), empty
    return step, lambda: ([p.detach().clone() for p in params], [p.grad for p in params], _opt_state(opt))


def ctx_inputs(i, dt):
    lengths = torch.tensor([6, 3, 0, 5, 1][: 4 + i % 2])
    return (torch.randn(lengths.shape[0], 6, 8, dtype=dt), torch.arange(6)[None] < lengths[:, None],
            torch.randint(0, 3, (lengths.shape[0],)))


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class OrthoRNN(nn.Module):
    """an RNN whose recurrent matrix stays orthogonal (parametrizations.orthogonal, matrix_exp map) and whose
    input mixing is symmetric (a registered custom parametrization), unrolled under parametrize.cached()."""

    def __init__(self, d_in=4, hidden=12, n_out=3):
        super().__init__()
        self.hidden = hidden
        self.W_in = nn.Linear(d_in, hidden)
        self.mix = nn.Linear(hidden, hidden, bias=False)
        self.W_hh = parametrizations.orthogonal(nn.Linear(hidden, hidden, bias=False))
        parametrize.register_parametrization(self.mix, "weight", Symmetric())
        self.out = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = torch.zeros(x.shape[0], self.hidden, dtype=x.dtype)
        with parametrize.cached():
            for t in range(x.shape[1]):
                h = torch.tanh(self.mix(self.W_in(x[:, t])) + self.W_hh(h))
        return self.out(h)


def make_ortho_rnn(dt):
    model = OrthoRNN().to(dt)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        W = model.W_hh.weight
        return loss.detach(), (W @ W.T - torch.eye(W.shape[0], dtype=W.dtype)).abs().max().detach()
    return step, lambda: (_state(model), _opt_state(opt))


def ortho_inputs(i, dt):
    return torch.randn(5, 6 + i % 2, 4, dtype=dt), torch.randint(0, 3, (5,))


# ------------------------------------------------------------------------------------------------ MCMC / SMC
def make_hmc(dt):
    """Hamiltonian Monte Carlo on a Bayesian logistic regression: the potential's gradient by autograd.grad in
    each leapfrog step, Metropolis acceptance by a tensor comparison, the step size adapted from the acceptance
    (a Python float), the chain carried between calls."""
    X = torch.randn(40, 3, dtype=dt)
    y = (X @ torch.tensor([1.0, -2.0, 0.5], dtype=dt) + 0.3 * torch.randn(40, dtype=dt) > 0).to(dt)
    chain = {"w": torch.zeros(3, dtype=dt), "step_size": 0.1, "accepted": 0, "total": 0}

    def log_prob(w):
        prior = Normal(torch.zeros_like(w), torch.ones_like(w)).log_prob(w).sum()
        return prior + Bernoulli(logits=X @ w).log_prob(y).sum()

    def grad_U(w):
        w = w.detach().requires_grad_()
        U = -log_prob(w)
        g, = torch.autograd.grad(U, w)
        return U.detach(), g

    def hmc_step(w, step_size, n_leapfrog):
        p0 = torch.randn_like(w)
        U0, g = grad_U(w)
        w_new, p = w.clone(), p0 - 0.5 * step_size * g
        for i in range(n_leapfrog):
            w_new = w_new + step_size * p
            U1, g = grad_U(w_new)
            if i < n_leapfrog - 1:
                p = p - step_size * g
        p = p - 0.5 * step_size * g
        H0 = U0 + 0.5 * (p0 ** 2).sum()
        H1 = U1 + 0.5 * (p ** 2).sum()
        accept = torch.rand(()) < torch.exp(H0 - H1)
        return (w_new, True) if accept else (w, False)

    def sample(n_samples, n_leapfrog):
        samples = []
        for _ in range(n_samples):
            chain["w"], acc = hmc_step(chain["w"], chain["step_size"], n_leapfrog)
            chain["accepted"] += int(acc)
            chain["total"] += 1
            chain["step_size"] *= 1.05 if acc else 0.8
            samples.append(chain["w"])
        return torch.stack(samples), chain["accepted"] / chain["total"]
    return sample, lambda: dict(chain)


def systematic_resample(weights):
    N = weights.shape[-1]
    positions = (torch.rand(1, dtype=weights.dtype) + torch.arange(N, dtype=weights.dtype)) / N
    cumsum = torch.cumsum(weights, -1)
    cumsum[-1] = 1.0
    return torch.searchsorted(cumsum, positions)


def make_particle_filter(dt):
    """a bootstrap particle filter on the univariate nonstationary growth model: log weights normalized by
    logsumexp, the log-likelihood estimate accumulated, systematic resampling only when the effective sample
    size drops below N / 2."""
    N = 64

    def run(observations):
        particles = torch.randn(N, dtype=dt) * math.sqrt(5.0)
        logw = torch.full((N,), -math.log(N), dtype=dt)
        loglik = torch.zeros((), dtype=dt)
        means, n_resampled = [], 0
        for t, y in enumerate(observations):
            particles = (0.5 * particles + 25 * particles / (1 + particles ** 2) + 8 * math.cos(1.2 * t)
                         + torch.randn(N, dtype=dt) * math.sqrt(10.0))
            logw = logw + Normal(particles ** 2 / 20, 1.0).log_prob(y)
            norm = torch.logsumexp(logw, 0)
            loglik = loglik + norm
            logw = logw - norm
            w = logw.exp()
            means.append((w * particles).sum())
            ess = 1.0 / (w ** 2).sum()
            if ess < N / 2:
                idx = systematic_resample(w)
                particles = particles[idx]
                logw = torch.full_like(logw, -math.log(N))
                n_resampled += 1
        return torch.stack(means), loglik, n_resampled
    return run, lambda: None


def pf_inputs(i, dt):
    x, ys = torch.zeros(()), []
    for t in range(8 + 2 * (i % 2)):
        x = 0.5 * x + 25 * x / (1 + x ** 2) + 8 * math.cos(1.2 * t) + torch.randn(()) * math.sqrt(10.0)
        ys.append(x ** 2 / 20 + torch.randn(()))
    return (torch.stack(ys).to(dt),)


# ------------------------------------------------------------------------------------------------ survival / Bayesian
def cox_ph_loss_sorted(log_h, events, eps=1e-7):
    if events.dtype is torch.bool:
        events = events.float()
    events = events.view(-1)
    log_h = log_h.view(-1)
    gamma = log_h.max()
    log_cumsum_h = log_h.sub(gamma).exp().cumsum(0).add(eps).log().add(gamma)
    return -log_h.sub(log_cumsum_h).mul(events).sum().div(events.sum())


def cox_ph_loss(log_h, durations, events, eps=1e-7):
    """pycox.models.loss.cox_ph_loss."""
    idx = durations.sort(descending=True)[1]
    events = events[idx]
    log_h = log_h[idx]
    return cox_ph_loss_sorted(log_h, events, eps)


def concordance_index(risk, durations, events):
    """Harrell's C: pairs (i, j) with t_i < t_j and an event at i, concordant when risk_i > risk_j."""
    comparable = (durations[:, None] < durations[None, :]) & events[:, None].bool()
    concordant = (risk[:, None] > risk[None, :]).float() + 0.5 * (risk[:, None] == risk[None, :]).float()
    return (concordant * comparable).sum() / comparable.sum()


def make_deepsurv(dt):
    net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.BatchNorm1d(32), nn.Dropout(0.1), nn.Linear(32, 1,
                                                                                                       bias=False)).to(dt)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-4)

    def step(x, durations, events, x_val, d_val, e_val):
        net.train()
        loss = cox_ph_loss(net(x), durations, events)
        opt.zero_grad()
        loss.backward()
        opt.step()
        net.eval()
        with torch.no_grad():
            c = concordance_index(net(x_val).squeeze(-1), d_val, e_val)
        return loss.item(), c.item()
    return step, lambda: (_state(net), _opt_state(opt))


def surv_inputs(i, dt):
    def draw(n):
        x = torch.randn(n, 6, dtype=dt)
        hazard = torch.exp(x[:, 0] - 0.5 * x[:, 1])
        t = torch.distributions.Exponential(hazard.float()).sample().to(dt)
        c = torch.rand(n, dtype=dt) * 3
        return x, torch.minimum(t, c), (t <= c).float().to(dt)
    return (*draw(24 + 4 * (i % 2)), *draw(20))


class BayesLinear(nn.Module):
    """Bayes by backprop (Blundell et al.): a factorized Gaussian posterior with softplus scales, the local
    reparameterization trick while training, weights sampled in eval, the closed-form KL to N(0, prior_sigma)
    stored on the module by forward."""

    def __init__(self, n_in, n_out, prior_sigma=1.0):
        super().__init__()
        self.prior_sigma = prior_sigma
        self.w_mu = nn.Parameter(torch.empty(n_out, n_in).uniform_(-0.3, 0.3))
        self.w_rho = nn.Parameter(torch.full((n_out, n_in), -4.0))
        self.b_mu = nn.Parameter(torch.zeros(n_out))
        self.b_rho = nn.Parameter(torch.full((n_out,), -4.0))
        self.kl = 0.0

    def _kl(self, mu, sigma):
        return (math.log(self.prior_sigma) - sigma.log() + (sigma ** 2 + mu ** 2) / (2 * self.prior_sigma ** 2)
                - 0.5).sum()

    def forward(self, x):
        w_sigma, b_sigma = F.softplus(self.w_rho), F.softplus(self.b_rho)
        if self.training:
            act_mu = F.linear(x, self.w_mu, self.b_mu)
            act_var = F.linear(x ** 2, w_sigma ** 2, b_sigma ** 2)
            out = act_mu + act_var.sqrt() * torch.randn_like(act_mu)
        else:
            w = self.w_mu + w_sigma * torch.randn_like(w_sigma)
            b = self.b_mu + b_sigma * torch.randn_like(b_sigma)
            out = F.linear(x, w, b)
        self.kl = self._kl(self.w_mu, w_sigma) + self._kl(self.b_mu, b_sigma)
        return out


def make_bayes_backprop(dt):
    """ELBO with a few Monte Carlo samples and a learned noise scale, then a predictive mean and spread from
    sampled weights in eval mode."""
    model = nn.Sequential(BayesLinear(1, 24), nn.ReLU(), BayesLinear(24, 1)).to(dt)
    log_noise = nn.Parameter(torch.tensor(-1.0, dtype=dt))
    opt = torch.optim.Adam(list(model.parameters()) + [log_noise], lr=1e-2)
    n_train, n_samples = 200, 3

    def step(x, y, x_test):
        model.train()
        nll, kl = 0.0, 0.0
        for _ in range(n_samples):
            pred = model(x)
            nll = nll - Normal(pred, log_noise.exp()).log_prob(y).sum() * (n_train / x.shape[0])
            kl = kl + sum(m.kl for m in model.modules() if isinstance(m, BayesLinear))
        loss = (nll + kl) / n_samples / n_train
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            preds = torch.stack([model(x_test) for _ in range(5)])
        return loss.detach(), preds.mean(0), preds.std(0)
    return step, lambda: (_state(model), log_noise.detach().clone(), _opt_state(opt))


def bbb_inputs(i, dt):
    x = torch.rand(16 + 4 * (i % 2), 1, dtype=dt) * 4 - 2
    return x, torch.sin(2 * x) + 0.1 * torch.randn_like(x), torch.linspace(-3, 3, 9, dtype=dt)[:, None]


def poincare_dist(u, v, eps=1e-5):
    sq = ((u - v) ** 2).sum(-1)
    squ = (u ** 2).sum(-1).clamp(0, 1 - eps)
    sqv = (v ** 2).sum(-1).clamp(0, 1 - eps)
    x = 1 + 2 * sq / ((1 - squ) * (1 - sqv))
    z = torch.sqrt(x ** 2 - 1)
    return torch.log(x + z)


def make_poincare(dt):
    """Poincare embeddings (Nickel & Kiela): a softmax over negatives of -distance, Riemannian SGD (the
    Euclidean gradient rescaled by (1 - |x|^2)^2 / 4) and a retraction into the ball by renorm_."""
    n_nodes, dim, eps = 20, 2, 1e-5
    emb = nn.Embedding(n_nodes, dim).to(dt)
    with torch.no_grad():
        emb.weight.uniform_(-1e-3, 1e-3)
    st = {"epoch": 0}

    def step(pairs, negs):
        st["epoch"] += 1
        lr = 0.3 * (0.1 if st["epoch"] <= 2 else 1.0)            # burn-in
        u = emb(pairs[:, 0])
        cands = emb(torch.cat([pairs[:, 1:], negs], 1))
        dists = poincare_dist(u.unsqueeze(1).expand_as(cands), cands)
        loss = F.cross_entropy(-dists, torch.zeros(pairs.shape[0], dtype=torch.long))
        emb.zero_grad()
        loss.backward()
        with torch.no_grad():
            d_p = emb.weight.grad
            sqnorm = (emb.weight ** 2).sum(-1, keepdim=True)
            d_p = d_p * ((1 - sqnorm) ** 2 / 4)
            emb.weight.add_(d_p, alpha=-lr)
            emb.weight.renorm_(2, 0, 1 - eps)
        return loss.item()
    return step, lambda: (emb.weight.detach().clone(), dict(st))


def poincare_inputs(i, dt):
    parent = torch.randint(0, 5, (12,))
    child = 5 + torch.randint(0, 15, (12,))
    return torch.stack([parent, child], 1), torch.randint(0, 20, (12, 5))


# ------------------------------------------------------------------------------------------------ robustness / continual / federated
class SmallCNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, n_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def make_pgd_train(dt):
    """PGD adversarial training (locuslab/fast_adversarial's attack_pgd): a random start in the eps ball, sign
    steps only on the examples still classified correctly (index by torch.where, delta.data[index] written),
    the attack in eval mode, then a training step on the adversarial batch."""
    model = SmallCNN().to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    epsilon, alpha, attack_iters = 0.1, 0.04, 3
    lower_limit, upper_limit = 0.0, 1.0

    def clamp(X, lo, hi):
        return torch.max(torch.min(X, hi), lo)

    def attack_pgd(X, y):
        delta = torch.zeros_like(X).uniform_(-epsilon, epsilon)
        delta = clamp(delta, lower_limit - X, upper_limit - X)
        delta.requires_grad = True
        for _ in range(attack_iters):
            output = model(X + delta)
            index = torch.where(output.max(1)[1] == y)[0]
            if len(index) == 0:
                break
            loss = F.cross_entropy(output, y)
            loss.backward()
            grad = delta.grad.detach()
            d, g = delta[index, :, :, :], grad[index, :, :, :]
            d = torch.clamp(d + alpha * torch.sign(g), -epsilon, epsilon)
            d = clamp(d, lower_limit - X[index, :, :, :], upper_limit - X[index, :, :, :])
            delta.data[index, :, :, :] = d
            delta.grad.zero_()
        return delta.detach()

    def step(X, y):
        model.eval()
        delta = attack_pgd(X, y)
        model.train()
        output = model(clamp(X + delta, torch.zeros_like(X), torch.ones_like(X)))
        loss = F.cross_entropy(output, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item(), (output.max(1)[1] == y).sum().item(), delta
    return step, lambda: (_state(model), _opt_state(opt))


def pgd_inputs(i, dt):
    y = torch.randint(0, 4, (6,))
    X = (torch.rand(6, 1, 8, 8, dtype=dt) * 0.5 + 0.5 * (y[:, None, None, None] % 2).to(dt)).clamp(0, 1)
    return X, y


class EWC:
    """moskomule/ewc.pytorch: the diagonal Fisher from per-example gradients of the model's own predictions."""

    def __init__(self, model, dataset):
        self.model, self.dataset = model, dataset
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self._means = {n: p.clone().detach() for n, p in self.params.items()}
        self._precision_matrices = self._diag_fisher()

    def _diag_fisher(self):
        precision_matrices = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.model.eval()
        for x in self.dataset:
            self.model.zero_grad()
            output = self.model(x.unsqueeze(0)).view(1, -1)
            label = output.max(1)[1].view(-1)
            loss = F.nll_loss(F.log_softmax(output, dim=1), label)
            loss.backward()
            for n, p in self.model.named_parameters():
                precision_matrices[n].data += p.grad.data ** 2 / len(self.dataset)
        return precision_matrices

    def penalty(self, model):
        loss = 0
        for n, p in model.named_parameters():
            _loss = self._precision_matrices[n] * (p - self._means[n]) ** 2
            loss += _loss.sum()
        return loss


def make_ewc(dt):
    """sequential tasks: plain training on task A, the Fisher consolidated on one call, then training on task
    B with the EWC penalty."""
    model = nn.Sequential(nn.Linear(8, 24), nn.ReLU(), nn.Linear(24, 4)).to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    st = {"ewc": None, "importance": 50.0}

    def step(x, y, consolidate):
        if consolidate:
            st["ewc"] = EWC(model, x[:6])
        model.train()
        loss = F.cross_entropy(model(x), y)
        if st["ewc"] is not None:
            loss = loss + st["importance"] * st["ewc"].penalty(model)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step, lambda: (_state(model), _opt_state(opt),
                          st["ewc"] and (st["ewc"]._means, st["ewc"]._precision_matrices))


def ewc_inputs(i, dt):
    return torch.randn(10, 8, dtype=dt) + (i >= 2), torch.randint(0, 4, (10,)), i == 2


def make_fedavg(dt):
    """shaoxiongji/federated-learning's FedAvg round: each client trains a deepcopy of the global model with its
    own SGD over local minibatches, the state dicts deep-copied and averaged weighted by sample counts
    (num_batches_tracked too), loaded back into the global model."""
    global_model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3)).to(dt)

    def fed_round(client_xs, client_ys):
        local_weights, sizes, losses = [], [], []
        for x, y in zip(client_xs, client_ys):
            local = copy.deepcopy(global_model)
            local.train()
            opt = torch.optim.SGD(local.parameters(), lr=0.05, momentum=0.5)
            batch_loss = []
            for xb, yb in zip(x.split(4), y.split(4)):
                if xb.shape[0] < 2:
                    continue
                opt.zero_grad()
                loss = F.cross_entropy(local(xb), yb)
                loss.backward()
                opt.step()
                batch_loss.append(loss.item())
            local_weights.append(copy.deepcopy(local.state_dict()))
            sizes.append(len(x))
            losses.append(sum(batch_loss) / len(batch_loss))
        w_avg = copy.deepcopy(local_weights[0])
        for k in w_avg.keys():
            w_avg[k] = w_avg[k] * sizes[0]
            for i in range(1, len(local_weights)):
                w_avg[k] += local_weights[i][k] * sizes[i]
            w_avg[k] = torch.div(w_avg[k], sum(sizes))
        global_model.load_state_dict(w_avg)
        return sum(losses) / len(losses)
    return fed_round, lambda: dict(global_model.state_dict())


def fedavg_inputs(i, dt):
    sizes = [8, 12, 9 + i % 2]
    return [torch.randn(n, 6, dtype=dt) + k for k, n in enumerate(sizes)], [torch.randint(0, 3, (n,)) for n in sizes]


# ------------------------------------------------------------------------------------------------ vision / signals
class CAModel(nn.Module):
    """Growing Neural Cellular Automata (chenmingxiang110's PyTorch port): depthwise Sobel perception from numpy
    filters, a per-cell MLP, stochastic updates, alive masking by max_pool2d of the alpha channel."""

    def __init__(self, channel_n=8, fire_rate=0.5, hidden_size=32):
        super().__init__()
        self.channel_n, self.fire_rate = channel_n, fire_rate
        self.fc0 = nn.Linear(channel_n * 3, hidden_size)
        self.fc1 = nn.Linear(hidden_size, channel_n, bias=False)
        with torch.no_grad():
            self.fc1.weight.zero_()

    def alive(self, x):
        return F.max_pool2d(x[:, 3:4, :, :], kernel_size=3, stride=1, padding=1) > 0.1

    def perceive(self, x, angle):
        def _perceive_with(x, weight):
            conv_weights = torch.from_numpy(weight.astype(np.float32)).to(x.dtype)
            conv_weights = conv_weights.view(1, 1, 3, 3).repeat(self.channel_n, 1, 1, 1)
            return F.conv2d(x, conv_weights, padding=1, groups=self.channel_n)
        dx = np.outer([1, 2, 1], [-1, 0, 1]) / 8.0
        dy = dx.T
        c, s = np.cos(angle * np.pi / 180), np.sin(angle * np.pi / 180)
        w1, w2 = c * dx - s * dy, s * dx + c * dy
        return torch.cat((x, _perceive_with(x, w1), _perceive_with(x, w2)), 1)

    def update(self, x, fire_rate, angle):
        x = x.transpose(1, 3)
        pre_life_mask = self.alive(x)
        dx = self.perceive(x, angle)
        dx = dx.transpose(1, 3)
        dx = self.fc1(F.relu(self.fc0(dx)))
        if fire_rate is None:
            fire_rate = self.fire_rate
        stochastic = torch.rand([dx.size(0), dx.size(1), dx.size(2), 1]) > fire_rate
        dx = dx * stochastic.to(dx.dtype)
        x = x + dx.transpose(1, 3)
        post_life_mask = self.alive(x)
        life_mask = (pre_life_mask & post_life_mask).to(x.dtype)
        x = x * life_mask
        return x.transpose(1, 3)

    def forward(self, x, steps, fire_rate=None, angle=0.0):
        for _ in range(steps):
            x = self.update(x, fire_rate, angle)
        return x


def make_nca(dt):
    ca = CAModel().to(dt)
    opt = torch.optim.Adam(ca.parameters(), lr=2e-3, betas=(0.5, 0.5))
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [2], 0.3)
    size = 10
    target = torch.zeros(size, size, 4, dtype=dt)
    target[3:7, 3:7] = torch.tensor([0.8, 0.2, 0.4, 1.0], dtype=dt)

    def train(x0):
        n_steps = int(torch.randint(6, 9, ()).item())
        x = ca(x0, n_steps)
        loss = F.mse_loss(x[:, :, :, :4], target.expand(x.shape[0], -1, -1, -1))
        opt.zero_grad()
        loss.backward()
        for p in ca.parameters():
            p.grad.data = p.grad.data / (torch.norm(p.grad.data) + 1e-8)
        opt.step()
        sched.step()
        return x.detach(), loss.item()
    return train, lambda: (_state(ca), _opt_state(opt, sched))


def nca_inputs(i, dt):
    x = torch.zeros(2, 10, 10, 8, dtype=dt)
    x[:, 5, 5, 3:] = 1.0
    x[1, 4 + i % 2, 4, 3:] = 1.0
    return (x,)


def gaussian_kernel1d(ks, sigma, dtype):
    x = torch.arange(ks, dtype=dtype) - ks // 2
    g = torch.exp(-x ** 2 / (2 * sigma ** 2))
    return g / g.sum()


def gaussian_blur2d(x, ks, sigma):
    C = x.shape[1]
    k = gaussian_kernel1d(ks, sigma, x.dtype)
    x = F.pad(x, [ks // 2] * 4, mode="reflect")
    x = F.conv2d(x, k.view(1, 1, ks, 1).repeat(C, 1, 1, 1), groups=C)
    return F.conv2d(x, k.view(1, 1, 1, ks).repeat(C, 1, 1, 1), groups=C)


def spatial_gradient(x):
    """kornia.filters.spatial_gradient (sobel, normalized): (B, C, 2, H, W)."""
    B, C, H, W = x.shape
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], dtype=x.dtype)
    kernel = torch.stack([kx, kx.transpose(0, 1)]) / kx.abs().sum()
    out = F.conv2d(F.pad(x.reshape(B * C, 1, H, W), [1, 1, 1, 1], mode="replicate"), kernel[:, None])
    return out.view(B, C, 2, H, W)


def harris_response(x, k=0.04):
    gradients = spatial_gradient(x)
    dx, dy = gradients[:, :, 0], gradients[:, :, 1]
    dx2 = gaussian_blur2d(dx ** 2, 7, 1.0)
    dy2 = gaussian_blur2d(dy ** 2, 7, 1.0)
    dxy = gaussian_blur2d(dx * dy, 7, 1.0)
    det_m = dx2 * dy2 - dxy * dxy
    trace_m = dx2 + dy2
    return det_m - k * trace_m ** 2


def make_harris_match(dt):
    """kornia-style keypoints: grayscale, Sobel gradients, Harris response, 3x3 max-pool NMS, top-k, 5x5
    descriptors by grid_sample, mutual nearest neighbours by cdist."""
    def detect_describe(img, n=12):
        gray = (0.299 * img[:, 0:1] + 0.587 * img[:, 1:2] + 0.114 * img[:, 2:3])
        resp = harris_response(gray)
        resp = resp * (resp == F.max_pool2d(resp, 3, 1, 1)).to(resp.dtype)
        B, _, H, W = resp.shape
        resp[:, :, :3], resp[:, :, -3:], resp[:, :, :, :3], resp[:, :, :, -3:] = 0, 0, 0, 0
        vals, idx = resp.view(B, -1).topk(n)
        ys, xs = torch.div(idx, W, rounding_mode="floor"), idx % W
        offs = torch.stack(torch.meshgrid(torch.arange(-2, 3), torch.arange(-2, 3), indexing="xy"), -1).to(img.dtype)
        pts = torch.stack([xs, ys], -1).to(img.dtype)
        grid = pts[:, :, None, None, :] + offs                                 # B, n, 5, 5, 2
        grid = grid / torch.tensor([W - 1, H - 1], dtype=img.dtype) * 2 - 1
        patches = F.grid_sample(gray, grid.view(B, n * 5, 5, 2), align_corners=True)
        desc = patches.view(B, n, 25)
        desc = F.normalize(desc - desc.mean(-1, keepdim=True), dim=-1)
        return torch.stack([xs, ys], -1), vals, desc

    def match(img1, img2):
        kp1, v1, d1 = detect_describe(img1)
        kp2, v2, d2 = detect_describe(img2)
        dist = torch.cdist(d1, d2)
        nn12, nn21 = dist.argmin(2), dist.argmin(1)
        mutual = torch.gather(nn21, 1, nn12) == torch.arange(nn12.shape[1])[None]
        return kp1, kp2, nn12, mutual, v1
    return match, lambda: None


def harris_inputs(i, dt):
    img = F.avg_pool2d(torch.rand(2, 3, 28 + 4 * (i % 2), 28, dtype=dt), 3, 1, 1)
    return img, torch.roll(img, shifts=(2, 1), dims=(2, 3))


def soft_dtw(D, gamma):
    """soft-DTW's forward recursion (Cuturi & Blondel), cell by cell into R."""
    B, N, M = D.shape
    R = torch.full((B, N + 2, M + 2), math.inf, dtype=D.dtype)
    R[:, 0, 0] = 0
    for j in range(1, M + 1):
        for i in range(1, N + 1):
            r0 = -R[:, i - 1, j - 1] / gamma
            r1 = -R[:, i - 1, j] / gamma
            r2 = -R[:, i, j - 1] / gamma
            rmax = torch.max(torch.max(r0, r1), r2)
            rsum = torch.exp(r0 - rmax) + torch.exp(r1 - rmax) + torch.exp(r2 - rmax)
            softmin = -gamma * (torch.log(rsum) + rmax)
            R[:, i, j] = D[:, i - 1, j - 1] + softmin
    return R[:, N, M]


def make_soft_dtw(dt):
    """a forecaster trained with the soft-DTW divergence sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2."""
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 5)).to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def sdtw(x, y, gamma=0.1):
        return soft_dtw((x[:, :, None] - y[:, None, :]) ** 2, gamma)

    def step(history, future):
        pred = model(history)
        loss = (sdtw(pred, future) - 0.5 * (sdtw(pred, pred) + sdtw(future, future))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), pred.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def sdtw_inputs(i, dt):
    t = torch.rand(4, 1) * 6 + torch.arange(13) * 0.5
    s = torch.sin(t).to(dt)
    return s[:, :8], s[:, 8:]


# ------------------------------------------------------------------------------------------------ decoding / clustering / NLP
class TinyLM(nn.Module):
    def __init__(self, vocab=24, dim=16, hidden=24):
        super().__init__()
        self.emb, self.rnn, self.out = nn.Embedding(vocab, dim), nn.GRU(dim, hidden, batch_first=True), nn.Linear(hidden, vocab)

    def forward(self, ids):
        return self.out(self.rnn(self.emb(ids))[0])


def top_k_top_p_filter(logits, top_k=0, top_p=0.0):
    if top_k > 0:
        filter = torch.topk(logits, min(top_k, logits.size(-1)))[0]
        logits[logits < filter[:, [-1]]] = float("-inf")
    if top_p > 0.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        filter = cumulative_probs > top_p
        filter[..., 1:] = filter[..., :-1].clone()
        filter[..., 0] = 0
        indices_to_remove = filter.scatter(1, sorted_indices, filter)
        logits[indices_to_remove] = float("-inf")
    return logits


def norm_logits(logits, temperature, top_k, top_p):
    logits = logits / temperature
    logits = top_k_top_p_filter(logits, top_k=top_k, top_p=top_p)
    return F.softmax(logits, dim=1)


def max_fn(x):
    x_max = torch.where(x > 0, x, torch.zeros_like(x))
    return x_max / torch.sum(x_max, dim=1, keepdim=True)


def make_speculative(dt):
    """feifeibear/LLMSpeculativeSampling's speculative_sampling: gamma draft tokens from a small model, one
    target pass, acceptance by r < p / q, the residual max(p - q, 0) resampled on rejection; every draw from a
    torch.Generator seeded inside the function."""
    approx_model, target_model = TinyLM(hidden=12).to(dt).eval(), TinyLM(hidden=32).to(dt).eval()

    @torch.no_grad()
    def speculative_sampling(prefix, max_len, gamma=3, temperature=1.0, top_k=8, top_p=0.9, random_seed=None):
        g = torch.Generator().manual_seed(random_seed)
        T = prefix.shape[1] + max_len
        n_accepted = 0
        while prefix.shape[1] < T:
            x = prefix
            prefix_len = prefix.shape[1]
            for _ in range(gamma):
                q = approx_model(x)
                next_tok = torch.multinomial(norm_logits(q[:, -1, :], temperature, top_k, top_p), 1, generator=g)
                x = torch.cat((x, next_tok), dim=1)
            for i in range(q.shape[1]):
                q[:, i, :] = norm_logits(q[:, i, :], temperature, top_k, top_p)
            p = target_model(x)
            for i in range(p.shape[1]):
                p[:, i, :] = norm_logits(p[:, i, :], temperature, top_k, top_p)
            is_all_accept = True
            n = prefix_len - 1
            for i in range(gamma):
                r = torch.rand(1, generator=g)
                j = x[:, prefix_len + i]
                if r < torch.min(torch.tensor([1.0]), (p[:, prefix_len + i - 1, j] / q[:, prefix_len + i - 1, j]).float()):
                    n += 1
                    n_accepted += 1
                else:
                    t = torch.multinomial(max_fn(p[:, n, :] - q[:, n, :]), 1, generator=g)
                    is_all_accept = False
                    break
            prefix = x[:, :n + 1]
            if is_all_accept:
                t = torch.multinomial(p[:, -1, :], 1, generator=g)
            prefix = torch.cat((prefix, t), dim=1)
        return prefix, n_accepted
    return speculative_sampling, lambda: None


def spec_inputs(i, dt):
    return torch.randint(0, 24, (1, 3 + i % 2)), 6, 3, 1.0, 8, 0.9, 1234 + i


def make_gmm_em(dt):
    """EM for a full-covariance Gaussian mixture: E-step by MultivariateNormal.log_prob and logsumexp, M-step
    by einsum, stopped when the mean log-likelihood moves less than tol (.item() in the loop)."""
    def gmm_em(X, K, n_iter=30, tol=1e-4, reg=1e-4):
        N, D = X.shape
        idx = torch.randperm(N)[:K]
        mu = X[idx].clone()
        cov = torch.eye(D, dtype=X.dtype).expand(K, D, D).clone() * X.var(0).mean()
        pi = torch.full((K,), 1.0 / K, dtype=X.dtype)
        prev, mean_ll, it = -math.inf, -math.inf, 0
        for it in range(n_iter):
            dist = MultivariateNormal(mu, covariance_matrix=cov)
            log_p = dist.log_prob(X[:, None, :]) + pi.log()
            ll = torch.logsumexp(log_p, 1)
            resp = (log_p - ll[:, None]).exp()
            Nk = resp.sum(0) + 1e-10
            pi = Nk / N
            mu = resp.T @ X / Nk[:, None]
            diff = X[:, None, :] - mu[None]
            cov = torch.einsum("nk,nkd,nke->kde", resp, diff, diff) / Nk[:, None, None] + reg * torch.eye(D, dtype=X.dtype)
            mean_ll = ll.mean().item()
            if abs(mean_ll - prev) < tol:
                break
            prev = mean_ll
        return pi, mu, cov, mean_ll, it
    return gmm_em, lambda: None


def gmm_inputs(i, dt):
    centers = torch.tensor([[0.0, 0.0], [4.0, 4.0], [-4.0, 3.0]])
    labels = torch.randint(0, 3, (60 + 6 * (i % 2),))
    return (centers[labels] + torch.randn(labels.shape[0], 2) @ torch.tensor([[1.0, 0.3], [0.0, 0.7]])).to(dt), 3


def mask_tokens(inputs, special_tokens_mask, vocab_size, mask_token_id, mlm_probability=0.15):
    """transformers' DataCollatorForLanguageModeling.torch_mask_tokens (inputs written in place)."""
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, mlm_probability)
    probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    labels[~masked_indices] = -100
    indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked_indices
    inputs[indices_replaced] = mask_token_id
    indices_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked_indices & ~indices_replaced
    random_words = torch.randint(vocab_size, labels.shape, dtype=torch.long)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


class MLMEncoder(nn.Module):
    def __init__(self, vocab=40, dim=32, n_layers=2, max_len=24):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim, padding_idx=0), nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.1, batch_first=True,
                                                               norm_first=True) for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, pad_mask):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))[None]
        for layer in self.layers:
            h = checkpoint(layer, h, None, pad_mask, use_reentrant=False)
        return self.head(self.norm(h))


def make_mlm(dt):
    """masked-LM pretraining: the collator's 80 / 10 / 10 masking of the batch in place, encoder layers under
    non-reentrant activation checkpointing (dropout replayed by the saved RNG state), ignore_index -100."""
    model = MLMEncoder().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    PAD, CLS, SEP, MASK = 0, 1, 2, 3

    def step(input_ids):
        special = (input_ids == PAD) | (input_ids == CLS) | (input_ids == SEP)
        input_ids, labels = mask_tokens(input_ids, special, 40, MASK)
        logits = model(input_ids, input_ids == PAD)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), (labels != -100).sum().item()
    return step, lambda: (_state(model), _opt_state(opt))


def mlm_inputs(i, dt):
    lengths = [14, 11, 16, 9][: 3 + i % 2]
    T = max(lengths) + 2
    ids = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, 0], ids[b, 1:n + 1], ids[b, n + 1] = 1, torch.randint(4, 40, (n,)), 2
    return (ids,)


# ------------------------------------------------------------------------------------------------ uncertainty / anomaly / graphs
def make_mc_conformal(dt):
    """a training step, then MC-dropout predictions (dropout modules back in train mode under eval), predictive
    entropy and BALD, the most uncertain pool points picked, and split conformal prediction sets from a
    calibration set (torch.quantile with interpolation='higher')."""
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 32), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(32, 4)).to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    @torch.no_grad()
    def mc_predict(x, T=6):
        model.eval()
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.train()
        probs = torch.stack([F.softmax(model(x), -1) for _ in range(T)])
        mean = probs.mean(0)
        entropy = -(mean * mean.clamp_min(1e-12).log()).sum(-1)
        exp_ent = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean(0)
        return mean, entropy, entropy - exp_ent

    def step(x, y, x_cal, y_cal, x_pool, alpha=0.1):
        model.train()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        cal_probs, _, _ = mc_predict(x_cal)
        n = y_cal.shape[0]
        scores = 1 - cal_probs.gather(1, y_cal[:, None]).squeeze(1)
        q_level = math.ceil((n + 1) * (1 - alpha)) / n
        qhat = torch.quantile(scores, q_level, interpolation="higher")
        pool_probs, entropy, bald = mc_predict(x_pool)
        sets = pool_probs >= (1 - qhat)
        picked = bald.topk(3).indices
        return loss.detach(), qhat, sets, sets.sum(1).float().mean(), picked, entropy
    return step, lambda: (_state(model), _opt_state(opt))


def mc_inputs(i, dt):
    def draw(n):
        y = torch.randint(0, 4, (n,))
        return torch.randn(n, 6, dtype=dt) + F.one_hot(y, 6)[:, :6].to(dt) * 1.5, y
    return (*draw(16), *draw(20 + 5 * (i % 2)), draw(12)[0])


def make_deep_svdd(dt):
    """lukasruff/Deep-SVDD-PyTorch's soft-boundary trainer: the center c from the first batch (entries near
    zero pushed to +-eps), a bias-free network, the radius R set from numpy's quantile of the distances after
    the warm-up epochs."""
    net = nn.Sequential(nn.Linear(8, 16, bias=False), nn.LeakyReLU(), nn.Linear(16, 4, bias=False)).to(dt)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-6)
    st = {"c": None, "R": torch.tensor(0.0, dtype=dt), "nu": 0.1, "warm_up_n_epochs": 2, "epoch": 0}

    def init_center_c(x, eps=0.1):
        with torch.no_grad():
            outputs = net(x)
            c = outputs.sum(0) / x.shape[0]
        c[(abs(c) < eps) & (c < 0)] = -eps
        c[(abs(c) < eps) & (c > 0)] = eps
        return c

    def get_radius(dist, nu):
        return np.quantile(np.sqrt(dist.clone().data.float().numpy()), 1 - nu)

    def train_epoch(x, x_test):
        if st["c"] is None:
            st["c"] = init_center_c(x)
        outputs = net(x)
        dist = torch.sum((outputs - st["c"]) ** 2, dim=1)
        scores = dist - st["R"] ** 2
        loss = st["R"] ** 2 + (1 / st["nu"]) * torch.mean(torch.max(torch.zeros_like(scores), scores))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if st["epoch"] >= st["warm_up_n_epochs"]:
            st["R"].data = torch.tensor(get_radius(dist, st["nu"]), dtype=dt)
        st["epoch"] += 1
        with torch.no_grad():
            test_scores = torch.sum((net(x_test) - st["c"]) ** 2, dim=1) - st["R"] ** 2
        return loss.item(), test_scores
    return train_epoch, lambda: (_state(net), _opt_state(opt), dict(st))


def pagerank(edge_index, num_nodes, alpha=0.85, tol=1e-6, max_iter=100):
    """power iteration on the column-stochastic matrix built as a sparse COO tensor (duplicate edges summed by
    coalesce) and densified; dangling nodes spread uniformly."""
    row, col = edge_index
    deg = torch.bincount(row, minlength=num_nodes).float()
    vals = 1.0 / deg[row]
    A = torch.sparse_coo_tensor(torch.stack([col, row]), vals, (num_nodes, num_nodes)).coalesce().to_dense()
    dangling = deg == 0
    x = torch.full((num_nodes,), 1.0 / num_nodes)
    it = 0
    for it in range(max_iter):
        x_new = alpha * (A @ x) + alpha * x[dangling].sum() / num_nodes + (1 - alpha) / num_nodes
        err = (x_new - x).abs().sum()
        x = x_new
        if err < num_nodes * tol:
            break
    return x, it


def make_pagerank(dt):
    def rank(edge_index, num_nodes, k):
        x, it = pagerank(edge_index, num_nodes)
        top = x.topk(k)
        return x, it, top.indices
    return rank, lambda: None


def pagerank_inputs(i, dt):
    n = 15 + i
    src = torch.randint(0, n - 2, (40,))                          # the last two nodes dangle
    return torch.stack([src, torch.randint(0, n, (40,))]), n, 4


# ------------------------------------------------------------------------------------------------ the cases
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("edm_heun", make_edm, lambda i, dt: (torch.randn(3, 8, dtype=dt), [6, 6, 5][i % 3]), 3, False),
    ("ddpm_vpred_minsnr", make_ddpm_vpred,
     lambda i, dt: (torch.rand(4, 2, 8, 8, dtype=dt), torch.randint(0, 5, (4,))), 4, True),
    ("rq_spline_flow", make_rq_spline_flow, flow_inputs, 4, False),
    ("glow_invconv_lu", make_glow, lambda i, dt: (torch.rand(4, 1, 8, 8, dtype=dt),), 4, False),
    ("iwae_kl_warmup", make_iwae, lambda i, dt: ((torch.rand(12, 16) > 0.5).to(dt),), 5, True),
    ("supcon", make_supcon, supcon_inputs, 4, True),
    ("clip_logit_scale", make_clip, clip_inputs, 4, True),
    ("triplet_center", make_triplet_center, triplet_inputs, 4, False),
    ("dkd_distill", make_dkd, dkd_inputs, 5, True),
    ("ema_foreach_lerp", make_ema_foreach,
     lambda i, dt: (torch.randn(6, 3, 8, 8, dtype=dt), torch.randint(0, 5, (6,))), 5, True),
    ("lsq_fake_quant", make_lsq_qat, qat_inputs, 4, False),
    ("prune_global", make_prune, prune_inputs, 5, False),
    ("lora_merge", make_lora, lora_inputs, 4, True),
    ("sdpa_alibi_gqa", make_sdpa_gqa, sdpa_inputs, 4, True),
    ("mamba_scan", make_mamba, lambda i, dt: (torch.randint(0, 30, (2, 9 + 2 * (i % 2))),), 4, False),
    ("efficient_kan", make_kan, kan_inputs, 4, False),
    ("binarynet_org", make_binarynet,
     lambda i, dt: (torch.randn(10, 16, dtype=dt), torch.randint(0, 4, (10,))), 4, False),
    ("autograd_setup_context", make_autograd_ctx, ctx_inputs, 4, True),
    ("orthogonal_rnn", make_ortho_rnn, ortho_inputs, 4, False),
    ("hmc_logreg", make_hmc, lambda i, dt: (3, 4 + i % 2), 4, False),
    ("particle_filter", make_particle_filter, pf_inputs, 4, False),
    ("deepsurv_cox", make_deepsurv, surv_inputs, 4, False),
    ("bayes_by_backprop", make_bayes_backprop, bbb_inputs, 4, False),
    ("poincare_rsgd", make_poincare, poincare_inputs, 5, False),
    ("pgd_adv_train", make_pgd_train, pgd_inputs, 4, False),
    ("ewc_consolidate", make_ewc, ewc_inputs, 5, False),
    ("fedavg_round", make_fedavg, fedavg_inputs, 3, False),
    ("neural_ca", make_nca, nca_inputs, 4, False),
    ("harris_match", make_harris_match, harris_inputs, 4, False),
    ("soft_dtw", make_soft_dtw, sdtw_inputs, 4, False),
    ("speculative_sampling", make_speculative, spec_inputs, 4, False),
    ("gmm_em_tol", make_gmm_em, gmm_inputs, 4, False),
    ("mlm_checkpoint", make_mlm, mlm_inputs, 4, False),
    ("mc_dropout_conformal", make_mc_conformal, mc_inputs, 4, False),
    ("deep_svdd", make_deep_svdd,
     lambda i, dt: (torch.randn(16, 8, dtype=dt) + 1, torch.randn(6, 8, dtype=dt) * (1 + i)), 5, False),
    ("pagerank_sparse", make_pagerank, pagerank_inputs, 4, False),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout10.py")
