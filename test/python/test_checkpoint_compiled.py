"""A compiled module under torch.utils.checkpoint (non-reentrant) trains as eager does.

Non-reentrant checkpoint runs the forward again in the backward and checks that the
recomputation saves the tensors the forward saved. The first call of a compiled function records
(runs eagerly), and its graph then ran compiled for the first time inside that recomputation:
aot_autograd's saved tensors are not eager's, and the step raised ('Recomputed values for the
following tensors have different metadata', or, from the first-run check's eager rerun,
'Unexpected state: target_frame.early_stop is set'). A graph not yet run compiled now runs as
captured inside a recomputation (capture/graph_compile._recomputing)."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import mlircap


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def _same_grads(m, ref):
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_compiled_module_trains_as_eager(reentrant):
    m = _mlp()
    ref = copy.deepcopy(m)
    fast = mlircap.compile(m)
    for i in range(4):   # record (eager), first compiled run inside the recomputation, replays
        x = torch.randn(3, 8, requires_grad=reentrant)
        for mod, fn in ((ref, ref), (m, fast)):
            out = checkpoint(fn, x, use_reentrant=reentrant)
            out.pow(2).sum().backward()
        _same_grads(m, ref)
    assert any(g.fallback_reason is None for g in fast.graphs)   # it did run compiled


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = checkpoint(lambda z: torch.tanh(self.a(z)), x, use_reentrant=False)
        return self.b(h)


def test_checkpoint_inside_the_compiled_function():
    torch.manual_seed(0)
    m = Checkpointed()
    ref = copy.deepcopy(m)
    fast = mlircap.compile(m)
    for _ in range(4):
        x = torch.randn(3, 8)
        for fn in (ref, fast):
            fn(x).pow(2).sum().backward()
        _same_grads(m, ref)
