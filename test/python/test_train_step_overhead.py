"""Training steps through mlircap.compile without the per-call autograd Function around each
compiled graph (capture/graph_compile._HigherOrderGrad): the compiled graph's own aot_autograd
node carries the call's inputs, and only a backward with create_graph=True recomputes through
the captured FX graph. Every gradient (first order, create_graph, second order, retain_graph)
is compared with eager's."""
import warnings

import pytest
import torch
import torch.nn as nn

import mlircap


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _node_names(out):
    return type(out.grad_fn).__name__


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_plain_step_runs_without_the_wrapper():
    """A plain training step's compiled call: its output's node is the compiled graph's
    (no _RecomputeForHigherOrder Function around it); gradients equal eager's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for i in range(4):
        m.zero_grad()
        out = fast(x)
        if i > 0:
            assert "RecomputeForHigherOrder" not in _node_names(out), _node_names(out)
        out.square().mean().backward()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).square().mean().backward()
        for a, b in zip(got, (p.grad for p in m.parameters())):
            _close(a, b)


def _hvp_like(fn, x, w):
    """create_graph gradients, then a gradient of a function of them (a gradient penalty)."""
    gx, gw = torch.autograd.grad(fn(x, w), (x, w), create_graph=True)
    hx, hw = torch.autograd.grad((gx * gx).sum() + gw.sin().sum(), (x, w))
    return gx.detach(), gw.detach(), hx, hw


def test_create_graph_and_second_order_match_eager():
    def g(x, w):
        return (torch.tanh(x @ w) * x.sum(-1, keepdim=True)).pow(2).sum()
    c = mlircap.compile(g)
    torch.manual_seed(1)
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    for _ in range(4):
        for a, b in zip(_hvp_like(c, x, w), _hvp_like(g, x, w)):
            _close(a, b)
        # a plain backward between them stays the compiled one, with eager's values
        x.grad = w.grad = None
        c(x, w).backward()
        got = (x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        g(x, w).backward()
        _close(got[0], x.grad)
        _close(got[1], w.grad)


def test_gradient_penalty_through_a_module():
    """WGAN-GP style: the critic's gradient w.r.t. its input, create_graph=True, then a
    penalty on its norm backpropagated into the critic's parameters."""
    torch.manual_seed(2)
    critic = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    fast = mlircap.compile(critic)
    real = torch.randn(6, 8)

    def penalty(fn):
        critic.zero_grad()
        xi = real.clone().requires_grad_()
        (gi,) = torch.autograd.grad(fn(xi).sum(), xi, create_graph=True)
        loss = ((gi.norm(2, dim=1) - 1) ** 2).mean() + fn(real).mean()
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in critic.parameters()]

    for _ in range(4):
        for a, b in zip(penalty(fast), penalty(critic)):
            _close(a, b)


def test_retain_graph_then_create_graph_on_the_same_output():
    def g(x, w):
        return (x * w).exp().sum()
    c = mlircap.compile(g)
    x = torch.randn(5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    for _ in range(3):
        res = []
        for fn in (g, c):
            y = fn(x, w)
            (g1,) = torch.autograd.grad(y, w, retain_graph=True)          # plain, graph kept
            (g2,) = torch.autograd.grad(y, x, create_graph=True)          # differentiable
            (h,) = torch.autograd.grad(g2.sum(), w)
            res.append((g1, g2.detach(), h))
        for a, b in zip(*res):
            _close(a, b)


def test_inputs_computed_from_each_other():
    """The graph after a break takes a value and a weight it came from: every path's
    gradient counted once, also under create_graph."""
    def g(x, w):
        h = torch.tanh(x * w)
        print("", end="")   # a graph break: the second graph takes h and w
        return (h * w).sum() + h.pow(3).sum()
    c = mlircap.compile(g)
    x = torch.randn(4)
    w = torch.randn(4, requires_grad=True)
    for _ in range(4):
        res = []
        for fn in (g, c):
            (gw,) = torch.autograd.grad(fn(x, w), w, create_graph=True)
            (hw,) = torch.autograd.grad(gw.pow(2).sum(), w)
            w.grad = None
            fn(x, w).backward()
            res.append((gw.detach(), hw, w.grad.clone()))
        for a, b in zip(*res):
            _close(a, b)


def test_input_changed_in_place_before_a_create_graph_backward_raises():
    """The recompute reads the call's inputs: one changed in place after the call makes the
    create_graph backward raise (as the saved inputs of the Function did), never a gradient
    of other values."""
    def g(x, w):
        return (x * w).sin().sum()
    c = mlircap.compile(g)
    x = torch.randn(5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    for _ in range(2):
        torch.autograd.grad(c(x, w), x, create_graph=True)
    y = c(x, w)
    with torch.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(y, x, create_graph=True)


def test_multiple_outputs_some_without_grad():
    def g(x, w):
        y = x @ w
        return y.relu(), y.argmax(-1), (y * y).sum()
    c = mlircap.compile(g)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    for _ in range(4):
        res = []
        for fn in (g, c):
            a, idx, s = fn(x, w)
            (gw,) = torch.autograd.grad(a.sum() + s, w, create_graph=True)
            (hx,) = torch.autograd.grad(gw.pow(2).sum(), x)
            x.grad = w.grad = None
            a2, _, s2 = fn(x, w)
            (a2.pow(2).sum() + s2).backward()
            res.append((idx, gw.detach(), hx, x.grad.clone(), w.grad.clone()))
        assert torch.equal(res[0][0], res[1][0])
        for a, b in zip(res[0][1:], res[1][1:]):
            _close(a, b)


def test_node_class_is_checked_once():
    """The aot_autograd Function class of a compiled graph is checked once and marked fit for
    the direct call; its backward is the create_graph-aware one."""
    def g(x, w):
        return (x * w).cos().sum()
    c = mlircap.compile(g)
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    for _ in range(3):
        c(x, w).backward()
    y = c(x, w)
    cls = y.grad_fn._forward_cls
    assert cls.__dict__.get("_mlircap_direct_ok") is True
    assert "_mlircap_orig_backward" in cls.__dict__


def test_outputs_viewing_one_intermediate_and_a_repeated_input():
    """Outputs that are views of one intermediate (aot_autograd returns their base as an
    extra output and regenerates the views) and an input passed twice: where the node does
    not map one to one, the call runs under the Function; gradients as eager's."""
    def g(x, w):
        y = torch.sigmoid(x * w)
        return y.view(-1), y.t(), (y * w).sum()
    c = mlircap.compile(g)
    x = torch.randn(3, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    for args in [(x, w)] * 3 + [(x, x)] * 3:
        res = []
        for fn in (g, c):
            a, b, s = fn(*args)
            (gx,) = torch.autograd.grad(a.sum() + b.pow(2).sum() + s, x, create_graph=True)
            (hx,) = torch.autograd.grad(gx.pow(2).sum(), x)
            x.grad = w.grad = None
            a, b, s = fn(*args)
            (a.sum() + b[0].sum() + s).backward()
            res.append((gx.detach(), hx, x.grad.clone(), None if w.grad is None else w.grad.clone()))
        for p, q in zip(*res):
            if p is None or q is None:
                assert p is None and q is None
            else:
                _close(p, q)
