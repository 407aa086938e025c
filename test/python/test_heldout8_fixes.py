"""Fixes found by bench/heldout8.py (research code: samplers, implicit networks, meta-learning, filters,
self-supervised losses), each a tiny program compared with eager after every call."""
import torch
import torch.nn as nn

import mlircap


def _siren_step():
    """a network fitted to the gradient of its output with respect to its input (SIREN's Poisson
    experiment): the loss does not reach the last layer's bias (eager leaves its .grad None)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)

    def step(c):
        c = c.clone().detach().requires_grad_(True)
        out = net(c)
        g = torch.autograd.grad(out, [c], torch.ones_like(out), create_graph=True)[0]
        loss = (g ** 2).mean()
        opt.zero_grad()     # a break while `out` and `g` are held: both are outputs of the graph
        loss.backward()
        opt.step()
        return loss.detach()
    return step, net


def test_input_gradient_loss_leaves_unreached_bias_grad_none(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    fe, ne = _siren_step()
    fc, nc = _siren_step()
    fast = mlircap.compile(fc)
    for n in (3, 5, 3, 5):
        x = torch.randn(n, 2)
        le, lc = fe(x), fast(x)
        assert torch.allclose(le, lc, rtol=1e-5, atol=1e-6)
        assert [p.grad is None for p in nc.parameters()] == [p.grad is None for p in ne.parameters()]
        for pe, pc in zip(ne.parameters(), nc.parameters()):
            assert torch.allclose(pe, pc, rtol=1e-5, atol=1e-6)
    assert nc[2].bias.grad is None


def _two_views(compiled):
    torch.manual_seed(0)
    proj = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(True), nn.Linear(8, 8))
    fp = mlircap.compile(proj) if compiled else proj
    out = []
    for _ in range(3):
        x = torch.randn(6, 4)
        a, b = fp(x), fp(x * 2 + 1)     # one module on two views, then one backward (SimCLR, VICReg)
        loss = nn.functional.mse_loss(a, b)
        proj.zero_grad()
        loss.backward()
        out.append((loss.detach(), [p.grad.clone() for p in proj.parameters()],
                    proj[1].running_mean.clone(), proj[1].running_var.clone(), proj[1].num_batches_tracked.clone()))
    return out


def test_batch_norm_module_applied_twice_before_backward(tmp_path, monkeypatch):
    """the first call records eagerly (its backward node saves the running statistics), the second
    replays compiled: its update of the running statistics must not count a version eager's kernel
    does not ('modified by an inplace operation' in the backward)."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    ref, got = _two_views(False), _two_views(True)
    for (le, ge, me, ve, ne), (lc, gc, mc, vc, nc) in zip(ref, got):
        assert torch.allclose(le, lc, rtol=1e-5, atol=1e-6)
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(ge, gc))
        assert torch.allclose(me, mc, rtol=1e-5, atol=1e-6) and torch.allclose(ve, vc, rtol=1e-5, atol=1e-6)
        assert torch.equal(ne, nc)
