"""Fixes found by bench/modules15.py (held-out real-world-style programs: training steps, hooks,
parametrizations, sequences), each a small program compared with eager after every call."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations as P

import mlircap

# ops that return their argument itself (`op(t) is t`) for these arguments
_SAME_OBJECT = {
    "flatten_1": lambda t: t.flatten(1),
    "contiguous": lambda t: t.contiguous(),
    "to_dtype": lambda t: t.to(torch.float32),
    "float": lambda t: t.float(),
    "type_as": lambda t: t.type_as(t),
    "atleast_2d": torch.atleast_2d,
    "broadcast_tensors": lambda t: torch.broadcast_tensors(t, t)[0],
}


def _step_program(op):
    """A training step whose forward passes the parameter and a buffer through `op` (which hands
    back the same objects), then backward, a hand-written SGD update of the parameter by its .grad
    and an in-place write of the buffer; the view of the buffer returned after the write."""
    def step(p, buf, x):
        w = op(p)
        b = op(buf)
        loss = (x @ w.t()).sum()
        loss.backward()
        with torch.no_grad():
            p.sub_(0.1 * p.grad)
        buf.add_(x.sum(0))
        return loss.detach(), b * 2, w.is_leaf, b is buf
    return step


@pytest.mark.parametrize("name", sorted(_SAME_OBJECT))
def test_op_returning_its_argument_keeps_the_parameter(tmp_path, monkeypatch, name):
    """`w = p.flatten(1)` of a 2-d parameter is p itself (spectral_norm's _reshape_weight_to_matrix):
    the capture bound p to the flatten node, so the graph after `loss.backward()` read `.grad` of
    that node's output, a non-leaf (None: TypeError on the second call; with an optimizer's step,
    spectral norm's power iteration read stale values: a wrong result)."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    op = _SAME_OBJECT[name]
    eager, fast = _step_program(op), mlircap.compile(_step_program(op))
    torch.manual_seed(0)
    p = torch.randn(4, 5, requires_grad=True)
    buf = torch.zeros(4, 5)
    p2, buf2 = p.detach().clone().requires_grad_(), buf.clone()
    for i in range(4):
        x = torch.randn(3, 5)
        p.grad = p2.grad = None
        want, got = eager(p, buf, x), fast(p2, buf2, x.clone())
        torch.testing.assert_close(got[:2], want[:2], rtol=1e-5, atol=1e-6)
        assert got[2:] == want[2:]
        torch.testing.assert_close(p2, p, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p2.grad, p.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(buf2, buf, rtol=1e-5, atol=1e-6)
    assert torch.is_grad_enabled()


class _SpectralStep(nn.Module):
    """spectral_norm's parametrization in a training step, the weight read again after the step
    (its power iteration runs twice per call, writing _u / _v with out=)."""

    def __init__(self, opt):
        super().__init__()
        self.fc = P.spectral_norm(nn.Linear(5, 4))
        self.opt = opt(self.parameters())

    def forward(self, x):
        loss = self.fc(x).pow(2).sum(1).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), self.fc.weight.detach().sum()


@pytest.mark.parametrize("opt", [lambda ps: torch.optim.SGD(ps, lr=0.1), lambda ps: torch.optim.Adam(ps, lr=1e-2)],
                         ids=["sgd", "adam"])
def test_spectral_norm_training_step(tmp_path, monkeypatch, opt):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    ref = _SpectralStep(opt)
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    for i in range(4):
        x = torch.randn(3, 5)
        want, got = ref(x), fast(x.clone())
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for (k, a), b in zip(ref.state_dict().items(), mine.state_dict().values()):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m: f"call {i} {k}: {m}")
        for a, b in zip(ref.parameters(), mine.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-6)


def _gather_no_grad(x, w, idx):
    h = x * 2
    with torch.no_grad():
        y = w[idx] + 1
    return h.sum() + y.sum()


def _gather_grad_off_statement(x, w, idx):
    h = x * 2
    torch.set_grad_enabled(False)   # not restored: eager leaves grad mode off, also when it raises
    y = w[idx] + 1
    return h.sum() + y.sum()


@pytest.mark.parametrize("fn", [_gather_no_grad, _gather_grad_off_statement])
def test_error_inside_no_grad_block_restores_grad_mode(tmp_path, monkeypatch, fn):
    """The program's own IndexError raised from inside `with torch.no_grad():` (an index out of
    range on call 2: the compiled graph's bounds check reran it eagerly): eager's `with` restores
    grad mode as the exception leaves it; the replay left it off, so the caller that caught the
    error computed without gradients from then on."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    fast = mlircap.compile(fn)
    w = torch.randn(5, 3)
    x = torch.randn(4, requires_grad=True)
    for idx in ([1, 2], [0, 4], [3, 7], [1, 1], [9, 0], [2, 3]):
        idx = torch.tensor(idx)
        modes, results = [], []
        for f in (fn, fast):
            torch.set_grad_enabled(True)
            try:
                results.append(f(x, w, idx))
            except IndexError:
                results.append(None)
            modes.append(torch.is_grad_enabled())
        torch.set_grad_enabled(True)
        assert modes[1] == modes[0], (idx, modes)
        assert (results[1] is None) == (results[0] is None)
        if results[0] is not None:
            torch.testing.assert_close(results[1], results[0])
            assert results[1].requires_grad == results[0].requires_grad
