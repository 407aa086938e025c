"""CPU plans share workspace memory between intermediate buffers of one shape and dtype
whose uses do not overlap (runtime/cpu._share_by_liveness): values against eager over
several calls, with outputs returned whole, as views and as saved activations of a
training step, and the invariant that no step sees two buffers of one memory."""
import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap.runtime import cpu
from mlircap.runtime.schema import KernelStep


def _chain(x, w):
    h = x
    outs = []
    for i in range(6):                     # same-shape intermediates, each dead after the next
        h = torch.tanh(h @ w) * 0.5 + h
        if i in (1, 4):
            outs.append(h.t())             # returned through a view
    return h.sum(0), outs[0], outs[1], h   # and returned whole


def _executables(fast):
    return [g.executable for g in fast.graphs if isinstance(getattr(g, "executable", None), cpu.CpuPlanExecutable)]


def _check_invariant(exe):
    plan, shared = exe.plan, exe._shared
    memory = {vid: shared.get(vid, vid) for vid in exe._workspace}
    for step in plan.steps:
        used = step.value_args if isinstance(step, KernelStep) else (*step.ins, step.out)
        bases = {plan.base_of(v) for v in used}
        mems = [memory[b] for b in bases if b in memory]
        assert len(mems) == len(set(mems)), f"a step uses two buffers of one memory: {step}"
    outputs = {plan.base_of(o) for o in exe.exe.outputs}
    assert not outputs & set(memory)


def test_chain_shares_and_matches_eager():
    torch.manual_seed(0)
    x, w = torch.randn(16, 16), torch.randn(16, 16) * 0.3
    fast = mlircap.compile(_chain)
    results = []
    with torch.no_grad():
        for seed in range(4):
            x = torch.randn(16, 16, generator=torch.Generator().manual_seed(seed))
            got, want = fast(x, w), _chain(x, w)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            results.append((got, want))
    (exe,) = _executables(fast)
    assert exe._shared, "same-shape intermediates with disjoint lives should share memory"
    _check_invariant(exe)
    # what earlier calls returned is left as it was (outputs are never workspace memory)
    for got, want in results:
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    ptrs = [t.untyped_storage().data_ptr() for got, _ in results for t in got]
    assert len(set(ptrs)) == len(ptrs)   # no output shares memory with another, as in eager


class _Unrolled(nn.Module):
    """An RNN cell unrolled by hand: per-step products whose gradients (backward graph)
    are same-shape buffers, summed into the weight's gradient."""

    def __init__(self, d=12):
        super().__init__()
        self.w = nn.Linear(d, d)
        self.u = nn.Linear(d, d, bias=False)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], xs.shape[2])
        outs = []
        for t in range(xs.shape[0]):
            h = torch.tanh(self.w(xs[t]) + self.u(h))
            outs.append(h)
        return torch.stack(outs)


def test_training_step_gradients_match_eager():
    torch.manual_seed(0)
    m = _Unrolled()
    xs = torch.randn(7, 3, 12)
    fast = mlircap.compile(m)
    for seed in range(3):
        xs = torch.randn(7, 3, 12, generator=torch.Generator().manual_seed(seed))
        m.zero_grad()
        m(xs).pow(2).mean().backward()
        want = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        fast(xs).pow(2).mean().backward()
        for p, g in zip(m.parameters(), want):
            torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)
    exes = _executables(fast)
    assert exes and any(e._shared for e in exes)
    for e in exes:
        _check_invariant(e)


@pytest.mark.parametrize("limit", [0, 1 << 10])
def test_shared_memory_counts_once_against_the_limit(monkeypatch, limit):
    monkeypatch.setattr(cpu, "WORKSPACE_BYTES", limit)
    fast = mlircap.compile(_chain)
    x, w = torch.randn(16, 16), torch.randn(16, 16) * 0.3
    with torch.no_grad():
        for _ in range(3):
            for a, b in zip(fast(x, w), _chain(x, w)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    (exe,) = _executables(fast)
    memory = sum(exe.exe.values[v].nbytes for v in exe._workspace if v not in exe._shared)
    assert memory <= limit
    if not limit:
        assert not exe._workspace and not exe._shared
    _check_invariant(exe)
