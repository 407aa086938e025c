"""OpInfo sweep (bench/opinfo.py, issue 10), 2026-12-05: dtypes and inputs earlier sweeps left
out (float64 over every op, complex64, integer / bool arithmetic, bfloat16 / float16 pointwise
math, OpInfo's reference_inputs). Each case compares compiled calls with eager."""
import pytest
import torch

import mlircap


@pytest.mark.parametrize("shape", [(3,), (), (2, 3, 4), (0, 3)])
def test_bernoulli_of_float64_probabilities_draws_like_eager(shape):
    # OpInfo bernoulli float64 #0/#1/#3 were WRONG: eager's CPU kernel draws one float64
    # uniform per element for a double p (bernoulli_distribution<double>); torch's
    # decomposition drew float32 uniforms from the same generator (5-8 of 24 elements
    # differed with the same seed)
    p = torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def fn(p):
        return torch.bernoulli(p)

    fast = mlircap.compile(fn)
    for seed in (1234, 1235, 1236):
        torch.manual_seed(seed)
        want = fn(p)
        torch.manual_seed(seed)
        got = fast(p)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), (got, want)
        # the generator is spent as eager spends it: the next draw is eager's too
        torch.manual_seed(seed)
        fn(p)
        after_eager = torch.rand(4)
        torch.manual_seed(seed)
        fast(p)
        assert torch.equal(torch.rand(4), after_eager)
