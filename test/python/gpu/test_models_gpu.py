"""GPU end to end: mlircap on CUDA vs eager for the model set, fp32 and bf16.

Runs on a CUDA host (scripts/gpu-bundle test); elsewhere every test is skipped
with the reason shown (pytest -rs).
"""

import pytest
import torch

import mlircap
from mlircap import models

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")

TOL = {torch.float32: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(models.NAMES) + [n for n in models.ZOO if n != "moe"])
def test_model_on_gpu(name, dtype):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m, args = models.build(name, dtype=dtype, device="cuda")
    with torch.no_grad():
        ref = m(*args)
        fast = mlircap.compile(m, strict=True)
        outs = [fast(*args) for _ in range(4)]    # eager-style call, capture, replays
    for out in outs:
        torch.testing.assert_close(out.float(), ref.float(), **TOL[dtype])
    g = fast.graphs[0]
    assert g.fallback_reason is None and g.device == "cuda"
    # a launch plan runs each graph: its own kernels and library calls (the attention block in
    # bf16 is all library calls: q/k/v/out Linears as addmm with their bias, attention fused)
    assert all(type(x.executable).__name__ == "GpuExecutable" for x in fast.graphs)
    assert sum(x.executable.n_kernels + x.executable.n_library for x in fast.graphs) >= 1
    assert all(x.fallback_reason is None for x in fast.graphs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_mixture_of_experts_on_gpu_compiles_around_its_routing(dtype):
    # As on the CPU (test_models_cpu.py): the MoE's routing ops (topk, sort, histc,
    # grouped_mm) have no compiled kernel, so strict=True cannot hold; the graph is
    # split around them and the rest runs compiled.
    m, args = models.build("moe", dtype=dtype, device="cuda")
    with torch.no_grad():
        ref = m(*args)
        fast = mlircap.compile(m)
        outs = [fast(*args) for _ in range(3)]
    for out in outs:
        torch.testing.assert_close(out.float(), ref.float(), **TOL[dtype])
    compiled = [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]
    assert len(compiled) >= 4, [g.fallback_reason for g in fast.graphs]
    assert all(g.device == "cuda" for g in compiled)


def test_compile_cache_second_process(tmp_path):
    import os
    import subprocess
    import sys

    code = ("import torch, mlircap; from mlircap import models\n"
            "m, a = models.build('mlp', device='cuda')\n"
            "f = mlircap.compile(m, strict=True)\n"
            "with torch.no_grad(): f(*a)\n"
            "print('HIT' if f.graphs[0].executable.cache_hit else 'MISS')\n")
    env = {**os.environ, "MLIRCAP_CACHE_DIR": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.stdout.strip().endswith("MISS"), first.stderr[-2000:]
    assert second.stdout.strip().endswith("HIT"), second.stderr[-2000:]
