"""Fifth real-world-style corpus (issue 10 trust, issue 11 capture): a new user's programs.

What the earlier corpora (bench/modules.py, modules2-4.py, capture*.py) leave out or touch only
lightly, written the way code in public repositories writes it: whole training steps inside the
compiled function (loss, torch.autograd.grad / backward, an SGD / Adam update under torch.no_grad
with zero_grad), EMA teachers and running statistics updated in place, KV caches written with
index_copy_ / scatter_ at a position tensor, top-p / top-k logit filtering (sort, cumsum,
scatter back, masked_fill -inf), T5 relative-position buckets, rotary caches sliced by sequence
length, MoE dense dispatch with capacity through cumsum, layer stacks configured by a dataclass
(ModuleList / ModuleDict / Sequential, partial norm layers, closures, global constants),
nested list / dict / tuple / None outputs, views of inputs returned to the user (the runner
checks that outputs alias the inputs and each other as eager's do), inputs written in place
through views and boolean masks, non-contiguous / expanded / channels-last inputs, 0-d and empty
tensors, RNG through an explicit torch.Generator, straight-through estimators, and guard
soundness: calls with other shapes and dtypes, module attributes, submodules, parameters,
global constants and closure cells changed between calls, train()/eval() switched between calls.

    python bench/modules5.py [--filter NAME] [--jobs 2] [--timeout 240] [-v]
    python bench/modules5.py --case NAME      # one case in this process, with a traceback
    python bench/modules5.py --inference      # cases that train nothing, under no_grad / inference_mode

Each case runs eager and mlircap.compile side by side on the same inputs (deep copies of one
model), for `ncalls` calls (default 3: calls 0 and 1 on the same values, later calls on new
values, or on other shapes / dtypes where the case's inputs take the call index), in a child
process per worker (a signal is a crash, not the end of the run). Categories: ok (compiled,
one graph, matches eager), breaks (compiled in several graphs, matches), fallback (matches, but
some part ran eagerly), wrong, error (mlircap raised where eager did not), crash, timeout.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import inspect
import io
import json
import math
import os
import subprocess
import sys
import threading
import time
import traceback
import warnings
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars

import modules as M  # bench/modules.py: comparison, state, RNG helpers, child process

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ training steps
@fn_case("linreg_autograd_grad_sgd_step", lambda: (R(8, 3).requires_grad_(), R(16, 8), R(16, 3)))
def linreg_autograd_grad_sgd_step(w, x, y):
    """One least-squares SGD step: the gradient by torch.autograd.grad, the update in place under no_grad."""
    loss = ((x @ w - y) ** 2).mean()
    (g,) = torch.autograd.grad(loss, w)
    with torch.no_grad():
        w.sub_(0.1 * g)
    return loss.detach(), g


class TrainStep(nn.Module):
    """A classifier's whole training step in forward: zero_grad, loss.backward(), SGD with momentum
    buffers and weight decay under torch.no_grad, a step counter, the loss returned as a float."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))
        self.lr, self.mom, self.wd = 0.05, 0.9, 1e-4
        self.bufs = [torch.zeros_like(p) for p in self.net.parameters()]
        self.steps = 0

    def forward(self, x, y):
        for p in self.net.parameters():
            p.grad = None
        loss = F.cross_entropy(self.net(x), y, label_smoothing=0.1)
        loss.backward()
        with torch.no_grad():
            for p, b in zip(self.net.parameters(), self.bufs):
                g = p.grad + self.wd * p
                b.mul_(self.mom).add_(g)
                p.add_(b, alpha=-self.lr)
        self.steps += 1
        return loss.item(), [b.clone() for b in self.bufs]


case("train_step_backward_sgd_momentum", lambda: (R(10, 6), I(0, 4, 10)), train=True)(lambda: TrainStep())


@fn_case("adam_update_bias_correction", lambda i=0: (R(5, 4), R(5, 4), torch.zeros(5, 4), torch.zeros(5, 4), i + 1))
def adam_update_bias_correction(p, g, m, v, step):
    """Adam written out: in-place moments with lerp_ / addcmul_, bias corrections from a Python int step."""
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    bc1 = 1 - b1 ** step
    bc2 = 1 - b2 ** step
    denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / bc1)
    return p


class EMATeacher(nn.Module):
    """Mean-teacher: the student runs, the teacher's parameters follow it by an in-place EMA
    under no_grad (torch._foreach_mul_ / _foreach_add_), the teacher's output is the target."""

    def __init__(self, decay=0.99):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 5))
        self.teacher = copy.deepcopy(self.student).requires_grad_(False)
        self.decay = decay

    def forward(self, x):
        with torch.no_grad():
            t = list(self.teacher.parameters())
            s = list(self.student.parameters())
            torch._foreach_mul_(t, self.decay)
            torch._foreach_add_(t, s, alpha=1 - self.decay)
            target = self.teacher(x).softmax(-1)
        out = self.student(x).log_softmax(-1)
        return F.kl_div(out, target, reduction="batchmean"), target


case("ema_teacher_foreach", lambda: (R(4, 5),))(lambda: EMATeacher())


class RunningStats(nn.Module):
    """Hand-written batch statistics with momentum (buffers written in train mode only) and an
    int64 counter buffer; eval mode reads the running values."""

    def __init__(self, c=6, momentum=0.1):
        super().__init__()
        self.register_buffer("mean", torch.zeros(c))
        self.register_buffer("var", torch.ones(c))
        self.register_buffer("count", torch.tensor(0, dtype=torch.long))
        self.momentum = momentum

    def forward(self, x):
        if self.training:
            mu = x.mean((0, 2))
            var = x.var((0, 2), unbiased=True)
            with torch.no_grad():
                self.mean.mul_(1 - self.momentum).add_(self.momentum * mu)
                self.var.lerp_(var, self.momentum)
                self.count += 1
        else:
            mu, var = self.mean, self.var
        return (x - mu[None, :, None]) * torch.rsqrt(var[None, :, None] + 1e-5)


case("running_stats_train_then_eval", lambda: (R(4, 6, 5),), train=True, ncalls=4,
     between=lambda m, i: m.eval() if i == 3 else None)(lambda: RunningStats())


# ============================================================================ caches
class KVCacheIndexCopy(nn.Module):
    """A decoder step with a static KV cache: new keys / values written with index_copy_ at the
    position tensor, attention over the cache masked to positions <= pos."""

    def __init__(self, d=16, h=2, t=8):
        super().__init__()
        self.h, self.dh = h, d // h
        self.qkv = nn.Linear(d, 3 * d)
        self.register_buffer("k", torch.zeros(1, h, t, d // h))
        self.register_buffer("v", torch.zeros(1, h, t, d // h))

    def forward(self, x, pos):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        scores = q @ self.k.transpose(-1, -2) / math.sqrt(self.dh)
        allowed = torch.arange(self.k.shape[2])[None, :] <= pos[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        return (scores.softmax(-1) @ self.v).transpose(1, 2).reshape(b, s, d)


case("kv_cache_index_copy_decode", lambda i=0: (R(1, 1, 16), torch.tensor([i])), ncalls=4)(lambda: KVCacheIndexCopy())


class KVCacheScatter(nn.Module):
    """Per-sequence write positions (batch of 3, each at its own length) written with scatter_ and
    an expanded index, lengths bumped in place."""

    def __init__(self, t=6, d=4):
        super().__init__()
        self.register_buffer("cache", torch.zeros(3, t, d))
        self.register_buffer("lengths", torch.tensor([0, 2, 4]))

    def forward(self, x):
        idx = self.lengths.view(3, 1, 1).expand(3, 1, x.shape[-1])
        self.cache.scatter_(1, idx, x)
        self.lengths.add_(1).clamp_(max=self.cache.shape[1] - 1)
        mask = torch.arange(self.cache.shape[1])[None, :] < self.lengths[:, None]
        return (self.cache * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


case("kv_cache_scatter_lengths", lambda: (R(3, 1, 4),), ncalls=4)(lambda: KVCacheScatter())


# ============================================================================ masking / sampling
@fn_case("top_p_top_k_filtering", lambda: (R(3, 20) * 3, 0.8, 5))
def top_p_top_k_filtering(logits, top_p, top_k):
    """transformers' top_k_top_p_filtering: the k-th value threshold, then the nucleus by sort, softmax,
    cumsum, a shift right to keep the first token above p, scattered back, masked with -inf."""
    kth = torch.topk(logits, top_k)[0][..., -1, None]
    logits = logits.masked_fill(logits < kth, -float("inf"))
    sorted_logits, sorted_idx = torch.sort(logits, descending=True)
    cum = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    remove = cum > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    remove = remove.scatter(1, sorted_idx, remove)
    out = logits.masked_fill(remove, float("-inf"))
    return out, out.softmax(-1), out.isinf().sum(-1)


@fn_case("masked_softmax_fully_masked_rows", lambda: (R(2, 2, 5, 5), torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]]).bool()))
def masked_softmax_fully_masked_rows(scores, keep):
    """A key padding mask and a causal mask with -inf; a fully masked batch row gives NaN, then
    zeroed with torch.where; the finfo.min variant keeps it finite."""
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    m = keep[:, None, None, :] & causal
    p = scores.masked_fill(~m, float("-inf")).softmax(-1)
    safe = torch.where(m.any(-1, keepdim=True), p, 0.0)
    fin = scores.masked_fill(~m, torch.finfo(scores.dtype).min).softmax(-1)
    return p, safe, fin


@fn_case("gumbel_softmax_hard_generator", lambda: (R(4, 6),))
def gumbel_softmax_hard_generator(logits):
    """Gumbel noise from an explicit seeded torch.Generator, a hard one-hot by argmax and the
    straight-through estimator (y_hard - y.detach() + y)."""
    g = torch.Generator().manual_seed(1234)
    u = torch.rand(logits.shape, generator=g)
    y = ((logits - torch.log(-torch.log(u + 1e-10) + 1e-10)) / 0.5).softmax(-1)
    hard = torch.zeros_like(y).scatter_(-1, y.argmax(-1, keepdim=True), 1.0)
    return hard - y.detach() + y, y


class DropoutTrainEval(nn.Module):
    """Dropout in train mode draws from torch's generator (same seed as eager), in eval it is the
    identity; alpha_dropout and dropout2d too; switched between calls."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        h = self.drop(self.lin(x))
        return h, F.alpha_dropout(h, 0.2, self.training), F.dropout2d(h[:, :, None, None], 0.5, self.training)


case("dropout_train_then_eval", lambda: (R(4, 8),), train=True, ncalls=4,
     between=lambda m, i: m.train(i != 2))(lambda: DropoutTrainEval())


# ============================================================================ einsum / positions
@fn_case("einsum_zoo", lambda: (R(2, 3, 5, 4), R(2, 3, 6, 4), R(4, 4), R(2, 4), R(2, 3, 3)))
def einsum_zoo(q, k, w, v, sq):
    """Attention scores, a bilinear form, an outer product, a batch trace, contraction with a repeated
    output-free index, 'ij,ij->' and an ellipsis."""
    s = torch.einsum("bhqd,bhkd->bhqk", q, k)
    ctx = torch.einsum("bhqk,bhkd->bqhd", s.softmax(-1), k)
    bil = torch.einsum("bi,ij,bj->b", v, w, v)
    outer = torch.einsum("i,j->ij", v[0], v[1])
    tr = torch.einsum("bii->b", sq)
    diag = torch.einsum("bii->bi", sq)
    full = torch.einsum("ij,ij->", w, w)
    ell = torch.einsum("...d,de->...e", q, w)
    return s, ctx, bil, outer, tr, diag, full, ell


class T5RelativeBias(nn.Module):
    """T5's relative position bucket: abs, a log bucket computed in float and cast to long,
    torch.min with full_like, where on small distances; an embedding of the buckets."""

    def __init__(self, heads=2, buckets=8, max_distance=16):
        super().__init__()
        self.buckets, self.max_distance = buckets, max_distance
        self.emb = nn.Embedding(buckets, heads)

    def bucket(self, rel):
        n = self.buckets // 2
        ret = (rel > 0).to(torch.long) * n
        rel = rel.abs()
        exact = n // 2
        large = exact + (torch.log(rel.float() / exact) / math.log(self.max_distance / exact) * (n - exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, n - 1))
        return ret + torch.where(rel < exact, rel, large)

    def forward(self, x):
        q = torch.arange(x.shape[1], dtype=torch.long)[:, None]
        k = torch.arange(x.shape[1], dtype=torch.long)[None, :]
        b = self.bucket(k - q)
        return b, self.emb(b).permute(2, 0, 1)[None] + x[:, None, :, None].mean(-2, keepdim=True)


case("t5_relative_position_bucket", lambda i=0: (R(2, 7 + 3 * (i >= 2)),))(lambda: T5RelativeBias())


class RotaryCache(nn.Module):
    """A rotary cos/sin cache built for max length once, sliced to the sequence length of the call
    (which changes between calls), rotate_half by chunk + cat."""

    def __init__(self, dim=8, max_len=32):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_len).float()
        freqs = torch.outer(t, inv)
        emb = torch.cat((freqs, freqs), -1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((-x2, x1), -1)

    def forward(self, q, k):
        n = q.shape[-2]
        cos, sin = self.cos[:n], self.sin[:n]
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


case("rotary_cache_sliced_by_length", lambda i=0: (R(2, 2, 5 + 4 * i, 8), R(2, 2, 5 + 4 * i, 8)),
     ncalls=4)(lambda: RotaryCache())


@fn_case("alibi_and_sinusoid_positions", lambda: (R(2, 6, 12),))
def alibi_and_sinusoid_positions(x):
    """ALiBi slopes from Python math for 6 heads (not a power of 2), a distance matrix from arange,
    and sinusoidal embeddings with arange(0, d, 2) and exp(-log(10000)) frequencies."""
    heads, n, d = 6, x.shape[1], x.shape[2]
    p2 = 2 ** math.floor(math.log2(heads))
    base = [2 ** (-8 * (i + 1) / p2) for i in range(p2)]
    extra = [2 ** (-4 * (2 * i + 1) / p2) for i in range(heads - p2)]
    slopes = torch.tensor(base + extra)
    pos = torch.arange(n)
    dist = (pos[None, :] - pos[:, None]).abs().neg()
    alibi = slopes[:, None, None] * dist[None]
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos[:, None] * div)
    pe[:, 1::2] = torch.cos(pos[:, None] * div)
    return alibi, x + pe


# ============================================================================ layer stacks
@dataclasses.dataclass
class BlockConfig:
    dim: int = 16
    depth: int = 4
    act: str = "gelu"
    pre_norm: bool = True
    drop_every: int = 2          # every drop_every-th block is skipped in eval
    layer_scale: Optional[float] = 1e-2
    eps: float = 1e-6


GLOBAL_RESIDUAL_SCALE = 0.5


class ConfiguredStack(nn.Module):
    """Blocks from a dataclass config: functools.partial norm layers, a ModuleDict of activations
    picked by a string, a closure over the config, layer scale only when configured, every other
    block skipped in eval, a global constant, and a list / dict / None output."""

    def __init__(self, cfg=BlockConfig()):
        super().__init__()
        self.cfg = cfg
        norm = functools.partial(nn.LayerNorm, eps=cfg.eps)
        self.acts = nn.ModuleDict({"gelu": nn.GELU(), "silu": nn.SiLU(), "relu": nn.ReLU()})
        self.blocks = nn.ModuleList(nn.Sequential(norm(cfg.dim), nn.Linear(cfg.dim, cfg.dim)) for _ in range(cfg.depth))
        self.gammas = nn.ParameterList(nn.Parameter(torch.full((cfg.dim,), cfg.layer_scale)) for _ in range(cfg.depth)) \
            if cfg.layer_scale is not None else None
        self.head = norm(cfg.dim)

    def forward(self, x):
        cfg = self.cfg

        def residual(h, f):
            return h * (1 + GLOBAL_RESIDUAL_SCALE) + f

        hidden = []
        for i, blk in enumerate(self.blocks):
            if not self.training and cfg.drop_every and i % cfg.drop_every == 1:
                hidden.append(None)
                continue
            f = self.acts[cfg.act](blk(x))
            if self.gammas is not None:
                f = f * self.gammas[i]
            x = residual(x, f)
            hidden.append(x)
        return {"last": self.head(x), "hidden": hidden, "aux": None, "n": len([h for h in hidden if h is not None])}


case("dataclass_config_layer_stack", lambda: (R(2, 3, 16),))(lambda: ConfiguredStack())


def _set_act(m, i):
    if i == 2:
        m.cfg = dataclasses.replace(m.cfg, act="silu")


case("config_replaced_between_calls", lambda: (R(2, 3, 16),), ncalls=4, between=_set_act)(lambda: ConfiguredStack())


class ScaledHead(nn.Module):
    """Attributes a user changes between calls: a float scale, a bool flag, a submodule swapped,
    a parameter scaled in place and then replaced by a new Parameter."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 5)
        self.act = nn.ReLU()
        self.scale = 1.0
        self.use_bias = True
        self.bias2 = nn.Parameter(torch.zeros(5))

    def forward(self, x):
        h = self.act(self.lin(x)) * self.scale
        if self.use_bias:
            h = h + self.bias2
        return h


def _mutate_head(m, i):
    if i == 1:
        m.scale = 2.5
    elif i == 2:
        m.use_bias = False
        m.act = nn.Tanh()
    elif i == 3:
        with torch.no_grad():
            m.lin.weight.mul_(-1)
    elif i == 4:
        m.use_bias = True
        m.bias2 = nn.Parameter(torch.ones(5))


case("module_attributes_mutated_between_calls", lambda: (R(3, 5),), ncalls=5, between=_mutate_head)(lambda: ScaledHead())


TEMPERATURE = {"t": 1.0}
OFFSET = 0.0


class GlobalsReader(nn.Module):
    def forward(self, x):
        return (x / TEMPERATURE["t"]).softmax(-1) + OFFSET


def _mutate_globals(m, i):
    global OFFSET
    TEMPERATURE["t"] = [1.0, 1.0, 0.5, 2.0][i]
    OFFSET = [0.0, 0.0, 0.0, 3.0][i]


case("global_constants_mutated_between_calls", lambda: (R(3, 5),), ncalls=4, between=_mutate_globals)(
    lambda: GlobalsReader())


def _make_closure_model():
    state = {"k": 2}
    factor = [1.5]

    def f(x):
        return x * factor[0] + state["k"]

    class Closure(nn.Module):
        def forward(self, x):
            return f(x).relu()

    m = Closure()
    m._cell = (state, factor)
    return m


def _mutate_closure(m, i):
    state, factor = m._cell
    if i >= 2:
        state["k"] = -1
        factor[0] = -0.5 * i


case("closure_cells_mutated_between_calls", lambda: (R(3, 4),), ncalls=4, between=_mutate_closure)(_make_closure_model)


# ============================================================================ outputs / aliasing
@fn_case("views_of_inputs_returned", lambda: (R(4, 6), R(3, 5)))
def views_of_inputs_returned(x, y):
    """Outputs that are views of the inputs (t, slicing, view, unsqueeze, diagonal, the input itself)
    and outputs that are views of each other: a user writing into them must see eager's aliasing."""
    h = x * 2
    return x.t(), x[:, 1:3], x.view(-1), y.unsqueeze(0), x.diagonal(), y, h, h.view(2, 12), h[0]


@fn_case("inplace_on_inputs_masks_views", lambda: (R(5, 6), R(6), torch.rand(5, 6) > 0.5))
def inplace_on_inputs_masks_views(x, b, m):
    """A user's in-place writes to the arguments: relu_ through a column slice, a boolean-mask
    assignment, clamp_ of a row, add_ of a broadcast, and the count of masked elements."""
    x[:, 1:4].relu_()
    x[m] = 0.0
    x[0].clamp_(-0.5, 0.5)
    b.add_(x.sum(0))
    return x.sum(), m.sum(), b


@fn_case("noncontiguous_expanded_inputs", lambda: (R(6, 4).t(), R(1, 5).expand(3, 5), R(4, 8)[:, ::3], R(2, 3, 4, 5).permute(0, 2, 3, 1)))
def noncontiguous_expanded_inputs(xt, ex, strided, perm):
    return (xt @ xt.t(), ex + torch.arange(5), ex.sum(0), strided * 2, strided.contiguous().view(-1),
            perm.reshape(2, -1).softmax(-1), perm.mean(-1), xt.cumsum(1))


class ConvChannelsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        h = F.silu(self.gn(self.conv(x)))
        h = self.dw(h) + h
        return h, F.adaptive_avg_pool2d(h, 1).flatten(1), h.permute(0, 2, 3, 1).mean((1, 2))


case("conv_channels_last_input", lambda: (R(2, 3, 9, 7).contiguous(memory_format=torch.channels_last),))(
    lambda: ConvChannelsLast())


@fn_case("zero_dim_and_empty_tensors", lambda: (R(0, 4), R(3, 4), torch.tensor(0.7), torch.tensor(3), torch.empty(0, dtype=torch.long)))
def zero_dim_and_empty_tensors(empty, x, t, n, eidx):
    """Reductions over empty batches (sum 0, mean NaN, amax raises not), cat with an empty tensor,
    index_select with an empty index, 0-d temperature / count arithmetic and 0-d outputs."""
    return (empty.sum(0), empty.mean(0), empty.sum(), torch.cat([empty, x]), x.index_select(0, eidx),
            (x / t).softmax(-1), x * n, n * t, t.exp(), (x.sum() / n).reshape(()), empty.shape[0], x[x.shape[0]:].numel(),
            torch.zeros(0, 4).logsumexp(0), empty.prod(1), empty.argsort(0))


@fn_case("int64_indexing_gather_embed", lambda: (R(6, 5), I(-6, 6, 4), I(0, 5, 6, 3), R(10, 3), I(0, 10, 2, 4)))
def int64_indexing_gather_embed(x, idx, gidx, table, tok):
    """Advanced indexing with negative int64 indices, gather, index_select, a (rows, cols) pair,
    F.embedding of a batch, take_along_dim, and a one-hot matmul that equals the embedding."""
    return (x[idx], x[:, idx.clamp(-5, 4)], x.gather(1, gidx), x.index_select(1, idx.remainder(5)),
            x[idx, idx.abs() % 5], F.embedding(tok, table), torch.take_along_dim(x, gidx, 1),
            F.one_hot(tok, 10).float() @ table, torch.take(x, idx.abs()))


# ============================================================================ dtypes / ints
@fn_case("int_bool_arithmetic", lambda: (I(-20, 20, 4, 5), I(1, 7, 4, 5), torch.rand(4, 5) > 0.5))
def int_bool_arithmetic(a, b, m):
    """Floor division and remainder of negative ints, bit ops and shifts, bool sums and any/all,
    bool times int, comparisons chained with &, int mean via float, argmax of bool."""
    return (a // b, a % b, torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b), a & 0xF, a | b, a ^ b,
            a << 2, a >> 1, m.sum(), m.sum(1), m.any(1), m.all(0), m * a, (a > 0) & m, a.float().mean(),
            m.int().argmax(1), (~m).long().cumsum(1), torch.bitwise_not(a), a.sign(), a.abs().max())


@fn_case("dtype_promotion_python_scalars", lambda: (R(3, 4), I(0, 9, 3, 4, dtype=torch.int32), R(3, 4).half(),
                                                   torch.rand(3, 4) > 0.5, R(3, 4).double()))
def dtype_promotion_python_scalars(f32, i32, f16, b, f64):
    """Python floats and ints meeting int32 / half / bool / double tensors, half + float32, float64
    tensors against float32 tensors, torch.tensor made inside with an inferred dtype."""
    return (i32 + 1.5, i32 * 2, f16 + f32, f16 * 1.5, b + 0.5, b * 3, f64 + f32, f32 + 1, i32 / 2, i32 ** 2,
            torch.tensor([1, 2, 3]) + i32[0, :3], torch.tensor(2.0) * i32, f16.float() / 3, (f16 > 0.0) + 1,
            torch.full_like(i32, 7) * 1.0, i32.to(torch.float16) + f16, f32.to(torch.bfloat16) * 2)


@fn_case("where_with_scalars_and_ints", lambda: (R(4, 5), I(-3, 3, 4, 5)))
def where_with_scalars_and_ints(x, n):
    return (torch.where(x > 0, x, 0.0), torch.where(x > 0, 1.0, -1.0), torch.where(n > 0, n, 0), torch.where(n == 0, 1, n),
            torch.where(x.isnan(), torch.zeros_like(x), x), x.where(x < 1, torch.tensor(1.0)),
            torch.where(n > 0, x, n.float()), torch.where(n < 0, 0.5, n))


# ============================================================================ shape ops
@fn_case("chunk_split_unbind_stack", lambda: (R(2, 7, 12),))
def chunk_split_unbind_stack(x):
    q, k, v = x.chunk(3, -1)
    a, b, c = x.split([2, 3, 2], 1)
    rows = x.unbind(1)
    parts = torch.tensor_split(x, (1, 4), dim=1)
    odd = x.chunk(4, 1)   # uneven: 2, 2, 2, 1
    return (torch.stack([q, k, v], 0).sum(0), torch.cat([c, b, a], 1), torch.stack(rows[::2], -1), len(rows),
            [p.shape[1] for p in parts], [o.mean() for o in odd], torch.hstack(x.unbind(0)), torch.vstack(list(x)))


@fn_case("interpolate_pad_unfold_fold", lambda: (R(2, 3, 8, 10),))
def interpolate_pad_unfold_fold(img):
    """Patches by F.unfold, mixed and written back by F.fold (overlap-add normalised by fold of
    ones), reflect / replicate pads, nearest-exact and area resizing, pixel shuffle round trip."""
    p = F.unfold(img, kernel_size=3, padding=1, stride=2)
    back = F.fold(p * 0.5, (8, 10), kernel_size=3, padding=1, stride=2)
    norm = F.fold(torch.ones_like(p), (8, 10), kernel_size=3, padding=1, stride=2)
    return (back / norm.clamp(min=1), F.pad(img, (1, 2, 2, 1), mode="reflect"), F.pad(img, (3, 0, 0, 3), mode="replicate"),
            F.interpolate(img, size=(5, 13), mode="nearest-exact"), F.interpolate(img, size=(4, 3), mode="area"),
            F.pixel_unshuffle(F.pixel_shuffle(img.repeat(1, 4, 1, 1), 2), 2), F.pad(img, (1, 1), value=-1.0))


@fn_case("sort_unsort_by_length", lambda: (R(5, 4, 3), torch.tensor([2, 4, 1, 4, 3])))
def sort_unsort_by_length(x, lengths):
    """Sort sequences by length (stable, descending), gather in that order, run a masked mean, and
    restore the original order with argsort of the permutation."""
    sl, perm = lengths.sort(descending=True, stable=True)
    xs = x[perm]
    mask = torch.arange(x.shape[1])[None, :] < sl[:, None]
    pooled = (xs * mask[..., None]).sum(1) / sl[:, None]
    inv = perm.argsort()
    return pooled[inv], perm, inv, torch.bucketize(lengths, torch.tensor([1, 2, 3])), torch.searchsorted(sl.flip(0), 3)


class MoEDense(nn.Module):
    """Switch-style top-1 routing done densely: one_hot, capacity by cumsum over tokens, tokens
    over capacity dropped, einsum dispatch / combine, a load-balancing aux loss."""

    def __init__(self, d=8, e=4, cap=3):
        super().__init__()
        self.gate = nn.Linear(d, e, bias=False)
        self.w = nn.Parameter(torch.randn(e, d, d) * 0.1)
        self.cap = cap

    def forward(self, x):
        probs = self.gate(x).softmax(-1)
        top, idx = probs.max(-1)
        oh = F.one_hot(idx, probs.shape[-1]).to(x.dtype)
        pos = (oh.cumsum(0) - 1) * oh
        keep = (pos < self.cap).to(x.dtype) * oh
        slot = F.one_hot(pos.sum(-1).long().clamp(max=self.cap - 1), self.cap).to(x.dtype)
        dispatch = torch.einsum("te,tc->tec", keep, slot)
        ex_in = torch.einsum("tec,td->ecd", dispatch, x)
        ex_out = torch.einsum("ecd,edf->ecf", ex_in, self.w)
        y = torch.einsum("tec,ecf->tf", dispatch * top[:, None, None], ex_out)
        aux = (oh.mean(0) * probs.mean(0)).sum() * probs.shape[-1]
        return y, aux, keep.sum(0)


case("moe_dense_capacity_dispatch", lambda: (R(10, 8),))(lambda: MoEDense())


# ============================================================================ guards: shapes / dtypes
class ShapeDtypeVarying(nn.Module):
    """Called with other batch sizes, sequence lengths and dtypes: shape arithmetic in Python
    (view with computed sizes, a padding to a multiple of 4), a float64 call."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        b, n, d = x.shape
        pad = (-n) % 4
        x = F.pad(x, (0, 0, 0, pad))
        h = x.view(b, (n + pad) // 4, 4, d).mean(2)
        if x.dtype == torch.float64:
            return h * 2, h.dtype
        return self.proj(h), h.dtype


def _varying_inputs(i=0):
    shapes = [(2, 8, 6), (2, 8, 6), (3, 5, 6), (1, 13, 6), (2, 8, 6)]
    x = torch.randn(*shapes[i])
    return (x.double() if i == 4 else x,)


case("shapes_and_dtypes_change_between_calls", _varying_inputs, ncalls=5)(lambda: ShapeDtypeVarying())


@fn_case("int_and_float_args_change", lambda i=0: (R(3, 4), [2, 2, 3, 0][i], [0.5, 0.5, 0.5, -1.0][i], [True, True, False, True][i]),
         ncalls=4)
def int_and_float_args_change(x, k, alpha, flag):
    """Python int / float / bool arguments that change between calls: a topk k (0 gives an empty
    result), a scale, a branch."""
    v, i = x.topk(k, -1)
    y = x * alpha
    if flag:
        y = y.relu()
    return v, i, y, y.sum() * k


@fn_case("inference_mode_and_no_grad_blocks", lambda: (R(3, 4).requires_grad_(), R(4, 4).requires_grad_()))
def inference_mode_and_no_grad_blocks(x, w):
    """Parts under no_grad / enable_grad / inference_mode: which outputs require grad must match,
    detach() cuts, set_grad_enabled(False) as a function call."""
    h = x @ w
    with torch.no_grad():
        s = h.sum(-1, keepdim=True)
        with torch.enable_grad():
            e = (h * 2).tanh()
    with torch.inference_mode():
        q = x.detach() * 3
    torch.set_grad_enabled(False)
    try:
        z = h * 5
    finally:
        torch.set_grad_enabled(True)
    return h / s.detach().abs().clamp(min=1), s, e, q.clone(), z, h.detach().requires_grad_()


@fn_case("straight_through_quantizer", lambda: (R(4, 6).requires_grad_(), R(8, 6)))
def straight_through_quantizer(z, codebook):
    """VQ-VAE: nearest codebook entry by cdist + argmin, commitment loss with detach on either side,
    the straight-through z + (zq - z).detach(); fake 4-bit quantization with round + clamp + STE."""
    d = torch.cdist(z, codebook)
    idx = d.argmin(-1)
    zq = codebook[idx]
    loss = F.mse_loss(zq, z.detach()) + 0.25 * F.mse_loss(z, zq.detach())
    st = z + (zq - z).detach()
    scale = z.detach().abs().amax() / 7
    fq = z + ((z / scale).round().clamp(-8, 7) * scale - z).detach()
    return st, loss, idx, fq, d.min(-1).values


@fn_case("label_smoothing_ignore_index_losses", lambda: (R(6, 5), torch.tensor([1, -100, 4, 0, -100, 2]), R(6, 5), R(6, 5).sigmoid()))
def label_smoothing_ignore_index_losses(logits, target, a, p):
    """cross_entropy with ignore_index and label smoothing (mean over non-ignored), nll with weights,
    BCE on probabilities, soft-target CE, smooth L1 with beta, KL with log_target."""
    w = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    return (F.cross_entropy(logits, target, label_smoothing=0.2), F.cross_entropy(logits, target, reduction="none"),
            F.nll_loss(logits.log_softmax(-1), target, weight=w), F.binary_cross_entropy(p, (a > 0).float()),
            F.cross_entropy(logits, a.softmax(-1)), F.smooth_l1_loss(logits, a, beta=0.5),
            F.kl_div(logits.log_softmax(-1), a.log_softmax(-1), log_target=True, reduction="batchmean"))


class StepCounterBuffer(nn.Module):
    """A 0-d step buffer incremented in place, a warmup factor computed from it in tensor arithmetic,
    a Python int attribute counter read in a branch (every 2nd call adds noise-free bias)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.calls = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.step += 1
        self.calls += 1
        warm = torch.clamp(self.step.float() / 3.0, max=1.0)
        y = self.lin(x) * warm
        if self.calls % 2 == 0:
            y = y + 1
        return y, self.step.clone(), self.calls


case("step_counter_buffer_and_int_attr", lambda: (R(2, 4),), ncalls=5)(lambda: StepCounterBuffer())


@fn_case("nested_container_inputs", lambda: ({"x": R(3, 4), "mask": torch.rand(3, 4) > 0.3, "meta": {"scale": 2.0}},
                                             [R(4), R(4)], (R(3, 1), None)))
def nested_container_inputs(batch, biases, pair):
    """A dict batch with a nested dict, a list of tensors, a tuple holding None; the output mirrors it."""
    x = batch["x"].masked_fill(~batch["mask"], 0.0) * batch["meta"]["scale"]
    for b in biases:
        x = x + b
    extra, missing = pair
    if missing is None:
        x = x * extra
    return {"y": x, "stats": (x.mean(), x.std()), "mask_count": batch["mask"].sum(), "none": missing}


@fn_case("python_loop_over_batch_and_stack", lambda i=0: (R(3 + i, 5),), ncalls=4)
def python_loop_over_batch_and_stack(x):
    """A Python loop over x.shape[0] (unrolled per batch size), a list appended to and stacked,
    an accumulator carried through the loop (a scan)."""
    outs, acc = [], torch.zeros(x.shape[1])
    for t in range(x.shape[0]):
        acc = 0.9 * acc + 0.1 * x[t]
        outs.append(acc.tanh())
    return torch.stack(outs), acc, len(outs)


@fn_case("cumulative_ops_and_topk", lambda: (R(4, 9), I(1, 4, 4, 9).float()))
def cumulative_ops_and_topk(x, pos):
    """cumsum / cumprod / cummax / logcumsumexp, topk with largest=False and sorted=True, kthvalue,
    argsort descending, sort of a non-contiguous view, discounted returns computed by a reversed cumsum."""
    gamma = 0.9
    disc = gamma ** torch.arange(x.shape[1], dtype=x.dtype)
    returns = (x * disc).flip(1).cumsum(1).flip(1) / disc
    return (x.cumsum(1), pos.cumprod(1), x.cummax(1).values, x.logcumsumexp(1), x.topk(3, 1, largest=False),
            x.kthvalue(2, 1), x.argsort(1, descending=True), x.t().sort(0), returns, x.sort(dim=0, stable=True).indices)


class SDPAMasks(nn.Module):
    """F.scaled_dot_product_attention with a boolean attn_mask, with is_causal, with a float additive
    mask, nn.MultiheadAttention with key_padding_mask and need_weights averaged."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, q, k, v, pad):
        m = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        b = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        c = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(~m, -1e4))
        x = q.transpose(1, 2).flatten(2)
        o, w = self.mha(x, x, x, key_padding_mask=pad)
        return a, b, c, o, w


case("sdpa_masks_and_mha_padding", lambda: (R(2, 2, 5, 4), R(2, 2, 5, 4), R(2, 2, 5, 4),
                                            torch.tensor([[False] * 5, [False, False, False, True, True]])))(
    lambda: SDPAMasks())


@fn_case("segment_sums_index_add_scatter", lambda: (R(7, 3), torch.tensor([0, 2, 2, 1, 0, 2, 1]), I(0, 4, 7)))
def segment_sums_index_add_scatter(x, seg, cls):
    """Graph-style segment sums / means / maxes by index_add_, scatter_add_ with an expanded index,
    scatter_reduce amax with include_self=False, bincount-like counts via one_hot."""
    n = 3
    sums = torch.zeros(n, 3).index_add_(0, seg, x)
    counts = torch.zeros(n).scatter_add_(0, seg, torch.ones(7))
    means = sums / counts.clamp(min=1)[:, None]
    mx = torch.full((n, 3), -1e9).scatter_reduce(0, seg[:, None].expand(-1, 3), x, "amax", include_self=False)
    hist = F.one_hot(cls, 4).sum(0)
    centered = x - means[seg]
    return sums, means, mx, hist, centered, torch.zeros(n, 3).index_add_(0, seg, x, alpha=0.5)


@fn_case("triplet_hard_mining", lambda: (R(8, 6), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])))
def triplet_hard_mining(emb, labels):
    """Batch-hard triplet loss: a pairwise distance matrix, positive / negative masks from label
    equality with the diagonal removed, hardest positive by masked max and negative by masked min."""
    emb = F.normalize(emb, dim=-1)
    d = torch.cdist(emb, emb).clamp(min=1e-12)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool)
    pos = (d * (same & ~eye)).amax(1)
    neg = d.masked_fill(same, float("inf")).amin(1)
    loss = F.relu(pos - neg + 0.3).mean()
    return loss, pos, neg, F.triplet_margin_loss(emb, emb.roll(2, 0), emb.roll(1, 0))


@fn_case("stft_free_audio_features", lambda: (R(2, 400),))
def stft_free_audio_features(wav):
    """Framing with unfold and a Hann window, a power spectrum by rfft, a mel-like triangular filter
    matrix built from linspace, log with clamp, per-utterance mean / std normalization."""
    frames = wav.unfold(-1, 64, 32) * torch.hann_window(64, periodic=False)
    spec = torch.fft.rfft(frames).abs() ** 2
    f = torch.linspace(0, 1, spec.shape[-1])
    centers = torch.linspace(0, 1, 10)
    fb = (1 - (f[None, :] - centers[:, None]).abs() * 9).clamp(min=0)
    mel = (spec @ fb.t()).clamp(min=1e-10).log()
    return (mel - mel.mean(1, keepdim=True)) / (mel.std(1, keepdim=True) + 1e-5)


@fn_case("meshgrid_anchors_and_box_decode", lambda: (R(2, 6, 4, 5), R(2, 4 * 5 * 3, 4)))
def meshgrid_anchors_and_box_decode(feat, deltas):
    """Anchors on a feature grid by meshgrid(indexing='ij') x 3 sizes, decode (dx, dy, dw, dh) with
    exp clamped by log(1000/16), clip to the image, areas and a score argmax."""
    h, w = feat.shape[-2:]
    ys, xs = torch.meshgrid(torch.arange(h) * 8.0 + 4, torch.arange(w) * 8.0 + 4, indexing="ij")
    sizes = torch.tensor([8.0, 16.0, 32.0])
    ctr = torch.stack([xs, ys], -1).reshape(-1, 1, 2).expand(-1, 3, 2).reshape(-1, 2)
    wh = sizes.repeat(h * w)[:, None].expand(-1, 2)
    dxy, dwh = deltas[..., :2], deltas[..., 2:].clamp(max=math.log(1000.0 / 16))
    c = ctr + dxy * wh
    s = wh * dwh.exp()
    boxes = torch.cat([c - s / 2, c + s / 2], -1)
    boxes = torch.stack([boxes[..., 0].clamp(0, w * 8), boxes[..., 1].clamp(0, h * 8),
                         boxes[..., 2].clamp(0, w * 8), boxes[..., 3].clamp(0, h * 8)], -1)
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    return boxes, area, feat.flatten(2).argmax(-1)


class TiedLMHead(nn.Module):
    """A tiny LM with tied input / output embeddings (the same Parameter twice), padding_idx, a
    weight-norm'd projection (parametrization), and logits shifted for next-token loss."""

    def __init__(self, v=12, d=8):
        super().__init__()
        self.emb = nn.Embedding(v, d, padding_idx=0)
        self.proj = nn.utils.parametrizations.weight_norm(nn.Linear(d, d))
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        h = torch.tanh(self.proj(self.emb(ids)))
        logits = self.head(h)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), ignore_index=0)
        return logits, loss


case("tied_embeddings_weight_norm_lm", lambda: (I(0, 12, 2, 7),))(lambda: TiedLMHead())


@fn_case("complex_and_polar_rotation", lambda: (R(2, 4, 8),))
def complex_and_polar_rotation(x):
    """LLaMA's rotary in complex numbers: view_as_complex of pairs, torch.polar frequencies, multiply,
    view_as_real and flatten back."""
    freqs = 1.0 / (10000 ** (torch.arange(0, 8, 2)[:4].float() / 8))
    t = torch.arange(x.shape[1]).float()
    cis = torch.polar(torch.ones(x.shape[1], 4), torch.outer(t, freqs))
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis).flatten(2), cis.abs(), xc.angle()


@fn_case("tensor_python_values", lambda: (R(3, 5),))
def tensor_python_values(x):
    """Python values computed from tensors: shapes, numel, dim, a float by .item(), a list by .tolist(),
    a bool from a comparison, a string with an f-string of a shape."""
    n = x.shape[0] * x.size(-1)
    m = x.abs().max().item()
    return n, x.numel(), x.dim(), round(m, 4) > 0, x[0, :2].tolist(), f"{tuple(x.shape)}", x / m, bool((x > 10).any())


# ============================================================================ guards, round 2
@contextlib.contextmanager
def default_dtype(dt):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@fn_case("default_dtype_changed_between_calls", lambda: (R(3, 4),), ncalls=4,
         context=lambda i: default_dtype(torch.float64 if i >= 2 else torch.float32))
def default_dtype_changed_between_calls(x):
    """Factories without a dtype (zeros, arange with a float step, tensor of floats, full) follow the
    default dtype, which the caller changes between calls."""
    base = torch.zeros(x.shape[-1]) + torch.arange(0, 2, 0.5) + torch.tensor([1.0, 2.0, 3.0, 4.0])
    return x + base, base, torch.full((2,), 1.5), torch.linspace(0, 1, 3)


@fn_case("grad_mode_changed_between_calls", lambda: (R(3, 4).requires_grad_(), R(4, 2)), ncalls=4,
         context=lambda i: torch.no_grad() if i == 2 else (torch.inference_mode() if i == 3 else contextlib.nullcontext()))
def grad_mode_changed_between_calls(x, w):
    """The caller runs the compiled function under no_grad on call 2, inference_mode on call 3:
    whether the outputs require grad (and are inference tensors) must follow."""
    return (x @ w).relu(), x.sum()


@fn_case("autocast_cpu_between_calls", lambda: (R(4, 8), R(8, 3)), ncalls=4,
         context=lambda i: torch.autocast("cpu", dtype=torch.bfloat16) if i >= 2 else contextlib.nullcontext())
def autocast_cpu_between_calls(x, w):
    """CPU autocast switched on by the caller on later calls: matmul in bfloat16, softmax in float32."""
    h = x @ w
    return h, h.softmax(-1), h.dtype


class DtypeMoved(nn.Module):
    """The user moves the module to float64 between calls (model.double()), then back to float32
    with the input dtype following; finfo(eps) follows the dtype."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.ln = nn.LayerNorm(4)

    def forward(self, x):
        return self.ln(self.lin(x)) + torch.finfo(x.dtype).eps * 1e6, self.lin.weight.dtype


case("module_double_between_calls", lambda i=0: (R(3, 4, dtype=torch.float64 if i == 2 else torch.float32),), ncalls=4,
     between=lambda m, i: m.double() if i == 2 else (m.float() if i == 3 else None))(lambda: DtypeMoved())


@fn_case("size_one_batch_broadcast_later", lambda i=0: (R([4, 4, 1, 3][i], 5), R([4, 4, 1, 1][i], 1)), ncalls=4)
def size_one_batch_broadcast_later(x, s):
    """A batch of 1 on a later call: broadcasting of size-1 dims and reductions over them must be
    specialized, not reused from the batch-of-4 graph."""
    return x * s, (x - x.mean(0)) / (x.std(0, unbiased=False) + 1), x.squeeze(0), s.expand_as(x).sum(0)


@fn_case("layout_changes_between_calls", lambda i=0: (R(4, 6) if i < 2 else (R(6, 4).t() if i == 2 else R(4, 12)[:, ::2]),),
         ncalls=4)
def layout_changes_between_calls(x):
    """The same shape contiguous, transposed, strided: view() must fail where eager's does (the
    transposed call raises), reshape must copy, in-place writes must land in the caller's tensor."""
    y = x.reshape(-1)[:5]
    x.mul_(2)
    try:
        v = x.view(24).sum()
    except RuntimeError:
        v = torch.tensor(-1.0)
    return y, v, x.stride()


@fn_case("same_tensor_twice_later", lambda i=0: (lambda a: (a, a if i >= 2 else a.clone()))(R(3, 4)), ncalls=4)
def same_tensor_twice_later(a, b):
    """Two distinct arguments on the first calls, the same tensor passed twice later: a write into the
    first must be seen through the second."""
    a.add_(1)
    return b * 2, (a - b).abs().sum()


class HookedLater(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        return self.lin(x).relu()


def _add_hooks(m, i):
    if i == 2:
        m.lin.register_forward_hook(lambda mod, inp, out: out * 0 + 1.0)
        m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 3,))


case("hooks_registered_after_compile", lambda: (R(2, 4),), ncalls=4, between=_add_hooks)(lambda: HookedLater())


class GrowingList(nn.Module):
    """A ModuleList that gets a new layer between calls, a list attribute of dims appended to, and a
    parameter frozen (requires_grad_(False)) between calls."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4)])
        self.dims = [0]

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x.sum(self.dims), x


def _grow(m, i):
    if i == 2:
        torch.manual_seed(7)
        m.layers.append(nn.Linear(4, 4))
        m.dims.append(1)
    if i == 3:
        m.layers[0].weight.requires_grad_(False)


case("module_list_grows_between_calls", lambda: (R(3, 4),), ncalls=4, between=_grow)(lambda: GrowingList())


class TensorAttrReplaced(nn.Module):
    """A plain tensor attribute (not a buffer) replaced by one of another shape and dtype between
    calls, and a cache attribute written by the call and read on the next."""

    def __init__(self):
        super().__init__()
        self.table = torch.arange(5.0)
        self.prev = None

    def forward(self, x):
        y = x * self.table[: x.shape[-1]].to(x.dtype).sum()
        if self.prev is not None and self.prev.shape == y.shape:
            y = y + self.prev
        self.prev = y.detach()
        return y


def _replace_table(m, i):
    if i == 2:
        m.table = torch.arange(10, dtype=torch.int64) * 2


case("tensor_attribute_replaced_between_calls", lambda: (R(2, 3),), ncalls=4, between=_replace_table)(
    lambda: TensorAttrReplaced())


@fn_case("out_of_range_index_on_later_call", lambda i=0: (R(10, 4), torch.tensor([1, 2, 9 if i < 2 else 10])), ncalls=3)
def out_of_range_index_on_later_call(table, ids):
    """An embedding / gather / index_select index that is in range on the first calls and out of
    range on the third: eager raises (IndexError / RuntimeError); compiled code must not read past."""
    return F.embedding(ids, table), table.index_select(0, ids), table[ids]


@fn_case("shape_mismatch_on_later_call", lambda i=0: (R(3, 4), R(4 if i < 2 else 5, 2)), ncalls=3)
def shape_mismatch_on_later_call(x, w):
    return x @ w


@fn_case("inference_mode_decorated_predict", lambda: (R(3, 4), R(4, 4)))
@torch.inference_mode()
def inference_mode_decorated_predict(x, w):
    """A predict function decorated with @torch.inference_mode(): its outputs are inference tensors."""
    return (x @ w).softmax(-1), (x @ w).argmax(-1)


class InPlaceOnOutputView(nn.Module):
    """A forward that returns a view of a parameter-derived buffer, and an in-place update of a
    buffer through .data and p.data.copy_ (old-style code)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("shadow", torch.zeros(4, 4))

    def forward(self, x):
        self.shadow.data.copy_(self.w.data * 0.5 + self.shadow.data * 0.5)
        self.w.data.clamp_(-1, 1)
        return x @ self.shadow, self.shadow[0], self.shadow


case("dot_data_updates_and_buffer_views", lambda: (R(2, 4),))(lambda: InPlaceOnOutputView())


@fn_case("global_seed_inside_forward", lambda: (R(3, 5),))
def global_seed_inside_forward(x):
    """torch.manual_seed inside the function (reproducible augmentation), then randn / rand_like /
    randperm / bernoulli: each call draws the same numbers, and leaves the generator as eager's."""
    torch.manual_seed(42)
    noise = torch.randn_like(x) * 0.1
    perm = torch.randperm(x.shape[0])
    mask = torch.bernoulli(torch.full_like(x, 0.5))
    return (x + noise)[perm] * mask, perm, torch.rand(2)


@fn_case("expanded_input_written_in_place", lambda i=0: (R(1, 4).expand(3, 4) if i == 2 else R(3, 4), R(3, 4)))
def expanded_input_written_in_place(e, y):
    """Writing in place into an expanded input (on the third call): eager raises ("more than one element ... refers to a
    single memory location"); the compiled function must raise too, not write a copy."""
    e.add_(y)
    return e


@fn_case("new_factories_follow_input", lambda i=0: (R(3, 4, dtype=torch.float64 if i == 2 else torch.float32),
                                                    I(0, 5, 3, dtype=torch.int32 if i == 2 else torch.int64)), ncalls=3)
def new_factories_follow_input(x, idx):
    """new_zeros / new_ones / new_full / new_tensor / zeros_like with dtype from the input, which
    changes between calls; an int index of another dtype."""
    z = x.new_zeros(x.shape[0], 2)
    t = x.new_tensor([1.0, 2.0])
    f = x.new_full((2,), 3)
    o = torch.ones(x.shape, dtype=x.dtype, device=x.device)
    return z + t, f, o * x, x[torch.arange(3), idx.long() % 4], idx + 1, x.new_empty(0).shape


class InferenceBlockCache(nn.Module):
    """A generation helper written with `with torch.inference_mode():` inside forward: a normal
    buffer (the KV cache) written in place inside the block, the block's result (an inference
    tensor) used after it by normal ops, and a part outside the block that requires grad."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("cache", torch.zeros(3, 4))

    def forward(self, x, pos):
        y = self.proj(x)
        with torch.inference_mode():
            z = self.proj(x).tanh()
            self.cache.index_copy_(0, pos, z)
            s = self.cache.sum(0)
        return y * 2, z + 1, s, (y * s.clone()).sum()


case("inference_mode_block_writes_cache", lambda i=0: (R(1, 4), torch.tensor([i % 3])), ncalls=4)(
    lambda: InferenceBlockCache())


@fn_case("inference_mode_false_inside_inference_call", lambda: (R(3, 4),), ncalls=3,
         context=lambda i: torch.inference_mode())
def inference_mode_false_inside_inference_call(x):
    """Called under inference_mode by the user; a `torch.inference_mode(False)` block inside makes
    normal tensors (a clone to write in place), the rest stays inference."""
    a = x * 2
    with torch.inference_mode(False):
        b = torch.ones(3, 4) * 3
        b.add_(1)
    return a, b, a.sum()


@fn_case("inference_tensor_written_outside_block", lambda i=0: (R(3, 4), i >= 2), ncalls=3)
def inference_tensor_written_outside_block(x, write):
    """A tensor made under inference_mode written in place after the block (the third call): eager
    raises "Inplace update to inference tensor outside InferenceMode"; so must the compiled call."""
    with torch.inference_mode():
        t = x * 2
    if write:
        t.add_(1)
    return t + x


# ============================================================================ optimizers and in-place library code
class OptimizerInside(nn.Module):
    """A train step that calls a real torch.optim optimizer made outside (SGD with nesterov and
    weight decay, then Adam with amsgrad), clip_grad_norm_, and an LR scheduler step."""

    def __init__(self, kind="sgd"):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))
        if kind == "sgd":
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
        else:
            self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-2, amsgrad=True)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)

    def forward(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
        self.opt.step()
        self.sched.step()
        return loss.detach(), norm, self.sched.get_last_lr()


case("torch_optim_sgd_step_inside", lambda: (R(6, 5), R(6, 2)), train=True, ncalls=4)(lambda: OptimizerInside("sgd"))
case("torch_optim_adam_step_inside", lambda: (R(6, 5), R(6, 2)), train=True, ncalls=4)(lambda: OptimizerInside("adam"))


class EmbeddingMaxNorm(nn.Module):
    """nn.Embedding(max_norm=...) renormalizes the looked-up rows of its weight in place on every
    forward (under no_grad): the weight after the call must match eager's."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, max_norm=1.0)
        with torch.no_grad():
            self.emb.weight.mul_(3)

    def forward(self, ids):
        return self.emb(ids).sum(1), F.embedding(ids, self.emb.weight * 1, max_norm=0.5, norm_type=1.0)


case("embedding_max_norm_renorm_in_place", lambda: (I(0, 10, 3, 4),))(lambda: EmbeddingMaxNorm())


@fn_case("index_put_duplicates_and_masked_scatter", lambda: (torch.zeros(6), I(0, 6, 10), R(3, 4), torch.rand(3, 4) > 0.5))
def index_put_duplicates_and_masked_scatter(counts, idx, x, m):
    """counts[idx] += 1 with duplicate indices (each duplicate writes the same value), index_put_
    with accumulate=True, masked_scatter_, scatter_ with a scalar and reduce='add'."""
    counts[idx] += 1
    acc = torch.zeros(6).index_put_((idx,), torch.ones(10), accumulate=True)
    y = x.clone().masked_scatter_(m, torch.arange(12.0).view(3, 4))
    z = torch.zeros(3, 6).scatter_(1, idx[:6].view(3, 2) % 6, 2.0, reduce="add")
    return counts, acc, y, z


@fn_case("unfold_overlapping_write_raises", lambda i=0: (R(10), i >= 2), ncalls=3)
def unfold_overlapping_write_raises(x, write):
    """Tensor.unfold makes overlapping windows (a view): reading them works; writing in place into
    the overlapping view (third call) raises in eager, so it must in the compiled call."""
    w = x.unfold(0, 4, 2)
    s = w.sum(1)
    if write:
        w.mul_(2)
    return s, w.mean(1)


@fn_case("param_data_swap_and_set", lambda: (R(3, 4),))
def param_data_swap_and_set(x):
    """Plain tensors swapped through .data and set_ of a tensor made inside."""
    a = torch.zeros(3, 4)
    a.data = x * 2
    b = torch.empty(0)
    b.set_(x.clone())
    return a + 1, b * 3


class BatchNormMomentumNone(nn.Module):
    """BatchNorm with momentum=None (cumulative average) and track_running_stats, and a
    SyncBatchNorm-free model converted to eval on the last call; also num_batches_tracked."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4, momentum=None)
        self.bn2 = nn.BatchNorm2d(3, affine=False)

    def forward(self, x, img):
        return self.bn(x), self.bn2(img).mean((2, 3))


case("batchnorm_momentum_none_then_eval", lambda: (R(5, 4), R(2, 3, 4, 4)), train=True, ncalls=4,
     between=lambda m, i: m.eval() if i == 3 else None)(lambda: BatchNormMomentumNone())


@fn_case("histc_bincount_unique_counts", lambda: (R(20), I(0, 5, 12)))
def histc_bincount_unique_counts(x, n):
    """Histograms and counts whose sizes depend on data (bincount, unique with counts) next to ones
    that do not (histc, bincount with minlength and weights)."""
    u, c = torch.unique(n, return_counts=True)
    return (torch.histc(x, bins=5, min=-2, max=2), torch.bincount(n, minlength=6), u, c,
            torch.bincount(n, weights=x[:12], minlength=5), n.unique_consecutive())


@fn_case("where_nonzero_masked_select_boolean_index", lambda: (R(4, 5), torch.rand(4, 5) > 0.5))
def where_nonzero_masked_select_boolean_index(x, m):
    """Data-dependent shapes a user writes all the time: x[m], masked_select, nonzero, where(m),
    argwhere, and a mean over the selected values."""
    sel = x[m]
    r, c = torch.where(m)
    return sel, x.masked_select(m), m.nonzero(), r, c, torch.argwhere(x > 0), sel.mean() if sel.numel() else x.sum() * 0


@fn_case("numpy_view_written_back", lambda: (R(3, 4),))
def numpy_view_written_back(x):
    """x.numpy() shares memory with x: a write through the array changes x (and y made from it),
    torch.from_numpy of the array shares it back; an in-place torch op on that is seen by x."""
    y = x * 1
    a = y.numpy()
    a[0, :] = 5.0
    t = torch.from_numpy(a)
    t.mul_(2)
    return y, t.sum(), a.mean()


@fn_case("numpy_array_argument_shared", lambda: (__import__("numpy").arange(6, dtype="float32").reshape(2, 3), R(2, 3)))
def numpy_array_argument_shared(arr, x):
    """A NumPy array argument wrapped by torch.from_numpy (memory shared with the caller's array):
    an in-place add on the tensor must change the caller's array as eager's does."""
    t = torch.from_numpy(arr)
    t.add_(x)
    return t * 2, arr.sum()


@fn_case("tensor_python_attribute_and_setstate", lambda: (R(3, 4),))
def tensor_python_attribute_and_setstate(x):
    """A Python attribute set on a tensor made in the function (t.tag), read back, returned."""
    t = x.clone()
    t.tag = "scaled"
    t.scale = 2.0
    return t * t.scale, t.tag


@fn_case("swap_tensors_inside", lambda: (R(3, 4), R(2, 2), R(3)))
def swap_tensors_inside(x, p, q):
    """torch.utils.swap_tensors on tensors made inside and on two arguments (the caller's swap)."""
    a = x * 2
    b = torch.zeros(3, 4)
    torch.utils.swap_tensors(a, b)
    torch.utils.swap_tensors(p, q)
    return a + 1, b + 1, p * 2


# ============================================================================ guards, round 3
class OptionalMask(nn.Module):
    """An optional mask given on some calls and None on others, a dict batch whose keys change,
    a tuple of varying length, a dropout p changed between calls (eval: identity, train: draws)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.0)

    def forward(self, batch, extras=(), mask=None):
        h = self.drop(self.lin(batch["x"]))
        if "bias" in batch:
            h = h + batch["bias"]
        if mask is not None:
            h = h.masked_fill(~mask, 0.0)
        for e in extras:
            h = h * e
        return h


def _optional_inputs(i=0):
    x = R(3, 4)
    batch = {"x": x, "bias": R(4)} if i in (1, 3) else {"x": x}
    extras = tuple(R(4) for _ in range(i % 3))
    mask = torch.rand(3, 4) > 0.3 if i >= 2 else None
    return batch, extras, mask


case("optional_inputs_vary_between_calls", _optional_inputs, train=True, ncalls=5,
     between=lambda m, i: setattr(m.drop, "p", 0.5) if i == 3 else None)(lambda: OptionalMask())


@fn_case("requires_grad_and_parameter_inputs_vary", lambda i=0: (
    nn.Parameter(R(3, 4)) if i == 3 else (R(3, 4).requires_grad_() if i == 2 else R(3, 4)), R(4, 2)), ncalls=4)
def requires_grad_and_parameter_inputs_vary(x, w):
    """The same argument as a plain tensor, one requiring grad, then an nn.Parameter: the outputs'
    requires_grad and the result type follow."""
    y = x @ w
    return y, y.sum(), type(x).__name__


class SubclassTensor(torch.Tensor):
    pass


@fn_case("tensor_subclass_argument", lambda: (R(3, 4).as_subclass(SubclassTensor), R(3, 4)))
def tensor_subclass_argument(s, x):
    """A torch.Tensor subclass (no __torch_function__ override) as an argument: results of ops on it
    are of the subclass in eager."""
    return s + x, (s * 2).sum(), x + 1


def _spd(i=0):
    a = torch.randn(4, 4)
    k = a @ a.T + 0.1 * torch.eye(4)
    if i in (0, 1, 4):
        k[0, 0] = -0.5   # not positive definite: cholesky raises
    return (k, R(4, 2))


@fn_case("cholesky_try_except_jitter", _spd, ncalls=6)
def cholesky_try_except_jitter(K, y):
    """GP code: try the Cholesky factor, add jitter where it fails (a data-dependent exception
    caught by the function), solve with the factor."""
    try:
        L = torch.linalg.cholesky(K)
        jitter = 0.0
    except RuntimeError:
        L = torch.linalg.cholesky(K + 10.0 * torch.eye(K.shape[0]))
        jitter = 10.0
    return torch.cholesky_solve(y, L), jitter


@fn_case("index_error_caught_on_some_calls", lambda i=0: (R(4, 3), torch.tensor([9, 9, 1, 2, 7, 0][i])), ncalls=6)
def index_error_caught_on_some_calls(x, i):
    """An index that is out of range on some calls, the IndexError caught and a default used."""
    try:
        v = x[i]
    except IndexError:
        v = torch.zeros(x.shape[1:])
    return v * 2


# =============================================================================== runner
def _tensors(obj, out):
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)
    return out


def _storage(t):
    try:
        return t.untyped_storage().data_ptr() if t.numel() else None
    except Exception:  # noqa: BLE001 - a tensor without storage
        return None


def alias_pattern(outs, args):
    """For every output tensor: the index of the argument tensor and of the first earlier output it
    shares storage with (None where none), and whether it is an inference tensor, so eager's and
    compiled aliasing can be compared."""
    o = _tensors(outs, [])
    a = _tensors(list(args), [])
    sa = [_storage(t) for t in a]
    so = [_storage(t) for t in o]
    pat = []
    for i, s in enumerate(so):
        ai = next((j for j, x in enumerate(sa) if s is not None and x == s), None)
        oi = next((j for j in range(i) if s is not None and so[j] == s), None)
        pat.append((ai, oi, o[i].is_inference()))
    return pat


def _np2t(obj):
    """NumPy arrays (arguments a case writes, outputs) as tensors for the comparison."""
    import numpy as np
    if isinstance(obj, np.ndarray):
        return ("ndarray", torch.from_numpy(obj.copy()))
    if isinstance(obj, np.generic):
        return ("numpy scalar", obj.item())
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_np2t(o) for o in obj)
    if isinstance(obj, dict) and type(obj) is dict:
        return {k: _np2t(v) for k, v in obj.items()}
    return obj


def _call_inputs(inputs, i):
    try:
        takes = len(inspect.signature(inputs).parameters) > 0
    except (TypeError, ValueError):
        takes = False
    return inputs(i) if takes else inputs()


def _global_state():
    """Process-wide modes a call may leave switched (torch.set_grad_enabled(False) called as a
    function, an autocast region left open): compared after eager's and the compiled call."""
    return (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.get_default_dtype())


def _set_global_state(st):
    torch.set_grad_enabled(st[0])
    torch.set_autocast_enabled("cpu", st[1])
    torch.set_autocast_dtype("cpu", st[2])
    torch.set_default_dtype(st[3])


def run_case(name, cases=None):
    import mlircap
    entry = next(c for c in (CASES if cases is None else cases) if c[0] == name)
    _, factory, inputs, train, extra = entry
    torch.manual_seed(0)
    ref = M.build_model(factory, train)
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    res = {"name": name, "status": "ok", "detail": "", "graphs": 0, "breaks": 0, "notes": [], "islands": []}
    caught = []
    eager_errors = 0
    for i in range(extra["ncalls"]):
        if extra["between"] is not None:
            extra["between"](ref, i)
            extra["between"](mine, i)
        seed = 1 if i < 2 else 2 + i
        torch.manual_seed(seed)
        args_e = M.build_inputs(_call_inputs, inputs, i)
        try:
            args_c = copy.deepcopy(args_e)
        except Exception:  # noqa: BLE001
            torch.manual_seed(seed)
            args_c = M.build_inputs(_call_inputs, inputs, i)
        err_e = err_c = None
        out_e = out_c = None
        with contextlib.redirect_stdout(io.StringIO()):
            ctx = extra["context"] or (lambda i: contextlib.nullcontext())
            M._seed_all(100 + i)
            st_e = st_c = None
            try:
                with ctx(i):
                    st0 = _global_state()
                    try:
                        out_e = ref(*args_e)
                    finally:
                        st_e = _global_state()
                        _set_global_state(st0)
                M.sync()   # eager's asynchronous CUDA errors are eager's
            except Exception as e:  # noqa: BLE001
                err_e = e
            if M.cuda_error(err_e):
                res["status"], res["detail"] = "n/a", f"eager fails on {M.DEVICE.type}: {M.cuda_error(err_e)}"
                return res
            rng_e = M._rng_states()
            M._seed_all(100 + i)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                try:
                    with ctx(i):
                        st0 = _global_state()
                        try:
                            out_c = fast(*args_c)
                        finally:
                            st_c = _global_state()
                            _set_global_state(st0)
                except Exception as e:  # noqa: BLE001
                    err_c = e
            caught += w
            rng_c = M._rng_states()
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
        d = M.diff(_np2t(out_e), _np2t(out_c)) or M.diff(_np2t(list(args_e)), _np2t(list(args_c)), "inputs after") or \
            M.diff(M.state(ref), M.state(mine), "state")
        if not d:
            pe, pc = alias_pattern(out_e, args_e), alias_pattern(out_c, args_c)
            if pe != pc:
                bad = next(j for j, (x, y) in enumerate(zip(pe, pc)) if x != y) if len(pe) == len(pc) else -1
                d = f"aliasing of output tensor {bad} (input, earlier output, is_inference): {pc[bad] if bad >= 0 else pc} " \
                    f"(eager {pe[bad] if bad >= 0 else pe})"
        if not d and st_e != st_c:
            d = f"the process state after the call (grad mode, autocast cpu on / dtype, default dtype) is {st_c} " \
                f"(eager {st_e})"
        if not d and not torch.equal(rng_e[0], rng_c[0]):
            d = "torch's generator state after the call differs from eager's"
        if d:
            res["status"] = "wrong"
            res["detail"] = f"call {i}: {d}"
            break
    if eager_errors == extra["ncalls"] and M.DEVICE.type != "cpu":   # written for the CPU
        res["status"], res["detail"] = "n/a", f"eager raises on {M.DEVICE.type}: {err_e!r:.200}"
    elif eager_errors == extra["ncalls"]:   # a case that tests nothing
        res["status"], res["detail"] = "error", f"the case is broken: eager raised on every call ({err_e!r:.200})"
    c = getattr(fast, "_call", None)
    variants = list(getattr(c, "variants", []) or [])
    res["graphs"] = len(getattr(fast, "graphs", []))
    res["breaks"] = max((getattr(v, "splits", len(getattr(v, "breaks", []))) for v in variants), default=0)
    res["variants"] = len(variants)
    res["notes"] = M._fallback_notes(fast, caught)
    if any(getattr(v, "eager", False) for v in variants):
        res["notes"].append("capture gave up: " + " ".join(str(next(
            (v.reason for v in variants if getattr(v, "eager", False)), "")).split())[:240])
    res["islands"] = list(dict.fromkeys(M._islands(caught)))
    if res["status"] == "ok" and res["notes"]:
        res["status"] = "fallback"
    elif res["status"] == "ok" and res["breaks"]:
        res["status"] = "breaks"
    return res


def worker_main(cases=None):
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    M.set_device(str(M.DEVICE))
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        t0 = time.perf_counter()
        try:
            r = run_case(name, cases)
        except Exception as e:  # noqa: BLE001
            r = {"name": name, "status": "error", "detail": f"runner: {type(e).__name__}: {e}"[:400],
                 "traceback": traceback.format_exc()[-3000:], "notes": [], "islands": [], "graphs": 0}
        r["seconds"] = round(time.perf_counter() - t0, 2)
        lost = M.cuda_lost()
        if lost:
            r["restart"] = True   # the parent replaces this worker before the next case
        out.write("@@RESULT " + json.dumps(r, default=str) + "\n")
        if lost:
            break


class Child(M.Child):
    script = os.path.abspath(__file__)   # the corpus script whose --worker runs the cases

    def start(self):
        self.p = subprocess.Popen([sys.executable, self.script, "--worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if not os.environ.get(
                                      "MODULES_STDERR") else None, text=True, bufsize=1, env=self.env,
                                  start_new_session=True)


CATS = ["ok", "breaks", "fallback", "wrong", "error", "crash", "timeout", "n/a"]


def _inference_ctx(i):
    return torch.inference_mode() if i == 1 else torch.no_grad()


def inference_cases(cases):
    """--inference: the cases that train nothing and set no context of their own, each call run
    under torch.no_grad() (call 1: torch.inference_mode()), as inference code calls a model.
    Library fast paths taken only without grad (nn.TransformerEncoder's nested tensors,
    MultiheadAttention's fused kernel) are then exercised."""
    out = []
    for name, factory, inputs, train, extra in cases:
        if not train and extra.get("context") is None:
            out.append((name, factory, inputs, train, dict(extra, context=_inference_ctx)))
    return out


def main(cases=None, script=None, doc=None):
    """The command line of this corpus, or of another one written with the same case() records
    (bench/modules6.py passes its CASES, its own path for the workers and its docstring)."""
    cases = CASES if cases is None else cases
    if os.environ.get("MODULES_INFERENCE") == "1":   # (--inference, also in the workers)
        cases = inference_cases(cases)
    ap = argparse.ArgumentParser(description=doc or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="", help="comma-separated substrings of case names")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--device", default="cpu", help="run the cases on this device (as bench/modules.py --device)")
    ap.add_argument("--case", help="run one case in this process and print the result")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the notes of fallbacks too")
    ap.add_argument("--inference", action="store_true",
                    help="run the cases that train nothing under torch.no_grad() / torch.inference_mode()")
    args = ap.parse_args()
    if args.inference and os.environ.get("MODULES_INFERENCE") != "1":
        os.environ["MODULES_INFERENCE"] = "1"
        cases = inference_cases(cases)
    if args.worker:
        return worker_main(cases)
    M.set_device(args.device)
    if args.case:
        r = run_case(args.case, cases)
        print(r.pop("traceback", ""))
        print(json.dumps(r, indent=1, default=str))
        return
    filt = [f for f in args.filter.split(",") if f]
    names = [c[0] for c in cases if not filt or any(f in c[0] for f in filt)]
    assert len({c[0] for c in cases}) == len(cases), "duplicate case names"
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MODULES_DEVICE"] = str(M.DEVICE)
    results, todo, lock = {}, list(names), threading.Lock()
    t_start = time.perf_counter()

    def drive():
        child = Child(env)
        if script:
            child.script = os.path.abspath(script)
        while True:
            with lock:
                if not todo:
                    break
                name = todo.pop(0)
            r = child.run(name, args.timeout)
            with lock:
                results[name] = r
                print(f"[{len(results):3d}/{len(names)}] {r['status']:8s} {name} {r.get('seconds', '')}s "
                      f"graphs {r.get('graphs', '?')} breaks {r.get('breaks', '?')} {r.get('detail', '')[:160]}", flush=True)
        child.kill()

    threads = [threading.Thread(target=drive) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\nmlircap.compile ({M.DEVICE}) vs eager, torch {torch.__version__}, {len(names)} cases, "
          f"{time.perf_counter() - t_start:.0f} s")
    print("  " + "  ".join(f"{k} {sum(r['status'] == k for r in results.values())}" for k in CATS))
    print("  (ok: compiled, one graph, correct; breaks: compiled in several graphs, correct; fallback: correct, "
          "some part ran eagerly)")
    for k in ["wrong", "crash", "timeout", "error"] + (["fallback", "breaks"] if args.verbose else []):
        rows = [r for n in names if (r := results.get(n)) and r["status"] == k]
        if rows:
            print(f"\n{k.upper()}:")
            for r in rows:
                print(f"  {r['name']}: {r.get('detail', '')} (graphs {r.get('graphs')}, breaks {r.get('breaks')})")
                for note in r.get("notes", [])[:3]:
                    print(f"      note: {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
