"""Hand-written attention on CUDA: one fused kernel (flash without a mask in
bf16/fp16, memory-efficient attention with a mask or in fp32), run as a library
step inside the compiled plan; values against eager (python/mlircap/attention.py)."""
import math

import pytest
import torch

import mlircap
from mlircap import attention, models

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


@pytest.fixture
def kernels(monkeypatch):
    """The fused kernels chosen, one list per compiled graph."""
    chosen = []
    orig = attention._trace

    def recording(fn, vals):
        g = orig(fn, vals)
        chosen.append([str(n.target) for n in g.graph.nodes if "attention" in str(n.target)])
        return g

    monkeypatch.setattr(attention, "_trace", recording)
    monkeypatch.setenv("MLIRCAP_FUSE_ATTENTION", "1")
    return chosen


def qkv(dtype, b=2, h=4, L=64, S=64, E=64):
    g = torch.Generator(device="cuda").manual_seed(0)
    return tuple(torch.randn(b, h, n, E, generator=g, device="cuda", dtype=dtype) for n in (L, S, S))


def plain(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1) @ v


def causal(q, k, v):
    keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    s = (q @ k.transpose(-2, -1)) * 0.125
    return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v


def check(fn, *args, tol):
    want = fn(*args)
    fast = mlircap.compile(fn)
    for _ in range(4):   # records, compiles, captures the CUDA graph, replays
        torch.testing.assert_close(fast(*args).float(), want.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2), (torch.float16, 5e-3)], ids=str)
@pytest.mark.parametrize("fn", [plain, causal], ids=lambda f: f.__name__)
def test_attention_fused_on_cuda(kernels, fn, dtype, tol):
    check(fn, *qkv(dtype), tol=tol)
    if dtype == torch.float32:   # no float32 flash kernel: left to compiled math (attention._worth_it)
        assert not kernels, kernels
        return
    assert kernels and kernels[-1], kernels   # a fused kernel, not the math variant
    if fn is plain:
        assert "flash" in kernels[-1][0], kernels


@pytest.mark.parametrize("name", ["bert", "gpt2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_models_fused_on_cuda(kernels, name, dtype):
    m, args = models.build(name, dtype=dtype, device="cuda")
    with torch.no_grad():
        check(m, *args, tol=1e-4 if dtype == torch.float32 else 5e-2)
    assert len([k for k in kernels if k]) == (0 if dtype == torch.float32 else 2), kernels   # both layers
