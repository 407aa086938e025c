"""CPU training steps of convolution nets: the backward graph's library islands of one op (a
convolution's backward, run through torch) call the op's kernel directly
(backend._single_op_call), without the island's generated forward; losses, gradients and the
trained weights stay eager's, and islands of several ops keep the generated forward."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap import backend


class _Conv1dPlain(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 16, 3, padding=1)
        self.c2 = nn.Conv1d(16, 16, 3, padding=1, stride=2)
        self.fc = nn.Linear(16 * 32, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.flatten(1))


class _Grouped2d(nn.Module):
    """A grouped 2-D convolution (an island in the forward too) and a depthwise one with a
    channel multiplier, then a mean."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=1, groups=2)
        self.b = nn.Conv2d(8, 16, 3, padding=1, groups=8, bias=False)

    def forward(self, x):
        return torch.tanh(self.b(torch.relu(self.a(x)))).mean((2, 3))


def _spy_islands(monkeypatch):
    seen = []
    orig = backend._EagerIsland.__call__

    def spy(self, *args):
        seen.append(self)
        return orig(self, *args)
    monkeypatch.setattr(backend._EagerIsland, "__call__", spy)
    return seen


@pytest.mark.parametrize("make,shape", [(_Conv1dPlain, (8, 4, 64)), (_Grouped2d, (2, 4, 9, 9))])
def test_training_steps_as_eager(monkeypatch, make, shape):
    torch.manual_seed(0)
    ref = make().train()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    opt_e = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9)
    opt_m = torch.optim.SGD(mine.parameters(), lr=1e-2, momentum=0.9)
    seen = _spy_islands(monkeypatch)
    for _ in range(4):
        x = torch.randn(*shape)
        for model, opt in ((ref, opt_e), (fast, opt_m)):
            opt.zero_grad(set_to_none=True)
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)   # no graph failing on its run
                loss = model(x).pow(2).mean()
                loss.backward()
            if model is ref:
                le, ge = loss.detach(), [p.grad.clone() for p in ref.parameters()]
        torch.testing.assert_close(loss.detach(), le, rtol=1e-5, atol=1e-6)
        for p, g in zip(mine.parameters(), ge):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
        opt_e.step()
        opt_m.step()
    for p, q in zip(mine.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)
    bwd = [i for i in seen if "aten::convolution_backward" in i.gm.code or
           "convolution_backward" in i.gm.code]
    assert bwd, "no convolution backward island ran"
    assert all(i.direct is not None for i in bwd)


def test_multi_op_island_keeps_generated_forward():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten.relu.default, (x,))
    b = g.call_function(torch.ops.aten.neg.default, (a,))
    g.output((b,))
    assert backend._single_op_call(torch.fx.GraphModule({}, g)) is None
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    y = g.call_function(torch.ops.aten.mm.default, (x, w))
    g.output((y, y))
    island = backend._EagerIsland(torch.fx.GraphModule({}, g), {"mm": "library"})
    assert island.direct is not None
    xa, wa = torch.randn(3, 4), torch.randn(4, 5)
    r = island(xa, wa)
    assert isinstance(r, tuple) and len(r) == 2
    torch.testing.assert_close(r[0], xa @ wa)
    with pytest.raises(RuntimeError):   # the op's own error, as the generated forward raised it
        island(xa, torch.randn(3, 5))
