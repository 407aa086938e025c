"""Fixes found by bench/heldout9.py (programs from RL, audio, graph networks, point clouds, recommenders,
sequence models, time series, tabular, physics-informed nets, segmentation, detection), each a tiny
program compared with eager after every call."""
import torch
import torch.nn as nn

import mlircap


class _Pairs(nn.Module):
    """an energy over the pairs of points closer than a cutoff (a radius graph by nonzero: capture gives
    up in this forward, which runs eagerly between graphs)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)

    def forward(self, pos):
        src, dst = (torch.cdist(pos, pos) < 1.5).nonzero().t()
        d = (pos[src] - pos[dst]).pow(2).sum(-1)
        return self.lin(torch.exp(-d)[:, None]).sum()


def _force_step():
    torch.manual_seed(0)
    m = _Pairs()

    def step(pos):
        pos = pos.clone().requires_grad_(True)
        e = m(pos)
        forces = -torch.autograd.grad(e, pos, create_graph=True)[0]
        loss = forces.pow(2).mean()
        m.zero_grad()
        loss.backward()
        return forces.detach(), [None if p.grad is None else p.grad.clone() for p in m.parameters()]
    return step


def test_forces_by_autograd_grad_of_an_eager_energy(tmp_path, monkeypatch):
    """SchNet-style forces: the graph after the eager callee takes the energy (an input with a history)
    and calls autograd.grad(energy, pos, create_graph=True). Run under the higher-order Function, its
    inputs were cut from their history and the replay raised 'differentiated Tensor ... not used'."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    fe, fc = _force_step(), _force_step()
    fast = mlircap.compile(fc)
    torch.manual_seed(1)
    for i in range(6):
        p = torch.randn(5 + i % 2, 3)
        (re, ge), (rc, gc) = fe(p), fast(p)
        assert torch.allclose(re, rc, rtol=1e-5, atol=1e-6)
        assert [g is None for g in ge] == [g is None for g in gc]
        for a, b in zip(ge, gc):
            assert a is None or torch.allclose(a, b, rtol=1e-5, atol=1e-6)
