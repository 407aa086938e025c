"""Optimizers made inside the captured function (module_factories._optimizer_factory_call):
Reptile's inner loop over a deep copy of the model with a torch.optim.SGD made per call
(bench/modules13.py reptile_deepcopy_inner_sgd_interpolate), ANIL-style heads adapted by
an optimizer over param groups.  The constructor was traced and its `state` defaultdict could
not be made again by a replay, so capture gave up on the whole function ('call to
uncapturable Optimizer.zero_grad: cannot reproduce value of type defaultdict').  It is now a
replayed call making each replay's own optimizer (an opaque handle whose zero_grad / step are
replayed calls): the graphs between the steps are captured.

Each test compares outputs and the whole state (parameters, the attributes written) with eager
after every call, over calls whose guards miss: new shapes, a hyperparameter changed between
calls, a tensor branch after the inner steps that flips with the data."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from harness import EAGER, same
from mlircap.capture import capture


class Reptile(nn.Module):
    """The inner model deep-copied, k SGD steps made by an optimizer made in forward, the outer
    weights moved toward the adapted ones; a branch on the adapted loss after the steps."""

    def __init__(self, make_opt, branch):
        super().__init__()
        self.branch = branch
        self.net = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))
        self.make_opt = make_opt
        self.inner_lr = 0.05
        self.eps = 0.5

    def forward(self, x, y):
        inner = copy.deepcopy(self.net)
        opt = self.make_opt(inner, self.inner_lr)
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(inner(x), y).backward()
            opt.step()
        with torch.no_grad():
            adapted = F.mse_loss(inner(x), y)
            eps = self.eps
            if self.branch and adapted > 1.0:   # (flips with the data: a guard after the steps misses)
                eps = eps / 2
            for p, q in zip(self.net.parameters(), inner.parameters()):
                p.add_(eps * (q - p))
        return F.mse_loss(self.net(x), y).detach(), adapted


def _sgd(m, lr):
    return torch.optim.SGD(m.parameters(), lr=lr)


def _adam_groups(m, lr):
    return torch.optim.Adam([{"params": list(m[0].parameters()), "lr": lr},
                             {"params": m[2].parameters()}], lr=lr / 2, betas=(0.8, 0.99))


def _sgd_momentum_list(m, lr):
    return torch.optim.SGD([p for p in m.parameters()], lr=lr, momentum=0.9, nesterov=True)


def _state(m):
    return [p.detach().clone() for p in m.parameters()], m.inner_lr, m.eps


def _calls():
    torch.manual_seed(3)
    out = []
    for i in range(8):
        n = 5 if i < 4 else 7   # (a new shape: a guard misses at the start)
        out.append((torch.randn(n, 3) * (0.5 + i % 3), torch.randn(n, 1) * (0.2 + 1.5 * (i % 2))))
    return out


@pytest.mark.parametrize("branch", [False, True])
@pytest.mark.parametrize("make_opt", [_sgd, _adam_groups, _sgd_momentum_list])
def test_optimizer_made_by_the_call_is_replayed(make_opt, branch):
    torch.manual_seed(0)
    ref = Reptile(make_opt, branch)
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (x, y) in enumerate(_calls()):
            if i == 5:   # (a hyperparameter changed between calls)
                ref.inner_lr = m.inner_lr = 0.1
            same(fast(x, y), ref(x, y), f"call {i}")
            same(_state(m), _state(ref), f"call {i} state")
    c = fast._mlircap_capture
    ex = fast.explain()
    if branch:
        # (a guard after the inner steps, which wrote tensors read before them, with no continuation
        # from there: such variants run eagerly, external_calls / guard_misses; the same results)
        return
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert c.stats.replays >= 3
    assert any("made by the call" in str(b) for b in ex.breaks), ex.breaks


class ReadsOptimizer(nn.Module):
    """The optimizer's param_groups read after it is made: runs eagerly (no guard could name
    the state of a replay's own optimizer), with results as eager's."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)

    def forward(self, x, y):
        inner = copy.deepcopy(self.net)
        opt = torch.optim.SGD(inner.parameters(), lr=0.1)
        opt.zero_grad()
        F.mse_loss(inner(x), y).backward()
        opt.step()
        with torch.no_grad():
            for p, q in zip(self.net.parameters(), inner.parameters()):
                p.copy_(q * opt.param_groups[0]["lr"] + p)
        return self.net(x).detach()


def test_optimizer_made_by_the_call_read_runs_eagerly_and_matches():
    torch.manual_seed(0)
    ref = ReadsOptimizer()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (x, y) in enumerate(_calls()[:4]):
            same(fast(x, y), ref(x, y), f"call {i}")
            same([p.detach() for p in m.parameters()], [p.detach() for p in ref.parameters()], f"call {i} state")


class LazyOptimizer(nn.Module):
    """The optimizer made on the first call and kept on the module (a training step that makes
    its optimizer lazily), with momentum: later calls step the kept optimizer."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 2)
        self.opt = None

    def forward(self, x, y):
        if self.opt is None:
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)
        self.opt.zero_grad()
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()


def test_optimizer_made_on_the_first_call_and_kept():
    torch.manual_seed(0)
    ref = LazyOptimizer()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(6):
            x, y = torch.randn(4 + (i > 3), 3), torch.randn(4 + (i > 3), 2)
            same(fast(x, y), ref(x, y), f"call {i}")
            same([p.detach() for p in m.parameters()], [p.detach() for p in ref.parameters()], f"call {i} state")
            assert type(m.opt) is torch.optim.SGD and m.opt.param_groups[0]["params"][0] is m.net.weight
            same([m.opt.state[p]["momentum_buffer"] for p in m.net.parameters()],
                 [ref.opt.state[p]["momentum_buffer"] for p in ref.net.parameters()], f"call {i} momentum")
