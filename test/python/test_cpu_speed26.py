"""Host time of compiled CPU calls (session 26): behaviour checks of the per-call work a
compiled training step or inference call does, never timings."""
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


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_lean_backward_compares_no_tensor(monkeypatch):
    """The lean backward (lean_autograd) looks for missing gradients by identity: `None in
    grads` compared each gradient with None through Tensor.__eq__, whose argument parsing
    raises and catches a TypeError (30-60 us a tensor on this host, a quarter of a small MLP's
    training step). A training step's backward compares no tensor; gradients stay eager's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    compared = []
    eq = torch.Tensor.__eq__

    def counting_eq(self, other):
        compared.append(type(other).__name__)
        return eq(self, other)

    for i in range(4):
        m.zero_grad()
        out = fast(x)
        loss = out.pow(2).mean()
        if i >= 2:   # (compiled, the lean Function in place)
            monkeypatch.setattr(torch.Tensor, "__eq__", counting_eq)
        loss.backward()
        monkeypatch.undo()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).pow(2).mean().backward()
        for a, b in zip(got, (p.grad for p in m.parameters())):
            _close(a, b)
    assert compared == []
