"""A Linear's bias on a real GPU (mlircap-matmul-bias): the plan's matmul step takes the 1-D bias as
a third operand and runs as torch.addmm, eager's own call for F.linear (cuBLASLt adds the bias in
its epilogue). A bf16 Linear's result is stored bf16: before, the matmul wrote its float32 sum for a
kernel to add the bias and round. Values against eager, bit for bit for a plain Linear."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


def _mm_steps(fast):
    return [(g.executable.plan, s) for g in fast.graphs for s in g.executable.plan.library_steps
            if s.op.startswith("matmul")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(256, 1024), (4, 64, 1024)], ids=["2d", "3d"])
def test_linear_is_eagers_addmm(shape, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, device="cuda", generator=g).to(dtype)
    w = torch.randn(768, 1024, device="cuda", generator=g).to(dtype) / 32
    b = torch.randn(768, device="cuda", generator=g).to(dtype)
    fast = mlircap.compile(lambda t, k, c: F.linear(t, k, c))
    want = F.linear(x, w, b)
    for _ in range(3):   # (the third replays a CUDA graph)
        assert torch.equal(fast(x, w, b), want)
    [(plan, step)] = _mm_steps(fast)
    assert len(step.ins) == 3 and plan.values[step.out].torch_dtype == dtype
    assert not plan.kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mlp_matmuls_add_their_bias(dtype):
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda().to(dtype).eval()
    x = torch.randn(64, 512, device="cuda", dtype=dtype)
    fast = mlircap.compile(m)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    with torch.no_grad():
        want = m(x)
        for _ in range(3):
            torch.testing.assert_close(fast(x), want, **tol)
    steps = _mm_steps(fast)
    assert [len(s.ins) for _, s in steps] == [3, 3]
    assert all(p.values[s.out].torch_dtype == dtype for p, s in steps)
    [plan] = {id(p): p for p, _ in steps}.values()
    assert len(plan.kernels) == 1   # the GELU
