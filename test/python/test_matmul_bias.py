"""A Linear's bias is passed to the library matmul (mlircap-matmul-bias, under the module attribute
mlircap.matmul_bias that runtime/plan.py puts on CPU and GPU plan IR): torch-mlir's aten.linear / addmm is a
matmul from zero, then + bias along the columns, rounded once. The plan's matmul step gets the 1-D
bias as a third operand and runs as torch.addmm, eager's own call for it. Before, the bias was added
by the kernel after the matmul, and a bf16 matmul stored its float32 sum for that kernel to add the
bias and round (on the GPU: twice the bytes written and read back, and a kernel for a Linear with
no other epilogue). Values against eager, bit for bit in float32."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from test_conv_bias import _compiled, _data, _plans   # the same harness as the convolutions' bias


def _mm_steps(fast):
    return [(p, s) for p in _plans(fast) for s in p.library_steps if s.op.startswith("matmul")]


@pytest.mark.parametrize("shape", [(24, 512), (3, 8, 512)], ids=["2d", "3d"])
def test_linear_bias_is_eagers_bits(shape):
    # K = 512: sums long enough that the bias added after the matmul rounds differently from
    # the library's addmm in places
    x, w, b = _data(shape, (40, 512), (40,))
    fast, ref, out = _compiled(lambda t, k, c: F.linear(t, k, c), x, w, b)
    assert torch.equal(out, ref)
    [(plan, step)] = _mm_steps(fast)
    assert len(step.ins) == 3 and plan.values[step.ins[2]].shape == (40,)
    assert not plan.kernels   # nothing left to add after the matmul


def test_mlp_keeps_the_activation_fused_and_drops_the_last_kernel():
    m = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32)).eval()
    x, = _data((16, 64), seed=1)
    fast, ref, out = _compiled(m, x)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)   # (GELU's erf: our kernel's, not torch's)
    steps = _mm_steps(fast)
    assert [len(s.ins) for _, s in steps] == [3, 3]
    [plan] = _plans(fast)
    [k] = plan.kernels    # the GELU, between the two matmuls
    assert [plan.values[v].shape for v in k.value_args] == [(16, 96)] * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_linear_stores_its_own_dtype(dtype):
    # the narrow sum is rounded once (eager's addmm); the matmul's result is stored narrow
    m = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32)).eval().to(dtype)
    x, = _data((16, 64), dtype=dtype, seed=2)
    fast, ref, out = _compiled(m, x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref)
    steps = _mm_steps(fast)
    assert [len(s.ins) for _, s in steps] == [3, 3]
    assert all(p.values[s.out].torch_dtype == dtype for p, s in steps)


def test_wide_sum_of_narrow_operands_keeps_the_add():
    # bf16 operands computed in float32 and returned float32: the sum is used wide, so the
    # matmul keeps its float32 result and the add stays a kernel (no narrow addmm)
    def f(x, w, b):
        return x.float() @ w.float() + b.float()
    x, w, b = _data((8, 64), (64, 24), (24,), dtype=torch.bfloat16, seed=3)
    fast, ref, out = _compiled(f, x, w, b)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    [(plan, step)] = _mm_steps(fast)
    assert len(step.ins) == 2 and plan.values[step.out].torch_dtype == torch.float32


def test_matmul_result_used_twice_keeps_the_add():
    def f(x, w, b):
        y = x @ w.t()
        return y + b, y.relu()
    x, w, b = _data((8, 64), (24, 64), (24,), seed=4)
    fast, ref, out = _compiled(f, x, w, b)
    for o, r in zip(out, ref):
        assert torch.equal(o, r)
    [(plan, step)] = _mm_steps(fast)
    assert len(step.ins) == 2


def test_training_linear_matches_eager():
    torch.manual_seed(5)
    m = nn.Sequential(nn.Linear(32, 48), nn.Tanh(), nn.Linear(48, 8))
    ref_m = nn.Sequential(nn.Linear(32, 48), nn.Tanh(), nn.Linear(48, 8))
    ref_m.load_state_dict(m.state_dict())
    fast = mlircap.compile(m)
    x, = _data((16, 32), seed=6)
    for _ in range(2):
        fast(x).square().sum().backward()
        ref_m(x).square().sum().backward()
    for p, q in zip(m.parameters(), ref_m.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reshaped_bias_stays_the_matmuls_operand(dtype, recwarn):
    # a bias viewed from a 2-D tensor: elementwise fusion folded the view's reshape into the
    # bias broadcast (a 3-D generic, then a collapse), which was no 1-D bias any more, and the
    # plan rejected the graph ("library op init must be a zero fill": the whole graph eager)
    def f(x, w, b):
        return F.linear(x, w.view(6, 3), b.view(6))
    x, w, b = _data((4, 3), (2, 3, 3), (2, 3), dtype=dtype, seed=7)
    fast, ref, out = _compiled(f, x, w, b)
    assert not [w for w in recwarn if "eagerly" in str(w.message)]
    torch.testing.assert_close(out, ref)
    [(plan, step)] = _mm_steps(fast)
    assert len(step.ins) == 3


def test_dump_has_the_plans_own_input(tmp_path, monkeypatch):
    # MLIRCAP_DUMP_DIR's fused.mlir runs the fuse pipeline on linalg.mlir as it is, without the
    # marks the plan compiler's input carries (matmul / conv bias, layouts): plan_input.mlir is
    # that input, and repro.sh fuses it into plan_fused.mlir, with the matmul adding its bias
    import subprocess

    from mlircap._core import tool_path

    monkeypatch.setenv("MLIRCAP_DUMP_DIR", str(tmp_path))
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU()).eval()
    fast, ref, out = _compiled(m, *_data((4, 16), seed=8))
    d = tmp_path / fast.graphs[0].name
    assert "mlircap.matmul_bias" in (d / "plan_input.mlir").read_text()
    assert "mlircap.matmul_bias" not in (d / "fused.mlir").read_text()
    env = {"PATH": f"{tool_path('mlircap-opt').parent}:/usr/bin:/bin"}
    subprocess.run(["sh", str(d / "repro.sh")], check=True, env=env, capture_output=True)
    fused = (d / "plan_fused.mlir").read_text()
    assert re.search(r"attrs =\s+\{mlircap.matmul_bias\}", fused) and "mlircap.conv_bias" in fused
