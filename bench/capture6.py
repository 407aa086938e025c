"""Sixth capture corpus (issue 11, item 4): real-world-style modules in idioms capture.py ..
capture5.py use little or not at all: whole training loops inside the function (several
optimizer steps, a scheduler stepped per iteration, grads cleared by hand with `p.grad = None`,
gradient clipping, an EMA teacher under no_grad), torch.no_grad / enable_grad / inference_mode /
set_grad_enabled blocks and decorators, CPU autocast regions, contextlib.contextmanager helpers
that change and restore module state, class-level cache dicts keyed by shape, @torch.jit.unused
and @torch.compiler.disable helpers, functools.lru_cache / cached_property helpers, walrus
assignments, match statements over shapes and configs, zip / enumerate / itertools over
ModuleLists, nested closures with nonlocal counters, exceptions used for control flow, and
einops-style patterns ("b (h d) t -> b h t d") parsed by hand into reshape / permute.

    PYTHONPATH=python python bench/capture_all.py --jobs 1 --corpus capture6

Cases are registered as capture5.py's are (corpus_cases.registrars): (name, factory, inputs,
train, extra); inputs may take the call index."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import re
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ===================================================================== training loops inside
class InnerTrainLoop(nn.Module):
    """Two optimizer steps per call (a loop over micro-steps: zero_grad, loss, backward,
    clip_grad_norm_, step, scheduler step), the losses collected as floats."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 3))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-2, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=10)

    def forward(self, x, y):
        losses = []
        for _ in range(2):
            self.opt.zero_grad()
            loss = F.cross_entropy(self.net(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
            self.opt.step()
            self.sched.step()
            losses.append(loss.item())
        return torch.tensor(losses), self.net(x).detach()


case("c6_inner_train_loop_adamw_cosine", lambda: (R(8, 6), I(0, 3, 8)), train=True)(lambda: InnerTrainLoop())


class ManualGradNoneSGD(nn.Module):
    """A manual SGD step written as research code does: grads cleared with `p.grad = None` in a
    loop after the update, the update under torch.no_grad, the loss returned detached."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(5, 10), nn.Linear(10, 1)

    def forward(self, x, y):
        loss = F.mse_loss(self.fc2(torch.tanh(self.fc1(x))), y)
        loss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p.add_(p.grad, alpha=-0.05)
                p.grad = None
        return loss.detach(), self.fc2.weight.clone()


case("c6_manual_sgd_grad_set_to_none_in_loop", lambda: (R(7, 5), R(7, 1)), train=True)(lambda: ManualGradNoneSGD())


class EmaTeacherNoGrad(nn.Module):
    """A student / EMA-teacher pair (BYOL / DINO style): the teacher updated by
    torch._foreach_mul_ / _foreach_add_ under no_grad, its output under no_grad, a cosine loss."""

    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.m = 0.9

    def forward(self, a, b):
        with torch.no_grad():
            tp, sp = list(self.teacher.parameters()), list(self.student.parameters())
            torch._foreach_mul_(tp, self.m)
            torch._foreach_add_(tp, sp, alpha=1 - self.m)
            t = F.normalize(self.teacher(b), dim=-1)
        s = F.normalize(self.student(a), dim=-1)
        return 2 - 2 * (s * t).sum(-1).mean()


case("c6_ema_teacher_foreach_no_grad", lambda: (R(4, 8), R(4, 8)), train=True)(lambda: EmaTeacherNoGrad())


class EnableGradScoreInNoGrad(nn.Module):
    """An energy model's score (d energy / d x) taken with torch.enable_grad() inside a call
    made under torch.no_grad (Langevin sampling step), the input cut and re-marked as a leaf."""

    def __init__(self):
        super().__init__()
        self.energy = nn.Sequential(nn.Linear(4, 16), nn.SiLU(), nn.Linear(16, 1))

    def forward(self, x):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            e = self.energy(x).sum()
            (g,) = torch.autograd.grad(e, x)
        return x.detach() - 0.1 * g + 0.01 * torch.ones_like(x)


case("c6_enable_grad_score_langevin_under_no_grad", lambda: (R(5, 4),),
     context=lambda i: torch.no_grad())(lambda: EnableGradScoreInNoGrad())


class InferenceModeStats(nn.Module):
    """Running statistics of the input computed in an inference_mode block (a normalizer's
    update), then used, cloned, by the differentiable path."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.register_buffer("mean", torch.zeros(6))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        with torch.inference_mode():
            m = x.mean(0)
            n = x.shape[0]
        with torch.no_grad():
            self.mean.mul_(self.count / (self.count + n)).add_(m.clone() * n / (self.count + n))
            self.count.add_(n)
        return self.fc(x - self.mean)


case("c6_inference_mode_stats_then_no_grad_update", lambda: (R(4, 6),), ncalls=4)(lambda: InferenceModeStats())


class SetGradEnabledTraining(nn.Module):
    """`with torch.set_grad_enabled(self.training):` around the backbone and a helper decorated
    with @torch.no_grad() computing a target."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    @torch.no_grad()
    def target(self, x):
        return x.softmax(-1).argmax(-1)

    def forward(self, x):
        with torch.set_grad_enabled(self.training):
            h = torch.relu(self.backbone(x))
        logits = self.head(h)
        return F.cross_entropy(logits, self.target(logits)), h.requires_grad


case("c6_set_grad_enabled_training_no_grad_decorator", lambda: (R(6, 8),), train=True)(
    lambda: SetGradEnabledTraining())


# ===================================================================== autocast regions
class AutocastMixedHead(nn.Module):
    """A CPU bfloat16 autocast region around the matmuls, a nested autocast(enabled=False)
    block for the softmax in float32, the output cast back."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            s = self.q(x) @ self.k(x).transpose(-1, -2)
            with torch.autocast("cpu", enabled=False):
                p = torch.softmax(s.float() / math.sqrt(8), dim=-1)
        return (p @ x).float(), s.dtype


case("c6_autocast_bf16_nested_disabled_softmax", lambda: (R(2, 5, 8),))(lambda: AutocastMixedHead())


# ===================================================================== contextmanager helpers
class TemperatureScope(nn.Module):
    """A contextlib.contextmanager helper that sets a module attribute (temperature) for a
    block and restores it in `finally`."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.temperature = 1.0

    @contextlib.contextmanager
    def temperature_as(self, t):
        old = self.temperature
        self.temperature = t
        try:
            yield self
        finally:
            self.temperature = old

    def logits(self, x):
        return self.fc(x) / self.temperature

    def forward(self, x):
        hard = self.logits(x).softmax(-1)
        with self.temperature_as(4.0):
            soft = self.logits(x).softmax(-1)
        return F.kl_div(hard.log(), soft, reduction="batchmean"), self.temperature


case("c6_contextmanager_temperature_restored", lambda: (R(3, 6),))(lambda: TemperatureScope())


@contextlib.contextmanager
def _eval_mode(module):
    was = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was)


class EvalModeScope(nn.Module):
    """A contextmanager putting a dropout / batch-norm submodule in eval mode for a second,
    deterministic pass (consistency regularization), training mode restored after."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.0), nn.Linear(12, 3))

    def forward(self, x):
        a = self.body(x)
        with _eval_mode(self.body):
            b = self.body(x)
        return a, b, self.body.training


case("c6_contextmanager_eval_mode_second_pass", lambda: (R(5, 6),), train=True)(lambda: EvalModeScope())


# ===================================================================== caches
class SinusoidalClassCache(nn.Module):
    """Sinusoidal position tables cached in a class-level dict keyed by (length, dim), filled
    on first use (as many repositories do to share the tables between instances)."""
    _TABLES: dict = {}

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @classmethod
    def table(cls, n, d):
        key = (n, d)
        if key not in cls._TABLES:
            pos = torch.arange(n).float()[:, None]
            inv = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
            t = torch.zeros(n, d)
            t[:, 0::2], t[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
            cls._TABLES[key] = t
        return cls._TABLES[key]

    def forward(self, x):
        return self.fc(x + self.table(x.shape[1], x.shape[2]))


case("c6_class_level_cache_dict_pos_table", lambda: (R(2, 5, 8),))(lambda: SinusoidalClassCache())


@functools.lru_cache(maxsize=None)
def _window_sizes(n, levels):
    return tuple(max(1, n // (2 ** i)) for i in range(levels))


class LruCachePyramid(nn.Module):
    """Pooling window sizes from a functools.lru_cache'd helper of Python ints (a pyramid
    pooling head), the pooled features concatenated."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4 * 3, 5)

    def forward(self, x):
        feats = [F.adaptive_avg_pool1d(x, s).mean(-1) for s in _window_sizes(x.shape[-1], 3)]
        return self.proj(torch.cat(feats, -1))


case("c6_lru_cache_int_helper_pyramid_pool", lambda: (R(2, 4, 16),))(lambda: LruCachePyramid())


class CachedPropertyConfig(nn.Module):
    """functools.cached_property computing a derived Python config (head dim, scale) once."""

    def __init__(self):
        super().__init__()
        self.dim, self.heads = 8, 2
        self.qkv = nn.Linear(8, 24)

    @functools.cached_property
    def head_dim(self):
        return self.dim // self.heads

    @functools.cached_property
    def scale(self):
        return self.head_dim ** -0.5

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).unbind(2)
        a = torch.einsum("bqhd,bkhd->bhqk", q, k).mul(self.scale).softmax(-1)
        return torch.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, self.dim)


case("c6_cached_property_head_dim_scale", lambda: (R(2, 4, 8),))(lambda: CachedPropertyConfig())


class ShapeKeyedBufferCache(nn.Module):
    """A per-instance dict of causal masks keyed by sequence length (dict.setdefault with the
    mask built eagerly each time, as quick research code does), used as an additive bias."""

    def __init__(self):
        super().__init__()
        self.masks = {}
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        t = x.shape[1]
        mask = self.masks.setdefault(t, torch.full((t, t), float("-inf")).triu(1))
        s = x @ x.transpose(1, 2) + mask
        return self.fc(s.softmax(-1) @ x)


case("c6_setdefault_mask_cache_by_length", lambda: (R(2, 5, 6),))(lambda: ShapeKeyedBufferCache())


# ===================================================================== decorated helpers
class JitUnusedHelper(nn.Module):
    """A @torch.jit.unused debug helper (Python-only code TorchScript would skip) called from
    forward only while a flag is on, and a @torch.jit.ignore helper always called."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.debug = False

    @torch.jit.unused
    def check(self, x):
        if not torch.isfinite(x).all():
            raise ValueError("non-finite activations")

    @torch.jit.ignore
    def scale(self, x):
        return x * 0.5

    def forward(self, x):
        h = self.fc(x)
        if self.debug:
            self.check(h)
        return self.scale(h)


case("c6_jit_unused_and_ignore_helpers", lambda: (R(3, 6),))(lambda: JitUnusedHelper())


@torch.compiler.disable
def _host_side_stats(t):
    return {"mean": t.mean(), "absmax": t.abs().max()}


class CompilerDisabledHelper(nn.Module):
    """A helper decorated with @torch.compiler.disable (meant to run eagerly under
    torch.compile) computing statistics that the forward returns."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        stats = _host_side_stats(h)
        return h * 2, stats


case("c6_compiler_disable_helper_stats", lambda: (R(3, 6),))(lambda: CompilerDisabledHelper())


class WarningsCatchBlock(nn.Module):
    """A `warnings.catch_warnings()` block around a call that may warn, and a warning issued
    when a config flag is off (library code that warns once)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.legacy = True

    def forward(self, x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = self.fc(x)
            if self.legacy:
                warnings.warn("legacy path", DeprecationWarning)
        return F.gelu(h)


case("c6_warnings_catch_block", lambda: (R(3, 6),))(lambda: WarningsCatchBlock())


# ===================================================================== syntax: walrus, match
class WalrusGates(nn.Module):
    """Walrus assignments in conditions and comprehensions over shapes and Python values."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.skip = {1}

    def forward(self, x):
        if (d := x.shape[-1]) % 2 == 0:
            x = x * (d ** -0.5)
        outs = [y for i, layer in enumerate(self.layers) if i not in self.skip and (y := layer(x)) is not None]
        if (n := len(outs)) > 1:
            outs.append(outs[0] / n)
        return torch.stack(outs).sum(0)


case("c6_walrus_shape_and_comprehension", lambda: (R(3, 8),))(lambda: WalrusGates())


class MatchShapes(nn.Module):
    """A match statement over the input's shape (sequence / image / flat inputs, class patterns
    with guards) and over a config string."""

    def __init__(self, pool="mean"):
        super().__init__()
        self.fc = nn.Linear(6, 3)
        self.pool = pool

    def forward(self, x):
        match tuple(x.shape):
            case (_, _, h, w) if h == w:
                x = x.flatten(2).transpose(1, 2)
            case (_, t, _) if t > 0:
                pass
            case (_, _):
                x = x[:, None]
            case _:
                raise ValueError(x.shape)
        match self.pool:
            case "mean":
                x = x.mean(1)
            case "max":
                x = x.amax(1)
            case "cls":
                x = x[:, 0]
        return self.fc(x)


case("c6_match_shape_patterns_mean", lambda i: (R(2, 6, 3, 3),) if i % 2 == 0 else (R(2, 4, 6),), ncalls=4)(
    lambda: MatchShapes("mean"))
case("c6_match_shape_patterns_flat_max", lambda: (R(4, 6),))(lambda: MatchShapes("max"))


# ===================================================================== iteration over ModuleLists
class ZipLongestHeads(nn.Module):
    """itertools.zip_longest of two ModuleLists of different lengths (missing partners skipped),
    enumerate(start=1) depth scaling, and itertools.accumulate of outputs."""

    def __init__(self):
        super().__init__()
        self.a = nn.ModuleList(nn.Linear(6, 6) for _ in range(3))
        self.b = nn.ModuleList(nn.Linear(6, 6) for _ in range(2))

    def forward(self, x):
        outs = []
        for depth, (la, lb) in enumerate(itertools.zip_longest(self.a, self.b), start=1):
            h = la(x)
            if lb is not None:
                h = h + lb(x)
            outs.append(h / depth)
        return list(itertools.accumulate(outs))[-1]


case("c6_zip_longest_modulelists_accumulate", lambda: (R(3, 6),))(lambda: ZipLongestHeads())


class ProductStarmapExperts(nn.Module):
    """itertools.product over scales x experts, starmap applying each pair, islice keeping
    the first k, reversed(ModuleList) for a decoder."""

    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.dec = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.scales = (0.5, 1.0)

    def forward(self, x):
        ys = list(itertools.islice(itertools.starmap(lambda s, e: e(x * s), itertools.product(self.scales, self.experts)), 3))
        h = sum(ys)
        for layer in reversed(self.dec):
            h = torch.tanh(layer(h))
        return h


case("c6_product_starmap_islice_reversed_modulelist", lambda: (R(3, 4),))(lambda: ProductStarmapExperts())


class GeneratorMethodBlocks(nn.Module):
    """A generator method on the module yielding (name, block) pairs that pass a filter,
    consumed by a for loop, and a `yield from` helper flattening nested stages."""

    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList(nn.ModuleList(nn.Linear(6, 6) for _ in range(2)) for _ in range(2))
        self.frozen = {"1.0"}

    def _flat(self):
        for i, stage in enumerate(self.stages):
            yield from ((f"{i}.{j}", blk) for j, blk in enumerate(stage))

    def active_blocks(self):
        for name, blk in self._flat():
            if name not in self.frozen:
                yield name, blk

    def forward(self, x):
        names = []
        for name, blk in self.active_blocks():
            x = x + F.silu(blk(x))
            names.append(name)
        return x, ",".join(names)


case("c6_generator_method_yield_from_blocks", lambda: (R(3, 6),))(lambda: GeneratorMethodBlocks())


# ===================================================================== closures, exceptions
class NonlocalCounterHooks(nn.Module):
    """Nested closures with a nonlocal counter: a local `apply` wrapper counts the layers it
    runs and accumulates a nonlocal auxiliary loss."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(3))

    def forward(self, x):
        calls, aux = 0, 0.0

        def apply(layer, h):
            nonlocal calls, aux
            calls += 1
            out = layer(h)
            aux = aux + out.pow(2).mean()
            return out

        def run_all(h):
            for layer in self.layers:
                h = torch.relu(apply(layer, h))
            return h

        y = run_all(x)
        return y, aux / calls, calls


case("c6_nonlocal_counter_closures", lambda: (R(3, 6),))(lambda: NonlocalCounterHooks())


class _EarlyExit(Exception):
    def __init__(self, value, depth):
        super().__init__(depth)
        self.value, self.depth = value, depth


class ExceptionEarlyExit(nn.Module):
    """Exceptions used for control flow: a layer loop raising a custom exception carrying the
    hidden state at a configured depth (early exit), caught by the caller; a KeyError from a
    dict lookup falling back to a default head."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(4))
        self.heads = nn.ModuleDict({"cls": nn.Linear(6, 2)})
        self.default = nn.Linear(6, 2)
        self.exit_at = 2

    def _run(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i + 1 == self.exit_at:
                raise _EarlyExit(x, i + 1)
        return x

    def forward(self, x, task="reg"):
        try:
            h, depth = self._run(x), len(self.layers)
        except _EarlyExit as e:
            h, depth = e.value, e.depth
        try:
            head = self.heads[task]
        except KeyError:
            head = self.default
        return head(h), depth


case("c6_exception_early_exit_and_keyerror_default", lambda: (R(3, 6),))(lambda: ExceptionEarlyExit())


class StopIterationPeek(nn.Module):
    """next(iter(...), default) and a StopIteration caught around next() over the children
    (the first submodule of a type, a missing one giving None)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6), nn.ReLU())

    def forward(self, x):
        norm = next((m for m in self.body.modules() if isinstance(m, nn.LayerNorm)), None)
        it = (m for m in self.body if isinstance(m, nn.Dropout))
        try:
            drop = next(it)
        except StopIteration:
            drop = None
        y = self.body(x)
        if drop is None and norm is not None:
            y = y * norm.weight
        return y


case("c6_next_default_and_stopiteration_children", lambda: (R(3, 6),))(lambda: StopIterationPeek())


# ===================================================================== hand-written einops
_AXES = re.compile(r"\(([^)]*)\)|(\S+)")


def _parse(side):
    """'b (h d) t' -> [['b'], ['h', 'd'], ['t']]"""
    return [g.split() if g else [a] for g, a in _AXES.findall(side)]


def rearrange(x, pattern, **sizes):
    """A small einops.rearrange written by hand: split grouped input axes, permute, merge."""
    lhs, rhs = (s.strip() for s in pattern.split("->"))
    left, right = _parse(lhs), _parse(rhs)
    known = dict(sizes)
    for group, n in zip(left, x.shape):
        unknown = [a for a in group if a not in known]
        prod = math.prod(known[a] for a in group if a in known)
        if unknown:
            known[unknown[0]] = n // prod
    flat = [a for g in left for a in g]
    x = x.reshape([known[a] for a in flat])
    order = [flat.index(a) for g in right for a in g]
    x = x.permute(order)
    return x.reshape([math.prod(known[a] for a in g) for g in right])


class EinopsByHandAttention(nn.Module):
    """Multi-head attention whose head split and merge go through the hand-written rearrange:
    'b t (h d) -> b h t d' and back."""

    def __init__(self):
        super().__init__()
        self.heads = 2
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):
        q, k, v = (rearrange(t, "b t (h d) -> b h t d", h=self.heads) for t in self.qkv(x).chunk(3, -1))
        a = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
        return self.out(rearrange(a @ v, "b h t d -> b t (h d)"))


case("c6_einops_by_hand_attention_heads", lambda: (R(2, 5, 8),))(lambda: EinopsByHandAttention())


class EinopsByHandPatchify(nn.Module):
    """ViT patchify through the hand-written rearrange: 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'."""

    def __init__(self, p=2):
        super().__init__()
        self.p = p
        self.embed = nn.Linear(3 * p * p, 8)

    def forward(self, img):
        patches = rearrange(img, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=self.p, p2=self.p)
        return self.embed(patches)


case("c6_einops_by_hand_patchify", lambda: (R(2, 3, 4, 6),))(lambda: EinopsByHandPatchify())


# ===================================================================== configs and dispatch
@dataclasses.dataclass
class MixerConfig:
    dim: int = 8
    expansion: int = 2
    tokens: int = 4
    hidden: int = dataclasses.field(init=False)

    def __post_init__(self):
        self.hidden = self.dim * self.expansion


class PostInitMixer(nn.Module):
    """An MLP-mixer block configured by a dataclass with a field derived in __post_init__ and
    read again in forward; getattr(self, f"...") dispatch over a list of branch names."""

    def __init__(self, cfg=MixerConfig()):
        super().__init__()
        self.cfg = cfg
        self.branch_token = nn.Sequential(nn.Linear(cfg.tokens, cfg.tokens * 2), nn.GELU(), nn.Linear(cfg.tokens * 2, cfg.tokens))
        self.branch_channel = nn.Sequential(nn.Linear(cfg.dim, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, cfg.dim))
        self.order = ("token", "channel")

    def forward(self, x):
        for name in self.order:
            f = getattr(self, f"branch_{name}")
            x = x + (f(x.transpose(1, 2)).transpose(1, 2) if name == "token" else f(x))
        return x * (self.cfg.hidden / self.cfg.dim)


case("c6_dataclass_post_init_getattr_dispatch", lambda: (R(2, 4, 8),))(lambda: PostInitMixer())


class AttrgetterSubmodules(nn.Module):
    """operator.attrgetter of dotted submodule paths ('stem.0', 'head.proj') read from a list
    of names, sorted() of modules by a priority attribute."""

    def __init__(self):
        super().__init__()
        import operator
        self.stem = nn.Sequential(nn.Linear(6, 6), nn.ReLU())
        self.head = nn.Module()
        self.head.proj = nn.Linear(6, 3)
        self.get = operator.attrgetter("stem.0", "head.proj")
        for i, m in enumerate(self.stem):
            m.priority = 1 - i

    def forward(self, x):
        first, proj = self.get(self)
        for m in sorted(self.stem, key=lambda m: m.priority):
            x = m(x)
        return proj(x + first(x))


case("c6_attrgetter_dotted_paths_sorted_priority", lambda: (R(3, 6),))(lambda: AttrgetterSubmodules())


class ExitStackConditional(nn.Module):
    """contextlib.ExitStack entering a no_grad and an autocast region only when their flags are
    set, a callback registered to count exits."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.frozen, self.mixed = True, False
        self.exits = 0

    def _count(self):
        self.exits += 1

    def forward(self, x):
        with contextlib.ExitStack() as stack:
            if self.frozen:
                stack.enter_context(torch.no_grad())
            if self.mixed:
                stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
            stack.callback(self._count)
            h = self.fc(x)
        return h * 2, h.requires_grad


case("c6_exitstack_conditional_contexts_callback", lambda: (R(3, 6),), train=True)(lambda: ExitStackConditional())


class PermuteReversedRange(nn.Module):
    """Axes reversed by x.permute(*reversed(range(x.dim()))) and moved with a list built from
    range / divmod of the rank (layout utilities of vision code)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = x.permute(*reversed(range(x.dim())))
        half, rest = divmod(x.dim(), 2)
        order = list(range(half, x.dim())) + list(range(half))
        return self.fc(y), x.permute(order).contiguous().sum(), rest


case("c6_permute_star_reversed_range", lambda: (R(3, 4, 2),))(lambda: PermuteReversedRange())


class LossDictTrainStep(nn.Module):
    """A detection-style loss dict summed with sum(d.values()), its items turned into floats
    for logging ({k: v.item()}), backward, an SGD step made outside, grads cleared with
    zero_grad(set_to_none=False)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(6, 5)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)

    def forward(self, x, box, cls):
        out = self.net(x)
        losses = {"box": F.smooth_l1_loss(out[:, :4], box), "cls": F.binary_cross_entropy_with_logits(out[:, 4], cls)}
        total = sum(losses.values())
        self.opt.zero_grad(set_to_none=False)
        total.backward()
        self.opt.step()
        return total.detach(), {k: v.item() for k, v in losses.items()}


case("c6_loss_dict_sum_values_item_log_sgd", lambda: (R(6, 6), R(6, 4), torch.rand(6)), train=True)(
    lambda: LossDictTrainStep())


class SamplerNoGradRollout(nn.Module):
    """An RL rollout under torch.no_grad (actions sampled from a Categorical with a seeded
    generator-free draw, log-probs kept), then the policy loss computed with grad."""

    def __init__(self):
        super().__init__()
        self.pi = nn.Linear(4, 3)

    def forward(self, obs, adv):
        with torch.no_grad():
            logits_old = self.pi(obs)
            act = logits_old.argmax(-1)
            logp_old = torch.log_softmax(logits_old, -1).gather(-1, act[:, None]).squeeze(-1)
        logp = torch.log_softmax(self.pi(obs), -1).gather(-1, act[:, None]).squeeze(-1)
        ratio = (logp - logp_old).exp()
        return -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()


case("c6_rollout_no_grad_then_policy_loss", lambda: (R(6, 4), R(6)), train=True)(lambda: SamplerNoGradRollout())


# ===================================================================== issue 11, session 20
class InputSaliencyFuncGrad(nn.Module):
    """Input saliency inside the forward: torch.func.grad of the predicted class's logit with
    respect to the input (a closure over the module and the class index), used to mask the input
    (the attribution-then-classify pattern of interpretability code)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x):
        cls = 1

        def logit(v):
            return self.net(v)[..., cls].sum()
        sal = torch.func.grad(logit)(x).abs()
        keep = sal >= sal.mean(-1, keepdim=True)
        return self.net(x * keep), sal


case("c6_func_grad_input_saliency", lambda: (R(5, 6),))(lambda: InputSaliencyFuncGrad())


class ClipSchedStep(nn.Module):
    """A whole optimizer step as the function: backward, clip_grad_norm_ of the parameters,
    AdamW step, a OneCycle-style LambdaLR step, zero_grad, and the loss returned as a float."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-2)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / 4))

    def forward(self, x, y):
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


case("c6_train_step_clip_lambdalr_item", lambda: (R(6, 8), R(6, 1)), train=True, ncalls=4)(lambda: ClipSchedStep())


_COLLECT = {"active": None}


class _CollectedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff, self.gate = nn.Linear(8, 8), nn.Linear(8, 2)
        self.w = nn.Parameter(torch.randn(2, 8, 8) / 3)

    def forward(self, h):
        h = h + self.ff(h).relu()
        idx = self.gate(h).argmax(-1)
        if _COLLECT["active"] is not None:
            _COLLECT["active"].append(idx)
        out = torch.zeros_like(h)
        for e in torch.greater(F.one_hot(idx, 2).sum(0), 0).nonzero():
            rows = torch.where(idx == e[0])[0]
            out.index_add_(0, rows, h[rows] @ self.w[e[0]])
        return h + out


class CollectorMoEStack(nn.Module):
    """Switch-style routed blocks under a stack whose forward sets a module-level output
    collector around them (transformers' output capturing): a data-dependent expert loop."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(_CollectedBlock() for _ in range(2))

    def forward(self, x):
        _COLLECT["active"] = []
        try:
            for b in self.blocks:
                x = b(x)
            return x, torch.stack(_COLLECT["active"])
        finally:
            _COLLECT["active"] = None


case("c6_moe_collector_stack", lambda: (R(10, 8),), ncalls=5)(lambda: CollectorMoEStack())
