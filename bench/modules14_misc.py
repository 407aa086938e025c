"""bench/modules14.py's fifth part (same runner, its CASES appended there): idioms of library
code around the model: timm's `torch.jit.is_scripting()` / `torch.compiler.is_compiling()`
checks, metric accumulators kept in buffers across calls (a confusion matrix by bincount,
defaultdict(list) of per-call statistics), cache keys formatted from shapes, helpers written as
generators, StopIteration caught around next(), autocast regions inside forward, a
`@torch.no_grad()` method, inputs written in place through boolean masks, bucketize against a
boundary buffer, nan-aware reductions; inputs written through views and returned, integer
floor division / wrap-around / promotion, ties in sort / argmax / unique, float64 inputs mixed
with Python scalars, position ids from left-padded attention masks."""
from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


class TimmChecks(nn.Module):
    """timm's guards around fused paths: `torch.jit.is_scripting()`, `torch.compiler.
    is_compiling()`, `torch.jit.is_tracing()`; grad checkpointing off."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.grad_checkpointing = False

    def forward(self, x):
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = torch.utils.checkpoint.checkpoint(self.fc, x, use_reentrant=False)
        else:
            x = self.fc(x)
        if torch.compiler.is_compiling() or torch.jit.is_tracing():
            return F.gelu(x)
        return F.gelu(x, approximate="none")


case("timm_is_scripting_is_compiling_checks", lambda: (R(2, 4),))(lambda: TimmChecks())


class ConfusionMeter(nn.Module):
    """A confusion matrix accumulated in a buffer across calls by bincount of target * C + pred,
    per-class IoU computed from it with nan for absent classes, averaged by nanmean."""

    def __init__(self, c=4):
        super().__init__()
        self.c = c
        self.register_buffer("cm", torch.zeros(c, c, dtype=torch.long))

    def forward(self, logits, target):
        pred = logits.argmax(1)
        valid = target != 255
        idx = target[valid] * self.c + pred[valid]
        self.cm += torch.bincount(idx, minlength=self.c ** 2).view(self.c, self.c)
        inter = self.cm.diag().float()
        union = self.cm.sum(0).float() + self.cm.sum(1).float() - inter
        iou = torch.where(union > 0, inter / union.clamp(min=1), torch.full_like(inter, float("nan")))
        return iou.nanmean(), iou


def _seg_target(i=0):
    t = I(0, 4, 2, 5, 5)
    t[:, 0] = 255
    return R(2, 4, 5, 5), t


case("confusion_matrix_bincount_buffer_across_calls", _seg_target, ncalls=4)(lambda: ConfusionMeter())


class StatsLogger(nn.Module):
    """Per-call statistics appended to a defaultdict(list) the module keeps (a training
    monitor), the running mean returned."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.stats = defaultdict(list)

    def forward(self, x):
        h = self.fc(x)
        self.stats["mean"].append(h.mean().item())
        self.stats["max"].append(h.abs().max().item())
        return h, sum(self.stats["mean"]) / len(self.stats["mean"]), len(self.stats["max"])


case("defaultdict_list_stats_appended_per_call", lambda: (R(2, 3),), ncalls=4)(lambda: StatsLogger())


class ShapeKeyCache(nn.Module):
    """Relative position indices cached in a dict under f"{h}x{w}" keys, built on a miss."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(49, 2) * 0.1)
        self.cache = {}

    def rel_index(self, h, w):
        key = f"{h}x{w}"
        if key not in self.cache:
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            c = torch.stack([ys.flatten(), xs.flatten()])
            rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + torch.tensor([h - 1, w - 1])
            self.cache[key] = rel[..., 0] * (2 * w - 1) + rel[..., 1]
        return self.cache[key]

    def forward(self, x):
        b, n, _ = x.shape
        h = w = int(n ** 0.5)
        bias = self.table[self.rel_index(h, w)].permute(2, 0, 1)
        att = (x @ x.transpose(1, 2)).unsqueeze(1) + bias
        return att.softmax(-1).mean(1) @ x


case("fstring_shape_key_index_cache", lambda i=0: (R(2, [9, 9, 16, 9][i], 3),), ncalls=4)(lambda: ShapeKeyCache())


def _windows(x, size):
    for i in range(0, x.shape[-1] - size + 1, size):
        yield x[..., i:i + size]


@fn_case("generator_helper_and_stopiteration", lambda i=0: (R(2, 12 + 4 * (i // 2)),), ncalls=4)
def windowed(x):
    outs = [w.softmax(-1) * w for w in _windows(x, 4)]
    it = iter(outs)
    first = next(it)
    try:
        while True:
            first = first + next(it)
    except StopIteration:
        pass
    return first, len(outs)


class AutocastInside(nn.Module):
    """A bfloat16 autocast region inside forward for the matmuls, the loss in float32 outside."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.relu(self.a(x))
            logits = self.b(h)
        return F.cross_entropy(logits.float(), y), logits.dtype


case("autocast_bf16_region_inside_forward", lambda: (R(4, 8), I(0, 3, 4)))(lambda: AutocastInside())


class NoGradMethod(nn.Module):
    """A `@torch.no_grad()` helper method (prototype update) called from forward in grad mode."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 3)
        self.register_buffer("protos", torch.zeros(2, 3))

    @torch.no_grad()
    def update(self, z, y):
        for c in range(self.protos.shape[0]):
            m = y == c
            if m.any():
                self.protos[c] = 0.9 * self.protos[c] + 0.1 * z[m].mean(0)

    def forward(self, x, y):
        z = self.enc(x)
        self.update(z, y)
        return -torch.cdist(z, self.protos)


case("no_grad_decorated_method_prototype_update", lambda: (R(6, 4), I(0, 2, 6)), ncalls=4)(lambda: NoGradMethod())


@fn_case("input_written_through_boolean_mask_and_bucketize", lambda: (R(3, 6), torch.tensor([-1.0, 0.0, 1.0])))
def mask_write(x, bounds):
    x[x.abs() > 1.5] = 0.0
    b = torch.bucketize(x, bounds)
    x.masked_fill_(b == 0, -1.0)
    return b, x.nan_to_num().sum()


@fn_case("nan_aware_reductions_over_masked_values", lambda: (R(4, 5), U_mask()))
def nan_reduce(x, m):
    v = torch.where(m, x, torch.full_like(x, float("nan")))
    return v.nanmean(1), torch.nansum(v, 0), v.nanmedian(), torch.nan_to_num(v, nan=0.0).amax(1)


def U_mask():  # noqa: N802
    m = torch.rand(4, 5) > 0.3
    m[:, 0] = True
    return m


# ============================================================================ values and views
@fn_case("views_of_inputs_written_and_returned", lambda: (R(4, 6), R(6)))
def view_writes(x, b):
    top = x[:2]
    top.add_(b)              # written through a view of the input
    col = x[:, ::2]
    col.mul_(0.5)
    t = x.t()
    return t, top.sum(0), x.diagonal(), b.unsqueeze(0).expand(3, -1)


@fn_case("integer_semantics_floor_div_overflow_promotion", lambda: (I(-50, 50, 8), I(1, 7, 8), I(0, 250, 8, dtype=torch.uint8)))
def int_semantics(a, b, u):
    q = a // b
    r = a % b
    t = torch.div(a, b, rounding_mode="trunc")
    s = (u + 10) * 2                   # uint8 wraps
    f = a / 3                          # true division promotes to float
    m = (a * 3.5).to(torch.int32)      # truncation toward zero
    return q, r, t, s, f, m, (u.sum(), u.to(torch.int64).cumsum(0))


@fn_case("ties_stable_sort_argmax_unique", lambda: (torch.tensor([3., 1., 3., 2., 1., 3.]), I(0, 3, 10)))
def ties(x, labels):
    s, i = torch.sort(x, stable=True, descending=True)
    am = x.argmax()
    u, inv, cnt = torch.unique(labels, return_inverse=True, return_counts=True)
    mode = torch.bincount(labels).argmax()
    return s, i, am, u, inv, cnt, mode, torch.cummax(x, 0).indices


@fn_case("float64_inputs_with_python_scalars_and_where", lambda: (R(3, 4, dtype=torch.float64), R(3, 4)))
def f64_mix(x64, x32):
    y = x64 * 0.1 + x32                       # promotes to float64
    z = torch.where(x32 > 0, x32, 0.0)        # a Python float stays float32
    w = torch.where(x64 > 0, 1, -1)           # int scalars: int64
    return y, z, w, (x32.double() - x64).abs().max(), torch.tensor(2.5) * x32


class CumBoolMask(nn.Module):
    """Padding masks as cumsum over bools (positions ids from attention masks, HF style)."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(16, 4)

    def forward(self, attn):
        pos_ids = attn.long().cumsum(-1) - 1
        pos_ids = pos_ids.masked_fill(attn == 0, 1)
        lengths = attn.sum(-1)
        last = torch.gather(pos_ids, 1, (lengths - 1).clamp(min=0).unsqueeze(1))
        return self.pos(pos_ids), last.squeeze(1), attn.flip(-1).cumprod(-1).sum(-1)


def _left_pad():
    m = torch.ones(3, 7, dtype=torch.long)
    m[0, :2] = 0
    m[2, :5] = 0
    return (m,)


case("position_ids_from_left_padded_attention_mask", _left_pad)(lambda: CumBoolMask())
