"""Regressions found by the session-31 sweep of the capture corpora (bench/capture_all.py)."""
import importlib.util
import os

import torch
import torch.nn as nn

_BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "capture.py")


def _harness():
    spec = importlib.util.spec_from_file_location("_bench_capture_harness", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.BACKEND = mod._eager_backend
    return mod


class _Noise(nn.Module):
    def forward(self, x, gen):
        return x + torch.rand(x.shape, generator=gen)


def test_capture_harness_gives_each_side_its_own_generator():
    """bench/capture.py's run_mine passed the same torch.Generator argument to the eager and the
    captured call: the second drew on from the first's state, and every case of bench/modules16.py
    taking a generator argument (min_p_sampling, random_flips, color_jitter, mixup) was counted
    wrong by capture_all.py with an eager backend."""
    bench = _harness()
    res = bench.run_mine("noise_generator_arg", _Noise,
                         lambda i=0: (torch.randn(3, 4), torch.Generator().manual_seed(7 + i)), False)
    assert res["ok"], res
    g = torch.Generator().manual_seed(3)
    c = bench._clone(g)
    assert c is not g and torch.equal(c.get_state(), g.get_state())
    assert bench._same(g, c)
    torch.rand(2, generator=c)
    assert not bench._same(g, c)
