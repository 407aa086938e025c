"""GroupNorm and whole-tensor reductions on CUDA: long rows over few rows are
summed in two levels (python/mlircap/split_reductions.py); values against eager."""
import pytest
import torch
import torch.nn.functional as F

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm_and_full_reductions_on_gpu(monkeypatch, capfd, dtype):
    monkeypatch.delenv("MLIRCAP_SPLIT_REDUCTIONS", raising=False)

    def f(x, w, b):
        y = F.silu(F.group_norm(x, 4, w, b))
        return y, y.mean(), x.sum(dim=(1, 2, 3))

    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(64, device="cuda", generator=g).to(dtype)
    b = torch.randn(64, device="cuda", generator=g).to(dtype)
    mlircap.set_logs("passes")
    try:
        fast = mlircap.compile(f)
        for _ in range(3):
            x = (torch.randn(4, 64, 64, 64, device="cuda", generator=g) * 2 + 1).to(dtype)
            tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
            for got, want in zip(fast(x, w, b), f(x, w, b)):
                torch.testing.assert_close(got, want, **tol)
        assert "long reduction(s) over few rows in two levels" in capfd.readouterr().err
    finally:
        mlircap.set_logs()
