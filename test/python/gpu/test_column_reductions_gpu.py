"""Reductions that keep a middle or the innermost dim (BatchNorm's training statistics, means and
variances over tokens, column sums) on a real GPU: the split strategies of the launch plan
(reduction_split_rows / reduction_split, workgroup-memory tree combine, output-shaped epilogues)
against eager, in float32 and bfloat16, including the running-statistics updates of BatchNorm."""
import pytest
import torch
import torch.nn.functional as F

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")

SHAPES = {
    "bn_small": (4, 24, 8, 8),          # few slices per channel
    "bn_wide": (8, 96, 16, 16),         # efficientnet-like
    "bn_long": (32, 16, 64, 64),        # few channels, long columns: big blocks
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_batchnorm_train_statistics(shape, dtype):
    n, c, h, w = SHAPES[shape]
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm2d(c).cuda().to(dtype).train()
    mine = torch.nn.BatchNorm2d(c).cuda().to(dtype).train()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(lambda m, x: F.silu(m(x)))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(3):
        x = (torch.randn(n, c, h, w, device="cuda", generator=g) * 3 + 1).to(dtype)
        torch.testing.assert_close(fast(mine, x), F.silu(ref(x)), **tol)
        torch.testing.assert_close(mine.running_mean, ref.running_mean, **tol)
        torch.testing.assert_close(mine.running_var, ref.running_var, **tol)
    ex = fast.explain()
    assert ex.graph_count >= 1 and not ex.eager_reasons, str(ex)
    assert all(type(g.executable).__name__ == "GpuExecutable" for g in fast.graphs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_and_column_statistics(dtype):
    def f(t, m):
        return t.mean((0, 1)), torch.var(t, (0, 1)), m.sum(0), m.amax(0)

    fast = mlircap.compile(f)
    g = torch.Generator(device="cuda").manual_seed(2)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
    for rows, cols in ((4096, 64), (64, 4096), (3, 1000)):
        t = (torch.randn(4, 40, 96, device="cuda", generator=g) * 2 + 1).to(dtype)
        m = torch.randn(rows, cols, device="cuda", generator=g).to(dtype)
        for got, want in zip(fast(t, m), f(t, m)):
            torch.testing.assert_close(got, want, **tol)
    assert fast.graphs and all(type(g.executable).__name__ == "GpuExecutable" for g in fast.graphs)
