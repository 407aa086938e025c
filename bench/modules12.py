"""Twelfth real-world-style corpus (issue 10 trust): idioms modules.py .. modules11.py leave out.

Written the way public repositories write them: speech (Conformer convolution modules and
relative-position attention with rel_shift, Conv2d subsampling with length arithmetic, CTC on
concatenated targets, greedy CTC decoding by unique_consecutive, transducer joints and an RNN-T
loss by a (T, U) lattice loop, per-utterance CMVN over valid frames), recommendation (EmbeddingBag
with offsets and per-sample weights, DCN-Mix low-rank crosses, AutoInt, xDeepFM's CIN, DIN target
attention over padded histories, the hashing trick, in-batch negatives with duplicate masking,
MMoE), time series (weight-normed TCN, N-BEATS Fourier bases, ProbSparse attention, RevIN, DLinear
decomposition, Autoformer auto-correlation by rfft, pinball + MASE, Time2Vec), contrastive losses
(NT-Xent, batch-hard triplets, SupCon, a MoCo queue, SimSiam, Barlow Twins, VICReg), normalizing
flows (Glow's LU 1x1 conv, planar and radial flows, Hutchinson trace in a CNF step, squeeze), NeRF
(integrated positional encodings, stratified + inverse-CDF sampling, alpha compositing, ray
generation), optimizers by hand (Adan, SAM, LAMB, gradient accumulation with clip_grad_value_ /
inf-norm clipping, AveragedModel EMA), torch.distributions beyond Normal / Categorical (Beta,
Dirichlet + KL, MixtureSameFamily, MultivariateNormal, LowRankMultivariateNormal, tanh-transformed
Independent, NegativeBinomial / ZINB, RelaxedOneHotCategorical, Bernoulli / Binomial, Laplace /
Gamma KL), segment reductions and sparse-ish masking (scatter_reduce means with empty segments,
CSR offsets, top-k attention masks, 2:4 pruning, index_reduce), torch.where chains with NaN,
losses (label smoothing with class weights and ignore_index, distillation, poly-1, multi-class
focal), small blocks (GeM, CBAM, drop path, Swin relative bias, T5 buckets, retention, Performer
features, GRU-D, beam search) and transformers models not yet covered.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars, run

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _lengths_mask(lengths, t):
    return torch.arange(t, device=lengths.device)[None, :] < lengths[:, None]


# ============================================================================ speech
class ConformerConvModule(nn.Module):
    """Conformer's convolution module: pointwise conv to 2C, GLU, depthwise conv with padding
    frames zeroed first, BatchNorm1d, SiLU, pointwise conv, residual."""

    def __init__(self, d=8, k=5):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x, lengths):          # x: (B, T, D)
        mask = _lengths_mask(lengths, x.size(1))
        y = self.ln(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = y.masked_fill(~mask.unsqueeze(1), 0.0)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return x + y.transpose(1, 2)


case("speech_conformer_conv_module_padding_mask", lambda i=0: (R(3, 9 + i, 8), torch.tensor([9 + i, 5, 3])),
     train=True)(lambda: ConformerConvModule())


class RelPosMHSA(nn.Module):
    """Transformer-XL / Conformer relative-position self-attention: learned u / v biases, a
    sinusoidal table over relative positions 2T-1, rel_shift by pad + view + slice."""

    def __init__(self, d=8, h=2):
        super().__init__()
        self.h, self.dk = h, d // h
        self.qkv = nn.Linear(d, 3 * d)
        self.pos = nn.Linear(d, d, bias=False)
        self.u = nn.Parameter(torch.randn(h, d // h) * 0.1)
        self.v = nn.Parameter(torch.randn(h, d // h) * 0.1)
        self.out = nn.Linear(d, d)

    @staticmethod
    def rel_shift(x):
        b, h, t, n = x.shape
        x = F.pad(x, (1, 0))
        x = x.view(b, h, n + 1, t)[:, :, 1:].view(b, h, t, n)
        return x[..., : n // 2 + 1]

    def forward(self, x):
        b, t, d = x.shape
        pos = torch.arange(t - 1, -t, -1.0).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe = torch.zeros(2 * t - 1, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)
        p = self.pos(pe).view(-1, self.h, self.dk).transpose(0, 1)
        ac = torch.matmul(q + self.u[None, :, None], k.transpose(-1, -2))
        bd = self.rel_shift(torch.matmul(q + self.v[None, :, None], p.transpose(-1, -2).unsqueeze(0)))
        bd = bd[..., :t] if bd.size(-1) >= t else F.pad(bd, (0, t - bd.size(-1)))
        att = ((ac + bd) / math.sqrt(self.dk)).softmax(-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, t, d))


case("speech_relpos_mhsa_rel_shift_pad_view", lambda i=0: (R(2, 5 + 2 * i, 8),), train=True)(lambda: RelPosMHSA())


class Conv2dSubsampling4(nn.Module):
    """ESPnet's Conv2dSubsampling: two stride-2 convs over (T, F), output lengths by the same
    integer arithmetic, a padding mask from them."""

    def __init__(self, idim=12, odim=8):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x, lens):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        olens = ((lens - 1) // 2 - 1) // 2
        mask = _lengths_mask(olens, t)
        return x * mask.unsqueeze(-1), olens, mask


case("speech_conv2d_subsampling_length_arith", lambda i=0: (R(2, 17 + 4 * i, 12), torch.tensor([17 + 4 * i, 11])))(
    lambda: Conv2dSubsampling4())


@fn_case("speech_ctc_concatenated_targets_zero_infinity", lambda i=0: (
    R(12, 3, 6).requires_grad_(), torch.tensor([1, 2, 3, 1, 1, 4, 5, 2, 3]), torch.tensor([12, 9, 4]),
    torch.tensor([3, 4, 2])), context=grad_ctx)
def speech_ctc_concatenated_targets_zero_infinity(logits, targets, in_lens, tgt_lens):
    """CTC with 1-D concatenated targets (the third utterance is too short for its labels: an
    infinite loss zeroed by zero_infinity), reduction sum and mean, gradient of the logits."""
    lp = logits.log_softmax(-1)
    s = F.ctc_loss(lp, targets, in_lens, tgt_lens, blank=0, reduction="sum", zero_infinity=True)
    m = F.ctc_loss(lp, targets, in_lens, tgt_lens, blank=0, reduction="none", zero_infinity=True)
    g, = torch.autograd.grad(s, logits)
    return s, m, g


@fn_case("speech_ctc_greedy_decode_unique_consecutive", lambda i=0: (R(3, 10, 5), torch.tensor([10, 7 - i, 4])))
def speech_ctc_greedy_decode_unique_consecutive(logits, lengths):
    """Greedy CTC decoding: argmax per frame, unique_consecutive per utterance up to its length,
    blanks removed, Python lists of label ids out."""
    best = logits.argmax(-1)
    hyps = []
    for b in range(best.size(0)):
        seq = torch.unique_consecutive(best[b, : lengths[b]])
        hyps.append(seq[seq != 0].tolist())
    return hyps


class TransducerJoint(nn.Module):
    """RNN-T joint network and the loss by the (T, U) forward-variable lattice (a Python double
    loop with logaddexp), as tutorials write it before reaching for torchaudio."""

    def __init__(self, d=6, v=5):
        super().__init__()
        self.enc = nn.Linear(d, d)
        self.pred = nn.Embedding(v, d)
        self.joint = nn.Linear(d, v)

    def forward(self, x, y):        # x: (T, D), y: (U,) labels 1..V-1
        t_len, u_len = x.size(0), y.size(0)
        pred_in = torch.cat([torch.zeros(1, dtype=torch.long), y])
        z = self.joint(torch.tanh(self.enc(x).unsqueeze(1) + self.pred(pred_in).unsqueeze(0)))
        lp = z.log_softmax(-1)                     # (T, U+1, V)
        alpha = torch.full((t_len, u_len + 1), -float("inf"))
        alpha[0, 0] = 0.0
        for t in range(t_len):
            for u in range(u_len + 1):
                if t == 0 and u == 0:
                    continue
                a = alpha[t - 1, u] + lp[t - 1, u, 0] if t > 0 else torch.tensor(-float("inf"))
                b = alpha[t, u - 1] + lp[t, u - 1, y[u - 1]] if u > 0 else torch.tensor(-float("inf"))
                alpha[t, u] = torch.logaddexp(a, b)
        loss = -(alpha[-1, -1] + lp[-1, -1, 0])
        loss.backward()
        return loss.detach(), self.joint.weight.grad.clone()


case("speech_rnnt_joint_lattice_loop_loss", lambda: (R(4, 6), torch.tensor([2, 4, 1])), train=True)(
    lambda: TransducerJoint())


@fn_case("speech_log_mel_clamp_cmvn_valid_frames", lambda i=0: (U(3, 8 + i, 6) * 4, torch.tensor([8 + i, 5, 1])))
def speech_log_mel_clamp_cmvn_valid_frames(mel, lengths):
    """Dynamic range compression (log of clamp(min=1e-5) * C) and per-utterance mean / variance
    normalisation over valid frames only (a one-frame utterance: variance 0, std clamped)."""
    x = torch.log(torch.clamp(mel, min=1e-5) * 1.0)
    m = _lengths_mask(lengths, x.size(1)).unsqueeze(-1).float()
    n = m.sum(1, keepdim=True)
    mean = (x * m).sum(1, keepdim=True) / n
    var = (((x - mean) * m) ** 2).sum(1, keepdim=True) / n
    return (x - mean) / var.sqrt().clamp(min=1e-5) * m


class ConformerBlock(nn.Module):
    """A whole Conformer block: two half-step (macaron) feed-forwards, MHSA with a key padding
    mask, the conv module, final LayerNorm."""

    def __init__(self, d=8):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
        self.ln_att = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, 2, batch_first=True)
        self.conv = ConformerConvModule(d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x, lengths):
        pad = ~_lengths_mask(lengths, x.size(1))
        x = x + 0.5 * self.ff1(x)
        h = self.ln_att(x)
        x = x + self.att(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        x = self.conv(x, lengths)
        x = x + 0.5 * self.ff2(x)
        return self.ln(x)


case("speech_conformer_block_macaron_key_padding", lambda i=0: (R(2, 7, 8), torch.tensor([7, 4 - i])))(
    lambda: ConformerBlock().eval())


# ============================================================================ recommendation
class BagWithOffsets(nn.Module):
    """EmbeddingBag over a flat id list with offsets, per-sample weights (mode sum), a padding
    index inside the bags, include_last_offset; a mean bag on a 2-D input."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(20, 4, mode="sum", padding_idx=0)
        self.bag_last = nn.EmbeddingBag(20, 4, mode="max", include_last_offset=True)
        self.mean = nn.EmbeddingBag(20, 4, mode="mean")

    def forward(self, ids, offsets, w, ids2d):
        a = self.bag(ids, offsets, per_sample_weights=w)
        b = self.bag_last(ids, torch.cat([offsets, torch.tensor([ids.numel()])]))
        return a, b, self.mean(ids2d)


case("rec_embedding_bag_offsets_weights_padding_idx", lambda i=0: (
    torch.tensor([3, 0, 5, 7, 0, 2, 9, 11, 4]), torch.tensor([0, 3, 3 + i, 6]), U(9), I(0, 20, 3, 4)),
    train=True)(lambda: BagWithOffsets())


class DCNMix(nn.Module):
    """DCN-v2's mixture of low-rank cross layers: x_{l+1} = sum_e g_e(x_l) * x0 * (U_e C_e V_e^T x_l
    + b) + x_l, the experts stacked as parameters and combined by a softmax gate."""

    def __init__(self, d=8, r=3, e=3, layers=2):
        super().__init__()
        self.U = nn.ParameterList([nn.Parameter(torch.randn(e, d, r) * 0.2) for _ in range(layers)])
        self.V = nn.ParameterList([nn.Parameter(torch.randn(e, d, r) * 0.2) for _ in range(layers)])
        self.C = nn.ParameterList([nn.Parameter(torch.randn(e, r, r) * 0.2) for _ in range(layers)])
        self.b = nn.ParameterList([nn.Parameter(torch.zeros(d, 1)) for _ in range(layers)])
        self.gates = nn.ModuleList([nn.Linear(d, 1, bias=False) for _ in range(e)])

    def forward(self, x):
        x0 = x.unsqueeze(2)
        xl = x0
        for i in range(len(self.U)):
            outs, gs = [], []
            for e in range(len(self.gates)):
                gs.append(self.gates[e](xl.squeeze(2)))
                v = torch.tanh(torch.matmul(self.V[i][e].t(), xl))
                v = torch.tanh(torch.matmul(self.C[i][e], v))
                uv = torch.matmul(self.U[i][e], v) + self.b[i]
                outs.append((x0 * uv).squeeze(2))
            outs = torch.stack(outs, 2)
            g = torch.stack(gs, 1).softmax(1)
            xl = torch.matmul(outs, g) + xl
        return xl.squeeze(2)


case("rec_dcn_mix_low_rank_cross_experts", lambda: (R(5, 8),), train=True)(lambda: DCNMix())


class AutoInt(nn.Module):
    """AutoInt: field embeddings (categorical lookups + numeric fields scaled embedding vectors),
    multi-head self-attention across fields with a residual projection, flattened to a logit."""

    def __init__(self, cards=(5, 7, 4), n_num=2, d=6, h=2):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, d) for c in cards])
        self.num = nn.Parameter(torch.randn(n_num, d))
        self.h, self.d = h, d
        self.W = nn.Linear(d, 3 * h * d, bias=False)
        self.res = nn.Linear(d, h * d, bias=False)
        self.out = nn.Linear((len(cards) + n_num) * h * d, 1)

    def forward(self, cat, num):
        e = torch.stack([emb(cat[:, i]) for i, emb in enumerate(self.embs)], 1)
        e = torch.cat([e, num.unsqueeze(-1) * self.num], 1)          # (B, F, d)
        b, f, _ = e.shape
        q, k, v = self.W(e).view(b, f, 3, self.h, self.d).unbind(2)
        att = torch.einsum("bfhd,bghd->bhfg", q, k).softmax(-1)
        o = torch.einsum("bhfg,bghd->bfhd", att, v).reshape(b, f, -1)
        o = F.relu(o + self.res(e))
        return torch.sigmoid(self.out(o.flatten(1))).squeeze(-1)


case("rec_autoint_field_self_attention", lambda: (torch.stack([I(0, 5, 4), I(0, 7, 4), I(0, 4, 4)], 1), R(4, 2)),
     train=True)(lambda: AutoInt())


class CIN(nn.Module):
    """xDeepFM's compressed interaction network: outer products of X^k and X^0 per embedding dim
    (einsum), compressed by conv1d, sum-pooled; half the feature maps go to the output."""

    def __init__(self, m=4, d=5, sizes=(6, 4)):
        super().__init__()
        self.convs = nn.ModuleList()
        prev = m
        for s in sizes:
            self.convs.append(nn.Conv1d(prev * m, s, 1))
            prev = s // 2
        self.fc = nn.Linear(sum(s // 2 for s in sizes[:-1]) + sizes[-1], 1)

    def forward(self, x0):              # (B, m, d)
        b, m, d = x0.shape
        xs, outs = x0, []
        for i, conv in enumerate(self.convs):
            z = torch.einsum("bhd,bmd->bhmd", xs, x0).reshape(b, -1, d)
            z = F.relu(conv(z))
            if i != len(self.convs) - 1:
                nxt, hid = torch.split(z, z.size(1) // 2, 1)
            else:
                nxt, hid = 0, z
            outs.append(hid)
            xs = nxt
        return self.fc(torch.cat(outs, 1).sum(-1))


case("rec_xdeepfm_cin_einsum_split", lambda: (R(3, 4, 5),), train=True)(lambda: CIN())


class DINAttention(nn.Module):
    """DIN's target attention over a padded behaviour history: [q, k, q-k, q*k] through an MLP,
    padded positions masked to -inf before softmax; a user with no history gives NaN rows,
    replaced by zeros."""

    def __init__(self, n=30, d=6):
        super().__init__()
        self.emb = nn.Embedding(n, d, padding_idx=0)
        self.mlp = nn.Sequential(nn.Linear(4 * d, 8), nn.Sigmoid(), nn.Linear(8, 1))

    def forward(self, hist, target):
        k = self.emb(hist)
        q = self.emb(target).unsqueeze(1).expand_as(k)
        s = self.mlp(torch.cat([q, k, q - k, q * k], -1)).squeeze(-1)
        s = s.masked_fill(hist == 0, float("-inf"))
        w = torch.nan_to_num(s.softmax(-1), nan=0.0)
        return (w.unsqueeze(-1) * k).sum(1), w


case("rec_din_target_attention_empty_history", lambda i=0: (
    torch.tensor([[3, 5, 7, 0], [0, 0, 0, 0], [9, 2 + i, 0, 0]]), torch.tensor([4, 8, 11])), train=True)(
    lambda: DINAttention())


@fn_case("rec_hashing_trick_int64_wraparound_buckets", lambda i=0: (I(0, 2 ** 40, 6), I(0, 1000, 6)))
def rec_hashing_trick_int64_wraparound_buckets(user_ids, item_ids):
    """Feature crosses hashed into buckets: int64 multiply by large primes (wraps), xor, remainder
    (Python's sign convention), and a bucket count histogram."""
    h = (user_ids * 2654435761 + item_ids * 40503) ^ (user_ids >> 7)
    b = torch.remainder(h, 97)
    f = h % 31
    return b, f, torch.bincount(b, minlength=97)


class InBatchNegatives(nn.Module):
    """Two-tower retrieval with in-batch negatives: L2-normalised towers, a learnable temperature
    (logit_scale.exp() clamped at 100 as CLIP does), same-item off-diagonal pairs masked out."""

    def __init__(self):
        super().__init__()
        self.u = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
        self.i = nn.Embedding(10, 4)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, ux, item):
        u = F.normalize(self.u(ux), dim=-1)
        v = F.normalize(self.i(item), dim=-1)
        logits = self.logit_scale.exp().clamp(max=100) * u @ v.t()
        dup = (item[:, None] == item[None, :]) & ~torch.eye(len(item), dtype=torch.bool)
        logits = logits.masked_fill(dup, -1e9)
        loss = F.cross_entropy(logits, torch.arange(len(item)))
        loss.backward()
        return loss.detach(), self.logit_scale.grad.clone()


case("rec_in_batch_negatives_duplicate_mask_logit_scale", lambda: (R(5, 6), torch.tensor([1, 4, 1, 7, 2])),
     train=True)(lambda: InBatchNegatives())


class MMoE(nn.Module):
    """Multi-gate mixture of experts: experts stacked (B, E, H), a softmax gate per task,
    einsum mixing, a tower per task, a weighted BCE / MSE sum."""

    def __init__(self, d=6, h=5, e=3, tasks=2):
        super().__init__()
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, h), nn.ReLU()) for _ in range(e)])
        self.gates = nn.ModuleList([nn.Linear(d, e) for _ in range(tasks)])
        self.towers = nn.ModuleList([nn.Linear(h, 1) for _ in range(tasks)])

    def forward(self, x, y_click, y_time):
        ex = torch.stack([m(x) for m in self.experts], 1)
        outs = []
        for g, t in zip(self.gates, self.towers):
            w = g(x).softmax(-1)
            outs.append(t(torch.einsum("be,beh->bh", w, ex)).squeeze(-1))
        return F.binary_cross_entropy_with_logits(outs[0], y_click) + 0.5 * F.mse_loss(outs[1], y_time), outs


case("rec_mmoe_gates_einsum_two_task_loss", lambda: (R(6, 6), I(0, 2, 6).float(), U(6)), train=True)(lambda: MMoE())


# ============================================================================ time series
class TemporalBlock(nn.Module):
    """Bai et al.'s TCN block with weight normalisation (the parametrizations API), causal padding
    trimmed by a Chomp, a 1x1 downsample on the residual."""

    def __init__(self, cin, cout, k, dilation):
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        pad = (k - 1) * dilation
        self.c1 = wn(nn.Conv1d(cin, cout, k, padding=pad, dilation=dilation))
        self.c2 = wn(nn.Conv1d(cout, cout, k, padding=pad, dilation=dilation))
        self.pad = pad
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        y = F.relu(self.c1(x)[:, :, :-self.pad].contiguous())
        y = F.relu(self.c2(y)[:, :, :-self.pad].contiguous())
        return F.relu(y + (x if self.down is None else self.down(x)))


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(TemporalBlock(3, 6, 3, 1), TemporalBlock(6, 6, 3, 2), TemporalBlock(6, 4, 3, 4))

    def forward(self, x):
        return self.net(x)[:, :, -1]


case("ts_tcn_weight_norm_parametrization_chomp", lambda i=0: (R(2, 3, 12 + i),), train=True)(lambda: TCN())


class NBeatsSeasonal(nn.Module):
    """N-BEATS interpretable stack: Fourier seasonality basis (cos / sin of 2*pi*i*t/L) as fixed
    buffers, blocks subtracting their backcast, forecasts summed."""

    def __init__(self, back=12, fore=4, harmonics=3, blocks=2):
        super().__init__()
        t_b = torch.arange(back) / back
        t_f = torch.arange(back, back + fore) / back
        freqs = torch.arange(1, harmonics + 1)
        self.register_buffer("Sb", torch.cat([torch.cos(2 * math.pi * freqs[:, None] * t_b),
                                              torch.sin(2 * math.pi * freqs[:, None] * t_b)]))
        self.register_buffer("Sf", torch.cat([torch.cos(2 * math.pi * freqs[:, None] * t_f),
                                              torch.sin(2 * math.pi * freqs[:, None] * t_f)]))
        self.fc = nn.ModuleList([nn.Sequential(nn.Linear(back, 16), nn.ReLU(), nn.Linear(16, 4 * harmonics))
                                 for _ in range(blocks)])

    def forward(self, x):
        res, fc = x, 0
        for f in self.fc:
            theta_b, theta_f = f(res).chunk(2, -1)
            res = res - theta_b @ self.Sb
            fc = fc + theta_f @ self.Sf
        return fc, res


case("ts_nbeats_fourier_seasonality_basis", lambda: (R(3, 12),), train=True)(lambda: NBeatsSeasonal())


class ProbSparseAttention(nn.Module):
    """Informer's ProbSparse self-attention: sampled keys (randint from an explicit generator),
    sparsity M = max - mean, top-u queries attend, the others get the mean of V."""

    def __init__(self, d=8, factor=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.factor = factor

    def forward(self, x):
        b, L, d = x.shape
        q, k, v = self.qkv(x).chunk(3, -1)
        g = torch.Generator().manual_seed(7)
        u = min(L, self.factor * math.ceil(math.log(L)))
        idx = torch.randint(L, (L, u), generator=g)
        k_s = k[:, idx, :]                                  # (B, L, u, d)
        qk_s = torch.matmul(q.unsqueeze(-2), k_s.transpose(-2, -1)).squeeze(-2)
        M = qk_s.max(-1)[0] - qk_s.sum(-1) / L
        top = M.topk(u, sorted=False)[1]
        out = v.mean(1, keepdim=True).expand(b, L, d).clone()
        q_red = q[torch.arange(b)[:, None], top]
        att = torch.softmax(q_red @ k.transpose(-2, -1) / math.sqrt(d), -1)
        out[torch.arange(b)[:, None], top] = att @ v
        return out


case("ts_informer_probsparse_topk_queries", lambda i=0: (R(2, 10 + i, 8),))(lambda: ProbSparseAttention())


class RevIN(nn.Module):
    """Reversible instance normalisation: statistics of the input window (unbiased=False, eps)
    kept on the module between norm and denorm, an affine weight with eps in the inverse."""

    def __init__(self, c=3, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(c))
        self.b = nn.Parameter(torch.zeros(c))
        self.head = nn.Linear(10, 4)

    def forward(self, x):               # (B, L, C)
        self.mean = x.mean(1, keepdim=True).detach()
        self.stdev = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        z = (x - self.mean) / self.stdev * self.w + self.b
        y = self.head(z.transpose(1, 2)).transpose(1, 2)
        y = (y - self.b) / (self.w + self.eps * self.eps)
        return y * self.stdev + self.mean


case("ts_revin_stats_on_module_denorm", lambda: (R(2, 10, 3) * 5 + 3,), train=True)(lambda: RevIN())


class DLinear(nn.Module):
    """DLinear: moving-average trend by AvgPool1d over a series padded by repeating its first and
    last values, seasonal = x - trend, one Linear per component."""

    def __init__(self, L=12, H=4, k=5):
        super().__init__()
        self.k = k
        self.avg = nn.AvgPool1d(k, stride=1)
        self.lin_s = nn.Linear(L, H)
        self.lin_t = nn.Linear(L, H)

    def forward(self, x):               # (B, L, C)
        front = x[:, 0:1, :].repeat(1, (self.k - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.k - 1) // 2, 1)
        trend = self.avg(torch.cat([front, x, end], 1).permute(0, 2, 1)).permute(0, 2, 1)
        seas = x - trend
        return (self.lin_s(seas.permute(0, 2, 1)) + self.lin_t(trend.permute(0, 2, 1))).permute(0, 2, 1)


case("ts_dlinear_moving_avg_replicate_ends", lambda: (R(3, 12, 2),), train=True)(lambda: DLinear())


@fn_case("ts_autoformer_autocorrelation_rfft_topk_roll", lambda i=0: (R(2, 16, 4), R(2, 16, 4)))
def ts_autoformer_autocorrelation_rfft_topk_roll(q, v):
    """Autoformer's auto-correlation: R(tau) by rfft(q) * conj(rfft(k)) -> irfft, the top-k lags of
    the batch-mean correlation (Python ints by .item()), V rolled by each lag, softmax weights."""
    L = q.size(1)
    corr = torch.fft.irfft(torch.fft.rfft(q, dim=1) * torch.conj(torch.fft.rfft(q, dim=1)), n=L, dim=1)
    k = int(math.log(L))
    mean_value = corr.mean(-1)
    index = torch.topk(mean_value.mean(0), k)[1]
    weights = torch.stack([mean_value[:, index[i]] for i in range(k)], -1).softmax(-1)
    agg = torch.zeros_like(v)
    for i in range(k):
        agg = agg + torch.roll(v, -int(index[i]), 1) * weights[:, i].view(-1, 1, 1)
    return agg


@fn_case("ts_pinball_quantiles_mase_seasonal_scale", lambda i=0: (R(4, 6, 3), R(4, 6), R(4, 20)))
def ts_pinball_quantiles_mase_seasonal_scale(pred, y, history, m=4):
    """Multi-quantile pinball loss (quantiles broadcast on the last dim) and MASE scaled by the
    in-sample seasonal naive error; a constant history (scale 0) guarded by where."""
    qs = torch.tensor([0.1, 0.5, 0.9])
    e = y.unsqueeze(-1) - pred
    pin = torch.max(qs * e, (qs - 1) * e).mean()
    scale = (history[:, m:] - history[:, :-m]).abs().mean(1)
    history = history.clone()
    history[0] = 1.0
    scale0 = (history[:, m:] - history[:, :-m]).abs().mean(1)
    mae = (y - pred[..., 1]).abs().mean(1)
    mase = torch.where(scale0 > 0, mae / scale0, torch.zeros_like(mae))
    return pin, mase, mae / scale


class Time2Vec(nn.Module):
    """Time2Vec: one linear (trend) component and k periodic sin components of tau."""

    def __init__(self, k=5):
        super().__init__()
        self.w0 = nn.Parameter(torch.randn(1))
        self.b0 = nn.Parameter(torch.randn(1))
        self.w = nn.Parameter(torch.randn(k))
        self.b = nn.Parameter(torch.randn(k))

    def forward(self, tau):
        tau = tau.unsqueeze(-1)
        return torch.cat([self.w0 * tau + self.b0, torch.sin(tau * self.w + self.b)], -1)


case("ts_time2vec_linear_plus_periodic", lambda i=0: (U(3, 7 + i) * 100,), train=True)(lambda: Time2Vec())


# ============================================================================ contrastive
@fn_case("cl_nt_xent_2n_diag_masked_roll_labels", lambda i=0: (R(4 + i, 6).requires_grad_(), R(4 + i, 6)),
         context=grad_ctx)
def cl_nt_xent_2n_diag_masked_roll_labels(z1, z2, tau=0.5):
    """SimCLR's NT-Xent: the 2N x 2N similarity, self-pairs masked by an eye bool matrix to
    -inf, labels (arange + N) % 2N; gradient of z1."""
    n = z1.size(0)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.t() / tau
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    labels = (torch.arange(2 * n) + n) % (2 * n)
    loss = F.cross_entropy(sim, labels)
    return loss, torch.autograd.grad(loss, z1)[0]


@fn_case("cl_triplet_batch_hard_mining_euclid_clamp", lambda i=0: (R(8, 5), torch.tensor([0, 1, 0, 2, 1, 2, 0, 3 - i])))
def cl_triplet_batch_hard_mining_euclid_clamp(emb, labels, margin=0.3):
    """Batch-hard triplet loss: squared distances by the ||a||^2 - 2ab + ||b||^2 expansion,
    clamped before sqrt, hardest positive by max over a mask, hardest negative by min with
    positives pushed to +inf; anchors without a positive dropped (label 3 alone)."""
    dot = emb @ emb.t()
    sq = dot.diagonal()
    d = (sq.unsqueeze(0) - 2 * dot + sq.unsqueeze(1)).clamp(min=0)
    zero = (d == 0).float()
    d = (d + zero * 1e-16).sqrt() * (1 - zero)
    same = labels[:, None] == labels[None, :]
    pos = same & ~torch.eye(len(labels), dtype=torch.bool)
    hp = (d * pos).max(1)[0]
    hn = d.masked_fill(same, float("inf")).min(1)[0]
    valid = pos.any(1)
    loss = F.relu(hp - hn + margin)[valid]
    return loss.mean(), valid.sum()


@fn_case("cl_supcon_masked_log_prob_positive_counts", lambda i=0: (R(6, 2, 5), torch.tensor([0, 1, 0, 2, 1, 0])))
def cl_supcon_masked_log_prob_positive_counts(features, labels, temperature=0.1):
    """SupCon (Khosla et al. reference code): contrast_feature by unbind(1) + cat, logits_max
    detached, logits_mask by scatter, mean log-prob over positives per anchor."""
    features = F.normalize(features, dim=-1)
    b, v = features.shape[:2]
    mask = torch.eq(labels.view(-1, 1), labels.view(1, -1)).float()
    cf = torch.cat(torch.unbind(features, dim=1), dim=0)
    adc = torch.div(cf @ cf.T, temperature)
    logits_max, _ = torch.max(adc, dim=1, keepdim=True)
    logits = adc - logits_max.detach()
    mask = mask.repeat(v, v)
    logits_mask = torch.scatter(torch.ones_like(mask), 1, torch.arange(b * v).view(-1, 1), 0)
    mask = mask * logits_mask
    exp_logits = torch.exp(logits) * logits_mask
    log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
    mpp = mask.sum(1)
    mpp = torch.where(mpp < 1e-6, 1, mpp)
    return -((mask * log_prob).sum(1) / mpp).view(v, b).mean()


class MoCo(nn.Module):
    """MoCo v2: momentum update of the key encoder under no_grad, a queue buffer written by slice
    at a pointer buffer, logits [l_pos, l_neg], labels zeros."""

    def __init__(self, d=6, k=12, m=0.9, t=0.2):
        super().__init__()
        self.q = nn.Linear(5, d)
        self.k = nn.Linear(5, d)
        self.k.load_state_dict(self.q.state_dict())
        for p in self.k.parameters():
            p.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(d, k), dim=0))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))
        self.m, self.t, self.K = m, t, k

    def forward(self, xq, xk):
        q = F.normalize(self.q(xq), dim=1)
        with torch.no_grad():
            for pq, pk in zip(self.q.parameters(), self.k.parameters()):
                pk.data = pk.data * self.m + pq.data * (1.0 - self.m)
            k = F.normalize(self.k(xk), dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], 1) / self.t
        loss = F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long))
        ptr = int(self.ptr)
        self.queue[:, ptr:ptr + k.size(0)] = k.T
        self.ptr[0] = (ptr + k.size(0)) % self.K
        return loss


case("cl_moco_queue_pointer_momentum_key_encoder", lambda: (R(4, 5), R(4, 5)), train=True, ncalls=4)(lambda: MoCo())


class SimSiam(nn.Module):
    """SimSiam: symmetric negative cosine with the stop-gradient on the projections (detach),
    backward inside, the predictor's and encoder's gradients compared."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8))
        self.pred = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 8))

    def forward(self, x1, x2):
        z1, z2 = self.enc(x1), self.enc(x2)
        p1, p2 = self.pred(z1), self.pred(z2)
        loss = -(F.cosine_similarity(p1, z2.detach(), dim=-1).mean()
                 + F.cosine_similarity(p2, z1.detach(), dim=-1).mean()) * 0.5
        self.zero_grad()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in self.parameters()]


case("cl_simsiam_stop_gradient_backward", lambda: (R(5, 6), R(5, 6)), train=True)(lambda: SimSiam())


def _off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


@fn_case("cl_barlow_twins_off_diagonal_flatten_view", lambda i=0: (R(8, 5), R(8, 5)))
def cl_barlow_twins_off_diagonal_flatten_view(z1, z2, lambd=5e-3):
    """Barlow Twins: batch-normalised cross-correlation, on-diagonal (1 - c_ii)^2 via
    torch.diagonal().add_(-1).pow_(2), off-diagonal by the flatten()[:-1].view(n-1, n+1) trick."""
    bn = nn.functional.batch_norm
    c = bn(z1, None, None, training=True).T @ bn(z2, None, None, training=True) / z1.size(0)
    on = torch.diagonal(c).add_(-1).pow_(2).sum()
    off = _off_diagonal(c).pow_(2).sum()
    return on + lambd * off, c


@fn_case("cl_vicreg_variance_covariance_terms", lambda i=0: (R(8, 5), R(8, 5) * 0.01))
def cl_vicreg_variance_covariance_terms(x, y):
    """VICReg: invariance (mse), variance (relu(1 - sqrt(var + eps)) hinge; y nearly collapsed),
    covariance off-diagonals squared / d."""
    repr_loss = F.mse_loss(x, y)
    x = x - x.mean(0)
    y = y - y.mean(0)
    std_x = torch.sqrt(x.var(0) + 1e-4)
    std_y = torch.sqrt(y.var(0) + 1e-4)
    std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2
    n, d = x.shape
    cov_x = (x.T @ x) / (n - 1)
    cov_y = (y.T @ y) / (n - 1)
    cov_loss = _off_diagonal(cov_x).pow(2).sum() / d + _off_diagonal(cov_y).pow(2).sum() / d
    return 25 * repr_loss + 25 * std_loss + cov_loss


# ============================================================================ normalizing flows
class InvConv1x1LU(nn.Module):
    """Glow's invertible 1x1 convolution in LU form: P fixed (buffer), L strictly lower with unit
    diagonal, U strictly upper, diag = sign_s * exp(log_s); log-det = H*W*sum(log_s); the inverse
    by torch.inverse on the reverse pass."""

    def __init__(self, c=4):
        super().__init__()
        w = torch.linalg.qr(torch.randn(c, c))[0]
        p, lo, up = torch.linalg.lu(w)
        s = torch.diag(up)
        self.register_buffer("p", p)
        self.register_buffer("sign_s", torch.sign(s))
        self.register_buffer("l_mask", torch.tril(torch.ones(c, c), -1))
        self.register_buffer("eye", torch.eye(c))
        self.lower = nn.Parameter(lo)
        self.log_s = nn.Parameter(torch.log(torch.abs(s)))
        self.upper = nn.Parameter(torch.triu(up, 1))

    def weight(self):
        lo = self.lower * self.l_mask + self.eye
        up = self.upper * self.l_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return self.p @ lo @ up

    def forward(self, x):
        w = self.weight()
        y = F.conv2d(x, w.unsqueeze(2).unsqueeze(3))
        logdet = x.size(2) * x.size(3) * self.log_s.sum()
        back = F.conv2d(y, w.inverse().unsqueeze(2).unsqueeze(3))
        return y, logdet, (back - x).abs().max()


case("flow_glow_invconv_lu_logdet_inverse", lambda: (R(2, 4, 3, 3),), train=True)(lambda: InvConv1x1LU())


class PlanarFlow(nn.Module):
    """Rezende & Mohamed's planar flows stacked: u_hat enforcing invertibility by
    m(w.u) = -1 + softplus(w.u), log|1 + u_hat . psi|."""

    def __init__(self, d=3, k=3):
        super().__init__()
        self.u = nn.Parameter(torch.randn(k, d) * 0.5)
        self.w = nn.Parameter(torch.randn(k, d) * 0.5)
        self.b = nn.Parameter(torch.zeros(k))

    def forward(self, z):
        ld = torch.zeros(z.size(0))
        for i in range(self.u.size(0)):
            u, w, b = self.u[i], self.w[i], self.b[i]
            wu = w @ u
            u_hat = u + (-1 + F.softplus(wu) - wu) * w / (w @ w)
            lin = z @ w + b
            z = z + u_hat * torch.tanh(lin).unsqueeze(-1)
            psi = (1 - torch.tanh(lin) ** 2).unsqueeze(-1) * w
            ld = ld + torch.log(torch.abs(1 + psi @ u_hat) + 1e-8)
        return z, ld


case("flow_planar_stack_u_hat_softplus", lambda: (R(6, 3),), train=True)(lambda: PlanarFlow())


class RadialFlow(nn.Module):
    """Radial flow: beta_hat = -alpha + softplus(beta), h = 1 / (alpha + r), log-det
    (d-1) log(1 + beta h) + log(1 + beta h - beta h^2 r)."""

    def __init__(self, d=4):
        super().__init__()
        self.z0 = nn.Parameter(torch.randn(d))
        self.log_alpha = nn.Parameter(torch.zeros(1))
        self.beta = nn.Parameter(torch.zeros(1))

    def forward(self, z):
        d = z.size(1)
        alpha = self.log_alpha.exp()
        beta = -alpha + F.softplus(self.beta)
        diff = z - self.z0
        r = diff.norm(dim=1, keepdim=True)
        h = 1 / (alpha + r)
        out = z + beta * h * diff
        ld = (d - 1) * torch.log1p(beta * h) + torch.log1p(beta * h - beta * h ** 2 * r)
        return out, ld.squeeze(1)


case("flow_radial_log1p_logdet", lambda: (R(5, 4),), train=True)(lambda: RadialFlow())


class CNFHutchinson(nn.Module):
    """A continuous normalising flow step: Euler steps of dz/dt = f(z, t) with the divergence
    estimated by Hutchinson's trick (vector-Jacobian product with create_graph), a Rademacher
    probe from an explicit generator."""

    def __init__(self, d=3):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d + 1, 8), nn.Tanh(), nn.Linear(8, d))

    def forward(self, z, steps=3):
        g = torch.Generator().manual_seed(1)
        e = torch.randint(0, 2, z.shape, generator=g).float() * 2 - 1
        logp = torch.zeros(z.size(0))
        dt = 1.0 / steps
        with torch.enable_grad():
            z = z.requires_grad_(True)
            for k in range(steps):
                t = torch.full((z.size(0), 1), k * dt)
                dz = self.f(torch.cat([z, t], 1))
                vjp = torch.autograd.grad(dz, z, e, create_graph=True)[0]
                logp = logp - dt * (vjp * e).sum(1)
                z = z + dt * dz
        return z, logp


case("flow_cnf_hutchinson_trace_euler", lambda: (R(4, 3),), context=grad_ctx)(lambda: CNFHutchinson())


@fn_case("flow_squeeze_unsqueeze_space_to_depth_roundtrip", lambda i=0: (R(2, 3, 4, 6),))
def flow_squeeze_unsqueeze_space_to_depth_roundtrip(x, f=2):
    """Glow / RealNVP squeeze: view + permute + contiguous view to (C*4, H/2, W/2) and back, the
    checkerboard mask built by (i + j) % 2, pixel_unshuffle compared."""
    b, c, h, w = x.shape
    y = x.view(b, c, h // f, f, w // f, f).permute(0, 1, 3, 5, 2, 4).contiguous().view(b, c * f * f, h // f, w // f)
    back = y.view(b, c, f, f, h // f, w // f).permute(0, 1, 4, 2, 5, 3).contiguous().view(b, c, h, w)
    ii, jj = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    mask = ((ii + jj) % 2).to(x.dtype)
    return y, (back - x).abs().max(), x * mask, F.pixel_unshuffle(x, f) - y


# ============================================================================ NeRF
@fn_case("nerf_integrated_positional_encoding_mip", lambda i=0: (R(5, 3), U(5, 3) * 0.1))
def nerf_integrated_positional_encoding_mip(mean, var, min_deg=0, max_deg=4):
    """mip-NeRF's integrated positional encoding: scales 2**arange, sin of [mu, mu + pi/2] damped
    by exp(-0.5 * var * scale^2); plus the vanilla encoding with include_input."""
    scales = 2.0 ** torch.arange(min_deg, max_deg)
    sm = (mean[..., None, :] * scales[:, None]).reshape(mean.shape[:-1] + (-1,))
    sv = (var[..., None, :] * scales[:, None] ** 2).reshape(var.shape[:-1] + (-1,))
    ipe = torch.exp(-0.5 * torch.cat([sv, sv], -1)) * torch.sin(torch.cat([sm, sm + 0.5 * math.pi], -1))
    freq = 2.0 ** torch.linspace(0.0, 3.0, 4)
    pe = [mean] + [fn(mean * f) for f in freq for fn in (torch.sin, torch.cos)]
    return ipe, torch.cat(pe, -1)


@fn_case("nerf_stratified_and_inverse_cdf_sampling", lambda i=0: (U(4, 1) + 1, U(4, 6) + 1e-3))
def nerf_stratified_and_inverse_cdf_sampling(near, weights, n=6, n_fine=5):
    """NeRF sampling: stratified t values (mids, lower / upper, torch.rand from a seeded
    generator), hierarchical sampling: pdf -> cdf with a leading zero, searchsorted(right=True),
    clamped below / above indices, gather, linear inverse with a denom < 1e-5 guard."""
    g = torch.Generator().manual_seed(3)
    far = near + 2.0
    t = torch.linspace(0.0, 1.0, n)
    z = near * (1 - t) + far * t
    mids = 0.5 * (z[..., 1:] + z[..., :-1])
    upper = torch.cat([mids, z[..., -1:]], -1)
    lower = torch.cat([z[..., :1], mids], -1)
    z = lower + (upper - lower) * torch.rand(z.shape, generator=g)
    bins = 0.5 * (z[..., 1:] + z[..., :-1])
    w = weights[..., 1:-1] + 1e-5
    pdf = w / w.sum(-1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[..., :1]), torch.cumsum(pdf, -1)], -1)
    u = torch.rand(list(cdf.shape[:-1]) + [n_fine], generator=g).contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    ig = torch.stack([below, above], -1)
    shape = [ig.shape[0], ig.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(shape), 2, ig)
    bins_g = torch.gather(bins.unsqueeze(1).expand(shape), 2, ig)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    tt = (u - cdf_g[..., 0]) / denom
    samples = bins_g[..., 0] + tt * (bins_g[..., 1] - bins_g[..., 0])
    return torch.sort(torch.cat([z, samples], -1), -1)[0]


class VolumeRender(nn.Module):
    """raw2outputs: dists with a 1e10 last interval scaled by the ray direction norm, alpha =
    1 - exp(-relu(sigma) * dist), transmittance by an exclusive cumprod (cat of ones), rgb, depth,
    disparity (1 / max(1e-10, depth / acc)), acc, a white background."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, pts, z, rays_d):
        raw = self.mlp(pts)
        dists = z[..., 1:] - z[..., :-1]
        dists = torch.cat([dists, torch.tensor([1e10]).expand(dists[..., :1].shape)], -1)
        dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
        rgb = torch.sigmoid(raw[..., :3])
        alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * dists)
        T = torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
        w = alpha * T
        rgb_map = torch.sum(w[..., None] * rgb, -2)
        depth = torch.sum(w * z, -1)
        acc = torch.sum(w, -1)
        disp = 1.0 / torch.max(1e-10 * torch.ones_like(depth), depth / acc)
        return rgb_map + (1.0 - acc[..., None]), depth, disp, acc


case("nerf_volume_render_exclusive_cumprod_white_bkgd", lambda i=0: (
    R(3, 5, 3), torch.sort(U(3, 5) * 4 + 2, -1)[0], R(3, 3)), train=True)(lambda: VolumeRender())


@fn_case("nerf_get_rays_meshgrid_xy_c2w", lambda i=0: (torch.cat([torch.linalg.qr(R(3, 3))[0], R(3, 1)], 1),
                                                       torch.tensor(20.0 + i)))
def nerf_get_rays_meshgrid_xy_c2w(c2w, focal, H=4, W=5):
    """get_rays: pixel grid by meshgrid indexing='xy', camera-space directions (-y, -z convention),
    rotated by c2w's 3x3 by a broadcast multiply-sum, origins expanded; NDC shift of origins to
    the near plane."""
    i, j = torch.meshgrid(torch.linspace(0, W - 1, W), torch.linspace(0, H - 1, H), indexing="xy")
    dirs = torch.stack([(i - W * 0.5) / focal, -(j - H * 0.5) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    t = -(1.0 + rays_o[..., 2]) / rays_d[..., 2]
    rays_o = rays_o + t[..., None] * rays_d
    return rays_o, F.normalize(rays_d, dim=-1)


# ============================================================================ optimizers by hand
class Adan(nn.Module):
    """Adan (Xie et al.): three moment buffers (m, v on the gradient difference, n on the squared
    corrected gradient), the previous gradient kept, a step counter buffer, decoupled decay."""

    def __init__(self, lr=0.05, b1=0.02, b2=0.08, b3=0.01, wd=0.02, eps=1e-8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
        self.h = dict(lr=lr, b1=b1, b2=b2, b3=b3, wd=wd, eps=eps)
        for i, p in enumerate(self.net.parameters()):
            for s in ("m", "v", "n", "pg"):
                self.register_buffer(f"{s}{i}", torch.zeros_like(p))
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    def forward(self, x, y):
        loss = F.mse_loss(self.net(x), y)
        self.net.zero_grad()
        loss.backward()
        h = self.h
        self.step += 1
        with torch.no_grad():
            for i, p in enumerate(self.net.parameters()):
                m, v, n, pg = (getattr(self, f"{s}{i}") for s in ("m", "v", "n", "pg"))
                g = p.grad
                diff = torch.where(self.step > 1, g - pg, torch.zeros_like(g))
                m.mul_(1 - h["b1"]).add_(g, alpha=h["b1"])
                v.mul_(1 - h["b2"]).add_(diff, alpha=h["b2"])
                gg = g + (1 - h["b2"]) * diff
                n.mul_(1 - h["b3"]).addcmul_(gg, gg, value=h["b3"])
                eta = h["lr"] / (n.sqrt() + h["eps"])
                p.sub_(eta * (m + (1 - h["b2"]) * v)).div_(1 + h["lr"] * h["wd"])
                pg.copy_(g)
        return loss.detach()


case("opt_adan_three_moments_prev_grad", lambda: (R(8, 4), R(8, 1)), train=True, ncalls=4)(lambda: Adan())


class SAM(nn.Module):
    """Sharpness-aware minimisation: first backward, e_w = rho * g / ||g|| (global norm over a
    torch.stack of per-parameter norms), params perturbed in place, second backward, restored,
    SGD step with the second gradient."""

    def __init__(self, rho=0.05, lr=0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))
        self.rho, self.lr = rho, lr

    def forward(self, x, y):
        params = list(self.net.parameters())
        loss = F.cross_entropy(self.net(x), y)
        self.net.zero_grad()
        loss.backward()
        gnorm = torch.norm(torch.stack([p.grad.norm(p=2) for p in params]), p=2)
        eps = []
        with torch.no_grad():
            for p in params:
                e = p.grad * (self.rho / (gnorm + 1e-12))
                p.add_(e)
                eps.append(e)
        self.net.zero_grad()
        loss2 = F.cross_entropy(self.net(x), y)
        loss2.backward()
        with torch.no_grad():
            for p, e in zip(params, eps):
                p.sub_(e)
                p.sub_(self.lr * p.grad)
        return loss.detach(), loss2.detach()


case("opt_sam_two_pass_perturb_restore", lambda: (R(7, 5), I(0, 3, 7)), train=True, ncalls=4)(lambda: SAM())


class LAMB(nn.Module):
    """LAMB: Adam moments with bias correction by a Python step count, the trust ratio
    ||w|| / ||update|| by nested torch.where (1 when either norm is 0: a zero-initialised bias)."""

    def __init__(self, lr=0.01, betas=(0.9, 0.999), wd=0.01):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
        nn.init.zeros_(self.net[2].bias)
        self.lr, self.betas, self.wd, self.t = lr, betas, wd, 0
        self.state = {}

    def forward(self, x, y):
        loss = F.mse_loss(self.net(x), y)
        self.net.zero_grad()
        loss.backward()
        self.t += 1
        b1, b2 = self.betas
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                st = self.state.setdefault(name, {"m": torch.zeros_like(p), "v": torch.zeros_like(p)})
                st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                upd = (st["m"] / (1 - b1 ** self.t)) / ((st["v"] / (1 - b2 ** self.t)).sqrt() + 1e-6) + self.wd * p
                w_norm, u_norm = p.norm(), upd.norm()
                trust = torch.where(w_norm > 0, torch.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
                p.add_(upd * trust, alpha=-self.lr)
        return loss.detach()


case("opt_lamb_trust_ratio_nested_where", lambda: (R(6, 4), R(6, 2)), train=True, ncalls=4)(lambda: LAMB())


class AccumClip(nn.Module):
    """Gradient accumulation over micro-batches (torch.split of the batch, loss / accum_steps),
    clip_grad_value_ then clip_grad_norm_ with norm_type=inf, torch.optim.SGD step made outside
    the compiled call, the total norm returned."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)

    def forward(self, x, y, micro=2):
        self.opt.zero_grad(set_to_none=True)
        xs, ys = torch.split(x, micro), torch.split(y, micro)
        total = 0.0
        for xb, yb in zip(xs, ys):
            loss = F.smooth_l1_loss(self.net(xb), yb) / len(xs)
            loss.backward()
            total += loss.item()
        nn.utils.clip_grad_value_(self.net.parameters(), 0.05)
        norm = nn.utils.clip_grad_norm_(self.net.parameters(), 0.02, norm_type=float("inf"))
        self.opt.step()
        return total, norm


case("opt_grad_accum_clip_value_then_inf_norm", lambda i=0: (R(5 + i, 4), R(5 + i, 1) * 3), train=True, ncalls=4)(
    lambda: AccumClip())


class EMAAveraged(nn.Module):
    """torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn: a training step, then
    update_parameters; the EMA copy's output and n_averaged returned."""

    def __init__(self):
        super().__init__()
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
        self.net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        self.ema = AveragedModel(self.net, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=0.01)

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.ema.update_parameters(self.net)
        return loss.detach(), self.ema(x), self.ema.n_averaged.clone()


case("opt_swa_utils_averaged_model_ema", lambda: (R(5, 3), R(5, 2)), train=True, ncalls=4)(lambda: EMAAveraged())


# ============================================================================ distributions
class BetaPolicy(nn.Module):
    """A Beta policy for bounded actions (Chou et al.): concentrations softplus + 1, rsample
    mapped to [low, high], log_prob of the unscaled action, entropy, a reparameterised loss."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, obs):
        a, b = (F.softplus(self.net(obs)) + 1.0).chunk(2, -1)
        dist = torch.distributions.Beta(a, b)
        torch.manual_seed(5)
        u = dist.rsample()
        act = -2.0 + 4.0 * u
        lp = dist.log_prob(u.clamp(1e-6, 1 - 1e-6)).sum(-1)
        return act, lp, dist.entropy().sum(-1), dist.mean


case("dist_beta_policy_rsample_scaled_actions", lambda: (R(5, 4),), train=True)(lambda: BetaPolicy())


@fn_case("dist_dirichlet_log_prob_kl_divergence", lambda i=0: (U(4, 3) * 3 + 0.2, U(4, 3) * 2 + 0.5, None))
def dist_dirichlet_log_prob_kl_divergence(alpha, beta, _unused):
    """Evidential / topic-model Dirichlets: log_prob of a simplex point (softmax), KL(Dir(alpha) ||
    Dir(beta)) by torch.distributions.kl_divergence, the mean and concentration sum."""
    D = torch.distributions
    p, q = D.Dirichlet(alpha), D.Dirichlet(beta)
    x = torch.softmax(alpha, -1)
    return p.log_prob(x), D.kl_divergence(p, q), p.mean, p.concentration.sum(-1)


class MDN(nn.Module):
    """A mixture density network: MixtureSameFamily(Categorical(logits), Independent(Normal, 1)),
    negative log-likelihood of targets, the mixture mean and variance."""

    def __init__(self, k=3, d=2):
        super().__init__()
        self.k, self.d = k, d
        self.h = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
        self.pi = nn.Linear(16, k)
        self.mu = nn.Linear(16, k * d)
        self.sig = nn.Linear(16, k * d)

    def forward(self, x, y):
        h = self.h(x)
        D = torch.distributions
        comp = D.Independent(D.Normal(self.mu(h).view(-1, self.k, self.d),
                                      F.softplus(self.sig(h)).view(-1, self.k, self.d) + 1e-3), 1)
        mix = D.MixtureSameFamily(D.Categorical(logits=self.pi(h)), comp)
        return -mix.log_prob(y).mean(), mix.mean, mix.variance


case("dist_mdn_mixture_same_family_independent", lambda: (R(6, 4), R(6, 2)), train=True)(lambda: MDN())


class MVNHead(nn.Module):
    """A full-covariance Gaussian head: scale_tril from a lower-triangular fill (tril_indices,
    softplus diagonal), MultivariateNormal log_prob, rsample under a seed, entropy."""

    def __init__(self, d=3):
        super().__init__()
        self.d = d
        self.mu = nn.Linear(4, d)
        self.tri = nn.Linear(4, d * (d + 1) // 2)

    def forward(self, x, y):
        b = x.size(0)
        L = torch.zeros(b, self.d, self.d)
        ii, jj = torch.tril_indices(self.d, self.d)
        L[:, ii, jj] = self.tri(x)
        diag = torch.arange(self.d)
        L[:, diag, diag] = F.softplus(L[:, diag, diag]) + 1e-3
        dist = torch.distributions.MultivariateNormal(self.mu(x), scale_tril=L)
        torch.manual_seed(2)
        return dist.log_prob(y), dist.rsample(), dist.entropy(), dist.covariance_matrix


case("dist_mvn_scale_tril_tril_indices_fill", lambda: (R(4, 4), R(4, 3)), train=True)(lambda: MVNHead())


@fn_case("dist_lowrank_mvn_log_prob_entropy", lambda i=0: (R(3, 4), R(3, 4, 2) * 0.5, U(3, 4) + 0.1, R(3, 4)))
def dist_lowrank_mvn_log_prob_entropy(loc, cov_factor, cov_diag, x):
    """LowRankMultivariateNormal (GP / factor-analysis heads): log_prob through the capacitance
    matrix, entropy, variance."""
    d = torch.distributions.LowRankMultivariateNormal(loc, cov_factor, cov_diag)
    return d.log_prob(x), d.entropy(), d.variance


class TanhGaussianActor(nn.Module):
    """SAC's actor built from torch.distributions: TransformedDistribution(Independent(Normal),
    [TanhTransform(cache_size=1), AffineTransform]) rsample + log_prob of the same sample."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 4)

    def forward(self, obs):
        D = torch.distributions
        mu, log_std = self.net(obs).chunk(2, -1)
        base = D.Independent(D.Normal(mu, log_std.clamp(-5, 2).exp()), 1)
        dist = D.TransformedDistribution(base, [D.transforms.TanhTransform(cache_size=1),
                                                D.transforms.AffineTransform(0.5, 2.0)])
        torch.manual_seed(9)
        a = dist.rsample()
        return a, dist.log_prob(a)


case("dist_sac_transformed_tanh_affine_cache", lambda: (R(5, 3),), train=True)(lambda: TanhGaussianActor())


class ZINB(nn.Module):
    """scVI's zero-inflated negative binomial log-likelihood by hand (lgamma, softplus, where on
    x < 1e-8), next to torch.distributions.NegativeBinomial's log_prob."""

    def __init__(self, g=5):
        super().__init__()
        self.dec = nn.Linear(3, 3 * g)
        self.log_theta = nn.Parameter(torch.zeros(g))

    def forward(self, z, x, eps=1e-8):
        mu_l, pi, _ = self.dec(z).chunk(3, -1)
        mu = mu_l.exp()
        theta = self.log_theta.exp()
        softplus_pi = F.softplus(-pi)
        log_theta_eps = torch.log(theta + eps)
        log_theta_mu_eps = torch.log(theta + mu + eps)
        pi_theta_log = -pi + theta * (log_theta_eps - log_theta_mu_eps)
        case_zero = F.softplus(pi_theta_log) - softplus_pi
        case_non_zero = (-softplus_pi + pi_theta_log + x * (torch.log(mu + eps) - log_theta_mu_eps)
                         + torch.lgamma(x + theta) - torch.lgamma(theta) - torch.lgamma(x + 1))
        res = torch.where(x < eps, case_zero, case_non_zero)
        nb = torch.distributions.NegativeBinomial(total_count=theta, logits=(mu + eps).log() - theta.log())
        return -res.sum(-1), nb.log_prob(x).sum(-1)


case("dist_zinb_lgamma_where_zero_case", lambda: (R(4, 3), torch.poisson(U(4, 5) * 3)), train=True)(lambda: ZINB())


@fn_case("dist_relaxed_one_hot_temperature_rsample", lambda i=0: (R(4, 5), torch.tensor(0.5 + 0.2 * i)))
def dist_relaxed_one_hot_temperature_rsample(logits, temperature):
    """RelaxedOneHotCategorical (concrete) rsample at a tensor temperature, its log_prob, the
    straight-through hard sample (one_hot of argmax - soft.detach() + soft)."""
    d = torch.distributions.RelaxedOneHotCategorical(temperature, logits=logits)
    torch.manual_seed(4)
    y = d.rsample()
    hard = F.one_hot(y.argmax(-1), y.size(-1)).to(y) - y.detach() + y
    return y, d.log_prob(y), hard


@fn_case("dist_bernoulli_binomial_logits_counts", lambda i=0: (R(6), I(0, 5, 6).float(), torch.full((6,), 4.0)))
def dist_bernoulli_binomial_logits_counts(logits, k, n):
    """Bernoulli(logits) log_prob / entropy of {0, 1} labels, Binomial(total_count, logits) of counts
    (k > n for one element: eager's validation raises; validate_args=False for that one)."""
    D = torch.distributions
    b = D.Bernoulli(logits=logits)
    y = (k > 2).float()
    bi = D.Binomial(total_count=n, logits=logits, validate_args=False)
    return b.log_prob(y), b.entropy(), bi.log_prob(k.clamp(max=4)), bi.mean


@fn_case("dist_laplace_gamma_kl_and_cdf", lambda i=0: (R(5), U(5) + 0.3, U(5) + 0.5, U(5) + 0.5))
def dist_laplace_gamma_kl_and_cdf(loc, scale, conc, rate):
    """Laplace cdf / icdf / KL between two Laplaces, Gamma log_prob / entropy / KL(Gamma, Gamma)
    (digamma, lgamma), StudentT log_prob."""
    D = torch.distributions
    la, lb = D.Laplace(loc, scale), D.Laplace(loc * 0.5, scale + 0.2)
    ga, gb = D.Gamma(conc, rate), D.Gamma(conc + 1.0, rate * 2)
    st = D.StudentT(3.0 + conc, loc, scale)
    return (la.cdf(loc + 0.3), la.icdf(torch.full_like(loc, 0.7)), D.kl_divergence(la, lb),
            ga.log_prob(scale), ga.entropy(), D.kl_divergence(ga, gb), st.log_prob(conc))


# ============================================================================ segments / sparse-ish
@fn_case("seg_scatter_reduce_mean_empty_segments", lambda i=0: (R(7, 3), torch.tensor([0, 0, 2, 2, 2, 4, 4 - i])))
def seg_scatter_reduce_mean_empty_segments(x, seg, n=6):
    """Segment mean / max / min with scatter_reduce(include_self=False) over 6 segments, segments
    1, 3 and 5 empty (the zeros init kept for them), counts by bincount."""
    idx = seg.unsqueeze(-1).expand_as(x)
    mean = torch.zeros(n, x.size(1)).scatter_reduce(0, idx, x, "mean", include_self=False)
    amax = torch.zeros(n, x.size(1)).scatter_reduce(0, idx, x, "amax", include_self=False)
    amin = torch.full((n, x.size(1)), float("inf")).scatter_reduce(0, idx, x, "amin", include_self=True)
    return mean, amax, amin, torch.bincount(seg, minlength=n)


@fn_case("seg_csr_offsets_repeat_interleave_cumsum", lambda i=0: (R(9, 2), torch.tensor([2, 0, 4, 3])))
def seg_csr_offsets_repeat_interleave_cumsum(x, lengths):
    """segment_csr by hand: offsets = cat(0, cumsum(lengths)), segment sums by differences of a
    cumsum with a leading zero row, segment ids by repeat_interleave, a per-segment softmax by
    subtracting the segment max (index_reduce amax) and dividing by index_add sums."""
    offsets = torch.cat([torch.zeros(1, dtype=lengths.dtype), lengths.cumsum(0)])
    cs = torch.cat([torch.zeros(1, x.size(1)), x.cumsum(0)])
    sums = cs[offsets[1:]] - cs[offsets[:-1]]
    ids = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    mx = torch.full((len(lengths), x.size(1)), float("-inf")).index_reduce(0, ids, x, "amax")
    e = (x - mx[ids]).exp()
    den = torch.zeros(len(lengths), x.size(1)).index_add(0, ids, e)
    return sums, e / den[ids], offsets


class TopKAttention(nn.Module):
    """Top-k sparse attention (Explicit Sparse Transformer): scores below each row's k-th largest
    masked to -inf by a comparison against topk values[..., -1:], a causal mask too."""

    def __init__(self, d=8, k=3):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.k = k

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        t = s.size(-1)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        s = s.masked_fill(causal, float("-inf"))
        kth = s.topk(min(self.k, t), -1)[0][..., -1:]
        s = s.masked_fill(s < kth, float("-inf"))
        return s.softmax(-1) @ v


case("sparse_topk_attention_kth_value_mask", lambda i=0: (R(2, 6 + i, 8),), train=True)(lambda: TopKAttention())


class NMSparseLinear(nn.Module):
    """2:4 semi-structured sparsity (ASP-style): per group of 4 weights the 2 largest by |w| kept
    (topk indices scattered into a bool mask), a straight-through masked weight."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        w = self.lin.weight
        g = w.detach().abs().reshape(-1, 4)
        idx = g.topk(2, -1)[1]
        mask = torch.zeros_like(g, dtype=torch.bool).scatter_(1, idx, True).reshape(w.shape)
        ws = w * mask
        return F.linear(x, ws, self.lin.bias), mask.float().mean()


case("sparse_2_4_pruning_mask_topk_scatter", lambda: (R(3, 8),), train=True)(lambda: NMSparseLinear())


@fn_case("sparse_masked_select_masked_scatter_roundtrip", lambda i=0: (R(4, 5), R(4, 5) > 0.3 * i))
def sparse_masked_select_masked_scatter_roundtrip(x, mask):
    """Packing the kept values by masked_select, transforming them, writing them back with
    masked_scatter; nonzero(as_tuple=True) coordinates, count_nonzero per row."""
    vals = torch.masked_select(x, mask)
    out = torch.zeros_like(x).masked_scatter(mask, vals * 2 + 1)
    rows, cols = mask.nonzero(as_tuple=True)
    return out, rows, cols, torch.count_nonzero(mask, dim=1)


@fn_case("sparse_coo_tensor_spmm_graph_propagation", lambda i=0: (
    torch.tensor([[0, 1, 2, 3, 3, 1], [1, 2, 0, 1, 2, 3]]), U(6), R(4, 3)))
def sparse_coo_tensor_spmm_graph_propagation(edge_index, w, x):
    """A sparse adjacency (torch.sparse_coo_tensor, coalesce) times dense features by
    torch.sparse.mm, row-normalised by torch.sparse.sum; the dense equivalent next to it."""
    A = torch.sparse_coo_tensor(edge_index, w, (4, 4)).coalesce()
    deg = torch.sparse.sum(A, dim=1).to_dense()
    y = torch.sparse.mm(A, x) / deg.clamp(min=1e-6).unsqueeze(-1)
    dense = torch.zeros(4, 4).index_put((edge_index[0], edge_index[1]), w, accumulate=True)
    return y, dense @ x


# ============================================================================ where chains / NaN
@fn_case("nan_double_where_safe_log_sqrt_grad", lambda i=0: (torch.tensor([-1.0, 0.0, 0.5, 2.0, float("nan")]).requires_grad_(),),
         context=grad_ctx)
def nan_double_where_safe_log_sqrt_grad(x):
    """The 'double where' trick: safe = where(x > 0, x, 1) before log / sqrt so the unused branch
    has no NaN gradient; the naive where's NaN gradient next to it."""
    safe = torch.where(x > 0, x, torch.ones_like(x))
    y = torch.where(x > 0, torch.log(safe) + torch.sqrt(safe), torch.zeros_like(x))
    naive = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))
    g1, = torch.autograd.grad(y.sum(), x, retain_graph=True)
    g2, = torch.autograd.grad(naive.sum(), x)
    return y, g1, g2


@fn_case("nan_masked_nanmean_nansum_isnan_fill", lambda i=0: (torch.where(R(4, 5) > 0.8, torch.tensor(float("nan")), R(4, 5)),))
def nan_masked_nanmean_nansum_isnan_fill(x):
    """Missing values as NaN: nanmean / nansum per row (an all-NaN row possible), isnan counts,
    forward-fill by cummax of valid positions, nan_to_num with posinf / neginf."""
    valid = ~torch.isnan(x)
    idx = torch.where(valid, torch.arange(x.size(1)).expand_as(x), torch.zeros_like(x, dtype=torch.long))
    last = idx.cummax(1)[0]
    ffill = torch.gather(torch.nan_to_num(x, nan=0.0), 1, last)
    return (x.nanmean(1), x.nansum(1), valid.sum(1), ffill,
            torch.nan_to_num(x / 0.0, nan=-1.0, posinf=9.0, neginf=-9.0))


@fn_case("nan_all_masked_rows_mean_where_isnan", lambda i=0: (R(4, 6), torch.tensor([[1, 1, 0, 0, 0, 0], [0] * 6, [1] * 6, [0, 0, 0, 0, 0, 1 - i]]).bool()))
def nan_all_masked_rows_mean_where_isnan(x, m):
    """Masked mean pooling as sentence-transformers write it (sum / clamp(count, 1e-9)) and as
    others do (0 / 0 = NaN replaced by where(isnan)), masked max with -inf for empty rows."""
    mf = m.unsqueeze(-1).float() if x.dim() == 3 else m.float()
    a = (x * mf).sum(1) / torch.clamp(mf.sum(1), min=1e-9)
    b = (x * mf).sum(1) / mf.sum(1)
    b = torch.where(torch.isnan(b), torch.zeros_like(b), b)
    c = x.masked_fill(~m, float("-inf")).max(1)[0]
    return a, b, c, torch.isinf(c)


@fn_case("nan_fmax_fmin_vs_maximum_clamp_nan_propagation", lambda i=0: (
    torch.tensor([1.0, float("nan"), -2.0, float("nan"), 3.0]), torch.tensor([float("nan"), 2.0, -1.0, float("nan"), 0.0])))
def nan_fmax_fmin_vs_maximum_clamp_nan_propagation(a, b):
    """NaN semantics side by side: fmax / fmin ignore NaN, maximum / minimum propagate it, clamp
    keeps NaN, where on a NaN comparison, sort / argmax / topk put NaN as largest, amax too."""
    return (torch.fmax(a, b), torch.fmin(a, b), torch.maximum(a, b), torch.minimum(a, b),
            a.clamp(-1.0, 2.0), torch.where(a > b, a, b), torch.sort(a)[0], a.argmax(), a.topk(2)[1], a.amax(),
            torch.where(a != a, torch.zeros_like(a), a).sum())


@fn_case("nan_robust_huber_targets_missing_mask", lambda i=0: (R(6, 3).requires_grad_(),
                                                            torch.where(R(6, 3) > 0.5, torch.tensor(float("nan")), R(6, 3))),
         context=grad_ctx)
def nan_robust_huber_targets_missing_mask(pred, target, delta=1.0):
    """Multi-target regression with missing labels (NaN): mask = ~isnan(target), Huber on the
    masked elements by boolean indexing, normalised by mask count; pseudo-Huber on where-filled
    targets; gradient of pred (zero where the target is missing)."""
    mask = ~torch.isnan(target)
    h = F.huber_loss(pred[mask], target[mask], delta=delta, reduction="sum") / mask.sum().clamp(min=1)
    t = torch.where(mask, target, pred.detach())
    ph = (delta ** 2 * (torch.sqrt(1 + ((pred - t) / delta) ** 2) - 1)).mean()
    g, = torch.autograd.grad(h + ph, pred)
    return h, ph, g


# ============================================================================ losses
@fn_case("loss_ce_label_smoothing_class_weights_ignore_index", lambda i=0: (R(6, 4), torch.tensor([0, 3, -100, 2, 1, -100]),
                                                                          U(4) + 0.5))
def loss_ce_label_smoothing_class_weights_ignore_index(logits, y, w):
    """F.cross_entropy with label_smoothing, class weights and ignore_index together (reductions
    mean / sum / none), on (N, C) and on (N, C, 1) layouts."""
    kw = dict(weight=w, ignore_index=-100, label_smoothing=0.1)
    return (F.cross_entropy(logits, y, **kw), F.cross_entropy(logits, y, reduction="sum", **kw),
            F.cross_entropy(logits, y, reduction="none", **kw),
            F.cross_entropy(logits.unsqueeze(-1), y.unsqueeze(-1), **kw))


class Distill(nn.Module):
    """Hinton distillation: KL(softmax(t / T) || log_softmax(s / T)) batchmean * T^2 mixed with the
    hard-label CE, teacher under no_grad and eval, backward into the student."""

    def __init__(self, T=4.0, alpha=0.7):
        super().__init__()
        self.teacher = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
        self.student = nn.Linear(5, 3)
        self.T, self.alpha = T, alpha

    def forward(self, x, y):
        with torch.no_grad():
            t = self.teacher(x)
        s = self.student(x)
        kd = F.kl_div(F.log_softmax(s / self.T, -1), F.softmax(t / self.T, -1), reduction="batchmean") * self.T ** 2
        loss = self.alpha * kd + (1 - self.alpha) * F.cross_entropy(s, y)
        self.student.zero_grad()
        loss.backward()
        return loss.detach(), self.student.weight.grad.clone()


case("loss_distillation_kl_batchmean_temperature", lambda: (R(6, 5), I(0, 3, 6)), train=True)(lambda: Distill())


@fn_case("loss_poly1_and_multiclass_focal_alpha_gather", lambda i=0: (R(7, 4), I(0, 4, 7), U(4)))
def loss_poly1_and_multiclass_focal_alpha_gather(logits, y, alpha, gamma=2.0, eps=1.0):
    """Poly-1 (CE + eps * (1 - p_t)) with p_t from one_hot, and multi-class focal loss with a
    per-class alpha gathered by label: -alpha_y (1 - p_t)^gamma log p_t."""
    ce = F.cross_entropy(logits, y, reduction="none")
    pt = torch.sum(F.one_hot(y, logits.size(-1)) * F.softmax(logits, -1), -1)
    poly1 = (ce + eps * (1 - pt)).mean()
    logp = F.log_softmax(logits, -1).gather(1, y.unsqueeze(1)).squeeze(1)
    focal = -(alpha.gather(0, y) * (1 - logp.exp()) ** gamma * logp).mean()
    return poly1, focal


@fn_case("loss_multilabel_soft_dice_asl", lambda i=0: (R(5, 6), I(0, 2, 5, 6).float()))
def loss_multilabel_soft_dice_asl(logits, y, gn=4, gp=1, clip=0.05):
    """Multi-label losses: soft Dice per label, Asymmetric Loss (Ridnik et al.: the negative
    probability shifted by clip and clamped at 1, separate focusing for positives / negatives,
    the focusing weight computed under no_grad)."""
    p = torch.sigmoid(logits)
    dice = 1 - (2 * (p * y).sum(0) + 1) / (p.sum(0) + y.sum(0) + 1)
    xs_pos, xs_neg = p, 1 - p
    xs_neg = (xs_neg + clip).clamp(max=1)
    los_pos = y * torch.log(xs_pos.clamp(min=1e-8))
    los_neg = (1 - y) * torch.log(xs_neg.clamp(min=1e-8))
    loss = los_pos + los_neg
    with torch.no_grad():
        pt = xs_pos * y + xs_neg * (1 - y)
        w = torch.pow(1 - pt, gp * y + gn * (1 - y))
    return dice.mean(), -(loss * w).sum()


# ============================================================================ small blocks
class GeM(nn.Module):
    """Generalized-mean pooling (image retrieval): clamp(min=eps).pow(p) avg-pooled, pow(1/p),
    p a learnable Parameter; L2-normalised descriptors."""

    def __init__(self, p=3.0, eps=1e-6):
        super().__init__()
        self.p = nn.Parameter(torch.ones(1) * p)
        self.eps = eps
        self.conv = nn.Conv2d(3, 6, 3)

    def forward(self, x):
        f = self.conv(x)
        g = F.avg_pool2d(f.clamp(min=self.eps).pow(self.p), (f.size(-2), f.size(-1))).pow(1.0 / self.p)
        return F.normalize(g.flatten(1), dim=-1)


case("block_gem_pooling_learnable_p", lambda i=0: (R(2, 3, 7 + i, 6),), train=True)(lambda: GeM())


class CBAM(nn.Module):
    """CBAM: channel attention from avg- and max-pooled descriptors through a shared MLP,
    spatial attention from channel-wise mean / max concatenated through a 7x7 conv."""

    def __init__(self, c=8, r=4):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(c, c // r, 1, bias=False), nn.ReLU(), nn.Conv2d(c // r, c, 1, bias=False))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3, bias=False)

    def forward(self, x):
        ca = torch.sigmoid(self.mlp(F.adaptive_avg_pool2d(x, 1)) + self.mlp(F.adaptive_max_pool2d(x, 1)))
        x = x * ca
        sa = torch.cat([x.mean(1, keepdim=True), x.max(1, keepdim=True)[0]], 1)
        return x * torch.sigmoid(self.spatial(sa))


case("block_cbam_channel_spatial_attention", lambda: (R(2, 8, 6, 5),), train=True)(lambda: CBAM())


class DropPathBlock(nn.Module):
    """timm's drop_path: a per-sample Bernoulli keep mask of shape (B, 1, 1, ...) by
    x.new_empty(shape).bernoulli_(keep), divided by keep_prob (scale_by_keep); train then eval."""

    def __init__(self, p=0.3):
        super().__init__()
        self.p = p
        self.f = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 6))

    def drop_path(self, x):
        if self.p == 0.0 or not self.training:
            return x
        keep = 1 - self.p
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        rt = x.new_empty(shape).bernoulli_(keep)
        if keep > 0.0:
            rt.div_(keep)
        return x * rt

    def forward(self, x):
        return x + self.drop_path(self.f(x))


case("block_drop_path_bernoulli_new_empty_train_eval", lambda: (R(5, 3, 6),), train=True, ncalls=4,
     between=lambda m, i: m.train(i < 2))(lambda: DropPathBlock())


class SwinRelBias(nn.Module):
    """Swin's relative position bias: a table of (2Wh-1)(2Ww-1) x heads, the index buffer built
    from meshgrid coords (flatten, pairwise differences, shifts, multiply, sum), gathered by view(-1)."""

    def __init__(self, ws=(3, 3), heads=2, d=8):
        super().__init__()
        self.ws, self.h = ws, heads
        self.table = nn.Parameter(torch.randn((2 * ws[0] - 1) * (2 * ws[1] - 1), heads) * 0.02)
        coords = torch.stack(torch.meshgrid([torch.arange(ws[0]), torch.arange(ws[1])], indexing="ij"))
        cf = torch.flatten(coords, 1)
        rel = (cf[:, :, None] - cf[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws[0] - 1
        rel[:, :, 1] += ws[1] - 1
        rel[:, :, 0] *= 2 * ws[1] - 1
        self.register_buffer("rpi", rel.sum(-1))
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):           # (B*nW, N, C)
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        att = (q * (c // self.h) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.rpi.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        att = (att + bias.unsqueeze(0)).softmax(-1)
        return (att @ v).transpose(1, 2).reshape(b, n, c)


case("block_swin_relative_position_bias_index", lambda: (R(4, 9, 8),), train=True)(lambda: SwinRelBias())


class T5Buckets(nn.Module):
    """T5's relative_position_bucket: bidirectional, exact small buckets, log-spaced large ones
    (log / math.log ratio, .to(long), torch.min with num_buckets - 1), an Embedding per bucket."""

    def __init__(self, nb=8, md=16, heads=2):
        super().__init__()
        self.nb, self.md = nb, md
        self.emb = nn.Embedding(nb, heads)

    def bucket(self, rel):
        nb = self.nb // 2
        ret = (rel > 0).to(torch.long) * nb
        n = torch.abs(rel)
        max_exact = nb // 2
        is_small = n < max_exact
        large = max_exact + (torch.log(n.float() / max_exact) / math.log(self.md / max_exact) * (nb - max_exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, nb - 1))
        return ret + torch.where(is_small, n, large)

    def forward(self, q_len_t, x):
        q_len = q_len_t.shape[0]
        ctx = torch.arange(q_len, dtype=torch.long)[:, None]
        mem = torch.arange(x.size(1), dtype=torch.long)[None, :]
        b = self.bucket(mem - ctx)
        return self.emb(b).permute(2, 0, 1).unsqueeze(0), b


case("block_t5_relative_position_bucket_log", lambda i=0: (torch.zeros(6 + 5 * i), R(1, 20)))(lambda: T5Buckets())


class Retention(nn.Module):
    """RetNet's parallel retention: decay matrix gamma^(n - m) masked to the lower triangle
    (masked_fill of -inf in the log domain, exp), xPos-free, GroupNorm on heads, swish gate."""

    def __init__(self, d=8, h=2):
        super().__init__()
        self.h = h
        self.qkvg = nn.Linear(d, 4 * d, bias=False)
        self.gn = nn.GroupNorm(h, d)
        self.register_buffer("gammas", 1 - torch.exp(torch.linspace(math.log(1 / 32), math.log(1 / 512), h)))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v, g = self.qkvg(x).chunk(4, -1)
        q, k, v = (z.view(b, t, self.h, -1).transpose(1, 2) for z in (q, k, v))
        idx = torch.arange(t)
        diff = (idx[:, None] - idx[None, :]).float()
        logd = diff * torch.log(self.gammas)[:, None, None]
        D = torch.exp(logd.masked_fill(diff < 0, float("-inf")))
        r = (q @ k.transpose(-1, -2)) * D
        o = (r @ v).transpose(1, 2).reshape(b * t, d)
        return F.silu(g) * self.gn(o).view(b, t, d)


case("block_retnet_parallel_retention_decay_mask", lambda i=0: (R(2, 5 + i, 8),), train=True)(lambda: Retention())


class PerformerFeatures(nn.Module):
    """Performer's FAVOR+ positive random features: an orthogonal projection by QR of Gaussian
    blocks (a buffer), softmax-kernel features exp(wx - |x|^2/2 - max) for keys and queries,
    linear attention by einsum with the normaliser."""

    def __init__(self, d=4, m=8):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        blocks = [torch.linalg.qr(torch.randn(d, d, generator=g))[0].T for _ in range(m // d)]
        mult = torch.randn(m, d, generator=g).norm(dim=1)
        self.register_buffer("proj", torch.diag(mult) @ torch.cat(blocks))
        self.qkv = nn.Linear(d, 3 * d)

    def feat(self, x, is_query):
        x = x * x.size(-1) ** -0.25
        wx = x @ self.proj.T
        diag = (x ** 2).sum(-1, keepdim=True) / 2
        stab = wx.amax(-1, keepdim=True) if is_query else wx.amax()
        return (torch.exp(wx - diag - stab) + 1e-4) / math.sqrt(self.proj.size(0))

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        qp, kp = self.feat(q, True), self.feat(k, False)
        kv = torch.einsum("bnm,bnd->bmd", kp, v)
        z = 1.0 / torch.einsum("bnm,bm->bn", qp, kp.sum(1))
        return torch.einsum("bnm,bmd,bn->bnd", qp, kv, z)


case("block_performer_favor_orthogonal_features", lambda i=0: (R(2, 6 + i, 4),), train=True)(lambda: PerformerFeatures())


class GRUD(nn.Module):
    """GRU-D (Che et al.) input decay for irregular series: x_hat = m x + (1 - m)(gamma x_last +
    (1 - gamma) x_mean), gamma = exp(-relu(W delta + b)), a hidden decay too, last observation
    carried by where inside a Python time loop."""

    def __init__(self, d=3, h=5):
        super().__init__()
        self.gx = nn.Linear(d, d)
        self.gh = nn.Linear(d, h)
        self.cell = nn.GRUCell(2 * d, h)
        self.h = h

    def forward(self, x, m, delta, x_mean):
        b, t, d = x.shape
        h = x.new_zeros(b, self.h)
        x_last = x_mean.expand(b, d)
        for s in range(t):
            gx = torch.exp(-F.relu(self.gx(delta[:, s])))
            gh = torch.exp(-F.relu(self.gh(delta[:, s])))
            xs = torch.where(m[:, s].bool(), x[:, s], gx * x_last + (1 - gx) * x_mean)
            x_last = torch.where(m[:, s].bool(), x[:, s], x_last)
            h = self.cell(torch.cat([xs, m[:, s]], -1), gh * h)
        return h


case("block_gru_d_decay_imputation_time_loop", lambda i=0: (R(2, 5, 3), I(0, 2, 2, 5, 3).float(), U(2, 5, 3) * 3,
                                                          R(3)), train=True)(lambda: GRUD())


class BeamSearch(nn.Module):
    """A beam search loop (fairseq-style, 3 steps): log-probs added to beam scores, topk over the
    flattened (beam * vocab), beam index by floor division and token by remainder, histories
    re-ordered by index_select, EOS hypotheses' scores masked to -inf afterwards."""

    def __init__(self, v=7, d=6, beams=3, eos=1):
        super().__init__()
        self.emb = nn.Embedding(v, d)
        self.rnn = nn.GRUCell(d, d)
        self.out = nn.Linear(d, v)
        self.k, self.eos, self.v = beams, eos, v

    def forward(self, h0, steps=3):
        h = h0.expand(self.k, -1).contiguous()
        scores = torch.tensor([0.0] + [float("-inf")] * (self.k - 1))
        tokens = torch.zeros(self.k, 1, dtype=torch.long)
        for _ in range(steps):
            h = self.rnn(self.emb(tokens[:, -1]), h)
            lp = self.out(h).log_softmax(-1)
            cand = (scores[:, None] + lp).view(-1)
            top, idx = cand.topk(self.k)
            beam = torch.div(idx, self.v, rounding_mode="floor")
            tok = idx % self.v
            tokens = torch.cat([tokens.index_select(0, beam), tok[:, None]], 1)
            h = h.index_select(0, beam)
            scores = top.masked_fill(tok == self.eos, float("-inf"))
        return tokens, scores


case("block_beam_search_flat_topk_floor_div_reorder", lambda: (R(1, 6),))(lambda: BeamSearch())


@fn_case("block_nucleus_sampling_multinomial_generator", lambda i=0: (R(3, 10), torch.tensor(0.8)))
def block_nucleus_sampling_multinomial_generator(logits, top_p):
    """Top-p sampling as HF writes it (sort ascending, cumsum of softmax, remove where
    cumsum <= 1 - top_p keeping the last, scatter back) then torch.multinomial with a seeded
    generator; repetition penalty by gather / where / scatter first."""
    prev = torch.tensor([[1, 2], [3, 3], [0, 9]])
    s = torch.gather(logits, 1, prev)
    s = torch.where(s < 0, s * 1.3, s / 1.3)
    logits = logits.scatter(1, prev, s)
    sl, si = torch.sort(logits, descending=False)
    cp = sl.softmax(-1).cumsum(-1)
    remove = cp <= (1 - top_p)
    remove[..., -1:] = 0
    logits = logits.masked_fill(remove.scatter(1, si, remove), -float("inf"))
    g = torch.Generator().manual_seed(11)
    return torch.multinomial(logits.softmax(-1), 2, replacement=True, generator=g), logits


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


_SMALL = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
_DEC = dict(_SMALL, num_key_value_heads=1, max_position_embeddings=64)

_hf_case("hf_deberta_v1_disentangled_attention", lambda: (I(0, 50, 2, 7), torch.tensor([[1] * 7, [1] * 5 + [0] * 2])),
         lambda T: T.DebertaModel(T.DebertaConfig(
             **_SMALL, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=8)).eval(),
         lambda m, ids, am: m(input_ids=ids, attention_mask=am).last_hidden_state)
_hf_case("hf_sew_squeezed_wav2vec_encoder", lambda: (R(1, 400),),
         lambda T: T.SEWModel(T.SEWConfig(
             hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=8,
             num_conv_pos_embedding_groups=2, squeeze_factor=2)).eval(),
         lambda m, x: m(input_values=x).last_hidden_state)
_hf_case("hf_xlm_langs_sinusoidal_positions", lambda: (I(0, 50, 2, 6),),
         lambda T: T.XLMModel(T.XLMConfig(
             vocab_size=50, emb_dim=16, n_layers=2, n_heads=2, n_langs=3, use_lang_emb=True,
             sinusoidal_embeddings=True, max_position_embeddings=32)).eval(),
         lambda m, ids: m(input_ids=ids, langs=torch.full_like(ids, 2)).last_hidden_state)
_hf_case("hf_markuplm_xpath_embeddings", lambda: (I(0, 50, 2, 5), I(0, 20, 2, 5, 4), I(0, 8, 2, 5, 4)),
         lambda T: T.MarkupLMModel(T.MarkupLMConfig(
             **_SMALL, max_depth=4, xpath_unit_hidden_size=8, max_xpath_tag_unit_embeddings=20,
             max_xpath_subs_unit_embeddings=8)).eval(),
         lambda m, ids, tags, subs: m(input_ids=ids, xpath_tags_seq=tags, xpath_subs_seq=subs).pooler_output)
_hf_case("hf_ibert_float_mode", lambda: (I(0, 50, 2, 6),),
         lambda T: T.IBertModel(T.IBertConfig(**_SMALL, quant_mode=False)).eval(),
         lambda m, ids: m(input_ids=ids).last_hidden_state)
_hf_case("hf_luke_entity_aware_attention", lambda: (I(0, 50, 1, 6), torch.tensor([[1, 2]]),
                                                    torch.tensor([[[1, 2, -1], [3, 4, 5]]])),
         lambda T: T.LukeModel(T.LukeConfig(
             **_SMALL, entity_vocab_size=10, entity_emb_size=8, use_entity_aware_attention=True)).eval(),
         lambda m, ids, ents, epos: m(input_ids=ids, entity_ids=ents, entity_position_ids=epos).entity_last_hidden_state)
_hf_case("hf_qwen3_moe_sparse_blocks_router", lambda: (I(0, 50, 2, 5),),
         lambda T: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
             **_DEC, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
             decoder_sparse_step=1, output_router_logits=True)).eval(),
         lambda m, ids: (lambda o: (o.logits, o.aux_loss))(m(input_ids=ids, labels=ids)))
_hf_case("hf_helium_causal_lm_loss", lambda: (I(0, 50, 2, 6),),
         lambda T: T.HeliumForCausalLM(T.HeliumConfig(**_DEC, head_dim=8)).eval(),
         lambda m, ids: (lambda o: (o.loss, o.logits))(m(input_ids=ids, labels=ids)))
_hf_case("hf_smollm3_nope_layers", lambda: (I(0, 50, 2, 6),),
         lambda T: T.SmolLM3ForCausalLM(T.SmolLM3Config(**_DEC, no_rope_layer_interval=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)).eval(),
         lambda m, ids: m(input_ids=ids).logits)
_hf_case("hf_lfm2_short_conv_hybrid", lambda: (I(0, 50, 2, 6),),
         lambda T: T.Lfm2ForCausalLM(T.Lfm2Config(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             intermediate_size=32, layer_types=["conv", "full_attention"], conv_L_cache=3, block_auto_adjust_ff_dim=False,
             max_position_embeddings=64)).eval(),
         lambda m, ids: m(input_ids=ids, use_cache=False).logits)
_hf_case("hf_nemotron_layernorm1p_relu2", lambda: (I(0, 50, 2, 6),),
         lambda T: T.NemotronForCausalLM(T.NemotronConfig(**_DEC, head_dim=8, partial_rotary_factor=0.5)).eval(),
         lambda m, ids: m(input_ids=ids).logits)
_hf_case("hf_dbrx_fused_experts", lambda: (I(0, 50, 2, 5),),
         lambda T: T.DbrxForCausalLM(T.DbrxConfig(
             d_model=16, n_heads=2, n_layers=2, max_seq_len=32, vocab_size=50,
             attn_config=dict(kv_n_heads=1, clip_qkv=8.0, rope_theta=10000.0),
             ffn_config=dict(ffn_hidden_size=16, moe_num_experts=4, moe_top_k=2))).eval(),
         lambda m, ids: m(input_ids=ids).logits)
_hf_case("hf_jamba_mamba_attention_moe_slow_path", lambda: (I(0, 50, 2, 6),),
         lambda T: T.JambaForCausalLM(T.JambaConfig(
             **_DEC, num_experts=2, num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=1,
             attn_layer_period=2, attn_layer_offset=1, mamba_d_state=4, mamba_d_conv=4, mamba_expand=2,
             use_mamba_kernels=False)).eval(),
         lambda m, ids: m(input_ids=ids, use_cache=False).logits)
_hf_case("hf_falcon_mamba_rms_b_c_dt", lambda: (I(0, 50, 2, 6),),
         lambda T: T.FalconMambaForCausalLM(T.FalconMambaConfig(
             vocab_size=50, hidden_size=16, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=4,
             use_mambapy=False)).eval(),
         lambda m, ids: m(input_ids=ids, use_cache=False).logits)
_hf_case("hf_hiera_mask_unit_attention", lambda: (R(1, 3, 32, 32),),
         lambda T: T.HieraModel(T.HieraConfig(
             embed_dim=8, image_size=[32, 32], patch_size=[3, 3], patch_stride=[2, 2], patch_padding=[1, 1],
             depths=[1, 1], num_heads=[1, 2], query_stride=[2, 2], masked_unit_size=[4, 4],
             masked_unit_attention=[True, False], num_query_pool=1)).eval(),
         lambda m, x: m(pixel_values=x).pooler_output)
_hf_case("hf_glpn_depth_estimation", lambda: (R(1, 3, 32, 32),),
         lambda T: T.GLPNForDepthEstimation(T.GLPNConfig(
             num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
             strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=8)).eval(),
         lambda m, x: m(pixel_values=x).predicted_depth)
_hf_case("hf_wav2vec2_conformer_rel_pos", lambda: (R(1, 400),),
         lambda T: T.Wav2Vec2ConformerModel(T.Wav2Vec2ConformerConfig(
             hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=8,
             num_conv_pos_embedding_groups=2, position_embeddings_type="relative", conv_depthwise_kernel_size=3)).eval(),
         lambda m, x: m(input_values=x).last_hidden_state)
_hf_case("hf_timesfm_patched_decoder_quantiles", lambda: (R(2, 64),),
         lambda T: T.TimesFmModelForPrediction(T.TimesFmConfig(
             patch_length=16, context_length=64, horizon_length=16, hidden_size=16, intermediate_size=16,
             head_dim=8, num_attention_heads=2, num_hidden_layers=2, quantiles=[0.1, 0.5, 0.9])).eval(),
         lambda m, x: m(past_values=[x[0], x[1, 8:]], freq=[0, 1]).mean_predictions)
_hf_case("hf_informer_prob_attention_forecast", lambda: (R(2, 14), R(2, 14, 1), torch.ones(2, 14), R(2, 4, 1)),
         lambda T: T.InformerModel(T.InformerConfig(
             prediction_length=4, context_length=10, lags_sequence=[1, 2, 3, 4], num_time_features=1,
             d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=16, decoder_ffn_dim=16, attention_type="prob", sampling_factor=2)).eval(),
         lambda m, pv, ptf, pom, ftf: m(past_values=pv, past_time_features=ptf, past_observed_mask=pom,
                                        future_time_features=ftf, future_values=R(2, 4)).last_hidden_state)


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
