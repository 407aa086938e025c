"""A training call's forward calls the lean Function's apply directly (lean_autograd.direct_forward)
where aot_autograd's runtime wrapper around it is the plain one: outputs, gradients and errors as
eager's, view replay and grad mode left as they were, aot_autograd's own wrapper where the graph
is not the plain case (a written input) or while the profiler records."""
import warnings

import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap import lean_autograd


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture
def built(monkeypatch):
    """The (aot_autograd function, direct_forward's result) pairs of graphs compiled meanwhile."""
    seen = []
    real = lean_autograd.direct_forward

    def spy(fwd):
        out = real(fwd)
        seen.append((fwd, out))
        return out
    monkeypatch.setattr(lean_autograd, "direct_forward", spy)
    return seen


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def _mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _grads(m):
    return [p.grad.clone() for p in m.parameters()]


def test_plain_training_steps_call_the_function_directly(built):
    """SGD steps of an MLP: the compiled graph's forward is the direct one, and every step's
    output, loss and gradients equal eager's (weights updated between steps)."""
    ref, m = _mlp(0), _mlp(0)
    fast = mlircap.compile(m)
    opts = [torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(m.parameters(), lr=0.1)]
    x = torch.randn(5, 6)
    for _ in range(5):
        res = []
        for fn, opt, mod in ((ref, opts[0], ref), (fast, opts[1], m)):
            opt.zero_grad()
            out = fn(x)
            loss = out.pow(2).mean()
            loss.backward()
            res.append([out.detach(), loss.detach()] + _grads(mod))
            opt.step()
        for a, b in zip(*res):
            _close(a, b)
    assert built and all(out is not fwd and out._mlircap_direct is fwd for fwd, out in built)


def test_view_replay_and_grad_mode_left_as_they_were(built):
    """The direct call turns view replay on around the apply only: off before, off after; on
    before (someone else's), still on after. Gradients as eager's either way."""
    m = _mlp(1)
    fast = mlircap.compile(m)
    x = torch.randn(4, 6)
    for _ in range(3):
        fast(x).sum().backward()
    assert any(out is not fwd for fwd, out in built)
    for replay in (False, True):
        torch._C._set_view_replay_enabled(replay)
        try:
            res = []
            for fn in (m, fast):
                m.zero_grad()
                fn(x).pow(2).sum().backward()
                assert torch._C._is_view_replay_enabled() is replay
                assert torch.is_grad_enabled()
                res.append(_grads(m))
        finally:
            torch._C._set_view_replay_enabled(False)
        for a, b in zip(*res):
            _close(a, b)


def test_under_the_profiler_and_retain_graph(built):
    """Calls while torch.profiler records take aot_autograd's wrapper (its records); a
    retain_graph backward twice, and a second backward without it raising, as eager's."""
    m = _mlp(2)
    fast = mlircap.compile(m)
    x = torch.randn(3, 6)
    for _ in range(3):
        fast(x).sum().backward()
    res = []
    for fn in (m, fast):
        m.zero_grad()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            loss = fn(x).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()
        res.append(_grads(m))
    for a, b in zip(*res):
        _close(a, b)


def test_output_hook_and_create_graph(built):
    """A hook on the output scales its gradient; create_graph (a second-order gradient) still
    differentiates the captured graph: as eager's."""
    def g(x, w):
        return torch.tanh(x @ w).sum(-1)
    c = mlircap.compile(g)
    torch.manual_seed(3)
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    for _ in range(4):
        res = []
        for fn in (g, c):
            x.grad = w.grad = None
            y = fn(x, w)
            y.register_hook(lambda gr: gr * 3)
            y.sum().backward()
            gw, = torch.autograd.grad(fn(x, w).pow(2).sum(), (w,), create_graph=True)
            hx, = torch.autograd.grad(gw.sin().sum(), (x,))
            res.append((x.grad.clone(), w.grad.clone(), gw.detach(), hx))
        for a, b in zip(*res):
            _close(a, b)
    assert any(out is not fwd for fwd, out in built)


def test_graph_writing_an_input_keeps_aot_wrapper(built):
    """BatchNorm in training writes its running statistics (a mutated input): aot_autograd's
    wrapper applies the write, so that graph keeps it; statistics and gradients as eager's."""
    torch.manual_seed(4)
    ref = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
    m = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
    m.load_state_dict(ref.state_dict())
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for _ in range(4):
        res = []
        for fn, mod in ((ref, ref), (fast, m)):
            mod.zero_grad()
            fn(x).pow(2).sum().backward()
            res.append(_grads(mod) + [mod[1].running_mean.clone(), mod[1].running_var.clone()])
        for a, b in zip(*res):
            _close(a, b)
    assert built and any(out is fwd for fwd, out in built)
