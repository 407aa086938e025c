"""Hand-written attention runs as one fused attention kernel (python/mlircap/attention.py).

Every test compiles a function or model, checks the compiled outputs against
eager and checks how many attentions the rewrite fused (0 where it must not)."""
import contextlib
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mlircap
from mlircap import attention, models

_FUSED_OPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


@pytest.fixture
def fused(monkeypatch):
    """The number of attentions fused in each graph compiled in the test; fuses
    at any size on the CPU (MLIRCAP_FUSE_ATTENTION=force), as tests' float32 shapes are small."""
    counts = []
    orig = attention.fuse_attention

    def counting(gm):
        n = orig(gm)
        # attentions that run as one fused kernel: those rewritten here, and SDPA calls the
        # decomposition table kept whole for that reason (bfloat16/float16 on the CPU)
        counts.append(sum(node.target in _FUSED_OPS for node in gm.graph.nodes))
        return n

    monkeypatch.setattr(attention, "fuse_attention", counting)
    monkeypatch.setenv("MLIRCAP_FUSE_ATTENTION", "force")
    return counts


@contextlib.contextmanager
def _no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def run(fn, *args, tol=None, calls=3, float64=False):
    """Compiled outputs of `calls` calls (the first records), each close to eager's
    (within `tol` for bfloat16); with `float64` also no further from fn's float64
    result than eager is (the fused kernel does not round its scores to bf16)."""
    with torch.no_grad():
        ref = fn(*args)
        fast = mlircap.compile(fn)
        outs = [fast(*args) for _ in range(calls)]
        exact = fn(*(a.double() if a.is_floating_point() else a for a in args)) if float64 else None
    for out in outs:
        if tol is None:
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        else:
            assert out.dtype == ref.dtype
            torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=tol)
        if exact is not None:
            eager_err = (ref.double() - exact).abs().max().item()
            assert (out.double() - exact).abs().max().item() <= eager_err + 1e-3, eager_err
    return fast


def qkv(b=2, h=4, L=16, S=16, E=16, Ev=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, L, E, generator=g, dtype=dtype), torch.randn(b, h, S, E, generator=g, dtype=dtype),
            torch.randn(b, h, S, Ev or E, generator=g, dtype=dtype))


def mul_scale(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1) @ v


def div_sqrt(q, k, v):
    return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1)), -1) @ v


def no_scale(q, k, v):
    return (q @ k.transpose(-2, -1)).softmax(-1) @ v


def scaled_q_and_k(q, k, v):   # SDPA's own math: sqrt(scale) on q and on k
    c = q.size(-1) ** -0.25
    return torch.softmax((q * c) @ (k.transpose(-2, -1) * c), -1) @ v


def causal_masked_fill(q, k, v):
    L, S = q.size(-2), k.size(-2)
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v


def causal_where_min(q, k, v):   # GPT-2's older form: where(causal, scores, finfo.min)
    L, S = q.size(-2), k.size(-2)
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()[None, None]
    s = q @ k.transpose(-2, -1) * 0.3
    s = torch.where(keep, s, torch.tensor(torch.finfo(s.dtype).min, dtype=s.dtype, device=s.device))
    return torch.softmax(s, -1) @ v


def masked_then_scaled(q, k, v):   # the mask before the scale: it is scaled too
    keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
    s = (q @ k.transpose(-2, -1)).masked_fill(~keep, -1e9)
    return torch.softmax(s / 4.0, -1) @ v


def upcast_softmax(q, k, v):   # Llama's eager attention: softmax in float32, cast back
    s = q @ k.transpose(2, 3) * 0.25
    return torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def pre_transposed_k(q, k, v):   # k given as k^T
    kt = k.transpose(-2, -1).contiguous()
    return torch.softmax(q @ kt * 0.25, -1) @ v


def sdpa(q, k, v):   # torch's SDPA, decomposed on the CPU (the _safe_softmax form)
    return F.scaled_dot_product_attention(q, k, v)


def einsum_attention(q, k, v):   # einsum's decomposition: permutes that move size-1 dims
    s = torch.einsum("bhld,bhsd->bhls", q, k) / math.sqrt(q.size(-1))
    return torch.einsum("bhls,bhsd->bhld", s.softmax(-1), v)


def baddbmm_attention(q, k, v):   # Bloom / GPT-NeoX style: baddbmm(zeros, q, k^T, beta, alpha)
    b, h, L, E = q.shape
    S = k.size(-2)
    zeros = torch.zeros(b * h, L, S, dtype=q.dtype)
    s = torch.baddbmm(zeros, q.reshape(b * h, L, E), k.reshape(b * h, S, E).transpose(1, 2), beta=1.0, alpha=0.3)
    return (s.softmax(-1).to(v.dtype) @ v.reshape(b * h, S, -1)).view(b, h, L, -1)


def tensor_constant_scale(q, k, v):   # the scale computed from a tensor constant
    return torch.softmax(q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(float(q.size(-1)))), -1) @ v


def shared_kv_heads(q, k, v):   # multi-query: one k/v head expanded to all heads
    k1, v1 = (t[:, :1].expand(-1, q.size(1), -1, -1) for t in (k, v))
    return torch.softmax(q @ k1.transpose(-2, -1) * 0.3, -1) @ v1


def seq_major_layout(q, k, v):   # [b, s, h, d] tensors transposed inside
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return (torch.softmax(q @ k.transpose(-2, -1) * 0.3, -1) @ v).transpose(1, 2)


def bias_on_the_left(q, k, v):   # T5 style: a position bias (full shape, computed here) + scores, no scale
    bias = (torch.arange(k.size(-2)) - torch.arange(q.size(-2))[:, None]).abs().to(q.dtype).neg() * 0.1
    return torch.softmax(bias.expand(q.size(0), q.size(1), -1, -1) * 1.0 + q @ k.transpose(-2, -1), -1) @ v


VARIANTS = [mul_scale, div_sqrt, no_scale, scaled_q_and_k, causal_masked_fill, causal_where_min,
            masked_then_scaled, upcast_softmax, pre_transposed_k, sdpa, einsum_attention, baddbmm_attention,
            tensor_constant_scale, shared_kv_heads, seq_major_layout, bias_on_the_left]


@pytest.mark.parametrize("fn", VARIANTS, ids=lambda f: f.__name__)
def test_variants_fused_float32(fused, fn):
    run(fn, *qkv())
    assert fused and fused[-1] == 1, fused


@pytest.mark.parametrize("fn", VARIANTS, ids=lambda f: f.__name__)
def test_variants_fused_bfloat16(fused, fn):
    # the fused kernel keeps the scores and probabilities in float32: close to eager
    # (a few bf16 ulps) and at least as close to the float64 result
    run(fn, *qkv(dtype=torch.bfloat16), tol=5e-2, float64=True)
    assert fused and fused[-1] == 1, fused


def test_cross_attention_shapes(fused):
    # L != S; v's head dim != q's is fused where the kernel takes it (not torch's CPU flash)
    run(causal_masked_fill, *qkv(L=12, S=20, E=16))
    run(mul_scale, *qkv(L=12, S=20, E=16))
    with _no_warnings():   # torch's notes on the kernels it could not use are not shown
        run(mul_scale, *qkv(L=12, S=20, E=16, Ev=24))
    assert fused == [1, 1, 0]


def test_additive_padding_mask(fused):
    q, k, v = qkv()
    mask = torch.zeros(2, 1, 1, 16)
    mask[1, ..., 11:] = torch.finfo(torch.float32).min   # BERT's padding mask
    run(lambda q, k, v, m: torch.softmax(q @ k.transpose(-2, -1) / 4 + m, -1) @ v, q, k, v, mask)
    # a mask as the left operand, and two masks (padding + a bias per head)
    bias = torch.randn(1, 4, 16, 16)
    run(lambda q, k, v, m, b: torch.softmax(m + (q @ k.transpose(-2, -1)) * 0.25 + b, -1) @ v, q, k, v, mask, bias)
    assert fused == [1, 1]


def test_three_dimensional_attention(fused):
    # no head dim: [batch, L, E] (bmm directly)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 10, 8, generator=g) for _ in range(3))
    run(mul_scale, q, k, v)
    assert fused == [1]


def test_eval_dropout_and_modules(fused):
    class Block(nn.Module):
        def __init__(self, d=64, heads=4):
            super().__init__()
            self.heads, self.qkv, self.proj, self.drop = heads, nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Dropout(0.1)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = self.drop(torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, -1))
            return self.proj((a @ v).transpose(1, 2).reshape(b, t, d))

    torch.manual_seed(0)
    m = Block().eval()
    run(m, torch.randn(2, 12, 64), tol=1e-5)
    assert fused == [1]


def test_not_fused_when_probabilities_are_used_elsewhere(fused):
    def also_returns_probs(q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
        return p @ v, p

    def scores_used_twice(q, k, v):
        s = q @ k.transpose(-2, -1)
        return torch.softmax(s, -1) @ v + s.mean()

    def softmax_over_queries(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-2) @ v

    def small_fill(q, k, v):   # -1 is not "masked out": where semantics differ from an additive mask
        keep = torch.ones(16, 16, dtype=torch.bool).tril()
        return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~keep, -1.0), -1) @ v

    def tensor_scale(q, k, v, t):
        return torch.softmax(q @ k.transpose(-2, -1) * t, -1) @ v

    for fn in (also_returns_probs, scores_used_twice, softmax_over_queries, small_fill):
        fused.clear()
        run(fn, *qkv())
        assert fused and not any(fused), (fn.__name__, fused)
    fused.clear()
    run(tensor_scale, *qkv(), torch.rand(2, 4, 16, 1) + 0.5)
    assert fused and not any(fused)

    def mask_broadcasts_scores_up(q, k, v, m):   # scores [h, L, S] + mask [b, h, L, S]
        return torch.softmax(q[0] @ k[0].transpose(-2, -1) + m, -1) @ v

    fused.clear()
    run(mask_broadcasts_scores_up, *qkv(), torch.randn(2, 4, 16, 16))
    assert fused and not any(fused)


def test_float32_mask_of_bfloat16_scores_is_not_rounded(fused):
    # a float32 mask promotes bf16 scores to float32 in eager; rounding it to
    # bf16 for the fused kernel would change the result: not fused
    q, k, v = qkv(dtype=torch.bfloat16)
    bias = torch.randn(1, 4, 16, 16) * 3
    run(lambda q, k, v, b: torch.softmax(q @ k.transpose(-2, -1) * 0.25 + b, -1).to(q.dtype) @ v, q, k, v, bias,
        tol=2e-2)
    assert fused and not any(fused)


def test_training_graph_keeps_what_backward_needs(fused):
    # the softmax is saved for backward: the forward graph is not rewritten; gradients match eager
    q, k, v = (t.requires_grad_() for t in qkv())
    fast = mlircap.compile(causal_masked_fill)
    for _ in range(2):
        out = fast(q, k, v)
        grads = torch.autograd.grad(out.sum(), (q, k, v))
    ref = causal_masked_fill(q, k, v)
    want = torch.autograd.grad(ref.sum(), (q, k, v))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert fused and not any(fused)


def test_switch_off(fused, monkeypatch):
    monkeypatch.setenv("MLIRCAP_FUSE_ATTENTION", "0")
    run(mul_scale, *qkv())
    assert fused == [0]


def test_cpu_size_floor(fused, monkeypatch):
    # by default the CPU fuses only where its flash kernel is faster than the compiled bmm + softmax + bmm
    monkeypatch.setenv("MLIRCAP_FUSE_ATTENTION", "1")
    run(mul_scale, *qkv())                                          # float32, 2K scores: not fused
    run(mul_scale, *qkv(b=4, h=4, L=128, S=128))                    # float32, 256K: fused
    run(mul_scale, *qkv(dtype=torch.bfloat16), tol=5e-2, float64=True)   # bf16, 2K: not fused
    run(mul_scale, *qkv(b=4, h=4, L=128, S=128, dtype=torch.bfloat16), tol=5e-2)   # bf16, 256K: not fused
    run(mul_scale, *qkv(b=1, h=16, L=512, S=512, dtype=torch.bfloat16), tol=5e-2)  # bf16, 4M: fused
    assert fused == [0, 1, 0, 0, 1]


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit", "llama"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_transformers_models(fused, name, dtype):
    # BERT: scaled scores (+ padding mask); GPT-2: causal where-mask; ViT and Llama
    # call SDPA (decomposed on the CPU); Llama: GQA, rotary, a float32 0/-inf mask
    # of bf16 scores, built again in bf16 (exact). Every layer's attention is fused.
    m, args = models.build(name, dtype=dtype)
    run(m, *args, tol=None if dtype == torch.float32 else 5e-2)
    assert sum(fused) == 2, fused   # the tests' configs have 2 layers


def test_bert_with_padding_mask(fused):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, attn_implementation="eager")
    m = BertModel(cfg, add_pooling_layer=False).eval()
    ids = torch.randint(0, 100, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0

    def f(ids, mask):
        return m(input_ids=ids, attention_mask=mask).last_hidden_state

    run(f, ids, mask)
    assert sum(fused) == 2, fused


def test_cuda_fuses_only_low_precision():
    # H200 (d2be5b1): the ViT bf16 bench's attention runs in float32 after SDPA's
    # decomposition upcasts q and k; fused, it ran as 12 memory-efficient float32 kernels
    # (1.40 ms) and the model was slower than compiled math. float32 stays unfused on CUDA.
    from mlircap.attention import _worth_it

    cuda = torch.device("cuda")
    assert _worth_it(cuda, torch.bfloat16, 16) and _worth_it(cuda, torch.float16, 16)
    assert not _worth_it(cuda, torch.float32, 1 << 24)
