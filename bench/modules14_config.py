"""bench/modules14.py's fourth part (same runner, its CASES appended there): outputs as
NamedTuple / dataclass / OrderedDict subclass, modules configured by Enum / IntEnum / frozen
dataclasses / SimpleNamespace and those configurations changed between calls, an lru_cache'd
mask helper, and stateful or decoding modules (a streaming conv's context buffer, a CRF's
Viterbi backtrace in Python, sparsemax, BERT's 80/10/10 masking from a generator)."""
from __future__ import annotations

import enum
import functools
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ outputs
class Detections(NamedTuple):
    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor


@fn_case("namedtuple_output_with_attribute_reads", lambda: (R(2, 5, 4), R(2, 5, 3)))
def namedtuple_out(box_reg, cls_logits):
    probs = cls_logits.softmax(-1)
    s, l = probs.max(-1)  # noqa: E741
    d = Detections(box_reg.sigmoid(), s, l)
    d = d._replace(scores=d.scores * (d.labels > 0))
    return d, d.boxes.sum() + len(d)


@dataclass
class EncOutput:
    last_hidden: torch.Tensor
    pooled: torch.Tensor
    hidden_states: list = field(default_factory=list)
    attn: torch.Tensor | None = None


class DictOut(OrderedDict):
    """transformers' ModelOutput in little: an OrderedDict whose keys are attributes too."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None


class DataclassOutEncoder(nn.Module):
    def __init__(self, return_all=False):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(3))
        self.return_all = return_all

    def forward(self, x):
        out = EncOutput(x, x.mean(1))
        for layer in self.layers:
            x = torch.tanh(layer(x)) + x
            if self.return_all:
                out.hidden_states.append(x)
        out.last_hidden, out.pooled = x, x.mean(1)
        res = DictOut(logits=out.pooled @ self.layers[0].weight.t())
        res["hidden"] = out.last_hidden
        return out, res, res.logits.shape[-1]


case("dataclass_and_ordereddict_subclass_outputs", lambda: (R(2, 3, 6),))(lambda: DataclassOutEncoder())
case("dataclass_output_flag_switched_between_calls", lambda: (R(2, 3, 6),), ncalls=4,
     between=lambda m, i: setattr(m, "return_all", i % 2 == 1))(lambda: DataclassOutEncoder())


# ============================================================================ configuration
class Act(enum.Enum):
    GELU = "gelu"
    SILU = "silu"
    RELU = "relu"


class Norm(enum.IntEnum):
    NONE = 0
    LAYER = 1
    RMS = 2


@dataclass(frozen=True)
class BlockCfg:
    dim: int = 8
    act: Act = Act.GELU
    norm: Norm = Norm.LAYER
    residual: bool = True


class EnumBlock(nn.Module):
    """A block built from a frozen dataclass of Enums; forward compares `self.cfg.norm is Norm.RMS`
    and looks the activation up in a dict keyed by the Enum."""

    ACTS = {Act.GELU: F.gelu, Act.SILU: F.silu, Act.RELU: F.relu}

    def __init__(self, cfg=BlockCfg()):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.dim, cfg.dim)
        self.ln = nn.LayerNorm(cfg.dim)

    def forward(self, x):
        h = x
        if self.cfg.norm is Norm.LAYER:
            h = self.ln(h)
        elif self.cfg.norm == Norm.RMS:
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = self.ACTS[self.cfg.act](self.fc(h))
        return x + h if self.cfg.residual else h


def _swap_cfg(m, i):
    m.cfg = [BlockCfg(), BlockCfg(), BlockCfg(act=Act.SILU, norm=Norm.RMS), BlockCfg(residual=False, norm=Norm.NONE)][i]


case("enum_frozen_dataclass_cfg_swapped_between_calls", lambda: (R(2, 4, 8),), ncalls=4, between=_swap_cfg)(
    lambda: EnumBlock())


class IntEnumDims(nn.Module):
    """IntEnum members used as dimensions and indices (a layout enum of a channels axis)."""

    class Ax(enum.IntEnum):
        B = 0
        C = 1
        T = 2

    def forward(self, x):
        m = x.mean(dim=self.Ax.T, keepdim=True)
        sel = x.select(self.Ax.C, 0)
        return x.transpose(self.Ax.C, self.Ax.T) - m.transpose(1, 2), sel * x.shape[self.Ax.B]


case("intenum_as_dims_and_indices", lambda: (R(2, 3, 5),))(lambda: IntEnumDims())


class NsModel(nn.Module):
    """Hyper-parameters in a SimpleNamespace (argparse-style `args`), read in forward, changed
    between calls (dropout off, another scale)."""

    def __init__(self):
        super().__init__()
        self.args = types.SimpleNamespace(scale=2.0, use_skip=True, pool="mean")
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        h = self.fc(x) * self.args.scale
        if self.args.use_skip:
            h = h + x
        return h.mean(1) if self.args.pool == "mean" else h.amax(1)


def _ns_change(m, i):
    if i == 2:
        m.args.scale = 0.5
    if i == 3:
        m.args.pool, m.args.use_skip = "max", False


case("simplenamespace_args_changed_between_calls", lambda: (R(2, 3, 5),), ncalls=4, between=_ns_change)(
    lambda: NsModel())


@functools.lru_cache(maxsize=8)
def _causal_mask(n):
    return torch.full((n, n), float("-inf")).triu(1)


@fn_case("lru_cached_mask_helper_per_length", lambda i=0: (R(2, 3 + i % 2, 4),), ncalls=4)
def lru_mask_attention(x):
    s = x @ x.transpose(1, 2) + _causal_mask(x.shape[1])
    return s.softmax(-1) @ x


# ============================================================================ stateful / decoding
class StreamingConv(nn.Module):
    """A streaming causal conv: the last k-1 frames of the previous chunk kept in a buffer,
    prepended to the next chunk; `reset()` between calls zeroes it."""

    def __init__(self, c=3, k=3):
        super().__init__()
        self.conv = nn.Conv1d(c, c, k)
        self.register_buffer("ctx", torch.zeros(1, c, k - 1))

    def reset(self):
        self.ctx.zero_()

    def forward(self, chunk):
        x = torch.cat([self.ctx.expand(chunk.shape[0], -1, -1), chunk], -1)
        self.ctx.copy_(x[:1, :, -(self.ctx.shape[-1]):])
        return self.conv(x)


case("streaming_conv_context_buffer_reset_between", lambda: (R(1, 3, 4),), ncalls=5,
     between=lambda m, i: m.reset() if i == 3 else None)(lambda: StreamingConv())


class CRFViterbi(nn.Module):
    """A linear-chain CRF's Viterbi decode: max over previous tags per step with backpointers in a
    Python list, the best path traced back in reversed order with .item() into a list per sequence."""

    def __init__(self, k=4):
        super().__init__()
        self.trans = nn.Parameter(torch.randn(k, k))
        self.start, self.end = nn.Parameter(torch.randn(k)), nn.Parameter(torch.randn(k))

    def forward(self, em):
        score = self.start + em[:, 0]
        bps = []
        for t in range(1, em.shape[1]):
            s = score.unsqueeze(2) + self.trans + em[:, t].unsqueeze(1)
            score, bp = s.max(1)
            bps.append(bp)
        score = score + self.end
        best_score, last = score.max(1)
        paths = []
        for b in range(em.shape[0]):
            tag = last[b].item()
            path = [tag]
            for bp in reversed(bps):
                tag = bp[b, tag].item()
                path.append(tag)
            paths.append(path[::-1])
        return best_score, paths


case("crf_viterbi_backpointers_python_backtrace", lambda: (R(2, 5, 4),))(lambda: CRFViterbi())


@fn_case("sparsemax_sort_cumsum_support", lambda: (R(3, 7) * 2,))
def sparsemax(z):
    zs, _ = z.sort(-1, descending=True)
    rng = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cs = zs.cumsum(-1)
    support = 1 + rng * zs > cs
    k = support.sum(-1, keepdim=True)
    tau = (cs.gather(-1, k - 1) - 1) / k.to(z.dtype)
    return torch.clamp(z - tau, min=0)


@fn_case("mlm_masking_80_10_10_special_tokens_generator", lambda: (I(5, 30, 3, 10),))
def mlm_mask(ids, mask_id=4, vocab=30, prob=0.15):
    g = torch.Generator().manual_seed(0)
    labels = ids.clone()
    special = (ids == 5) | (torch.arange(ids.shape[1]) == 0)
    pm = torch.full(ids.shape, prob).masked_fill(special, 0.0)
    masked = torch.bernoulli(pm, generator=g).bool()
    labels[~masked] = -100
    rep = torch.bernoulli(torch.full(ids.shape, 0.8), generator=g).bool() & masked
    ids = ids.clone()
    ids[rep] = mask_id
    rnd = torch.bernoulli(torch.full(ids.shape, 0.5), generator=g).bool() & masked & ~rep
    ids[rnd] = torch.randint(vocab, ids.shape, generator=g)[rnd]
    return ids, labels
