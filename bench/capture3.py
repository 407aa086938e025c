"""Capture benchmark, third corpus: blocks written the way popular model repositories write
them (timm, Hugging Face transformers, ConvNeXt / Swin / ViT reference code, lucidrains-style
einops code written out by hand): config dataclasses and namespaces, stochastic depth and
dropout behind train flags, layer scale, hooks registered in __init__, caches in dicts and
lazily (re)computed attributes, Python-side counters, wrappers that delegate attributes,
task heads chosen by a string argument, ...

The case machinery (runner, table, comparison with Dynamo) is bench/capture.py's:

    PYTHONPATH=python python bench/capture3.py [--no-dynamo] [--filter NAME]
"""
import dataclasses
import math
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

import capture as bench  # bench/capture.py: Python puts this script's directory first on sys.path

_FIRST = len(bench.CASES)
case, R = bench.case, bench.R
SEQ = lambda: (R(2, 16, 32),)  # noqa: E731
IMG = lambda: (R(2, 8, 8, 8),)  # noqa: E731


# ----------------------------------------------------------------------------- timm-style
def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """timm.layers.drop_path, as written there."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0, scale_by_keep=True):
        super().__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


class TimmMlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU, norm_layer=None, bias=True, drop=0.0):
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


class TimmAttention(nn.Module):
    fused_attn = False   # timm reads a class attribute set from an environment flag

    def __init__(self, dim, num_heads=4, qkv_bias=False, qk_norm=False, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        assert dim % num_heads == 0, "dim should be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.LayerNorm(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class TimmViTBlock(nn.Module):
    """timm's ViT Block: pre-norm attention and MLP, LayerScale, DropPath (identity at 0)."""
    def __init__(self, dim=32, num_heads=4, mlp_ratio=4.0, init_values=1e-5, drop_path=0.1, qk_norm=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TimmAttention(dim, num_heads=num_heads, qkv_bias=True, qk_norm=qk_norm)
        self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = TimmMlp(in_features=dim, hidden_features=int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


def make_divisible(v, divisor=8, min_value=None, round_limit=0.9):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < round_limit * v:
        new_v += divisor
    return new_v


class SqueezeExcite(nn.Module):
    """timm's SqueezeExcite with make_divisible channels and a gate layer."""
    def __init__(self, in_chs, rd_ratio=0.25, act_layer=nn.ReLU, gate_layer=nn.Hardsigmoid):
        super().__init__()
        rd_channels = make_divisible(in_chs * rd_ratio, 4)
        self.conv_reduce = nn.Conv2d(in_chs, rd_channels, 1, bias=True)
        self.act1 = act_layer(inplace=True)
        self.conv_expand = nn.Conv2d(rd_channels, in_chs, 1, bias=True)
        self.gate = gate_layer()

    def forward(self, x):
        x_se = x.mean((2, 3), keepdim=True)
        x_se = self.conv_reduce(x_se)
        x_se = self.act1(x_se)
        x_se = self.conv_expand(x_se)
        return x * self.gate(x_se)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7, permute to channels-last, LayerNorm, MLP, layer
    scale gamma, permute back, residual with drop path."""
    def __init__(self, dim=8, drop_path=0.0, layer_scale_init_value=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(dim)) if layer_scale_init_value > 0 else None
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        if self.gamma is not None:
            x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + self.drop_path(x)


def window_partition(x, window_size: int):
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)


def window_reverse(windows, window_size: int, H: int, W: int):
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size, W // window_size, window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)


class SwinWindowBlock(nn.Module):
    """Swin's shifted-window attention block (channels-last input), windows partitioned and
    reversed by hand, torch.roll for the shift, relative position bias from a table indexed
    by a registered index buffer."""
    def __init__(self, dim=8, num_heads=2, window_size=4, shift_size=2):
        super().__init__()
        self.window_size, self.shift_size, self.num_heads = window_size, shift_size, num_heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window_size - 1) ** 2, num_heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        rel = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window_size - 1
        rel[:, :, 1] += window_size - 1
        rel[:, :, 0] *= 2 * window_size - 1
        self.register_buffer("relative_position_index", rel.sum(-1), persistent=False)

    def forward(self, x):
        B, H, W, C = x.shape
        shortcut = x
        x = self.norm1(x)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        win = window_partition(x, self.window_size).view(-1, self.window_size * self.window_size, C)
        B_, N, _ = win.shape
        qkv = self.qkv(win).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1)
        attn = (attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)).softmax(-1)
        out = self.proj((attn @ v).transpose(1, 2).reshape(B_, N, C))
        x = window_reverse(out.view(-1, self.window_size, self.window_size, C), self.window_size, H, W)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        return shortcut + x


class ViTPatchEmbedPosInterp(nn.Module):
    """ViT's patch embedding: conv, flatten(2).transpose(1, 2), a class token expanded and
    concatenated, position embeddings interpolated when the grid differs (a shape branch)."""
    def __init__(self, img=8, patch=2, dim=16):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        n = (img // patch) ** 2
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.patch = patch

    def _pos(self, n, dim):
        if n == self.pos_embed.shape[1] - 1:
            return self.pos_embed
        cls_pos, pos = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        g0 = int(math.sqrt(pos.shape[1]))
        g1 = int(math.sqrt(n))
        pos = pos.reshape(1, g0, g0, dim).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(g1, g1), mode="bicubic", align_corners=False)
        return torch.cat([cls_pos, pos.permute(0, 2, 3, 1).reshape(1, -1, dim)], 1)

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        B, n, dim = x.shape
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        return x + self._pos(n, dim)


case("timm_vit_block_layerscale_droppath_eval", SEQ)(lambda: TimmViTBlock())
case("timm_vit_block_droppath_train", SEQ, train=True)(lambda: TimmViTBlock(drop_path=0.2, qk_norm=False))
case("timm_squeeze_excite_make_divisible", IMG)(lambda: SqueezeExcite(8))
case("convnext_block_permute_gamma", IMG)(lambda: ConvNeXtBlock())
case("swin_shifted_window_block", IMG)(lambda: SwinWindowBlock())
case("vit_patch_embed_pos_interp", lambda: (R(2, 3, 12, 12),))(lambda: ViTPatchEmbedPosInterp())


# ----------------------------------------------------------------------------- HF-style
@dataclasses.dataclass
class TinyConfig:
    hidden_size: int = 32
    num_attention_heads: int = 4
    intermediate_size: int = 64
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    attention_probs_dropout_prob: float = 0.0
    hidden_dropout_prob: float = 0.1
    use_cache: bool = False
    output_attentions: bool = False


ACT2FN = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "gelu_new": lambda x: 0.5 * x * (
    1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))}


@dataclasses.dataclass
class BlockOutput:
    last_hidden_state: torch.Tensor
    attentions: tuple = None


class HFSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size()[:-2] + (self.all_head_size,))
        return (ctx, probs) if output_attentions else (ctx,)


class HFLayer(nn.Module):
    """A BERT-style layer from a dataclass config: ACT2FN by name, an extended attention mask
    built from a 0/1 mask ((1 - m) * finfo.min), outputs as a dataclass, config flags."""
    def __init__(self, config=TinyConfig()):
        super().__init__()
        self.config = config
        self.attention = HFSelfAttention(config)
        self.attn_out = nn.Linear(config.hidden_size, config.hidden_size)
        self.ln1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act] if isinstance(config.hidden_act, str) else config.hidden_act
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ln2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def get_extended_attention_mask(self, attention_mask, dtype):
        ext = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - ext) * torch.finfo(dtype).min

    def forward(self, hidden_states, attention_mask=None, output_attentions=None):
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        ext = self.get_extended_attention_mask(attention_mask, hidden_states.dtype) if attention_mask is not None else None
        outs = self.attention(hidden_states, ext, output_attentions)
        h = self.ln1(self.dropout(self.attn_out(outs[0])) + hidden_states)
        inter = self.intermediate_act_fn(self.intermediate(h))
        h = self.ln2(self.dropout(self.output(inter)) + h)
        return BlockOutput(last_hidden_state=h, attentions=outs[1:] if output_attentions else None)


def _seq_mask():
    m = torch.ones(2, 16)
    m[1, 11:] = 0
    return R(2, 16, 32), m


class GEGLUFeedForward(nn.Module):
    """lucidrains-style GEGLU feed-forward: proj to 2x, chunk, gelu(gate) * x, dropout."""
    def __init__(self, dim=32, mult=4, dropout=0.0):
        super().__init__()
        inner = int(dim * mult * 2 / 3)
        self.proj_in = nn.Linear(dim, inner * 2)
        self.drop = nn.Dropout(dropout)
        self.proj_out = nn.Linear(inner, dim)

    def forward(self, x):
        x, gate = self.proj_in(x).chunk(2, dim=-1)
        return self.proj_out(self.drop(x * F.gelu(gate)))


class LlamaRMSNormNamespaceCfg(nn.Module):
    """RMSNorm in float32 with type_as, a SimpleNamespace config choosing a residual, and a
    rotary cache recomputed lazily when the sequence grows (`_seq_len_cached`)."""
    def __init__(self):
        super().__init__()
        self.cfg = types.SimpleNamespace(dim=32, eps=1e-6, use_residual=True, rope_theta=10000.0, heads=4)
        self.weight = nn.Parameter(torch.ones(self.cfg.dim))
        self.wq = nn.Linear(32, 32, bias=False)
        self._seq_len_cached = 0
        self._cos_cached = None
        self._sin_cached = None

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.eps)

    def _update_cos_sin(self, n, device, dtype):
        if n > self._seq_len_cached:
            self._seq_len_cached = n
            hd = self.cfg.dim // self.cfg.heads
            inv = 1.0 / (self.cfg.rope_theta ** (torch.arange(0, hd, 2, device=device).float() / hd))
            t = torch.arange(n, device=device, dtype=inv.dtype)
            emb = torch.cat([torch.outer(t, inv)] * 2, -1)
            self._cos_cached, self._sin_cached = emb.cos().to(dtype), emb.sin().to(dtype)
        return self._cos_cached[:n], self._sin_cached[:n]

    def forward(self, x):
        h = self._norm(x.float()).type_as(x) * self.weight
        b, n, d = h.shape
        q = self.wq(h).view(b, n, self.cfg.heads, -1).transpose(1, 2)
        cos, sin = self._update_cos_sin(n, x.device, x.dtype)
        q1, q2 = q.chunk(2, -1)
        q = q * cos + torch.cat((-q2, q1), -1) * sin
        out = q.transpose(1, 2).reshape(b, n, d)
        return out + x if self.cfg.use_residual else out


class ActRegistryModuleDict(nn.Module):
    """Activations built from a class registry (ACT2CLS) into a ModuleDict, the one used
    picked by an attribute string; a torch.jit.is_scripting() check around it."""
    ACT2CLS = {"gelu": nn.GELU, "silu": nn.SiLU, "mish": nn.Mish, "relu": nn.ReLU}

    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleDict({k: v() for k, v in self.ACT2CLS.items()})
        self.fc = nn.Linear(32, 32)
        self.act_name = "mish"

    def forward(self, x):
        if torch.jit.is_scripting():
            act = F.gelu
        else:
            act = self.acts[self.act_name]
        return act(self.fc(x))


class CheckpointingFlagEncoder(nn.Module):
    """HF's gradient-checkpointing switch: `if self.gradient_checkpointing and self.training`
    wraps each layer in torch.utils.checkpoint, else calls it (eval here)."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(3))
        self.gradient_checkpointing = True

    def forward(self, x):
        all_hidden = ()
        for layer in self.layers:
            all_hidden = all_hidden + (x,)
            if self.gradient_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x, len(all_hidden)


class PeftStyleWrapper(nn.Module):
    """A PEFT-style wrapper delegating unknown attributes to the wrapped model through
    __getattr__ (reads `self.config`, `self.head` of the inner model), with a LoRA delta."""
    def __init__(self):
        super().__init__()
        self.base_model = nn.Module()
        self.base_model.head = nn.Linear(32, 8)
        self.base_model.config = types.SimpleNamespace(scale=0.5, r=4)
        self.lora_A = nn.Linear(32, 4, bias=False)
        self.lora_B = nn.Linear(4, 8, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.02)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.base_model, name)

    def forward(self, x):
        return self.head(x) + self.lora_B(self.lora_A(x)) * (self.config.scale / self.config.r)


class TaskHeadsByName(nn.Module):
    """Multi-task heads in a ModuleDict chosen by a string argument with a default."""
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(32, 32)
        self.heads = nn.ModuleDict({"cls": nn.Linear(32, 4), "reg": nn.Linear(32, 1)})

    def forward(self, x, task="cls"):
        h = torch.tanh(self.trunk(x))
        if task not in self.heads:
            raise KeyError(task)
        return self.heads[task](h.mean(1))


class StatsDictCounters(nn.Module):
    """Python-side statistics in a dict attribute: call counts with setdefault, a running
    'tokens' total from the input's shape, an EMA buffer updated under no_grad in training."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.stats = {}
        self.register_buffer("ema", torch.zeros(32))

    def forward(self, x):
        self.stats.setdefault("calls", 0)
        self.stats["calls"] += 1
        self.stats["tokens"] = self.stats.get("tokens", 0) + x.shape[0] * x.shape[1]
        h = self.fc(x)
        if self.training:
            with torch.no_grad():
                self.ema.mul_(0.9).add_(h.detach().mean((0, 1)), alpha=0.1)
        return h - self.ema


class CausalMaskLazyAttr(nn.Module):
    """A causal mask attribute initialized to None and built on the first call (a plain
    tensor attribute, not a buffer), rebuilt when the sequence is longer."""
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(32, 64)
        self.mask = None

    def forward(self, x):
        n = x.shape[1]
        if self.mask is None or self.mask.shape[-1] < n:
            self.mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        q, k = self.qk(x).chunk(2, -1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(32)
        s = s.masked_fill(self.mask[:n, :n], float("-inf"))
        return s.softmax(-1) @ x


class LabelSmoothingByHand(nn.Module):
    """Label smoothing written out: a true distribution filled and scatter_'ed under
    no_grad, KL against log_softmax, a smoothing attribute."""
    def __init__(self, classes=6, smoothing=0.1):
        super().__init__()
        self.fc = nn.Linear(32, classes)
        self.smoothing, self.cls = smoothing, classes

    def forward(self, x, target):
        pred = self.fc(x).log_softmax(-1)
        with torch.no_grad():
            true_dist = torch.zeros_like(pred)
            true_dist.fill_(self.smoothing / (self.cls - 1))
            true_dist.scatter_(1, target.data.unsqueeze(1), 1.0 - self.smoothing)
        return torch.mean(torch.sum(-true_dist * pred, dim=-1))


def _xt():
    return R(8, 32), torch.randint(0, 6, (8,))


class EinopsByHandPerceiver(nn.Module):
    """einops written out: 'b (h w) c -> b c h w' with the side from math.isqrt, 'b n (h d)
    -> (b h) n d' by reshape/transpose, repeat of latents over the batch by expand."""
    def __init__(self, dim=32, heads=4, latents=4):
        super().__init__()
        self.heads = heads
        self.latents = nn.Parameter(torch.randn(latents, dim))
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, dim * 2, bias=False)
        self.conv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x):
        b, n, c = x.shape
        side = math.isqrt(n)
        img = x.transpose(1, 2).reshape(b, c, side, side)
        x = x + self.conv(img).flatten(2).transpose(1, 2)
        lat = self.latents.unsqueeze(0).expand(b, -1, -1)
        h = self.heads
        q = self.to_q(lat).reshape(b, -1, h, c // h).transpose(1, 2).reshape(b * h, -1, c // h)
        k, v = (t.reshape(b, n, h, c // h).transpose(1, 2).reshape(b * h, n, c // h)
                for t in self.to_kv(x).chunk(2, -1))
        out = (q @ k.transpose(1, 2) * (c // h) ** -0.5).softmax(-1) @ v
        return out.reshape(b, h, -1, c // h).transpose(1, 2).reshape(b, -1, c)


class HookedSubmodulesInit(nn.Module):
    """A forward pre-hook and a forward hook registered on submodules in __init__ (feature
    taps stored into a dict, an input rescaled), as feature-extraction wrappers do."""
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(32, 32)
        self.dec = nn.Linear(32, 32)
        self.features = {}
        self.enc.register_forward_pre_hook(lambda m, args: (args[0] * 0.5,))
        self.dec.register_forward_hook(self._tap)

    def _tap(self, module, inp, out):
        self.features["dec"] = out.detach()

    def forward(self, x):
        return self.dec(torch.relu(self.enc(x))) + 1


case("hf_bert_layer_dataclass_cfg_mask", _seq_mask)(lambda: HFLayer())
case("hf_bert_layer_dropout_train", _seq_mask, train=True)(lambda: HFLayer())
case("geglu_feedforward_chunk", SEQ)(lambda: GEGLUFeedForward())
case("llama_rmsnorm_rope_lazy_cache", SEQ)(lambda: LlamaRMSNormNamespaceCfg())
case("act_registry_moduledict_is_scripting", SEQ)(lambda: ActRegistryModuleDict())
case("gradient_checkpointing_flag_eval", SEQ)(lambda: CheckpointingFlagEncoder())
case("peft_getattr_delegating_wrapper", SEQ)(lambda: PeftStyleWrapper())
case("task_heads_by_name_default_arg", SEQ)(lambda: TaskHeadsByName())
case("stats_dict_counters_ema_train", SEQ, train=True)(lambda: StatsDictCounters())
case("causal_mask_lazy_attr_none", SEQ)(lambda: CausalMaskLazyAttr())
case("label_smoothing_by_hand", _xt)(lambda: LabelSmoothingByHand())
case("einops_by_hand_perceiver_latents", SEQ)(lambda: EinopsByHandPerceiver())
case("hooks_registered_in_init_feature_tap", SEQ)(lambda: HookedSubmodulesInit())


class DeviceCapabilityBranch(nn.Module):
    """A fast path chosen by asking torch about the device (transformers' MoE experts ask
    `torch.cuda.get_device_capability()` before grouped_mm): `torch.cuda.is_available()`,
    the tensor's device type, a backend flag."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        if torch.cuda.is_available() and x.is_cuda and torch.cuda.get_device_capability(x.device) >= (8, 0):
            h = F.scaled_dot_product_attention(x, x, x)
        elif torch.backends.mkldnn.is_available() and x.device.type == "cpu":
            h = torch.softmax(x @ x.transpose(1, 2) / math.sqrt(x.shape[-1]), -1) @ x
        else:
            h = x
        return self.fc(h)


class LocalNamedTupleOutput(nn.Module):
    """An output type made inside forward with collections.namedtuple (older research code)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 8)

    def forward(self, x):
        import collections
        Out = collections.namedtuple("Out", ["logits", "probs"])
        logits = self.fc(x)
        o = Out(logits, logits.softmax(-1))
        return o.logits * 2 + o.probs


case("device_capability_branch", SEQ)(lambda: DeviceCapabilityBranch())
case("local_namedtuple_output", SEQ)(lambda: LocalNamedTupleOutput())


CASES = bench.CASES[_FIRST:]


if __name__ == "__main__":
    bench.main(CASES)
