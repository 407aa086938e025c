"""The reference model set used by tests, the demo and benchmarks.

Each builder returns (model in eval mode, example inputs). `transformers`
models are built from config objects with random weights: nothing is downloaded.
"""
from __future__ import annotations

import torch
from torch import nn


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
    else:
        raise ValueError(name)
    if isinstance(m, nn.Module):
        m = m.eval().to(device=device, dtype=dtype)
    args = tuple(a.to(device=device, dtype=dtype) if a.is_floating_point() else a.to(device) for a in args)
    return m, args


NAMES = ("elementwise", "mlp", "cnn", "attention", "bert", "gpt2")
# Models beyond the reference set (SDPA attention, RMSNorm, rotary, GQA, patch embeddings).
ZOO = ("llama", "vit")
