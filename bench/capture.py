"""Capture benchmark: mlircap.capture vs torch.compile(backend="eager") (Dynamo).

Corpus of >=100 small real-world-style modules.  For every case both frontends run on
identical copies of the model (same weights, same RNG seed); we report whether the
module was captured as a single graph, graph/break counts, capture time (first call),
steady-state guard-check time, and correctness against eager (outputs + module state).
Breaks are those of the first call, counted as Dynamo's explain() counts them: the places
the graphs split (a break before the first graph operation, e.g. a random draw deciding a
branch, splits nothing and is counted by neither).  A frame that runs eagerly after a break
(ours: capture gave up; Dynamo: explain() reports -1 breaks, a break it could not resume
from) is shown as E and counts the breaks met before, at least 1.

    PYTHONPATH=python python bench/capture.py [--no-dynamo] [--filter NAME]
"""
import argparse
import contextlib
import copy
import functools
import inspect
import math
import statistics
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from mlircap.capture import HOOK, capture

CASES = []


def case(name, inputs, train=False, mutate=None):
    """mutate(model, i): run before call i on both copies (a training loop's schedule)."""
    def deco(factory):
        CASES.append((name, factory, inputs, train, mutate))
        return factory
    return deco


def R(*s):
    return torch.randn(*s)


# ----------------------------------------------------------------------------- CNNs
class ConvBNReLU(nn.Module):
    def __init__(self, cin, cout, k=3, stride=1, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class BasicBlock(nn.Module):
    def __init__(self, c, stride=1):
        super().__init__()
        self.c1 = ConvBNReLU(c, c, stride=stride)
        self.c2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.down = None if stride == 1 else nn.Sequential(nn.Conv2d(c, c, 1, stride), nn.BatchNorm2d(c))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        return F.relu(self.bn2(self.c2(self.c1(x))) + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c):
        super().__init__()
        self.a = ConvBNReLU(c * 4, c, 1)
        self.b = ConvBNReLU(c, c, 3)
        self.c = nn.Conv2d(c, c * 4, 1)

    def forward(self, x):
        return F.relu(x + self.c(self.b(self.a(x))))


class TinyResNet(nn.Module):
    def __init__(self, depth=2, width=8, ncls=10):
        super().__init__()
        self.stem = ConvBNReLU(3, width)
        self.blocks = nn.Sequential(*[BasicBlock(width, 2 if i == 0 else 1) for i in range(depth)])
        self.fc = nn.Linear(width, ncls)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SEBlock(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1 = nn.Linear(c, c // r)
        self.fc2 = nn.Linear(c // r, c)

    def forward(self, x):
        s = x.mean((2, 3))
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s[:, :, None, None]


class MBConv(nn.Module):
    def __init__(self, c, expand=4, use_se=True):
        super().__init__()
        h = c * expand
        self.expand = ConvBNReLU(c, h, 1)
        self.dw = ConvBNReLU(h, h, 3, groups=h)
        self.se = SEBlock(h) if use_se else nn.Identity()
        self.project = nn.Conv2d(h, c, 1)

    def forward(self, x):
        return x + self.project(self.se(self.dw(self.expand(x))))


class VGGish(nn.Module):
    def __init__(self, cfg=(8, "M", 16, "M")):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, 5)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class UNetTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1 = ConvBNReLU(3, 8)
        self.d2 = ConvBNReLU(8, 16, stride=2)
        self.u1 = nn.ConvTranspose2d(16, 8, 2, 2)
        self.out = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        return self.out(torch.cat([a, self.u1(b)], 1))


class DepthwiseSeparable(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.pw = nn.Conv2d(c, 2 * c, 1)
        self.act = nn.Hardswish()

    def forward(self, x):
        return self.act(self.pw(self.dw(x)))


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(4, 8, 3, padding=1), nn.Conv1d(8, 8, 3, padding=2, dilation=2)])
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        for c in self.convs:
            x = F.gelu(c(x))
        return self.norm(x).max(dim=-1).values


class PixelShuffleUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 12, 3, padding=1)
        self.ps = nn.PixelShuffle(2)

    def forward(self, x):
        return torch.tanh(self.ps(self.conv(x)))


IMG = lambda: (R(2, 3, 16, 16),)  # noqa: E731
case("resnet_tiny", IMG)(lambda: TinyResNet())
case("resnet_tiny_train", IMG, train=True)(lambda: TinyResNet())
case("resnet_deeper", IMG)(lambda: TinyResNet(depth=3, width=12))
case("basic_block", lambda: (R(2, 8, 8, 8),))(lambda: BasicBlock(8))
case("basic_block_stride2_train", lambda: (R(2, 8, 8, 8),), train=True)(lambda: BasicBlock(8, 2))
case("bottleneck", lambda: (R(2, 16, 8, 8),))(lambda: Bottleneck(4))
case("se_block", lambda: (R(2, 8, 8, 8),))(lambda: SEBlock(8))
case("mbconv", lambda: (R(2, 4, 8, 8),))(lambda: MBConv(4))
case("mbconv_nose_train", lambda: (R(2, 4, 8, 8),), train=True)(lambda: MBConv(4, use_se=False))
case("vggish", IMG)(lambda: VGGish())
case("vggish_wide", IMG)(lambda: VGGish((8, 8, "M", 16, 16, "M", 32)))
case("unet_tiny", IMG)(lambda: UNetTiny())
case("unet_tiny_train", IMG, train=True)(lambda: UNetTiny())
case("dw_separable", lambda: (R(2, 6, 8, 8),))(lambda: DepthwiseSeparable(6))
case("conv1d_net", lambda: (R(2, 4, 20),))(lambda: Conv1dNet())
case("pixel_shuffle", IMG)(lambda: PixelShuffleUp())
case("conv_bn_relu_train", IMG, train=True)(lambda: ConvBNReLU(3, 8))


# ----------------------------------------------------------------------------- RNN cells
class LSTMCellLoop(nn.Module):
    def __init__(self, i=6, h=8):
        super().__init__()
        self.cell = nn.LSTMCell(i, h)
        self.h = h

    def forward(self, xs):
        h = xs.new_zeros(xs.shape[1], self.h)
        c = xs.new_zeros(xs.shape[1], self.h)
        outs = []
        for t in range(xs.shape[0]):
            h, c = self.cell(xs[t], (h, c))
            outs.append(h)
        return torch.stack(outs)


class ManualLSTM(nn.Module):
    def __init__(self, i=6, h=8):
        super().__init__()
        self.ih = nn.Linear(i, 4 * h)
        self.hh = nn.Linear(h, 4 * h)

    def forward(self, x, state=None):
        if state is None:
            z = x.new_zeros(x.shape[0], self.hh.in_features)
            state = (z, z)
        h, c = state
        g = self.ih(x) + self.hh(h)
        i, f, gg, o = g.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        return torch.sigmoid(o) * torch.tanh(c), c


class GRUSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRUCell(6, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, xs, reverse=False):
        h = None
        steps = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
        for t in steps:
            h = self.gru(xs[t], h)
        return self.out(h)


class ElmanRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.wx = nn.Parameter(torch.randn(6, 8) * 0.1)
        self.wh = nn.Parameter(torch.randn(8, 8) * 0.1)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 8)
        for x in xs.unbind(0):
            h = torch.tanh(x @ self.wx + h @ self.wh)
        return h


class FullLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return out[:, -1] + h[-1]


class FullGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 8, bidirectional=True)

    def forward(self, x):
        return self.gru(x)[0].sum(0)


SEQ = lambda: (R(5, 2, 6),)  # noqa: E731
case("lstm_cell_loop", SEQ)(lambda: LSTMCellLoop())
case("manual_lstm_step", lambda: (R(2, 6),))(lambda: ManualLSTM())
case("gru_seq", SEQ)(lambda: GRUSeq())
case("elman_rnn", SEQ)(lambda: ElmanRNN())
case("nn_lstm", lambda: (R(2, 5, 6),))(lambda: FullLSTM())
case("nn_gru_bidir", SEQ)(lambda: FullGRU())
case("rnn_cell_tanh", lambda: (R(2, 6), R(2, 8)))(lambda: nn.RNNCell(6, 8))


class GRUSeqReverse(GRUSeq):
    def forward(self, xs):
        return super().forward(xs, reverse=True)


case("gru_seq_reverse_super", SEQ)(lambda: GRUSeqReverse())


# ----------------------------------------------------------------------------- attention
class MHA(nn.Module):
    def __init__(self, d=16, h=4, causal=False, dropout=0.0):
        super().__init__()
        self.h, self.causal = h, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        if mask is not None:
            att = att + mask
        att = self.drop(F.softmax(att, dim=-1))
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class SDPAAttn(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.h = h
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        sh = lambda t: t.view(B, T, self.h, -1).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(sh(self.q(x)), sh(self.k(x)), sh(self.v(x)), is_causal=True)
        return y.transpose(1, 2).reshape(B, T, C)


class RotaryAttn(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        self.register_buffer("inv_freq", inv)

    def rope(self, x):
        T = x.shape[1]
        f = torch.outer(torch.arange(T, dtype=x.dtype), self.inv_freq)
        cos, sin = f.cos(), f.sin()
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    def forward(self, x):
        q, k = self.qk(x).chunk(2, -1)
        return (self.rope(q) @ self.rope(k).transpose(1, 2)).softmax(-1) @ x


class CrossAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x, ctx):
        return self.attn(x, ctx, ctx, need_weights=False)[0]


class TransformerBlock(nn.Module):
    def __init__(self, d=16, pre_norm=True):
        super().__init__()
        self.pre_norm = pre_norm
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MHA(d, 4, causal=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=50, d=16, n=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, 32, d))
        self.blocks = nn.ModuleList([TransformerBlock(d) for _ in range(n)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos[:, :T]
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class LinearAttention(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        q, k = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.einsum("btd,bte->bde", k, v)
        z = 1 / (torch.einsum("btd,bd->bt", q, k.sum(1)) + 1e-6)
        return torch.einsum("btd,bde,bt->bte", q, kv, z)


class WindowAttn(nn.Module):
    def __init__(self, d=16, window=4):
        super().__init__()
        self.window = window
        self.mha = MHA(d, 2)

    def forward(self, x):
        B, T, C = x.shape
        pad = (-T) % self.window
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        w = x.view(B * (x.shape[1] // self.window), self.window, C)
        return self.mha(w).view(B, -1, C)[:, :T]


TOK = lambda: (R(2, 6, 16),)  # noqa: E731
case("mha", TOK)(lambda: MHA())
case("mha_causal", TOK)(lambda: MHA(causal=True))
case("mha_dropout_train", TOK, train=True)(lambda: MHA(dropout=0.1))
case("mha_mask", lambda: (R(2, 6, 16), R(6, 6)))(lambda: MHA())
case("sdpa_attn", TOK)(lambda: SDPAAttn())
case("rotary_attn", TOK)(lambda: RotaryAttn())
case("cross_attn_nn_mha", lambda: (R(2, 6, 16), R(2, 4, 16)))(lambda: CrossAttn())
case("transformer_block_pre", TOK)(lambda: TransformerBlock())
case("transformer_block_post", TOK)(lambda: TransformerBlock(pre_norm=False))
case("transformer_block_train", TOK, train=True)(lambda: TransformerBlock())
case("tiny_gpt", lambda: (torch.randint(0, 50, (2, 8)),))(lambda: TinyGPT())
case("tiny_gpt_loss", lambda: (torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))))(lambda: TinyGPT())
case("linear_attention", TOK)(lambda: LinearAttention())
case("window_attn_pad", lambda: (R(2, 6, 16),))(lambda: WindowAttn())
case("window_attn_nopad", lambda: (R(2, 8, 16),))(lambda: WindowAttn())
case("nn_transformer_encoder_layer", TOK)(lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True))


# ----------------------------------------------------------------------------- losses
class FocalLoss(nn.Module):
    def __init__(self, gamma=2.0, alpha=None, reduction="mean"):
        super().__init__()
        self.gamma, self.alpha, self.reduction = gamma, alpha, reduction

    def forward(self, logits, target):
        logp = F.log_softmax(logits, -1)
        pt = logp.gather(1, target[:, None]).squeeze(1).exp()
        loss = -((1 - pt) ** self.gamma) * pt.log()
        if self.alpha is not None:
            loss = loss * self.alpha
        if self.reduction == "mean":
            return loss.mean()
        if self.reduction == "sum":
            return loss.sum()
        return loss


class DiceLoss(nn.Module):
    def forward(self, pred, target, eps=1.0):
        p = torch.sigmoid(pred).flatten(1)
        t = target.flatten(1)
        inter = (p * t).sum(1)
        return 1 - ((2 * inter + eps) / (p.sum(1) + t.sum(1) + eps)).mean()


class LabelSmoothingCE(nn.Module):
    def __init__(self, eps=0.1):
        super().__init__()
        self.eps = eps

    def forward(self, logits, target):
        n = logits.size(-1)
        logp = logits.log_softmax(-1)
        nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        return ((1 - self.eps) * nll - self.eps / n * logp.sum(-1)).mean()


class ContrastiveLoss(nn.Module):
    def __init__(self, temperature=0.1):
        super().__init__()
        self.t = temperature

    def forward(self, a, b):
        a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
        logits = a @ b.t() / self.t
        labels = torch.arange(a.shape[0])
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


class TripletLoss(nn.Module):
    def forward(self, a, p, n, margin=1.0):
        return F.relu((a - p).pow(2).sum(1) - (a - n).pow(2).sum(1) + margin).mean()


class KLDivLoss(nn.Module):
    def forward(self, student, teacher, T=2.0):
        return F.kl_div(F.log_softmax(student / T, -1), F.softmax(teacher / T, -1), reduction="batchmean") * T * T


class HuberLoss(nn.Module):
    def forward(self, pred, target):
        return F.smooth_l1_loss(pred, target) + F.huber_loss(pred, target, delta=0.5)


class MultiTaskLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = {"cls": 1.0, "reg": 0.5}

    def forward(self, outputs, targets):
        total = 0.0
        parts = {}
        for k, w in self.weights.items():
            if k == "cls":
                l = F.cross_entropy(outputs[k], targets[k])  # noqa: E741
            else:
                l = F.mse_loss(outputs[k], targets[k])  # noqa: E741
            parts[k] = l
            total = total + w * l
        return total, parts


CLS = lambda: (R(4, 5), torch.randint(0, 5, (4,)))  # noqa: E731
case("focal_loss", CLS)(lambda: FocalLoss())
case("focal_loss_alpha_sum", CLS)(lambda: FocalLoss(alpha=0.25, reduction="sum"))
case("focal_loss_none", CLS)(lambda: FocalLoss(gamma=1.0, reduction="none"))
case("dice_loss", lambda: (R(2, 1, 8, 8), (R(2, 1, 8, 8) > 0).float()))(lambda: DiceLoss())
case("label_smoothing_ce", CLS)(lambda: LabelSmoothingCE())
case("contrastive_loss", lambda: (R(4, 8), R(4, 8)))(lambda: ContrastiveLoss())
case("triplet_loss", lambda: (R(4, 8), R(4, 8), R(4, 8)))(lambda: TripletLoss())
case("kl_div_distill", lambda: (R(4, 5), R(4, 5)))(lambda: KLDivLoss())
case("huber_loss", lambda: (R(4, 3), R(4, 3)))(lambda: HuberLoss())
case("multitask_loss_dicts", lambda: ({"cls": R(4, 5), "reg": R(4, 2)},
                                      {"cls": torch.randint(0, 5, (4,)), "reg": R(4, 2)}))(lambda: MultiTaskLoss())
case("nn_bce_with_logits", lambda: (R(4, 3), torch.rand(4, 3)))(lambda: nn.BCEWithLogitsLoss(pos_weight=torch.ones(3) * 2))
case("nn_ctc_like_nll", lambda: (F.log_softmax(R(4, 5), -1), torch.randint(0, 5, (4,))))(lambda: nn.NLLLoss())


# ----------------------------------------------------------------------------- custom layers with Python logic
class GatedMLP(nn.Module):
    def __init__(self, d=8, act="silu"):
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(d, 2 * d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.act = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}[act]

    def forward(self, x):
        return self.w3(self.act(self.w1(x)) * self.w2(x))


class RMSNorm(nn.Module):
    def __init__(self, d=8, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class StochasticDepth(nn.Module):
    def __init__(self, p=0.2):
        super().__init__()
        self.p = p
        self.body = nn.Linear(8, 8)

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x + self.body(x)
        keep = torch.rand(x.shape[0], 1) >= self.p
        return x + self.body(x) * keep / (1 - self.p)


class MixtureOfExperts(nn.Module):
    def __init__(self, n=4, d=8, k=2):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(d, n)
        self.experts = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])

    def forward(self, x):
        w, idx = self.gate(x).softmax(-1).topk(self.k, -1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = (idx == e).any(-1, keepdim=True).float()
            weight = (w * (idx == e)).sum(-1, keepdim=True)
            out = out + sel * weight * expert(x)
        return out


class MoEDataDependent(MixtureOfExperts):
    def forward(self, x):
        idx = self.gate(x).argmax(-1)
        out = torch.zeros_like(x)
        for e in idx.unique().tolist():
            m = idx == e
            out[m] = self.experts[e](x[m])
        return out


class EarlyExit(nn.Module):
    def __init__(self, thresh=0.5):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.thresh = thresh

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
            if x.abs().mean() < self.thresh:
                break
        return x


class ScaleByMax(nn.Module):
    def forward(self, x):
        m = x.abs().max().item()
        return x / max(m, 1e-6)


class ConfigurableHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(8, cfg["out"])
        self.norm = nn.LayerNorm(8) if cfg.get("norm") else None

    def forward(self, x):
        if self.norm is not None:
            x = self.norm(x)
        y = self.fc(x)
        if self.cfg.get("act") == "softmax":
            y = y.softmax(-1)
        elif self.cfg.get("act") == "sigmoid":
            y = torch.sigmoid(y)
        return {"out": y, "name": f"head_{self.cfg['out']}"}


class EMAStats(nn.Module):
    def __init__(self, d=8, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("var", torch.ones(d))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.mean.lerp_(x.mean(0), self.momentum)
                self.var.lerp_(x.var(0), self.momentum)
                self.steps += 1
        return (x - self.mean) / (self.var + 1e-5).sqrt()


class CachedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.cache = {}

    def forward(self, x, key="default"):
        y = self.fc(x)
        self.cache[key] = y.detach()
        return y


class ResidualStack(nn.Module):
    def __init__(self, n=3, scales=None):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
        self.scales = scales or [1.0 / (i + 1) for i in range(n)]

    def forward(self, x):
        for s, layer in zip(self.scales, self.layers):
            x = x + s * F.relu(layer(x))
        return x


class PositionalEncoding(nn.Module):
    def __init__(self, d=16, max_len=64):
        super().__init__()
        pe = torch.zeros(max_len, d)
        pos = torch.arange(max_len).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(x + self.pe[: x.size(1)])


class LoRALinear(nn.Module):
    def __init__(self, d=8, r=2, alpha=4, enabled=True):
        super().__init__()
        self.base = nn.Linear(d, d)
        self.A = nn.Parameter(torch.randn(r, d) * 0.01)
        self.B = nn.Parameter(torch.zeros(d, r))
        self.scaling = alpha / r
        self.enabled = enabled

    def forward(self, x):
        y = self.base(x)
        if self.enabled:
            y = y + (x @ self.A.t() @ self.B.t()) * self.scaling
        return y


class DebugPrintLayer(nn.Module):
    def __init__(self, verbose=True):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.verbose = verbose

    def forward(self, x):
        y = self.fc(x)
        if self.verbose:
            print(f"[debug] activation mean {y.mean():.3f}")
        return y.relu()


class ClampByStd(nn.Module):
    def forward(self, x):
        s = float(x.std())
        return x.clamp(-3 * s, 3 * s)


class NumpyPost(nn.Module):
    def forward(self, x):
        a = x.detach().numpy()
        return torch.from_numpy(a * 2).float() + x


class Gumbel(nn.Module):
    def __init__(self, tau=1.0, hard=False):
        super().__init__()
        self.tau, self.hard = tau, hard

    def forward(self, logits):
        return F.gumbel_softmax(logits, tau=self.tau, hard=self.hard)


class HighwayLayer(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.h, self.t = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        t = torch.sigmoid(self.t(x))
        return t * F.relu(self.h(x)) + (1 - t) * x


class CapsuleSquash(nn.Module):
    def forward(self, s, dim=-1):
        n2 = (s ** 2).sum(dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)


class TopKPool(nn.Module):
    def __init__(self, k=3):
        super().__init__()
        self.k = k
        self.score = nn.Linear(8, 1)

    def forward(self, x):
        s = self.score(x).squeeze(-1)
        idx = s.topk(min(self.k, x.shape[1]), dim=1).indices
        return torch.gather(x, 1, idx[..., None].expand(-1, -1, x.shape[-1])).mean(1)


class MaskedMeanPool(nn.Module):
    def forward(self, x, lengths):
        mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
        return (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


class Tokenizerish(nn.Module):
    """Python-heavy preprocessing on a Python list input."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrs")}

    def forward(self, words):
        ids = [[self.vocab.get(c, 19) for c in w] for w in words]
        n = max(len(i) for i in ids)
        ids = [i + [19] * (n - len(i)) for i in ids]
        return self.emb(torch.tensor(ids)).mean(1)


class GradientReversal(nn.Module):
    def forward(self, x, alpha=1.0):
        return x.detach() * (1 + alpha) - x * alpha


class SpectralNormish(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("u", F.normalize(torch.randn(8), dim=0))

    def forward(self, x):
        with torch.no_grad():
            v = F.normalize(self.w.t() @ self.u, dim=0)
            self.u.copy_(F.normalize(self.w @ v, dim=0))
        sigma = self.u @ self.w @ v
        return x @ (self.w / sigma).t()


class Conditional(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x, use_b=False):
        return self.b(x) if use_b else self.a(x)


class WithKwargs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, *extras, scale=1.0, **opts):
        y = self.fc(x) * scale
        for e in extras:
            y = y + e
        if opts.get("residual"):
            y = y + x
        return y


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        from collections import namedtuple  # noqa: F401 - an import inside the captured code
        Out = _OUT
        logits = self.fc(x)
        return Out(logits, logits.argmax(-1))


from collections import namedtuple  # noqa: E402
_OUT = namedtuple("Out", ["logits", "pred"])

V8 = lambda: (R(4, 8),)  # noqa: E731
case("gated_mlp_silu", V8)(lambda: GatedMLP())
case("gated_mlp_gelu", V8)(lambda: GatedMLP(act="gelu"))
case("rmsnorm", V8)(lambda: RMSNorm())
case("stochastic_depth_train", V8, train=True)(lambda: StochasticDepth())
case("stochastic_depth_eval", V8)(lambda: StochasticDepth())
case("moe_dense", V8)(lambda: MixtureOfExperts())
case("moe_data_dependent", V8)(lambda: MoEDataDependent())
case("early_exit", V8)(lambda: EarlyExit())
case("scale_by_max_item", V8)(lambda: ScaleByMax())
case("configurable_head_softmax", V8)(lambda: ConfigurableHead({"out": 3, "act": "softmax", "norm": True}))
case("configurable_head_sigmoid", V8)(lambda: ConfigurableHead({"out": 2, "act": "sigmoid"}))
case("ema_stats_train", V8, train=True)(lambda: EMAStats())
case("ema_stats_eval", V8)(lambda: EMAStats())
case("cached_layer_dict_write", V8)(lambda: CachedLayer())
case("residual_stack", V8)(lambda: ResidualStack())
case("positional_encoding_train", TOK, train=True)(lambda: PositionalEncoding())
case("lora_linear", V8)(lambda: LoRALinear())
case("lora_linear_disabled", V8)(lambda: LoRALinear(enabled=False))
case("debug_print_layer", V8)(lambda: DebugPrintLayer())
case("debug_print_layer_quiet", V8)(lambda: DebugPrintLayer(verbose=False))
case("clamp_by_std_float", V8)(lambda: ClampByStd())
case("numpy_postprocess", V8)(lambda: NumpyPost())
case("gumbel_softmax", V8)(lambda: Gumbel())
case("gumbel_softmax_hard", V8)(lambda: Gumbel(hard=True))
case("highway", V8)(lambda: HighwayLayer())
case("capsule_squash", lambda: (R(4, 3, 8),))(lambda: CapsuleSquash())
case("topk_pool", lambda: (R(2, 5, 8),))(lambda: TopKPool())
case("masked_mean_pool", lambda: (R(3, 5, 8), torch.tensor([5, 2, 3])))(lambda: MaskedMeanPool())
case("tokenizerish_python_lists", lambda: (["abc", "de", "fghij"],))(lambda: Tokenizerish())
case("gradient_reversal", V8)(lambda: GradientReversal())
case("spectral_normish", V8)(lambda: SpectralNormish())
case("conditional_branch_kwarg", V8)(lambda: Conditional())
case("varargs_kwargs_forward", lambda: (R(4, 8), R(4, 8), R(4, 8)))(lambda: WithKwargs())
case("namedtuple_output", V8)(lambda: DataclassOut())


# ----------------------------------------------------------------------------- small classics
class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(16 * 5 * 5, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = x.view(x.size(0), -1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


class Autoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
        self.dec = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 16), nn.Sigmoid())

    def forward(self, x):
        z = self.enc(x)
        return self.dec(z), z


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 8)
        self.mu, self.logvar = nn.Linear(8, 4), nn.Linear(8, 4)
        self.dec = nn.Linear(4, 16)

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, lv = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * lv)
        recon = torch.sigmoid(self.dec(z))
        kld = -0.5 * torch.sum(1 + lv - mu.pow(2) - lv.exp())
        return recon, kld


class GCNLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, adj):
        deg = adj.sum(-1)
        norm = deg.pow(-0.5)
        norm = torch.where(torch.isinf(norm), torch.zeros_like(norm), norm)
        a = norm[:, None] * adj * norm[None, :]
        return F.relu(a @ self.lin(x))


class WideAndDeep(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(30, 8, mode="mean")
        self.wide = nn.Linear(10, 1)
        self.deep = nn.Sequential(nn.Linear(8 + 10, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, ids, offsets, dense):
        e = self.emb(ids, offsets)
        return torch.sigmoid(self.wide(dense) + self.deep(torch.cat([e, dense], 1)))


class SiameseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower = nn.Sequential(nn.Linear(8, 8), nn.Tanh())

    def forward(self, a, b):
        return F.cosine_similarity(self.tower(a), self.tower(b))


class PolicyValueNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.pi, self.v = nn.Linear(16, 4), nn.Linear(16, 1)

    def forward(self, obs, greedy=False):
        h = F.relu(self.body(obs))
        probs = F.softmax(self.pi(h), -1)
        action = probs.argmax(-1) if greedy else torch.multinomial(probs, 1).squeeze(-1)
        return action, self.v(h).squeeze(-1)


class PatchEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 16, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 16))

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)


class MiniViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = PatchEmbed()
        self.blocks = nn.Sequential(TransformerBlock(16), TransformerBlock(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x))[:, 0])


class TemporalConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=2, dilation=1)
        self.chomp = 2

    def forward(self, x):
        return F.relu(self.conv(x)[..., :-self.chomp] if self.chomp else self.conv(x))


class NormalizeInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.net = ConvBNReLU(3, 4)

    def forward(self, x):
        if x.dtype == torch.uint8:
            x = x.float() / 255
        return self.net((x - self.mean) / self.std)


class InstanceNormStyle(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.InstanceNorm2d(3, affine=True)
        self.style = nn.Linear(4, 6)

    def forward(self, x, s):
        g, b = self.style(s).chunk(2, -1)
        return self.norm(x) * (1 + g[:, :, None, None]) + b[:, :, None, None]


class Upsampler(nn.Module):
    def __init__(self, mode="nearest"):
        super().__init__()
        self.mode = mode
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        kw = {} if self.mode == "nearest" else {"align_corners": False}
        return self.conv(F.interpolate(x, scale_factor=2, mode=self.mode, **kw))


class PReLUMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.PReLU(), nn.Dropout(0.2), nn.Linear(16, 8), nn.ELU(),
                                 nn.Softplus(), nn.Mish())

    def forward(self, x):
        return self.net(x)


class Bilinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.bil = nn.Bilinear(8, 8, 4)

    def forward(self, a, b):
        return self.bil(a, b).log_softmax(-1)


class MultiHeadOutputDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.heads = nn.ModuleDict({"age": nn.Linear(8, 1), "gender": nn.Linear(8, 2), "emotion": nn.Linear(8, 5)})

    def forward(self, x):
        h = F.relu(self.trunk(x))
        return {k: head(h) for k, head in self.heads.items()}


class ShapeDispatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if x.dim() == 3:
            b, t, d = x.shape
            return self.fc(x.reshape(b * t, d)).reshape(b, t, d)
        return self.fc(x)


class ClipGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        n = y.norm()
        if n > 10:
            y = y * (10 / n)
        return y


IMG1 = lambda: (R(2, 1, 28, 28),)  # noqa: E731
case("lenet", IMG1)(lambda: LeNet())
case("autoencoder", lambda: (R(4, 16),))(lambda: Autoencoder())
case("vae_train_rng", lambda: (torch.rand(4, 16),), train=True)(lambda: VAE())
case("gcn_layer", lambda: (R(5, 8), (torch.rand(5, 5) > 0.5).float()))(lambda: GCNLayer())
case("wide_and_deep", lambda: (torch.randint(0, 30, (6,)), torch.tensor([0, 2, 4]), R(3, 10)))(lambda: WideAndDeep())
case("siamese", lambda: (R(4, 8), R(4, 8)))(lambda: SiameseNet())
case("policy_value_sample", V8)(lambda: PolicyValueNet())
case("patch_embed", lambda: (R(2, 3, 16, 16),))(lambda: PatchEmbed())
case("mini_vit", lambda: (R(2, 3, 16, 16),))(lambda: MiniViT())
case("temporal_conv", lambda: (R(2, 4, 12),))(lambda: TemporalConv())
case("normalize_input_float", IMG)(lambda: NormalizeInput())
case("normalize_input_uint8", lambda: (torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8),))(lambda: NormalizeInput())
case("instance_norm_style", lambda: (R(2, 3, 8, 8), R(2, 4)))(lambda: InstanceNormStyle())
case("upsample_nearest", IMG)(lambda: Upsampler())
case("upsample_bilinear", IMG)(lambda: Upsampler("bilinear"))
case("prelu_mlp_train", V8, train=True)(lambda: PReLUMLP())
case("bilinear", lambda: (R(4, 8), R(4, 8)))(lambda: Bilinear())
case("multihead_output_dict", V8)(lambda: MultiHeadOutputDict())
case("shape_dispatch_3d", lambda: (R(2, 3, 8),))(lambda: ShapeDispatch())
case("shape_dispatch_2d", V8)(lambda: ShapeDispatch())
case("clip_by_norm_data_dep", V8)(lambda: ClipGrad())
case("nn_sequential_mlp", V8)(lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
case("nn_embedding_layernorm", lambda: (torch.randint(0, 10, (2, 5)),))(
    lambda: nn.Sequential(nn.Embedding(10, 8), nn.LayerNorm(8)))
case("nn_conv3d", lambda: (R(1, 2, 4, 6, 6),))(lambda: nn.Sequential(nn.Conv3d(2, 4, 3), nn.BatchNorm3d(4), nn.ReLU()))
case("nn_maxpool_unflatten", lambda: (R(2, 3, 8, 8),))(
    lambda: nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Unflatten(1, (3, 16))))


# ----------------------------------------------------------------------------- constructs from public model code
import dataclasses  # noqa: E402
import logging  # noqa: E402

_log = logging.getLogger("mlircap.bench.corpus")


@dataclasses.dataclass
class EncoderOutput:
    last_hidden: torch.Tensor
    pooled: torch.Tensor
    hidden_states: tuple = ()


class DataclassEncoder(nn.Module):
    """Returns a dataclass (not a namedtuple), like many research code bases."""
    def __init__(self, n=2, return_all=True):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
        self.return_all = return_all

    def forward(self, x):
        states = []
        for layer in self.layers:
            x = F.gelu(layer(x))
            states.append(x)
        return EncoderOutput(x, x.mean(1), tuple(states) if self.return_all else ())


class ShapeAssertBlock(nn.Module):
    """Shape checks with f-string messages, and a reshape driven by the input's rank."""
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.d, self.heads = d, heads
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        assert x.shape[-1] == self.d, f"expected last dim {self.d}, got {tuple(x.shape)}"
        squeeze = x.dim() == 2
        if squeeze:
            x = x.unsqueeze(0)
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, self.d)
        return y.squeeze(0) if squeeze else y


class ModuleDictRouter(nn.Module):
    """Task heads in a ModuleDict, selected by a string key argument; losses in a dict."""
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.heads = nn.ModuleDict({"cls": nn.Linear(16, 4), "reg": nn.Linear(16, 1)})

    def forward(self, x, task="cls"):
        h = self.trunk(x)
        if task not in self.heads:
            raise KeyError(f"unknown task {task!r}; have {list(self.heads)}")
        return self.heads[task](h)


class ParameterListMix(nn.Module):
    """Iterating an nn.ParameterList / ParameterDict (mixture weights, per-layer scales)."""
    def __init__(self, n=3):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(8, 8) * 0.1) for _ in range(n)])
        self.gates = nn.ParameterDict({f"g{i}": nn.Parameter(torch.tensor(0.5 + i)) for i in range(n)})

    def forward(self, x):
        out = 0
        for i, w in enumerate(self.weights):
            out = out + torch.sigmoid(self.gates[f"g{i}"]) * (x @ w)
        return out / len(self.weights)


class ComprehensionFPN(nn.Module):
    """Lateral convs applied with list comprehensions and zip over lists of feature maps,
    top-down pathway with interpolate to the next map's size (FPN)."""
    def __init__(self, chans=(4, 8, 16), out=8):
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(c, out, 1) for c in chans])
        self.smooth = nn.ModuleList([nn.Conv2d(out, out, 3, padding=1) for _ in chans])

    def forward(self, feats):
        lat = [conv(f) for conv, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], size=lat[i - 1].shape[-2:], mode="nearest")
        return [s(z) for s, z in zip(self.smooth, lat)]


class IsinstanceDispatch(nn.Module):
    """Accepts a tensor, a (tensor, mask) tuple or a dict batch, as data loaders hand them."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, batch):
        if isinstance(batch, dict):
            x, mask = batch["x"], batch.get("mask")
        elif isinstance(batch, (tuple, list)):
            x, mask = batch
        else:
            x, mask = batch, None
        y = self.fc(x)
        if mask is not None:
            y = y.masked_fill(~mask.unsqueeze(-1), 0.0)
        return y


class SelfCacheMemo(nn.Module):
    """Caches a positional table in a dict on self, keyed by sequence length (built on a
    miss, reused afterwards), as rotary / ALiBi implementations do."""
    def __init__(self, d=8):
        super().__init__()
        self.d = d
        self._cache = {}
        self.proj = nn.Linear(d, d)

    def _table(self, n, device, dtype):
        key = (n, device, dtype)
        if key not in self._cache:
            pos = torch.arange(n, device=device, dtype=dtype)[:, None]
            inv = 1.0 / (10000 ** (torch.arange(0, self.d, 2, device=device, dtype=dtype) / self.d))
            ang = pos * inv
            self._cache[key] = torch.cat([ang.sin(), ang.cos()], -1)
        return self._cache[key]

    def forward(self, x):
        return self.proj(x + self._table(x.shape[1], x.device, x.dtype))


class TimeLoopRNN(nn.Module):
    """Python loop over the time dimension of the input (x.size(1)), outputs stacked."""
    def __init__(self, d=8):
        super().__init__()
        self.cell = nn.GRUCell(d, d)

    def forward(self, x, h=None):
        if h is None:
            h = x.new_zeros(x.size(0), x.size(2))
        outs = []
        for t in range(x.size(1)):
            h = self.cell(x[:, t], h)
            outs.append(h)
        return torch.stack(outs, 1), h


class WarnOnceLegacy(nn.Module):
    """Emits a deprecation warning (warnings.warn) and logs through `logging` every call."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, legacy_scale=None):
        if legacy_scale is not None:
            warnings.warn("legacy_scale is deprecated", DeprecationWarning)
            x = x * legacy_scale
        _log.debug("forward with input of shape %s", tuple(x.shape))
        return self.fc(x)


class OptionalKwargsAttention(nn.Module):
    """Optional attention mask / head mask / output_attentions kwargs, HF style."""
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, attention_mask=None, head_mask=None, output_attentions=False):
        b, t, d = x.shape
        sh = lambda z: z.view(b, t, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = sh(self.q(x)), sh(self.k(x)), sh(self.v(x))
        s = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)
        if attention_mask is not None:
            s = s + (1.0 - attention_mask[:, None, None, :].to(s.dtype)) * torch.finfo(s.dtype).min
        p = s.softmax(-1)
        if head_mask is not None:
            p = p * head_mask[None, :, None, None]
        y = self.o((p @ v).transpose(1, 2).reshape(b, t, d))
        return (y, p) if output_attentions else (y,)


class ConfigObjModel(nn.Module):
    """A config object (SimpleNamespace-like class) read throughout forward."""
    class Cfg:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    def __init__(self):
        super().__init__()
        self.cfg = self.Cfg(hidden=8, layers=2, act="silu", residual=True, dropout=0.0)
        self.blocks = nn.ModuleList([nn.Linear(self.cfg.hidden, self.cfg.hidden) for _ in range(self.cfg.layers)])
        self.act = getattr(F, self.cfg.act)

    def forward(self, x):
        for blk in self.blocks:
            y = F.dropout(self.act(blk(x)), p=self.cfg.dropout, training=self.training)
            x = x + y if self.cfg.residual else y
        return x


class EarlyReturnPadding(nn.Module):
    """Returns early when no padding is needed (sequence length already a multiple)."""
    def __init__(self, multiple=4):
        super().__init__()
        self.multiple = multiple
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        n = x.shape[1]
        if n % self.multiple == 0:
            return self.fc(x)
        pad = self.multiple - n % self.multiple
        return self.fc(F.pad(x, (0, 0, 0, pad)))[:, :n]


class SequentialWithNames(nn.Module):
    """named_children()/named_modules() walk, skipping modules by name and type."""
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 8), nn.Tanh())

    def forward(self, x):
        feats = {}
        for name, mod in self.body.named_children():
            if isinstance(mod, nn.Dropout) and not self.training:
                continue
            x = mod(x)
            if isinstance(mod, nn.Linear):
                feats[f"linear_{name}"] = x
        return x, feats


class NumpyScaleTable(nn.Module):
    """A numpy table built in __init__ (float64), indexed with Python ints in forward."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.scales = np.linspace(0.5, 2.0, 4)
        self.fc = nn.Linear(8, 8)

    def forward(self, x, level=2):
        return self.fc(x) * float(self.scales[level])


class NumpyAnchors(nn.Module):
    """Detection-style anchors precomputed with numpy in __init__, converted with
    torch.from_numpy in forward; box deltas decoded against them."""
    def __init__(self):
        super().__init__()
        import numpy as np
        ctr = np.stack(np.meshgrid(np.arange(4), np.arange(4)), -1).reshape(-1, 2).astype(np.float32) + 0.5
        self.anchors = np.concatenate([ctr, np.full_like(ctr, 2.0)], 1)
        self.head = nn.Linear(8, 16 * 4)

    def forward(self, x):
        d = self.head(x).view(x.shape[0], 16, 4)
        a = torch.from_numpy(self.anchors).to(x.dtype)
        xy = a[:, :2] + d[..., :2] * a[:, 2:]
        wh = a[:, 2:] * d[..., 2:].exp()
        return torch.cat([xy - wh / 2, xy + wh / 2], -1)


class NumpyEntropyPost(nn.Module):
    """Post-processing in numpy on detached probabilities (entropy, confidence mask),
    converted back with torch.from_numpy / torch.as_tensor."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        import numpy as np
        p = self.fc(x).softmax(-1)
        q = np.clip(p.detach().numpy(), 1e-6, 1.0)
        ent = -(q * np.log(q)).sum(axis=-1)
        conf = (q.max(axis=-1) > 0.5).astype(np.float32)
        return p, torch.from_numpy(ent), torch.as_tensor(conf)


@functools.lru_cache(maxsize=16)
def _causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


class LruCachedMaskAttention(nn.Module):
    """A causal mask from an lru_cache'd helper: after the first call (the eager reference
    runs first) the tensor comes from the cache, made outside any graph."""
    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~_causal_mask(x.shape[1]), float("-inf"))
        return s.softmax(-1) @ v


class NumpyScalarHparams(nn.Module):
    """Hyper-parameters held as NumPy scalars (np.sqrt of a width, np.float32 / np.int64
    config values), used as torch-op arguments and slice bounds."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.fc = nn.Linear(8, 8)
        self.temp = np.sqrt(8.0)
        self.keep = np.int64(6)
        self.floor = np.float32(-0.5)

    def forward(self, x):
        import numpy as np
        y = self.fc(x) / self.temp * np.sqrt(x.shape[-1])
        return torch.clamp(y[:, : self.keep], min=self.floor)


class NumpyRandomAugment(nn.Module):
    """A NumPy RandomState decides a flip (data augmentation inside forward)."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.rng = np.random.RandomState(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        if self.training and self.rng.rand() < 0.5:
            x = x.flip(-1)
        return self.conv(x)


@dataclasses.dataclass
class _BlockCfg:
    dim: int = 8
    eps: float = 1e-5
    act: str = "gelu"


class DataclassConfigAsdict(nn.Module):
    """A dataclass config turned into a dict with dataclasses.asdict inside forward."""
    def __init__(self):
        super().__init__()
        self.cfg = _BlockCfg()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        c = dataclasses.asdict(self.cfg)
        y = F.layer_norm(x, (c["dim"],), eps=c["eps"])
        return getattr(F, c["act"])(self.fc(y))


class StateDictInForward(nn.Module):
    """Weights read through self.state_dict() in forward (weight tying / export helpers)."""
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, ids):
        sd = self.state_dict()
        h = self.proj(self.emb(ids))
        return h @ sd["emb.weight"].t()


class ScriptableBits(nn.Module):
    """TorchScript-friendly code run eagerly: torch._assert on a shape, torch.jit.annotate,
    @torch.jit.ignore / @torch.jit.unused methods, torch.finfo, x.new_tensor."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @torch.jit.ignore
    def helper(self, x):
        return x * 2

    @torch.jit.unused
    def unused(self, x):
        return x

    def forward(self, x):
        h = torch.jit.annotate(torch.Tensor, self.fc(x))
        torch._assert(h.dim() == 2, "need a batch of vectors")
        return self.helper(h) + torch.finfo(x.dtype).eps + x.new_tensor([1.0, 2.0]).sum()


class OptionalImportTry(nn.Module):
    """`try: import <optional fused kernel> except ImportError` inside forward (the import
    system's finders run on every call), try/except around a call."""
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        try:
            from mlircap_bench_no_such_fused_kernels import fused_layer_norm  # noqa: F401
            fused = True
        except ImportError:
            fused = False
        try:
            y = self.norm(x)
        except RuntimeError:
            y = x
        return y, fused


class NoGradDecoratedForward(nn.Module):
    """An inference-only module whose forward is decorated with @torch.no_grad()."""
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    @torch.no_grad()
    def forward(self, x):
        return F.normalize(self.body(x), dim=-1)


class ClosureGeneratorHelpers(nn.Module):
    """A closure defined in forward, itertools.pairwise over layers, enumerate(reversed(...)),
    a generator method yielding features, torch.split / F.pad with list arithmetic / einsum."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def feats(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
            yield x

    def forward(self, x):
        import itertools
        scale = x.abs().mean(-1, keepdim=True)

        def apply(layer, h):
            return layer(h) * scale
        for a, b in itertools.pairwise(self.layers):
            x = apply(b, apply(a, x))
        for i, layer in enumerate(reversed(self.layers)):
            x = x + layer(x) / (i + 1)
        outs = list(self.feats(x))
        c0, c1 = torch.split(outs[-1], [3, 5], dim=-1)
        return torch.einsum("bi,bj->bij", F.pad(c0, [0, 2] * 1), c1).flatten(1)


def _count_calls(fn):
    """A user decorator (profiling / logging style) wrapping forward with *args/**kwargs."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)
    wrapper.calls = 0
    return wrapper


class UserDecoratedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @_count_calls
    def forward(self, x):
        return F.silu(self.fc(x))


class GradCheckpointish(nn.Module):
    """`if self.training and self.use_checkpoint` style branches with a per-layer flag list,
    a layer-drop list and `zip(..., strict)` style iteration."""
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
        self.norms = nn.ModuleList([nn.LayerNorm(8) for _ in range(n)])
        self.skip = [False, True, False]

    def forward(self, x):
        for i, (layer, norm, skip) in enumerate(zip(self.layers, self.norms, self.skip)):
            if skip and not self.training:
                continue
            x = x + layer(norm(x)) * (1.0 / (i + 1))
        return x


class ChannelsLastCheck(nn.Module):
    """Branches on memory format / dtype / device properties of the input."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        if x.dtype != torch.float32:
            x = x.float()
        if not x.is_contiguous():
            x = x.contiguous()
        if x.device.type == "cpu" and x.shape[-1] != x.shape[-2]:
            x = F.interpolate(x, size=(x.shape[-2], x.shape[-2]))
        return self.conv(x)


class MultiScaleLoss(nn.Module):
    """A loss summed over a list of predictions with per-scale weights from a dict config,
    returning a dict with Python-float-weighted items."""
    def __init__(self):
        super().__init__()
        self.weights = {"s0": 1.0, "s1": 0.5, "s2": 0.25}

    def forward(self, preds, target):
        losses = {}
        for (k, w), p in zip(self.weights.items(), preds):
            t = F.interpolate(target, size=p.shape[-2:], mode="bilinear", align_corners=False)
            losses[k] = w * F.l1_loss(p, t)
        losses["total"] = sum(losses.values())
        return losses


import random  # noqa: E402


class PartialNormBlock(nn.Module):
    """timm style: norm_layer=functools.partial(nn.LayerNorm, eps=1e-6), act_layer a class,
    `torch.jit.is_scripting()` guard around a Python-only path, DropPath with new_empty().bernoulli_."""
    def __init__(self, d=8, norm_layer=functools.partial(nn.LayerNorm, eps=1e-6), act_layer=nn.GELU, drop_path=0.2):
        super().__init__()
        self.norm = norm_layer(d)
        self.fc1, self.act, self.fc2 = nn.Linear(d, 2 * d), act_layer(), nn.Linear(2 * d, d)
        self.drop_path = drop_path

    def _drop_path(self, x):
        if self.drop_path == 0.0 or not self.training:
            return x
        keep = 1 - self.drop_path
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        mask = x.new_empty(shape).bernoulli_(keep)
        return x * mask / keep

    def forward(self, x):
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            assert x.ndim >= 2, "need a batch dimension"
        return x + self._drop_path(self.fc2(self.act(self.fc1(self.norm(x)))))


class LayerDrop(nn.Module):
    """fairseq style LayerDrop: `random.random() < p` (Python's RNG) skips layers in training."""
    def __init__(self, n=4, p=0.3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
        self.p = p

    def forward(self, x):
        for layer in self.layers:
            if self.training and random.random() < self.p:
                continue
            x = x + torch.relu(layer(x))
        return x


class GetattrLayers(nn.Module):
    """Layers named layer1..layerN reached with getattr(self, f"layer{i}") (torchvision ResNet
    feature extractors), features collected in an OrderedDict."""
    def __init__(self):
        super().__init__()
        for i in range(1, 4):
            setattr(self, f"layer{i}", nn.Sequential(nn.Conv2d(3 if i == 1 else 4, 4, 3, padding=1), nn.ReLU()))
        self.return_layers = ["layer1", "layer3"]

    def forward(self, x):
        import collections
        out = collections.OrderedDict()
        for i in range(1, 4):
            name = f"layer{i}"
            x = getattr(self, name)(x)
            if name in self.return_layers:
                out[name] = x
        return out


class TargetNetNoGrad(nn.Module):
    """A target network evaluated under torch.no_grad() inside forward (DQN / BYOL)."""
    def __init__(self):
        super().__init__()
        self.online = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        self.target = copy.deepcopy(self.online)
        for p in self.target.parameters():
            p.requires_grad_(False)

    def forward(self, x, gamma=0.9):
        q = self.online(x)
        with torch.no_grad():
            q_next = self.target(x).max(-1).values
        return q.max(-1).values - gamma * q_next


class PropertyAndSuper(nn.Linear):
    """Subclass of nn.Linear calling super().forward, with a @property derived attribute."""
    def __init__(self):
        super().__init__(8, 8)
        self.temperature = 2.0

    @property
    def inv_temp(self):
        return 1.0 / self.temperature

    def forward(self, x):
        return super().forward(x) * self.inv_temp


class EnvFlagDebug(nn.Module):
    """Reads an environment variable (os.environ.get) to decide on a debug check."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        import os
        if os.environ.get("MODEL_DEBUG_CHECKS", "0") == "1":
            assert torch.isfinite(x).all()
        return self.fc(x)


class OneHotConst(nn.Module):
    """F.one_hot with num_classes, a constant tensor built from a Python list in forward,
    masked_fill with float('-inf') and torch.where with a Python scalar."""
    def __init__(self, n=5):
        super().__init__()
        self.n = n
        self.fc = nn.Linear(8, n)

    def forward(self, x, labels):
        prior = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2], device=x.device).log()
        logits = self.fc(x) + prior
        oh = F.one_hot(labels, num_classes=self.n).bool()
        neg = logits.masked_fill(oh, float("-inf")).logsumexp(-1)
        pos = torch.where(oh, logits, 0.0).sum(-1)
        return (neg - pos).mean()


class GenExprSum(nn.Module):
    """sum() over a generator of per-layer penalties; any()/all() over Python lists;
    math helpers on shapes."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        if any(isinstance(m, nn.Linear) for m in self.layers):
            x = x / math.sqrt(x.size(-1))
        outs = [layer(x) for layer in self.layers]
        reg = sum(o.pow(2).mean() for o in outs)
        return torch.stack(outs).sum(0), reg


class ContextNull(nn.Module):
    """contextlib.nullcontext() vs torch.autocast(enabled=False) chosen by a flag."""
    def __init__(self, use_amp=False):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.use_amp = use_amp

    def forward(self, x):
        import contextlib
        ctx = torch.autocast("cpu", enabled=False) if self.use_amp else contextlib.nullcontext()
        with ctx:
            return self.fc(x).relu()


class EnumModeModel(nn.Module):
    """An enum selects the pooling mode."""
    import enum

    class Pool(enum.Enum):
        MEAN = "mean"
        MAX = "max"

    def __init__(self, mode=None):
        super().__init__()
        self.mode = mode or self.Pool.MAX
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if self.mode is self.Pool.MEAN:
            return h.mean(1)
        return h.amax(1)


class TupleCacheDecoder(nn.Module):
    """An incremental decoder step: past key/value tuples as an optional argument, returned
    extended (use_cache), as generation loops do."""
    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x, past=None, use_cache=True):
        q, k, v = self.qkv(x).chunk(3, -1)
        if past is not None:
            pk, pv = past
            k, v = torch.cat([pk, k], 1), torch.cat([pv, v], 1)
        a = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
        y = self.o(a @ v)
        return (y, (k, v)) if use_cache else (y, None)


case("dataclass_encoder_output", lambda: (R(2, 3, 8),))(lambda: DataclassEncoder())
case("shape_assert_fstring_3d", lambda: (R(2, 5, 8),))(lambda: ShapeAssertBlock())
case("shape_assert_fstring_2d", lambda: (R(5, 8),))(lambda: ShapeAssertBlock())
case("moduledict_router", V8)(lambda: ModuleDictRouter())
case("moduledict_router_reg", lambda: (R(4, 8), "reg"))(lambda: ModuleDictRouter())
case("parameterlist_mix", V8)(lambda: ParameterListMix())
case("fpn_comprehensions", lambda: ([R(1, 4, 16, 16), R(1, 8, 8, 8), R(1, 16, 4, 4)],))(lambda: ComprehensionFPN())
case("isinstance_dict_batch", lambda: ({"x": R(4, 8), "mask": torch.rand(4) > 0.3},))(lambda: IsinstanceDispatch())
case("isinstance_tuple_batch", lambda: ((R(4, 8), torch.rand(4) > 0.3),))(lambda: IsinstanceDispatch())
case("isinstance_tensor_batch", V8)(lambda: IsinstanceDispatch())
case("self_cache_memo", lambda: (R(2, 6, 8),))(lambda: SelfCacheMemo())
case("time_loop_gru_cell", lambda: (R(2, 5, 8),))(lambda: TimeLoopRNN())
case("warn_and_log", lambda: (R(4, 8),))(lambda: WarnOnceLegacy())
case("warn_deprecated_arg", lambda: (R(4, 8), 0.5))(lambda: WarnOnceLegacy())
case("optional_kwargs_attention", lambda: (R(2, 5, 8),))(lambda: OptionalKwargsAttention())
case("optional_kwargs_attention_mask", lambda: (R(2, 5, 8), (torch.rand(2, 5) > 0.2).float(), R(2), True))(
    lambda: OptionalKwargsAttention())
case("config_object_model", V8)(lambda: ConfigObjModel())
case("early_return_padding", lambda: (R(2, 6, 8),))(lambda: EarlyReturnPadding())
case("early_return_no_padding", lambda: (R(2, 8, 8),))(lambda: EarlyReturnPadding())
case("named_children_walk", V8)(lambda: SequentialWithNames())
case("named_children_walk_train", V8, train=True)(lambda: SequentialWithNames())
case("numpy_table_float64", V8)(lambda: NumpyScaleTable())
case("layer_skip_flags", V8)(lambda: GradCheckpointish())
case("numpy_anchor_table", V8)(lambda: NumpyAnchors())
case("numpy_entropy_postprocess", V8)(lambda: NumpyEntropyPost())
case("lru_cached_mask_attention", lambda: (R(2, 5, 8),))(lambda: LruCachedMaskAttention())
case("numpy_scalar_hparams", V8)(lambda: NumpyScalarHparams())
case("numpy_random_augment_train", IMG, train=True)(lambda: NumpyRandomAugment())
case("dataclass_config_asdict", V8)(lambda: DataclassConfigAsdict())
case("state_dict_in_forward", lambda: (torch.randint(0, 10, (2, 5)),))(lambda: StateDictInForward())
case("scriptable_bits", V8)(lambda: ScriptableBits())
case("optional_import_try", V8)(lambda: OptionalImportTry())
case("no_grad_decorated_forward", V8)(lambda: NoGradDecoratedForward())
case("user_decorated_forward", V8)(lambda: UserDecoratedForward())
case("closure_generator_helpers", V8)(lambda: ClosureGeneratorHelpers())
case("input_property_branches", lambda: (R(2, 3, 8, 6).double(),))(lambda: ChannelsLastCheck())
case("multiscale_loss_dict", lambda: ([R(2, 1, 16, 16), R(2, 1, 8, 8), R(2, 1, 4, 4)], R(2, 1, 32, 32)))(
    lambda: MultiScaleLoss())
case("partial_norm_droppath_train", lambda: (R(4, 3, 8),), train=True)(lambda: PartialNormBlock())
case("partial_norm_droppath_eval", lambda: (R(4, 3, 8),))(lambda: PartialNormBlock())
case("layerdrop_python_random_train", V8, train=True)(lambda: LayerDrop())
case("getattr_layers_ordereddict", lambda: (R(1, 3, 8, 8),))(lambda: GetattrLayers())
case("target_net_no_grad", V8)(lambda: TargetNetNoGrad())
case("property_and_super", V8)(lambda: PropertyAndSuper())
case("env_flag_debug", V8)(lambda: EnvFlagDebug())
case("one_hot_const_tensor", lambda: (R(4, 8), torch.randint(0, 5, (4,))))(lambda: OneHotConst())
case("genexpr_sum_any", V8)(lambda: GenExprSum())
case("nullcontext_or_autocast", V8)(lambda: ContextNull())
case("nullcontext_or_autocast_amp", V8)(lambda: ContextNull(use_amp=True))
case("enum_mode", lambda: (R(2, 5, 8),))(lambda: EnumModeModel())
case("tuple_cache_decoder_first", lambda: (R(2, 1, 8),))(lambda: TupleCacheDecoder())
case("tuple_cache_decoder_step", lambda: (R(2, 1, 8), (R(2, 3, 8), R(2, 3, 8))))(lambda: TupleCacheDecoder())


class StepCounterLogEvery(nn.Module):
    """A training step counter on the module, with a branch every N steps (logging, EMA
    updates, schedule changes)."""
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.step = 0
        self.logged = 0

    def forward(self, x):
        self.step += 1
        y = torch.tanh(self.lin(x))
        if self.step % 100 == 0:
            self.logged = self.logged + 1
            y = y.detach()
        return y


class SeededNoiseForkRng(nn.Module):
    """Reproducible noise inside torch.random.fork_rng() (the caller's RNG state is left as
    it was), then ordinary dropout drawing from the caller's state."""
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            noise = torch.randn_like(x) * 0.1
        return self.drop(self.lin(x + noise))


class ChunkedCEOptions(nn.Module):
    """An LM head's loss with torch's chunked linear cross entropy: an options dataclass
    passed to a torch function."""
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 16, bias=False)
        self.opts = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)

    def forward(self, h, labels):
        return F.linear_cross_entropy(h, self.head.weight, labels, options=self.opts)


class LossThresholdBranch(nn.Module):
    """`if loss.item() > threshold:` (loss spike handling): a data-dependent break whose
    number only decides the branch."""
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)
        self.threshold = 10.0

    def forward(self, x, y):
        loss = F.mse_loss(self.lin(x).squeeze(-1), y)
        if loss.item() > self.threshold:
            loss = loss * 0.1
        return loss


case("step_counter_log_every", V8, train=True)(lambda: StepCounterLogEvery())
case("seeded_noise_fork_rng_train", V8, train=True)(lambda: SeededNoiseForkRng())
case("chunked_ce_options", lambda: (R(6, 8), torch.randint(0, 16, (6,))))(lambda: ChunkedCEOptions())
case("loss_threshold_item_branch", lambda: (R(4, 8), R(4)))(lambda: LossThresholdBranch())



# ----------------------------------------------------------------------------- issue 11's causes of giving up
# tensors of unknown origin (autograd.Function outputs, caches filled in forward, a deque
# of past batches), parameters reached through untracked paths (functools.partial, a bound
# method, a plain list, a monkeypatched forward), NumPy RandomState / float64 values, and
# frames that break hundreds of times (a loop of .item() / data-dependent branches).
class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


class DomainAdversarial(nn.Module):
    """DANN: a gradient-reversal autograd.Function between the features and the domain head."""
    def __init__(self):
        super().__init__()
        self.feat, self.cls, self.dom = nn.Linear(8, 8), nn.Linear(8, 3), nn.Linear(8, 2)

    def forward(self, x, alpha=0.5):
        f = F.relu(self.feat(x))
        return self.cls(f), self.dom(_GradReverse.apply(f, alpha))


class YoloDetectGrid(nn.Module):
    """YOLOv5 Detect head: a list of grid tensors rebuilt in forward when the feature map
    size changes (a tensor cache filled by an earlier call)."""
    def __init__(self, na=3, no=6):
        super().__init__()
        self.na, self.no, self.nl = na, no, 2
        self.grid = [torch.zeros(1)] * self.nl
        self.m = nn.ModuleList(nn.Conv2d(4, na * no, 1) for _ in range(self.nl))
        self.register_buffer("stride", torch.tensor([8.0, 16.0]))

    @staticmethod
    def _make_grid(nx, ny):
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        return torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()

    def forward(self, xs):
        z = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            if self.grid[i].shape[2:4] != x.shape[2:4]:
                self.grid[i] = self._make_grid(nx, ny)
            y = x.sigmoid()
            xy = (y[..., 0:2] * 2 - 0.5 + self.grid[i]) * self.stride[i]
            z.append(torch.cat((xy, y[..., 2:]), -1).view(bs, -1, self.no))
        return torch.cat(z, 1)


class DequeFeatureBank(nn.Module):
    """MoCo-style memory: a deque (maxlen) of past detached embeddings, read whole."""
    def __init__(self):
        super().__init__()
        import collections
        self.enc = nn.Linear(8, 4)
        self.bank = collections.deque(maxlen=3)

    def forward(self, x):
        k = F.normalize(self.enc(x), dim=-1)
        self.bank.append(k.detach())
        return k @ torch.cat(list(self.bank), 0).t()


class PartialHoldsParameter(nn.Module):
    """A functools.partial built in __init__ holding a layer's weight and bias."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.proj = functools.partial(F.linear, weight=self.fc.weight, bias=self.fc.bias)

    def forward(self, x):
        return self.proj(x).relu()


class TiedThroughPlainList(nn.Module):
    """Weight tying through an unregistered list and a bound method stored as attribute."""
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self._tied = [self.emb]
        self.embed_fn = self.emb.forward

    def forward(self, ids):
        return self.embed_fn(ids).mean(1) @ self._tied[0].weight.t()


def _lora_forward(layer, x):
    return F.linear(x, layer.weight, layer.bias) + (x @ layer.lora_a.t()) @ layer.lora_b.t() * layer.lora_scale


class LoraMonkeypatched(nn.Module):
    """peft-style LoRA: the adapters are parameters added to the Linear and its forward is
    replaced on the instance by a functools.partial."""
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.q.lora_a = nn.Parameter(torch.randn(2, 8) * 0.1)
        self.q.lora_b = nn.Parameter(torch.randn(8, 2) * 0.1)
        self.q.lora_scale = 0.5
        self.q.forward = functools.partial(_lora_forward, self.q)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        return self.out(F.gelu(self.q(x)))


class MixupNumpyBeta(nn.Module):
    """mixup: lam from NumPy's global RNG (a float), a torch permutation of the batch."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        import numpy as np
        lam = np.random.beta(0.4, 0.4)
        x = lam * x + (1 - lam) * x[torch.randperm(x.shape[0])]
        return self.fc(x), lam


class RandomStateNoise(nn.Module):
    """Noise injection from a RandomState: a float64 array made a tensor, a float scale."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.rs = np.random.RandomState(0)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        noise = self.rs.normal(0.0, 0.1, size=tuple(x.shape))
        return self.fc(x + torch.from_numpy(noise).float()) * self.rs.uniform(0.9, 1.1)


class RandomStateFeaturePerm(nn.Module):
    """Random feature subset from a RandomState permutation, sorted with NumPy."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.rs = np.random.RandomState(1)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        import numpy as np
        keep = self.rs.permutation(x.shape[1])[: x.shape[1] // 2]
        return self.fc(x[:, np.sort(keep)].repeat(1, 2))


class RandomStateNoiseMask(nn.Module):
    """Noise and a keep mask drawn as arrays from a RandomState (bound methods called with
    `*x.shape`), a NumPy comparison on the draw: the arrays reach the graph as inputs."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.rs = np.random.RandomState(2)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        noise = self.rs.normal(0.0, 0.1, size=tuple(x.shape))
        keep = self.rs.rand(*x.shape) < 0.9
        return self.fc(x * torch.from_numpy(keep) + torch.from_numpy(noise).float())


class PerSampleLengthLoop(nn.Module):
    """A Python loop over a batch of 300 with int(lengths[i]) each: 300 data-dependent
    breaks (a limit on breaks per call, then eager)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, lengths):
        h = self.fc(x)
        return torch.stack([h[i, :int(lengths[i])].mean(0) for i in range(h.shape[0])])


class GreedyDecodeLoop(nn.Module):
    """Greedy decoding for up to 150 steps with an early stop on a data-dependent test."""
    def __init__(self):
        super().__init__()
        self.emb, self.cell, self.out = nn.Embedding(12, 8), nn.GRUCell(8, 8), nn.Linear(8, 12)

    def forward(self, h, max_len=150):
        tok = torch.zeros(h.shape[0], dtype=torch.long)
        toks = []
        for _ in range(max_len):
            h = self.cell(self.emb(tok), h)
            tok = self.out(h).argmax(-1)
            toks.append(tok)
            if (tok == 11).all():
                break
        return torch.stack(toks, 1)


case("autograd_function_grad_reverse", V8)(lambda: DomainAdversarial())
case("yolo_detect_grid_cache", lambda: ([R(2, 4, 8, 8), R(2, 4, 4, 4)],))(lambda: YoloDetectGrid())
case("deque_feature_bank", V8)(lambda: DequeFeatureBank())
case("partial_holds_parameter", V8)(lambda: PartialHoldsParameter())
case("tied_through_plain_list", lambda: (torch.randint(0, 10, (2, 5)),))(lambda: TiedThroughPlainList())
case("lora_monkeypatched_forward", lambda: (R(2, 5, 8),))(lambda: LoraMonkeypatched())
case("mixup_numpy_beta_float64", V8, train=True)(lambda: MixupNumpyBeta())
case("randomstate_noise_float64", V8, train=True)(lambda: RandomStateNoise())
case("randomstate_feature_perm", V8, train=True)(lambda: RandomStateFeaturePerm())
case("randomstate_noise_mask_arrays", V8, train=True)(lambda: RandomStateNoiseMask())
case("per_sample_item_loop_300", lambda: (R(300, 6, 8), torch.randint(1, 7, (300,))))(lambda: PerSampleLengthLoop())
case("greedy_decode_150_steps", lambda: (R(2, 8),))(lambda: GreedyDecodeLoop())

# ----------------------------------------------------------------------------- reparametrized weights
class WeightNormPosConv(nn.Module):
    """Wav2Vec2's positional convolution: a weight-normed grouped Conv1d (weight_norm over
    dim 2, torch's parametrize property), then GELU, added to the input."""
    def __init__(self):
        super().__init__()
        # (the old hook-style nn.utils.weight_norm: test_reparametrizations.py; such a
        # module cannot be deep-copied, as this bench does)
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 8, 5, padding=2, groups=2), dim=2)

    def forward(self, x):
        return x + F.gelu(self.conv(x.transpose(1, 2))).transpose(1, 2)


class SpectralNormParam(nn.Module):
    """A spectral-normed discriminator head (parametrizations.spectral_norm: power
    iteration on its u/v buffers in training mode) and an orthogonal layer."""
    def __init__(self):
        super().__init__()
        self.fc = nn.utils.parametrizations.spectral_norm(nn.Linear(8, 8))
        self.q = nn.utils.parametrizations.orthogonal(nn.Linear(8, 8))

    def forward(self, x):
        return self.q(F.leaky_relu(self.fc(x), 0.2))


case("weight_norm_pos_conv", lambda: (R(2, 12, 8),))(lambda: WeightNormPosConv())
case("weight_norm_pos_conv_train", lambda: (R(2, 12, 8),), train=True)(lambda: WeightNormPosConv())
case("spectral_norm_orthogonal_train", V8, train=True)(lambda: SpectralNormParam())


# ----------------------------------------------------------------------------- copies made inside forward
class DeepcopyTargetNet(nn.Module):
    """A frozen target network copied from the online one inside forward (copy.deepcopy of
    a module: new parameters, each a new autograd leaf), scaled under no_grad."""
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        target = copy.deepcopy(self.net)
        with torch.no_grad():
            for p in target.parameters():
                p.mul_(0.99)
        return self.net(x) - target(x).detach()


class DeepcopyBufferSnapshot(nn.Module):
    """The previous value of a running statistic, kept with copy.deepcopy before the update."""
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(8))
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        prev = copy.deepcopy(self.running)
        self.running.mul_(0.9).add_(0.1 * x.mean(0))
        return self.fc(x - prev)


case("deepcopy_target_net", V8)(lambda: DeepcopyTargetNet())
case("deepcopy_buffer_snapshot", V8)(lambda: DeepcopyBufferSnapshot())


# ----------------------------------------------------------------------------- floats that change every call
class TemperatureHead(nn.Module):
    """A softmax temperature passed as a float argument that changes every call (a sampling
    schedule): a graph input, not a recompile per value."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x, temperature):
        return F.log_softmax(self.fc(x) / temperature, -1)


class ScaleJitter(nn.Module):
    """Scale-jitter augmentation: a Python random draw (random.uniform) multiplies the batch."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if self.training:
            x = x * random.uniform(0.8, 1.2)
        return self.fc(x)


case("float_arg_temperature", lambda: (R(4, 8), 0.5 + float(torch.rand(()))))(lambda: TemperatureHead())
case("scale_jitter_python_random_train", V8, train=True)(lambda: ScaleJitter())


class GumbelSoftmaxAnnealed(nn.Module):
    """Gumbel-softmax whose temperature `self.tau` a training loop anneals between steps
    (`m.tau = max(0.5, math.exp(-r * step))`): an attribute that changes every call."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.tau = 1.0

    def forward(self, x):
        logits = self.fc(x)
        g = -torch.empty_like(logits).exponential_().log()
        return F.softmax((logits + g) / self.tau, -1)


class AdaptiveClipItem(nn.Module):
    """Clip the update to a maximal norm with a Python coefficient computed from `.item()`:
    `coef = min(1.0, max_norm / (norm + 1e-6))`, a new float every call."""
    def __init__(self, max_norm=1.0):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.max_norm = max_norm

    def forward(self, x):
        u = self.fc(x)
        norm = u.norm().item()
        coef = min(1.0, self.max_norm / (norm + 1e-6))
        return u * coef


class NumpyFloat32Stats(nn.Module):
    """Input normalisation by running statistics kept as NumPy float32 scalars that a data
    pipeline refreshes between calls (`m.mean, m.std = np.float32(...)`)."""
    def __init__(self):
        super().__init__()
        import numpy as np
        self.fc = nn.Linear(8, 4)
        self.mean, self.std = np.float32(0.0), np.float32(1.0)

    def forward(self, x):
        return self.fc((x - self.mean) * (1.0 / self.std))


class WarmupScaleFloatArg(nn.Module):
    """A learning-rate-like warmup factor computed in the function from a float argument
    (`w = min(1.0, step / warmup)`) and kept in a variable before it scales the output."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, step):
        w = min(1.0, step / 100.0)
        h = self.fc(x)
        return h * w + (1.0 - w) * x


def _anneal(m, i):
    m.tau = max(0.5, math.exp(-0.3 * (i + 1)))


def _refresh_stats(m, i):
    import numpy as np
    m.mean, m.std = np.float32(0.1 * i), np.float32(1.0 + 0.25 * i)


_STEP = iter(range(1, 10 ** 6))
case("float_attr_annealed_tau_train", V8, train=True, mutate=_anneal)(lambda: GumbelSoftmaxAnnealed())
case("float_from_item_clip_coef", V8)(lambda: AdaptiveClipItem())
case("numpy_float32_attr_stats", V8, mutate=_refresh_stats)(lambda: NumpyFloat32Stats())
case("float_local_warmup_factor", lambda: (R(4, 8), float(next(_STEP))))(lambda: WarmupScaleFloatArg())



# ----------------------------------------------------------------------------- state the module updates itself
class SelfAnnealedGumbel(nn.Module):
    """A Gumbel-softmax quantizer that anneals its own temperature in forward while training
    (`self.tau = max(self.min_tau, self.tau * self.decay)`, as some VQ / codebook layers do)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.tau, self.min_tau, self.decay = 2.0, 0.5, 0.999

    def forward(self, x):
        logits = self.fc(x)
        g = -torch.empty_like(logits).exponential_().log()
        y = F.softmax((logits + g) / self.tau, -1)
        if self.training:
            self.tau = max(self.min_tau, self.tau * self.decay)
        return y


class EmaMomentumTeacher(nn.Module):
    """A DINO/BYOL-style head whose output sharpening temperature follows an EMA kept as a
    Python float attribute (`self.center_t = m * self.center_t + (1 - m) * self.target_t`)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.center_t, self.target_t, self.m = 0.04, 0.07, 0.9

    def forward(self, x):
        out = F.softmax(self.fc(x) / self.center_t, -1)
        self.center_t = self.m * self.center_t + (1 - self.m) * self.target_t
        return out


class StepCounterWarmup(nn.Module):
    """An int step counter the module increments itself and turns into a warmup factor
    (`self.step += 1; w = min(1.0, self.step / self.warmup)`), as noise/dropout schedules do."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step, self.warmup = 0, 1000

    def forward(self, x):
        self.step += 1
        w = min(1.0, self.step / self.warmup)
        return self.fc(x) * w


class LossWeightsList(nn.Module):
    """Multi-task loss weights kept as a list of floats that a schedule updates between steps
    (`m.weights[0] = ...`)."""
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)
        self.weights = [1.0, 0.5]

    def forward(self, x):
        return self.a(x).pow(2).mean() * self.weights[0] + self.b(x).abs().mean() * self.weights[1]


def _reweight(m, i):
    m.weights[0] = 1.0 / (1 + i)


case("self_annealed_gumbel_tau_train", V8, train=True)(lambda: SelfAnnealedGumbel())
case("ema_float_attr_teacher_temp", V8)(lambda: EmaMomentumTeacher())
case("int_step_counter_warmup", V8)(lambda: StepCounterWarmup())
case("float_list_loss_weights", V8, mutate=_reweight)(lambda: LossWeightsList())

# ----------------------------------------------------------------------------- more real-world patterns
class PackedLSTMClassifier(nn.Module):
    """Variable-length sequences through pack_padded_sequence / pad_packed_sequence (lengths
    a Python list, enforce_sorted=False), the last valid step pooled, as text classifiers do."""
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8, padding_idx=0)
        self.lstm = nn.LSTM(8, 12, batch_first=True)
        self.out = nn.Linear(12, 3)

    def forward(self, ids, lengths):
        x = self.emb(ids)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return self.out(h[-1]), out.sum()


class StatefulLSTMStep(nn.Module):
    """A 2-layer LSTM called with an explicit (h0, c0) state tuple argument and returning the
    new state (truncated BPTT / streaming inference)."""
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 10, num_layers=2)
        self.head = nn.Linear(10, 4)

    def forward(self, x, state):
        y, (h, c) = self.lstm(x, state)
        return self.head(y), (h.detach(), c.detach())


class StackedGRUDropout(nn.Module):
    """nn.GRU with inter-layer dropout, bidirectional, trained (dropout draws inside the op)."""
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 8, num_layers=2, dropout=0.25, bidirectional=True, batch_first=True)
        self.proj = nn.Linear(16, 2)

    def forward(self, x):
        y, h = self.gru(x)
        return self.proj(y.mean(1)), h


class EmbeddingPaddingMeanPool(nn.Module):
    """Token embeddings with padding_idx, a mask from `ids != self.pad`, masked mean pooling."""
    def __init__(self):
        super().__init__()
        self.pad = 0
        self.emb = nn.Embedding(40, 8, padding_idx=self.pad)
        self.fc = nn.Linear(8, 2)

    def forward(self, ids):
        mask = (ids != self.pad).unsqueeze(-1).float()
        h = (self.emb(ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.fc(h)


class EmbeddingBagOffsets(nn.Module):
    """nn.EmbeddingBag (mean) over a flat index tensor with offsets (recommendation models)."""
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(30, 6, mode="mean")
        self.top = nn.Linear(6, 1)

    def forward(self, flat, offsets):
        return torch.sigmoid(self.top(self.bag(flat, offsets)))


class DropoutZooTrain(nn.Module):
    """Dropout in its forms in train mode: F.dropout with p and training from attributes,
    nn.Dropout2d on feature maps, AlphaDropout after SELU."""
    def __init__(self):
        super().__init__()
        self.p = 0.3
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.d2 = nn.Dropout2d(0.2)
        self.fc = nn.Linear(4, 6)
        self.ad = nn.AlphaDropout(0.1)

    def forward(self, x):
        h = self.d2(F.relu(self.conv(x))).mean((2, 3))
        h = F.dropout(h, p=self.p, training=self.training)
        return self.ad(F.selu(self.fc(h)))


class RotaryCachedBySeqLen(nn.Module):
    """Rotary embedding tables cached in a Python dict keyed by sequence length, filled on
    the first call (`if n not in self._cache`), as transformers' older rotary classes do."""
    def __init__(self, dim=8):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)
        self._cache = {}
        self.q = nn.Linear(dim, dim)

    def _tables(self, n, device):
        if n not in self._cache:
            t = torch.arange(n, device=device).float()
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat((freqs, freqs), -1)
            self._cache[n] = (emb.cos(), emb.sin())
        return self._cache[n]

    def forward(self, x):
        q = self.q(x)
        cos, sin = self._tables(x.shape[1], x.device)
        q1, q2 = q.chunk(2, -1)
        return q * cos + torch.cat((-q2, q1), -1) * sin


class KVCacheDecoderStep(nn.Module):
    """One decoding step with a past-key/value cache passed in and returned as a tuple of
    tensors (the cache length grows by one per step)."""
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.o = nn.Linear(8, 8)

    def forward(self, x, past_k, past_v):
        q, k, v = self.qkv(x).chunk(3, -1)
        k = torch.cat([past_k, k], 1)
        v = torch.cat([past_v, v], 1)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), -1)
        return self.o(att @ v), (k, v)


@dataclasses.dataclass
class MLPConfig:
    hidden: int = 16
    dropout: float = 0.1
    act: str = "gelu"
    residual: bool = True
    layer_scale: float = 0.5


class DataclassConfigMLP(nn.Module):
    """A model built from a (mutable) dataclass config, reading it in forward
    (`self.cfg.act`, `self.cfg.dropout`, `self.cfg.layer_scale`)."""
    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = cfg or MLPConfig()
        self.fc1 = nn.Linear(8, self.cfg.hidden)
        self.fc2 = nn.Linear(self.cfg.hidden, 8)

    def forward(self, x):
        act = F.gelu if self.cfg.act == "gelu" else F.relu
        h = F.dropout(act(self.fc1(x)), self.cfg.dropout, self.training)
        h = self.fc2(h) * self.cfg.layer_scale
        return x + h if self.cfg.residual else h


class KwargsHeavyBlock(nn.Module):
    """A block whose forward takes many keyword arguments with defaults, called with a few
    of them by keyword and the rest through **kwargs (HF-style plumbing)."""
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.ln = nn.LayerNorm(8)

    def block(self, hidden_states, attention_mask=None, head_mask=None, output_attentions=False,
              use_cache=False, position_ids=None, scale=1.0, **kwargs):
        h = self.ln(hidden_states)
        a, w = self.attn(h, h, h, key_padding_mask=attention_mask, need_weights=output_attentions)
        out = hidden_states + a * scale
        if kwargs.get("return_residual", False):
            out = (out, hidden_states)
        return (out, w) if output_attentions else (out,)

    def forward(self, x, mask):
        extra = {"return_residual": True, "unused_flag": None}
        (out, res), w = self.block(x, attention_mask=mask, output_attentions=True, scale=0.5, **extra)
        return out + res, w


class TiedWeightsLM(nn.Module):
    """An embedding and an output projection sharing one weight (weight tying)."""
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, 50, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids, targets):
        logits = self.head(self.ln(self.emb(ids)))
        return F.cross_entropy(logits.view(-1, 50), targets.view(-1), ignore_index=-100, label_smoothing=0.1)


class CumulativeBatchNormTrain(nn.Module):
    """BatchNorm1d(momentum=None): a cumulative moving average, whose factor torch computes
    in Python from the num_batches_tracked buffer (`1.0 / float(self.num_batches_tracked)`)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.bn = nn.BatchNorm1d(6, momentum=None)

    def forward(self, x):
        return self.bn(self.fc(x))


class CausalDecoderLayer(nn.Module):
    """nn.TransformerDecoderLayer with the causal mask from generate_square_subsequent_mask."""
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, tgt, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True)


class ConvLSTMCell(nn.Module):
    """A ConvLSTM cell unrolled over time with a Python loop (precipitation nowcasting)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3 + 4, 16, 3, padding=1)

    def forward(self, seq):
        b, t, _, hgt, wid = seq.shape
        h = seq.new_zeros(b, 4, hgt, wid)
        c = torch.zeros_like(h)
        for i in range(t):
            gi, gf, go, gg = self.conv(torch.cat([seq[:, i], h], 1)).chunk(4, 1)
            c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gg)
            h = torch.sigmoid(go) * torch.tanh(c)
        return h


class CheckpointedBlocksTrain(nn.Module):
    """Activation checkpointing of each block (torch.utils.checkpoint, non-reentrant) when
    training, a plain call otherwise."""
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(2)])
        self.use_checkpoint = True

    def forward(self, x):
        import torch.utils.checkpoint as cp
        for blk in self.blocks:
            x = cp.checkpoint(blk, x, use_reentrant=False) if self.use_checkpoint and self.training else blk(x)
        return x


class PreHookScaledInput(nn.Module):
    """A submodule with a forward pre-hook (input normalization) and a forward hook
    (output clamp) registered at construction."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fc.register_forward_pre_hook(lambda mod, args: (args[0] * 0.5,))
        self.fc.register_forward_hook(lambda mod, args, out: out.clamp(-1, 1))

    def forward(self, x):
        return self.fc(x) + self.fc(x * 2)


class TopKGatedMoE(nn.Module):
    """Top-2 gating over 4 experts, computed densely with a scatter into the gate weights
    (no data-dependent shapes)."""
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(8, 4)
        self.experts = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.k = 2

    def forward(self, x):
        logits = self.gate(x)
        vals, idx = logits.topk(self.k, -1)
        w = torch.zeros_like(logits).scatter(-1, idx, torch.softmax(vals, -1))
        outs = torch.stack([e(x) for e in self.experts], -1)
        return (outs * w.unsqueeze(-2)).sum(-1)


class RunningMaxCalibration(nn.Module):
    """Quantization calibration: a Python float running max of activations updated in
    forward (`self.amax = max(self.amax, x.abs().max().item())`), then fake-quantized."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.amax = 0.0

    def forward(self, x):
        h = self.fc(x)
        self.amax = max(self.amax, h.abs().max().item())
        s = self.amax / 127.0
        return torch.fake_quantize_per_tensor_affine(h, s, 0, -128, 127)


def _lengths_batch():
    ids = torch.randint(1, 50, (3, 6))
    lengths = [6, 4, 2]
    for i, n in enumerate(lengths):
        ids[i, n:] = 0
    return ids, lengths


def _padded_ids():
    ids = torch.randint(1, 40, (3, 7))
    ids[0, 5:] = 0
    ids[2, 3:] = 0
    return (ids,)


case("packed_lstm_classifier", _lengths_batch)(lambda: PackedLSTMClassifier())
case("stateful_lstm_state_tuple", lambda: (R(4, 2, 6), (R(2, 2, 10), R(2, 2, 10))))(lambda: StatefulLSTMStep())
case("stacked_gru_dropout_train", lambda: (R(2, 5, 6),), train=True)(lambda: StackedGRUDropout())
case("embedding_padding_idx_meanpool", _padded_ids)(lambda: EmbeddingPaddingMeanPool())
case("embedding_bag_offsets", lambda: (torch.randint(0, 30, (10,)), torch.tensor([0, 3, 7])))(
    lambda: EmbeddingBagOffsets())
case("dropout_zoo_train", IMG, train=True)(lambda: DropoutZooTrain())
case("rotary_cache_by_seq_len", lambda: (R(2, 5, 8),))(lambda: RotaryCachedBySeqLen())
case("kv_cache_decoder_step", lambda: (R(2, 1, 8), R(2, 4, 8), R(2, 4, 8)))(lambda: KVCacheDecoderStep())
case("dataclass_config_mlp", V8)(lambda: DataclassConfigMLP())
case("dataclass_config_mlp_train", V8, train=True)(lambda: DataclassConfigMLP(MLPConfig(act="relu", residual=False)))
case("kwargs_heavy_block", lambda: (R(2, 5, 8), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])))(
    lambda: KwargsHeavyBlock())
case("tied_weights_lm_ignore_index", lambda: (torch.randint(0, 50, (2, 6)),
                                              torch.tensor([[1, 2, 3, -100, 5, 6], [7, -100, -100, 1, 2, 3]])))(
    lambda: TiedWeightsLM())
case("cumulative_batchnorm_train", V8, train=True)(lambda: CumulativeBatchNormTrain())
case("causal_decoder_layer", lambda: (R(2, 5, 8), R(2, 3, 8)))(lambda: CausalDecoderLayer())
case("conv_lstm_cell_loop", lambda: (R(2, 3, 3, 6, 6),))(lambda: ConvLSTMCell())
case("checkpointed_blocks_train", V8, train=True)(lambda: CheckpointedBlocksTrain())
case("pre_and_post_hooks", V8)(lambda: PreHookScaledInput())
case("topk_gated_moe", V8)(lambda: TopKGatedMoE())
case("running_max_calibration", V8)(lambda: RunningMaxCalibration())


# ----------------------------------------------------------------------------- Hugging Face (tiny configs)
def _hf(kind):
    import transformers as T
    if kind == "bert":
        return T.BertModel(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, vocab_size=100))
    if kind == "bert_mlm":
        return T.BertForMaskedLM(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                              intermediate_size=64, vocab_size=100))
    if kind == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                              bos_token_id=0, eos_token_id=0))
    if kind == "distilbert_cls":
        return T.DistilBertForSequenceClassification(T.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                                        vocab_size=100, num_labels=3))
    if kind == "t5_encoder":
        return T.T5EncoderModel(T.T5Config(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=100))
    if kind == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                                max_position_embeddings=64))
    if kind == "vit":
        return T.ViTModel(T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                      image_size=16, patch_size=4, num_channels=3))
    if kind == "roberta_cls":
        return T.RobertaForSequenceClassification(T.RobertaConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100,
            num_labels=3, max_position_embeddings=40))
    if kind == "albert":
        return T.AlbertModel(T.AlbertConfig(hidden_size=32, embedding_size=16, num_hidden_layers=3,
                                            num_attention_heads=2, intermediate_size=64, vocab_size=100))
    if kind == "wav2vec2":
        return T.Wav2Vec2Model(T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                                conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                                num_conv_pos_embedding_groups=4, vocab_size=20))
    raise KeyError(kind)


IDS = lambda: (torch.randint(0, 100, (2, 8)),)  # noqa: E731
case("hf_bert_tiny", IDS)(lambda: _hf("bert"))
case("hf_gpt2_tiny", IDS)(lambda: _hf("gpt2"))
case("hf_distilbert_cls_tiny", IDS)(lambda: _hf("distilbert_cls"))
case("hf_t5_encoder_tiny", IDS)(lambda: _hf("t5_encoder"))
case("hf_wav2vec2_tiny", lambda: (R(2, 400),))(lambda: _hf("wav2vec2"))
case("hf_llama_tiny", IDS)(lambda: _hf("llama"))
case("hf_vit_tiny", IMG)(lambda: _hf("vit"))
case("hf_roberta_cls_tiny", lambda: (torch.randint(3, 100, (2, 8)),))(lambda: _hf("roberta_cls"))
case("hf_albert_shared_layers_tiny", IDS)(lambda: _hf("albert"))


class HFKwargsCall(nn.Module):
    """A Hugging Face model called by keyword (input_ids=, attention_mask=, labels=,
    output_hidden_states=, return_dict=) from a wrapper, its ModelOutput's fields used."""
    def __init__(self):
        super().__init__()
        self.m = _hf("bert_mlm")

    def forward(self, ids, mask):
        out = self.m(input_ids=ids, attention_mask=mask, labels=ids, output_hidden_states=True, return_dict=True)
        return out.loss, out.logits, out.hidden_states[-1]


def _ids_mask():
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return ids, mask


case("hf_bert_mlm_kwargs_call", _ids_mask)(lambda: HFKwargsCall())


# =============================================================================== runner
def _eager_backend(gm, ex):
    return gm.forward


def _aot_backend(gm, ex):
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward))


BACKEND = _eager_backend


def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and \
            a.requires_grad == b.requires_grad and torch.allclose(a.detach().double(), b.detach().double(),
                                                                 atol=1e-5, rtol=1e-4, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Generator):   # distinct objects (deep copies): the same draws taken from them
        return torch.equal(a.get_state(), b.get_state())
    if hasattr(a, "__dict__") and not callable(a) and not isinstance(a, type):
        return _same(dict(vars(a)), dict(vars(b)))
    return a == b


def _state(m):
    d = dict(m.state_dict(keep_vars=False))
    for name, sub in m.named_modules():
        for k, v in vars(sub).items():
            if not k.startswith("_") and isinstance(v, (int, float, bool, str, dict, list, torch.Tensor)):
                d[f"{name}.{k}"] = v
    return d


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if type(x).__module__ == "numpy" and hasattr(x, "copy"):   # an array: each side writes its own
        return x.copy()
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):   # a NamedTuple batch
        return type(x)(*(_clone(y) for y in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(y) for y in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, torch.Generator):   # each side draws from its own copy (one shared: the second drew on)
        g = torch.Generator(device=x.device)
        g.set_state(x.get_state())
        return g
    return x


NCALLS = 3


def _seed(k):
    """The RNGs a module may draw from: torch's, Python's `random` (layer drop) and
    NumPy's global one (mixup); and grad mode on, as each side's call starts (a forward
    may leave it off: torch.set_grad_enabled(False) called as a function)."""
    torch.set_grad_enabled(True)
    torch.manual_seed(k)
    random.seed(k)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(k)


def _call_inputs(inputs, i):
    """A case's inputs for call i (bench/modules5.py's cases may take the call index)."""
    try:
        takes = len(inspect.signature(inputs).parameters) > 0
    except (TypeError, ValueError):
        takes = False
    return inputs(i) if takes else inputs()


def _context(context, i):
    return context(i) if context is not None else contextlib.nullcontext()


def run_mine(name, factory, inputs, train, mutate=None, context=None, ncalls=None):
    """context(i): a context manager call i runs in on both sides (bench/modules5.py's cases);
    ncalls: calls made (default NCALLS)."""
    ncalls = ncalls or NCALLS
    torch.manual_seed(0)
    ref = factory().train(train)
    m = copy.deepcopy(ref)
    torch.manual_seed(1)
    calls = [_call_inputs(inputs, i) for i in range(ncalls)]
    w = capture(m, BACKEND)
    ok = True
    t_first = None
    for i, args in enumerate(calls):
        if mutate is not None:
            mutate(ref, i)
            mutate(m, i)
        _seed(100 + i)
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            with _context(context, i):
                re = ref(*_clone(args))
            ge = torch.is_grad_enabled()
            _seed(100 + i)
            t0 = time.perf_counter()
            with _context(context, i):
                rc = w(*_clone(args))
            dt = time.perf_counter() - t0
        if i == 0:
            t_first = dt
        ok = ok and _same(re, rc) and _same(_state(ref), _state(m)) and ge == torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    c = w._mlircap_capture
    graphs_first = len(c.variants[0].graphs) if c.variants else 0
    v0 = c.variants[0] if c.variants else None
    # graph splits, as Dynamo's explain() counts breaks: not one before any graph operation
    breaks_first = getattr(v0, "splits", len(v0.breaks)) if v0 is not None else 0
    eager = any(v.eager for v in c.variants)
    if c.variants and c.variants[0].eager:
        breaks_first = max(1, breaks_first)   # gave up: at least the break that made it
    # guard-check time for the first variant with the first call's arguments
    gus = None
    if c.variants:
        v = c.variants[0]
        args0 = (m,) + tuple(calls[0])
        a = list(args0)
        code = c.code
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
        while len(a) < n:  # defaults / *args / **kwargs slots as CPython binds them
            idx = len(a)
            vn = code.co_varnames[idx]
            if idx < code.co_argcount:
                d = c.func.__defaults__ or ()
                a.append(d[idx - (code.co_argcount - len(d))])
            elif code.co_flags & 4 and idx == code.co_argcount + code.co_kwonlyargcount:
                a.append(())
            elif code.co_flags & 8:
                a.append({})
            else:
                a.append((c.func.__kwdefaults__ or {}).get(vn))
        if code.co_flags & 4 and len(args0) > code.co_argcount:
            a = list(args0[:code.co_argcount]) + a[code.co_argcount:]
            a[code.co_argcount + code.co_kwonlyargcount] = tuple(args0[code.co_argcount:])
        a = tuple(a)
        if v.guard(a, c.func):
            # best of 5 batches of this thread's CPU time: the per-call cost without the noise
            # of a shared machine (wall time counts the time other processes hold the core)
            N, best = 400, float("inf")
            for _ in range(5):
                t0 = time.thread_time()
                for _ in range(N):
                    v.guard(a, c.func)
                best = min(best, time.thread_time() - t0)
            gus = best / N * 1e6
    return dict(ok=ok, graphs=graphs_first, breaks=breaks_first, eager=eager, t_capture=t_first,
                variants=len(c.variants), replays=c.stats.replays, guard_us=gus,
                eager_reason=next((v.reason for v in c.variants if v.eager), None),
                break_reasons=[r for r, _ in v0.breaks] if v0 is not None and not v0.eager else [],
                full=(graphs_first == 1 and breaks_first == 0 and not eager))


def run_dynamo(name, factory, inputs, train, mutate=None, context=None, ncalls=None):
    import torch._dynamo as dynamo
    ncalls = ncalls or NCALLS
    dynamo.reset()
    torch.manual_seed(0)
    ref = factory().train(train)
    m = copy.deepcopy(ref)
    torch.manual_seed(1)
    calls = [_call_inputs(inputs, i) for i in range(ncalls)]
    counts = {"graphs": 0}

    def counting(gm, ex):
        counts["graphs"] += 1
        return gm.forward
    cm = torch.compile(m, backend=counting)
    ok = True
    t_first = None
    import contextlib
    import io
    for i, args in enumerate(calls):
        if mutate is not None:
            mutate(ref, i)
            mutate(m, i)
        with contextlib.redirect_stdout(io.StringIO()):
            _seed(100 + i)
            with _context(context, i):
                re = ref(*_clone(args))
            ge = torch.is_grad_enabled()
            _seed(100 + i)
            t0 = time.perf_counter()
            try:
                with _context(context, i):
                    rc = cm(*_clone(args))
            except Exception as e:  # noqa: BLE001
                return dict(ok=False, graphs=None, breaks=None, t_capture=None, full=False, error=repr(e)[:80])
            dt = time.perf_counter() - t0
        if i == 0:
            t_first = dt
            g_first = counts["graphs"]
        ok = ok and _same(re, rc) and _same(_state(ref), _state(m)) and ge == torch.is_grad_enabled()
    # graphs compiled after the first call: a recompile (a guard failed on new values)
    recompiled = counts["graphs"] > g_first
    breaks = None
    eager = False
    try:
        dynamo.reset()
        _seed(0)
        with _context(context, 0):
            e = dynamo.explain(copy.deepcopy(ref))(*_clone(calls[0]))
        torch.set_grad_enabled(True)
        # explain() sometimes reports a break reason (e.g. generic_jump on a data-dependent
        # branch) with graph_break_count == 0; count the reasons too
        breaks = max(e.graph_break_count, len(e.break_reasons))
        g_first = e.graph_count
        if e.graph_break_count < 0:
            # -1: a break Dynamo could not resume from ("graph break in loop", "Skipping the
            # function and falling back to eager"): the frame runs eagerly.  Counted like ours
            # (an eager fallback, with the break that caused it), not as 0 breaks.
            eager = True
            breaks = max(1, len(e.break_reasons))
    except Exception:  # noqa: BLE001
        pass
    return dict(ok=ok, graphs=g_first, breaks=breaks, t_capture=t_first, eager=eager, recompiled=recompiled,
                full=(g_first == 1 and (breaks or 0) == 0))


def main(cases=None):
    """cases: the (name, factory, inputs, train, mutate) list to run (default: this file's CASES;
    bench/capture2.py passes its own)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-dynamo", action="store_true")
    ap.add_argument("--filter", default="", help="run the cases whose name contains one of these (comma-separated)")
    ap.add_argument("--backend", default="eager", choices=["eager", "aot"],
                    help="backend for our captured graphs (aot: aot_autograd, as the mlircap compiler uses)")
    args = ap.parse_args()
    global BACKEND
    BACKEND = _aot_backend if args.backend == "aot" else _eager_backend
    warnings.simplefilter("ignore")
    rows = []
    for name, factory, inputs, train, mutate in (CASES if cases is None else cases):
        if args.filter and not any(f in name for f in args.filter.split(",")):
            continue
        mine = run_mine(name, factory, inputs, train, mutate)
        dyn = None if args.no_dynamo else run_dynamo(name, factory, inputs, train, mutate)
        rows.append((name, mine, dyn))
    hdr = f"{'case':34s} | {'ours: gr brk full ok  capt_ms guard_us':40s} | {'dynamo: gr brk full ok  capt_ms':32s}"
    print(f"mlircap.capture bench (hook: {HOOK}, python {sys.version.split()[0]}, torch {torch.__version__})")
    print(hdr)
    print("-" * len(hdr))
    for name, m, d in rows:
        g = f"{m['guard_us']:.2f}" if m["guard_us"] is not None else "-"
        s = (f"{name:34s} | {m['graphs']:3d} {m['breaks']:3d} {'Y' if m['full'] else ('E' if m['eager'] else '-'):>4s} "
             f"{'ok' if m['ok'] else 'BAD':>3s} {m['t_capture'] * 1e3:8.1f} {g:>8s}  |")
        if d is not None:
            if d.get("graphs") is None:
                s += f" error {d.get('error', '')}"
            else:
                s += (f" {d['graphs']:3d} {d['breaks'] if d['breaks'] is not None else -1:3d} "
                      f"{'Y' if d['full'] else ('E' if d.get('eager') else '-'):>4s} "
                      f"{'ok' if d['ok'] else 'BAD':>3s} {d['t_capture'] * 1e3:8.1f}")
        print(s)
    n = len(rows)
    full = sum(r[1]["full"] for r in rows)
    ok = sum(r[1]["ok"] for r in rows)
    eager = sum(r[1]["eager"] for r in rows)
    brk = [r[1]["breaks"] for r in rows]
    tcap = [r[1]["t_capture"] * 1e3 for r in rows]
    gus = [r[1]["guard_us"] for r in rows if r[1]["guard_us"] is not None]
    print("-" * len(hdr))
    print(f"cases: {n}")
    print(f"ours:   graphs/case mean {statistics.mean(r[1]['graphs'] for r in rows):.2f}")
    recomp = [r[0] for r in rows if r[1]["variants"] > 1]
    print(f"ours:   variants/case over {NCALLS} calls mean {statistics.mean(r[1]['variants'] for r in rows):.3f}, "
          f"cases recompiled {len(recomp)}: {recomp}")
    print(f"ours:   full-graph {full}/{n} ({100.0 * full / n:.1f}%), correct {ok}/{n}, eager-fallback cases {eager}, "
          f"breaks/case {statistics.mean(brk):.2f}, capture ms/case median {statistics.median(tcap):.1f} "
          f"mean {statistics.mean(tcap):.1f}")
    if gus:
        print(f"ours:   guard check per call: median {statistics.median(gus):.2f} us, mean {statistics.mean(gus):.2f} us, "
              f"max {max(gus):.2f} us")
    if not args.no_dynamo:
        drows = [r[2] for r in rows]
        dfull = sum(d["full"] for d in drows)
        dok = sum(d["ok"] for d in drows)
        dbrk = [d["breaks"] for d in drows if d.get("breaks") is not None]
        dt = [d["t_capture"] * 1e3 for d in drows if d.get("t_capture") is not None]
        deager = sum(bool(d.get("eager")) for d in drows)
        drec = [r[0] for r in rows if r[2].get("recompiled")]
        print(f"dynamo: cases recompiled within {NCALLS} calls {len(drec)}: {drec}")
        print(f"dynamo: full-graph {dfull}/{n} ({100.0 * dfull / n:.1f}%), correct {dok}/{n}, eager-fallback cases {deager}, "
              f"breaks/case {statistics.mean(dbrk) if dbrk else float('nan'):.2f}, capture ms/case median "
              f"{statistics.median(dt):.1f} mean {statistics.mean(dt):.1f}")
        both = sum(1 for r in rows if r[1]["full"] and r[2]["full"])
        only_d = [r[0] for r in rows if r[2]["full"] and not r[1]["full"]]
        only_m = [r[0] for r in rows if r[1]["full"] and not r[2]["full"]]
        print(f"full-graph in both: {both}; only dynamo: {only_d}; only ours: {only_m}")
    # the summary table: at most one graph (no break, no eager fallback) with outputs and state
    # as eager's, exactly one graph, breaks per case, wrong results
    print(f"{'':8s} {'<=1 graph ok':>13s} {'1 graph':>8s} {'brk/case':>9s} {'wrong':>6s}")
    fronts = [("ours", [r[1] for r in rows])] + ([] if args.no_dynamo else [("dynamo", [r[2] for r in rows])])
    for front, rs in fronts:
        le1 = sum(1 for d in rs if (d.get("graphs") or 0) <= 1 and not (d.get("breaks") or 0) and not d.get("eager")
                  and d.get("graphs") is not None and d["ok"])
        one = sum(1 for d in rs if d["full"])
        bk = [d["breaks"] for d in rs if d.get("breaks") is not None]
        print(f"{front:8s} {100.0 * le1 / n:12.1f}% {100.0 * one / n:7.1f}% {statistics.mean(bk) if bk else float('nan'):9.3f} "
              f"{sum(1 for d in rs if not d['ok']):6d}")
    bad = [r[0] for r in rows if not r[1]["ok"]]
    if bad:
        print("INCORRECT (ours):", bad)


if __name__ == "__main__":
    main()
