"""The reference model set used by tests, the demo and benchmarks.

Each builder returns (model in eval mode, example inputs). `transformers`
models are built from config objects with random weights: nothing is downloaded.
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d=128, h=512):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(nn.functional.gelu(self.fc1(x))))


class CNN(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, 2 * c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * c)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        return self.pool(torch.relu(self.bn2(self.conv2(x))))


class SelfAttention(nn.Module):
    def __init__(self, d=128, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


def elementwise(x, y):
    return torch.exp(x) + torch.tanh(y) * torch.sigmoid(x) - (x * y).relu() / (1 + y.abs())


class _LastHidden(nn.Module):
    """A transformers model called on token ids, returning the last hidden state."""

    def __init__(self, model, **kwargs):
        super().__init__()
        self.m = model
        self.kwargs = kwargs

    def forward(self, ids):
        return self.m(input_ids=ids, **self.kwargs).last_hidden_state


def _bert(layers=2, hidden=128, heads=4, seq=32, batch=2):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=1000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * hidden, max_position_embeddings=512, attn_implementation="eager")
    m = BertModel(cfg, add_pooling_layer=False).eval()
    return _LastHidden(m).eval(), (torch.randint(0, cfg.vocab_size, (batch, seq)),)


def _gpt2(layers=2, hidden=128, heads=4, seq=32, batch=2):
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=1000, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=512,
                     attn_implementation="eager")
    m = GPT2Model(cfg).eval()
    return _LastHidden(m, use_cache=False).eval(), (torch.randint(0, cfg.vocab_size, (batch, seq)),)


def _llama(layers=2, hidden=128, heads=4, seq=32, batch=2):
    """Llama-style decoder: RMSNorm, SwiGLU, rotary embeddings, grouped-query SDPA."""
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=int(hidden * 8 / 3) // 8 * 8,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                      max_position_embeddings=512, attn_implementation="sdpa")
    m = LlamaModel(cfg).eval()
    return _LastHidden(m, use_cache=False).eval(), (torch.randint(0, cfg.vocab_size, (batch, seq)),)


class _Pixels(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, pixels):
        return self.m(pixel_values=pixels).last_hidden_state


def _vit(layers=2, hidden=128, heads=4, image=64, batch=2):
    """Vision transformer (patch embedding conv, SDPA attention, LayerNorm, GELU MLP)."""
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=image, patch_size=16, hidden_size=hidden, num_hidden_layers=layers,
                    num_attention_heads=heads, intermediate_size=4 * hidden, attn_implementation="sdpa")
    m = ViTModel(cfg, add_pooling_layer=False).eval()
    return _Pixels(m).eval(), (torch.randn(batch, 3, image, image),)


class _BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """ResNet-18-style: stem conv + BatchNorm + max pool, 4 stages of basic blocks
    (stride-2 downsampling with 1x1 projections), global average pool, classifier."""

    def __init__(self, width=16, blocks=(2, 2, 2, 2), classes=100):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            for j in range(n):
                layers.append(_BasicBlock(cin, cout, 2 if j == 0 and i > 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class UNet(nn.Module):
    """UNet-style encoder-decoder: conv + GroupNorm + SiLU blocks, max-pool downsampling,
    nearest upsampling, skip connections concatenated on channels."""

    def __init__(self, c=16, depth=3, cin=3, cout=3):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU())

        chans = [c * 2 ** i for i in range(depth + 1)]
        self.inc = block(cin, chans[0])
        self.down = nn.ModuleList(block(chans[i], chans[i + 1]) for i in range(depth))
        self.up = nn.ModuleList(block(chans[i + 1] + chans[i], chans[i]) for i in reversed(range(depth)))
        self.out = nn.Conv2d(chans[0], cout, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for blk in self.down:
            skips.append(blk(nn.functional.max_pool2d(skips[-1], 2)))
        y = skips.pop()
        for blk in self.up:
            y = blk(torch.cat([nn.functional.interpolate(y, scale_factor=2.0, mode="nearest"), skips.pop()], 1))
        return self.out(y)


class _Seq2Seq(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids, decoder_ids):
        return self.m(input_ids=ids, decoder_input_ids=decoder_ids, use_cache=False).last_hidden_state


def _t5(layers=2, hidden=128, heads=4, seq=32, batch=2):
    """T5 encoder-decoder (relative position bias, RMS-style layer norm, cross-attention)."""
    from transformers import T5Config, T5Model

    cfg = T5Config(vocab_size=1000, d_model=hidden, d_kv=hidden // heads, d_ff=4 * hidden, num_layers=layers,
                   num_decoder_layers=layers, num_heads=heads, dropout_rate=0.0, attn_implementation="eager")
    m = T5Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    return _Seq2Seq(m).eval(), (ids, torch.randint(0, cfg.vocab_size, (batch, seq // 2)))


def _moe(layers=2, hidden=128, heads=4, seq=32, batch=2, experts=8):
    """Mixtral-style mixture of experts: top-2 routing over SwiGLU experts (token
    selection by expert is data-dependent)."""
    from transformers import MixtralConfig, MixtralModel

    cfg = MixtralConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), num_local_experts=experts,
                        num_experts_per_tok=2, max_position_embeddings=512, attn_implementation="sdpa")
    m = MixtralModel(cfg).eval()
    return _LastHidden(m, use_cache=False).eval(), (torch.randint(0, cfg.vocab_size, (batch, seq)),)


def layernorm_gelu_residual(x, w, b, r):
    """LayerNorm + GELU + residual (a transformer block's epilogue)."""
    return F.gelu(F.layer_norm(x, x.shape[-1:], w, b)) + r


def rmsnorm(x, w):
    """Llama's RMSNorm, computed in float32 as transformers does."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def softmax_rows(x):
    return torch.softmax(x, -1)


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


def swiglu(gate, up):
    return F.silu(gate) * up


def batchnorm_train(x, running_mean, running_var, w, b):
    """BatchNorm2d in training mode: per-channel statistics over N, H and W of an NCHW tensor (column
    reductions keeping the middle dim), the running statistics updated in place."""
    return F.batch_norm(x, running_mean, running_var, w, b, True, 0.1, 1e-5)


def _kernel_case(name: str, big: bool, g: torch.Generator):
    """Row reductions and gated activations at LLM sizes ("bench"), small for tests."""
    rows, cols = (8192, 4096) if big else (64, 256)
    if name == "k_layernorm":
        return layernorm_gelu_residual, (torch.randn(rows, cols, generator=g), torch.randn(cols, generator=g),
                                         torch.randn(cols, generator=g), torch.randn(rows, cols, generator=g))
    if name == "k_rmsnorm":
        n = 16384 if big else 64
        return rmsnorm, (torch.randn(n, cols, generator=g), torch.randn(cols, generator=g))
    if name == "k_softmax":
        return softmax_rows, (torch.randn(32 * 16 * 512 if big else 256, 512 if big else 64, generator=g),)
    if name == "k_cross_entropy":
        n, classes = (4096, 32000) if big else (32, 1000)
        return cross_entropy, (torch.randn(n, classes, generator=g), torch.randint(0, classes, (n,), generator=g))
    if name == "k_swiglu":
        n, h = (8192, 11008) if big else (64, 256)
        return swiglu, (torch.randn(n, h, generator=g), torch.randn(n, h, generator=g))
    if name == "k_bn_train":
        n, c, hw = (32, 128, 56) if big else (4, 8, 6)
        return batchnorm_train, (torch.randn(n, c, hw, hw, generator=g), torch.zeros(c), torch.ones(c),
                                 torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g))
    raise ValueError(name)


def build(name: str, scale: str = "small", dtype=torch.float32, device="cpu"):
    """Returns (model_or_fn, inputs). scale "small" for tests, "bench" for benchmarks."""
    big = scale == "bench"
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if name == "elementwise":
        n = (1024, 1024) if big else (64, 128)
        m, args = elementwise, (torch.randn(*n, generator=g), torch.randn(*n, generator=g))
    elif name == "mlp":
        m = MLP(1024, 4096) if big else MLP()
        args = (torch.randn(64, 128, 1024, generator=g) if big else torch.randn(8, 16, 128, generator=g),)
    elif name == "cnn":
        m = CNN(32 if big else 16)
        args = (torch.randn(32 if big else 2, 3, 64 if big else 16, 64 if big else 16, generator=g),)
    elif name == "attention":
        m = SelfAttention(768, 12) if big else SelfAttention()
        args = (torch.randn(16, 256, 768, generator=g) if big else torch.randn(2, 16, 128, generator=g),)
    elif name == "bert":
        m, args = _bert(12, 768, 12, 128, 8) if big else _bert()
    elif name == "gpt2":
        m, args = _gpt2(12, 768, 12, 128, 8) if big else _gpt2()
    elif name == "llama":
        m, args = _llama(4, 1024, 16, 256, 8) if big else _llama()
    elif name == "vit":
        m, args = _vit(12, 768, 12, 224, 16) if big else _vit()
    elif name == "resnet":
        m = ResNet(64) if big else ResNet()
        args = (torch.randn(32 if big else 2, 3, 224 if big else 64, 224 if big else 64, generator=g),)
    elif name == "unet":
        m = UNet(64, 3) if big else UNet()
        args = (torch.randn(8 if big else 2, 3, 128 if big else 32, 128 if big else 32, generator=g),)
    elif name == "t5":
        m, args = _t5(6, 512, 8, 128, 8) if big else _t5()
    elif name == "moe":
        m, args = _moe(4, 1024, 16, 256, 8) if big else _moe()
    elif name in KERNELS:
        m, args = _kernel_case(name, big, g)
    else:
        raise ValueError(name)
    if isinstance(m, nn.Module):
        m = m.eval().to(device=device, dtype=dtype)
    args = tuple(a.to(device=device, dtype=dtype) if a.is_floating_point() else a.to(device) for a in args)
    return m, args


NAMES = ("elementwise", "mlp", "cnn", "attention", "bert", "gpt2")
# Models beyond the reference set (SDPA attention, RMSNorm, rotary, GQA, patch embeddings,
# residual conv nets with BatchNorm, a GroupNorm UNet, an encoder-decoder, mixture of experts).
ZOO = ("llama", "vit", "resnet", "unet", "t5", "moe")
# bench/cpu.py's default set: the reference models plus a ResNet-style conv net (BatchNorm),
# a Llama-style decoder (RMSNorm, SwiGLU, rotary, GQA) and a vision transformer, at CPU sizes.
CPU_BENCH = NAMES + ("resnet", "llama", "vit")
# single fused kernels at LLM sizes (issue: row reductions at >= 80% of copy bandwidth), and
# BatchNorm's training statistics at a ResNet stage's size (reductions over N, H, W)
KERNELS = ("k_layernorm", "k_rmsnorm", "k_softmax", "k_cross_entropy", "k_swiglu", "k_bn_train")
