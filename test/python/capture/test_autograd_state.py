"""Tensor.requires_grad_() / `t.requires_grad = True` / retain_grad() on a tensor the function
computed: a graph cannot make its own tensors autograd leaves, so the call is a step between
graphs on the tensor the graph before it returns (graph.py), as Dynamo breaks there.
Before, capture gave up and the whole function ran eagerly (bench/capture2.py
wgan_gradient_penalty_train: WGAN-GP's interpolate.requires_grad_(True))."""
import copy

import torch
import torch.nn as nn

from harness import EAGER, run_program, same
from mlircap.capture import capture


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, real, fake, eps):
        xi = (eps * real + (1 - eps) * fake).requires_grad_(True)
        g, = torch.autograd.grad(self.net(xi).sum(), xi, create_graph=True)
        gp = ((g.norm(2, dim=1) - 1) ** 2).mean()
        return self.net(fake).mean() - self.net(real).mean() + 10 * gp


def test_gradient_penalty_parameter_grads_match_eager():
    torch.manual_seed(0)
    ref = Critic()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(4):
        real, fake, eps = torch.randn(4, 8), torch.randn(4, 8), torch.rand(4, 1)
        le, lc = ref(real, fake, eps), fast(real, fake, eps)
        same(lc, le, f"call {i} loss")
        le.backward()
        lc.backward()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p.grad, q.grad, f"call {i} grad {n}")
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert c.stats.replays == 3
    assert any("requires_grad_" in b[0] for b in c.variants[0].breaks), c.variants[0].breaks


def test_input_gradient_with_attribute_form():
    """A saliency map: the detached input made a leaf by `x.requires_grad = True`, the
    gradient of the score taken in the function."""
    run_program("""
class Saliency(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        x = x.detach() * 1.0
        x.requires_grad = True
        score = self.fc(x).max(-1).values.sum()
        g, = torch.autograd.grad(score, x)
        return g.abs(), x.requires_grad
def make():
    return Saliency()
""", [(torch.randn(4, 8),) for _ in range(3)])


def test_retain_grad_of_an_intermediate():
    """retain_grad() on an activation, then backward in the function and its .grad returned."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 1)
    def forward(self, x):
        h = torch.tanh(self.a(x))
        h.retain_grad()
        self.b(h).sum().backward()
        return h.grad * 1.0
def make():
    return M()
""", [(torch.randn(4, 8),) for _ in range(3)])
