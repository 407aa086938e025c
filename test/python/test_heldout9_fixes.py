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


class _HNN(nn.Module):
    """greydanus/hamiltonian-nn: two scalar outputs, the field from the gradient of the second with
    respect to the input (autograd.grad, create_graph=True) times the symplectic permutation."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))
        self.register_buffer("M", torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))

    def time_derivative(self, x):
        F1, F2 = self.net(x).split(1, 1)
        dF2 = torch.autograd.grad(F2.sum(), x, create_graph=True)[0]
        return torch.zeros_like(x) + dF2 @ self.M.t()


def _hnn_step():
    torch.manual_seed(0)
    model = _HNN()
    opt = torch.optim.Adam(model.parameters(), 1e-3, weight_decay=1e-4)

    def step(x, dxdt, x0, n_steps, h=0.1):
        x = x.clone().requires_grad_(True)
        loss = (dxdt - model.time_derivative(x)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        traj = [x0]
        for _ in range(n_steps):   # a midpoint rollout: the second field at y + h/2 * k1
            y = traj[-1].detach().requires_grad_(True)
            k1 = model.time_derivative(y)
            k2 = model.time_derivative(y + h / 2 * k1)
            traj.append((y + h * k2).detach())
        return loss.item(), torch.stack(traj)
    return step, model


def test_hamiltonian_field_at_a_point_moved_by_a_field(tmp_path, monkeypatch):
    """the midpoint's time_derivative(y + h/2 * k1) takes a point with a history (k1 = a field value
    with create_graph) into a graph that calls autograd.grad: cut from that history under the
    higher-order Function, the first replay's loss, trajectory and Adam step were off eager's by
    ~1e-3 relative, with no error (bench/heldout9.py hnn_rollout)."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    (fe, me), (fc, mc) = _hnn_step(), _hnn_step()
    fast = mlircap.compile(fc)
    torch.manual_seed(1)
    for i in range(4):
        q, p = torch.randn(16, 1), torch.randn(16, 1)
        args = (torch.cat([q, p], 1), torch.cat([p, -q], 1), torch.randn(3, 2), 3 + i % 2)
        (le, te), (lc, tc) = fe(*args), fast(*args)
        assert abs(le - lc) <= 1e-5 * abs(le)
        assert torch.allclose(te, tc, rtol=1e-5, atol=1e-6)
        for pe, pc in zip(me.parameters(), mc.parameters()):
            assert torch.allclose(pe, pc, rtol=1e-5, atol=1e-7)
