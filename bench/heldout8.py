"""Held-out set 8: research code, written the way papers' reference repositories write it (programs, not
just models: sampling loops, training steps with their losses and state updates): a DDIM sampler with
classifier-free guidance (torch.cat([x, x]) / chunk), a DDPM training step with an EMA copy, annealed Langevin
dynamics over a noise-conditional score net, NeRF with volume rendering and hierarchical sampling (cumprod,
searchsorted, gather), a SIREN fitted with a gradient loss (autograd.grad create_graph), GP hyperparameters
trained through cholesky / cholesky_solve, a modern Hopfield retrieval iterated to convergence, capsule
routing with the margin loss, a neural ODE through a hand-written RK4, a VQ-VAE with a straight-through
estimator and an EMA codebook, Transformer-XL relative attention with memory carried between calls, a
spiking network with a surrogate-gradient autograd.Function, a mixture density network (logsumexp) and its
sampler (multinomial), log-domain Sinkhorn to a tolerance, a Set Transformer with masks of varying set sizes,
a TCN with F.pad causal dilated convs, a knowledge distillation step, Barlow Twins and VICReg losses, a
Perceiver with an input mask, Meta-SGD through torch.func.functional_call, an extended Kalman filter with
torch.func.jacrev and linalg.solve, ALiBi biases built in the forward, rotary embeddings through torch.polar
and complex views, a BiLSTM-CRF's forward algorithm and Viterbi decode, prototypical networks, FixMatch's
thresholded pseudo-labels, PixelCNN's masked convolution (weight.data *= mask), causal linear attention
(cumsum of outer products), a dense-adjacency GAT, nucleus sampling from an owned torch.Generator.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy of
the program's state, compared after every call (outputs, parameters and gradients, optimizer state,
counters, the global RNG's state after the call, arguments): bench/heldout4.py's runner and report
(imported, same options):

    python bench/heldout8.py --threads 1 --dtypes fp32
    python bench/heldout8.py --threads 1 --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout8.py --threads 1 --models ddim_cfg,nerf_hierarchical --json /tmp/h8.jsonl
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations

import heldout4  # noqa: E402  (the runner: run_case, diff, main)


def _flat(ts):
    ts = [t.detach().flatten() for t in ts if t is not None]
    return torch.cat(ts) if ts else None


def _state(model, *extra):
    """parameters and gradients each compared as one vector, buffers one by one (as bench/heldout7.py)."""
    params = dict(model.named_parameters())
    bufs = {k: v for k, v in model.state_dict().items() if k not in params}
    return (_flat(params.values()), _flat(p.grad for p in params.values()),
            [p.grad is None for p in params.values()], bufs, *extra)


def _opt_state(opt):
    st = opt.state_dict()["state"]
    kinds = sorted({k for v in st.values() for k in v})
    return ({k: _flat(v.get(k) for v in st.values()) for k in kinds}, [g["lr"] for g in opt.param_groups])


# ------------------------------------------------------------------------------------------------ diffusion
def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


class ResBlock(nn.Module):
    def __init__(self, ch, emb_ch):
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(4, ch), nn.GroupNorm(4, ch)
        self.conv1, self.conv2 = nn.Conv2d(ch, ch, 3, padding=1), nn.Conv2d(ch, ch, 3, padding=1)
        self.emb = nn.Linear(emb_ch, ch)

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return x + h


class TinyUNet(nn.Module):
    def __init__(self, in_ch=2, ch=16, num_classes=4):
        super().__init__()
        self.ch = ch
        self.time_embed = nn.Sequential(nn.Linear(ch, ch * 2), nn.SiLU(), nn.Linear(ch * 2, ch * 2))
        self.label_emb = nn.Embedding(num_classes + 1, ch * 2)     # the last class is the null label
        self.inp = nn.Conv2d(in_ch, ch, 3, padding=1)
        self.down = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid = ResBlock(ch, ch * 2)
        self.up = nn.ConvTranspose2d(ch, ch, 4, stride=2, padding=1)
        self.res = ResBlock(ch * 2, ch * 2)
        self.out = nn.Sequential(nn.GroupNorm(4, ch * 2), nn.SiLU(), nn.Conv2d(ch * 2, in_ch, 3, padding=1))

    def forward(self, x, t, y):
        emb = self.time_embed(timestep_embedding(t, self.ch).to(x.dtype)) + self.label_emb(y)
        h0 = self.inp(x)
        h = self.mid(self.down(h0), emb)
        h = torch.cat([self.up(h), h0], dim=1)
        return self.out(self.res(h, emb))


def make_ddim_cfg(dt):
    """DDIM sampling (eta > 0 draws noise) with classifier-free guidance: conditional and unconditional
    predictions in one batch, split by chunk."""
    model = TinyUNet().to(dt).eval()
    T = 100
    betas = torch.linspace(1e-4, 0.02, T, dtype=torch.float64)
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).to(dt)

    @torch.no_grad()
    def sample(x, y, num_steps, guidance_scale, eta=0.5):
        timesteps = list(range(0, T, T // num_steps))[::-1]
        null = torch.full_like(y, 4)
        for i, t in enumerate(timesteps):
            t_prev = timesteps[i + 1] if i + 1 < len(timesteps) else -1
            a_t = alphas_cumprod[t]
            a_prev = alphas_cumprod[t_prev] if t_prev >= 0 else torch.ones((), dtype=x.dtype)
            x_in = torch.cat([x, x])
            t_in = torch.full((x_in.shape[0],), t, dtype=torch.long)
            eps_cond, eps_uncond = model(x_in, t_in, torch.cat([y, null])).chunk(2)
            eps = eps_uncond + guidance_scale * (eps_cond - eps_uncond)
            x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            x0 = x0.clamp(-1, 1)
            sigma = eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).sqrt()
            dir_xt = (1 - a_prev - sigma ** 2).sqrt() * eps
            x = a_prev.sqrt() * x0 + dir_xt + sigma * torch.randn_like(x)
        return x
    return sample, lambda: None


def ddim_inputs(i, dt):
    return torch.randn(2, 2, 8, 8, dtype=dt), torch.tensor([i % 4, (i + 1) % 4]), [5, 5, 4][i % 3], 3.0 + i


def make_ddpm_train(dt):
    """DDPM's simple loss at random timesteps (gathered from the schedule), AdamW, an EMA of the weights."""
    model = TinyUNet().to(dt)
    ema = TinyUNet().to(dt)
    ema.load_state_dict(model.state_dict())
    ema.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    T = 1000
    betas = torch.linspace(1e-4, 0.02, T)
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
    sqrt_ac, sqrt_1mac = alphas_cumprod.sqrt().to(dt), (1 - alphas_cumprod).sqrt().to(dt)
    st = {"step": 0}

    def extract(a, t, shape):
        out = a.gather(-1, t)
        return out.reshape(t.shape[0], *((1,) * (len(shape) - 1)))

    def train_step(x0, y, p_uncond=0.2):
        t = torch.randint(0, T, (x0.shape[0],))
        noise = torch.randn_like(x0)
        x_t = extract(sqrt_ac, t, x0.shape) * x0 + extract(sqrt_1mac, t, x0.shape) * noise
        drop = torch.rand(y.shape) < p_uncond
        y = torch.where(drop, torch.full_like(y, 4), y)
        loss = F.mse_loss(model(x_t, t, y), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        st["step"] += 1
        decay = min(0.999, (1 + st["step"]) / (10 + st["step"]))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(decay).add_(pm, alpha=1 - decay)
        return loss.item()
    return train_step, lambda: (_state(model), _state(ema), _opt_state(opt), dict(st))


def ddpm_inputs(i, dt):
    return torch.randn(4, 2, 8, 8, dtype=dt).clamp(-1, 1), torch.randint(0, 4, (4,))


class ScoreNet(nn.Module):
    """noise-conditional score network s(x, sigma) = net(x, log sigma) / sigma (NCSN)."""
    def __init__(self, d=2, h=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 1, h), nn.Softplus(), nn.Linear(h, h), nn.Softplus(), nn.Linear(h, d))

    def forward(self, x, sigma):
        return self.net(torch.cat([x, sigma.log().expand(x.shape[0], 1)], dim=1)) / sigma


def make_langevin(dt):
    """denoising score matching at a random noise level of a geometric ladder, then annealed Langevin
    dynamics from noise with the updated net."""
    score = ScoreNet().to(dt)
    opt = torch.optim.Adam(score.parameters(), lr=1e-3)
    sigmas = torch.tensor(torch.logspace(0, -2, 6).tolist(), dtype=dt)

    def dsm_loss(x):
        idx = torch.randint(0, len(sigmas), (x.shape[0],))
        used = sigmas[idx].view(-1, 1)
        noise = torch.randn_like(x) * used
        target = -noise / used ** 2
        s = torch.cat([score(x[j:j + 1] + noise[j:j + 1], used[j]) for j in range(x.shape[0])])
        return 0.5 * ((s - target) ** 2).sum(-1).mul(used.squeeze(-1) ** 2).mean()

    def step(x, n_samples, n_steps_each, step_lr=2e-3):
        loss = dsm_loss(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        samples = torch.rand(n_samples, 2, dtype=x.dtype) * 2 - 1
        with torch.no_grad():
            for sigma in sigmas:
                step_size = step_lr * (sigma / sigmas[-1]) ** 2
                for _ in range(n_steps_each):
                    grad = score(samples, sigma.view(1, 1))
                    samples = samples + step_size * grad + torch.randn_like(samples) * (2 * step_size).sqrt()
        return loss.detach(), samples
    return step, lambda: (_state(score), _opt_state(opt))


def langevin_inputs(i, dt):
    return torch.randn(6, 2, dtype=dt) * 0.3 + torch.tensor([1.0, -1.0], dtype=dt), 8 + 2 * i, 2 + i % 2


# ------------------------------------------------------------------------------------------------ NeRF / SIREN
class Embedder:
    def __init__(self, multires, include_input=True):
        self.freq_bands = 2.0 ** torch.linspace(0.0, multires - 1, steps=multires)
        self.include_input = include_input

    def __call__(self, inputs):
        out = [inputs] if self.include_input else []
        for freq in self.freq_bands:
            for p_fn in (torch.sin, torch.cos):
                out.append(p_fn(inputs * freq))
        return torch.cat(out, -1)


class NeRFMLP(nn.Module):
    def __init__(self, D=4, W=32, input_ch=27, input_ch_views=15, skips=(2,)):
        super().__init__()
        self.skips = skips
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)] + [nn.Linear(W, W) if i not in skips else nn.Linear(W + input_ch, W)
                                        for i in range(D - 1)])
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])
        self.feature_linear, self.alpha_linear = nn.Linear(W, W), nn.Linear(W, 1)
        self.rgb_linear = nn.Linear(W // 2, 3)
        self.input_ch = input_ch

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, x.shape[-1] - self.input_ch], dim=-1)
        h = input_pts
        for i, layer in enumerate(self.pts_linears):
            h = F.relu(layer(h))
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)
        alpha = self.alpha_linear(h)
        h = torch.cat([self.feature_linear(h), input_views], -1)
        for layer in self.views_linears:
            h = F.relu(layer(h))
        return torch.cat([self.rgb_linear(h), alpha], -1)


def raw2outputs(raw, z_vals, rays_d, raw_noise_std=0.0, white_bkgd=False):
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1.0 - torch.exp(-act_fn(raw) * dists)  # noqa: E731
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.tensor([1e10], dtype=z_vals.dtype).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    noise = 0.0
    if raw_noise_std > 0.0:
        noise = torch.randn(raw[..., 3].shape, dtype=raw.dtype) * raw_noise_std
    alpha = raw2alpha(raw[..., 3] + noise, dists)
    weights = alpha * torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1), dtype=alpha.dtype),
                                               1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    disp_map = 1.0 / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.sum(weights, -1))
    acc_map = torch.sum(weights, -1)
    if white_bkgd:
        rgb_map = rgb_map + (1.0 - acc_map[..., None])
    return rgb_map, disp_map, acc_map, weights, depth_map


def sample_pdf(bins, weights, N_samples, det=False):
    weights = weights + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    if det:
        u = torch.linspace(0.0, 1.0, steps=N_samples, dtype=bins.dtype)
        u = u.expand(list(cdf.shape[:-1]) + [N_samples])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [N_samples], dtype=bins.dtype)
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


def make_nerf(dt):
    """one NeRF training step on a batch of rays: coarse samples (stratified), hierarchical fine samples
    from the coarse weights, both networks' photometric losses, PSNR."""
    embed_fn, embeddirs_fn = Embedder(4), Embedder(2)
    coarse, fine = NeRFMLP().to(dt), NeRFMLP().to(dt)
    opt = torch.optim.Adam([*coarse.parameters(), *fine.parameters()], lr=5e-4, betas=(0.9, 0.999))
    N_samples, N_importance = 8, 8
    mse2psnr = lambda x: -10.0 * torch.log(x) / torch.log(torch.tensor([10.0]))  # noqa: E731

    def run_network(inputs, viewdirs, fn):
        inputs_flat = torch.reshape(inputs, [-1, inputs.shape[-1]])
        embedded = embed_fn(inputs_flat)
        input_dirs = viewdirs[:, None].expand(inputs.shape)
        embedded = torch.cat([embedded, embeddirs_fn(torch.reshape(input_dirs, [-1, input_dirs.shape[-1]]))], -1)
        outputs_flat = fn(embedded)
        return torch.reshape(outputs_flat, list(inputs.shape[:-1]) + [outputs_flat.shape[-1]])

    def render_rays(rays_o, rays_d, near, far, perturb):
        viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
        t_vals = torch.linspace(0.0, 1.0, steps=N_samples, dtype=rays_o.dtype)
        z_vals = near * (1.0 - t_vals) + far * t_vals
        z_vals = z_vals.expand([rays_o.shape[0], N_samples])
        if perturb > 0.0:
            mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
            upper = torch.cat([mids, z_vals[..., -1:]], -1)
            lower = torch.cat([z_vals[..., :1], mids], -1)
            z_vals = lower + (upper - lower) * torch.rand(z_vals.shape, dtype=rays_o.dtype)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        raw = run_network(pts, viewdirs, coarse)
        rgb_map_0, _, acc_0, weights, _ = raw2outputs(raw, z_vals, rays_d, raw_noise_std=1.0 if perturb else 0.0)
        z_vals_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        z_samples = sample_pdf(z_vals_mid, weights[..., 1:-1], N_importance, det=(perturb == 0.0)).detach()
        z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        raw = run_network(pts, viewdirs, fine)
        rgb_map, disp_map, acc_map, _, _ = raw2outputs(raw, z_vals, rays_d)
        return {"rgb_map": rgb_map, "disp_map": disp_map, "acc_map": acc_map, "rgb0": rgb_map_0}

    def train_step(rays_o, rays_d, target_s, perturb):
        ret = render_rays(rays_o, rays_d, 2.0, 6.0, perturb)
        opt.zero_grad()
        img_loss = torch.mean((ret["rgb_map"] - target_s) ** 2)
        psnr = mse2psnr(img_loss)
        loss = img_loss + torch.mean((ret["rgb0"] - target_s) ** 2)
        loss.backward()
        opt.step()
        return loss.item(), psnr.item(), ret["disp_map"].detach()
    return train_step, lambda: (_state(coarse), _state(fine), _opt_state(opt))


def nerf_inputs(i, dt):
    n = 16 + 4 * (i % 2)
    return (torch.randn(n, 3, dtype=dt) * 0.1, F.normalize(torch.randn(n, 3, dtype=dt), dim=-1) + 0.5,
            torch.rand(n, 3, dtype=dt), [1.0, 0.0, 1.0, 1.0][i])


class SineLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True, is_first=False, omega_0=30.0):
        super().__init__()
        self.omega_0, self.is_first, self.in_features = omega_0, is_first, in_features
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        with torch.no_grad():
            if self.is_first:
                self.linear.weight.uniform_(-1 / self.in_features, 1 / self.in_features)
            else:
                self.linear.weight.uniform_(-math.sqrt(6 / self.in_features) / self.omega_0,
                                            math.sqrt(6 / self.in_features) / self.omega_0)

    def forward(self, input):
        return torch.sin(self.omega_0 * self.linear(input))


class Siren(nn.Module):
    def __init__(self, in_features=2, hidden_features=32, hidden_layers=2, out_features=1, outermost_linear=True):
        super().__init__()
        net = [SineLayer(in_features, hidden_features, is_first=True)]
        for _ in range(hidden_layers):
            net.append(SineLayer(hidden_features, hidden_features))
        if outermost_linear:
            final_linear = nn.Linear(hidden_features, out_features)
            with torch.no_grad():
                bound = math.sqrt(6 / hidden_features) / 30.0
                final_linear.weight.uniform_(-bound, bound)
            net.append(final_linear)
        else:
            net.append(SineLayer(hidden_features, out_features))
        self.net = nn.Sequential(*net)

    def forward(self, coords):
        coords = coords.clone().detach().requires_grad_(True)    # allows to take derivative w.r.t. input
        return self.net(coords), coords


def gradient(y, x, grad_outputs=None):
    if grad_outputs is None:
        grad_outputs = torch.ones_like(y)
    return torch.autograd.grad(y, [x], grad_outputs=grad_outputs, create_graph=True)[0]


def laplace(y, x):
    grad = gradient(y, x)
    div = 0.0
    for i in range(grad.shape[-1]):
        div = div + torch.autograd.grad(grad[..., i], x, torch.ones_like(grad[..., i]), create_graph=True)[0][..., i:i + 1]
    return div


def make_siren(dt):
    """SIREN fitted to an image's gradients (the Poisson experiment) with a Laplacian regularizer."""
    img_siren = Siren().to(dt)
    optim = torch.optim.Adam(lr=1e-4, params=img_siren.parameters())

    def step(coords, gt_grad):
        model_output, coords = img_siren(coords)
        grads = gradient(model_output, coords)
        lap = laplace(model_output, coords)
        loss = ((grads - gt_grad) ** 2).mean() + 1e-4 * (lap ** 2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        return loss.detach(), model_output.detach()
    return step, lambda: (_state(img_siren), _opt_state(optim))


def siren_inputs(i, dt):
    n = 24 + 8 * (i % 2)
    c = torch.rand(n, 2, dtype=dt) * 2 - 1
    return c, torch.stack([torch.cos(3 * c[:, 0]), -torch.sin(2 * c[:, 1])], -1)


# ------------------------------------------------------------------------------------------------ kernels, memories
class ExactGP(nn.Module):
    """GP regression with an RBF kernel whose hyperparameters are trained on the exact marginal likelihood."""
    def __init__(self):
        super().__init__()
        self.log_lengthscale = nn.Parameter(torch.tensor(0.0))
        self.log_outputscale = nn.Parameter(torch.tensor(0.0))
        self.log_noise = nn.Parameter(torch.tensor(-2.0))

    def kernel(self, a, b):
        d2 = torch.cdist(a / self.log_lengthscale.exp(), b / self.log_lengthscale.exp()).pow(2)
        return self.log_outputscale.exp() * torch.exp(-0.5 * d2)

    def neg_mll(self, x, y):
        n = x.shape[0]
        K = self.kernel(x, x) + (self.log_noise.exp() + 1e-4) * torch.eye(n, dtype=x.dtype)
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), L)
        nll = 0.5 * (y.unsqueeze(-1) * alpha).sum() + torch.log(torch.diagonal(L)).sum() + 0.5 * n * math.log(2 * math.pi)
        return nll / n, L, alpha

    def predict(self, x, L, alpha, xs):
        Ks = self.kernel(xs, x)
        mean = Ks @ alpha
        v = torch.linalg.solve_triangular(L, Ks.T, upper=False)
        var = self.log_outputscale.exp() - (v * v).sum(0)
        return mean.squeeze(-1), var


def make_gp_train(dt):
    gp = ExactGP().to(dt)
    opt = torch.optim.Adam(gp.parameters(), lr=0.05)

    def fit_predict(x, y, xs, iters):
        for _ in range(iters):
            opt.zero_grad()
            loss, _, _ = gp.neg_mll(x, y)
            loss.backward()
            opt.step()
        with torch.no_grad():
            loss, L, alpha = gp.neg_mll(x, y)
            mean, var = gp.predict(x, L, alpha, xs)
        return loss, mean, var.clamp_min(1e-9).sqrt()
    return fit_predict, lambda: (_state(gp), _opt_state(opt))


def gp_train_inputs(i, dt):
    n = 12 + 3 * i
    x = torch.rand(n, 1, dtype=dt) * 6
    return x, torch.sin(x[:, 0]) + 0.1 * torch.randn(n, dtype=dt), torch.linspace(0, 6, 7, dtype=dt)[:, None], 3


def make_hopfield(dt):
    """modern Hopfield retrieval (Ramsauer et al.): xi <- X^T softmax(beta X xi) until the state stops moving;
    the energy of each iterate is logged."""
    energies = []

    def lse(beta, z, dim=-1):
        return torch.logsumexp(beta * z, dim=dim) / beta

    def energy(X, xi, beta):
        return -lse(beta, X @ xi) + 0.5 * (xi * xi).sum() + math.log(X.shape[0]) / beta + 0.5 * X.norm(dim=1).max() ** 2

    def retrieve(X, xi, beta, max_iter=20, tol=1e-5):
        for it in range(max_iter):
            xi_new = X.T @ torch.softmax(beta * (X @ xi), dim=0)
            energies.append(float(energy(X, xi_new, beta)))
            if torch.norm(xi_new - xi) < tol:
                xi = xi_new
                break
            xi = xi_new
        return xi, it + 1
    return retrieve, lambda: list(energies)


def hopfield_inputs(i, dt):
    X = F.normalize(torch.randn(10 + i, 16, dtype=dt), dim=1) * 3
    return X, X[i] + 0.8 * torch.randn(16, dtype=dt), [0.5, 2.0, 8.0, 1.0][i]


def squash(s, dim=-1):
    squared_norm = (s ** 2).sum(dim=dim, keepdim=True)
    return squared_norm / (1 + squared_norm) * s / (torch.sqrt(squared_norm) + 1e-8)


class CapsuleNet(nn.Module):
    def __init__(self, in_caps=54, in_dim=4, out_caps=5, out_dim=8, routings=3):
        super().__init__()
        self.in_caps, self.in_dim, self.routings = in_caps, in_dim, routings
        self.conv = nn.Conv2d(1, in_dim * 6, 3, stride=2)
        self.W = nn.Parameter(0.01 * torch.randn(1, in_caps, out_caps, out_dim, in_dim))
        self.decoder = nn.Sequential(nn.Linear(out_dim * out_caps, 32), nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid())

    def forward(self, x, y=None):
        u = self.conv(x)                                          # (B, 6 * in_dim, 2, 2)
        u = squash(u.view(x.size(0), -1, self.in_dim))            # (B, in_caps, in_dim)
        u_hat = torch.matmul(self.W, u[:, :, None, :, None]).squeeze(-1)   # (B, in_caps, out_caps, out_dim)
        u_hat_detached = u_hat.detach()
        b = torch.zeros(*u_hat.shape[:3], dtype=x.dtype)
        for i in range(self.routings):
            c = F.softmax(b, dim=2)
            if i == self.routings - 1:
                v = squash((c.unsqueeze(-1) * u_hat).sum(dim=1))
            else:
                v = squash((c.unsqueeze(-1) * u_hat_detached).sum(dim=1))
                b = b + (v.unsqueeze(1) * u_hat_detached).sum(-1)
        lengths = v.norm(dim=-1)
        if y is None:
            y = F.one_hot(lengths.argmax(1), lengths.shape[1]).to(x.dtype)
        recon = self.decoder((v * y[:, :, None]).view(x.size(0), -1))
        return lengths, recon


def margin_loss(lengths, y, m_pos=0.9, m_neg=0.1, lam=0.5):
    L = y * F.relu(m_pos - lengths) ** 2 + lam * (1 - y) * F.relu(lengths - m_neg) ** 2
    return L.sum(dim=1).mean()


def make_capsule(dt):
    net = CapsuleNet().to(dt)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(x, labels):
        y = torch.zeros(labels.size(0), 5, dtype=x.dtype).scatter_(1, labels.view(-1, 1), 1.0)
        lengths, recon = net(x, y)
        loss = margin_loss(lengths, y) + 0.0005 * F.mse_loss(recon, x.view(x.size(0), -1), reduction="sum")
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            pred_len, _ = net(x)
        return loss.detach(), (pred_len.argmax(1) == labels).sum().item()
    return step, lambda: (_state(net), _opt_state(opt))


def capsule_inputs(i, dt):
    return torch.rand(4, 1, 8, 8, dtype=dt), torch.randint(0, 5, (4,))


class ODEFunc(nn.Module):
    def __init__(self, dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.nfe = 0

    def forward(self, t, y):
        self.nfe += 1
        return self.net(torch.cat([y, t.expand(y.shape[0], 1)], dim=-1))


def odeint_rk4(func, y0, t):
    solution = [y0]
    y = y0
    for t0, t1 in zip(t[:-1], t[1:]):
        dt = t1 - t0
        k1 = func(t0, y)
        k2 = func(t0 + dt / 2, y + dt * k1 / 2)
        k3 = func(t0 + dt / 2, y + dt * k2 / 2)
        k4 = func(t1, y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        solution.append(y)
    return torch.stack(solution)


def make_neural_ode(dt):
    func = ODEFunc().to(dt)
    opt = torch.optim.RMSprop(func.parameters(), lr=1e-3)

    def step(y0, t, true_y):
        opt.zero_grad()
        pred_y = odeint_rk4(func, y0, t)
        loss = torch.mean(torch.abs(pred_y - true_y))
        loss.backward()
        opt.step()
        return loss.item(), func.nfe
    return step, lambda: (_state(func), _opt_state(opt), func.nfe)


def ode_inputs(i, dt):
    n = 6 + 2 * (i % 2)
    t = torch.linspace(0.0, 1.0 + 0.5 * i, n, dtype=dt)
    y0 = torch.randn(5, 4, dtype=dt)
    return y0, t, y0 + torch.sin(t)[:, None, None] * 0.3


# ------------------------------------------------------------------------------------------------ VQ-VAE, Transformer-XL
class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, commitment_cost, decay, epsilon=1e-5):
        super().__init__()
        self._embedding_dim, self._num_embeddings = embedding_dim, num_embeddings
        self._embedding = nn.Embedding(self._num_embeddings, self._embedding_dim)
        self._embedding.weight.data.normal_()
        self._commitment_cost = commitment_cost
        self.register_buffer("_ema_cluster_size", torch.zeros(num_embeddings))
        self._ema_w = nn.Parameter(torch.Tensor(num_embeddings, self._embedding_dim))
        self._ema_w.data.normal_()
        self._decay, self._epsilon = decay, epsilon

    def forward(self, inputs):
        inputs = inputs.permute(0, 2, 3, 1).contiguous()
        input_shape = inputs.shape
        flat_input = inputs.view(-1, self._embedding_dim)
        distances = (torch.sum(flat_input ** 2, dim=1, keepdim=True) + torch.sum(self._embedding.weight ** 2, dim=1)
                     - 2 * torch.matmul(flat_input, self._embedding.weight.t()))
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(encoding_indices.shape[0], self._num_embeddings, dtype=inputs.dtype)
        encodings.scatter_(1, encoding_indices, 1)
        quantized = torch.matmul(encodings, self._embedding.weight).view(input_shape)
        if self.training:
            self._ema_cluster_size = self._ema_cluster_size * self._decay + (1 - self._decay) * torch.sum(encodings, 0)
            n = torch.sum(self._ema_cluster_size.data)
            self._ema_cluster_size = ((self._ema_cluster_size + self._epsilon)
                                      / (n + self._num_embeddings * self._epsilon) * n)
            dw = torch.matmul(encodings.t(), flat_input)
            self._ema_w = nn.Parameter(self._ema_w * self._decay + (1 - self._decay) * dw)
            self._embedding.weight = nn.Parameter(self._ema_w / self._ema_cluster_size.unsqueeze(1))
        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        loss = self._commitment_cost * e_latent_loss
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, encodings


class VQVAE(nn.Module):
    def __init__(self, ch=16, emb=8, K=12):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, ch, 4, 2, 1), nn.ReLU(), nn.Conv2d(ch, emb, 3, 1, 1))
        self.vq = VectorQuantizerEMA(K, emb, 0.25, 0.99)
        self.dec = nn.Sequential(nn.Conv2d(emb, ch, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(ch, 1, 4, 2, 1))

    def forward(self, x):
        vq_loss, quantized, perplexity, _ = self.vq(self.enc(x))
        return vq_loss, self.dec(quantized), perplexity


def make_vqvae(dt):
    """the zalandoresearch / DeepMind-sonnet VQ-VAE notebook: the EMA codebook is reassigned as new
    nn.Parameters in every training forward (the optimizer keeps the initial ones)."""
    model = VQVAE().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=False)
    data_variance = 0.5
    train_res_recon_error, train_res_perplexity = [], []

    def step(data):
        model.train()
        opt.zero_grad()
        vq_loss, data_recon, perplexity = model(data)
        recon_error = F.mse_loss(data_recon, data) / data_variance
        loss = recon_error + vq_loss
        loss.backward()
        opt.step()
        train_res_recon_error.append(recon_error.item())
        train_res_perplexity.append(perplexity.item())
        return loss.detach(), data_recon.detach()
    return step, lambda: (_state(model), _opt_state(opt), list(train_res_recon_error), list(train_res_perplexity))


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head):
        super().__init__()
        self.n_head, self.d_model, self.d_head = n_head, d_model, d_head
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.scale = 1 / (d_head ** 0.5)

    def _rel_shift(self, x):
        zero_pad = torch.zeros((x.size(0), 1, *x.size()[2:]), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=1)
        x_padded = x_padded.view(x.size(1) + 1, x.size(0), *x.size()[2:])
        return x_padded[1:].view_as(x)

    def forward(self, w, r, r_w_bias, r_r_bias, attn_mask=None, mems=None):
        qlen, rlen, bsz = w.size(0), r.size(0), w.size(1)
        if mems is not None:
            cat = torch.cat([mems, w], 0)
            w_heads = self.qkv_net(cat)
            r_head_k = self.r_net(r)
            w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)
            w_head_q = w_head_q[-qlen:]
        else:
            w_heads = self.qkv_net(w)
            r_head_k = self.r_net(r)
            w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)
        klen = w_head_k.size(0)
        w_head_q = w_head_q.view(qlen, bsz, self.n_head, self.d_head)
        w_head_k = w_head_k.view(klen, bsz, self.n_head, self.d_head)
        w_head_v = w_head_v.view(klen, bsz, self.n_head, self.d_head)
        r_head_k = r_head_k.view(rlen, self.n_head, self.d_head)
        rw_head_q = w_head_q + r_w_bias
        AC = torch.einsum("ibnd,jbnd->ijbn", (rw_head_q, w_head_k))
        rr_head_q = w_head_q + r_r_bias
        BD = torch.einsum("ibnd,jnd->ijbn", (rr_head_q, r_head_k))
        BD = self._rel_shift(BD)
        attn_score = AC + BD
        attn_score.mul_(self.scale)
        if attn_mask is not None and attn_mask.any().item():
            attn_score = attn_score.float().masked_fill(attn_mask[:, :, None, None], -float("inf")).type_as(attn_score)
        attn_prob = F.softmax(attn_score, dim=1)
        attn_vec = torch.einsum("ijbn,jbnd->ibnd", (attn_prob, w_head_v))
        attn_vec = attn_vec.contiguous().view(attn_vec.size(0), attn_vec.size(1), self.n_head * self.d_head)
        return self.layer_norm(w + self.o_net(attn_vec))


class PositionalEmbedding(nn.Module):
    def __init__(self, demb):
        super().__init__()
        inv_freq = 1 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, pos_seq, bsz=None):
        sinusoid_inp = torch.ger(pos_seq, self.inv_freq)
        pos_emb = torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)
        return pos_emb[:, None, :].expand(-1, bsz, -1) if bsz is not None else pos_emb[:, None, :]


class MemTransformerLM(nn.Module):
    def __init__(self, n_token=30, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, mem_len=6):
        super().__init__()
        self.n_layer, self.mem_len, self.d_model = n_layer, mem_len, d_model
        self.word_emb = nn.Embedding(n_token, d_model)
        self.pos_emb = PositionalEmbedding(d_model)
        self.r_w_bias = nn.Parameter(torch.randn(n_head, d_head) * 0.02)
        self.r_r_bias = nn.Parameter(torch.randn(n_head, d_head) * 0.02)
        self.attn = nn.ModuleList(RelPartialLearnableMultiHeadAttn(n_head, d_model, d_head) for _ in range(n_layer))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Linear(d_inner, d_model))
                                for _ in range(n_layer))
        self.out = nn.Linear(d_model, n_token)

    def init_mems(self):
        if self.mem_len > 0:
            return [torch.empty(0, dtype=self.word_emb.weight.dtype) for _ in range(self.n_layer + 1)]
        return None

    def _update_mems(self, hids, mems, qlen, mlen):
        if mems is None:
            return None
        with torch.no_grad():
            new_mems = []
            end_idx = mlen + max(0, qlen)
            beg_idx = max(0, end_idx - self.mem_len)
            for i in range(len(hids)):
                cat = torch.cat([mems[i], hids[i]], dim=0)
                new_mems.append(cat[beg_idx:end_idx].detach())
        return new_mems

    def forward(self, data, target, *mems):
        if not mems:
            mems = self.init_mems()
        qlen, bsz = data.size()
        word_emb = self.word_emb(data)
        mlen = mems[0].size(0) if mems is not None else 0
        klen = mlen + qlen
        dec_attn_mask = torch.triu(word_emb.new_ones(qlen, klen), diagonal=1 + mlen).bool()[:, :, None]
        hids = []
        pos_seq = torch.arange(klen - 1, -1, -1.0, dtype=word_emb.dtype)
        pos_emb = self.pos_emb(pos_seq)
        core_out = word_emb
        hids.append(core_out)
        for i, (attn, ff) in enumerate(zip(self.attn, self.ff)):
            mems_i = None if mems is None else mems[i]
            core_out = attn(core_out, pos_emb, self.r_w_bias, self.r_r_bias, attn_mask=dec_attn_mask[..., 0],
                            mems=mems_i if mlen > 0 else None)
            core_out = core_out + ff(core_out)
            hids.append(core_out)
        new_mems = self._update_mems(hids, mems, qlen, mlen)
        loss = F.cross_entropy(self.out(core_out).view(-1, self.out.out_features), target.view(-1))
        return (loss,) if new_mems is None else [loss] + new_mems


def make_txl(dt):
    """Transformer-XL's training loop: segments of one stream, memories carried from call to call."""
    model = MemTransformerLM().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    st = {"mems": tuple(), "train_step": 0}

    def train(data, target):
        model.train()
        ret = model(data, target, *st["mems"])
        loss, st["mems"] = ret[0], ret[1:]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        model.zero_grad()
        st["train_step"] += 1
        return loss.item()
    return train, lambda: (_state(model), _opt_state(opt), list(st["mems"]), st["train_step"])


def txl_inputs(i, dt):
    q = [4, 4, 3, 4, 4][i]
    return torch.randint(0, 30, (q, 2)), torch.randint(0, 30, (q, 2))


# ------------------------------------------------------------------------------------------------ spiking, MDN, OT
class SurrGradSpike(torch.autograd.Function):
    """Zenke & Ganguli's SuperSpike surrogate: a step forward, a fast sigmoid's derivative backward."""
    scale = 10.0

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        out = torch.zeros_like(input)
        out[input > 0] = 1.0
        return out

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        return grad_input / (SurrGradSpike.scale * torch.abs(input) + 1.0) ** 2


spike_fn = SurrGradSpike.apply


def make_snn(dt):
    """the SpyTorch tutorial's two-layer recurrent-free LIF network, run over time steps in a Python loop,
    max-over-time readout, BPTT through the surrogate."""
    nb_inputs, nb_hidden, nb_outputs = 12, 24, 3
    tau_mem, tau_syn, time_step = 10e-3, 5e-3, 1e-3
    alpha, beta = float(math.exp(-time_step / tau_syn)), float(math.exp(-time_step / tau_mem))
    w1 = torch.empty((nb_inputs, nb_hidden), dtype=dt, requires_grad=True)
    torch.nn.init.normal_(w1, mean=0.0, std=7.0 * (1.0 - beta) / math.sqrt(nb_inputs))
    w2 = torch.empty((nb_hidden, nb_outputs), dtype=dt, requires_grad=True)
    torch.nn.init.normal_(w2, mean=0.0, std=7.0 * (1.0 - beta) / math.sqrt(nb_hidden))
    optimizer = torch.optim.Adam([w1, w2], lr=2e-3, betas=(0.9, 0.999))
    log_softmax_fn, loss_fn = nn.LogSoftmax(dim=1), nn.NLLLoss()

    def run_snn(inputs):
        batch_size, nb_steps = inputs.shape[0], inputs.shape[1]
        h1 = torch.einsum("abc,cd->abd", (inputs, w1))
        syn = torch.zeros((batch_size, nb_hidden), dtype=dt)
        mem = torch.zeros((batch_size, nb_hidden), dtype=dt)
        mem_rec, spk_rec = [], []
        for t in range(nb_steps):
            mthr = mem - 1.0
            out = spike_fn(mthr)
            rst = out.detach()
            new_syn = alpha * syn + h1[:, t]
            new_mem = (beta * mem + syn) * (1.0 - rst)
            mem_rec.append(mem)
            spk_rec.append(out)
            mem, syn = new_mem, new_syn
        mem_rec, spk_rec = torch.stack(mem_rec, dim=1), torch.stack(spk_rec, dim=1)
        h2 = torch.einsum("abc,cd->abd", (spk_rec, w2))
        flt = torch.zeros((batch_size, nb_outputs), dtype=dt)
        out = torch.zeros((batch_size, nb_outputs), dtype=dt)
        out_rec = [out]
        for t in range(nb_steps):
            new_flt = alpha * flt + h2[:, t]
            new_out = beta * out + flt
            flt, out = new_flt, new_out
            out_rec.append(out)
        return torch.stack(out_rec, dim=1), (mem_rec, spk_rec)

    def train_step(x, y):
        output, recs = run_snn(x)
        _, spks = recs
        m, _ = torch.max(output, 1)
        log_p_y = log_softmax_fn(m)
        reg_loss = 1e-5 * torch.sum(spks) + 1e-5 * torch.mean(torch.sum(torch.sum(spks, dim=0), dim=0) ** 2)
        loss_val = loss_fn(log_p_y, y) + reg_loss
        optimizer.zero_grad()
        loss_val.backward()
        optimizer.step()
        return loss_val.item(), spks.sum().item()
    return train_step, lambda: (w1.detach(), w2.detach(), w1.grad, w2.grad, _opt_state(optimizer))


def snn_inputs(i, dt):
    return (torch.rand(4, 10 + 2 * (i % 2), 12) < 0.3).to(dt), torch.randint(0, 3, (4,))


class MDN(nn.Module):
    def __init__(self, dim_in=3, dim_out=2, n_components=4, hidden=32):
        super().__init__()
        self.n_components, self.dim_out = n_components, dim_out
        self.base = nn.Sequential(nn.Linear(dim_in, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU())
        self.pi = nn.Linear(hidden, n_components)
        self.normal = nn.Linear(hidden, 2 * n_components * dim_out)

    def forward(self, x, eps=1e-6):
        h = self.base(x)
        log_pi = torch.log_softmax(self.pi(h), dim=-1)
        params = self.normal(h)
        mu = params[..., :self.dim_out * self.n_components]
        sd = params[..., self.dim_out * self.n_components:]
        sd = torch.exp(sd + eps)
        mu = mu.reshape(-1, self.n_components, self.dim_out)
        sd = sd.reshape(-1, self.n_components, self.dim_out)
        return log_pi, mu, sd

    def loss(self, x, y):
        log_pi, mu, sd = self.forward(x)
        z_score = (y.unsqueeze(1) - mu) / sd
        normal_loglik = -0.5 * torch.einsum("bij,bij->bi", z_score, z_score) - torch.sum(torch.log(sd), dim=-1) \
            - 0.5 * self.dim_out * math.log(2 * math.pi)
        loglik = torch.logsumexp(log_pi + normal_loglik, dim=-1)
        return -loglik

    def sample(self, x):
        log_pi, mu, sd = self.forward(x)
        cum_pi = torch.cumsum(torch.exp(log_pi), dim=-1)
        rvs = torch.rand(len(x), 1, dtype=x.dtype)
        rand_pi = torch.searchsorted(cum_pi, rvs).clamp(max=self.n_components - 1)
        rand_normal = torch.randn_like(mu) * sd + mu
        return torch.take_along_dim(rand_normal, indices=rand_pi.unsqueeze(-1), dim=1).squeeze(dim=1)


def make_mdn(dt):
    model = MDN().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)

    def step(x, y):
        opt.zero_grad()
        loss = model.loss(x, y).mean()
        loss.backward()
        opt.step()
        with torch.no_grad():
            samples = model.sample(x)
            comp = torch.multinomial(torch.softmax(model.pi(model.base(x)), -1), 3, replacement=True)
        return loss.item(), samples, comp
    return step, lambda: (_state(model), _opt_state(opt))


def mdn_inputs(i, dt):
    x = torch.randn(16 + 4 * i, 3, dtype=dt)
    return x, torch.stack([torch.sin(x[:, 0] * 2), x[:, 1] * x[:, 2]], -1) + 0.05 * torch.randn(16 + 4 * i, 2, dtype=dt)


def sinkhorn_log(a, b, C, reg, numItermax=200, stopThr=1e-6, verbose=False, log=False):
    """POT's ot.bregman.sinkhorn_log, on torch tensors."""
    dim_a, dim_b = C.shape
    Mr = -C / reg
    u = torch.zeros(dim_a, dtype=C.dtype)
    v = torch.zeros(dim_b, dtype=C.dtype)
    loga, logb = torch.log(a), torch.log(b)

    def get_logT(u, v):
        return Mr + u[:, None] + v[None, :]

    err = 1
    for ii in range(numItermax):
        v = logb - torch.logsumexp(Mr + u[:, None], 0)
        u = loga - torch.logsumexp(Mr + v[None, :], 1)
        if ii % 10 == 0:
            G = torch.exp(get_logT(u, v))
            err = torch.norm(torch.sum(G, 0) - b)
            if err < stopThr:
                break
    return torch.exp(get_logT(u, v)), ii


def make_sinkhorn(dt):
    """entropic OT between two point clouds (POT's log-domain Sinkhorn), its cost and barycentric map."""
    def ot(xs, xt, reg):
        a = torch.full((xs.shape[0],), 1.0 / xs.shape[0], dtype=xs.dtype)
        b = torch.full((xt.shape[0],), 1.0 / xt.shape[0], dtype=xs.dtype)
        M = torch.cdist(xs, xt) ** 2
        M = M / M.max()
        G, n_iter = sinkhorn_log(a, b, M, reg)
        mapped = (G / G.sum(1, keepdim=True)) @ xt
        return (G * M).sum(), mapped, n_iter
    return ot, lambda: None


def sinkhorn_inputs(i, dt):
    return torch.randn(10 + i, 2, dtype=dt), torch.randn(8 + 2 * i, 2, dtype=dt) + 1.0, [0.05, 0.1, 0.5, 0.02][i]


# ------------------------------------------------------------------------------------------------ sets, sequences
class MAB(nn.Module):
    def __init__(self, dim_Q, dim_K, dim_V, num_heads, ln=False):
        super().__init__()
        self.dim_V, self.num_heads = dim_V, num_heads
        self.fc_q, self.fc_k, self.fc_v = nn.Linear(dim_Q, dim_V), nn.Linear(dim_K, dim_V), nn.Linear(dim_K, dim_V)
        if ln:
            self.ln0, self.ln1 = nn.LayerNorm(dim_V), nn.LayerNorm(dim_V)
        self.fc_o = nn.Linear(dim_V, dim_V)

    def forward(self, Q, K, mask=None):
        Q = self.fc_q(Q)
        K, V = self.fc_k(K), self.fc_v(K)
        dim_split = self.dim_V // self.num_heads
        Q_ = torch.cat(Q.split(dim_split, 2), 0)
        K_ = torch.cat(K.split(dim_split, 2), 0)
        V_ = torch.cat(V.split(dim_split, 2), 0)
        logits = Q_.bmm(K_.transpose(1, 2)) / math.sqrt(self.dim_V)
        if mask is not None:
            logits = logits.masked_fill(~mask.repeat(self.num_heads, 1).unsqueeze(1), float("-inf"))
        A = torch.softmax(logits, 2)
        O = torch.cat((Q_ + A.bmm(V_)).split(Q.size(0), 0), 2)  # noqa: E741
        O = O if getattr(self, "ln0", None) is None else self.ln0(O)  # noqa: E741
        O = O + F.relu(self.fc_o(O))  # noqa: E741
        O = O if getattr(self, "ln1", None) is None else self.ln1(O)  # noqa: E741
        return O


class ISAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, num_inds, ln=False):
        super().__init__()
        self.I = nn.Parameter(torch.Tensor(1, num_inds, dim_out))
        nn.init.xavier_uniform_(self.I)
        self.mab0 = MAB(dim_out, dim_in, dim_out, num_heads, ln=ln)
        self.mab1 = MAB(dim_in, dim_out, dim_out, num_heads, ln=ln)

    def forward(self, X, mask=None):
        H = self.mab0(self.I.repeat(X.size(0), 1, 1), X, mask)
        return self.mab1(X, H)


class PMA(nn.Module):
    def __init__(self, dim, num_heads, num_seeds, ln=False):
        super().__init__()
        self.S = nn.Parameter(torch.Tensor(1, num_seeds, dim))
        nn.init.xavier_uniform_(self.S)
        self.mab = MAB(dim, dim, dim, num_heads, ln=ln)

    def forward(self, X, mask=None):
        return self.mab(self.S.repeat(X.size(0), 1, 1), X, mask)


class SetTransformer(nn.Module):
    def __init__(self, dim_input=2, num_outputs=1, dim_output=3, num_inds=4, dim_hidden=16, num_heads=2, ln=True):
        super().__init__()
        self.enc = nn.ModuleList([ISAB(dim_input, dim_hidden, num_heads, num_inds, ln=ln),
                                  ISAB(dim_hidden, dim_hidden, num_heads, num_inds, ln=ln)])
        self.pma = PMA(dim_hidden, num_heads, num_outputs, ln=ln)
        self.dec = nn.Linear(dim_hidden, dim_output)

    def forward(self, X, lengths):
        mask = torch.arange(X.shape[1])[None, :] < lengths[:, None]
        for layer in self.enc:
            X = layer(X, mask)
        return self.dec(self.pma(X, mask)).squeeze(1)


def make_set_transformer(dt):
    model = SetTransformer().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(X, lengths, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(X, lengths), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def set_inputs(i, dt):
    n = 7 + 2 * (i % 2)
    return torch.randn(4, n, 2, dtype=dt), torch.randint(1, n + 1, (4,)), torch.randint(0, 3, (4,))


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.2):
        super().__init__()
        self.padding = padding
        self.conv1 = parametrizations.weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size, stride=stride,
                                                            dilation=dilation))
        self.conv2 = parametrizations.weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size, stride=stride,
                                                            dilation=dilation))
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None

    def forward(self, x):
        out = self.dropout1(F.relu(self.conv1(F.pad(x, (self.padding, 0)))))
        out = self.dropout2(F.relu(self.conv2(F.pad(out, (self.padding, 0)))))
        res = x if self.downsample is None else self.downsample(x)
        return F.relu(out + res)


class TCN(nn.Module):
    def __init__(self, input_size=3, output_size=4, num_channels=(8, 8, 16), kernel_size=3, dropout=0.1):
        super().__init__()
        layers = []
        for i in range(len(num_channels)):
            dilation_size = 2 ** i
            in_channels = input_size if i == 0 else num_channels[i - 1]
            layers += [TemporalBlock(in_channels, num_channels[i], kernel_size, stride=1, dilation=dilation_size,
                                     padding=(kernel_size - 1) * dilation_size, dropout=dropout)]
        self.network = nn.Sequential(*layers)
        self.linear = nn.Linear(num_channels[-1], output_size)

    def forward(self, inputs):
        y1 = self.network(inputs)
        return F.log_softmax(self.linear(y1[:, :, -1]), dim=1)


def make_tcn(dt):
    model = TCN().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    clip = 0.5

    def train(x, y):
        model.train()
        optimizer.zero_grad()
        output = model(x)
        loss = F.nll_loss(output, y)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        pred = output.data.max(1, keepdim=True)[1]
        correct = pred.eq(y.data.view_as(pred)).cpu().sum()
        return loss.item(), correct
    return train, lambda: (_state(model), _opt_state(optimizer))


def tcn_inputs(i, dt):
    return torch.randn(4, 3, 20 + 4 * (i % 2), dtype=dt), torch.randint(0, 4, (4,))


# ------------------------------------------------------------------------------------------------ distillation, SSL
def make_kd(dt):
    teacher = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(16, 5)).to(dt).eval()
    student = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(8, 5)).to(dt)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    T, soft_target_loss_weight, ce_loss_weight = 2.0, 0.25, 0.75
    ce_loss = nn.CrossEntropyLoss()
    running = {"loss": 0.0}

    def train_knowledge_distillation(inputs, labels):
        student.train()
        optimizer.zero_grad()
        with torch.no_grad():
            teacher_logits = teacher(inputs)
        student_logits = student(inputs)
        soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
        soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
        soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T ** 2)
        kl = F.kl_div(soft_prob, soft_targets, reduction="batchmean") * T * T
        label_loss = ce_loss(student_logits, labels)
        loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
        loss.backward()
        optimizer.step()
        running["loss"] += loss.item()
        return loss.detach(), kl.detach()
    return train_knowledge_distillation, lambda: (_state(student), _state(teacher), _opt_state(optimizer),
                                                  dict(running))


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def _augment(x):
    """a noise / scale / drop augmentation drawn from the global RNG (two views per call)."""
    scale = torch.empty(x.shape[0], 1, dtype=x.dtype).uniform_(0.8, 1.2)
    keep = (torch.rand_like(x) > 0.1).to(x.dtype)
    return (x * scale + 0.1 * torch.randn_like(x)) * keep


def make_barlow(dt):
    backbone = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16)).to(dt)
    projector = nn.Sequential(nn.Linear(16, 24, bias=False), nn.BatchNorm1d(24), nn.ReLU(True),
                              nn.Linear(24, 24, bias=False)).to(dt)
    bn = nn.BatchNorm1d(24, affine=False).to(dt)
    params = [*backbone.parameters(), *projector.parameters()]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1.5e-6)
    lambd = 0.0051

    def step(x):
        y1, y2 = _augment(x), _augment(x)
        z1, z2 = projector(backbone(y1)), projector(backbone(y2))
        c = bn(z1).T @ bn(z2)
        c.div_(x.shape[0])
        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        off_diag = off_diagonal(c).pow_(2).sum()
        loss = on_diag + lambd * off_diag
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), on_diag.detach()
    return step, lambda: (_state(backbone), _state(projector), dict(bn.state_dict()), _opt_state(opt))


def make_vicreg(dt):
    backbone = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16)).to(dt)
    projector = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(True), nn.Linear(32, 32)).to(dt)
    opt = torch.optim.AdamW([*backbone.parameters(), *projector.parameters()], lr=1e-3)
    sim_coeff, std_coeff, cov_coeff = 25.0, 25.0, 1.0

    def step(x):
        x1, y1 = _augment(x), _augment(x)
        x, y = projector(backbone(x1)), projector(backbone(y1))
        repr_loss = F.mse_loss(x, y)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)
        std_x = torch.sqrt(x.var(dim=0) + 0.0001)
        std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2
        batch_size, num_features = x.shape
        cov_x = (x.T @ x) / (batch_size - 1)
        cov_y = (y.T @ y) / (batch_size - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(num_features) + off_diagonal(cov_y).pow_(2).sum().div(
            num_features)
        loss = sim_coeff * repr_loss + std_coeff * std_loss + cov_coeff * cov_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), (repr_loss.item(), std_loss.item(), cov_loss.item())
    return step, lambda: (_state(backbone), _state(projector), _opt_state(opt))


def ssl_inputs(i, dt):
    return (torch.randn(8 + 4 * (i % 2), 12, dtype=dt),)


# ------------------------------------------------------------------------------------------------ Perceiver, meta-learning, EKF
class PreNorm(nn.Module):
    def __init__(self, dim, fn, context_dim=None):
        super().__init__()
        self.fn, self.norm = fn, nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if context_dim is not None else None

    def forward(self, x, **kwargs):
        x = self.norm(x)
        if self.norm_context is not None:
            kwargs.update(context=self.norm_context(kwargs["context"]))
        return self.fn(x, **kwargs)


class Attention(nn.Module):
    def __init__(self, query_dim, context_dim=None, heads=2, dim_head=8):
        super().__init__()
        inner_dim = dim_head * heads
        context_dim = query_dim if context_dim is None else context_dim
        self.scale, self.heads = dim_head ** -0.5, heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(context_dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, query_dim)

    def forward(self, x, context=None, mask=None):
        h = self.heads
        q = self.to_q(x)
        context = x if context is None else context
        k, v = self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3).reshape(t.shape[0] * h, t.shape[1], -1)
                   for t in (q, k, v))
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * self.scale
        if mask is not None:
            mask = mask.reshape(mask.shape[0], -1)
            max_neg_value = -torch.finfo(sim.dtype).max
            mask = mask[:, None, :].repeat_interleave(h, dim=0)
            sim.masked_fill_(~mask, max_neg_value)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b i j, b j d -> b i d", attn, v)
        out = out.reshape(-1, h, out.shape[1], out.shape[2]).permute(0, 2, 1, 3).reshape(-1, out.shape[1], h * out.shape[2])
        return self.to_out(out)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class Perceiver(nn.Module):
    """perceiver-pytorch's PerceiverIO encoder: latents cross-attend to masked inputs, weight-tied self-attention."""
    def __init__(self, input_dim=6, num_latents=8, latent_dim=16, depth=2, num_classes=4):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, latent_dim))
        self.cross_attn = PreNorm(latent_dim, Attention(latent_dim, input_dim, heads=1, dim_head=16), context_dim=input_dim)
        self.cross_ff = PreNorm(latent_dim, nn.Sequential(nn.Linear(latent_dim, latent_dim * 4), GEGLU(),
                                                          nn.Linear(latent_dim * 2, latent_dim)))
        self.self_attn = PreNorm(latent_dim, Attention(latent_dim))
        self.self_ff = PreNorm(latent_dim, nn.Sequential(nn.Linear(latent_dim, latent_dim * 4), GEGLU(),
                                                         nn.Linear(latent_dim * 2, latent_dim)))
        self.depth = depth
        self.to_logits = nn.Sequential(nn.LayerNorm(latent_dim), nn.Linear(latent_dim, num_classes))

    def forward(self, data, mask=None):
        b = data.shape[0]
        x = self.latents.unsqueeze(0).expand(b, -1, -1)
        x = self.cross_attn(x, context=data, mask=mask) + x
        x = self.cross_ff(x) + x
        for _ in range(self.depth):
            x = self.self_attn(x) + x
            x = self.self_ff(x) + x
        return self.to_logits(x.mean(dim=-2))


def make_perceiver(dt):
    model = Perceiver().to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(data, mask, y):
        logits = model(data, mask=mask)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach(), logits.argmax(-1)
    return step, lambda: (_state(model), _opt_state(opt))


def perceiver_inputs(i, dt):
    n = 12 + 3 * (i % 2)
    lengths = torch.randint(3, n + 1, (3,))
    return torch.randn(3, n, 6, dtype=dt), torch.arange(n)[None] < lengths[:, None], torch.randint(0, 4, (3,))


def make_meta_sgd(dt):
    """Meta-SGD (Li et al.): per-parameter learned inner learning rates, the inner step through
    torch.func.functional_call with create_graph gradients, a meta-batch of sine-regression tasks."""
    from torch.func import functional_call
    net = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).to(dt)
    task_lr = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(torch.full_like(v, 0.01))
                                for k, v in net.named_parameters()})
    meta_opt = torch.optim.Adam([*net.parameters(), *task_lr.parameters()], lr=1e-3)

    def inner_adapt(x_s, y_s, steps):
        params = dict(net.named_parameters())
        for _ in range(steps):
            loss = F.mse_loss(functional_call(net, params, (x_s,)), y_s)
            grads = torch.autograd.grad(loss, params.values(), create_graph=True)
            params = {k: p - task_lr[k.replace(".", "_")] * g for (k, p), g in zip(params.items(), grads)}
        return params

    def meta_step(tasks, steps):
        meta_opt.zero_grad()
        meta_loss = 0.0
        for x_s, y_s, x_q, y_q in tasks:
            fast = inner_adapt(x_s, y_s, steps)
            meta_loss = meta_loss + F.mse_loss(functional_call(net, fast, (x_q,)), y_q)
        meta_loss = meta_loss / len(tasks)
        meta_loss.backward()
        meta_opt.step()
        return meta_loss.item()
    return meta_step, lambda: (_state(net), [p.detach() for p in task_lr.values()], _opt_state(meta_opt))


def meta_inputs(i, dt):
    tasks = []
    for _ in range(2 + i % 2):
        amp, phase = torch.rand(()) * 4 + 0.1, torch.rand(()) * math.pi
        xs, xq = torch.rand(5, 1, dtype=dt) * 10 - 5, torch.rand(5, 1, dtype=dt) * 10 - 5
        tasks.append((xs, amp * torch.sin(xs - phase), xq, amp * torch.sin(xq - phase)))
    return tasks, 1 + i % 2


def make_ekf(dt):
    """an extended Kalman filter for a pendulum: Jacobians by torch.func.jacrev, the gain by linalg.solve,
    Joseph-form covariance update, the state estimate and covariance carried between calls."""
    from torch.func import jacrev
    g, L, h = 9.81, 1.0, 0.05
    Q = torch.diag(torch.tensor([1e-4, 1e-3], dtype=dt))
    R = torch.tensor([[0.05]], dtype=dt)
    st = {"x": torch.tensor([0.3, 0.0], dtype=dt), "P": torch.eye(2, dtype=dt) * 0.1, "k": 0}

    def f(x):
        return torch.stack([x[0] + h * x[1], x[1] - h * g / L * torch.sin(x[0])])

    def hfun(x):
        return torch.sin(x[:1]) * L

    def filter_seq(zs):
        x, P = st["x"], st["P"]
        I = torch.eye(2, dtype=x.dtype)  # noqa: E741
        nis = []
        for z in zs:
            F_ = jacrev(f)(x)
            x = f(x)
            P = F_ @ P @ F_.T + Q
            H = jacrev(hfun)(x)
            y = z - hfun(x)
            S = H @ P @ H.T + R
            K = torch.linalg.solve(S, H @ P).T
            x = x + K @ y
            P = (I - K @ H) @ P @ (I - K @ H).T + K @ R @ K.T
            nis.append((y @ torch.linalg.inv(S) @ y).item())
            st["k"] += 1
        st["x"], st["P"] = x, P
        return x, P, nis
    return filter_seq, lambda: (st["x"], st["P"], st["k"])


def ekf_inputs(i, dt):
    return (torch.sin(torch.linspace(0.3, 0.1, 6 + i, dtype=dt))[:, None] + 0.05 * torch.randn(6 + i, 1, dtype=dt),)


# ------------------------------------------------------------------------------------------------ position schemes
def get_slopes(n):
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])


class AlibiLM(nn.Module):
    """a decoder with ALiBi (Press et al.): the bias built in each forward from the sequence length."""
    def __init__(self, vocab=40, d=24, n_head=3, n_layer=2):
        super().__init__()
        self.n_head = n_head
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(n_layer))
        self.proj = nn.ModuleList(nn.Linear(d, d) for _ in range(n_layer))
        self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(n_layer))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        B, T = idx.shape
        slopes = torch.tensor(get_slopes(self.n_head), dtype=self.emb.weight.dtype)
        context_position = torch.arange(T)[:, None]
        memory_position = torch.arange(T)[None, :]
        relative_position = (memory_position - context_position).abs()
        alibi = -slopes[:, None, None] * relative_position[None].to(slopes.dtype)
        causal = torch.triu(torch.full((T, T), float("-inf"), dtype=alibi.dtype), diagonal=1)
        x = self.emb(idx)
        for qkv, proj, ln in zip(self.qkv, self.proj, self.ln):
            q, k, v = qkv(ln(x)).split(x.shape[-1], dim=2)
            q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1))) + alibi + causal
            att = F.softmax(att, dim=-1)
            x = x + proj((att @ v).transpose(1, 2).contiguous().view(B, T, -1))
        return self.head(x)


def make_alibi(dt):
    model = AlibiLM().to(dt)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step(idx):
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def alibi_inputs(i, dt):
    return (torch.randint(0, 40, (2, [9, 13, 9, 17][i])),)


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


class LlamaBlock(nn.Module):
    def __init__(self, dim=32, n_heads=4):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq, self.wk = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.wv, self.wo = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.w1, self.w2, self.w3 = nn.Linear(dim, 64, bias=False), nn.Linear(64, dim, bias=False), nn.Linear(dim, 64, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, start_pos, freqs_cis, mask, cache):
        bsz, seqlen, _ = x.shape
        h = self.attention_norm(x)
        xq, xk, xv = self.wq(h), self.wk(h), self.wv(h)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        cache_k, cache_v = cache
        cache_k[:bsz, start_pos: start_pos + seqlen] = xk
        cache_v[:bsz, start_pos: start_pos + seqlen] = xv
        keys = cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        xq = xq.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        h = x + self.wo(output)
        ff = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(ff)) * self.w3(ff))


def make_llama_rope(dt):
    """llama's reference generate: complex rotary frequencies (torch.polar), a KV cache written in place,
    prefill with a causal mask then one token at a time, argmax decoding."""
    vocab, dim, max_seq = 50, 32, 24
    emb = nn.Embedding(vocab, dim).to(dt)
    layers = nn.ModuleList(LlamaBlock(dim) for _ in range(2)).to(dt)
    norm, output = RMSNorm(dim).to(dt), nn.Linear(dim, vocab, bias=False).to(dt)
    freqs_cis_all = precompute_freqs_cis(dim // 4, max_seq * 2)

    @torch.inference_mode()
    def forward(tokens, start_pos, caches):
        _bsz, seqlen = tokens.shape
        h = emb(tokens)
        freqs_cis = freqs_cis_all[start_pos: start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"))
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask]).type_as(h)
        for layer, cache in zip(layers, caches):
            h = layer(h, start_pos, freqs_cis, mask, cache)
        return output(norm(h)).float()

    def generate(prompt_tokens, max_gen_len):
        bsz, plen = prompt_tokens.shape
        caches = [(torch.zeros(bsz, max_seq, 4, dim // 4, dtype=dt), torch.zeros(bsz, max_seq, 4, dim // 4, dtype=dt))
                  for _ in range(2)]
        tokens = torch.full((bsz, plen + max_gen_len), 0, dtype=torch.long)
        tokens[:, :plen] = prompt_tokens
        prev_pos = 0
        for cur_pos in range(plen, plen + max_gen_len):
            logits = forward(tokens[:, prev_pos:cur_pos], prev_pos, caches)
            next_token = torch.argmax(logits[:, -1], dim=-1)
            tokens[:, cur_pos] = next_token
            prev_pos = cur_pos
        return tokens
    return generate, lambda: None


def llama_inputs(i, dt):
    return torch.randint(0, 50, (2, 4 + i)), 4


# ------------------------------------------------------------------------------------------------ CRF, few-shot, semi-supervised
START_TAG, STOP_TAG = "<START>", "<STOP>"


def argmax(vec):
    _, idx = torch.max(vec, 1)
    return idx.item()


def log_sum_exp(vec):
    max_score = vec[0, argmax(vec)]
    max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
    return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))


class BiLSTM_CRF(nn.Module):
    """the PyTorch tutorial's "Advanced: Making Dynamic Decisions and the Bi-LSTM CRF", as written there."""
    def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
        super().__init__()
        self.embedding_dim, self.hidden_dim = embedding_dim, hidden_dim
        self.vocab_size, self.tag_to_ix = vocab_size, tag_to_ix
        self.tagset_size = len(tag_to_ix)
        self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
        self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
        self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
        self.transitions.data[tag_to_ix[START_TAG], :] = -10000
        self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
        self.hidden = self.init_hidden()

    def init_hidden(self):
        return (torch.randn(2, 1, self.hidden_dim // 2), torch.randn(2, 1, self.hidden_dim // 2))

    def _forward_alg(self, feats):
        init_alphas = torch.full((1, self.tagset_size), -10000.)
        init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
        forward_var = init_alphas
        for feat in feats:
            alphas_t = []
            for next_tag in range(self.tagset_size):
                emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                trans_score = self.transitions[next_tag].view(1, -1)
                next_tag_var = forward_var + trans_score + emit_score
                alphas_t.append(log_sum_exp(next_tag_var).view(1))
            forward_var = torch.cat(alphas_t).view(1, -1)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        return log_sum_exp(terminal_var)

    def _get_lstm_features(self, sentence):
        self.hidden = self.init_hidden()
        embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
        lstm_out, self.hidden = self.lstm(embeds, self.hidden)
        lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
        return self.hidden2tag(lstm_out)

    def _score_sentence(self, feats, tags):
        score = torch.zeros(1)
        tags = torch.cat([torch.tensor([self.tag_to_ix[START_TAG]], dtype=torch.long), tags])
        for i, feat in enumerate(feats):
            score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
        score = score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]
        return score

    def _viterbi_decode(self, feats):
        backpointers = []
        init_vvars = torch.full((1, self.tagset_size), -10000.)
        init_vvars[0][self.tag_to_ix[START_TAG]] = 0
        forward_var = init_vvars
        for feat in feats:
            bptrs_t, viterbivars_t = [], []
            for next_tag in range(self.tagset_size):
                next_tag_var = forward_var + self.transitions[next_tag]
                best_tag_id = argmax(next_tag_var)
                bptrs_t.append(best_tag_id)
                viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
            forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
            backpointers.append(bptrs_t)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        best_tag_id = argmax(terminal_var)
        path_score = terminal_var[0][best_tag_id]
        best_path = [best_tag_id]
        for bptrs_t in reversed(backpointers):
            best_tag_id = bptrs_t[best_tag_id]
            best_path.append(best_tag_id)
        start = best_path.pop()
        assert start == self.tag_to_ix[START_TAG]
        best_path.reverse()
        return path_score, best_path

    def neg_log_likelihood(self, sentence, tags):
        feats = self._get_lstm_features(sentence)
        return self._forward_alg(feats) - self._score_sentence(feats, tags)

    def forward(self, sentence):
        lstm_feats = self._get_lstm_features(sentence)
        return self._viterbi_decode(lstm_feats)


def make_bilstm_crf(dt):
    tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}
    model = BiLSTM_CRF(20, tag_to_ix, 5, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)

    def step(sentence, tags):
        model.zero_grad()
        loss = model.neg_log_likelihood(sentence, tags)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            score, path = model(sentence)
        return loss.detach(), score, path
    return step, lambda: (_state(model), _opt_state(optimizer))


def crf_inputs(i, dt):
    n = [5, 6, 5, 7][i]
    return torch.randint(0, 20, (n,)), torch.randint(0, 3, (n,))


def euclidean_dist(x, y):
    n, m, d = x.size(0), y.size(0), x.size(1)
    assert d == y.size(1)
    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)
    return torch.pow(x - y, 2).sum(2)


def make_protonet(dt):
    """prototypical networks' episode loss (jakesnell/prototypical-networks): classes found with unique, the
    support / query split per class by nonzero, prototypes by mean."""
    encoder = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16)).to(dt)
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)

    def loss_fn(x, target, n_support):
        classes = torch.unique(target)
        n_classes = len(classes)
        n_query = target.eq(classes[0].item()).sum().item() - n_support
        support_idxs = list(map(lambda c: target.eq(c).nonzero()[:n_support].squeeze(1), classes))
        prototypes = torch.stack([x[idx_list].mean(0) for idx_list in support_idxs])
        query_idxs = torch.stack(list(map(lambda c: target.eq(c).nonzero()[n_support:], classes))).view(-1)
        query_samples = x[query_idxs]
        dists = euclidean_dist(query_samples, prototypes)
        log_p_y = F.log_softmax(-dists, dim=1).view(n_classes, n_query, -1)
        target_inds = torch.arange(0, n_classes).view(n_classes, 1, 1).expand(n_classes, n_query, 1).long()
        loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()
        _, y_hat = log_p_y.max(2)
        acc_val = y_hat.eq(target_inds.squeeze(2)).float().mean()
        return loss_val, acc_val

    def step(x, y, n_support):
        encoder.train()
        opt.zero_grad()
        loss, acc = loss_fn(encoder(x), y, n_support)
        loss.backward()
        opt.step()
        return loss.item(), acc.item()
    return step, lambda: (_state(encoder), _opt_state(opt))


def protonet_inputs(i, dt):
    n_way, per = [3, 4, 3, 3][i], 5
    y = torch.arange(n_way).repeat_interleave(per)[torch.randperm(n_way * per)]
    return torch.randn(n_way * per, 10, dtype=dt) + y[:, None].to(dt), y, 2


def make_fixmatch(dt):
    """FixMatch's loss: supervised CE, pseudo-labels from the weak view kept above a confidence threshold,
    CE of the strong view on them; interleaved batch through one model call."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                          nn.Flatten(), nn.Linear(32, 4)).to(dt)
    opt = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9, nesterov=True)
    threshold, T, lambda_u = 0.3, 1.0, 1.0
    log = {"mask": []}

    def interleave(x, size):
        s = list(x.shape)
        return x.reshape([-1, size] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])

    def de_interleave(x, size):
        s = list(x.shape)
        return x.reshape([size, -1] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])

    def step(inputs_x, targets_x, inputs_u_w, inputs_u_s, mu):
        batch_size = inputs_x.shape[0]
        inputs = interleave(torch.cat((inputs_x, inputs_u_w, inputs_u_s)), 2 * mu + 1)
        logits = de_interleave(model(inputs), 2 * mu + 1)
        logits_x = logits[:batch_size]
        logits_u_w, logits_u_s = logits[batch_size:].chunk(2)
        del logits
        Lx = F.cross_entropy(logits_x, targets_x, reduction="mean")
        pseudo_label = torch.softmax(logits_u_w.detach() / T, dim=-1)
        max_probs, targets_u = torch.max(pseudo_label, dim=-1)
        mask = max_probs.ge(threshold).float()
        Lu = (F.cross_entropy(logits_u_s, targets_u, reduction="none") * mask).mean()
        loss = Lx + lambda_u * Lu
        opt.zero_grad()
        loss.backward()
        opt.step()
        log["mask"].append(mask.mean().item())
        return loss.detach(), Lx.detach(), Lu.detach()
    return step, lambda: (_state(model), _opt_state(opt), list(log["mask"]))


def fixmatch_inputs(i, dt):
    b, mu = 2, 2
    u = torch.randn(b * mu, 3, 6, 6, dtype=dt)
    return (torch.randn(b, 3, 6, 6, dtype=dt), torch.randint(0, 4, (b,)), u,
            u + 0.3 * torch.randn_like(u), mu)


# ------------------------------------------------------------------------------------------------ PixelCNN, linear attention, GAT, sampling
class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, *args, **kwargs):
        super().__init__(*args, **kwargs)
        assert mask_type in {"A", "B"}
        self.register_buffer("mask", self.weight.data.clone())
        _, _, kH, kW = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, kH // 2, kW // 2 + (mask_type == "B"):] = 0
        self.mask[:, :, kH // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


def make_pixelcnn(dt):
    """jzbontar/pixelcnn-pytorch: masked convolutions that re-mask their weight's data every forward, a
    4-level cross entropy, then one pixel sampled in raster order."""
    fm = 8
    net = nn.Sequential(
        MaskedConv2d("A", 1, fm, 5, 1, 2, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d("B", fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d("B", fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        nn.Conv2d(fm, 4, 1)).to(dt)
    optimizer = torch.optim.Adam(net.parameters())

    def step(inp, rows):
        net.train()
        target = (inp[:, 0] * 3).long()
        loss = F.cross_entropy(net(inp), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        sample = torch.zeros(2, 1, inp.shape[2], inp.shape[3], dtype=inp.dtype)
        net.eval()
        with torch.no_grad():
            for i in range(rows):
                for j in range(inp.shape[3]):
                    out = net(sample)
                    probs = F.softmax(out[:, :, i, j], dim=-1)
                    sample[:, :, i, j] = torch.multinomial(probs, 1).to(inp.dtype) / 3.0
        return loss.item(), sample
    return step, lambda: (_state(net), _opt_state(optimizer))


def pixelcnn_inputs(i, dt):
    return (torch.randint(0, 4, (4, 1, 6, 6)).to(dt) / 3.0, 1 + i % 2)


def elu_feature_map(x):
    return F.elu(x) + 1


class CausalLinearAttention(nn.Module):
    """Katharopoulos et al.'s causal linear attention, written with cumsum of the outer products."""
    def __init__(self, d=16, heads=2, eps=1e-6):
        super().__init__()
        self.heads, self.eps = heads, eps
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, D // self.heads).unbind(2)
        Q, K = elu_feature_map(q), elu_feature_map(k)
        KV = torch.einsum("nshd,nshm->nshmd", K, v).cumsum(1)
        Z = 1 / (torch.einsum("nlhd,nlhd->nlh", Q, K.cumsum(1)) + self.eps)
        V = torch.einsum("nlhd,nlhmd,nlh->nlhm", Q, KV, Z)
        return self.out(V.reshape(B, N, D))


def make_linear_attention(dt):
    model = nn.Sequential(nn.Linear(4, 16), CausalLinearAttention(), nn.LayerNorm(16), CausalLinearAttention(),
                          nn.Linear(16, 4)).to(dt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x):
        pred = model(x[:, :-1])
        loss = F.smooth_l1_loss(pred, x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (_state(model), _opt_state(opt))


def linatt_inputs(i, dt):
    return (torch.cumsum(torch.randn(2, 12 + 4 * (i % 2), 4, dtype=dt) * 0.3, 1),)


class GraphAttentionLayer(nn.Module):
    """pyGAT (Diego999/pyGAT): dense adjacency, -9e15 for non-edges, dropout on the attention."""
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super().__init__()
        self.dropout, self.in_features, self.out_features = dropout, in_features, out_features
        self.alpha, self.concat = alpha, concat
        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2 * out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)
        self.leakyrelu = nn.LeakyReLU(self.alpha)

    def forward(self, h, adj):
        Wh = torch.mm(h, self.W)
        e = self._prepare_attentional_mechanism_input(Wh)
        zero_vec = -9e15 * torch.ones_like(e)
        attention = torch.where(adj > 0, e, zero_vec)
        attention = F.softmax(attention, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)
        return F.elu(h_prime) if self.concat else h_prime

    def _prepare_attentional_mechanism_input(self, Wh):
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        return self.leakyrelu(Wh1 + Wh2.T)


class GAT(nn.Module):
    def __init__(self, nfeat=8, nhid=8, nclass=3, dropout=0.5, alpha=0.2, nheads=2):
        super().__init__()
        self.dropout = dropout
        self.attentions = [GraphAttentionLayer(nfeat, nhid, dropout=dropout, alpha=alpha, concat=True)
                           for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module("attention_{}".format(i), attention)
        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout=dropout, alpha=alpha, concat=False)

    def forward(self, x, adj):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        return F.log_softmax(x, dim=1)


def make_gat(dt):
    model = GAT().to(dt)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    best = {"loss": float("inf"), "bad": 0}

    def train(features, adj, labels, idx_train, idx_val):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        model.eval()
        output = model(features, adj)
        loss_val = F.nll_loss(output[idx_val], labels[idx_val])
        acc_val = output[idx_val].max(1)[1].type_as(labels).eq(labels[idx_val]).double().sum() / len(idx_val)
        if loss_val.data.item() < best["loss"]:
            best["loss"], best["bad"] = loss_val.data.item(), 0
        else:
            best["bad"] += 1
        return loss_train.data.item(), loss_val.data.item(), acc_val.item()
    return train, lambda: (_state(model), _opt_state(optimizer), dict(best))


def gat_inputs(i, dt):
    n = 10 + 2 * (i % 2)
    adj = (torch.rand(n, n) < 0.3).to(dt)
    adj = ((adj + adj.T + torch.eye(n, dtype=dt)) > 0).to(dt)
    adj = adj / adj.sum(1, keepdim=True)
    return torch.randn(n, 8, dtype=dt), adj, torch.randint(0, 3, (n,)), torch.arange(0, n // 2), torch.arange(n // 2, n)


def make_nucleus_generator(dt):
    """nucleus sampling with repetition penalty from a torch.Generator the program owns (seeded once,
    its state carried between calls), stopping at an end token."""
    lm = nn.Sequential(nn.Embedding(30, 16), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 30)).to(dt)
    gen = torch.Generator().manual_seed(1234)

    @torch.no_grad()
    def generate(prompt, max_new, top_p=0.8, temperature=0.9, penalty=1.3, eos=0):
        out = prompt.clone()
        for _ in range(max_new):
            logits = lm(out)[:, -1, :] / temperature
            score = torch.gather(logits, 1, out)
            score = torch.where(score < 0, score * penalty, score / penalty)
            logits = logits.scatter(1, out, score)
            sorted_logits, sorted_indices = torch.sort(logits, descending=True)
            cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
            sorted_indices_to_remove = cumulative_probs > top_p
            sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
            sorted_indices_to_remove[..., 0] = False
            indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
            logits = logits.masked_fill(indices_to_remove, float("-inf"))
            next_tok = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=gen)
            out = torch.cat([out, next_tok], dim=1)
            if (next_tok == eos).all():
                break
        return out
    return generate, lambda: gen.get_state()


def nucleus_inputs(i, dt):
    return torch.randint(1, 30, (2, 3 + i % 2)), 6 + i


# ------------------------------------------------------------------------------------------------ the cases
_CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("ddim_cfg", make_ddim_cfg, ddim_inputs, 3, True),
    ("ddpm_train_ema", make_ddpm_train, ddpm_inputs, 4, True),
    ("score_langevin", make_langevin, langevin_inputs, 3, False),
    ("nerf_hierarchical", make_nerf, nerf_inputs, 4, False),
    ("siren_poisson", make_siren, siren_inputs, 4, False),
    ("gp_mll_train", make_gp_train, gp_train_inputs, 3, False),
    ("hopfield_retrieve", make_hopfield, hopfield_inputs, 4, False),
    ("capsule_routing", make_capsule, capsule_inputs, 4, True),
    ("neural_ode_rk4", make_neural_ode, ode_inputs, 4, False),
    ("vqvae_ema", make_vqvae, lambda i, dt: (torch.rand(4, 1, 8, 8, dtype=dt),), 4, True),
    ("transformer_xl_mems", make_txl, txl_inputs, 5, True),
    ("snn_surrogate", make_snn, snn_inputs, 4, False),
    ("mdn_sample", make_mdn, mdn_inputs, 4, False),
    ("sinkhorn_log", make_sinkhorn, sinkhorn_inputs, 4, False),
    ("set_transformer_mask", make_set_transformer, set_inputs, 4, True),
    ("tcn_weightnorm", make_tcn, tcn_inputs, 4, True),
    ("distill_kl", make_kd, lambda i, dt: (torch.randn(4, 3, 8, 8, dtype=dt), torch.randint(0, 5, (4,))), 4, True),
    ("barlow_twins", make_barlow, ssl_inputs, 4, True),
    ("vicreg", make_vicreg, ssl_inputs, 4, False),
    ("perceiver_mask", make_perceiver, perceiver_inputs, 4, True),
    ("meta_sgd", make_meta_sgd, meta_inputs, 4, False),
    ("ekf_jacrev", make_ekf, ekf_inputs, 3, False),
    ("alibi_lm", make_alibi, alibi_inputs, 4, True),
    ("llama_rope_generate", make_llama_rope, llama_inputs, 3, False),
    ("bilstm_crf", make_bilstm_crf, crf_inputs, 4, False),
    ("protonet_episode", make_protonet, protonet_inputs, 4, False),
    ("fixmatch", make_fixmatch, fixmatch_inputs, 4, True),
    ("pixelcnn_sample", make_pixelcnn, pixelcnn_inputs, 3, False),
    ("linear_attention", make_linear_attention, linatt_inputs, 4, True),
    ("gat_dense", make_gat, gat_inputs, 4, False),
    ("nucleus_generator", make_nucleus_generator, nucleus_inputs, 4, False),
]

CASES = [(name, heldout4.with_rng(make, n), inputs, n, low) for name, make, inputs, n, low in _CASES]


if __name__ == "__main__":
    heldout4.main(CASES, __doc__, "bench/heldout8.py")
