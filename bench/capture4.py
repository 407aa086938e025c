"""Capture benchmark, fourth corpus: forwards written the way Hugging Face transformers,
diffusers and timm write them around the model math: kwargs-heavy signatures with
`output_attentions` / `return_dict` flags and a ModelOutput-like dataclass, warnings.warn
and logging on deprecated arguments, `torch.jit.is_scripting()` / `torch.jit.is_tracing()`
checks, ModuleDict routing by a string, caches in dicts keyed by shape, dict-held counters
(global and per module), modules created lazily on the first call, generator expressions
over submodules, try/except around an optional path, torch.autocast regions, forward hooks
that write into dicts, einops-style rearranges written by hand.

The case machinery (runner, table, comparison with Dynamo) is bench/capture.py's:

    PYTHONPATH=python python bench/capture4.py [--no-dynamo] [--filter NAME]
"""
import dataclasses
import functools
import logging
import math
import warnings
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import capture as bench  # bench/capture.py: Python puts this script's directory first on sys.path

_FIRST = len(bench.CASES)
case, R = bench.case, bench.R
SEQ = lambda: (R(2, 8, 32),)  # noqa: E731
IMG = lambda: (R(2, 8, 8, 8),)  # noqa: E731
logger = logging.getLogger("capture4")


# ----------------------------------------------------------------------------- transformers-style
@dataclasses.dataclass
class EncoderConfig:
    hidden_size: int = 32
    num_attention_heads: int = 4
    intermediate_size: int = 64
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    attention_probs_dropout_prob: float = 0.0
    output_attentions: bool = False
    use_return_dict: bool = True
    num_hidden_layers: int = 2


@dataclasses.dataclass
class BaseModelOutput:
    last_hidden_state: torch.Tensor = None
    hidden_states: Optional[Tuple[torch.Tensor, ...]] = None
    attentions: Optional[Tuple[torch.Tensor, ...]] = None

    def to_tuple(self):
        return tuple(v for v in (self.last_hidden_state, self.hidden_states, self.attentions) if v is not None)


class KwargsSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.num_attention_heads
        self.d = cfg.hidden_size // cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.attention_probs_dropout_prob)

    def forward(self, hidden_states, attention_mask=None, head_mask=None, output_attentions=False, **kwargs):
        b, n, _ = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = self.dropout(scores.softmax(-1))
        if head_mask is not None:
            probs = probs * head_mask
        ctx = (probs @ v).transpose(1, 2).reshape(b, n, -1)
        outputs = (self.out(ctx), probs) if output_attentions else (self.out(ctx),)
        return outputs


class KwargsEncoder(nn.Module):
    """A transformers-style encoder: config dataclass, `**kwargs` threaded through layers,
    `output_hidden_states` accumulating tuples, `return_dict` choosing a dataclass output,
    an extended attention mask built from a 0/1 mask, a deprecated argument warned about."""
    def __init__(self, cfg=None):
        super().__init__()
        self.config = cfg or EncoderConfig()
        self.layers = nn.ModuleList([KwargsSelfAttention(self.config) for _ in range(self.config.num_hidden_layers)])
        self.norm = nn.LayerNorm(self.config.hidden_size, eps=self.config.layer_norm_eps)

    def get_extended_attention_mask(self, mask, dtype):
        ext = mask[:, None, None, :].to(dtype)
        return (1.0 - ext) * torch.finfo(dtype).min

    def forward(self, hidden_states, attention_mask=None, output_attentions=None, output_hidden_states=True,
                return_dict=None, past_key_values=None, **kwargs):
        if "head_mask_deprecated" in kwargs:
            warnings.warn("head_mask_deprecated is deprecated", FutureWarning)
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        return_dict = return_dict if return_dict is not None else self.config.use_return_dict
        ext = self.get_extended_attention_mask(attention_mask, hidden_states.dtype) if attention_mask is not None else None
        all_hidden = () if output_hidden_states else None
        all_attn = () if output_attentions else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden = all_hidden + (hidden_states,)
            out = layer(hidden_states, attention_mask=ext, output_attentions=output_attentions, **kwargs)
            hidden_states = hidden_states + out[0]
            if output_attentions:
                all_attn = all_attn + (out[1],)
        hidden_states = self.norm(hidden_states)
        if not return_dict:
            return tuple(v for v in (hidden_states, all_hidden, all_attn) if v is not None)
        return BaseModelOutput(hidden_states, all_hidden, all_attn)


def _seq_mask():
    m = torch.ones(2, 8)
    m[1, 6:] = 0
    return (R(2, 8, 32), m)


class LoggedDeprecation(nn.Module):
    """logger.warning_once-style logging on the first call (a flag attribute), logger.info
    of a shape, warnings.warn under a condition that is false."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self._warned = False

    def forward(self, x, scale=None):
        if scale is not None and not self._warned:
            logger.warning("`scale` is deprecated")
            self._warned = True
        logger.debug("input shape %s", tuple(x.shape))
        if x.dim() != 3:
            warnings.warn("expected a 3-d input")
        return self.fc(x) * (scale if scale is not None else 1.0)


class JitScriptingChecks(nn.Module):
    """torch.jit.is_scripting() / is_tracing() guarded fast paths and a
    torch.compiler.is_compiling() branch, as timm and transformers write them."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.grad_checkpointing = False

    def forward(self, x):
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = torch.utils.checkpoint.checkpoint(self.fc, x, use_reentrant=False)
        else:
            x = self.fc(x)
        if not torch.jit.is_tracing() and x.shape[1] > 4:
            x = x[:, :4] * 2 if torch.compiler.is_compiling() else x[:, :4] * 2
        return F.gelu(x)


class ModuleDictRouter(nn.Module):
    """Experts in a ModuleDict chosen by a string argument and by a config list, summed
    with a generator expression; unknown names fall back to an identity."""
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleDict({"mlp": nn.Sequential(nn.Linear(32, 32), nn.GELU()),
                                      "conv": nn.Conv1d(32, 32, 3, padding=1), "id": nn.Identity()})
        self.route = ["mlp", "id"]

    def run(self, name, x):
        if name == "conv":
            return self.experts[name](x.transpose(1, 2)).transpose(1, 2)
        return self.experts[name](x) if name in self.experts else x

    def forward(self, x, extra="conv"):
        y = sum(self.run(n, x) for n in self.route)
        return y + self.run(extra, x)


class ShapeKeyedCache(nn.Module):
    """Sinusoidal position tables cached in a dict keyed by (length, dim), as diffusers'
    and older transformers' position embeddings do: computed on a miss."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self._cache = {}

    def table(self, n, d, device):
        key = (n, d)
        if key not in self._cache:
            pos = torch.arange(n, dtype=torch.float32, device=device)[:, None]
            div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / d))
            t = torch.zeros(n, d, device=device)
            t[:, 0::2] = torch.sin(pos * div)
            t[:, 1::2] = torch.cos(pos * div)
            self._cache[key] = t
        return self._cache[key]

    def forward(self, x):
        return self.fc(x + self.table(x.shape[1], x.shape[2], x.device))


class DictStatsCounters(nn.Module):
    """Counters in a dict attribute (`self.stats["calls"] += 1`, a running token count with
    `.get`), read back into a warmup factor, as training wrappers count steps."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.stats = {"calls": 0, "tokens": 0}

    def forward(self, x):
        self.stats["calls"] += 1
        self.stats["tokens"] = self.stats.get("tokens", 0) + x.shape[0] * x.shape[1]
        warm = min(1.0, self.stats["calls"] / 100)
        return self.fc(x) * warm


_GLOBAL_STATS = {"forward_calls": 0}


class GlobalDictCounter(nn.Module):
    """A module-level dict of counters incremented in forward (profiling helpers)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        _GLOBAL_STATS["forward_calls"] += 1
        return torch.tanh(self.fc(x))


class LazyHeadOnFirstCall(nn.Module):
    """A classifier head made on the first call from the feature size (`if self.head is None`)."""
    def __init__(self, classes=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 16), nn.ReLU())
        self.head = None
        self.classes = classes

    def forward(self, x):
        h = self.body(x).mean(1)
        if self.head is None:
            self.head = nn.Linear(h.shape[-1], self.classes)
        return self.head(h)


class TryExceptOptionalPath(nn.Module):
    """try/except around an optional fused path (an AttributeError from a missing attribute,
    a KeyError from a dict), as code guarding optional kernels does."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.opts = {"eps": 1e-5}

    def forward(self, x):
        try:
            fused = self.fused_norm
        except AttributeError:
            fused = None
        try:
            alpha = self.opts["alpha"]
        except KeyError:
            alpha = 0.5
        h = self.fc(x)
        h = fused(h) if fused is not None else F.layer_norm(h, h.shape[-1:], eps=self.opts["eps"])
        return h * alpha


class AutocastRegionBlock(nn.Module):
    """A bf16 autocast region around the attention scores and an fp32 region (disabled)
    around the softmax, as mixed-precision model code writes them."""
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(32, 64)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q, k = self.qk(x).chunk(2, -1)
            s = q @ k.transpose(-1, -2)
        with torch.autocast("cpu", enabled=False):
            p = s.float().softmax(-1)
        return p @ x


class HookFeatureDict(nn.Module):
    """Forward hooks registered in __init__ on every block (partials of a bound method),
    storing features in a dict keyed by name (a feature extractor), read back in forward."""
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(32, 32) for _ in range(3)])
        self.feats = {}
        for i, b in enumerate(self.blocks):
            b.register_forward_hook(functools.partial(self._hook, f"block{i}"))

    def _hook(self, name, mod, inp, out):
        self.feats[name] = out

    def forward(self, x):
        for b in self.blocks:
            x = torch.relu(b(x))
        return x + self.feats["block0"]


class EinopsRearrangeByHand(nn.Module):
    """'b c (h p1) (w p2) -> b (h w) (p1 p2 c)' patchify and its inverse written with
    reshape/permute, dims unpacked from the shape with a generator of divisions."""
    def __init__(self, p=2, c=8):
        super().__init__()
        self.p = p
        self.proj = nn.Linear(p * p * c, p * p * c)

    def forward(self, x):
        b, c, H, W = x.shape
        p = self.p
        h, w = (s // p for s in (H, W))
        t = x.reshape(b, c, h, p, w, p).permute(0, 2, 4, 3, 5, 1).reshape(b, h * w, p * p * c)
        t = self.proj(t)
        return t.reshape(b, h, w, p, p, c).permute(0, 5, 1, 3, 2, 4).reshape(b, c, H, W)


class GeneratorExprPooling(nn.Module):
    """Multi-scale pooling: a tuple built by a generator over pool sizes, `any()` over a
    generator of flags, `max(...)` of a generator of shape values, `all(...)` of isinstance."""
    def __init__(self):
        super().__init__()
        self.sizes = (1, 2, 4)
        self.flags = [False, True]
        self.fc = nn.Linear(8 * 21, 16)

    def forward(self, x):
        assert all(isinstance(s, int) for s in self.sizes)
        pooled = tuple(F.adaptive_avg_pool2d(x, s).flatten(1) for s in self.sizes)
        h = torch.cat(pooled, 1)
        if any(f for f in self.flags):
            h = h * 2
        m = max(s for s in x.shape[2:])
        return self.fc(h) / m


class DiffusersTimestepEmbed(nn.Module):
    """diffusers' get_timestep_embedding + TimestepEmbedding: a helper with keyword defaults
    (flip_sin_to_cos, downscale_freq_shift, scale, max_period), act by name from a dict."""
    ACTS = {"silu": nn.SiLU, "gelu": nn.GELU}

    def __init__(self, dim=32, act_fn="silu"):
        super().__init__()
        self.dim = dim
        self.linear_1 = nn.Linear(dim, 64)
        self.act = self.ACTS[act_fn]()
        self.linear_2 = nn.Linear(64, 32)

    @staticmethod
    def get_timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1,
                               scale=1, max_period=10000):
        assert len(timesteps.shape) == 1, "Timesteps should be a 1d-array"
        half_dim = embedding_dim // 2
        exponent = -math.log(max_period) * torch.arange(0, half_dim, dtype=torch.float32, device=timesteps.device)
        exponent = exponent / (half_dim - downscale_freq_shift)
        emb = torch.exp(exponent)
        emb = timesteps[:, None].float() * emb[None, :]
        emb = scale * emb
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
        if flip_sin_to_cos:
            emb = torch.cat([emb[:, half_dim:], emb[:, :half_dim]], dim=-1)
        if embedding_dim % 2 == 1:
            emb = F.pad(emb, (0, 1, 0, 0))
        return emb

    def forward(self, x, t):
        e = self.get_timestep_embedding(t, self.dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        e = self.linear_2(self.act(self.linear_1(e)))
        return x + e[:, None, :]


def _x_t():
    return R(2, 8, 32), torch.randint(0, 1000, (2,))


class OptionalReturnDictKwargs(nn.Module):
    """A head that takes `labels=None` and returns (loss, logits) or logits, keyword-only
    arguments with defaults, and a dict of outputs with a conditional key."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 6)

    def forward(self, x, *, labels=None, return_dict=True, temperature=1.0):
        logits = self.fc(x.mean(1)) / temperature
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        if not return_dict:
            return (loss, logits) if loss is not None else logits
        out = {"logits": logits}
        if loss is not None:
            out["loss"] = loss
        return out


class ConfigNamespaceGetattrDefaults(nn.Module):
    """getattr(config, name, default) for optional config fields (some missing), a
    dataclasses.replace'd config, a tuple of layer-norm eps choices."""
    def __init__(self):
        super().__init__()
        self.config = dataclasses.replace(EncoderConfig(), hidden_act="silu")
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        act = getattr(self.config, "hidden_act", "gelu")
        scale_attn = getattr(self.config, "scale_attn_weights", True)
        rms = getattr(self.config, "use_rms_norm", False)
        h = self.fc(x)
        h = F.silu(h) if act == "silu" else F.gelu(h)
        if scale_attn:
            h = h / math.sqrt(self.config.hidden_size)
        if rms:
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return F.layer_norm(h, (self.config.hidden_size,), eps=self.config.layer_norm_eps)


class AttentionMaskCacheDictInt(nn.Module):
    """A causal mask cached in a dict keyed by the sequence length, a hit counter in the
    same dict (`self.cache["hits"] += 1` on a hit)."""
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(32, 64)
        self.cache = {"hits": 0}

    def mask(self, n):
        if n in self.cache:
            self.cache["hits"] += 1
        else:
            self.cache[n] = torch.triu(torch.full((n, n), float("-inf")), 1)
        return self.cache[n]

    def forward(self, x):
        q, k = self.qk(x).chunk(2, -1)
        return ((q @ k.transpose(1, 2)) / 8 + self.mask(x.shape[1])).softmax(-1) @ x


case("hf_kwargs_encoder_return_dict", _seq_mask)(lambda: KwargsEncoder())
case("logged_deprecation_flags", SEQ)(lambda: LoggedDeprecation())
case("jit_scripting_tracing_checks", SEQ)(lambda: JitScriptingChecks())
case("moduledict_router_generator_sum", SEQ)(lambda: ModuleDictRouter())
case("shape_keyed_pos_table_cache", SEQ)(lambda: ShapeKeyedCache())
case("dict_stats_counters_warmup", SEQ)(lambda: DictStatsCounters())
case("global_dict_counter", SEQ)(lambda: GlobalDictCounter())
case("lazy_head_on_first_call_none", SEQ)(lambda: LazyHeadOnFirstCall())
case("try_except_optional_path", SEQ)(lambda: TryExceptOptionalPath())
case("autocast_bf16_and_disabled_regions", SEQ)(lambda: AutocastRegionBlock())
case("hook_feature_dict_read_back", SEQ)(lambda: HookFeatureDict())
case("einops_patchify_unpatchify", IMG)(lambda: EinopsRearrangeByHand())
case("generator_expr_multiscale_pool", IMG)(lambda: GeneratorExprPooling())
case("diffusers_timestep_embedding", _x_t)(lambda: DiffusersTimestepEmbed())
case("kwonly_labels_optional_loss", SEQ)(lambda: OptionalReturnDictKwargs())
case("config_getattr_defaults_replace", SEQ)(lambda: ConfigNamespaceGetattrDefaults())
case("mask_cache_dict_hit_counter", SEQ)(lambda: AttentionMaskCacheDictInt())



# ----------------------------------------------------------------------------- library idioms around the math
class TryViewElseReshape(nn.Module):
    """`try: x.view(...) except RuntimeError: x.reshape(...)` on a non-contiguous tensor (the
    view raises inside torch), as older code that predates reshape handles layouts."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        t = self.fc(x).transpose(1, 2)
        try:
            flat = t.view(t.shape[0], -1)
        except RuntimeError:
            flat = t.reshape(t.shape[0], -1)
        return flat.softmax(-1)


class NullcontextOrAutocast(nn.Module):
    """`ctx = torch.autocast(...) if flag else contextlib.nullcontext()`, then `with ctx:`;
    an ExitStack entering no_grad for a frozen branch."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.frozen = nn.Linear(32, 32)
        self.use_amp = False

    def forward(self, x):
        import contextlib
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if self.use_amp else contextlib.nullcontext()
        with ctx:
            h = self.fc(x)
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            f = self.frozen(x)
        return h + f


class GeneratorMethodLayers(nn.Module):
    """Layers walked through a generator method (`yield` with a skip set), enumerate over
    zip(layers, norms), `reversed` on a ModuleList, sorted(ModuleDict.items())."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(32, 32) for _ in range(4)])
        self.norms = nn.ModuleList([nn.LayerNorm(32) for _ in range(4)])
        self.heads = nn.ModuleDict({"b": nn.Linear(32, 2), "a": nn.Linear(32, 3)})
        self.skip = {2}

    def _active(self):
        for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
            if i in self.skip:
                continue
            yield layer, norm

    def forward(self, x):
        for layer, norm in self._active():
            x = x + layer(norm(x))
        for layer in reversed(self.layers[:2]):
            x = torch.relu(layer(x))
        return torch.cat([h(x) for _, h in sorted(self.heads.items())], -1)


class NoGradDecoratedHelper(nn.Module):
    """A `@torch.no_grad()` helper method computing a normalizer, a `@torch.jit.ignore`d
    helper, `torch._assert` on the shape, `*batch, n, d = x.shape` unpacking."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    @torch.no_grad()
    def _norm(self, x):
        return x.norm(dim=-1, keepdim=True).clamp_min(1e-6)

    @torch.jit.ignore
    def _extra(self, x):
        return x * 0.5

    def forward(self, x):
        *batch, n, d = x.shape
        torch._assert(d == 32, "feature size")
        h = self.fc(x) / self._norm(x)
        return self._extra(h).reshape(*batch, n * d)


class DtypeDevicePropertiesFromParameters(nn.Module):
    """HF ModuleUtilsMixin: `self.dtype` / `self.device` properties from
    `next(self.parameters())`, the input cast to them, `torch.finfo(dtype).min` masking."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, x, mask):
        x = x.to(device=self.device, dtype=self.dtype)
        ext = (1.0 - mask[:, None, :].to(self.dtype)) * torch.finfo(self.dtype).min
        s = self.fc(x) @ x.transpose(1, 2) + ext
        return s.softmax(-1) @ x


class ConstantTensorsPerCall(nn.Module):
    """torch.tensor(...) of Python numbers and a torch.where against a 0-d tensor, made on
    every call; interpolate to a size computed by a generator expression."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        w = torch.tensor([0.25, 0.5, 0.25], device=x.device, dtype=x.dtype)
        h = self.conv(x)
        h = torch.where(h > 0, h, torch.tensor(0.0, dtype=h.dtype))
        up = F.interpolate(h, size=tuple(int(s * 2) for s in h.shape[2:]), mode="nearest")
        return up * w.sum() + up.mean()


def _warning_once_impl(msg):
    logger.warning(msg)


_warning_once = functools.lru_cache(None)(_warning_once_impl)


class WarningOnceLruCache(nn.Module):
    """transformers' `logger.warning_once` (an lru_cache'd function calling logger.warning)
    on every call, and `inspect.signature(...)` of a submodule's forward deciding a kwarg."""
    def __init__(self):
        super().__init__()
        self.attn = KwargsSelfAttention(EncoderConfig())

    def forward(self, x):
        import inspect
        _warning_once("using the slow attention path")
        kw = {}
        if "output_attentions" in inspect.signature(self.attn.forward).parameters:
            kw["output_attentions"] = False
        return self.attn(x, **kw)[0]


class EnvVarAndVersionChecks(nn.Module):
    """A fused path chosen by an environment variable (os.environ.get) and by
    sys.version_info / torch.__version__ string comparisons, as kernels' dispatch code does."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        import os
        import sys
        fused = os.environ.get("CAPTURE4_FUSED", "0") == "1"
        new_py = sys.version_info >= (3, 9)
        major = int(torch.__version__.split(".")[0])
        h = self.fc(x)
        if fused and major >= 2:
            return F.silu(h)
        return h * torch.sigmoid(h) if new_py else h


class CheckpointedBlocksTrain(nn.Module):
    """Gradient checkpointing enabled in training (torch.utils.checkpoint, non-reentrant),
    a lambda closing over a layer as the checkpointed function."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(32, 32) for _ in range(2)])
        self.gradient_checkpointing = True

    def forward(self, x):
        import torch.utils.checkpoint as cp
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = cp.checkpoint(lambda t, m=layer: torch.relu(m(t)), x, use_reentrant=False)
            else:
                x = torch.relu(layer(x))
        return x


class SubclassSuperForwardKwargs(nn.Module):
    """A subclass overriding forward and calling super().forward(**kwargs), the base reading
    `kwargs.pop(...)` with defaults and a class-level default config dict."""
    DEFAULTS = {"scale": 1.0, "bias": 0.0}

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x, **kwargs):
        opts = {**self.DEFAULTS, **kwargs}
        return self.fc(x) * opts.pop("scale") + opts.pop("bias")


class SuperForwardChild(SubclassSuperForwardKwargs):
    def forward(self, x, **kwargs):
        kwargs.setdefault("scale", 2.0)
        return super().forward(x, **kwargs).tanh()


def _seq_mask2():
    m = torch.ones(2, 8)
    m[0, 5:] = 0
    return (R(2, 8, 32), m)


case("try_view_except_reshape", SEQ)(lambda: TryViewElseReshape())
case("nullcontext_or_autocast_exitstack", SEQ)(lambda: NullcontextOrAutocast())
case("generator_method_layers_sorted_heads", SEQ)(lambda: GeneratorMethodLayers())
case("no_grad_decorated_helper_assert", SEQ)(lambda: NoGradDecoratedHelper())
case("dtype_device_properties_finfo_mask", _seq_mask2)(lambda: DtypeDevicePropertiesFromParameters())
case("constant_tensors_per_call_interp", IMG)(lambda: ConstantTensorsPerCall())
case("warning_once_lru_inspect_signature", SEQ)(lambda: WarningOnceLruCache())
case("env_var_and_version_checks", SEQ)(lambda: EnvVarAndVersionChecks())
case("checkpointed_blocks_train", SEQ, train=True)(lambda: CheckpointedBlocksTrain())
case("super_forward_kwargs_defaults", SEQ)(lambda: SuperForwardChild())



class EmaTeacherDeepcopyFirstCall(nn.Module):
    """A mean teacher (BYOL / DINO / MoCo style) deep-copied from the student on the first
    call, frozen, moved towards the student under no_grad every call."""
    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 16))
        self.teacher = None
        self.momentum = 0.99

    def forward(self, x):
        import copy
        if self.teacher is None:
            self.teacher = copy.deepcopy(self.student)
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        with torch.no_grad():
            for pt, ps in zip(self.teacher.parameters(), self.student.parameters()):
                pt.mul_(self.momentum).add_(ps.detach(), alpha=1 - self.momentum)
            t = self.teacher(x).softmax(-1)
        return -(t * self.student(x).log_softmax(-1)).sum(-1).mean()


case("ema_teacher_deepcopy_first_call", SEQ, train=True)(lambda: EmaTeacherDeepcopyFirstCall())


class SanityCheckedAttention(nn.Module):
    """Attention with the sanity checks research code writes into forward: an assert that
    the mask keeps a key per query, that the probabilities are finite, and a NaN guard on
    the loss-like output raising FloatingPointError (each the truth of a tensor deciding a
    raise)."""
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 32)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        assert mask.any(-1).all(), "a query with every key masked"
        s = (q @ k.transpose(-2, -1) / math.sqrt(32)).masked_fill(~mask, float("-inf"))
        p = s.softmax(-1)
        assert torch.isfinite(p).all(), f"non-finite attention probabilities at {x.shape}"
        y = self.out(p @ v)
        if torch.isnan(y).any():
            raise FloatingPointError("NaN in attention output")
        return y


case("sanity_checked_attention_asserts", SEQ)(lambda: SanityCheckedAttention())


class LossWithNumericGuards(nn.Module):
    """A loss head guarding its numerics as training scripts do: `.item()` of an all-finite
    check straight into a raise, and error messages built with conditional expressions."""
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        logits = self.head(x)
        if not torch.isfinite(logits).all().item():
            raise FloatingPointError(f"non-finite logits ({'batched' if logits.dim() == 3 else 'flat'})")
        logp = logits.log_softmax(-1)
        if (logp.exp().sum(-1) - 1).abs().max() > 1e-3:
            raise ValueError("log_softmax " + ("rows" if logp.dim() > 1 else "values") + " do not normalize")
        return -(logp[..., 0]).mean()


case("loss_numeric_guards_item_raise", SEQ)(lambda: LossWithNumericGuards())


CASES = bench.CASES[_FIRST:]


if __name__ == "__main__":
    bench.main(CASES)
