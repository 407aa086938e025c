"""Held-out models, set 2: hand-written torch models of families that bench/heldout.py's transformers
architectures (and the other benchmarks) leave out, each written the way its public reference
implementation is written (recurrent seq2seq, diffusion, VAEs, graph networks, state-space scans,
RWKV, point clouds, audio, detection, recommendation, implicit neural representations, capsules...).

Same runner, report and options as bench/heldout.py (its main() with this file's cases):

    python bench/heldout2.py --device cpu --dtypes fp32
    python bench/heldout2.py --device cpu --dtypes bf16
    python bench/heldout2.py --device cpu --dtypes fp32 --train     # loss and every parameter's .grad
    python bench/heldout2.py --device cpu --dtypes fp32 --models gcn,gat --json /tmp/h2.jsonl

Models (CPU sizes; `big`: GPU sizes):
  lstm_attn_seq2seq  LSTM encoder over packed sequences, Bahdanau attention, LSTMCell decoder loop
  gru_seq2seq        bidirectional GRU encoder, Luong (general) attention, GRU decoder, teacher forcing
  diffusion_unet     sinusoidal timestep embedding, GroupNorm + SiLU resblocks, cross-attention, down/up
  ddpm_sample        a DDPM ancestral sampling loop (4 steps) over a small eps-net, noise from a seeded generator
  vae                convolutional VAE: reparameterization with a seeded generator, BCE + KL loss
  vq_vae             VQ-VAE: nearest codebook entry (argmin of distances), straight-through estimator
  gcn                Kipf & Welling GCN: symmetric-normalized message passing by index_add_
  gat                GAT: per-edge attention, softmax over incoming edges (scatter_reduce amax), index_add_
  mamba_loop         Mamba selective scan as a Python loop over time (mamba-minimal)
  mamba_cumsum       the same selective scan through cumsum of log-decays (segment sums, masked exp)
  rwkv               RWKV-4 block: token shift, time-mixing WKV recurrence (stable max trick), channel mixing
  gmlp               gMLP: spatial gating unit (token-mixing projection of half the channels)
  conformer_relpos   Conformer block: macaron FFNs, rel-pos MHSA (Transformer-XL rel_shift), conv module
  pointnet           PointNet classifier: T-Net input transform, shared Conv1d MLP, max pooling
  wavenet            WaveNet: causal dilated Conv1d, gated tanh * sigmoid, residual + skip
  retina_head        RetinaNet-style head: conv towers, anchor box decoding, sigmoid focal loss
  dlrm               DLRM: EmbeddingBag (offsets), bottom MLP, pairwise dot interaction (triu), top MLP
  nerf               NeRF: positional encoding, skip-connected MLP, volume rendering (cumprod transmittance)
  transformer_xl     Transformer-XL layer with memory: relative attention (r_w_bias, r_r_bias, rel_shift)
  capsnet            CapsNet: primary capsules, squash, 3 iterations of dynamic routing
  tcn                TCN: weight-normed dilated causal convs, Chomp1d, residual blocks
  siren              SIREN: sine layers (w0 = 30) with its uniform init
  style_transfer     Johnson et al. transformer net: reflection pad, InstanceNorm, residual, upsample conv
  espcn              ESPCN super-resolution: tanh convs + PixelShuffle
  clip_loss          CLIP-style contrastive loss: image / text encoders, EOT pooling, logit_scale.exp()
  hyena_fftconv      H3 / Hyena long convolution through rfft / irfft with gating
  stn                spatial transformer network: localization net, affine_grid + grid_sample
  convlstm           ConvLSTM cell unrolled over time
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import heldout  # noqa: E402  (its runner, report format and options)


# -- recurrent seq2seq --------------------------------------------------------------------------------

class BahdanauAttention(nn.Module):
    def __init__(self, hid):
        super().__init__()
        self.W1, self.W2, self.v = nn.Linear(hid, hid), nn.Linear(hid, hid), nn.Linear(hid, 1, bias=False)

    def forward(self, query, keys, mask):
        scores = self.v(torch.tanh(self.W1(query).unsqueeze(1) + self.W2(keys))).squeeze(-1)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), keys).squeeze(1), weights


class LSTMAttnSeq2Seq(nn.Module):
    """Encoder over packed padded sequences, decoder unrolled with an LSTMCell and teacher forcing."""

    def __init__(self, vocab=500, emb=32, hid=64):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(vocab, emb, padding_idx=0), nn.Embedding(vocab, emb)
        self.encoder = nn.LSTM(emb, hid, batch_first=True)
        self.attn = BahdanauAttention(hid)
        self.cell = nn.LSTMCell(emb + hid, hid)
        self.out = nn.Linear(2 * hid, vocab)

    def forward(self, src, src_lens, tgt):
        packed = pack_padded_sequence(self.src_emb(src), src_lens.cpu(), batch_first=True, enforce_sorted=False)
        enc, (h, c) = self.encoder(packed)
        enc, _ = pad_packed_sequence(enc, batch_first=True, total_length=src.size(1))
        mask = torch.arange(src.size(1), device=src.device).unsqueeze(0) < src_lens.unsqueeze(1)
        h, c = h[0], c[0]
        ctx = torch.zeros_like(h)
        logits = []
        for t in range(tgt.size(1)):
            h, c = self.cell(torch.cat([self.tgt_emb(tgt[:, t]), ctx], dim=-1), (h, c))
            ctx, _ = self.attn(h, enc, mask)
            logits.append(self.out(torch.cat([h, ctx], dim=-1)))
        return torch.stack(logits, dim=1)


class GRUSeq2Seq(nn.Module):
    def __init__(self, vocab=500, emb=32, hid=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.encoder = nn.GRU(emb, hid, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hid, hid)
        self.decoder = nn.GRU(emb, hid, batch_first=True)
        self.attn_W = nn.Linear(hid, 2 * hid, bias=False)   # Luong "general"
        self.concat = nn.Linear(3 * hid, hid)
        self.out = nn.Linear(hid, vocab)

    def forward(self, src, tgt):
        enc, h = self.encoder(self.emb(src))
        h = torch.tanh(self.bridge(torch.cat([h[0], h[1]], dim=-1))).unsqueeze(0)
        dec, _ = self.decoder(self.emb(tgt), h)
        scores = torch.bmm(self.attn_W(dec), enc.transpose(1, 2))
        ctx = torch.bmm(scores.softmax(-1), enc)
        return self.out(torch.tanh(self.concat(torch.cat([dec, ctx], dim=-1))))


# -- diffusion ------------------------------------------------------------------------------------------

def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim, groups=8):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2, self.conv2 = nn.GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.dropout(F.silu(self.norm2(h)), 0.0, self.training))
        return self.skip(x) + h


class CrossAttention(nn.Module):
    def __init__(self, dim, ctx_dim, heads=4):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.norm = nn.GroupNorm(8, dim)
        self.q, self.k, self.v = nn.Linear(dim, dim, bias=False), nn.Linear(ctx_dim, dim, bias=False), \
            nn.Linear(ctx_dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, ctx):
        b, c, hh, ww = x.shape
        h = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = self.q(h), self.k(ctx), self.v(ctx)
        q, k, v = (t.reshape(b, -1, self.heads, c // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = (q @ k.transpose(-2, -1)) * self.scale
        out = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, hh * ww, c)
        return x + self.proj(out).transpose(1, 2).reshape(b, c, hh, ww)


class DiffusionUNet(nn.Module):
    def __init__(self, cin=4, ch=32, ctx_dim=32):
        super().__init__()
        tdim = 4 * ch
        self.ch = ch
        self.time_mlp = nn.Sequential(nn.Linear(ch, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(cin, ch, 3, padding=1)
        self.down1, self.attn1 = ResBlock(ch, ch, tdim), CrossAttention(ch, ctx_dim)
        self.downsample = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.down2, self.attn2 = ResBlock(ch, 2 * ch, tdim), CrossAttention(2 * ch, ctx_dim)
        self.mid = ResBlock(2 * ch, 2 * ch, tdim)
        self.up2 = ResBlock(4 * ch, ch, tdim)
        self.upconv = nn.Conv2d(ch, ch, 3, padding=1)
        self.up1 = ResBlock(2 * ch, ch, tdim)
        self.out = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, cin, 3, padding=1))

    def forward(self, x, t, ctx):
        temb = self.time_mlp(timestep_embedding(t, self.ch).to(x.dtype))
        h0 = self.attn1(self.down1(self.inp(x), temb), ctx)
        h1 = self.attn2(self.down2(self.downsample(h0), temb), ctx)
        h = self.mid(h1, temb)
        h = self.up2(torch.cat([h, h1], dim=1), temb)
        h = self.upconv(F.interpolate(h, scale_factor=2, mode="nearest"))
        h = self.up1(torch.cat([h, h0], dim=1), temb)
        return self.out(h)


class DDPMSampler(nn.Module):
    """Ancestral sampling x_{t-1} = 1/sqrt(a_t) (x_t - b_t / sqrt(1 - abar_t) eps) + sigma_t z,
    over the last `steps` timesteps of a linear schedule, z from a generator seeded per call."""

    def __init__(self, steps=4, T=1000, ch=4):
        super().__init__()
        self.steps = steps
        betas = torch.linspace(1e-4, 0.02, T)
        alphas = 1.0 - betas
        self.register_buffer("betas", betas)
        self.register_buffer("alphas", alphas)
        self.register_buffer("alphas_cumprod", torch.cumprod(alphas, 0))
        self.eps = nn.Sequential(nn.Conv2d(ch + 1, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU(),
                                 nn.Conv2d(32, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU(),
                                 nn.Conv2d(32, ch, 3, padding=1))

    def forward(self, x):
        g = torch.Generator(device=x.device).manual_seed(1234)
        T = self.betas.shape[0]
        for i in reversed(range(T - self.steps, T)):
            tmap = torch.full_like(x[:, :1], i / T)
            eps = self.eps(torch.cat([x, tmap], dim=1))
            a, ab, b = self.alphas[i], self.alphas_cumprod[i], self.betas[i]
            mean = (x - b / torch.sqrt(1 - ab) * eps) / torch.sqrt(a)
            if i > 0:
                z = torch.randn(x.shape, generator=g, device=x.device, dtype=x.dtype)
                x = mean + torch.sqrt(b) * z
            else:
                x = mean
        return x


class VAE(nn.Module):
    def __init__(self, zdim=16):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 16, 4, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 4, 2, 1), nn.ReLU(),
                                 nn.Flatten())
        self.mu, self.logvar = nn.Linear(32 * 7 * 7, zdim), nn.Linear(32 * 7 * 7, zdim)
        self.dec_fc = nn.Linear(zdim, 32 * 7 * 7)
        self.dec = nn.Sequential(nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(16, 1, 4, 2, 1))

    def reparameterize(self, mu, logvar, g):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn(std.shape, generator=g, dtype=std.dtype, device=std.device)
        return mu + eps * std

    def forward(self, x):
        g = torch.Generator(device=x.device).manual_seed(0)
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = self.reparameterize(mu, logvar, g)
        recon = torch.sigmoid(self.dec(self.dec_fc(z).view(-1, 32, 7, 7)))
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return torch.cat([recon.flatten(1), ((bce + kld) / x.numel()).expand(x.shape[0], 1)], dim=1)


class VQVAE(nn.Module):
    def __init__(self, K=64, D=16, beta=0.25):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 32, 4, 2, 1), nn.ReLU(), nn.Conv2d(32, D, 3, 1, 1))
        self.codebook = nn.Embedding(K, D)
        self.codebook.weight.data.uniform_(-1 / K, 1 / K)
        self.dec = nn.Sequential(nn.Conv2d(D, 32, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(32, 3, 4, 2, 1))
        self.beta = beta

    def forward(self, x):
        z = self.enc(x).permute(0, 2, 3, 1).contiguous()
        flat = z.view(-1, z.shape[-1])
        d = (flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.codebook.weight.t()
             + self.codebook.weight.pow(2).sum(1))
        idx = d.argmin(1)
        zq = self.codebook(idx).view_as(z)
        loss = F.mse_loss(zq, z.detach()) + self.beta * F.mse_loss(z, zq.detach())
        zq = z + (zq - z).detach()
        recon = self.dec(zq.permute(0, 3, 1, 2))
        return recon + loss


# -- graph networks -------------------------------------------------------------------------------------

class GCNLayer(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n, device=x.device)
        src = torch.cat([edge_index[0], loops])
        dst = torch.cat([edge_index[1], loops])
        deg = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
        dinv = deg.pow(-0.5)
        dinv = dinv.masked_fill(dinv == float("inf"), 0)
        norm = dinv[src] * dinv[dst]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * norm.unsqueeze(-1))
        return out + self.bias


class GCN(nn.Module):
    def __init__(self, cin=32, hid=64, classes=8):
        super().__init__()
        self.c1, self.c2 = GCNLayer(cin, hid), GCNLayer(hid, classes)

    def forward(self, x, edge_index):
        h = F.dropout(F.relu(self.c1(x, edge_index)), 0.5, self.training)
        return F.log_softmax(self.c2(h, edge_index), dim=1)


class GATLayer(nn.Module):
    def __init__(self, cin, cout, heads, concat=True):
        super().__init__()
        self.h, self.c, self.concat = heads, cout, concat
        self.lin = nn.Linear(cin, heads * cout, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, cout) * 0.3)
        self.att_dst = nn.Parameter(torch.randn(1, heads, cout) * 0.3)

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n, device=x.device)
        src, dst = torch.cat([edge_index[0], loops]), torch.cat([edge_index[1], loops])
        h = self.lin(x).view(n, self.h, self.c)
        a_src, a_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)
        e = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)                       # [E, H]
        emax = torch.full((n, self.h), float("-inf"), dtype=e.dtype, device=e.device)
        emax = emax.scatter_reduce(0, dst.unsqueeze(-1).expand_as(e), e, reduce="amax", include_self=True)
        w = (e - emax[dst]).exp()
        denom = torch.zeros(n, self.h, dtype=e.dtype, device=e.device).index_add_(0, dst, w)
        alpha = w / (denom[dst] + 1e-16)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * alpha.unsqueeze(-1))
        return out.reshape(n, -1) if self.concat else out.mean(1)


class GAT(nn.Module):
    def __init__(self, cin=32, hid=16, heads=4, classes=8):
        super().__init__()
        self.g1, self.g2 = GATLayer(cin, hid, heads), GATLayer(hid * heads, classes, 1, concat=False)

    def forward(self, x, edge_index):
        return F.log_softmax(self.g2(F.elu(self.g1(x, edge_index)), edge_index), dim=-1)


# -- state-space / linear recurrences -------------------------------------------------------------------

class MambaBlock(nn.Module):
    """mamba-minimal: in_proj, causal depthwise conv, x_proj -> (delta, B, C), selective scan, gate."""

    def __init__(self, d_model=64, d_state=8, expand=2, d_conv=4, scan="loop"):
        super().__init__()
        d_inner = expand * d_model
        self.dt_rank, self.d_state, self.scan = math.ceil(d_model / 16), d_state, scan
        self.norm = nn.LayerNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner)
        A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def selective_scan_loop(self, u, delta, A, B, C, D):
        b, seqlen, d_in = u.shape
        deltaA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
        deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
        x = torch.zeros((b, d_in, A.shape[1]), device=u.device, dtype=u.dtype)
        ys = []
        for i in range(seqlen):
            x = deltaA[:, i] * x + deltaB_u[:, i]
            ys.append(torch.einsum("bdn,bn->bd", x, C[:, i, :]))
        return torch.stack(ys, dim=1) + u * D

    def selective_scan_cumsum(self, u, delta, A, B, C, D):
        # h_t = sum_{s<=t} exp(sum_{s<r<=t} delta_r A) delta_s B_s u_s, through cumulative log-decays
        dA = torch.einsum("bld,dn->bldn", delta, A)                      # log decay per step (<= 0)
        cum = torch.cumsum(dA, dim=1)                                      # [b, l, d, n]
        seg = cum.unsqueeze(2) - cum.unsqueeze(1)                          # [b, t, s, d, n]: cum_t - cum_s
        seqlen = u.shape[1]
        causal = torch.tril(torch.ones(seqlen, seqlen, dtype=torch.bool, device=u.device))
        seg = seg.masked_fill(~causal[None, :, :, None, None], float("-inf"))
        dBu = torch.einsum("bld,bln,bld->bldn", delta, B, u)
        h = torch.einsum("btsdn,bsdn->btdn", torch.exp(seg), dBu)
        return torch.einsum("btdn,btn->btd", h, C) + u * D

    def forward(self, x):
        res = x
        x, z = self.in_proj(self.norm(x)).chunk(2, dim=-1)
        seqlen = x.shape[1]
        x = F.silu(self.conv1d(x.transpose(1, 2))[:, :, :seqlen].transpose(1, 2))
        A = -torch.exp(self.A_log.float()).to(x.dtype)
        delta, B, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(delta))
        scan = self.selective_scan_loop if self.scan == "loop" else self.selective_scan_cumsum
        y = scan(x, delta, A, B, C, self.D)
        return res + self.out_proj(y * F.silu(z))


class Mamba(nn.Module):
    def __init__(self, scan, vocab=500, d=64, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(MambaBlock(d, scan=scan) for _ in range(layers))
        self.norm_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm_f(x)


class RWKVBlock(nn.Module):
    """RWKV-4 (the 'RWKV_in_150_lines' form, batched): token shift by ZeroPad2d, WKV with the max trick."""

    def __init__(self, d=64, ffn=256):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_decay = nn.Parameter(torch.linspace(-3, 1, d))
        self.time_first = nn.Parameter(torch.full((d,), math.log(0.3)))
        self.time_mix_k = nn.Parameter(torch.rand(1, 1, d))
        self.time_mix_v = nn.Parameter(torch.rand(1, 1, d))
        self.time_mix_r = nn.Parameter(torch.rand(1, 1, d))
        self.key, self.value, self.receptance = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.output = nn.Linear(d, d, bias=False)
        self.cm_mix_k, self.cm_mix_r = nn.Parameter(torch.rand(1, 1, d)), nn.Parameter(torch.rand(1, 1, d))
        self.cm_key, self.cm_value = nn.Linear(d, ffn, bias=False), nn.Linear(ffn, d, bias=False)
        self.cm_receptance = nn.Linear(d, d, bias=False)

    def wkv(self, w, u, k, v):
        b, t, c = k.shape
        aa = torch.zeros(b, c, dtype=k.dtype, device=k.device)
        bb = torch.zeros_like(aa)
        pp = torch.full_like(aa, -1e38)
        out = []
        for i in range(t):
            kk, vv = k[:, i], v[:, i]
            ww = u + kk
            p = torch.maximum(pp, ww)
            e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
            out.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
            ww = pp + w
            p = torch.maximum(ww, kk)
            e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
            aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
        return torch.stack(out, dim=1)

    def forward(self, x):
        h = self.ln1(x)
        xx = self.time_shift(h)
        k = self.key(h * self.time_mix_k + xx * (1 - self.time_mix_k))
        v = self.value(h * self.time_mix_v + xx * (1 - self.time_mix_v))
        r = torch.sigmoid(self.receptance(h * self.time_mix_r + xx * (1 - self.time_mix_r)))
        x = x + self.output(r * self.wkv(-torch.exp(self.time_decay), self.time_first, k, v))
        h = self.ln2(x)
        xx = self.time_shift(h)
        k = torch.square(torch.relu(self.cm_key(h * self.cm_mix_k + xx * (1 - self.cm_mix_k))))
        r = torch.sigmoid(self.cm_receptance(h * self.cm_mix_r + xx * (1 - self.cm_mix_r)))
        return x + r * self.cm_value(k)


class RWKV(nn.Module):
    def __init__(self, vocab=500, d=64, layers=2):
        super().__init__()
        self.emb, self.ln0 = nn.Embedding(vocab, d), nn.LayerNorm(d)
        self.blocks = nn.ModuleList(RWKVBlock(d) for _ in range(layers))
        self.ln_out, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.ln0(self.emb(ids))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_out(x))


class SpatialGatingUnit(nn.Module):
    def __init__(self, d_ffn, seq_len):
        super().__init__()
        self.norm = nn.LayerNorm(d_ffn // 2)
        self.proj = nn.Conv1d(seq_len, seq_len, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.ones_(self.proj.bias)

    def forward(self, x):
        u, v = x.chunk(2, dim=-1)
        return u * self.proj(self.norm(v))


class GMLP(nn.Module):
    def __init__(self, d=64, d_ffn=256, seq_len=32, layers=2, vocab=500):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(norm=nn.LayerNorm(d), fc1=nn.Linear(d, d_ffn),
                                                       sgu=SpatialGatingUnit(d_ffn, seq_len),
                                                       fc2=nn.Linear(d_ffn // 2, d))) for _ in range(layers))
        with torch.no_grad():   # the zero init makes the gate a constant: a random start, as after training
            for blk in self.blocks:
                blk["sgu"].proj.weight.normal_(0, 0.05)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = x + blk["fc2"](blk["sgu"](F.gelu(blk["fc1"](blk["norm"](x)))))
        return x


# -- relative-position attention -------------------------------------------------------------------------

def rel_shift(x):
    """Transformer-XL's _rel_shift: [b, h, q, k] scores against relative positions, re-indexed."""
    b, h, q, k = x.shape
    x = F.pad(x, (1, 0))
    x = x.view(b, h, k + 1, q)
    return x[:, :, 1:].view(b, h, q, k)


class RelPositionalEncoding(nn.Module):
    def __init__(self, d):
        super().__init__()
        inv_freq = 1 / (10000 ** (torch.arange(0.0, d, 2.0) / d))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, klen, dtype):
        pos = torch.arange(klen - 1, -1, -1.0, device=self.inv_freq.device)
        sinusoid = torch.outer(pos, self.inv_freq)
        return torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1).to(dtype)


class RelMultiHeadAttn(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.r_net = nn.Linear(d, d, bias=False)
        self.r_w_bias = nn.Parameter(torch.randn(heads, self.dh) * 0.02)
        self.r_r_bias = nn.Parameter(torch.randn(heads, self.dh) * 0.02)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x, r, mems=None, causal=False):
        b, q, d = x.shape
        cat = x if mems is None else torch.cat([mems, x], dim=1)
        qkv = self.qkv(cat)
        wq, wk, wv = qkv.chunk(3, dim=-1)
        wq = wq[:, -q:]
        k = cat.shape[1]
        wq = wq.view(b, q, self.h, self.dh)
        wk, wv = wk.view(b, k, self.h, self.dh), wv.view(b, k, self.h, self.dh)
        rk = self.r_net(r).view(k, self.h, self.dh)
        ac = torch.einsum("bqnd,bknd->bnqk", wq + self.r_w_bias, wk)
        bd = rel_shift(torch.einsum("bqnd,knd->bnqk", wq + self.r_r_bias, rk))
        score = (ac + bd) * self.dh ** -0.5
        if causal:
            mask = torch.triu(torch.ones(q, k, dtype=torch.bool, device=x.device), diagonal=1 + k - q)
            score = score.masked_fill(mask, float("-inf"))
        prob = F.softmax(score.float(), dim=-1).to(score.dtype)
        out = torch.einsum("bnqk,bknd->bqnd", prob, wv).reshape(b, q, d)
        return self.o(out)


class TransformerXL(nn.Module):
    """Two Transformer-XL layers over a segment and the previous segment's memory (detached)."""

    def __init__(self, vocab=500, d=64, heads=4, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = RelPositionalEncoding(d)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(attn=RelMultiHeadAttn(d, heads), ln1=nn.LayerNorm(d),
                                                       ff=nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(),
                                                                        nn.Linear(4 * d, d)),
                                                       ln2=nn.LayerNorm(d))) for _ in range(layers))

    def forward(self, ids, mem_ids):
        mems = []
        h = self.emb(mem_ids)
        with torch.no_grad():   # memory: the previous segment's hidden states, no gradient
            r = self.pos(h.shape[1], h.dtype)
            for layer in self.layers:
                mems.append(h)
                h = layer["ln1"](h + layer["attn"](h, r, causal=True))
                h = layer["ln2"](h + layer["ff"](h))
        h = self.emb(ids)
        r = self.pos(h.shape[1] + mems[0].shape[1], h.dtype)
        for layer, mem in zip(self.layers, mems):
            h = layer["ln1"](h + layer["attn"](h, r, mems=mem.detach(), causal=True))
            h = layer["ln2"](h + layer["ff"](h))
        return h


class ConformerBlock(nn.Module):
    def __init__(self, d=64, heads=4, kernel=15):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        self.ln_att, self.attn, self.pos = nn.LayerNorm(d), RelMultiHeadAttn(d, heads), RelPositionalEncoding(d)
        self.ln_conv = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.ln_out = nn.LayerNorm(d)

    def forward(self, x):
        x = x + 0.5 * self.ff1(x)
        h = self.ln_att(x)
        x = x + self.attn(h, self.pos(x.shape[1], x.dtype))
        h = self.ln_conv(x).transpose(1, 2)
        h = F.glu(self.pw1(h), dim=1)
        h = self.pw2(F.silu(self.bn(self.dw(h))))
        x = x + h.transpose(1, 2)
        x = x + 0.5 * self.ff2(x)
        return self.ln_out(x)


class Conformer(nn.Module):
    def __init__(self, feats=40, d=64, layers=2):
        super().__init__()
        self.subsample = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.proj = nn.Linear(d * (((feats - 1) // 2 - 1) // 2), d)
        self.blocks = nn.ModuleList(ConformerBlock(d) for _ in range(layers))

    def forward(self, feats):
        x = self.subsample(feats.unsqueeze(1))           # [b, d, t', f']
        b, c, t, f = x.shape
        x = self.proj(x.transpose(1, 2).reshape(b, t, c * f))
        for blk in self.blocks:
            x = blk(x)
        return x


# -- point clouds, audio, detection, recommendation --------------------------------------------------------

class TNet(nn.Module):
    def __init__(self, k=3):
        super().__init__()
        self.k = k
        self.conv = nn.Sequential(nn.Conv1d(k, 64, 1), nn.BatchNorm1d(64), nn.ReLU(),
                                  nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(),
                                  nn.Conv1d(128, 256, 1), nn.BatchNorm1d(256), nn.ReLU())
        self.fc = nn.Sequential(nn.Linear(256, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, k * k))

    def forward(self, x):
        h = torch.max(self.conv(x), 2, keepdim=True)[0].view(-1, 256)
        iden = torch.eye(self.k, dtype=x.dtype, device=x.device).flatten().unsqueeze(0)
        return (self.fc(h) + iden).view(-1, self.k, self.k)


class PointNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stn = TNet(3)
        self.conv1 = nn.Sequential(nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU())
        self.fstn = TNet(64)
        self.conv2 = nn.Sequential(nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(),
                                   nn.Conv1d(128, 256, 1), nn.BatchNorm1d(256))
        self.head = nn.Sequential(nn.Linear(256, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.3),
                                  nn.Linear(128, classes))

    def forward(self, x):
        x = torch.bmm(x.transpose(2, 1), self.stn(x)).transpose(2, 1)
        x = self.conv1(x)
        x = torch.bmm(x.transpose(2, 1), self.fstn(x)).transpose(2, 1)
        x = torch.max(self.conv2(x), 2)[0]
        return F.log_softmax(self.head(x), dim=1)


class WaveNet(nn.Module):
    def __init__(self, res=32, skip=64, classes=64, layers=8):
        super().__init__()
        self.dil = [2 ** (i % 4) for i in range(layers)]
        self.inp = nn.Conv1d(1, res, 2)
        self.filt = nn.ModuleList(nn.Conv1d(res, res, 2, dilation=d) for d in self.dil)
        self.gate = nn.ModuleList(nn.Conv1d(res, res, 2, dilation=d) for d in self.dil)
        self.resid = nn.ModuleList(nn.Conv1d(res, res, 1) for _ in self.dil)
        self.skip = nn.ModuleList(nn.Conv1d(res, skip, 1) for _ in self.dil)
        self.end1, self.end2 = nn.Conv1d(skip, skip, 1), nn.Conv1d(skip, classes, 1)

    def forward(self, x):
        x = self.inp(F.pad(x, (1, 0)))
        skips = 0
        for d, f, g, r, s in zip(self.dil, self.filt, self.gate, self.resid, self.skip):
            xp = F.pad(x, (d, 0))                          # causal: left padding by the dilation
            z = torch.tanh(f(xp)) * torch.sigmoid(g(xp))
            skips = skips + s(z)
            x = x + r(z)
        return self.end2(F.relu(self.end1(F.relu(skips))))


def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0):
    """torchvision.ops.sigmoid_focal_loss, reduction='sum'."""
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * loss).sum()


class RetinaHead(nn.Module):
    def __init__(self, cin=64, anchors=3, classes=8, stride=8):
        super().__init__()
        self.A, self.K, self.stride = anchors, classes, stride
        self.backbone = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, cin, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(cin, cin, 3, 2, 1), nn.ReLU())
        tower = lambda: nn.Sequential(*[m for _ in range(2) for m in (nn.Conv2d(cin, cin, 3, padding=1),  # noqa
                                                                       nn.GroupNorm(8, cin), nn.ReLU())])
        self.cls_tower, self.box_tower = tower(), tower()
        self.cls_logits = nn.Conv2d(cin, anchors * classes, 3, padding=1)
        self.bbox_pred = nn.Conv2d(cin, anchors * 4, 3, padding=1)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - 0.01) / 0.01))
        self.register_buffer("sizes", torch.tensor([16.0, 24.0, 32.0]))

    def anchors(self, h, w, dtype, device):
        ys, xs = torch.meshgrid(torch.arange(h, device=device, dtype=dtype),
                                torch.arange(w, device=device, dtype=dtype), indexing="ij")
        ctr = torch.stack([xs, ys], -1).reshape(-1, 1, 2).add(0.5).mul(self.stride)   # [HW, 1, 2]
        wh = self.sizes.to(dtype)[None, :, None].expand(1, self.A, 2)
        return torch.cat([ctr - wh / 2, ctr + wh / 2], -1).reshape(-1, 4)          # [HW*A, 4]

    def decode(self, deltas, anchors, clip=math.log(1000.0 / 16)):
        w, h = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        cx, cy = anchors[:, 0] + 0.5 * w, anchors[:, 1] + 0.5 * h
        dx, dy, dw, dh = deltas.unbind(-1)
        dw, dh = dw.clamp(max=clip), dh.clamp(max=clip)
        pcx, pcy, pw, ph = dx * w + cx, dy * h + cy, torch.exp(dw) * w, torch.exp(dh) * h
        return torch.stack([pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw, pcy + 0.5 * ph], dim=-1)

    def forward(self, images, targets):
        f = self.backbone(images)
        b, _, h, w = f.shape
        cls = self.cls_logits(self.cls_tower(f)).view(b, self.A, self.K, h, w).permute(0, 3, 4, 1, 2)
        cls = cls.reshape(b, -1, self.K)
        box = self.bbox_pred(self.box_tower(f)).view(b, self.A, 4, h, w).permute(0, 3, 4, 1, 2).reshape(b, -1, 4)
        boxes = self.decode(box, self.anchors(h, w, f.dtype, f.device))
        num_fg = targets.sum().clamp(min=1)
        loss = sigmoid_focal_loss(cls, targets) / num_fg
        return torch.cat([boxes.flatten(1) / images.shape[-1], cls.sigmoid().flatten(1),
                          loss.expand(b, 1)], dim=1)


class DLRM(nn.Module):
    def __init__(self, dense=13, tables=(100, 200, 300, 50), d=16):
        super().__init__()
        self.embs = nn.ModuleList(nn.EmbeddingBag(n, d, mode="sum") for n in tables)
        for n, emb in zip(tables, self.embs):   # the reference's init: U(-1/sqrt(n), 1/sqrt(n))
            nn.init.uniform_(emb.weight, -n ** -0.5, n ** -0.5)
        self.bot = nn.Sequential(nn.Linear(dense, 64), nn.ReLU(), nn.Linear(64, d), nn.ReLU())
        n = len(tables) + 1
        self.register_buffer("li", torch.triu_indices(n, n, offset=1)[0], persistent=False)
        self.register_buffer("lj", torch.triu_indices(n, n, offset=1)[1], persistent=False)
        self.top = nn.Sequential(nn.Linear(d + n * (n - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, dense, indices, offsets):
        x = self.bot(dense)
        ly = [emb(indices[k], offsets[k]) for k, emb in enumerate(self.embs)]
        T = torch.cat([x] + ly, dim=1).view(x.shape[0], -1, x.shape[1])
        Z = torch.bmm(T, T.transpose(1, 2))
        Zflat = Z[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, Zflat], dim=1)))


# -- implicit representations ---------------------------------------------------------------------------

class NeRF(nn.Module):
    def __init__(self, D=8, W=64, L_x=10, L_d=4, skips=(4,)):
        super().__init__()
        self.L_x, self.L_d, self.skips = L_x, L_d, skips
        cx, cd = 3 + 6 * L_x, 3 + 6 * L_d
        self.pts = nn.ModuleList([nn.Linear(cx, W)] + [nn.Linear(W + (cx if i in skips else 0), W)
                                                       for i in range(1, D)])
        self.feature, self.alpha = nn.Linear(W, W), nn.Linear(W, 1)
        self.views, self.rgb = nn.Linear(W + cd, W // 2), nn.Linear(W // 2, 3)

    @staticmethod
    def embed(x, L):
        out = [x]
        for i in range(L):
            for fn in (torch.sin, torch.cos):
                out.append(fn(2.0 ** i * x))
        return torch.cat(out, -1)

    def forward(self, rays_o, rays_d, z_vals):
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]   # [R, S, 3]
        viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
        ex = self.embed(pts, self.L_x)
        ed = self.embed(viewdirs[:, None].expand(pts.shape), self.L_d)
        h = ex
        for i, lin in enumerate(self.pts):
            if i in self.skips:
                h = torch.cat([ex, h], -1)
            h = F.relu(lin(h))
        sigma = self.alpha(h)[..., 0]
        h = F.relu(self.views(torch.cat([self.feature(h), ed], -1)))
        rgb = torch.sigmoid(self.rgb(h))
        dists = z_vals[..., 1:] - z_vals[..., :-1]
        dists = torch.cat([dists, torch.full_like(dists[..., :1], 1e10)], -1) * torch.norm(rays_d[..., None, :],
                                                                                           dim=-1)
        alpha = 1.0 - torch.exp(-F.relu(sigma) * dists)
        trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
        weights = alpha * trans
        rgb_map = torch.sum(weights[..., None] * rgb, -2)
        depth = torch.sum(weights * z_vals, -1)
        return torch.cat([rgb_map, depth[:, None] / z_vals[:, -1:], weights.sum(-1, keepdim=True)], -1)


class SineLayer(nn.Module):
    def __init__(self, cin, cout, is_first=False, w0=30.0):
        super().__init__()
        self.w0, self.linear = w0, nn.Linear(cin, cout)
        with torch.no_grad():
            bound = 1 / cin if is_first else math.sqrt(6 / cin) / w0
            self.linear.weight.uniform_(-bound, bound)

    def forward(self, x):
        return torch.sin(self.w0 * self.linear(x))


class Siren(nn.Module):
    def __init__(self, cin=2, hid=128, layers=3, cout=3):
        super().__init__()
        self.net = nn.Sequential(SineLayer(cin, hid, is_first=True), *[SineLayer(hid, hid) for _ in range(layers)])
        self.last = nn.Linear(hid, cout)
        with torch.no_grad():
            self.last.weight.uniform_(-math.sqrt(6 / hid) / 30, math.sqrt(6 / hid) / 30)

    def forward(self, coords):
        return self.last(self.net(coords))


# -- capsules, temporal convs, image-to-image -----------------------------------------------------------

def squash(s, dim=-1):
    n2 = (s ** 2).sum(dim, keepdim=True)
    return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)


class CapsNet(nn.Module):
    def __init__(self, classes=10, routing=3):
        super().__init__()
        self.routing = routing
        self.conv1 = nn.Conv2d(1, 64, 9)
        self.primary = nn.Conv2d(64, 8 * 16, 9, stride=2)     # 16 capsule maps of 8 dims
        self.n_in = 16 * 6 * 6
        self.W = nn.Parameter(0.1 * torch.randn(1, self.n_in, classes, 16, 8))

    def forward(self, x):
        b = x.shape[0]
        h = F.relu(self.conv1(x))
        u = self.primary(h).view(b, 8, -1).transpose(1, 2)          # [b, n_in, 8]
        u = squash(u)
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)        # [b, n_in, classes, 16]
        blog = torch.zeros(b, self.n_in, u_hat.shape[2], 1, dtype=x.dtype, device=x.device)
        for it in range(self.routing):
            c = F.softmax(blog, dim=2)
            v = squash((c * u_hat).sum(1, keepdim=True))            # [b, 1, classes, 16]
            if it < self.routing - 1:
                blog = blog + (u_hat * v).sum(-1, keepdim=True)
        return v.squeeze(1).norm(dim=-1)


class Chomp1d(nn.Module):
    def __init__(self, chomp):
        super().__init__()
        self.chomp = chomp

    def forward(self, x):
        return x[:, :, :-self.chomp].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, cin, cout, k, dilation, dropout=0.2):
        super().__init__()
        pad = (k - 1) * dilation
        wn = nn.utils.parametrizations.weight_norm
        self.net = nn.Sequential(wn(nn.Conv1d(cin, cout, k, padding=pad, dilation=dilation)), Chomp1d(pad),
                                 nn.ReLU(), nn.Dropout(dropout),
                                 wn(nn.Conv1d(cout, cout, k, padding=pad, dilation=dilation)), Chomp1d(pad),
                                 nn.ReLU(), nn.Dropout(dropout))
        self.downsample = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        res = x if self.downsample is None else self.downsample(x)
        return F.relu(self.net(x) + res)


class TCN(nn.Module):
    def __init__(self, cin=8, channels=(32, 32, 32, 32), k=3, classes=10):
        super().__init__()
        self.tcn = nn.Sequential(*[TemporalBlock(cin if i == 0 else channels[i - 1], c, k, 2 ** i)
                                   for i, c in enumerate(channels)])
        self.linear = nn.Linear(channels[-1], classes)

    def forward(self, x):
        return F.log_softmax(self.linear(self.tcn(x)[:, :, -1]), dim=1)


class ConvLayer(nn.Module):
    def __init__(self, cin, cout, k, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv(self.pad(x))


class StyleTransferNet(nn.Module):
    """pytorch/examples fast_neural_style TransformerNet (narrower)."""

    def __init__(self, c=16):
        super().__init__()
        self.c1, self.in1 = ConvLayer(3, c, 9, 1), nn.InstanceNorm2d(c, affine=True)
        self.c2, self.in2 = ConvLayer(c, 2 * c, 3, 2), nn.InstanceNorm2d(2 * c, affine=True)
        self.c3, self.in3 = ConvLayer(2 * c, 4 * c, 3, 2), nn.InstanceNorm2d(4 * c, affine=True)
        self.res = nn.ModuleList(nn.ModuleList([ConvLayer(4 * c, 4 * c, 3, 1), nn.InstanceNorm2d(4 * c, affine=True),
                                                ConvLayer(4 * c, 4 * c, 3, 1), nn.InstanceNorm2d(4 * c, affine=True)])
                                 for _ in range(3))
        self.d1, self.in4 = ConvLayer(4 * c, 2 * c, 3, 1, upsample=2), nn.InstanceNorm2d(2 * c, affine=True)
        self.d2, self.in5 = ConvLayer(2 * c, c, 3, 1, upsample=2), nn.InstanceNorm2d(c, affine=True)
        self.d3 = ConvLayer(c, 3, 9, 1)

    def forward(self, x):
        y = F.relu(self.in1(self.c1(x)))
        y = F.relu(self.in2(self.c2(y)))
        y = F.relu(self.in3(self.c3(y)))
        for conv1, in1, conv2, in2 in self.res:
            y = y + in2(conv2(F.relu(in1(conv1(y)))))
        y = F.relu(self.in4(self.d1(y)))
        y = F.relu(self.in5(self.d2(y)))
        return self.d3(y)


class ESPCN(nn.Module):
    def __init__(self, scale=3, c=1):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(c, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
                                 nn.Conv2d(32, c * scale ** 2, 3, padding=1), nn.PixelShuffle(scale))

    def forward(self, x):
        return self.net(x)


class CLIPLoss(nn.Module):
    def __init__(self, vocab=500, d=64, ctx=16):
        super().__init__()
        self.visual = nn.Sequential(nn.Conv2d(3, 32, 4, 4), nn.GELU(), nn.Conv2d(32, 64, 2, 2), nn.GELU(),
                                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, d))
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(ctx, d) * 0.01)
        self.text = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.ln_final, self.text_proj = nn.LayerNorm(d), nn.Parameter(torch.randn(d, d) * d ** -0.5)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
        self.register_buffer("attn_mask", torch.full((ctx, ctx), float("-inf")).triu_(1), persistent=False)

    def forward(self, image, text):
        img = F.normalize(self.visual(image), dim=-1)
        x = self.tok(text) + self.pos
        x = self.ln_final(self.text(x, src_mask=self.attn_mask.to(x.dtype)))
        x = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_proj
        txt = F.normalize(x, dim=-1)
        logit_scale = self.logit_scale.exp()
        logits = logit_scale * img @ txt.t()
        labels = torch.arange(logits.shape[0], device=logits.device)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        return torch.cat([logits, loss.expand(logits.shape[0], 1)], dim=1)


class HyenaFFTConv(nn.Module):
    """H3 / Hyena-style long convolution: a per-channel filter of sequence length, applied through FFT."""

    def __init__(self, d=64, seq=64, layers=2, vocab=500):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.seq = seq
        self.in_proj = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.filters = nn.ParameterList(nn.Parameter(torch.randn(d, seq) * 0.02) for _ in range(layers))
        self.bias = nn.ParameterList(nn.Parameter(torch.randn(d)) for _ in range(layers))
        self.out_proj = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.register_buffer("decay", torch.exp(-torch.arange(seq) / 16.0))

    @staticmethod
    def fftconv(u, k, D):
        L = u.shape[-1]
        n = 2 * L
        k_f = torch.fft.rfft(k, n=n) / n
        u_f = torch.fft.rfft(u.to(k.dtype), n=n)
        y = torch.fft.irfft(u_f * k_f, n=n, norm="forward")[..., :L]
        return (y + u * D.unsqueeze(-1)).to(u.dtype)

    def forward(self, ids):
        x = self.emb(ids)
        for inp, filt, bias, out, norm in zip(self.in_proj, self.filters, self.bias, self.out_proj, self.norm):
            q, k, v = inp(norm(x)).transpose(1, 2).chunk(3, dim=1)
            y = self.fftconv(v * k, (filt * self.decay).float(), bias.float())
            x = x + out((y * q).transpose(1, 2))
        return x


class STN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 8, 7), nn.MaxPool2d(2, 2), nn.ReLU(), nn.Conv2d(8, 10, 5),
                                 nn.MaxPool2d(2, 2), nn.ReLU())
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(), nn.Linear(32, 6))
        self.fc_loc[2].weight.data.normal_(0, 0.01)
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
        self.cls = nn.Sequential(nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(10, 20, 5),
                                 nn.Dropout2d(), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(320, 50),
                                 nn.ReLU(), nn.Linear(50, classes))

    def forward(self, x):
        theta = self.fc_loc(self.loc(x).view(-1, 10 * 3 * 3)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, align_corners=False)
        return F.log_softmax(self.cls(x), dim=1)


class ConvLSTM(nn.Module):
    def __init__(self, cin=3, hid=16, k=3, classes=10):
        super().__init__()
        self.hid = hid
        self.conv = nn.Conv2d(cin + hid, 4 * hid, k, padding=k // 2)
        self.head = nn.Conv2d(hid, classes, 1)

    def forward(self, seq):
        b, t, _, hh, ww = seq.shape
        h = torch.zeros(b, self.hid, hh, ww, dtype=seq.dtype, device=seq.device)
        c = torch.zeros_like(h)
        for i in range(t):
            cc_i, cc_f, cc_o, cc_g = torch.split(self.conv(torch.cat([seq[:, i], h], dim=1)), self.hid, dim=1)
            i_, f_, o_, g_ = torch.sigmoid(cc_i), torch.sigmoid(cc_f), torch.sigmoid(cc_o), torch.tanh(cc_g)
            c = f_ * c + i_ * g_
            h = o_ * torch.tanh(c)
        return self.head(h)


# -- cases ------------------------------------------------------------------------------------------------

def _graph(n, e):
    src = torch.randint(0, n, (e,))
    dst = torch.randint(0, n, (e,))
    keep = src != dst
    return torch.stack([src[keep], dst[keep]])


def _dlrm_inputs(b, tables=(100, 200, 300, 50)):
    idx, offs = [], []
    for n in tables:
        lens = torch.randint(1, 4, (b,))
        idx.append(torch.randint(0, n, (int(lens.sum()),)))
        offs.append(torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)[:-1]]))
    L = max(len(i) for i in idx)   # one index tensor per table, padded past the last bag (mode sum: the
    idx = torch.stack([F.pad(i, (0, L - len(i))) for i in idx])   # last bag runs to the end)
    return idx, torch.stack(offs)


def _texts(n, s, vocab=500):
    """Token ids with one end-of-text token (the largest id, which CLIP pools at) per row."""
    t = torch.randint(1, vocab - 1, (n, s))
    t[torch.arange(n), torch.randint(s // 2, s, (n,))] = vocab - 1
    return t


def cases(big: bool):
    """(name, build() -> (module, example inputs)) as bench/heldout.py's cases(); `big`: GPU sizes."""
    b, s = (8, 64) if big else (2, 16)
    ids = lambda n=s: torch.randint(1, 500, (b, n))  # noqa: E731

    def lengths():
        return torch.tensor([s] + [max(2, s - 3 * i - 1) for i in range(1, b)])

    yield "lstm_attn_seq2seq", lambda: (LSTMAttnSeq2Seq(), (ids(), lengths(), ids(s // 2)))
    yield "gru_seq2seq", lambda: (GRUSeq2Seq(), (ids(), ids(s // 2)))
    yield "diffusion_unet", lambda: (DiffusionUNet().eval(), (torch.randn(b, 4, 16, 16), torch.tensor([10, 700][:b] * (b // 2 or 1)),
                                                              torch.randn(b, 8, 32)))
    yield "ddpm_sample", lambda: (DDPMSampler().eval(), (torch.randn(b, 4, 16, 16),))
    yield "vae", lambda: (VAE().eval(), (torch.rand(b, 1, 28, 28),))
    yield "vq_vae", lambda: (VQVAE().eval(), (torch.randn(b, 3, 32, 32),))
    yield "gcn", lambda: (GCN().eval(), (torch.randn(200, 32), _graph(200, 800)))
    yield "gat", lambda: (GAT().eval(), (torch.randn(200, 32), _graph(200, 800)))
    yield "mamba_loop", lambda: (Mamba("loop").eval(), (ids(),))
    yield "mamba_cumsum", lambda: (Mamba("cumsum").eval(), (ids(),))
    yield "rwkv", lambda: (RWKV().eval(), (ids(),))
    yield "gmlp", lambda: (GMLP(seq_len=s).eval(), (ids(),))
    yield "conformer_relpos", lambda: (heldout.fan_in_init(Conformer()).eval(), (torch.randn(b, 4 * s, 40),))
    yield "pointnet", lambda: (heldout.fan_in_init(PointNet()).eval(), (torch.randn(b, 3, 256),))
    yield "wavenet", lambda: (WaveNet().eval(), (torch.randn(b, 1, 256),))
    yield "retina_head", lambda: (RetinaHead().eval(), (torch.randn(b, 3, 64, 64),
                                                        (torch.rand(b, 8 * 8 * 3, 8) > 0.97).float()))
    yield "dlrm", lambda: (DLRM().eval(), (torch.randn(b * 4, 13),) + _dlrm_inputs(b * 4))
    yield "nerf", lambda: (NeRF().eval(), (torch.randn(64, 3) * 0.1, torch.randn(64, 3),
                                           torch.linspace(2.0, 6.0, 16).expand(64, 16).contiguous()))
    yield "transformer_xl", lambda: (TransformerXL().eval(), (ids(), ids()))
    yield "capsnet", lambda: (CapsNet().eval(), (torch.randn(b, 1, 28, 28),))
    yield "tcn", lambda: (TCN().eval(), (torch.randn(b, 8, 64),))
    yield "siren", lambda: (Siren().eval(), (torch.rand(256, 2) * 2 - 1,))
    yield "style_transfer", lambda: (StyleTransferNet().eval(), (torch.rand(b, 3, 32, 32) * 255,))
    yield "espcn", lambda: (ESPCN().eval(), (torch.rand(b, 1, 32, 32),))
    yield "clip_loss", lambda: (CLIPLoss(ctx=s).eval(), (torch.randn(b * 2, 3, 32, 32), _texts(b * 2, s)))
    yield "hyena_fftconv", lambda: (HyenaFFTConv(seq=s * 2).eval(), (ids(2 * s),))
    yield "stn", lambda: (STN().eval(), (torch.randn(b, 1, 28, 28),))
    yield "convlstm", lambda: (ConvLSTM().eval(), (torch.randn(b, 4, 3, 16, 16),))


if __name__ == "__main__":
    heldout.main(cases, __doc__)
