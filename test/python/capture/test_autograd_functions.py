"""A custom torch.autograd.Function called by the captured code on a tensor that requires
grad runs as it is, so autograd attaches its own backward (a node of the graph where its
forward and backward are pure tensor code, grad_hooks.py; else a step between graphs):
a gradient reversal layer's compiled call gives eager's gradients, replayed (before: the
recording gave up and the function ran eagerly on every call, as recording its forward's
ops would have given their gradient, or none)."""
import warnings

import torch

from mlircap.capture import capture


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 10   # not the forward's gradient: only the Function's backward gives it


def _grads(fn, lin, x):
    lin.zero_grad()
    fn(x).backward()
    return lin.weight.grad.clone(), lin.bias.grad.clone()


def test_custom_function_replayed_with_its_backward():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)

    def fn(x):
        h = torch.relu(lin(x))
        return (_GradReverse.apply(h, 0.5) ** 2).sum() + _Scale.apply(h).sum()

    fast = capture(fn, lambda gm, ex: gm.forward)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no give-up warning
        for _ in range(4):
            x = torch.randn(5, 4)
            want = _grads(fn, lin, x)
            got = _grads(fast, lin, x)
            for a, b in zip(want, got):
                torch.testing.assert_close(a, b)
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants)
    assert c.stats.replays == 3 and len(c.variants) == 1
    # both are pure tensor code: one node of the graph each (grad_hooks.py), no break
    assert len(c.variants[0].graphs) == 1 and c.variants[0].breaks == [], c.variants[0].breaks


def test_custom_function_without_grad_stays_in_the_graph():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)

    def fn(x):
        return _Scale.apply(lin(x)).sum()

    fast = capture(fn, lambda gm, ex: gm.forward)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5, 4)
            torch.testing.assert_close(fast(x), fn(x))
    c = fast._mlircap_capture
    assert c.graph_count == 1 and not c.variants[0].breaks and c.stats.replays == 2
