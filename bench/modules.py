"""Differential runner: mlircap.compile (CPU) against eager on real-world-style modules.

Every case builds one model, deep-copies it (same weights), and calls eager and
``mlircap.compile`` on identical inputs: the first call records, the second
runs the compiled code on the same inputs, the third on new values of the
same shapes. Outputs (type, dtype, shape, values, NaN pattern), the inputs
afterwards (in-place ops), the module state (parameters, buffers, gradients,
plain attributes) are compared after every call. Each case runs in a child
process with a timeout: a signal is a ``crash``, not the end of the run.

Categories:
  ok        compiled, every call matches eager
  fallback  matches eager, but some part ran eagerly (a graph mlircap could not
            compile, capture gave up, a run-time failure): the note says why
  wrong     a result or the state differs from eager
  error     mlircap raises where eager does not (or raises another error)
  crash     the child process died (signal / abort)
  timeout   the case ran past --timeout

    python bench/modules.py [--filter SUBSTR] [--jobs 2] [--timeout 240] [--only-new] [-v]
    python bench/modules.py --case NAME      # one case in this process, with a traceback

The corpus: bench/capture.py's CASES plus the cases below (NEW_CASES) plus bench/modules2.py's
CASES (source "new2": ``--source new2``) plus bench/modules3.py's CASES (source "new3") plus
bench/modules4.py's CASES (source "new4").
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
import traceback
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

NEW_CASES = []


def case(name, inputs, train=False):
    def deco(factory):
        NEW_CASES.append((name, factory, inputs, train))
        return factory
    return deco


def R(*s):
    return torch.randn(*s)


# ============================================================================ recurrent
class LSTMTagger(nn.Module):
    def __init__(self, vocab=20, emb=8, hidden=12, ntags=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True, dropout=0.0)
        self.out = nn.Linear(hidden, ntags)

    def forward(self, tokens):
        h, (hn, cn) = self.lstm(self.embed(tokens))
        return F.log_softmax(self.out(h), dim=-1), hn[-1]


class BiGRUEncoder(nn.Module):
    def __init__(self, d=8, h=10):
        super().__init__()
        self.gru = nn.GRU(d, h, bidirectional=True)
        self.proj = nn.Linear(2 * h, h)

    def forward(self, x):     # (T, B, D)
        out, hn = self.gru(x)
        summary = torch.cat([hn[0], hn[1]], dim=-1)
        return torch.tanh(self.proj(out)), summary


class ReluRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(6, 10, num_layers=1, nonlinearity="relu", batch_first=True)

    def forward(self, x, h0):
        y, h = self.rnn(x, h0)
        return y.mean(1), h


class LSTMCellDecoder(nn.Module):
    """seq2seq-style decoder loop over a python range with an LSTMCell."""

    def __init__(self, d=8, h=16, steps=4):
        super().__init__()
        self.cell = nn.LSTMCell(d, h)
        self.inp = nn.Linear(h, d)
        self.steps = steps

    def forward(self, x):
        b = x.size(0)
        hx = x.new_zeros(b, self.cell.hidden_size)
        cx = x.new_zeros(b, self.cell.hidden_size)
        outs = []
        inp = x
        for _ in range(self.steps):
            hx, cx = self.cell(inp, (hx, cx))
            inp = self.inp(hx)
            outs.append(hx.unsqueeze(1))
        return torch.cat(outs, dim=1)


class GRUCellRollout(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(5, 7)

    def forward(self, seq):   # (B, T, 5)
        h = torch.zeros(seq.shape[0], 7)
        for t in range(seq.shape[1]):
            h = self.cell(seq[:, t], h)
        return h


class PackedLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out, h


case("lstm_tagger_2layer", lambda: (torch.randint(0, 20, (3, 6)),))(lambda: LSTMTagger())
case("bigru_encoder", lambda: (R(5, 2, 8),))(lambda: BiGRUEncoder())
case("rnn_relu_h0", lambda: (R(2, 5, 6), R(1, 2, 10)))(lambda: ReluRNN())
case("lstmcell_decoder", lambda: (R(3, 8),))(lambda: LSTMCellDecoder())
case("grucell_rollout", lambda: (R(2, 4, 5),))(lambda: GRUCellRollout())
case("lstm_packed_sequence", lambda: (R(3, 5, 4), torch.tensor([5, 3, 2])))(lambda: PackedLSTM())
case("lstm_train_dropout", lambda: (R(2, 4, 6),), train=True)(
    lambda: nn.LSTM(6, 8, num_layers=2, dropout=0.3, batch_first=True))


# ============================================================================ conv family
class DCGANGenerator(nn.Module):
    def __init__(self, nz=8, ngf=4):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class ConvT1dUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose1d(4, 6, kernel_size=3, stride=2, padding=1, output_padding=1, dilation=1)
        self.up2 = nn.ConvTranspose1d(6, 2, kernel_size=5, stride=3, padding=2, groups=2)

    def forward(self, x):
        return self.up2(F.leaky_relu(self.up(x), 0.2))


class ConvT3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(3, 2, kernel_size=2, stride=2)

    def forward(self, x):
        return torch.sigmoid(self.up(x))


class SubPixelSR(nn.Module):
    def __init__(self, r=2):
        super().__init__()
        self.down = nn.PixelUnshuffle(r)
        self.body = nn.Conv2d(3 * r * r, 3 * r * r * r * r, 3, padding=1)
        self.up = nn.PixelShuffle(r * r)

    def forward(self, x):
        return self.up(self.body(self.down(x)))


class InterpModes(nn.Module):
    def forward(self, x):
        a = F.interpolate(x, scale_factor=2, mode="nearest-exact")
        b = F.interpolate(x, size=(11, 13), mode="bilinear", align_corners=True)
        c = F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=False)
        d = F.interpolate(x, size=(5, 3), mode="area")
        return a.sum((2, 3)) + b.mean((2, 3)) + c.amax((2, 3)), d


class Interp1d3d(nn.Module):
    def forward(self, x1, x3):
        return (F.interpolate(x1, scale_factor=2.5, mode="linear", align_corners=False),
                F.interpolate(x3, scale_factor=2, mode="trilinear", align_corners=False),
                nn.Upsample(scale_factor=(1, 2, 2), mode="nearest")(x3))


class DilatedDepthwise(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=2, dilation=2, groups=c, bias=False)
        self.pw = nn.Conv2d(c, 2 * c, 1)
        self.grouped = nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1, groups=4)

    def forward(self, x):
        return self.grouped(F.relu6(self.pw(self.dw(x))))


class PaddingModeConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.r = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
        self.c = nn.Conv2d(4, 4, 3, padding=2, padding_mode="circular", dilation=2)
        self.p = nn.Conv2d(4, 2, 3, padding=1, padding_mode="replicate")

    def forward(self, x):
        return self.p(self.c(self.r(x)))


class WaveNetBlock(nn.Module):
    def __init__(self, c=8, dilation=2):
        super().__init__()
        self.pad = (3 - 1) * dilation
        self.filt = nn.Conv1d(c, c, 3, dilation=dilation)
        self.gate = nn.Conv1d(c, c, 3, dilation=dilation)
        self.res = nn.Conv1d(c, c, 1)
        self.skip = nn.Conv1d(c, c, 1)

    def forward(self, x):
        xp = F.pad(x, (self.pad, 0))
        z = torch.tanh(self.filt(xp)) * torch.sigmoid(self.gate(xp))
        return x + self.res(z), self.skip(z)


class C3DNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv3d(2, 4, (3, 3, 3), padding=(1, 1, 1))
        self.p1 = nn.MaxPool3d((1, 2, 2))
        self.c2 = nn.Conv3d(4, 4, 3, stride=(1, 2, 2), padding=1)
        self.p2 = nn.AvgPool3d(2, ceil_mode=True)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.p2(F.relu(self.c2(self.p1(F.relu(self.c1(x))))))
        return self.fc(x.flatten(2).mean(-1))


case("dcgan_generator", lambda: (R(2, 8, 1, 1),))(lambda: DCGANGenerator())
case("dcgan_generator_train", lambda: (R(2, 8, 1, 1),), train=True)(lambda: DCGANGenerator())
case("conv_transpose1d_outpad_groups", lambda: (R(2, 4, 7),))(lambda: ConvT1dUp())
case("conv_transpose3d", lambda: (R(1, 3, 2, 3, 3),))(lambda: ConvT3d())
case("pixel_unshuffle_shuffle", lambda: (R(1, 3, 8, 8),))(lambda: SubPixelSR())
case("interpolate_2d_modes", lambda: (R(2, 3, 6, 7),))(lambda: InterpModes())
case("interpolate_1d_3d", lambda: (R(2, 3, 5), R(1, 2, 3, 4, 4)))(lambda: Interp1d3d())
case("dilated_depthwise_grouped", lambda: (R(2, 8, 9, 9),))(lambda: DilatedDepthwise())
case("conv_padding_modes", lambda: (R(2, 3, 8, 8),))(lambda: PaddingModeConvs())
case("wavenet_causal_block", lambda: (R(2, 8, 16),))(lambda: WaveNetBlock())
case("c3d_pool3d", lambda: (R(1, 2, 4, 8, 8),))(lambda: C3DNet())


# ============================================================================ normalization
class InstanceNormTrack(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)

    def forward(self, x):
        return F.relu(self.inorm(self.conv(x)))


class GroupNormBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.gn = nn.GroupNorm(4, 8)
        self.gn1 = nn.GroupNorm(1, 8, affine=False)

    def forward(self, x):
        return self.gn1(F.silu(self.gn(self.conv(x)))) + x


class LayerNorm2dConvNeXt(nn.Module):
    """channels-first LayerNorm, written out by hand as ConvNeXt does."""

    def __init__(self, c=6, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c) + 0.1 * torch.randn(c))
        self.bias = nn.Parameter(torch.zeros(c) + 0.1 * torch.randn(c))
        self.eps = eps
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln_last = nn.LayerNorm([5, 5], elementwise_affine=False)

    def forward(self, x):
        x = self.dw(x)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        x = self.weight[:, None, None] * x + self.bias[:, None, None]
        return self.ln_last(x)


class InstanceNorm1dNoAffine(nn.Module):
    def forward(self, x):
        return F.instance_norm(x) * 2 + F.layer_norm(x, x.shape[-1:])


case("instance_norm_track_stats_train", lambda: (R(2, 3, 6, 6),), train=True)(lambda: InstanceNormTrack())
case("instance_norm_track_stats_eval", lambda: (R(2, 3, 6, 6),))(lambda: InstanceNormTrack())
case("group_norm_block", lambda: (R(2, 8, 5, 5),))(lambda: GroupNormBlock())
case("layernorm2d_convnext", lambda: (R(2, 6, 5, 5),))(lambda: LayerNorm2dConvNeXt())
case("instance_norm1d_functional", lambda: (R(3, 4, 9),))(lambda: InstanceNorm1dNoAffine())
case("batchnorm1d_train_momentum_none", lambda: (R(6, 5),), train=True)(
    lambda: nn.Sequential(nn.Linear(5, 5), nn.BatchNorm1d(5, momentum=None), nn.ReLU()))


# ============================================================================ embeddings
class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(30, 8, mode="mean")
        self.bag_sum = nn.EmbeddingBag(30, 8, mode="sum")
        self.bag_max = nn.EmbeddingBag(30, 8, mode="max")
        self.fc = nn.Linear(8, 2)

    def forward(self, text, offsets, weights):
        a = self.bag(text, offsets)
        b = self.bag_sum(text, offsets, per_sample_weights=weights)
        c = self.bag_max(text.view(2, 3))
        return self.fc(a + b), c


class HashEmbedding(nn.Module):
    def __init__(self, buckets=17):
        super().__init__()
        self.buckets = buckets
        self.emb = nn.Embedding(buckets, 4, padding_idx=0)

    def forward(self, ids):   # int64
        h = (ids * 2654435761 + 7) % self.buckets
        h = torch.where(ids == 0, torch.zeros_like(h), h)
        return self.emb(h).sum(1), h.max(), torch.div(ids, 3, rounding_mode="floor") & 7


case("embedding_bag_modes", lambda: (torch.randint(0, 30, (6,)), torch.tensor([0, 2]), torch.rand(6)))(
    lambda: BagOfWords())
case("hash_embedding_int64", lambda: (torch.randint(0, 1000, (3, 5)),))(lambda: HashEmbedding())


# ============================================================================ attention
class EinsumAttention(nn.Module):
    def __init__(self, d=16, h=4):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.h, d // self.h) for t in (q, k, v))
        s = torch.einsum("bihd,bjhd->bhij", q, k) * (d // self.h) ** -0.5
        a = s.softmax(dim=-1)
        out = torch.einsum("bhij,bjhd->bihd", a, v).reshape(b, n, d)
        return self.o(out)


class SwinRelPosBias(nn.Module):
    def __init__(self, ws=3, heads=2, d=8):
        super().__init__()
        self.ws, self.heads = ws, heads
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("index", rel.sum(-1), persistent=False)
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):    # (B, ws*ws, d)
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * (d // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        attn = (attn + bias.unsqueeze(0)).softmax(-1)
        return (attn @ v).transpose(1, 2).reshape(b, n, d)


class T5Bucket(nn.Module):
    def __init__(self, nb=8, max_dist=16, heads=2):
        super().__init__()
        self.nb, self.max_dist = nb, max_dist
        self.bias = nn.Embedding(nb, heads)

    def bucket(self, rel):
        nb = self.nb // 2
        ret = (rel > 0).to(torch.long) * nb
        n = torch.abs(rel)
        max_exact = nb // 2
        is_small = n < max_exact
        large = max_exact + (torch.log(n.float() / max_exact) / math.log(self.max_dist / max_exact)
                             * (nb - max_exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, nb - 1))
        return ret + torch.where(is_small, n, large)

    def forward(self, scores):   # (B, H, Q, K)
        q, k = scores.shape[-2:]
        ctx = torch.arange(q, dtype=torch.long)[:, None]
        mem = torch.arange(k, dtype=torch.long)[None, :]
        values = self.bias(self.bucket(mem - ctx)).permute(2, 0, 1).unsqueeze(0)
        return (scores + values).softmax(-1)


class RotaryNeoX(nn.Module):
    def __init__(self, d=8, heads=2, seq=6, base=10000):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
        t = torch.arange(seq).float()
        freqs = torch.einsum("i,j->ij", t, inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)
        self.heads = heads

    @staticmethod
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, q, k):
        n = q.shape[-2]
        cos, sin = self.cos_cached[:, :, :n], self.sin_cached[:, :, :n]
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        return F.scaled_dot_product_attention(q, k, k, is_causal=True)


class RotaryComplex(nn.Module):
    """LLaMA-style rotary embedding through view_as_complex."""

    def __init__(self, d=8, seq=5):
        super().__init__()
        freqs = 1.0 / (10000 ** (torch.arange(0, d, 2)[: d // 2].float() / d))
        freqs = torch.outer(torch.arange(seq).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(freqs), freqs), persistent=False)

    def forward(self, xq):   # (B, S, H, D)
        xc = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        fc = self.freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xc.shape[-1])
        return torch.view_as_real(xc * fc).flatten(3).type_as(xq)


class CausalMaskedAttn(nn.Module):
    def __init__(self, d=8, n=6):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.register_buffer("mask", torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, n, n))

    def forward(self, x, pad):   # pad: bool (B, N), True = padding
        q, k, v = self.qkv(x).split(x.shape[-1], dim=2)
        att = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.mask[:, : x.size(1), : x.size(1)], float("-inf"))
        att = att.masked_fill(pad[:, None, :], -1e9)
        return F.softmax(att, dim=-1) @ v


class ALiBi(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        start = 2 ** (-(2 ** -(math.log2(heads) - 3)))
        self.register_buffer("slopes", torch.tensor([start * start ** i for i in range(heads)]))

    def forward(self, scores):   # (B, H, N, N)
        n = scores.shape[-1]
        rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        bias = self.slopes[:, None, None] * rel.abs().neg()[None]
        return torch.softmax(scores + bias, dim=-1)


class MHAKeyPadding(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, kpm):
        out, w = self.mha(x, x, x, key_padding_mask=kpm, need_weights=True)
        return out, w


case("einsum_attention", lambda: (R(2, 5, 16),))(lambda: EinsumAttention())
case("swin_relative_position_bias", lambda: (R(2, 9, 8),))(lambda: SwinRelPosBias())
case("t5_relative_buckets", lambda: (R(1, 2, 5, 7),))(lambda: T5Bucket())
case("rotary_neox_sdpa_causal", lambda: (R(1, 2, 6, 8), R(1, 2, 6, 8)))(lambda: RotaryNeoX())
case("rotary_complex_llama", lambda: (R(2, 5, 2, 8),))(lambda: RotaryComplex())
case("causal_mask_bool_masked_fill", lambda: (R(2, 6, 8), torch.rand(2, 6) > 0.7))(lambda: CausalMaskedAttn())
case("alibi_bias", lambda: (R(1, 4, 5, 5),))(lambda: ALiBi())
case("mha_key_padding_mask", lambda: (R(2, 4, 8), torch.tensor([[False] * 4, [False, False, True, True]])))(
    lambda: MHAKeyPadding())
case("transformer_encoder_layer_eval", lambda: (R(2, 5, 8),))(
    lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True, norm_first=True))
case("transformer_encoder_layer_train", lambda: (R(2, 5, 8),), train=True)(
    lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True, activation="gelu"))


# ============================================================================ tensor ops
class WhereNanGuard(nn.Module):
    def forward(self, x):
        y = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))
        r = torch.log(x)   # NaN for negatives
        safe = torch.nan_to_num(r, nan=0.0, neginf=-5.0)
        return y, r, safe, torch.isnan(r).sum(-1)


class CumulativeOps(nn.Module):
    def forward(self, x):
        stick = torch.sigmoid(x)
        rest = torch.cumprod(1 - stick, dim=-1)
        excl = torch.cumsum(x, dim=1) - x
        return stick * F.pad(rest[..., :-1], (1, 0), value=1.0), excl, torch.logcumsumexp(x, 0), \
            torch.cummax(x, dim=1).values


class TopKSort(nn.Module):
    def forward(self, x):
        v, i = x.topk(3, dim=-1)
        s, si = torch.sort(x, dim=1, descending=True)
        order = torch.argsort(x[:, 0])
        kth = torch.kthvalue(x, 2, dim=-1).values
        return v, i, s[:, :2], si, order, kth, torch.msort(x)


class GatherScatter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("edge_dst", torch.tensor([0, 1, 1, 2, 3, 3, 3]))
        self.register_buffer("edge_src", torch.tensor([1, 0, 2, 3, 0, 1, 2]))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):   # (4 nodes, 4)
        msg = self.lin(x)[self.edge_src]
        agg = torch.zeros_like(x).index_add_(0, self.edge_dst, msg)
        cnt = torch.zeros(x.shape[0]).scatter_add_(0, self.edge_dst, torch.ones(7))
        top = x.argmax(-1, keepdim=True)
        picked = x.gather(1, top)
        onehot = torch.zeros_like(x).scatter_(1, top, 1.0)
        return agg / cnt.clamp(min=1)[:, None], picked, onehot


class PadModes(nn.Module):
    def forward(self, x):
        return (F.pad(x, (1, 2, 2, 1), mode="reflect"),
                F.pad(x, (1, 1, 0, 3), mode="replicate"),
                F.pad(x, (2, 2, 1, 1), mode="circular"),
                F.pad(x, (-1, -1, 1, 0), value=0.5))


class UnfoldFold(nn.Module):
    def __init__(self):
        super().__init__()
        self.unfold = nn.Unfold(kernel_size=3, padding=1, stride=2)
        self.fold = nn.Fold(output_size=(6, 6), kernel_size=2, stride=2)
        self.w = nn.Parameter(torch.randn(4, 3 * 9) * 0.1)

    def forward(self, x):    # (B, 3, 6, 6)
        cols = self.unfold(x)                         # (B, 27, 9)
        y = (self.w @ cols).view(x.shape[0], 4, 3, 3)
        patches = x[:, :1].unfold(2, 2, 2).unfold(3, 2, 2).reshape(x.shape[0], 1, 9, 4)
        folded = self.fold(patches.permute(0, 1, 3, 2).reshape(x.shape[0], 4, 9))
        return y, folded


class AdaptivePools(nn.Module):
    def forward(self, x, s):
        return (F.adaptive_avg_pool2d(x, (3, 5)), F.adaptive_max_pool2d(x, 4),
                F.adaptive_avg_pool1d(s, 3), nn.AdaptiveMaxPool1d(2)(s))


class ShuffleUnit(nn.Module):
    def __init__(self, c=8, groups=2):
        super().__init__()
        self.g = groups
        self.g1 = nn.Conv2d(c, c, 1, groups=groups)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.bn = nn.BatchNorm2d(c)

    def channel_shuffle(self, x):
        b, c, h, w = x.size()
        x = x.view(b, self.g, c // self.g, h, w)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(b, -1, h, w)

    def forward(self, x):
        return F.relu(x + self.bn(self.dw(self.channel_shuffle(F.relu(self.g1(x))))))


class MobileNetV3SE(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // 4, 1)
        self.fc2 = nn.Conv2d(c // 4, c, 1)
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        x = F.hardswish(self.conv(x))
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s))), inplace=True)
        return x * s


class CBAM(nn.Module):
    def __init__(self, c=8, r=2, k=7):
        super().__init__()
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(c, c // r), nn.ReLU(), nn.Linear(c // r, c))
        self.spatial = nn.Conv2d(2, 1, k, padding=k // 2, bias=False)

    def forward(self, x):
        avg = self.mlp(F.avg_pool2d(x, x.shape[2:]))
        mx = self.mlp(F.max_pool2d(x, (x.size(2), x.size(3))))
        x = x * torch.sigmoid(avg + mx).unsqueeze(2).unsqueeze(3).expand_as(x)
        pooled = torch.cat((torch.max(x, 1)[0].unsqueeze(1), torch.mean(x, 1).unsqueeze(1)), dim=1)
        return x * torch.sigmoid(self.spatial(pooled))


class Mish(nn.Module):
    def forward(self, x):
        return x * torch.tanh(F.softplus(x))


class Swish(nn.Module):
    def __init__(self):
        super().__init__()
        self.beta = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)


class ActivationZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.prelu = nn.PReLU(4)
        self.mish, self.swish = Mish(), Swish()

    def forward(self, x):
        return torch.stack([
            self.mish(x), F.mish(x), self.swish(x), F.hardswish(x), F.hardsigmoid(x), F.selu(x), F.celu(x, 0.5),
            F.elu(x, 0.7), F.softplus(x, beta=2, threshold=5), F.gelu(x, approximate="tanh"), F.hardtanh(x, -0.5, 2),
            F.relu6(x * 4), F.leaky_relu(x, 0.01), F.softsign(x), F.tanhshrink(x), F.hardshrink(x, 0.3),
            F.softshrink(x, 0.3), F.logsigmoid(x), self.prelu(x), F.glu(torch.cat([x, x.flip(-1)], -1), -1),
            F.rrelu(x, training=False), F.threshold(x, 0.1, -1.0)])


class DropoutZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.Dropout(0.3)
        self.d2 = nn.Dropout2d(0.5)
        self.ad = nn.AlphaDropout(0.2)
        self.fc = nn.Linear(6, 6)

    def forward(self, x, img):
        return self.fc(self.d(x)), self.d2(img), self.ad(x), F.dropout(x, 0.1, training=self.training)


case("where_nan_guard", lambda: (R(3, 5),))(lambda: WhereNanGuard())
case("cumsum_cumprod_stick_breaking", lambda: (R(3, 6),))(lambda: CumulativeOps())
case("topk_sort_argsort", lambda: (R(4, 7),))(lambda: TopKSort())
case("gather_scatter_gnn", lambda: (R(4, 4),))(lambda: GatherScatter())
case("pad_modes", lambda: (R(2, 3, 5, 6),))(lambda: PadModes())
case("unfold_fold_im2col", lambda: (R(2, 3, 6, 6),))(lambda: UnfoldFold())
case("adaptive_pools_uneven", lambda: (R(2, 3, 7, 9), R(2, 4, 7)))(lambda: AdaptivePools())
case("shufflenet_channel_shuffle", lambda: (R(2, 8, 6, 6),))(lambda: ShuffleUnit())
case("mobilenetv3_se_hardswish", lambda: (R(2, 8, 6, 6),))(lambda: MobileNetV3SE())
case("cbam", lambda: (R(2, 8, 6, 6),))(lambda: CBAM())
case("activation_zoo", lambda: (R(3, 4) * 3,))(lambda: ActivationZoo())
case("dropout_zoo_eval", lambda: (R(4, 6), R(2, 4, 3, 3)))(lambda: DropoutZoo())
case("dropout_variants_train", lambda: (R(4, 6), R(2, 4, 3, 3)), train=True)(lambda: DropoutZoo())


# ============================================================================ dtypes, layouts
class MaskOps(nn.Module):
    def forward(self, m, x):    # m: bool
        k = m.logical_and(x > 0) | m.logical_not()
        return k, k.any(-1), k.all(0), (x * m).sum(-1) / m.sum(-1).clamp(min=1), m.long().cumsum(-1), ~m ^ k


class HalfBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        y = self.ln(x)
        return F.gelu(y) * torch.sigmoid(y), y.softmax(-1), y.sum(-1), (y.float() * 2).half()


class Float64Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        y = torch.tanh(self.fc(x))
        return y, torch.exp(y).sum(), (y - y.mean()).pow(2).mean().sqrt()


class NonContig(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, xt, xs, xe):
        return self.fc(xt), xs * 2 + 1, (xe + 1).sum(0), xt.t().contiguous()


class ChannelsLastConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return y, y.permute(0, 2, 3, 1)


class ScalarAndSizeOne(nn.Module):
    def forward(self, x, temp, bias):   # temp: 0-d, bias: (1, 1, 4)
        y = (x / temp).softmax(-1) + bias
        return y.squeeze(0), temp * 2, y.sum(dim=(0, 1), keepdim=True), x[:, 0].unsqueeze(-1)


class InPlaceOnInput(nn.Module):
    def forward(self, x, y):
        x.add_(1.0)
        y[:, 0] = 0.0
        x.relu_()
        return x * 2, y.sum()


class BufferEMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
            self.count += 1
        return self.fc(x - self.mean)


class MethodChain(nn.Module):
    def forward(self, x):
        a = x.float().abs().clamp(min=1e-3).log1p().sum(-1, keepdim=True).expand_as(x).contiguous()
        b = x.transpose(0, 1).reshape(-1).view(x.shape[1], -1).t().flip(0).roll(1, 1).narrow(1, 1, 3)
        c = x.new_full((2,), 3.0).repeat(2).repeat_interleave(2).tile((2,)).view(4, 4).tril(-1).triu(-2)
        return a, b, c.diagonal(offset=-1), torch.diag_embed(x[0]), x.clamp(x.min(0).values, x.max(0).values * 0.5)


class StructuredOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return {"logits": y, "aux": [y.relu(), (y.sigmoid(), None)], "n": x.shape[0], "scale": 0.5}, None, 3


class IntsAlongside(nn.Module):
    def forward(self, x):
        n = x.size(-1)
        return x.sum(), n, x.shape, x.dim(), x.numel(), x.dtype


case("bool_mask_ops", lambda: (torch.rand(3, 5) > 0.4, R(3, 5)))(lambda: MaskOps())
case("float16_block", lambda: (R(3, 8).half(),))(lambda: HalfBlock().half())
case("bfloat16_block", lambda: (R(3, 8).bfloat16(),))(lambda: HalfBlock().bfloat16())
case("bfloat16_mlp", lambda: (R(3, 8).bfloat16(),))(
    lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).bfloat16())
case("float64_model", lambda: (R(3, 5).double(),))(lambda: Float64Model().double())
case("noncontiguous_inputs", lambda: (R(3, 4).t().contiguous().t(), R(4, 6)[:, ::2], R(1, 3).expand(4, 3)))(
    lambda: NonContig())
case("transposed_input", lambda: (R(4, 3).t(), R(3, 6)[1:, 1::2], R(3).expand(2, 3)))(lambda: NonContig())
case("channels_last_conv", lambda: (R(2, 3, 6, 6).to(memory_format=torch.channels_last),))(
    lambda: ChannelsLastConv())
case("channels_last_model", lambda: (R(2, 3, 6, 6).to(memory_format=torch.channels_last),))(
    lambda: ChannelsLastConv().to(memory_format=torch.channels_last))
case("scalar_and_size_one", lambda: (R(1, 3, 4), torch.tensor(0.7), R(1, 1, 4)))(lambda: ScalarAndSizeOne())
case("inplace_on_inputs", lambda: (R(3, 4), R(2, 3)))(lambda: InPlaceOnInput())
case("buffer_ema_no_grad", lambda: (R(5, 4),))(lambda: BufferEMA())
case("tensor_method_chain", lambda: (R(4, 4),))(lambda: MethodChain())
case("structured_outputs_none", lambda: (R(2, 4),))(lambda: StructuredOutputs())
case("ints_alongside_tensors", lambda: (R(2, 5),))(lambda: IntsAlongside())


# ============================================================================ losses
class CELossVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=-100)
        self.ce_w = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.0]), reduction="sum")
        self.nll = nn.NLLLoss(ignore_index=1)

    def forward(self, logits, target, probs):
        t = target.clone()
        t[0] = -100
        return (self.ce(logits, t), self.ce_w(logits, target), self.nll(F.log_softmax(logits, -1), target),
                F.cross_entropy(logits, probs.softmax(-1)), F.cross_entropy(logits, target, reduction="none"))


class SegmentationCE(nn.Module):
    def forward(self, logits, target):   # (B, C, H, W), (B, H, W)
        return F.cross_entropy(logits, target, ignore_index=255, label_smoothing=0.05)


class BCEVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.bce = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 3.0, 0.5]))

    def forward(self, logits, y):
        return (self.bce(logits, y), F.binary_cross_entropy(torch.sigmoid(logits), y, reduction="sum"),
                F.binary_cross_entropy_with_logits(logits, y, weight=torch.tensor([0.2, 1.0, 2.0])),
                F.multilabel_soft_margin_loss(logits, y))


class RegressionLosses(nn.Module):
    def forward(self, a, b):
        return (F.smooth_l1_loss(a, b, beta=0.5), F.huber_loss(a, b, delta=0.7), F.l1_loss(a, b, reduction="none"),
                F.mse_loss(a, b), F.kl_div(F.log_softmax(a, -1), F.softmax(b, -1), reduction="batchmean"),
                F.kl_div(F.log_softmax(a, -1), F.log_softmax(b, -1), reduction="sum", log_target=True),
                F.poisson_nll_loss(a, b.abs()), F.gaussian_nll_loss(a, b, torch.ones_like(a) * 0.5))


class EmbeddingLosses(nn.Module):
    def forward(self, a, b, y):
        return (F.cosine_embedding_loss(a, b, y, margin=0.2), F.margin_ranking_loss(a[:, 0], b[:, 0], y),
                F.triplet_margin_loss(a, b, b.flip(0), margin=0.5), F.hinge_embedding_loss(a, y[:, None].expand_as(a)),
                F.cosine_similarity(a, b, dim=-1), F.pairwise_distance(a, b), torch.cdist(a, b))


class CTCHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.ctc = nn.CTCLoss(blank=0, zero_infinity=True)

    def forward(self, feats, targets):   # (T, B, 6)
        lp = self.fc(feats).log_softmax(2)
        return self.ctc(lp, targets, torch.full((2,), feats.shape[0], dtype=torch.long), torch.tensor([3, 2]))


case("cross_entropy_variants", lambda: (R(5, 4), torch.randint(0, 4, (5,)), R(5, 4)))(lambda: CELossVariants())
case("segmentation_ce_ignore", lambda: (R(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4)).masked_fill(
    torch.rand(2, 4, 4) > 0.8, 255)))(lambda: SegmentationCE())
case("bce_pos_weight", lambda: (R(4, 3), (torch.rand(4, 3) > 0.5).float()))(lambda: BCEVariants())
case("regression_losses", lambda: (R(4, 5), R(4, 5)))(lambda: RegressionLosses())
case("embedding_losses", lambda: (R(4, 6), R(4, 6), torch.tensor([1.0, -1.0, 1.0, -1.0])))(lambda: EmbeddingLosses())
case("ctc_loss", lambda: (R(7, 2, 6), torch.randint(1, 5, (2, 3))))(lambda: CTCHead())


# ============================================================================ training steps
class SGDStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()


class AdamClipStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-2)

    def forward(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
        self.opt.step()
        return loss.item()


class BackwardOnly(nn.Module):
    """loss.backward() in the module, grads compared afterwards."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        loss = self.bn(self.conv(x)).pow(2).mean()
        loss.backward()
        return loss.detach(), self.conv.weight.grad.norm()


class MomentumEncoder(nn.Module):
    """MoCo/BYOL-style EMA of the online network under torch.no_grad()."""

    def __init__(self, m=0.99):
        super().__init__()
        self.online = nn.Linear(4, 4)
        self.target = nn.Linear(4, 4)
        self.m = m

    def forward(self, x):
        with torch.no_grad():
            for po, pt in zip(self.online.parameters(), self.target.parameters()):
                pt.data.mul_(self.m).add_(po.data, alpha=1 - self.m)
            t = self.target(x)
        return F.cosine_similarity(self.online(x), t.detach(), dim=-1)


class InputGrad(nn.Module):
    """Input gradient (saliency / gradient penalty style) with torch.autograd.grad."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x):
        x = x.detach().requires_grad_(True)
        out = torch.tanh(self.fc(x)).sum()
        (g,) = torch.autograd.grad(out, x)
        return g, out.detach()


case("sgd_momentum_step", lambda: (R(6, 4), R(6, 2)), train=True)(lambda: SGDStep())
case("adam_clip_step", lambda: (R(6, 4), torch.randint(0, 3, (6,))), train=True)(lambda: AdamClipStep())
case("backward_grads_bn_train", lambda: (R(2, 2, 5, 5),), train=True)(lambda: BackwardOnly())
case("momentum_encoder_no_grad", lambda: (R(3, 4),))(lambda: MomentumEncoder())
case("input_grad_autograd", lambda: (R(4, 3),))(lambda: InputGrad())


# ============================================================================ misc real-world
class SegNetPoolUnpool(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, 2)
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        y, idx = self.pool(self.conv(x))
        return self.unpool(y, idx, output_size=x.size()), idx


class PoolVariants(nn.Module):
    def forward(self, x):
        return (F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.max_pool2d(x, 3, 2, 1, ceil_mode=True, dilation=1), F.lp_pool2d(x.abs(), 2, 2),
                nn.LocalResponseNorm(2)(x), F.avg_pool1d(x.flatten(2), 4, 3))


class SpatialTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Linear(3 * 6 * 6, 6)
        nn.init.zeros_(self.loc.weight)
        self.loc.bias.data.copy_(torch.tensor([0.9, 0.1, 0.0, -0.1, 1.1, 0.05]))

    def forward(self, x):
        theta = self.loc(x.flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.size()), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class CoordConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(5, 4, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        coords = torch.stack([xx, yy]).unsqueeze(0).expand(b, -1, -1, -1)
        return self.conv(torch.cat([x, coords], dim=1))


class OneHotBucketize(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bounds", torch.tensor([-1.0, 0.0, 0.5, 1.0]))

    def forward(self, x, labels):
        b = torch.bucketize(x, self.bounds)
        s = torch.searchsorted(self.bounds, x.contiguous())
        oh = F.one_hot(labels, num_classes=5).float()
        return b, s, oh, oh.argmax(-1)


class NormStats(nn.Module):
    def forward(self, x):
        return (x.std(0), x.var(1, unbiased=False), x.norm(p=1, dim=-1), torch.linalg.vector_norm(x, float("inf"), -1),
                F.normalize(x, dim=-1), torch.logsumexp(x, -1), torch.std_mean(x, 0, correction=0)[0], x.prod(-1),
                x.median(dim=-1).values, x.aminmax(dim=0).max, torch.linalg.norm(x))


class SwinShift(nn.Module):
    def __init__(self, ws=2, shift=1):
        super().__init__()
        self.ws, self.shift = ws, shift

    def forward(self, x):   # (B, H, W, C)
        b, h, w, c = x.shape
        x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = x.view(b, h // self.ws, self.ws, w // self.ws, self.ws, c).permute(0, 1, 3, 2, 4, 5)
        win = win.reshape(-1, self.ws * self.ws, c)
        win = win * win.softmax(1)
        x = win.view(b, h // self.ws, w // self.ws, self.ws, self.ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))


class WeightStdConv(nn.Conv2d):
    def forward(self, x):
        w = self.weight
        m = w.mean(dim=(1, 2, 3), keepdim=True)
        v = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return F.conv2d(x, (w - m) / torch.sqrt(v + 1e-5), self.bias, self.stride, self.padding)


class EmbeddingMaxNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, max_norm=1.0)

    def forward(self, ids):
        return self.emb(ids).sum(1)


class ParametrizedSpectral(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.utils.parametrizations.weight_norm(nn.Linear(4, 4))
        self.fc2 = nn.utils.parametrizations.orthogonal(nn.Linear(4, 4))

    def forward(self, x):
        return self.fc2(F.relu(self.fc(x)))


class FactoryOps(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        idx = torch.arange(n, dtype=torch.float32)
        lin = torch.linspace(0, 1, steps=5)
        full = torch.full((n, 2), 7, dtype=torch.int32)
        eye = torch.eye(n, dtype=x.dtype)
        return x @ eye + idx[:, None], lin * x.sum(), full * 2, torch.zeros_like(x, dtype=torch.bool) | (x > 0), \
            torch.ones(n).long().sum()


class BoolIndexing(nn.Module):
    def forward(self, x, m):
        return x[m].sum(), x.masked_select(m).mean(), torch.nonzero(m).shape[0]


class LSTMLMTiedTrainStep(nn.Module):
    """word language model with tied weights, one SGD step."""

    def __init__(self, vocab=12, d=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, batch_first=True)
        self.dec = nn.Linear(d, vocab)
        self.dec.weight = self.emb.weight
        self.opt = torch.optim.SGD(self.parameters(), lr=0.5)

    def forward(self, ids):
        self.opt.zero_grad()
        h, _ = self.rnn(self.emb(ids[:, :-1]))
        loss = F.cross_entropy(self.dec(h).reshape(-1, self.dec.out_features), ids[:, 1:].reshape(-1))
        loss.backward()
        self.opt.step()
        return loss.detach()


case("segnet_maxpool_unpool", lambda: (R(2, 3, 6, 6),))(lambda: SegNetPoolUnpool())
case("pool_variants_ceil", lambda: (R(2, 3, 7, 7),))(lambda: PoolVariants())
case("spatial_transformer_grid_sample", lambda: (R(2, 3, 6, 6),))(lambda: SpatialTransformer())
case("coordconv_meshgrid", lambda: (R(2, 3, 4, 5),))(lambda: CoordConv())
case("one_hot_bucketize", lambda: (R(3, 4), torch.randint(0, 5, (3,))))(lambda: OneHotBucketize())
case("norm_stats", lambda: (R(4, 6),))(lambda: NormStats())
case("swin_shift_roll", lambda: (R(1, 4, 4, 3),))(lambda: SwinShift())
case("weight_standardized_conv", lambda: (R(2, 3, 6, 6),))(lambda: WeightStdConv(3, 4, 3, padding=1))
case("embedding_max_norm_inplace", lambda: (torch.randint(0, 10, (3, 4)),))(lambda: EmbeddingMaxNorm())
case("parametrizations_weight_norm", lambda: (R(3, 4),))(lambda: ParametrizedSpectral())
case("factory_ops", lambda: (R(3, 3),))(lambda: FactoryOps())
case("bool_mask_indexing", lambda: (R(4, 5), torch.rand(4, 5) > 0.5))(lambda: BoolIndexing())
case("gru_lm_tied_train_step", lambda: (torch.randint(0, 12, (2, 6)),), train=True)(lambda: LSTMLMTiedTrainStep())
case("softmax2d_logsoftmax_fp64", lambda: (R(2, 3, 4, 4).double(),))(
    lambda: nn.Sequential(nn.Softmax2d(), nn.LogSoftmax(dim=1)))
case("bilinear_prelu_channel", lambda: (R(3, 4, 5, 5),))(
    lambda: nn.Sequential(nn.Conv2d(4, 4, 1), nn.PReLU(4), nn.ZeroPad2d((1, 0, 0, 1)), nn.ReflectionPad2d(1)))


# ============================================================================ semantics edges
class IntArith(nn.Module):
    def forward(self, a, b):   # int64, b may hold negatives, no zeros
        return (a // b, a % b, torch.fmod(a, b), torch.remainder(a, -3), a.float() / b, torch.div(a, b, rounding_mode="trunc"),
                a << 2, a >> 1, a ^ b, (a * 1000003) % 65536, a.abs().pow(2), torch.bitwise_not(a), a.clamp(-3, 3))


class SmallInts(nn.Module):
    def forward(self, u, i8, i32):
        return (u + 250, u * 3, (u - 10).float(), i8 * 20, i8.abs(), i32.sum(), i32.sum(dtype=torch.int32), u.sum(),
                (i32 * 2).max(), i8.to(torch.int64).cumsum(0), torch.clamp(u, max=100), u // 3, i8.sign())


class Casts(nn.Module):
    def forward(self, x):
        return (x.long(), x.int(), x.to(torch.int8), x.round(), torch.round(x, decimals=1), x.trunc(), x.floor(),
                x.ceil(), x.frac(), (x > 0).sum(), (x > 0).float().mean(), x.bool(), x.half().float(),
                x.bfloat16().float(), x.double() * 1e-300, torch.nan_to_num(x / 0.0))


class NaNSemantics(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[0, 1] = float("nan")
        y[1, 2] = float("inf")
        return (y.max(-1).values, y.amax(0), torch.maximum(y, x), torch.fmax(y, x), y.clamp(-1, 1), y.relu(),
                y.argmax(-1), y.softmax(-1), torch.isfinite(y), y.sum(), torch.nansum(y), torch.nanmean(y, 0),
                y.sort(-1).values, y.min(), F.normalize(y, dim=-1), torch.sigmoid(y), torch.where(y > 0, y, 0.0))


class PromotionMix(nn.Module):
    def forward(self, i, f, b, h):
        return (i + f, i * 0.5, i / 2, b + b, b * 3, b & (i > 2), h + f, h * 2, i.float().mean(), torch.true_divide(i, 4),
                f.to(torch.float64) + f, (i == 2) | b, i.sum() + 1.5, b.sum(), b.any(), i.prod())


class InPlaceViews(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("hist", torch.zeros(3, 4))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        y = x.clone()
        y[:, 1:] *= 2
        y.narrow(0, 0, 1).fill_(0.5)
        y.t()[0].add_(1)
        self.hist[1:].copy_(self.hist[:-1].clone())   # shift a ring buffer
        self.hist[0] = x.mean(0)
        self.ptr.add_(1)
        d = y.diagonal()
        d.mul_(-1)
        return y, self.hist.clone(), self.ptr.clone()


class MutateInputViews(nn.Module):
    def forward(self, x, idx):
        x[:, 0].clamp_(min=0)
        x.index_put_((idx,), torch.ones(idx.shape[0], x.shape[1]), accumulate=True)
        x.t_() if False else None
        return x.sum(0)


class Aliasing(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        y = x * 2
        return x, y, y, x.view(-1), self.w, self.w.t(), x[0]


class ParamMutation(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.fc.weight.clamp_(-0.3, 0.3)     # weight clipping (WGAN)
            self.fc.bias.zero_()
        return self.fc(x)


class PythonStateSchedule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.step = 0
        self.history = []

    def forward(self, x):
        self.step += 1
        warm = min(1.0, self.step / 2)
        y = self.fc(x) * warm
        self.history.append(float(warm))
        if self.step % 2 == 0:
            y = y + 1
        return y, self.step


class ScatterReduce(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seg", torch.tensor([0, 0, 1, 2, 2, 2]))

    def forward(self, x):
        out = torch.zeros(3, x.shape[1])
        amax = out.scatter_reduce(0, self.seg[:, None].expand_as(x), x, reduce="amax", include_self=False)
        mean = out.scatter_reduce(0, self.seg[:, None].expand_as(x), x, reduce="mean", include_self=False)
        prod = torch.ones(3, x.shape[1]).scatter_reduce(0, self.seg[:, None].expand_as(x), x, reduce="prod")
        put = torch.zeros(3, x.shape[1]).index_put((self.seg,), x, accumulate=True)
        ms = torch.zeros(6, x.shape[1]).masked_scatter(torch.eye(6, x.shape[1], dtype=torch.bool), x)
        return amax, mean, prod, put, ms


class EmptyAndTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x, e):   # e: (0, 4)
        return self.fc(e), self.fc(x).sum(0), torch.cat([e, x]), e.sum(0), e.mean(), x.var(0), x[:1].std(0)


class SortStable(nn.Module):
    def forward(self, x):
        v, i = torch.sort(x, dim=-1, stable=True)
        return v, i, torch.argsort(x, dim=0, descending=True, stable=True), x.argmax(-1), x.argmin(0), \
            torch.unique(x, sorted=True, return_counts=True)[1].sum()


class SoftmaxEdge(nn.Module):
    def forward(self, x, mask):
        s = x.masked_fill(~mask, float("-inf"))
        return s.softmax(-1), s.log_softmax(-1), torch.logsumexp(s, -1), (x * 1e4).softmax(-1), \
            F.softmax(x, dim=0, dtype=torch.float64)


class BroadcastingZoo(nn.Module):
    def forward(self, a, b, c):   # (3,1,4), (1,5,1), (4,)
        return a + b, a * c, (a - b) / (c + 2), torch.maximum(a, b), torch.where(a > b, a, c), a @ c, \
            torch.einsum("ijk,k->ij", a.expand(3, 5, 4), c), b.expand(2, 1, 5, 1).sum()


class ListInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, feats, cfg):
        outs = [self.fc(f) * cfg["scale"] for f in feats]
        return torch.stack(outs).sum(0), {k: v + 1 for k, v in cfg.items()}


class KwargsDefaults(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mask=None, scale: float = 1.0, return_hidden=False):
        h = self.fc(x) * scale
        if mask is not None:
            h = h.masked_fill(mask, 0.0)
        return (h, x) if return_hidden else h


class RequiresGradInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x).tanh()
        return y, y.requires_grad, x.grad_fn is None


class GradAccum(nn.Module):
    """Two backward passes accumulate into .grad before any step."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        for chunk in x.chunk(2):
            self.fc(chunk).pow(2).sum().backward()
        return self.fc.weight.grad.clone()


class DetachAndRetain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        t = h.detach()
        t.add_(1)          # a detached view shares storage with h
        return h, t


class HalfConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

    def forward(self, x):
        return self.net(x)


class Bf16Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        return F.scaled_dot_product_attention(q, k, v), (q @ k.transpose(-1, -2)).softmax(-1).sum(-1)


class AutocastBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.fc(x)
        return y.float().softmax(-1), y.dtype


class NormLayersFP64(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.ln = nn.LayerNorm(4)
        self.gn = nn.GroupNorm(2, 4)

    def forward(self, x):
        return self.bn(x), self.ln(x), self.gn(x)


class StridedSlicing(nn.Module):
    def forward(self, x):
        return (x[..., ::2], x[:, 1::3], x[::-1] if False else x.flip(0), x[:, None, :, None], x[[0, 2]],
                x[1:-1, -2:], x[torch.tensor([1, 0])][:, torch.tensor([2, 2, 0])], x.unfold(1, 3, 2), x.T.reshape(-1)[::5])


class Int64Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(50, 8)
        self.pos = nn.Embedding(16, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)
        return self.ln(self.tok(ids) + self.pos(pos)), (ids != 0).sum(-1), ids.ne(0).int().argmax(-1)


case("int_arith_semantics", lambda: (torch.randint(-20, 20, (3, 4)), torch.randint(1, 5, (3, 4)) *
                                     (torch.randint(0, 2, (3, 4)) * 2 - 1)))(lambda: IntArith())
case("small_int_dtypes", lambda: (torch.randint(0, 255, (6,), dtype=torch.uint8), torch.randint(-100, 100, (6,),
      dtype=torch.int8), torch.randint(-1000, 1000, (6,), dtype=torch.int32)))(lambda: SmallInts())
case("float_int_casts", lambda: (R(3, 5) * 4,))(lambda: Casts())
case("nan_inf_semantics", lambda: (R(3, 4),))(lambda: NaNSemantics())
case("type_promotion_mix", lambda: (torch.randint(0, 5, (4,)), R(4), torch.rand(4) > 0.5, R(4).half()))(
    lambda: PromotionMix())
case("inplace_views_ring_buffer", lambda: (R(3, 4),))(lambda: InPlaceViews())
case("mutate_input_views_index_put", lambda: (R(5, 3), torch.tensor([0, 2, 2])))(lambda: MutateInputViews())
case("aliasing_outputs", lambda: (R(3, 3),))(lambda: Aliasing())
case("param_mutation_no_grad", lambda: (R(2, 4),))(lambda: ParamMutation())
case("python_state_schedule", lambda: (R(2, 4),))(lambda: PythonStateSchedule())
case("scatter_reduce_variants", lambda: (R(6, 3),))(lambda: ScatterReduce())
case("empty_batch", lambda: (R(3, 4), R(0, 4)))(lambda: EmptyAndTiny())
case("sort_stable_unique", lambda: (torch.randint(0, 4, (3, 6)).float(),))(lambda: SortStable())
case("softmax_masked_rows", lambda: (R(3, 4), torch.tensor([[True] * 4, [False] * 4, [True, False, True, False]])))(
    lambda: SoftmaxEdge())
case("broadcasting_zoo", lambda: (R(3, 1, 4), R(1, 5, 1), R(4)))(lambda: BroadcastingZoo())
case("list_dict_inputs", lambda: ([R(2, 4), R(2, 4), R(2, 4)], {"scale": 0.5, "bias": 2}))(lambda: ListInputs())
case("kwargs_defaults_mask", lambda: (R(2, 4), torch.rand(2, 4) > 0.5, 2.0, True))(lambda: KwargsDefaults())
case("requires_grad_input", lambda: (R(2, 4).requires_grad_(),))(lambda: RequiresGradInput())
case("grad_accumulation", lambda: (R(4, 3),), train=True)(lambda: GradAccum())
case("detach_shares_storage", lambda: (R(2, 3),))(lambda: DetachAndRetain())
case("half_convnet", lambda: (R(2, 3, 6, 6).half(),))(lambda: HalfConvNet().half())
case("bf16_convnet_train", lambda: (R(2, 3, 6, 6).bfloat16(),), train=True)(lambda: HalfConvNet().bfloat16())
case("bf16_attention", lambda: (R(2, 5, 8).bfloat16(),))(lambda: Bf16Attention().bfloat16())
case("autocast_cpu_bf16", lambda: (R(3, 8),))(lambda: AutocastBlock())
case("norm_layers_fp64_train", lambda: (R(6, 4).double(),), train=True)(lambda: NormLayersFP64().double())
case("strided_slicing", lambda: (R(4, 7),))(lambda: StridedSlicing())
case("int64_positions_embedding", lambda: (torch.randint(0, 50, (2, 6)),))(lambda: Int64Embedding())


# ============================================================================ detection, linalg, misc
def _box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]).clamp(min=0) * (a[:, 3] - a[:, 1]).clamp(min=0)
    area_b = (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None] - inter + 1e-7)


class BoxCoder(nn.Module):
    """anchor generation, IoU matching and delta encode/decode (torchvision/mmdet style)."""

    def __init__(self, stride=4, sizes=(8.0, 16.0)):
        super().__init__()
        self.stride = stride
        self.register_buffer("sizes", torch.tensor(sizes))
        self.weights = (10.0, 10.0, 5.0, 5.0)

    def anchors(self, h, w):
        sy, sx = torch.meshgrid(torch.arange(h) * self.stride, torch.arange(w) * self.stride, indexing="ij")
        ctr = torch.stack([sx, sy, sx, sy], -1).reshape(-1, 1, 4).float()
        half = torch.stack([-self.sizes, -self.sizes, self.sizes, self.sizes], -1) / 2
        return (ctr + half[None]).reshape(-1, 4)

    def forward(self, feat, gt, deltas):
        anc = self.anchors(feat.shape[-2], feat.shape[-1])
        iou = _box_iou(anc, gt)
        best, idx = iou.max(1)
        matched = gt[idx]
        wx, wy, ww, wh = self.weights
        aw, ah = anc[:, 2] - anc[:, 0], anc[:, 3] - anc[:, 1]
        ax, ay = anc[:, 0] + 0.5 * aw, anc[:, 1] + 0.5 * ah
        gw, gh = matched[:, 2] - matched[:, 0], matched[:, 3] - matched[:, 1]
        gx, gy = matched[:, 0] + 0.5 * gw, matched[:, 1] + 0.5 * gh
        enc = torch.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah, ww * torch.log(gw / aw), wh * torch.log(gh / ah)], 1)
        dw = (deltas[:, 2] / ww).clamp(max=math.log(1000.0 / 16))
        dec_w = torch.exp(dw) * aw
        labels = torch.where(best >= 0.5, torch.ones_like(idx), torch.where(best < 0.3, torch.zeros_like(idx), -torch.ones_like(idx)))
        return enc, dec_w, labels, best


class GradientPenalty(nn.Module):
    """WGAN-GP: gradient of the critic w.r.t. interpolates, create_graph=True, then backward."""

    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))

    def forward(self, real, fake, alpha):
        x = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        out = self.critic(x)
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        gp = ((g.norm(2, dim=1) - 1) ** 2).mean()
        gp.backward()
        return gp.detach(), self.critic[0].weight.grad.clone()


class SpectralNormTrain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.utils.spectral_norm(nn.Linear(5, 4))
        self.conv = nn.utils.spectral_norm(nn.Conv2d(2, 3, 3))

    def forward(self, x, img):
        return self.fc(x), self.conv(img).mean((2, 3))


class ForeachEMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Linear(4, 4)
        self.shadow = [p.detach().clone() for p in self.model.parameters()]

    def forward(self, x):
        with torch.no_grad():
            params = [p.detach() for p in self.model.parameters()]
            torch._foreach_mul_(self.shadow, 0.9)
            torch._foreach_add_(self.shadow, params, alpha=0.1)
        return self.model(x), F.linear(x, self.shadow[0], self.shadow[1])


class MatmulZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 3))
        self.b = nn.Parameter(torch.randn(3))

    def forward(self, a4, m):   # (2, 3, 4, 5), (4, 5)
        return (a4 @ self.w, torch.matmul(a4, m.t()), torch.addmm(self.b, m, self.w, beta=0.5, alpha=2.0),
                torch.baddbmm(torch.zeros(3, 4, 3), a4[0], self.w.expand(3, 5, 3), alpha=0.3),
                torch.tensordot(a4, m, dims=([2, 3], [0, 1])), torch.einsum("...ij,jk->...ik", a4, self.w),
                torch.outer(self.b, self.b), torch.kron(self.b[:2], self.b), torch.dot(self.b, self.b), m.mv(self.w[:, 0]))


class LinalgOps(nn.Module):
    def forward(self, a):   # (3, 3) well conditioned
        spd = a @ a.t() + 3 * torch.eye(3)
        return (torch.linalg.inv(spd), torch.linalg.det(spd), torch.linalg.solve(spd, a), torch.linalg.cholesky(spd),
                torch.trace(spd), torch.linalg.matrix_norm(a), torch.linalg.slogdet(spd)[1])


class FFTFeatures(nn.Module):
    def forward(self, x):   # (B, T)
        spec = torch.fft.rfft(x, dim=-1)
        return spec.abs(), torch.angle(spec), torch.fft.irfft(spec, n=x.shape[-1])


class FullTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16,
                                dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.t(src, tgt, tgt_mask=mask, tgt_is_causal=True)


class LongCumsum(nn.Module):
    def forward(self, x):   # (2, 3000): past the masked-sum threshold
        return x.cumsum(-1), x.cumsum(0), torch.cumsum(x > 0, -1)[:, -1]


class MixupLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, y, lam, perm):
        mixed = lam * x + (1 - lam) * x[perm]
        logits = self.fc(mixed)
        return lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[perm])


class PadSequence(nn.Module):
    def forward(self, a, b, c):
        padded = nn.utils.rnn.pad_sequence([a, b, c], batch_first=True, padding_value=-1.0)
        lengths = torch.tensor([a.shape[0], b.shape[0], c.shape[0]])
        mask = torch.arange(padded.shape[1])[None] < lengths[:, None]
        return padded, (padded * mask[..., None]).sum(1) / lengths[:, None]


class GridSampleModes(nn.Module):
    def forward(self, img, grid):
        return (F.grid_sample(img, grid, mode="nearest", padding_mode="zeros", align_corners=True),
                F.grid_sample(img, grid, mode="bilinear", padding_mode="reflection", align_corners=False))


class InterpRecompute(nn.Module):
    def forward(self, x):
        return (F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
                F.interpolate(x, scale_factor=0.5, mode="nearest"), F.interpolate(x, size=(3, 10), mode="bicubic",
                                                                                  align_corners=True),
                F.interpolate(x, scale_factor=2, mode="bilinear", antialias=False), F.upsample(x, scale_factor=2))


case("box_coder_iou_matching", lambda: (R(1, 8, 3, 3), torch.tensor([[0.0, 0.0, 6.0, 7.0], [4.0, 3.0, 12.0, 12.0]]),
                                        R(18, 4)))(lambda: BoxCoder())
case("wgan_gradient_penalty", lambda: (R(4, 4), R(4, 4), torch.rand(4, 1)), train=True)(lambda: GradientPenalty())
case("spectral_norm_train", lambda: (R(3, 5), R(2, 2, 5, 5)), train=True)(lambda: SpectralNormTrain())
case("spectral_norm_eval", lambda: (R(3, 5), R(2, 2, 5, 5)))(lambda: SpectralNormTrain())
case("foreach_ema", lambda: (R(2, 4),))(lambda: ForeachEMA())
case("matmul_zoo", lambda: (R(2, 3, 4, 5), R(4, 5)))(lambda: MatmulZoo())
case("linalg_ops", lambda: (R(3, 3),))(lambda: LinalgOps())
case("fft_features", lambda: (R(2, 16),))(lambda: FFTFeatures())
case("nn_transformer_causal", lambda: (R(2, 5, 8), R(2, 4, 8)))(lambda: FullTransformer())
case("long_cumsum", lambda: (R(2, 3000),))(lambda: LongCumsum())
case("mixup_loss", lambda: (R(4, 6), torch.randint(0, 3, (4,)), 0.7, torch.tensor([2, 0, 3, 1])))(lambda: MixupLoss())
case("pad_sequence_mask", lambda: (R(3, 2), R(5, 2), R(1, 2)))(lambda: PadSequence())
case("grid_sample_modes", lambda: (R(1, 2, 5, 5), torch.rand(1, 4, 4, 2) * 2.4 - 1.2))(lambda: GridSampleModes())
case("interpolate_recompute_scale", lambda: (R(1, 2, 5, 6),))(lambda: InterpRecompute())


# =============================================================================== comparison
def _tol(dtype):
    return {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float64: (1e-7, 1e-7),
            torch.complex64: (1e-4, 1e-5)}.get(dtype, (1e-4, 1e-5))


def diff(a, b, path="out"):
    """None if `a` (eager) and `b` (compiled) agree, else a description of the first difference."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"{path}: eager gave a Tensor, compiled {type(b).__name__}"
        if type(b) is not type(a):
            return f"{path}: tensor type {type(b).__name__} (eager {type(a).__name__})"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {b.dtype}{tuple(b.shape)} (eager {a.dtype}{tuple(a.shape)})"
        if a.requires_grad != b.requires_grad:
            return f"{path}: requires_grad {b.requires_grad} (eager {a.requires_grad})"
        if a.device != b.device:
            return f"{path}: device {b.device} (eager {a.device})"
        a, b = a.detach(), b.detach()
        if a.is_complex():
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        if not a.is_floating_point():
            if not torch.equal(a, b):
                bad = (a != b).nonzero()
                return f"{path}: {bad.shape[0]}/{a.numel()} elements differ, first at {bad[0].tolist()}: " \
                       f"{b[tuple(bad[0])].item()} (eager {a[tuple(bad[0])].item()})"
            return None
        if not torch.equal(a.isnan(), b.isnan()):
            return f"{path}: NaN pattern differs ({int(b.isnan().sum())} NaN, eager {int(a.isnan().sum())})"
        rtol, atol = _tol(a.dtype)
        try:
            torch.testing.assert_close(b, a, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            return f"{path}: " + " ".join(str(e).split())[:300]
        return None
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {type(b).__name__} of {len(b) if hasattr(b, '__len__') else '?'} " \
                   f"(eager {type(a).__name__} of {len(a)})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict):
        if type(a) is not type(b) or list(a) != list(b):
            return f"{path}: keys {list(b) if isinstance(b, dict) else type(b)} (eager {list(a)})"
        for k in a:
            d = diff(a[k], b[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        return None if math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) or (math.isnan(a) and math.isnan(b)) \
            else f"{path}: {b} (eager {a})"
    if type(a) is not type(b):
        return f"{path}: {type(b).__name__} {b!r:.60} (eager {type(a).__name__} {a!r:.60})"
    if isinstance(a, torch.Generator):   # distinct objects: the same draws taken from them
        return None if torch.equal(a.get_state(), b.get_state()) else f"{path}: the generator's state differs"
    if hasattr(a, "__dict__") and not callable(a) and not isinstance(a, type):
        return diff(dict(vars(a)), dict(vars(b)), path)
    return None if a == b else f"{path}: {b!r:.60} (eager {a!r:.60})"


def state(m):
    """Parameters, buffers, gradients and plain attributes of every submodule."""
    d = {}
    for k, v in m.state_dict(keep_vars=True).items():
        d[k] = v.detach()
    for k, p in m.named_parameters():
        d[k + ".grad"] = p.grad
    for name, sub in m.named_modules():
        for k, v in vars(sub).items():
            if not k.startswith("_") and isinstance(v, (int, float, bool, str, torch.Tensor)):
                d[f"{name}.{k}"] = v
    for k in sorted(d):
        d[k] = d.pop(k)
    return d


# =============================================================================== one case
ALL_CASES = None


def all_cases():
    global ALL_CASES
    if ALL_CASES is None:
        import capture   # bench/capture.py: this script's directory is on sys.path
        import modules2  # bench/modules2.py: the second corpus
        import modules3  # bench/modules3.py: the third corpus
        import modules4  # bench/modules4.py: the fourth corpus
        ALL_CASES = [(n, f, i, t, "capture") for n, f, i, t, *_ in capture.CASES] + \
                    [(n, f, i, t, "new") for n, f, i, t in NEW_CASES] + \
                    [(n, f, i, t, "new2") for n, f, i, t in modules2.CASES] + \
                    [(n, f, i, t, "new3") for n, f, i, t in modules3.CASES] + \
                    [(n, f, i, t, "new4") for n, f, i, t in modules4.CASES]
        names = [c[0] for c in ALL_CASES]
        assert len(names) == len(set(names)), "duplicate case names"
    return ALL_CASES


def _fallback_notes(fast, caught):
    notes = []
    for w in caught:
        msg = str(w.message)
        if msg.startswith("mlircap") and ("eagerly" in msg or "without it" in msg):
            notes.append(" ".join(msg.split())[:240])
    graphs = getattr(fast, "graphs", [])
    for g in graphs:
        if g.fallback_reason is not None or g.executable is g.gm:
            notes.append(f"{g.name}: " + " ".join(str(g.fallback_reason).split())[:240])
    if not graphs:
        notes.append("no graph compiled")
    return list(dict.fromkeys(notes))


def _islands(caught):
    return [" ".join(str(w.message).split())[:240] for w in caught
            if "run through torch inside the compiled graph" in str(w.message)]


def _seed_all(seed):
    import random

    import numpy as np
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _rng_states():
    """torch's generator state (with the CUDA one on --device cuda), and Python's and NumPy's as comparable values."""
    import random

    import numpy as np
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    t = torch.get_rng_state()
    if DEVICE.type == "cuda":
        t = torch.cat([t, torch.cuda.get_rng_state()])
    return t, random.getstate(), (kind, keys.tolist(), pos, has_gauss, cached)


# --device: the cases' models and inputs are built under this default device and moved to it; the calls
# themselves run without a default device, as a user's script that moved its model and data would.
DEVICE = torch.device(os.environ.get("MODULES_DEVICE", "cpu"))


def build_model(factory, train):
    with torch.device(DEVICE):
        m = factory()
    return m.to(DEVICE).train(train)


def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def cuda_error(e):
    """The first line of `e` when it is a CUDA error (a device-side assert: the process's CUDA
    context is lost), else ''."""
    if e is None or "CUDA error" not in str(e):
        return ""
    return str(e).splitlines()[0][:200]


def cuda_lost():
    """After a case on --device cuda: whether this process's CUDA context is unusable (a
    device-side assert), so that its worker must be replaced before the next case."""
    if DEVICE.type != "cuda":
        return False
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device=DEVICE).item()
        return False
    except Exception:  # noqa: BLE001
        return True


def set_device(name):
    global DEVICE
    DEVICE = torch.device(name)
    if DEVICE.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


def to_device(obj):
    """A case's inputs on DEVICE: tensors (in lists, tuples and dicts) moved, everything else as it is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(DEVICE) if obj.device != DEVICE else obj
    if type(obj) in (list, tuple):
        return type(obj)(to_device(o) for o in obj)
    if type(obj) is dict:
        return {k: to_device(v) for k, v in obj.items()}
    return obj


def build_inputs(inputs, *args):
    if DEVICE.type == "cpu":
        return inputs(*args)
    with torch.device(DEVICE):
        return to_device(inputs(*args))


def run_case(name, ncalls=3):
    import contextlib
    import io

    import mlircap
    entry = next(c for c in all_cases() if c[0] == name)
    _, factory, inputs, train, _src = entry
    torch.manual_seed(0)
    ref = build_model(factory, train)
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    res = {"name": name, "status": "ok", "detail": "", "graphs": 0, "notes": [], "islands": []}
    caught = []
    eager_errors = 0
    for i in range(ncalls):
        seed = 1 if i < 2 else 2 + i     # calls 0 and 1: same values; later calls: new values
        torch.manual_seed(seed)
        args_e = build_inputs(inputs)
        try:   # a copy: a factory may also draw from Python state (next(counter))
            args_c = copy.deepcopy(args_e)
        except Exception:  # noqa: BLE001 - not copyable: the factory again, same seed
            torch.manual_seed(seed)
            args_c = build_inputs(inputs)
        err_e = err_c = None
        out_e = out_c = None
        with contextlib.redirect_stdout(io.StringIO()):
            _seed_all(100 + i)   # torch's, Python's and NumPy's generators: both sides draw the same
            try:
                out_e = ref(*args_e)
                sync()   # eager's asynchronous CUDA errors are eager's
            except Exception as e:  # noqa: BLE001
                err_e = e
            if cuda_error(err_e):
                res["status"], res["detail"] = "n/a", f"eager fails on {DEVICE.type}: {cuda_error(err_e)}"
                return res
            rng_e = _rng_states()
            _seed_all(100 + i)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                try:
                    out_c = fast(*args_c)
                except Exception as e:  # noqa: BLE001
                    err_c = e
            caught += w
            rng_c = _rng_states()
        if err_c is not None and (err_e is None or type(err_e) is not type(err_c)):
            res["status"] = "error"
            res["detail"] = f"call {i}: {type(err_c).__name__}: {' '.join(str(err_c).split())[:400]}" + \
                (f" (eager: {type(err_e).__name__})" if err_e else "")
            res["traceback"] = "".join(traceback.format_exception(err_c))[-3000:]
            break
        if err_e is not None:
            if err_c is None:
                res["status"] = "wrong"
                res["detail"] = f"call {i}: eager raised {type(err_e).__name__}: {str(err_e)[:200]}, compiled did not"
                break
            eager_errors += 1
            continue
        d = diff(out_e, out_c) or diff(list(args_e), list(args_c), "inputs after") or \
            diff(state(ref), state(mine), "state")
        if not d and not torch.equal(rng_e[0], rng_c[0]):
            d = "torch's generator state after the call differs from eager's"
        if not d and rng_e[1:] != rng_c[1:]:
            d = "Python's or NumPy's generator state after the call differs from eager's"
        if d:
            res["status"] = "wrong"
            res["detail"] = f"call {i}: {d}"
            break
    res["graphs"] = len(getattr(fast, "graphs", []))
    res["notes"] = _fallback_notes(fast, caught)
    res["islands"] = list(dict.fromkeys(_islands(caught)))
    if res["status"] == "ok" and eager_errors == ncalls and DEVICE.type != "cpu":
        # written for the CPU (a tensor made in forward without a device): eager itself cannot run it here
        res["status"], res["detail"] = "n/a", f"eager raises on {DEVICE.type}: {type(err_e).__name__}: " \
            f"{' '.join(str(err_e).split())[:160]}"
    elif res["status"] == "ok" and res["notes"]:
        res["status"] = "fallback"
    return res


# =============================================================================== processes
def worker_main():
    """Child: reads case names from stdin, writes one '@@RESULT <json>' line per case."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)   # whatever the cases print goes to stderr
    set_device(str(DEVICE))
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        t0 = time.perf_counter()
        try:
            r = run_case(name)
        except Exception as e:  # noqa: BLE001 - a runner failure is an error of the case
            r = {"name": name, "status": "error", "detail": f"runner: {type(e).__name__}: {e}"[:400],
                 "traceback": traceback.format_exc()[-3000:], "notes": [], "islands": [], "graphs": 0}
        r["seconds"] = round(time.perf_counter() - t0, 2)
        lost = cuda_lost()
        if lost:
            r["restart"] = True   # the parent replaces this worker before the next case
        out.write("@@RESULT " + json.dumps(r) + "\n")
        if lost:
            break


class Child:
    def __init__(self, env):
        self.env = env
        self.p = None

    def start(self):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if not os.environ.get(
                                      "MODULES_STDERR") else None, text=True, bufsize=1, env=self.env,
                                  start_new_session=True)

    def kill(self):
        if self.p is not None and self.p.poll() is None:
            try:
                os.killpg(self.p.pid, 9)   # the child and its compile worker (own session)
            except ProcessLookupError:
                pass
            self.p.wait()
        self.p = None

    def run(self, name, timeout):
        if self.p is None or self.p.poll() is not None:
            self.start()
        t0 = time.perf_counter()
        self.p.stdin.write(name + "\n")
        self.p.stdin.flush()
        buf = ""
        while True:
            left = timeout - (time.perf_counter() - t0)
            if left <= 0:
                self.kill()
                return {"name": name, "status": "timeout", "detail": f"> {timeout}s", "notes": [], "islands": []}
            r, _, _ = select.select([self.p.stdout], [], [], min(left, 1.0))
            if r:
                line = self.p.stdout.readline()
                if not line:
                    rc = self.p.wait()
                    self.p = None
                    sig = f"signal {-rc}" if rc < 0 else f"exit {rc}"
                    return {"name": name, "status": "crash", "detail": f"child died: {sig}", "notes": [],
                            "islands": [], "seconds": round(time.perf_counter() - t0, 2)}
                buf = line
                if buf.startswith("@@RESULT "):
                    r = json.loads(buf[len("@@RESULT "):])
                    if r.pop("restart", False):
                        self.kill()
                    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="", help="comma-separated substrings of case names")
    ap.add_argument("--only-new", action="store_true", help="only the cases of this file and modules2-4.py")
    ap.add_argument("--source", default="", help="comma-separated corpora: capture, new, new2 (modules2.py), new3 (modules3.py), new4 (modules4.py)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--device", default="cpu", help="run the cases' models and inputs on this device (cuda: the "
                    "GPU path); cases eager cannot run there count as n/a")
    ap.add_argument("--isolate", action="store_true", help="a fresh child process per case (slower)")
    ap.add_argument("--case", help="run one case in this process and print the result")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the notes of fallbacks too")
    args = ap.parse_args()
    if args.worker:
        return worker_main()
    set_device(args.device)
    if args.case:
        r = run_case(args.case)
        print(r.pop("traceback", ""))
        print(json.dumps(r, indent=1))
        return
    cases = all_cases()
    filt = [f for f in args.filter.split(",") if f]
    srcs = [s for s in args.source.split(",") if s] or (["new", "new2", "new3", "new4"] if args.only_new else [])
    names = [c[0] for c in cases if (not filt or any(f in c[0] for f in filt)) and (not srcs or c[4] in srcs)]
    env = dict(os.environ)
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MODULES_DEVICE"] = str(DEVICE)
    results = {}
    todo = list(names)
    lock = threading.Lock()
    t_start = time.perf_counter()

    def drive():
        child = Child(env)
        while True:
            with lock:
                if not todo:
                    break
                name = todo.pop(0)
            r = child.run(name, args.timeout)
            if args.isolate:
                child.kill()
            with lock:
                results[name] = r
                flag = r["status"]
                print(f"[{len(results):3d}/{len(names)}] {flag:8s} {name} {r.get('seconds', '')}s "
                      f"{r.get('detail', '')[:160]}", flush=True)
        child.kill()

    threads = [threading.Thread(target=drive) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cats = ["ok", "fallback", "wrong", "crash", "timeout", "error"] + (["n/a"] if DEVICE.type != "cpu" else [])
    print()
    print(f"mlircap.compile ({DEVICE}) vs eager, torch {torch.__version__}, {len(names)} cases, "
          f"{time.perf_counter() - t_start:.0f} s")
    for src in ("capture", "new", "new2", "new3", "new4"):
        sub = [results[c[0]] for c in cases if c[0] in results and c[4] == src]
        if sub:
            print(f"  {src:8s} " + "  ".join(f"{k} {sum(r['status'] == k for r in sub)}" for k in cats))
    print(f"  {'all':8s} " + "  ".join(f"{k} {sum(r['status'] == k for r in results.values())}" for k in cats))
    for k in ["wrong", "crash", "timeout", "error"] + (["fallback"] if args.verbose else []):
        rows = [r for n in names if (r := results.get(n)) and r["status"] == k]
        if rows:
            print(f"\n{k.upper()}:")
            for r in rows:
                print(f"  {r['name']}: {r.get('detail', '')}")
                for note in r.get("notes", [])[:3]:
                    print(f"      note: {note}")
    if args.verbose:
        isl = [r for r in results.values() if r.get("islands")]
        if isl:
            print("\nEAGER ISLANDS (compiled around):")
            for r in isl:
                print(f"  {r['name']}: {r['islands'][0][:200]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
