"""Low-precision rules whose wrong results showed on the GPU (bench/modules*.py --device cuda,
2026-12-04), checked on the CPU: the GPU path's rewrite of ops taking a Python number past the
dtype's range (opmath.overflowing_number), and the CPU's low-precision scans, which keep eager's
bits (float32 accumulation, tried for the GPU, differs from them on 2 of these 1200 sums)."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import mlircap
from mlircap.opmath import compute_in_float32, overflowing_number


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_scans_match_eager_bits_on_the_cpu(dtype):
    torch.manual_seed(0)
    x = torch.randn(4, 300).to(dtype)
    y = torch.rand(4, 40).to(dtype) + 0.5
    f = lambda x, y: (x.cumsum(-1), y.cumprod(-1), x * 2)  # noqa: E731
    fast = mlircap.compile(f)
    for _ in range(3):   # the first call records, then compiled
        for a, b in zip(fast(x, y), f(x, y)):
            assert torch.equal(a, b)
    assert fast.graphs and all(g.executable is not g.gm for g in fast.graphs)


def test_only_ops_with_an_overflowing_number_compute_in_float32():
    h = torch.linspace(-1, 1, 12).half()
    gm = make_fx(lambda h: (h * 70000.0 + 1, h * 2.0))(h)
    want = (h.float() * 70000.0).half() + 1, h * 2.0
    assert torch.isinf(gm(h)[0]).any()   # the number converted to float16 first
    new = compute_in_float32(gm, only=overflowing_number, rounded_numbers=False)
    converted = [n for n in new.graph.nodes if "convert_element_type" in str(n.target)]
    assert len(converted) == 2   # h up, the product down: only the mul by 70000
    for a, b in zip(new(h), want):
        assert torch.equal(a, b)
    assert compute_in_float32(make_fx(lambda h: h * 2.0)(h), only=overflowing_number) is None
