"""Second real-world-style corpus for bench/modules.py (source "new2").

Patterns common in public repositories that bench/modules.py's first corpus does
not cover: GNN message passing with index_add_/scatter_reduce, VAEs and
normalizing flows, selective scans, diffusion steps, DETR box ops, metric-learning
losses, fake quantization, capsule routing, deformable sampling, MoE routing with
capacity, beam search, volume rendering, point-cloud ops, custom autograd
Functions, odd inputs (uint8/int32/float64/half, 0-d tensors, empty dims,
non-contiguous and channels-last tensors, buffers updated in forward), module hooks
(forward/pre/with_kwargs, self-removing), grad-mode blocks, parameter constraints under
no_grad, einsum zoo, MHA/decoder-layer mask variants, packed unsorted BiLSTM, max over
time/points with NaN, split views returned, activation checkpointing.

    python bench/modules.py --source new2 --jobs 2 --timeout 240
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CASES = []


def case(name, inputs, train=False):
    def deco(factory):
        CASES.append((name, factory, inputs, train))
        return factory
    return deco


def R(*s):
    return torch.randn(*s)


def EDGES(n=6, e=14):
    return torch.randint(0, n, (2, e))


# ================================================================================= graphs
class GCNIndexAdd(nn.Module):
    """GCN layer: symmetric degree normalization, messages summed with index_add_."""

    def __init__(self, d=5, h=7):
        super().__init__()
        self.lin = nn.Linear(d, h)

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n)
        src = torch.cat([edge_index[0], loops])
        dst = torch.cat([edge_index[1], loops])
        deg = torch.zeros(n).index_add_(0, dst, torch.ones(dst.numel()))
        norm = deg.pow(-0.5)
        norm = norm.masked_fill(torch.isinf(norm), 0.0)
        h = self.lin(x)
        msg = h[src] * (norm[src] * norm[dst]).unsqueeze(-1)
        out = torch.zeros_like(h).index_add_(0, dst, msg)
        return F.relu(out)


class GraphSAGEScatterReduce(nn.Module):
    """SAGE with max and mean aggregators through scatter_reduce (include_self=False)."""

    def __init__(self, d=4, h=6):
        super().__init__()
        self.l_self = nn.Linear(d, h)
        self.l_max = nn.Linear(d, h)
        self.l_mean = nn.Linear(d, h)

    def forward(self, x, edge_index):
        src, dst = edge_index
        idx = dst.unsqueeze(-1).expand(-1, x.size(1))
        mx = torch.zeros_like(x).scatter_reduce(0, idx, x[src], reduce="amax", include_self=False)
        mean = torch.zeros_like(x).scatter_reduce(0, idx, x[src], reduce="mean", include_self=False)
        out = self.l_self(x) + self.l_max(mx) + self.l_mean(mean)
        return F.normalize(out, p=2.0, dim=-1)


class GATEdgeSoftmax(nn.Module):
    """GAT attention: per-destination softmax (scatter amax, exp, index_add sum)."""

    def __init__(self, d=5, h=4, heads=2):
        super().__init__()
        self.heads, self.h = heads, h
        self.lin = nn.Linear(d, heads * h, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, h))
        self.att_dst = nn.Parameter(torch.randn(1, heads, h))

    def forward(self, x, edge_index):
        n = x.size(0)
        src, dst = edge_index
        h = self.lin(x).view(n, self.heads, self.h)
        a_s = (h * self.att_src).sum(-1)
        a_d = (h * self.att_dst).sum(-1)
        e = F.leaky_relu(a_s[src] + a_d[dst], 0.2)                       # (E, heads)
        emax = torch.full((n, self.heads), float("-inf")).scatter_reduce(
            0, dst.unsqueeze(-1).expand_as(e), e, reduce="amax", include_self=True)
        w = torch.exp(e - emax[dst])
        denom = torch.zeros(n, self.heads).index_add_(0, dst, w)
        alpha = w / (denom[dst] + 1e-16)
        out = torch.zeros(n, self.heads, self.h).index_add_(0, dst, h[src] * alpha.unsqueeze(-1))
        return out.mean(1), alpha


class GINGlobalPool(nn.Module):
    """GIN + batched graph readout: global add/mean/max pooling by a batch vector."""

    def __init__(self, d=4, h=8):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h))

    def forward(self, x, edge_index, batch):
        src, dst = edge_index
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        h = self.mlp((1 + self.eps) * x + agg)
        g = int(batch.max()) + 1
        add = torch.zeros(g, h.size(1)).index_add_(0, batch, h)
        cnt = torch.bincount(batch, minlength=g).clamp(min=1).unsqueeze(-1)
        mx = torch.full((g, h.size(1)), float("-inf")).index_reduce_(0, batch, h, "amax")
        return add, add / cnt, mx


case("gcn_index_add_norm", lambda: (R(6, 5), EDGES()))(lambda: GCNIndexAdd())
case("sage_scatter_reduce_max_mean", lambda: (R(6, 4), EDGES()))(lambda: GraphSAGEScatterReduce())
case("gat_edge_softmax", lambda: (R(6, 5), EDGES()))(lambda: GATEdgeSoftmax())
case("gin_global_pool_batch", lambda: (R(7, 4), EDGES(7, 12), torch.tensor([0, 0, 0, 1, 1, 2, 2])))(
    lambda: GINGlobalPool())


# ============================================================================ generative
class VAEDistributions(nn.Module):
    """VAE with torch.distributions: rsample, log_prob, analytic KL."""

    def __init__(self, d=8, z=3):
        super().__init__()
        self.enc = nn.Linear(d, 2 * z)
        self.dec = nn.Sequential(nn.Linear(z, 6), nn.Tanh(), nn.Linear(6, d))

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=-1)
        q = torch.distributions.Normal(mu, torch.exp(0.5 * logvar))
        z = q.rsample()
        p = torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(mu))
        kl = torch.distributions.kl_divergence(q, p).sum(-1)
        recon = self.dec(z)
        nll = F.mse_loss(recon, x, reduction="none").sum(-1)
        return (nll + kl).mean(), q.log_prob(z).sum(-1)


class VAEReparamManual(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 4, 3, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 8))
        self.dec = nn.Sequential(nn.Linear(4, 4 * 4 * 4), nn.Unflatten(1, (4, 4, 4)),
                                 nn.ConvTranspose2d(4, 1, 4, 2, 1), nn.Sigmoid())

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, 1)
        std = torch.exp(0.5 * logvar)
        z = mu + torch.randn_like(std) * std
        xr = self.dec(z)
        bce = F.binary_cross_entropy(xr, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return xr, (bce + kld) / x.size(0)


class RealNVPCoupling(nn.Module):
    """Affine coupling layers with checkerboard masks as buffers; forward + inverse + log-det."""

    def __init__(self, d=6, h=10, n=2):
        super().__init__()
        masks = torch.stack([(torch.arange(d) + i) % 2 for i in range(n)]).float()
        self.register_buffer("masks", masks)
        self.s = nn.ModuleList([nn.Sequential(nn.Linear(d, h), nn.Tanh(), nn.Linear(h, d), nn.Tanh())
                                for _ in range(n)])
        self.t = nn.ModuleList([nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, d)) for _ in range(n)])

    def forward(self, x):
        logdet = x.new_zeros(x.size(0))
        z = x
        for m, s_net, t_net in zip(self.masks, self.s, self.t):
            zm = z * m
            s = s_net(zm) * (1 - m)
            t = t_net(zm) * (1 - m)
            z = zm + (1 - m) * (z * torch.exp(s) + t)
            logdet = logdet + s.sum(1)
        prior = -0.5 * (z ** 2 + math.log(2 * math.pi)).sum(1)
        y = z
        for m, s_net, t_net in zip(reversed(self.masks), reversed(self.s), reversed(self.t)):
            ym = y * m
            y = ym + (1 - m) * ((y - t_net(ym)) * torch.exp(-s_net(ym)))
        return z, (prior + logdet).mean(), y


class MADE(nn.Module):
    """Masked autoencoder for density estimation: masks as buffers, F.linear with weight*mask."""

    def __init__(self, d=5, h=12):
        super().__init__()
        deg_in = torch.arange(1, d + 1)
        deg_h = torch.arange(h) % (d - 1) + 1
        self.register_buffer("m1", (deg_h[:, None] >= deg_in[None]).float())
        self.register_buffer("m2", (deg_in[:, None] > deg_h[None]).float().repeat(2, 1))
        self.l1 = nn.Linear(d, h)
        self.l2 = nn.Linear(h, 2 * d)

    def forward(self, x):
        h = F.relu(F.linear(x, self.l1.weight * self.m1, self.l1.bias))
        mu, alpha = F.linear(h, self.l2.weight * self.m2, self.l2.bias).chunk(2, -1)
        u = (x - mu) * torch.exp(-alpha)
        return u, -alpha.sum(-1)


class TriangularFlow(nn.Module):
    """Linear flow with a learned lower-triangular matrix: solve_triangular, log-det from the diagonal."""

    def __init__(self, d=4):
        super().__init__()
        self.raw = nn.Parameter(torch.randn(d, d) * 0.3)
        self.log_diag = nn.Parameter(torch.randn(d) * 0.1)

    def forward(self, x):
        L = torch.tril(self.raw, -1) + torch.diag(torch.exp(self.log_diag))
        z = x @ L.T
        back = torch.linalg.solve_triangular(L, z.T, upper=False).T
        logdet = self.log_diag.sum().expand(x.size(0))
        return z, back, logdet, torch.diagonal(L).prod()


class TimestepEmbedCFG(nn.Module):
    """Diffusion UNet bits: sinusoidal timestep embedding, FiLM conditioning, classifier-free guidance."""

    def __init__(self, c=4, dim=16, ncls=3):
        super().__init__()
        self.dim = dim
        self.t_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, 2 * c))
        self.cls = nn.Embedding(ncls + 1, dim)   # last index = null class
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.null = ncls

    def embed(self, t):
        half = self.dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def eps(self, x, t, y):
        emb = self.embed(t) + self.cls(y)
        scale, shift = self.t_mlp(emb)[:, :, None, None].chunk(2, dim=1)
        return self.conv(F.group_norm(x, 2) * (1 + scale) + shift)

    def forward(self, x, t, y, guidance):
        xx = torch.cat([x, x])
        tt = torch.cat([t, t])
        yy = torch.cat([y, torch.full_like(y, self.null)])
        cond, uncond = self.eps(xx, tt, yy).chunk(2)
        return uncond + guidance * (cond - uncond)


class DDIMStep(nn.Module):
    def __init__(self, steps=50):
        super().__init__()
        betas = torch.linspace(1e-4, 0.02, steps)
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0))
        self.net = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x, t, t_prev):
        a_t = self.alphas_cumprod.gather(0, t).view(-1, 1, 1, 1)
        a_prev = torch.where(t_prev >= 0, self.alphas_cumprod[t_prev.clamp(min=0)],
                             torch.ones_like(t_prev, dtype=x.dtype)).view(-1, 1, 1, 1)
        eps = self.net(x)
        x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
        return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps, x0


class GumbelSoftmaxVQ(nn.Module):
    """Gumbel-softmax codebook selection (hard straight-through) and soft."""

    def __init__(self, d=6, k=5):
        super().__init__()
        self.proj = nn.Linear(d, k)
        self.codebook = nn.Parameter(torch.randn(k, d))

    def forward(self, x, tau):
        logits = self.proj(x)
        hard = F.gumbel_softmax(logits, tau=tau, hard=True)
        soft = F.gumbel_softmax(logits, tau=tau, hard=False, dim=-1)
        return hard @ self.codebook, soft.sum(-1), hard.argmax(-1)


class VQEMA(nn.Module):
    """VQ-VAE quantizer: nearest code by distance, straight-through, EMA codebook buffers updated in forward."""

    def __init__(self, k=6, d=4, decay=0.9):
        super().__init__()
        self.decay = decay
        self.register_buffer("embed", torch.randn(k, d))
        self.register_buffer("cluster_size", torch.ones(k))
        self.register_buffer("embed_avg", self.embed.clone())

    def forward(self, z):   # (B, N, d)
        flat = z.reshape(-1, z.size(-1))
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embed.t() + self.embed.pow(2).sum(1)[None]
        idx = dist.argmin(1)
        onehot = F.one_hot(idx, self.embed.size(0)).type(flat.dtype)
        q = F.embedding(idx, self.embed).view_as(z)
        if self.training:
            with torch.no_grad():
                self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
                self.embed_avg.mul_(self.decay).add_(onehot.t() @ flat, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + 1e-5) / (n + 6e-5) * n
                self.embed.copy_(self.embed_avg / size.unsqueeze(1))
        commit = F.mse_loss(z, q.detach())
        q = z + (q - z).detach()
        return q, commit, idx.view(z.shape[:-1])


case("vae_distributions_rsample_kl", lambda: (R(4, 8),))(lambda: VAEDistributions())
case("vae_conv_reparam_bce", lambda: (torch.rand(2, 1, 8, 8),))(lambda: VAEReparamManual())
case("realnvp_coupling_inverse", lambda: (R(5, 6),))(lambda: RealNVPCoupling())
case("made_masked_linear", lambda: (R(3, 5),))(lambda: MADE())
case("triangular_flow_solve", lambda: (R(5, 4),))(lambda: TriangularFlow())
case("timestep_embed_cfg", lambda: (R(2, 4, 6, 6), torch.tensor([3, 999]), torch.tensor([0, 2]), 7.5))(
    lambda: TimestepEmbedCFG())
case("ddim_step_gather", lambda: (R(3, 2, 5, 5), torch.tensor([49, 20, 0]), torch.tensor([39, 10, -1])))(
    lambda: DDIMStep())
case("gumbel_softmax_codebook", lambda: (R(4, 6), 0.7))(lambda: GumbelSoftmaxVQ())
case("vq_ema_codebook_train", lambda: (R(2, 5, 4),), train=True)(lambda: VQEMA())


# ==================================================================== sequence models
class SelectiveScanLoop(nn.Module):
    """Mamba-style selective SSM: input-dependent dt/B/C, discretized A, sequential scan in a Python loop."""

    def __init__(self, d=4, n=3):
        super().__init__()
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1).float()).repeat(d, 1))
        self.D = nn.Parameter(torch.ones(d))
        self.x_proj = nn.Linear(d, 1 + 2 * n, bias=False)
        self.dt_proj = nn.Linear(1, d)
        self.n = n

    def forward(self, u):   # (B, L, d)
        b, length, d = u.shape
        A = -torch.exp(self.A_log)
        dbc = self.x_proj(u)
        dt, B, C = torch.split(dbc, [1, self.n, self.n], dim=-1)
        dt = F.softplus(self.dt_proj(dt))                                  # (B, L, d)
        dA = torch.exp(torch.einsum("bld,dn->bldn", dt, A))
        dBu = torch.einsum("bld,bln,bld->bldn", dt, B, u)
        h = u.new_zeros(b, d, self.n)
        ys = []
        for i in range(length):
            h = dA[:, i] * h + dBu[:, i]
            ys.append(torch.einsum("bdn,bn->bd", h, C[:, i]))
        return torch.stack(ys, 1) + u * self.D


class ParallelScanCumsum(nn.Module):
    """Linear recurrence h_t = a_t h_{t-1} + b_t via cumsum of logs (log-space parallel scan)."""

    def forward(self, log_a, b):   # (B, T, D)
        a_star = torch.cumsum(log_a, dim=1)
        log_h = a_star + torch.logcumsumexp(torch.log(b.abs() + 1e-6) - a_star, dim=1)
        return torch.exp(log_h), torch.cumprod(torch.exp(log_a), dim=1), torch.cummax(b, dim=1).values


class S4FFTConv(nn.Module):
    """S4D kernel from diagonal complex-free parameters, long convolution through rfft/irfft."""

    def __init__(self, d=3, n=4):
        super().__init__()
        self.log_dt = nn.Parameter(torch.full((d,), math.log(0.1)))
        self.A = nn.Parameter(-0.5 - torch.rand(d, n))
        self.C = nn.Parameter(torch.randn(d, n))
        self.D = nn.Parameter(torch.randn(d))

    def forward(self, u):   # (B, d, L)
        length = u.size(-1)
        dtA = self.A * torch.exp(self.log_dt)[:, None]
        k = (self.C[:, :, None] * torch.exp(dtA[:, :, None] * torch.arange(length))).sum(1)   # (d, L)
        kf = torch.fft.rfft(k, n=2 * length)
        uf = torch.fft.rfft(u, n=2 * length)
        y = torch.fft.irfft(uf * kf, n=2 * length)[..., :length]
        return F.gelu(y + u * self.D[:, None])


class CTCForwardManual(nn.Module):
    """CTC forward (alpha) recursion written by hand with logsumexp, compared to F.ctc_loss."""

    def forward(self, log_probs, target):   # (T, C) log-softmaxed, target (S,)
        T = log_probs.size(0)
        ext = torch.zeros(2 * target.numel() + 1, dtype=torch.long)
        ext[1::2] = target
        S = ext.numel()
        neg = torch.tensor(float("-inf"))
        alpha = torch.full((S,), float("-inf"))
        alpha[0] = log_probs[0, ext[0]]
        alpha[1] = log_probs[0, ext[1]]
        same = torch.cat([torch.tensor([True, True]), ext[2:] == ext[:-2]])
        for t in range(1, T):
            a1 = torch.cat([neg.view(1), alpha[:-1]])
            a2 = torch.cat([neg.view(1), neg.view(1), alpha[:-2]]).masked_fill(same, float("-inf"))
            alpha = torch.logsumexp(torch.stack([alpha, a1, a2]), 0) + log_probs[t, ext]
        nll = -torch.logsumexp(alpha[-2:], 0)
        ref = F.ctc_loss(log_probs[:, None], target[None], torch.tensor([T]), torch.tensor([target.numel()]),
                         reduction="sum")
        return nll, ref


class BeamSearchStep(nn.Module):
    def __init__(self, vocab=7, d=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens, scores, finished):   # (B, K, t) int64, (B, K), (B, K) bool
        b, k, _ = tokens.shape
        logp = F.log_softmax(self.out(self.emb(tokens[:, :, -1])), -1)          # (B, K, V)
        v = logp.size(-1)
        logp = logp.masked_fill(finished[..., None], float("-inf"))
        logp[..., 0] = torch.where(finished, torch.zeros_like(scores), logp[..., 0])   # EOS keeps score
        cand = (scores[..., None] + logp).view(b, k * v)
        top, idx = cand.topk(k, dim=-1)
        beam = torch.div(idx, v, rounding_mode="floor")
        tok = idx % v
        hist = tokens.gather(1, beam[..., None].expand(-1, -1, tokens.size(-1)))
        return torch.cat([hist, tok[..., None]], -1), top, finished.gather(1, beam) | (tok == 0)


class KVCacheDecoder(nn.Module):
    """One decode step: RMSNorm, SwiGLU, K/V written into cache buffers at position pos (index_copy_)."""

    def __init__(self, d=8, maxlen=6):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.w1 = nn.Linear(d, 12, bias=False)
        self.w3 = nn.Linear(d, 12, bias=False)
        self.w2 = nn.Linear(12, d, bias=False)
        self.g = nn.Parameter(torch.ones(d))
        self.register_buffer("k_cache", torch.zeros(1, maxlen, d), persistent=False)
        self.register_buffer("v_cache", torch.zeros(1, maxlen, d), persistent=False)

    def rms(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g

    def forward(self, x, pos):   # x (1, 1, d), pos: 0-d int64 tensor
        q, k, v = self.qkv(self.rms(x)).chunk(3, -1)
        self.k_cache.index_copy_(1, pos.view(1), k)
        self.v_cache.index_copy_(1, pos.view(1), v)
        valid = torch.arange(self.k_cache.size(1)) <= pos
        att = (q @ self.k_cache.transpose(1, 2)) / math.sqrt(q.size(-1))
        att = att.masked_fill(~valid, float("-inf")).softmax(-1)
        h = x + att @ self.v_cache
        return h + self.w2(F.silu(self.w1(self.rms(h))) * self.w3(self.rms(h)))


case("mamba_selective_scan_loop", lambda: (R(2, 5, 4),))(lambda: SelectiveScanLoop())
case("log_space_parallel_scan", lambda: (-torch.rand(2, 7, 3), R(2, 7, 3)))(lambda: ParallelScanCumsum())
case("s4d_fft_long_conv", lambda: (R(2, 3, 16),))(lambda: S4FFTConv())
case("ctc_forward_manual", lambda: (F.log_softmax(R(6, 4), -1), torch.tensor([1, 2, 2])))(
    lambda: CTCForwardManual())
case("beam_search_step", lambda: (torch.randint(1, 7, (2, 3, 4)), R(2, 3), torch.tensor([[False, True, False],
                                                                                          [False, False, False]])))(
    lambda: BeamSearchStep())
case("kv_cache_decode_step", lambda: (R(1, 1, 8), torch.tensor(2)))(lambda: KVCacheDecoder())


# ============================================================================ detection
def box_cxcywh_to_xyxy(b):
    cx, cy, w, h = b.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], -1)


def box_xyxy_to_cxcywh(b):
    x0, y0, x1, y1 = b.unbind(-1)
    return torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], -1)


def box_iou_union(a, b):
    """torchvision's box_iou: (IoU, union area) of every pair of boxes of a and b."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a[:, None] + area_b - inter
    return inter / union, union


def generalized_box_iou(a, b):
    iou, union = box_iou_union(a, b)
    lt2 = torch.min(a[:, None, :2], b[:, :2])
    rb2 = torch.max(a[:, None, 2:], b[:, 2:])
    wh2 = (rb2 - lt2).clamp(min=0)
    return iou - (wh2[..., 0] * wh2[..., 1] - union) / (wh2[..., 0] * wh2[..., 1])


class DETRHeadCost(nn.Module):
    def __init__(self, d=8, ncls=4):
        super().__init__()
        self.cls = nn.Linear(d, ncls + 1)
        self.box = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))

    def forward(self, hs, tgt_boxes, tgt_labels):   # (Q, d), (T, 4) cxcywh, (T,)
        logits = self.cls(hs)
        boxes = self.box(hs).sigmoid()
        prob = logits.softmax(-1)
        cost = torch.cdist(boxes, tgt_boxes, p=1) - prob[:, tgt_labels] \
            - generalized_box_iou(box_cxcywh_to_xyxy(boxes), box_cxcywh_to_xyxy(tgt_boxes))
        match = cost.argmin(0)
        l1 = F.l1_loss(boxes[match], tgt_boxes)
        giou = (1 - torch.diag(generalized_box_iou(box_cxcywh_to_xyxy(boxes[match]),
                                                   box_cxcywh_to_xyxy(tgt_boxes)))).mean()
        return cost, match, l1 + giou, box_xyxy_to_cxcywh(box_cxcywh_to_xyxy(boxes))


class FCOSTargets(nn.Module):
    """Anchor-free targets: ltrb distances of every location to every box, inside mask, min-area assignment."""

    def forward(self, points, boxes):   # (P, 2), (G, 4) xyxy
        x, y = points[:, 0, None], points[:, 1, None]
        ltrb = torch.stack([x - boxes[:, 0], y - boxes[:, 1], boxes[:, 2] - x, boxes[:, 3] - y], -1)   # (P, G, 4)
        inside = ltrb.min(-1).values > 0
        area = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))[None].expand(points.size(0), -1)
        area = area.masked_fill(~inside, float("inf"))
        min_area, gt = area.min(1)
        reg = ltrb[torch.arange(points.size(0)), gt]
        lr, tb = reg[:, [0, 2]], reg[:, [1, 3]]
        centerness = torch.sqrt((lr.min(-1).values / lr.max(-1).values).clamp(min=0) *
                                (tb.min(-1).values / tb.max(-1).values).clamp(min=0))
        return reg, torch.where(torch.isinf(min_area), torch.zeros_like(centerness), centerness), gt


case("detr_head_giou_cost", lambda: (R(6, 8), torch.rand(3, 4) * 0.5 + 0.25, torch.tensor([1, 3, 0])))(
    lambda: DETRHeadCost())
case("fcos_targets_inf_area", lambda: (torch.rand(10, 2) * 8, torch.tensor([[0.0, 0.0, 5.0, 5.0],
                                                                            [2.0, 1.0, 7.0, 8.0]])))(
    lambda: FCOSTargets())


# ================================================================================ losses
class SigmoidFocalLoss(nn.Module):
    def forward(self, logits, targets, valid):   # float targets in {0,1}, bool valid
        p = torch.sigmoid(logits)
        ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce * ((1 - p_t) ** 2.0)
        alpha_t = 0.25 * targets + 0.75 * (1 - targets)
        loss = alpha_t * loss
        return (loss * valid).sum() / valid.sum().clamp(min=1), loss


class DiceLossIgnore(nn.Module):
    def forward(self, logits, target):   # (B, C, H, W), (B, H, W) with 255 = ignore
        valid = target != 255
        tgt = target.masked_fill(~valid, 0)
        onehot = F.one_hot(tgt, logits.size(1)).permute(0, 3, 1, 2).float()
        prob = logits.softmax(1) * valid[:, None]
        onehot = onehot * valid[:, None]
        inter = (prob * onehot).sum((0, 2, 3))
        card = (prob + onehot).sum((0, 2, 3))
        dice = (2 * inter + 1) / (card + 1)
        return 1 - dice.mean(), F.cross_entropy(logits, target, ignore_index=255)


class BatchHardTriplet(nn.Module):
    def forward(self, emb, labels):
        d = torch.cdist(emb, emb)
        same = labels[:, None] == labels[None]
        eye = torch.eye(len(labels), dtype=torch.bool)
        hardest_pos = (d * (same & ~eye)).max(1).values
        hardest_neg = d.masked_fill(same, float("inf")).min(1).values
        loss = F.relu(hardest_pos - hardest_neg + 0.3)
        return loss.mean(), F.triplet_margin_loss(emb, emb.roll(1, 0), emb.flip(0), margin=0.5, p=2)


class SupConLoss(nn.Module):
    def __init__(self, t=0.1):
        super().__init__()
        self.t = t

    def forward(self, feats, labels):   # (N, D)
        z = F.normalize(feats, dim=1)
        logits = z @ z.T / self.t
        n = z.size(0)
        self_mask = torch.eye(n, dtype=torch.bool)
        logits = logits.masked_fill(self_mask, float("-inf"))
        pos = (labels[:, None] == labels[None]) & ~self_mask
        log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
        per = -(log_prob.masked_fill(~pos, 0).sum(1)) / pos.sum(1).clamp(min=1)
        return per[pos.any(1)].mean(), F.cross_entropy(logits.masked_fill(self_mask, -1e9),
                                                       torch.arange(n).roll(1))


class NTXent(nn.Module):
    def forward(self, z1, z2, temperature):   # temperature: 0-d tensor
        z = F.normalize(torch.cat([z1, z2]), dim=-1)
        n = z1.size(0)
        sim = z @ z.t() / temperature
        sim.fill_diagonal_(float("-inf"))
        targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
        return F.cross_entropy(sim, targets)


class LabelSmoothingManual(nn.Module):
    def forward(self, logits, target):   # (N, C, T), (N, T) with -100
        logp = F.log_softmax(logits, 1)
        mask = target != -100
        t = target.clamp(min=0)
        nll = -logp.gather(1, t[:, None]).squeeze(1)
        smooth = -logp.mean(1)
        loss = (0.9 * nll + 0.1 * smooth)[mask].mean()
        ref = F.cross_entropy(logits, target, label_smoothing=0.1, ignore_index=-100)
        return loss, ref, F.kl_div(logp, F.softmax(logits.flip(1), 1), reduction="batchmean")


class ContrastiveHadsell(nn.Module):
    def forward(self, a, b, same):   # same: float 0/1
        d = F.pairwise_distance(a, b)
        return (same * d.pow(2) + (1 - same) * F.relu(1.0 - d).pow(2)).mean() / 2, \
            F.cosine_embedding_loss(a, b, same * 2 - 1, margin=0.2), F.hinge_embedding_loss(d, same * 2 - 1)


case("sigmoid_focal_loss_valid", lambda: (R(4, 5), torch.randint(0, 2, (4, 5)).float(), torch.rand(4, 5) > 0.3))(
    lambda: SigmoidFocalLoss())
case("dice_loss_ignore_255", lambda: (R(2, 3, 4, 4), torch.where(torch.rand(2, 4, 4) > 0.8, 255,
                                                                 torch.randint(0, 3, (2, 4, 4)))))(
    lambda: DiceLossIgnore())
case("batch_hard_triplet", lambda: (R(6, 4), torch.tensor([0, 1, 0, 2, 1, 2])))(lambda: BatchHardTriplet())
case("supcon_loss_singletons", lambda: (R(6, 5), torch.tensor([0, 1, 0, 2, 1, 3])))(lambda: SupConLoss())
case("nt_xent_fill_diagonal", lambda: (R(4, 6), R(4, 6), torch.tensor(0.5)))(lambda: NTXent())
case("label_smoothing_ignore_seq", lambda: (R(2, 5, 3), torch.tensor([[1, 4, -100], [0, -100, -100]])))(
    lambda: LabelSmoothingManual())
case("contrastive_hadsell_losses", lambda: (R(5, 3), R(5, 3), torch.randint(0, 2, (5,)).float()))(
    lambda: ContrastiveHadsell())


# ========================================================================= quantization
class FakeQuantQAT(nn.Module):
    """QAT: fake_quantize per tensor (activations) and per channel (weights), observers as buffers."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.register_buffer("act_min", torch.tensor(float("inf")))
        self.register_buffer("act_max", torch.tensor(float("-inf")))

    def forward(self, x):
        with torch.no_grad():
            self.act_min.copy_(torch.minimum(self.act_min, x.min()))
            self.act_max.copy_(torch.maximum(self.act_max, x.max()))
        scale = float((self.act_max - self.act_min) / 255)
        zp = int(round(float(-self.act_min) / scale))
        xq = torch.fake_quantize_per_tensor_affine(x, scale, zp, 0, 255)
        w = self.fc.weight
        ws = w.abs().amax(1).detach() / 127
        wq = torch.fake_quantize_per_channel_affine(w, ws, torch.zeros(4, dtype=torch.int32), 0, -128, 127)
        return F.linear(xq, wq, self.fc.bias)


class LSQQuant(nn.Module):
    """Learned step size quantization: round with straight-through estimator, gradient scaling."""

    def __init__(self, bits=4):
        super().__init__()
        self.qn, self.qp = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        self.step = nn.Parameter(torch.tensor(0.1))
        self.conv = nn.Conv2d(2, 3, 3)

    def forward(self, x):
        g = 1.0 / math.sqrt(x.numel() * self.qp)
        s = (self.step - self.step * g).detach() + self.step * g
        v = torch.clamp(x / s, self.qn, self.qp)
        v = (v.round() - v).detach() + v
        return self.conv(v * s)


class TernaryWeights(nn.Module):
    """Ternary/binary weight nets: sign with STE via a custom autograd.Function, per-layer scale."""

    class SignSTE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sign(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * (x.abs() <= 1).to(g.dtype)

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5))

    def forward(self, x):
        delta = 0.7 * self.w.abs().mean()
        tern = torch.where(self.w.abs() > delta, torch.sign(self.w), torch.zeros_like(self.w))
        alpha = (self.w.abs() * (tern != 0)).sum() / (tern != 0).sum()
        return F.linear(x, self.SignSTE.apply(self.w) * self.w.abs().mean()), F.linear(x, alpha * tern)


class GradReverseDANN(nn.Module):
    """Domain-adversarial: gradient reversal Function, loss.backward inside forward, grads returned."""

    class GradReverse(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, lam):
            ctx.lam = lam
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return -ctx.lam * g, None

    def __init__(self):
        super().__init__()
        self.feat = nn.Linear(4, 6)
        self.dom = nn.Linear(6, 2)

    def forward(self, x, d):
        f = torch.relu(self.feat(x))
        loss = F.cross_entropy(self.dom(self.GradReverse.apply(f, 0.5)), d)
        loss.backward()
        return loss.detach(), self.feat.weight.grad.clone(), self.dom.weight.grad.clone()


case("fake_quant_qat_observer", lambda: (R(3, 6),))(lambda: FakeQuantQAT())
case("lsq_quant_ste", lambda: (R(2, 2, 5, 5),))(lambda: LSQQuant())
case("ternary_sign_ste_function", lambda: (R(3, 5),))(lambda: TernaryWeights())
case("grad_reverse_dann_backward", lambda: (R(5, 4), torch.tensor([0, 1, 1, 0, 1])), train=True)(
    lambda: GradReverseDANN())


# ================================================================================ vision
class CapsuleRouting(nn.Module):
    def __init__(self, n_in=6, d_in=4, n_out=3, d_out=5, iters=3):
        super().__init__()
        self.W = nn.Parameter(0.1 * torch.randn(1, n_in, n_out, d_out, d_in))
        self.iters = iters

    @staticmethod
    def squash(s, dim=-1):
        n2 = (s ** 2).sum(dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, u):   # (B, n_in, d_in)
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)    # (B, n_in, n_out, d_out)
        b = torch.zeros(u_hat.shape[:3])
        for i in range(self.iters):
            c = b.softmax(dim=2)
            v = self.squash((c[..., None] * u_hat).sum(1))
            if i < self.iters - 1:
                b = b + (u_hat * v[:, None]).sum(-1)
        return v, v.norm(dim=-1)


class DeformableSampling(nn.Module):
    """Deformable-conv-like: offsets predicted by a conv, added to a base grid, grid_sample, then 1x1 conv."""

    def __init__(self, c=3):
        super().__init__()
        self.offset = nn.Conv2d(c, 2, 3, padding=1)
        self.proj = nn.Conv2d(c, 4, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        off = torch.tanh(self.offset(x)).permute(0, 2, 3, 1)                  # (B, H, W, 2)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        base = torch.stack([xs, ys], -1)[None].expand(b, -1, -1, -1)
        grid = base + off * torch.tensor([2.0 / w, 2.0 / h])
        return self.proj(F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True))


class ESPCNSuperRes(nn.Module):
    def __init__(self, r=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.Tanh(), nn.Conv2d(8, 4, 3, padding=1),
                                  nn.Tanh(), nn.Conv2d(4, r * r, 3, padding=1))
        self.up = nn.PixelShuffle(r)

    def forward(self, lr):
        hr = self.up(self.body(lr))
        bic = F.interpolate(lr, scale_factor=3, mode="bicubic", align_corners=False)
        return (hr + bic).clamp(0, 1)


class ViTPatchifyPosInterp(nn.Module):
    """ViT: patchify with unfold/reshape, cls token, pos-embedding interpolated to a new grid (bicubic)."""

    def __init__(self, p=2, d=6, grid=3):
        super().__init__()
        self.p = p
        self.proj = nn.Linear(p * p * 3, d)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 1 + grid * grid, d))
        self.grid = grid

    def forward(self, img):   # (B, 3, H, W)
        b, c, h, w = img.shape
        p = self.p
        x = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)
        x = torch.cat([self.cls.expand(b, -1, -1), self.proj(x)], 1)
        pos = self.pos[:, 1:].reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(h // p, w // p), mode="bicubic", align_corners=False)
        pos = torch.cat([self.pos[:, :1], pos.flatten(2).transpose(1, 2)], 1)
        y = x + pos
        unp = y[:, 1:, :].reshape(b, h // p, w // p, -1).permute(0, 3, 1, 2)
        return y, unp.contiguous(memory_format=torch.channels_last)


class NeRFRender(nn.Module):
    """Positional encoding + volume rendering: exclusive cumprod transmittance, expected depth."""

    def __init__(self, freqs=3):
        super().__init__()
        self.register_buffer("bands", 2.0 ** torch.arange(freqs) * math.pi, persistent=False)
        self.mlp = nn.Sequential(nn.Linear(3 + 6 * freqs, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, rays_o, rays_d, near, far):   # (R, 3), (R, 3), floats
        n = 8
        t = torch.linspace(near, far, n)
        pts = rays_o[:, None] + rays_d[:, None] * t[:, None]                 # (R, n, 3)
        enc = (pts[..., None] * self.bands).flatten(-2)
        feats = torch.cat([pts, enc.sin(), enc.cos()], -1)
        raw = self.mlp(feats)
        rgb, sigma = torch.sigmoid(raw[..., :3]), F.relu(raw[..., 3])
        delta = torch.cat([t[1:] - t[:-1], torch.tensor([1e10])])
        alpha = 1 - torch.exp(-sigma * delta * rays_d.norm(dim=-1, keepdim=True))
        trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)[:, :-1]
        w = alpha * trans
        return (w[..., None] * rgb).sum(1), (w * t).sum(1), w.sum(1)


class PointNetKNN(nn.Module):
    """DGCNN EdgeConv: kNN by pairwise distance + topk, gather neighbours, max over k; chamfer distance."""

    def __init__(self, k=3):
        super().__init__()
        self.k = k
        self.mlp = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2))

    def forward(self, pts, other):   # (B, N, 3), (B, M, 3)
        inner = -2 * pts @ pts.transpose(1, 2)
        sq = (pts ** 2).sum(-1, keepdim=True)
        negd = -sq - inner - sq.transpose(1, 2)
        idx = negd.topk(self.k, dim=-1).indices                          # (B, N, k)
        b, n, _ = pts.shape
        nb = pts[torch.arange(b)[:, None, None], idx]                     # (B, N, k, 3)
        center = pts[:, :, None].expand(-1, -1, self.k, -1)
        edge = self.mlp(torch.cat([nb - center, center], -1)).max(2).values
        d = torch.cdist(pts, other) ** 2
        chamfer = d.min(2).values.mean(1) + d.min(1).values.mean(1)
        return edge, chamfer


class FarthestPointSampling(nn.Module):
    def forward(self, xyz, npoint: int = 4):   # (B, N, 3)
        b, n, _ = xyz.shape
        centroids = torch.zeros(b, npoint, dtype=torch.long)
        distance = torch.full((b, n), 1e10)
        farthest = torch.zeros(b, dtype=torch.long)
        ar = torch.arange(b)
        for i in range(npoint):
            centroids[:, i] = farthest
            c = xyz[ar, farthest].view(b, 1, 3)
            dist = ((xyz - c) ** 2).sum(-1)
            distance = torch.minimum(distance, dist)
            farthest = distance.argmax(-1)
        return centroids, xyz[ar[:, None], centroids]


case("capsule_dynamic_routing", lambda: (R(2, 6, 4),))(lambda: CapsuleRouting())
case("deformable_offset_grid_sample", lambda: (R(2, 3, 5, 6),))(lambda: DeformableSampling())
case("espcn_pixel_shuffle_bicubic", lambda: (torch.rand(1, 1, 6, 5),))(lambda: ESPCNSuperRes())
case("vit_patchify_pos_interp", lambda: (R(2, 3, 8, 6),))(lambda: ViTPatchifyPosInterp())
case("nerf_volume_render", lambda: (R(5, 3), F.normalize(R(5, 3), dim=-1), 0.5, 4.0))(lambda: NeRFRender())
case("dgcnn_knn_chamfer", lambda: (R(2, 6, 3), R(2, 5, 3)))(lambda: PointNetKNN())
case("farthest_point_sampling", lambda: (R(2, 9, 3),))(lambda: FarthestPointSampling())


# ============================================================================ routing/MoE
class MoETop2Capacity(nn.Module):
    """Switch/GShard-style routing: top-2 gates, expert capacity via cumsum of one-hot, dispatch by einsum."""

    def __init__(self, d=6, e=3, cap=3):
        super().__init__()
        self.gate = nn.Linear(d, e, bias=False)
        self.w1 = nn.Parameter(torch.randn(e, d, 8) * 0.3)
        self.w2 = nn.Parameter(torch.randn(e, 8, d) * 0.3)
        self.e, self.cap = e, cap

    def forward(self, x):   # (S, d)
        probs = self.gate(x).softmax(-1)
        topv, topi = probs.topk(2, dim=-1)
        topv = topv / topv.sum(-1, keepdim=True)
        combine = x.new_zeros(x.size(0), self.e, self.cap)
        offset = torch.zeros(self.e, dtype=torch.long)
        for k in range(2):
            mask = F.one_hot(topi[:, k], self.e)                              # (S, E)
            pos = torch.cumsum(mask, 0) - 1 + offset
            keep = mask * (pos < self.cap)
            offset = offset + keep.sum(0)
            slot = F.one_hot((pos * keep).sum(-1), self.cap)                   # (S, cap)
            combine = combine + topv[:, k, None, None] * keep[..., None] * slot[:, None]
        dispatch = combine > 0
        xin = torch.einsum("sec,sd->ecd", dispatch.float(), x)
        h = torch.einsum("ecd,edh->ech", xin, self.w1).relu()
        out = torch.einsum("ech,ehd->ecd", h, self.w2)
        aux = (probs.mean(0) * F.one_hot(topi[:, 0], self.e).float().mean(0)).sum() * self.e
        return torch.einsum("sec,ecd->sd", combine, out), aux, dispatch.sum((1, 2))


class SparseMoEIndexing(nn.Module):
    """Mixtral-style: per-expert token lists with torch.where(mask), index_add_ back."""

    def __init__(self, d=5, e=4):
        super().__init__()
        self.gate = nn.Linear(d, e, bias=False)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, 7), nn.SiLU(), nn.Linear(7, d)) for _ in range(e)])

    def forward(self, x):   # (B, T, d)
        flat = x.view(-1, x.size(-1))
        w, sel = torch.topk(self.gate(flat).softmax(-1), 2, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        mask = F.one_hot(sel, len(self.experts)).permute(2, 1, 0)            # (E, 2, N)
        for i, expert in enumerate(self.experts):
            slot, tok = torch.where(mask[i])
            if tok.numel() == 0:
                continue
            out.index_add_(0, tok, expert(flat[tok]) * w[tok, slot, None])
        return out.view_as(x)


class ALiBiCausalTriu(nn.Module):
    """Attention with ALiBi slopes, causal mask from triu, padding that masks whole rows (NaN softmax rows)."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])
        self.register_buffer("slopes", slopes, persistent=False)

    def forward(self, x, pad):   # pad: (B, T) bool, True = padding
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        rel = torch.arange(t)[None] - torch.arange(t)[:, None]
        bias = self.slopes[:, None, None] * rel[None]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(d // self.h) + bias
        s = s.masked_fill(causal, float("-inf")).masked_fill(pad[:, None, :, None], float("-inf"))
        p = s.softmax(-1)
        out = (p @ v).transpose(1, 2).reshape(b, t, d)
        return torch.nan_to_num(out, nan=0.0), p.isnan().sum()


class LocalWindowAttention(nn.Module):
    """Sliding-window attention via Tensor.unfold of padded keys."""

    def __init__(self, d=4, w=3):
        super().__init__()
        self.w = w
        self.kv = nn.Linear(d, 2 * d)

    def forward(self, q, x):   # (B, T, d)
        k, v = self.kv(x).chunk(2, -1)
        pad = self.w // 2
        kw = F.pad(k, (0, 0, pad, pad)).unfold(1, self.w, 1)                 # (B, T, d, w)
        vw = F.pad(v, (0, 0, pad, pad)).unfold(1, self.w, 1)
        s = torch.einsum("btd,btdw->btw", q, kw)
        valid = F.pad(torch.ones(x.size(1)), (pad, pad)).unfold(0, self.w, 1).bool()
        s = s.masked_fill(~valid, float("-inf"))
        return torch.einsum("btw,btdw->btd", s.softmax(-1), vw)


case("moe_top2_capacity_einsum", lambda: (R(8, 6),))(lambda: MoETop2Capacity())
case("moe_sparse_where_index_add", lambda: (R(2, 4, 5),))(lambda: SparseMoEIndexing())
case("alibi_triu_all_masked_rows", lambda: (R(2, 4, 8), torch.tensor([[False, False, True, True],
                                                                       [False, False, False, False]])))(
    lambda: ALiBiCausalTriu())
case("local_window_unfold_attention", lambda: (R(2, 5, 4), R(2, 5, 4)))(lambda: LocalWindowAttention())


# ============================================================================ odd inputs
class Uint8Preprocess(nn.Module):
    """Image uint8 HWC -> normalized float CHW with mean/std buffers; int32 labels; bool valid mask."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.fc = nn.Linear(3, 4)

    def forward(self, img, labels, valid):   # uint8 (B, H, W, 3), int32 (B,), bool (B,)
        x = img.permute(0, 3, 1, 2).float().div(255)
        x = (x - self.mean) / self.std
        logits = self.fc(x.mean((2, 3)))
        loss = F.cross_entropy(logits, labels.long(), reduction="none")
        flipped = torch.flip(img, dims=[2])
        return (loss * valid).sum(), flipped, (img > 128).sum(dtype=torch.int32), img.max(), 255 - img


class MixedPrecisionInputs(nn.Module):
    def forward(self, h, d, i, b):   # half, float64, int32, bool
        return h * d, h + i, (d * b).sum(), torch.where(b, h, i), h.float().mean(), d.to(torch.float16) + h, \
            i // 3, i.float() / 3, torch.remainder(i, -4), h.sum(dtype=torch.float32)


class StatefulWelford(nn.Module):
    """Running normalizer (RL obs norm): Welford updates of buffers in forward, step counter as a buffer."""

    def __init__(self, d=3):
        super().__init__()
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(d, dtype=torch.float64))
        self.register_buffer("var", torch.ones(d, dtype=torch.float64))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long), persistent=False)

    def forward(self, x):
        if self.training:
            xd = x.double()
            bm, bv, bc = xd.mean(0), xd.var(0, unbiased=False), x.shape[0]
            delta = bm - self.mean
            tot = self.count + bc
            self.mean += delta * bc / tot
            m2 = self.var * self.count + bv * bc + delta ** 2 * self.count * bc / tot
            self.var.copy_(m2 / tot)
            self.count.copy_(tot)
            self.steps += 1
        return ((x - self.mean.float()) / torch.sqrt(self.var.float() + 1e-8)).clamp(-5, 5)


class InplaceSliceViews(nn.Module):
    """In-place on slices/views of the inputs and of intermediate results; transposes and narrow."""

    def forward(self, x, y):
        x[:, :2] += 1.0
        x[..., -1].mul_(2.0)
        yt = y.t()
        yt[0].clamp_(min=0)
        z = x.clone()
        z.narrow(1, 1, 2).copy_(y[:2].t())
        z.diagonal().zero_()
        z[z > 1.5] = 1.5
        return z, x.sum(), y.sum(0)


class BoolMaskIndexPut(nn.Module):
    def forward(self, t, m, v):
        t = t.clone()
        t[m] = v
        t[t < -1] = 0.0
        u = t.clone()
        u[m.any(1)] += 1
        return t, u, t[m], t.masked_scatter(~m, torch.arange(t.numel()).float())


class NonContiguousInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.conv = nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, a, b, img):   # a: transposed, b: strided slice, img: channels_last
        h = self.fc(a) + b.sum(-1, keepdim=True)
        c = self.conv(img)
        return h, c, c.is_contiguous(memory_format=torch.channels_last), a.mT.contiguous(), (a * 2).stride()


class ZeroSizeDims(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, empty, idx):   # x (3, 4), empty (0, 4), idx int64 (0,)
        y = torch.cat([self.fc(x), self.fc(empty)])
        return y, self.fc(empty).sum(0), empty.mean(0), x[idx], x.index_select(0, idx).shape[0], \
            torch.zeros(2, 0).softmax(-1), y.amax(0)


class ScalarTensors(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.register_buffer("temp", torch.tensor(2.0))

    def forward(self, x, scale, step, flag):   # 0-d float, 0-d int64, 0-d bool
        y = self.fc(x) * scale / self.temp
        y = y + step
        y = torch.where(flag, y, -y)
        return y, scale * step, y.max(), y.argmax(), torch.stack([scale, scale])


class DropoutTrainBackward(nn.Module):
    """Training step with dropout variants, backward inside forward, then a manual SGD update."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 8), nn.AlphaDropout(0.2),
                                 nn.Linear(8, 2))
        self.drop2d = nn.Dropout2d(0.5)

    def forward(self, x, img, y):
        feat = self.drop2d(img).mean((1, 2, 3))
        out = self.net(x) + feat[:, None]
        loss = F.cross_entropy(out, y)
        loss.backward()
        with torch.no_grad():
            for p in self.net.parameters():
                p -= 0.1 * p.grad
        return loss.detach(), out.detach()


class HistQuantileOps(nn.Module):
    def forward(self, x, ids):
        return torch.histc(x, bins=5, min=-2, max=2), torch.bincount(ids, weights=x[:ids.numel()]), \
            torch.quantile(x, torch.tensor([0.1, 0.5, 0.9])), torch.cummin(x, 0).values, \
            torch.searchsorted(torch.sort(x).values, torch.tensor([-0.5, 0.0, 0.5])), torch.unique_consecutive(ids)


case("uint8_image_preprocess", lambda: (torch.randint(0, 256, (2, 4, 5, 3), dtype=torch.uint8),
                                        torch.tensor([1, 3], dtype=torch.int32), torch.tensor([True, False])))(
    lambda: Uint8Preprocess())
case("mixed_precision_inputs", lambda: (R(3, 4).half(), R(3, 4).double(), torch.randint(-9, 9, (3, 4),
                                                                                     dtype=torch.int32),
                                        torch.rand(3, 4) > 0.5))(lambda: MixedPrecisionInputs())
case("welford_running_norm_train", lambda: (R(4, 3) * 3 + 1,), train=True)(lambda: StatefulWelford())
case("inplace_slice_views_inputs", lambda: (R(3, 3), R(3, 3)))(lambda: InplaceSliceViews())
case("bool_mask_index_put", lambda: (R(3, 4), torch.rand(3, 4) > 0.5, torch.tensor(7.0)))(
    lambda: BoolMaskIndexPut())
case("noncontig_channels_last_inputs", lambda: (R(4, 5).t(), R(5, 6)[:, ::2],
                                                R(5, 3, 4, 4).contiguous(memory_format=torch.channels_last)))(
    lambda: NonContiguousInputs())
case("zero_size_dims", lambda: (R(3, 4), R(0, 4), torch.zeros(0, dtype=torch.long)))(lambda: ZeroSizeDims())
case("scalar_0d_tensors", lambda: (R(2, 3), torch.tensor(1.5), torch.tensor(3), torch.tensor(False)))(
    lambda: ScalarTensors())
case("dropout_train_backward_sgd", lambda: (R(4, 6), R(4, 3, 2, 2), torch.tensor([0, 1, 1, 0])), train=True)(
    lambda: DropoutTrainBackward())
case("hist_quantile_search_ops", lambda: (R(12), torch.tensor([0, 0, 2, 3, 3, 3])))(lambda: HistQuantileOps())


# ================================================================= more training idioms
class WGANWeightClip(nn.Module):
    """WGAN critic: weights clipped through .data in forward, RMS of the critic output."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))

    def forward(self, real, fake):
        for p in self.net.parameters():
            p.data.clamp_(-0.05, 0.05)
        return self.net(real).mean() - self.net(fake).mean()


class ClipGradNormStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x, y):
        loss = F.mse_loss(self.fc(x), y)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.parameters(), 0.1)
        return loss.detach(), norm, self.fc.weight.grad.clone()


class DistillationKD(nn.Module):
    """Knowledge distillation: teacher under no_grad, temperature-scaled KL + hard CE."""

    def __init__(self, T=3.0):
        super().__init__()
        self.teacher = nn.Linear(6, 4)
        self.student = nn.Linear(6, 4)
        self.T = T

    def forward(self, x, y):
        with torch.no_grad():
            t = self.teacher(x)
        s = self.student(x)
        kd = F.kl_div(F.log_softmax(s / self.T, -1), F.softmax(t / self.T, -1), reduction="batchmean") * self.T ** 2
        return 0.7 * kd + 0.3 * F.cross_entropy(s, y)


class DropPathBlock(nn.Module):
    """Stochastic depth: per-sample keep mask from torch.rand + floor_, residual scaled."""

    def __init__(self, p=0.3):
        super().__init__()
        self.p = p
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        keep = 1 - self.p
        mask = (keep + torch.rand(x.shape[0], 1, dtype=x.dtype)).floor_()
        return x + self.fc(x).div(keep) * mask


class MixtureDensity(nn.Module):
    def __init__(self, d=3, k=4):
        super().__init__()
        self.k = k
        self.head = nn.Linear(d, 3 * k)

    def forward(self, x, y):   # y (B,)
        logit_pi, mu, log_sigma = self.head(x).split(self.k, -1)
        log_sigma = log_sigma.clamp(-5, 5)
        log_pi = F.log_softmax(logit_pi, -1)
        lp = -0.5 * ((y[:, None] - mu) / log_sigma.exp()) ** 2 - log_sigma - 0.5 * math.log(2 * math.pi)
        return -torch.logsumexp(log_pi + lp, -1).mean(), (log_pi.exp() * mu).sum(-1)


class SoftArgmaxKeypoints(nn.Module):
    def __init__(self, beta=10.0):
        super().__init__()
        self.beta = beta
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):   # (B, 2, H, W) -> (B, K, 2)
        heat = self.conv(x)
        b, k, h, w = heat.shape
        prob = F.softmax(self.beta * heat.flatten(2), -1).view(b, k, h, w)
        ys, xs = torch.meshgrid(torch.arange(h, dtype=x.dtype), torch.arange(w, dtype=x.dtype), indexing="ij")
        return torch.stack([(prob * xs).sum((2, 3)), (prob * ys).sum((2, 3))], -1), heat.flatten(2).argmax(-1)


class RoIAffineCrop(nn.Module):
    """Crops boxes with affine_grid + grid_sample (spatial-transformer RoI pooling)."""

    def forward(self, feat, boxes):   # (1, C, H, W), (R, 4) normalized xyxy in [-1, 1]
        r = boxes.size(0)
        theta = feat.new_zeros(r, 2, 3)
        theta[:, 0, 0] = (boxes[:, 2] - boxes[:, 0]) / 2
        theta[:, 0, 2] = (boxes[:, 2] + boxes[:, 0]) / 2
        theta[:, 1, 1] = (boxes[:, 3] - boxes[:, 1]) / 2
        theta[:, 1, 2] = (boxes[:, 3] + boxes[:, 1]) / 2
        grid = F.affine_grid(theta, (r, feat.size(1), 3, 3), align_corners=False)
        return F.grid_sample(feat.expand(r, -1, -1, -1), grid, align_corners=False)


class SinkhornLog(nn.Module):
    def forward(self, cost, eps: float = 0.1, iters: int = 20):   # (B, N, M)
        b, n, m = cost.shape
        log_mu = torch.full((b, n), -math.log(n))
        log_nu = torch.full((b, m), -math.log(m))
        u = torch.zeros(b, n)
        v = torch.zeros(b, m)
        K = -cost / eps
        for _ in range(iters):
            u = log_mu - torch.logsumexp(K + v[:, None, :], 2)
            v = log_nu - torch.logsumexp(K + u[:, :, None], 1)
        P = torch.exp(K + u[:, :, None] + v[:, None, :])
        return P, (P * cost).sum((1, 2))


class TopKSparseAttention(nn.Module):
    def forward(self, q, k, v, topk: int = 2):
        s = q @ k.transpose(-1, -2)
        vals, idx = s.topk(topk, dim=-1)
        sparse = torch.full_like(s, float("-inf")).scatter(-1, idx, vals)
        return sparse.softmax(-1) @ v


class BYOLTargetEMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.online = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
        self.target = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
        for p in self.target.parameters():
            p.requires_grad_(False)

    def forward(self, a, b):
        with torch.no_grad():
            for po, pt in zip(self.online.parameters(), self.target.parameters()):
                pt.lerp_(po, 0.01)
            t = self.target(b)
        p = self.online(a)
        return 2 - 2 * F.cosine_similarity(p, t.detach(), dim=-1).mean()


class AliasingOutputs(nn.Module):
    """Returns views, detaches and clones of inputs and intermediates side by side; the caller writes to them."""

    def forward(self, x):
        y = x * 2
        outs = (x, x.detach(), x.clone(), y, y.view(-1), y.clone(), y + 0, x[0], y.t())
        outs[2].add_(1)
        outs[5].mul_(3)
        return outs


class ListToTensorFactories(nn.Module):
    def forward(self, x):
        w = x.new_tensor([0.2, 0.3, 0.5])
        c = torch.as_tensor([1, 2, 3], dtype=torch.long)
        return (x * w).sum(-1), c.float().mean(), torch.tensor(x.shape[0]) * 2, x.new_full((2,), 3.5), \
            torch.tensor([[1.0, 2.0]], dtype=x.dtype).expand(x.size(0), -1)


case("wgan_weight_clip_data", lambda: (R(4, 4), R(4, 4)))(lambda: WGANWeightClip())
case("clip_grad_norm_step", lambda: (R(4, 5), R(4, 3)), train=True)(lambda: ClipGradNormStep())
case("distillation_kd_no_grad_teacher", lambda: (R(5, 6), torch.tensor([0, 3, 1, 2, 3])))(
    lambda: DistillationKD())
case("drop_path_rand_floor_train", lambda: (R(6, 5),), train=True)(lambda: DropPathBlock())
case("mixture_density_nll", lambda: (R(5, 3), R(5)))(lambda: MixtureDensity())
case("soft_argmax_keypoints", lambda: (R(2, 2, 5, 6),))(lambda: SoftArgmaxKeypoints())
case("roi_affine_grid_crop", lambda: (R(1, 2, 6, 6), torch.tensor([[-1.0, -1.0, 0.0, 0.5], [-0.5, 0.0, 1.0, 1.0]])))(
    lambda: RoIAffineCrop())
case("sinkhorn_log_space", lambda: (torch.rand(2, 4, 5),))(lambda: SinkhornLog())
case("topk_sparse_attention", lambda: (R(2, 4, 3), R(2, 5, 3), R(2, 5, 3)))(lambda: TopKSparseAttention())
case("byol_target_lerp_ema_train", lambda: (R(4, 4), R(4, 4)), train=True)(lambda: BYOLTargetEMA())
case("aliasing_outputs_written", lambda: (R(3, 4),))(lambda: AliasingOutputs())
case("list_to_tensor_factories", lambda: (R(4, 3),))(lambda: ListToTensorFactories())


# ======================================================= hooks, grad modes, reductions
class HookedFeatureExtractor(nn.Module):
    """Forward hooks that keep activations (a dict of tensors) and count calls, one that
    replaces a submodule's output, and a pre-hook that rescales an input."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
        self.feats = {}
        self.hook_calls = 0
        self.body[1].register_forward_hook(self._keep)
        self.body[3].register_forward_hook(lambda m, i, o: o * 0.5 + i[0].sigmoid())
        self.body[2].register_forward_pre_hook(lambda m, args: (args[0] * 2.0,))

    def _keep(self, m, inp, out):
        self.hook_calls += 1
        self.feats["gelu"] = out.detach()

    def forward(self, x):
        y = self.body(x)
        return y, self.feats["gelu"].mean(0)


class HookKwargsAndRemoval(nn.Module):
    """A with_kwargs pre-hook that edits a keyword argument, and a hook that removes
    itself after its second call (a handle kept on the module)."""

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, scale=1.0):
            return self.fc(x) * scale

    def __init__(self):
        super().__init__()
        self.inner = self.Scaled()
        self.fired = 0
        self.inner.register_forward_pre_hook(self._scale_kw, with_kwargs=True)
        self.handle = self.inner.register_forward_hook(self._once_twice)

    def _scale_kw(self, m, args, kwargs):
        kwargs = dict(kwargs)
        kwargs["scale"] = kwargs.get("scale", 1.0) * 3.0
        return args, kwargs

    def _once_twice(self, m, i, o):
        self.fired += 1
        if self.fired >= 2:
            self.handle.remove()
        return o + 1.0

    def forward(self, x):
        return self.inner(x, scale=0.5).relu()


class WeightNormAudioTCN(nn.Module):
    """Temporal conv net for audio: weight-normalized Conv1d (parametrizations.weight_norm:
    the weight recomputed from original0/original1 on each access; the old
    nn.utils.weight_norm's module cannot be deep-copied, which the runner does), dilated
    causal Conv1d with chomp, GLU gates, residual and skip sums, global average pooling."""

    def __init__(self, c=6, layers=3):
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.inp = wn(nn.Conv1d(1, c, 1))
        self.dil = nn.ModuleList(wn(nn.Conv1d(c, 2 * c, 3, dilation=2 ** i, padding=2 * 2 ** i))
                                 for i in range(layers))
        self.res = nn.ModuleList(wn(nn.Conv1d(c, c, 1)) for _ in range(layers))
        self.out = nn.Conv1d(c, 4, 1)

    def forward(self, wav):    # (B, T)
        h = self.inp(wav.unsqueeze(1))
        skip = 0
        for conv, res in zip(self.dil, self.res):
            z = conv(h)[..., :h.size(-1)]          # chomp: causal
            z = F.glu(z, dim=1)
            skip = skip + z
            h = h + res(z)
        return self.out(F.relu(skip)).mean(-1)


class GradModeBlocks(nn.Module):
    """torch.no_grad / enable_grad / set_grad_enabled blocks nested inside forward: a
    teacher branch without grad, an enable_grad block inside it, a flag from training."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            t = self.a(x).tanh()
            with torch.enable_grad():
                u = self.b(t)
            inner_grad = u.requires_grad
        with torch.set_grad_enabled(self.training):
            v = self.b(x) * t
        return u + v, inner_grad, t.requires_grad, v.requires_grad


class ParamConstraintsNoGrad(nn.Module):
    """Constraints applied to parameters in place under no_grad before use: max-norm
    rows (renorm_), a learnable temperature clamped (CLIP's logit_scale), a scalar
    counter buffer bumped, then a forward that uses them."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.logit_scale = nn.Parameter(torch.tensor(5.0))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, img, txt):
        with torch.no_grad():
            self.fc.weight.renorm_(2, 0, 1.0)
            self.logit_scale.clamp_(0, math.log(20.0))
            self.steps += 1
        a = F.normalize(self.fc(img), dim=-1)
        b = F.normalize(self.fc(txt), dim=-1)
        logits = self.logit_scale.exp() * a @ b.t()
        labels = torch.arange(a.size(0))
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


class EinsumZoo(nn.Module):
    """einsum-heavy: bilinear scores, outer products, traces and diagonals (repeated
    indices), ellipsis batching, a three-operand contraction, tensor-train style chains."""

    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.randn(4, 5, 5) * 0.3)
        self.cores = nn.ParameterList([nn.Parameter(torch.randn(2, 3, 2) * 0.5) for _ in range(3)])

    def forward(self, x, y, m):   # x (B, 5), y (B, 5), m (B, 5, 5)
        bil = torch.einsum("bi,kij,bj->bk", x, self.W, y)
        outer = torch.einsum("bi,bj->bij", x, y)
        tr = torch.einsum("bii->b", m)
        diag = torch.einsum("bii->bi", m)
        batched = torch.einsum("...ij,...jk->...ik", m, outer)
        g = self.cores
        tt = torch.einsum("aib,bjc,ckd->aijkd", g[0], g[1], g[2]).reshape(2, 27, 2)
        return bil, tr + diag.sum(-1), batched.sum((-1, -2)), torch.einsum("aia->i", tt)


class MHAVariants(nn.Module):
    """nn.MultiheadAttention, seq-first, with a float attn_mask plus a key_padding_mask,
    add_bias_kv and add_zero_attn, weights per head (average_attn_weights=False)."""

    def __init__(self, d=8, h=2):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, h, add_bias_kv=True, add_zero_attn=True)

    def forward(self, x, pad):   # x (T, B, d), pad (B, T) bool
        t = x.size(0)
        causal = torch.triu(torch.full((t, t), float("-inf")), 1)
        pad = pad.float().masked_fill(pad, float("-inf"))   # float, as attn_mask (the module pads both)
        out, w = self.mha(x, x, x, attn_mask=causal, key_padding_mask=pad, average_attn_weights=False)
        return out, w


class TransformerDecoderNormFirst(nn.Module):
    """nn.TransformerDecoderLayer, norm_first, batch_first, causal tgt mask and a memory
    key padding mask (eval: dropout off)."""

    def __init__(self, d=8):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d, 2, 16, dropout=0.1, batch_first=True, norm_first=True)

    def forward(self, tgt, mem, mem_pad):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        return self.layer(tgt, mem, tgt_mask=mask, memory_key_padding_mask=mem_pad, tgt_is_causal=True)


class PackedBiLSTMUnsorted(nn.Module):
    """Bidirectional LSTM over packed unsorted sequences (enforce_sorted=False), unpacked
    to a fixed total_length, last valid states gathered per sequence."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed)
        out, lens = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        last = out[torch.arange(out.size(0)), lens - 1]
        return out, last, h.transpose(0, 1).reshape(x.size(0), -1), lens


class KimTextCNN(nn.Module):
    """Text CNN: embeddings, three Conv1d widths, max over time with padded positions
    filled with -inf (max and argmax), dropout in eval, a classifier."""

    def __init__(self, vocab=30, d=6, c=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(d, c, k, padding=k // 2) for k in (3, 4, 5))
        self.fc = nn.Linear(3 * c, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, ids):
        pad = ids == 0
        e = self.emb(ids).transpose(1, 2)
        pooled, where = [], []
        for conv in self.convs:
            h = F.relu(conv(e))[..., :ids.size(1)]
            h = h.masked_fill(pad.unsqueeze(1), float("-inf"))
            v, i = h.max(-1)
            pooled.append(v)
            where.append(i)
        return self.fc(self.drop(torch.cat(pooled, 1))), torch.stack(where, 1)


class PointNetMaxPool(nn.Module):
    """PointNet: a shared per-point MLP (Conv1d k=1, BatchNorm1d), a symmetric max over
    many points (with the critical point indices), min too, NaN points marking dropped
    ones propagating as eager's max does."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16), nn.ReLU(), nn.Conv1d(16, 32, 1))
        self.head = nn.Linear(64, 5)

    def forward(self, pts):   # (B, 3, N)
        f = self.mlp(pts)
        mx, crit = f.max(-1)
        mn = f.amin(-1)
        return self.head(torch.cat([mx, mn], 1)), crit, f.amax((0, 2))


class GPT2PresentKV(nn.Module):
    """A GPT-2 block returning its present (k, v) as split views of the qkv projection,
    a transposed k, and the attention output: outputs that are views of one tensor."""

    def __init__(self, d=8, h=2):
        super().__init__()
        self.h = h
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.c_attn(x)
        q, k, v = qkv.split(d, dim=2)
        heads = [z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True)
        y = self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return y, (heads[1], heads[2]), k.transpose(1, 2), qkv


class CheckpointedMLP(nn.Module):
    """Activation checkpointing (torch.utils.checkpoint, use_reentrant=False) of two
    blocks, a dropout-free recompute in training, a loss and its backward."""

    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(nn.Linear(5, 8), nn.SiLU(), nn.LayerNorm(8))
        self.b2 = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.head = nn.Linear(8, 2)

    def forward(self, x, y):
        from torch.utils.checkpoint import checkpoint
        h = checkpoint(self.b1, x, use_reentrant=False)
        h = checkpoint(self.b2, h, use_reentrant=False) + h
        loss = F.mse_loss(self.head(h), y)
        loss.backward()
        return loss.detach()


class NanSafeRunningMax(nn.Module):
    """Activation calibration with NaN-robust statistics: running amax/amin buffers
    updated in place (torch.maximum / fmax), per-channel max over non-finite-masked
    activations, a python float high-water mark from .item()."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.register_buffer("run_max", torch.full((4,), float("-inf")))
        self.register_buffer("run_min", torch.full((4,), float("inf")))
        self.peak = 0.0

    def forward(self, x):
        h = self.fc(x)
        finite = torch.isfinite(h)
        with torch.no_grad():
            self.run_max.copy_(torch.fmax(self.run_max, h.masked_fill(~finite, float("-inf")).amax(0)))
            self.run_min.copy_(torch.fmin(self.run_min, h.masked_fill(~finite, float("inf")).amin(0)))
        self.peak = max(self.peak, float(h.abs().nan_to_num(0.0).max()))
        scale = (self.run_max - self.run_min).clamp_min(1e-6)
        return (h - self.run_min) / scale, h.amax(1), h.max(0)


def _nan_rows():
    x = R(5, 6)
    x[1, 2] = float("nan")
    x[3] = float("nan")
    return (x,)


def _packed_inputs():
    return R(4, 5, 3), torch.tensor([3, 5, 1, 4])


def _ids():
    ids = torch.randint(1, 30, (3, 9))
    ids[0, 6:] = 0
    ids[2, 3:] = 0
    return (ids,)


def _points():
    p = R(2, 3, 300)
    p[1, :, 7] = float("nan")
    return (p,)


case("hooked_feature_extractor", lambda: (R(4, 5),))(lambda: HookedFeatureExtractor())
case("hook_kwargs_self_removal", lambda: (R(3, 4),))(lambda: HookKwargsAndRemoval())
case("weight_norm_audio_tcn", lambda: (R(2, 40),))(lambda: WeightNormAudioTCN())
case("weight_norm_audio_tcn_train", lambda: (R(2, 40),), train=True)(lambda: WeightNormAudioTCN())
case("grad_mode_blocks_eval", lambda: (R(3, 4),))(lambda: GradModeBlocks())
case("grad_mode_blocks_train", lambda: (R(3, 4),), train=True)(lambda: GradModeBlocks())
case("param_constraints_no_grad", lambda: (R(4, 6), R(4, 6)))(lambda: ParamConstraintsNoGrad())
case("einsum_zoo", lambda: (R(3, 5), R(3, 5), R(3, 5, 5)))(lambda: EinsumZoo())
case("mha_bias_kv_zero_attn_masks", lambda: (R(5, 2, 8), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])))(
    lambda: MHAVariants())
case("transformer_decoder_norm_first", lambda: (R(2, 4, 8), R(2, 6, 8), torch.tensor([[False] * 6, [False] * 4 + [True] * 2])))(
    lambda: TransformerDecoderNormFirst())
case("packed_bilstm_unsorted", _packed_inputs)(lambda: PackedBiLSTMUnsorted())
case("kim_text_cnn_max_over_time", _ids)(lambda: KimTextCNN())
case("pointnet_max_pool_nan", _points)(lambda: PointNetMaxPool())
case("gpt2_present_kv_views", lambda: (R(2, 5, 8),))(lambda: GPT2PresentKV())
case("checkpointed_mlp_backward", lambda: (R(4, 5), R(4, 2)), train=True)(lambda: CheckpointedMLP())
case("nan_safe_running_max", _nan_rows)(lambda: NanSafeRunningMax())
