"""Fixes found by bench/modules16.py (held-out real-world-style programs: inference utilities,
hand-written losses, quantization helpers, training loops), each a small program compared with
eager after every call."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap


class _Binarize(torch.autograd.Function):
    """BinaryConnect's sign with the hardtanh straight-through gradient: the forward has no
    gradient path of its own (a comparison and a where of constants)."""

    @staticmethod
    def forward(ctx, w):
        ctx.save_for_backward(w)
        return torch.where(w >= 0, 1.0, -1.0)

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g * (w.abs() <= 1).to(g.dtype)


class _Round(torch.autograd.Function):
    """A fake-quant rounding whose gradient passes straight through."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class _STEStep(nn.Module):
    """A training step through a straight-through Function: the weight reaches the loss only
    through the Function, optimizer.step() (a call between graphs) after backward."""

    def __init__(self, fn, opt):
        super().__init__()
        self.fn = fn
        self.fc = nn.Linear(6, 4)
        self.opt = opt(self.parameters(), lr=0.3)

    def forward(self, x, y):
        w = self.fn.apply(self.fc.weight)
        loss = F.cross_entropy(F.linear(x, w, self.fc.bias), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach()


@pytest.mark.parametrize("fn", [_Binarize, _Round], ids=["binarize", "round"])
@pytest.mark.parametrize("opt", [torch.optim.SGD, torch.optim.Adam], ids=["sgd", "adam"])
def test_straight_through_function_gradient_reaches_the_weight(fn, opt):
    """The weight's gradient through a custom Function whose forward carries no gradient: the
    compiled backward computed it, and the hook that leaves None the gradients of inputs reaching
    no differentiated output dropped it (the reach was cut at the Function's comparison / round),
    so from the second call on the weight had no .grad and the optimizer skipped it."""
    torch.manual_seed(0)
    ref = _STEStep(fn, opt)
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    with torch.enable_grad():
        for i in range(4):
            torch.manual_seed(i)
            x, y = torch.randn(8, 6), torch.randint(0, 4, (8,))
            torch.testing.assert_close(fast(x, y), ref(x, y))
            assert mine.fc.weight.grad is not None, f"call {i}: the weight got no gradient"
            torch.testing.assert_close(mine.fc.weight.grad, ref.fc.weight.grad)
            torch.testing.assert_close(mine.fc.weight, ref.fc.weight)
            torch.testing.assert_close(mine.fc.bias, ref.fc.bias)


def test_unused_head_keeps_none_gradient_beside_a_function():
    """The reach still leaves None what eager leaves None: a second head the loss does not use,
    in a graph that also applies a custom Function."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(4, 3))
    v = nn.Parameter(torch.randn(4, 3))

    def step(x):
        h = x @ _Round.apply(w)
        other = x @ v
        h.sum().backward()
        return h.detach(), other.detach()

    ref_w, ref_v = w.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
    fast = mlircap.compile(step)
    with torch.enable_grad():
        for i in range(3):
            x = torch.randn(2, 4)
            w.grad = v.grad = None
            ref_w.grad = ref_v.grad = None
            out = fast(x)
            (x @ _Round.apply(ref_w)).sum().backward()
            torch.testing.assert_close(out[0], x @ _Round.apply(ref_w).detach())
            torch.testing.assert_close(w.grad, ref_w.grad)
            assert v.grad is None, f"call {i}: the unused head's weight got a gradient"


def test_corpus_runner_compares_generators_by_state():
    """bench/modules.py's comparison of an argument after the call: a torch.Generator passed in
    (eager's and the compiled call's are distinct objects, deepcopied) agrees when both drew the
    same numbers, and differs when one drew more (it compared the objects: always 'wrong')."""
    import os
    import sys

    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
    sys.path.insert(0, os.path.abspath(bench))
    try:
        import modules as corpus
    finally:
        sys.path.pop(0)
    g = torch.Generator().manual_seed(3)
    h = copy.deepcopy(g)
    torch.rand(2, generator=g)
    torch.rand(2, generator=h)
    assert corpus.diff([g], [h], "inputs after") is None
    torch.rand(1, generator=h)
    assert "generator" in corpus.diff([g], [h], "inputs after")


class _Two(torch.autograd.Function):
    """Two outputs, each computed from one input only."""

    @staticmethod
    def forward(ctx, a, b):
        return a * 2, b * 3

    @staticmethod
    def backward(ctx, ga, gb):
        return ga * 2, gb * 3


def test_function_inputs_reach_all_its_outputs():
    """The loss uses one output of a two-output Function: eager's backward of the Function runs
    with zeros for the other output and gives its input a zero .grad (not None, which an
    optimizer skips); the reach followed the forward's own data flow (b only to the unused
    output) and left it None from the second call on."""
    def step(a, b, x):
        p, q = _Two.apply(a, b)
        (x * p).sum().backward()
        return q.detach()

    fast = mlircap.compile(step)
    with torch.enable_grad():
        for i in range(3):
            a, b, x = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True), torch.randn(3)
            a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
            torch.testing.assert_close(fast(a2, b2, x), step(a, b, x))
            torch.testing.assert_close(a2.grad, a.grad)
            assert b.grad is not None and b2.grad is not None, f"call {i}: b.grad {b2.grad} (eager {b.grad})"
            torch.testing.assert_close(b2.grad, b.grad)
