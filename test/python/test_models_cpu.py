"""End to end on the CPU: mlircap.compile vs eager on the reference model set."""
import pytest
import torch

import mlircap
from mlircap import models

# fp32; reductions (LayerNorm, softmax, matmul) are summed in a different order than
# eager's kernels, so the tolerance is a few ulps of the accumulated magnitude.
RTOL, ATOL = 1e-4, 1e-4


@pytest.mark.parametrize("name", models.NAMES)
def test_model_matches_eager(name):
    m, args = models.build(name)
    with torch.no_grad():
        ref = m(*args)
        fast = mlircap.compile(m, strict=True)
        out = fast(*args)
        out2 = fast(*args)          # second call: no recompile, same result
    torch.testing.assert_close(out, ref, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
    assert len(fast.graphs) == 1
    assert all(g.fallback_reason is None for g in fast.graphs)
    for stage in ("fx", "torch", "linalg"):
        assert fast.ir(stage)
    assert "func.func @main" in fast.ir("linalg")
