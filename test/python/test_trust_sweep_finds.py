"""Trust regressions found by the OpInfo differential sweep (bench/opinfo.py, issue 10) that
are not normalization numerics (those: test_trust_norms.py). Each test compares compiled
calls with eager and checks that the graph really compiled."""
import pytest
import torch
import torch.nn.functional as F

import mlircap


def _ran_compiled(fast) -> bool:
    return bool(fast.graphs) and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


@pytest.mark.parametrize("fn", [
    lambda x: F.softmax(x, 0),
    lambda x: F.softmax(x, -1, dtype=torch.float64),
    lambda x: F.softmin(x, 0),
    lambda x: F.log_softmax(x, 0) * 2,
    lambda x: torch.softmax(x * 3, 0) + x,
], ids=["softmax", "softmax_dtype", "softmin", "log_softmax", "softmax_in_graph"])
@pytest.mark.parametrize("value", [3.0, -0.5, float("inf"), float("nan")])
def test_softmax_of_a_0d_tensor(monkeypatch, fn, value):
    """softmax over a 0-d tensor: torch-mlir's lowering never returned (OpInfo softmax,
    softmin, softmax.with_dtype #6 timed out; the compile worker spun for its 900 s
    timeout before the graph ran eagerly). A timeout of 120 s turns a regression into
    a fallback, which the test rejects."""
    monkeypatch.setenv("MLIRCAP_COMPILE_TIMEOUT", "120")
    x = torch.tensor(value)
    want = fn(x)
    fast = mlircap.compile(fn)
    for _ in range(3):
        torch.testing.assert_close(fast(x), want, equal_nan=True)
    assert _ran_compiled(fast), [g.fallback_reason for g in fast.graphs]
