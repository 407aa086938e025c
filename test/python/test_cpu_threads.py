"""CPU kernels on several threads (mlircap-outline-parallel + the core's pool):
same bits whatever the thread count, which follows torch.set_num_threads."""
import pytest
import torch

import mlircap
from mlircap._core import core


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b)


def softmax_rows(x):
    return torch.softmax(x * 0.5, dim=-1)


def column_sum(x):
    return (x * x).sum(dim=0) + 1


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(torch.tanh(x), x.shape[-1:], w, b)


CASES = {
    "bias_gelu": (bias_gelu, lambda: (torch.randn(64, 96, 256), torch.randn(256))),
    "softmax_rows": (softmax_rows, lambda: (torch.randn(512, 1000),)),
    "column_sum": (column_sum, lambda: (torch.randn(300, 4000),)),
    "layer_norm": (layer_norm, lambda: (torch.randn(4096, 64), torch.randn(64), torch.randn(64))),
    # Odd sizes: chunks of uneven length, a tail loop in every chunk.
    "odd_sizes": (bias_gelu, lambda: (torch.randn(7, 333, 101), torch.randn(101))),
}


def compiled_call(fast, args, threads):
    torch.set_num_threads(threads)
    fast(*args)                    # a changed global may record again
    out = fast(*args)
    assert core().get_num_threads() == threads
    return out


@pytest.mark.parametrize("name", CASES)
def test_same_bits_with_1_2_3_threads(name, restore_threads):
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    fast = mlircap.compile(fn, strict=True)
    with torch.no_grad():
        ref = fn(*args)
        outs = {n: compiled_call(fast, args, n) for n in (1, 2, 3)}
    torch.testing.assert_close(outs[1], ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(outs[1], outs[2]) and torch.equal(outs[1], outs[3])
    assert "mlircap_parallel_for" in fast.ir("llvm")   # big enough to be dispatched


def test_thread_count_follows_torch(restore_threads):
    fast = mlircap.compile(bias_gelu)
    x, b = torch.randn(8, 4), torch.randn(4)
    with torch.no_grad():
        for n in (2, 1, 3):
            torch.set_num_threads(n)
            fast(x, b)
            fast(x, b)
            assert core().get_num_threads() == n


def test_small_kernels_stay_single_threaded():
    fast = mlircap.compile(bias_gelu)
    x, b = torch.randn(8, 4), torch.randn(4)
    with torch.no_grad():
        fast(x, b)
        torch.testing.assert_close(fast(x, b), bias_gelu(x, b))
    assert "mlircap_parallel_for" not in fast.ir("llvm")


def test_whole_graph_fallback_path_runs_parallel_loops(restore_threads):
    """mlircap_cpu_compile (the whole graph as loops, no launch plan) uses the
    same lowering: its outlined loops give the same result on 1 and 2 threads."""
    ir = """
    func.func @main(%x: tensor<256x512xf32>) -> tensor<256x512xf32> {
      %e = tensor.empty() : tensor<256x512xf32>
      %y = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                           iterator_types = ["parallel", "parallel"]}
          ins(%x : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
        ^bb0(%a: f32, %o: f32):
          %t = math.tanh %a : f32
          linalg.yield %t : f32
      } -> tensor<256x512xf32>
      return %y : tensor<256x512xf32>
    }"""
    from mlircap.runtime.cpu import CpuExecutable

    exe = CpuExecutable(ir, "main", [((256, 512), torch.float32)])
    x = torch.randn(256, 512)
    outs = []
    for n in (1, 2):
        torch.set_num_threads(n)
        outs.append(exe(x)[0])
        assert core().get_num_threads() == n
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[0], torch.tanh(x), rtol=1e-5, atol=1e-6)


_POOL_SCRIPT = """
import torch, mlircap
torch.set_num_threads(2)
torch.manual_seed(0)
x, b = torch.randn(64, 96, 256), torch.randn(256)
f = lambda x, b: torch.nn.functional.gelu(x + b) * torch.sigmoid(x)
fast = mlircap.compile(f, strict=True)
with torch.no_grad():
    fast(x, b)
    for _ in range(3):   # alternate with torch's own OpenMP work
        y = fast(x, b)
        (x.view(-1, 256) @ x.view(-1, 256).t()[:256]).sum()
    torch.testing.assert_close(y, f(x, b), rtol=1e-4, atol=1e-4)
assert "mlircap_parallel_for" in fast.ir("llvm")
torch.save(y, {path!r})
"""


def test_openmp_team_and_own_pool_give_the_same_bits(tmp_path):
    """Where torch's libgomp is loaded, kernels run on its OpenMP team (one set of
    threads with torch's own ops, no second pool spinning on the same cores);
    MLIRCAP_CPU_POOL=own keeps the core's pool. Both split the work into the same
    chunks: the same bits, and eager's values."""
    import os
    import subprocess
    import sys

    outs = {}
    for pool in ("", "own"):
        path = tmp_path / f"out{pool}.pt"
        env = dict(os.environ, MLIRCAP_CPU_POOL=pool)
        subprocess.run([sys.executable, "-c", _POOL_SCRIPT.format(path=str(path))], check=True, env=env,
                       timeout=300)
        outs[pool] = torch.load(path)
    assert torch.equal(outs[""], outs["own"])
