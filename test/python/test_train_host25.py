"""Host time of compiled training steps (lean_autograd.py): aot_autograd's Function classes of
mlircap's graphs get a lean forward and backward where their metadata is the plain case, and
no saved tensor is marked donated (a retain_graph backward raised). Every gradient and error is
compared with eager's; the lean path with aot_autograd's own (lean_autograd.ENABLED False)."""
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


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def _grads(m):
    return [p.grad.clone() for p in m.parameters()]


def _node_class(out):
    return out.grad_fn._forward_cls


def test_retain_graph_backward_twice_as_eager():
    """loss.backward(retain_graph=True) then loss.backward(), after plain steps (the backward
    compiled by a plain one): aot_autograd raised 'compiled with non-empty donated buffers'
    (mlircap's backward never reuses its inputs' memory); now the gradients accumulate twice,
    as eager's."""
    m = _mlp()
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for _ in range(3):
        fast(x).sum().backward()
    for _ in range(3):
        res = []
        for fn in (m, fast):
            m.zero_grad()
            loss = fn(x).pow(2).mean()
            loss.backward(retain_graph=True)
            first = _grads(m)
            loss.backward()
            res.append(first + _grads(m))
        for a, b in zip(*res):
            _close(a, b)


def test_retain_graph_without_the_lean_function():
    """The donated-buffer fix holds for classes keeping aot_autograd's own backward too."""
    m = _mlp(1)
    lean_autograd.ENABLED = False
    try:
        fast = mlircap.compile(m)
        x = torch.randn(4, 6)
        for _ in range(3):   # (recorded eagerly, then the backward compiled by a plain step)
            fast(x).sum().backward()
        for _ in range(3):
            out = fast(x)
            assert not _node_class(out).__dict__.get("_mlircap_lean")
            loss = out.sum()
            loss.backward(retain_graph=True)
            loss.backward()
    finally:
        lean_autograd.ENABLED = True


def test_retain_graph_where_the_factory_is_not_wrapped(monkeypatch):
    """torch 2.11 (the GPU host's) builds aot_autograd's Function class inline, so the factory
    wrapper that clears a class's donated buffers never runs there and the retain_graph backward
    raised (test/python/gpu/test_saved_outputs_gpu.py on the H200). aot_autograd's own
    donated_buffer switch is off while mlircap compiles: simulated here by making the per-class
    clearing a no-op."""
    monkeypatch.setattr(lean_autograd, "_nothing_donated", lambda spec: None)
    m = _mlp(3)
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for _ in range(3):
        fast(x).sum().backward()
    res = []
    for fn in (m, fast):
        m.zero_grad()
        loss = fn(x).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
        res.append(_grads(m))
    for a, b in zip(*res):
        _close(a, b)


def test_plain_step_runs_the_lean_backward():
    """A plain training step's node class is lean: its backward does not go through
    aot_autograd's generic backward (made to raise here), and gradients equal eager's."""
    m = _mlp(2)
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for _ in range(3):   # (the first call records eagerly, the first compiled backward compiles)
        fast(x).sum().backward()
    out = fast(x)
    cls = _node_class(out)
    assert cls.__dict__.get("_mlircap_lean") is True
    assert isinstance(cls.__dict__.get("apply"), staticmethod)   # (torch's C apply, bound once)

    def generic(*a, **k):
        raise AssertionError("aot_autograd's generic backward ran")
    saved, cls._bwd_fn = cls._bwd_fn, generic
    try:
        for _ in range(3):
            m.zero_grad()
            fast(x).square().mean().backward()
            got = _grads(m)
            m.zero_grad()
            m(x).square().mean().backward()
            for a, b in zip(got, _grads(m)):
                _close(a, b)
    finally:
        cls._bwd_fn = saved


def test_saved_tensors_freed_after_backward():
    """A second backward without retain_graph raises as eager's (the saved tensors are
    released by the first)."""
    m = _mlp(3)
    fast = mlircap.compile(m)
    x = torch.randn(3, 6)
    for _ in range(2):
        fast(x).sum().backward()
    for fn in (m, fast):
        y = fn(x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()


def test_saved_input_written_in_place_raises():
    """An input the compiled graph saved, written in place after the call: eager's
    'modified by an inplace operation' error, never a gradient."""
    m = _mlp(4)
    fast = mlircap.compile(m)
    x = torch.randn(3, 6)
    for _ in range(2):
        fast(x.clone().requires_grad_()).sum().backward()
    for fn in (m, fast):
        xi = x.clone().requires_grad_()
        y = fn(xi)
        with torch.no_grad():
            xi.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_gradient_arriving_transposed():
    """The output's gradient is not contiguous (the loss reads out.t()): laid out as the
    backward was traced before it runs; gradients as eager's."""
    m = _mlp(5)
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    w = torch.randn(3, 5)
    for _ in range(3):
        res = []
        for fn in (m, fast):
            m.zero_grad()
            (fn(x).t() * w).sum().backward()
            res.append(_grads(m))
        for a, b in zip(*res):
            _close(a, b)


def test_outputs_without_gradient_and_unused_outputs():
    """An integer output (not differentiable, as eager's) and an output the loss does not
    read (its gradient materialized as zeros): gradients as eager's."""
    def g(x, w):
        y = x @ w
        return y.relu(), y.argmax(-1), (y * y).sum()
    c = mlircap.compile(g)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    for _ in range(4):
        res = []
        for fn in (g, c):
            x.grad = w.grad = None
            a, idx, s = fn(x, w)
            assert not idx.requires_grad
            a.pow(2).sum().backward()
            res.append((idx, a.detach(), x.grad.clone(), w.grad.clone()))
        assert torch.equal(res[0][0], res[1][0])
        for a, b in zip(res[0][1:], res[1][1:]):
            _close(a, b)


def test_saved_tensor_hooks_run():
    """Saved-tensor hooks pack and unpack the compiled graph's saved tensors; gradients as
    eager's."""
    m = _mlp(6)
    fast = mlircap.compile(m)
    x = torch.randn(4, 6)
    for _ in range(2):
        fast(x).sum().backward()
    counts = {"pack": 0, "unpack": 0}

    def pack(t):
        counts["pack"] += 1
        return t.clone()

    def unpack(t):
        counts["unpack"] += 1
        return t
    res = []
    for fn in (m, fast):
        m.zero_grad()
        counts.update(pack=0, unpack=0)
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            fn(x).pow(2).sum().backward()
        assert counts["pack"] > 0 and counts["unpack"] > 0
        res.append(_grads(m))
    for a, b in zip(*res):
        _close(a, b)


def test_output_hook_scales_gradient():
    m = _mlp(7)
    fast = mlircap.compile(m)
    x = torch.randn(4, 6)
    for _ in range(3):
        res = []
        for fn in (m, fast):
            m.zero_grad()
            out = fn(x)
            out.register_hook(lambda g: g * 3)
            out.sum().backward()
            res.append(_grads(m))
        for a, b in zip(*res):
            _close(a, b)


def test_lean_and_aot_paths_agree_bit_for_bit_under_autocast():
    """Under CPU autocast (aot_autograd's disable_amp Function): the lean forward and backward
    give the same bits as aot_autograd's own, step after step (parameters updated between)."""
    results = []
    for lean in (False, True):
        lean_autograd.ENABLED = lean
        try:
            m = _mlp(8)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            fast = mlircap.compile(m)
            x = torch.randn(8, 6)
            out = []
            for _ in range(4):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y = fast(x)
                y.float().pow(2).mean().backward()
                opt.step()
                out += [y.detach().clone()] + _grads(m)
            results.append(out)
        finally:
            lean_autograd.ENABLED = True
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_create_graph_after_lean_steps():
    """create_graph (grad mode on in backward) takes aot_autograd's path (mlircap recomputes
    the captured graph): second-order gradients as eager's between plain steps."""
    def g(x, w):
        return (torch.tanh(x @ w) * x.sum(-1, keepdim=True)).pow(2).sum()
    c = mlircap.compile(g)
    torch.manual_seed(9)
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    for _ in range(3):
        res = []
        for fn in (g, c):
            x.grad = w.grad = None
            fn(x, w).backward()
            plain = (x.grad.clone(), w.grad.clone())
            gx, gw = torch.autograd.grad(fn(x, w), (x, w), create_graph=True)
            hx, hw = torch.autograd.grad((gx * gx).sum() + gw.sin().sum(), (x, w))
            res.append(plain + (gx.detach(), gw.detach(), hx, hw))
        for a, b in zip(*res):
            _close(a, b)
