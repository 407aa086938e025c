"""Host overhead of compiled training calls (session 24): per-call hooks that aot_autograd's
node makes redundant are not registered, and what they guarded still behaves as eager.

* saved_versions: an input the compiled graph's node saves itself (save_for_backward, with
  autograd's version check) needs no hook of ours; a write to it after the call still raises
  in the backward, as eager's.
* backend._unreached_gradients_as_none: a node whose every output every input reaches needs
  no hooks for missing gradients (the saved activations are no outputs of the node)."""
import warnings

import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap import backend


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def _grads(m):
    return [p.grad.clone() for p in m.parameters()]


def test_saved_input_needs_no_hook_and_gradients_equal_eager():
    """A Linear's input, saved by eager's AddmmBackward0 and by the compiled partition: the
    output carries no tensor hook (one per call before, ~10 us); gradients equal eager's."""
    m = _mlp()
    fast = mlircap.compile(m)
    x = torch.randn(4, 16)
    for i in range(4):
        m.zero_grad()
        out = fast(x)
        if i > 0:   # (the first call records, eagerly)
            assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
            assert out._backward_hooks is None
        out.pow(2).mean().backward()
        got = _grads(m)
        m.zero_grad()
        m(x).pow(2).mean().backward()
        for a, b in zip(got, _grads(m)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("view", [False, True])
def test_saved_input_written_after_the_call_raises_as_eager(view):
    """x written in place after the forward: eager's backward raises (AddmmBackward0 saved
    it); so does the compiled one's, every call (the check is autograd's own now), also where
    x is a view of a larger tensor (saved detached: the hook stays)."""
    m = _mlp()
    fast = mlircap.compile(m)
    for i in range(4):
        base = torch.randn(4, 20)
        x = base[:, :16] if view else base[:, :16].clone()
        out = fast(x)
        if i < 2:   # (a call that writes nothing first: the variant is the one checked below)
            out.sum().backward()
            continue
        x.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
        x2 = base[:, :16] if view else base[:, :16].clone()
        ref = m(x2)
        x2.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            ref.sum().backward()


def test_saved_output_written_after_the_call_still_raises():
    """exp's result, saved by eager's ExpBackward0, written after the call: still raises."""
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)

    def f(x):
        return torch.exp(x @ w)

    fast = mlircap.compile(f)
    for i in range(3):
        x = torch.randn(3, 8)
        y = fast(x)
        if i < 2:
            y.sum().backward()
            continue
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_unreached_hooks_only_where_an_input_misses_an_output():
    """Past the node's outputs (`n_returns`), what an input reaches is saved for the backward:
    every input reaching every output of the node needs no hooks; an input reaching one of
    two outputs keeps them, as does one reaching only saved values."""
    def fn(*a):
        return a

    reach = [frozenset({0, 1}), frozenset({0}), frozenset()]   # output 1: saved for the backward
    assert backend._unreached_gradients_as_none(fn, reach, 1) is fn
    assert backend._unreached_gradients_as_none(fn, reach) is not fn   # (without the count)
    assert backend._unreached_gradients_as_none(fn, [frozenset({0, 2}), frozenset({1, 2})], 2) is not fn
    assert backend._unreached_gradients_as_none(fn, [frozenset({0, 1}), frozenset({1})], 1) is not fn


def test_two_heads_one_used_keeps_the_unused_parameters_grad_none():
    """A graph of two outputs, the loss using one: the other head's parameters keep None
    .grad, as eager leaves them, every call."""
    torch.manual_seed(0)

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(6, 8)
            self.a = nn.Linear(8, 2)
            self.b = nn.Linear(8, 3)

        def forward(self, x):
            h = torch.relu(self.body(x))
            return self.a(h), self.b(h)

    m = TwoHeads()
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for _ in range(3):
        m.zero_grad(set_to_none=True)
        a, _ = fast(x)
        a.pow(2).mean().backward()
        assert m.b.weight.grad is None and m.b.bias.grad is None
        got = m.a.weight.grad.clone()
        m.zero_grad(set_to_none=True)
        m(x)[0].pow(2).mean().backward()
        torch.testing.assert_close(got, m.a.weight.grad, rtol=1e-5, atol=1e-6)
