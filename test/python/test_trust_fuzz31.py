"""Session 31 findings of bench/fuzz_graphs.py on fresh seeds (issue 10: compiled code never
crashes, never returns a wrong result, never raises an error eager does not raise)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import mlircap


class _NormThenLoss(torch.nn.Module):
    """A norm updating running statistics, then F.gaussian_nll_loss (its `torch.any(var < 0)`
    check splits the graphs)."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x, y):
        a = self.norm(x)
        b = F.gaussian_nll_loss(y, y, y.abs() + 0.1, reduction="sum")
        return a.sum() * 0.5 + b


class _BufferIaddThenLoss(torch.nn.Module):
    """A buffer written by `+=` (__iadd__), then the same split."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(2))

    def forward(self, x, y):
        self.seen += x.detach().mean((0, 2, 3))
        a = (x * self.seen.view(1, 2, 1, 1)).sum()
        b = F.gaussian_nll_loss(y, y, y.abs() + 0.1, reduction="sum")
        return a + b


@pytest.mark.parametrize("make", [
    lambda: _NormThenLoss(torch.nn.InstanceNorm2d(2, track_running_stats=True)),
    lambda: _NormThenLoss(torch.nn.BatchNorm2d(2)),
    _BufferIaddThenLoss,
], ids=["instance_norm", "batch_norm", "buffer_iadd"])
def test_graph_writing_its_inputs_is_not_run_twice_for_higher_order_grads(make):
    """fuzz_graphs --families modules --grad seed 7018: InstanceNorm2d(track_running_stats) in
    training, then F.gaussian_nll_loss.  The graph with the norm was made differentiable twice
    (higher_order._HigherOrderGrad); its aot node failed _stash_inputs at the first replay, and
    the graph ran again under _RecomputeForHigherOrder: the running statistics were updated
    twice (running_mean 0.0895 where eager has 0.0471).  A graph taking a tensor the recording
    wrote in place (guards.mutated_ids: also the norms' unversioned writes and `+=`) no longer
    runs so."""
    torch.manual_seed(0)
    ref = make().train()
    mod = copy.deepcopy(ref)
    c = mlircap.compile(mod)
    for i in range(4):
        torch.manual_seed(10 + i)
        x, y = torch.rand(1, 2, 4, 3), torch.randn(1, 2, 4, 3)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        want = ref(xe, y)
        want.backward()
        got = c(xc, y)
        got.backward()
        for (k, b), (_, bc) in zip(ref.named_buffers(), mod.named_buffers()):
            torch.testing.assert_close(bc, b, rtol=1e-5, atol=1e-6, msg=f"call {i}: buffer {k}")
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-6)


def _restride_after_break(x):
    v0 = x * 2
    v1 = v0 + int(v0.float().sum().clamp(-100, 100))   # (.item(): the graph breaks here)
    v0.transpose_(0, -1)
    return v0 / 3, v0, v1


@pytest.mark.parametrize("grad", [True, False])
def test_in_place_view_of_an_earlier_graphs_output_requiring_grad(grad):
    """fuzz_graphs --families edges --grad seed 7128: `v0.transpose_(0, -1)` on an earlier
    graph's output that requires grad (across a graph break).  From the first replay on the
    outputs came back in v0's old shape ([6, 1, 2] for [2, 1, 6]) and backward raised
    'invalid gradient ... got [1, 1, 6] but expected [6, 1, 1]'.  Such a call now runs
    eagerly (grad); without grad it stays compiled and right."""
    c = mlircap.compile(_restride_after_break)
    for i in range(3):
        torch.manual_seed(20 + i)
        x = torch.randn(6, 1, 2)
        xe, xc = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
        want, got = _restride_after_break(xe), c(xc)
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.stride() == w.stride(), (i, g.shape, w.shape)
            torch.testing.assert_close(g, w)
        if grad:
            want[0].sum().backward()
            got[0].sum().backward()
            torch.testing.assert_close(xc.grad, xe.grad)
