"""Per-call host work of CPU plans (runtime/cpu.py): intermediate buffers come from a
pool of workspaces kept between calls, views of Parameters are made once, data pointers
are computed once per value.  Every test checks values against eager, on several calls
with new inputs (a reused buffer holds the previous call's data)."""
import threading

import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap.runtime import cpu


def _compiled(fn, *args):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        fast(*args)
        fast(*args)
    (graph,) = fast.graphs
    assert graph.fallback_reason is None
    return fast, graph.executable


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 8)).eval()


def test_intermediates_come_from_one_reused_workspace():
    m = _mlp()
    fast, exe = _compiled(m, torch.randn(4, 16))
    returned = {exe.exe._base_of(o) for o in exe.exe.outputs}
    buffers = {v.id for v in exe.exe.buffers}
    assert exe._workspace and exe._workspace == buffers - returned
    outs = []
    with torch.no_grad():
        for seed in range(4):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed))
            y = fast(x)
            torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)
            outs.append((y, m(x)))
    # one workspace serves sequential calls; what a call returned is never overwritten
    assert len(exe._call.__globals__["POOL"]) == 1
    for y, ref in outs:
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    assert len({y.data_ptr() for y, _ in outs}) == len(outs)


def test_outputs_and_their_views_are_fresh_each_call():
    def f(x, w):
        h = torch.relu(x @ w)          # a buffer returned through a view and used again
        return h.t(), h @ w.t(), (h * 2).sum(0)

    x, w = torch.randn(6, 5), torch.randn(5, 5)
    fast, exe = _compiled(f, x, w)
    with torch.no_grad():
        first = fast(x, w)
        keep = [t.clone() for t in first]
        second = fast(torch.randn(6, 5), w)
    for a, b in zip(first, keep):   # the second call wrote into new tensors
        assert torch.equal(a, b)
    for a, b in zip(first, second):
        assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    with torch.no_grad():
        for got, ref in zip(fast(x, w), f(x, w)):
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("limit", [0, 600])
def test_workspace_limit(monkeypatch, limit):
    # 0: every buffer allocated per call; 600 bytes: only the small intermediates kept
    monkeypatch.setattr(cpu, "WORKSPACE_BYTES", limit)

    def f(x, w1, w2):
        small = torch.tanh(x @ w1)                    # 4x8 floats: 128 bytes
        big = torch.relu(small.t() @ torch.ones(4, 64))   # 8x64 floats: 2 KiB
        return (big.sum(1) + 1) @ w2

    args = (torch.randn(4, 16), torch.randn(16, 8), torch.randn(8, 3))
    fast, exe = _compiled(f, *args)
    sizes = {v.id: 4 * torch.Size(v.shape).numel() for v in exe.exe.buffers}
    assert sum(sizes[v] for v in exe._workspace) <= limit
    if limit:
        assert exe._workspace and any(sizes[v] > limit for v in sizes if v not in exe._workspace)
    else:
        assert not exe._workspace and "POOL" not in exe.source
    with torch.no_grad():
        for _ in range(3):
            args = (torch.randn(4, 16), args[1], args[2])
            torch.testing.assert_close(fast(*args), f(*args), rtol=1e-5, atol=1e-5)


def test_concurrent_calls_take_different_workspaces():
    m = _mlp()
    fast, exe = _compiled(m, torch.randn(64, 16))
    assert exe._workspace
    errors = []

    def worker(seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _ in range(100):
                x = torch.randn(64, 16, generator=g)
                if not torch.allclose(fast(x), m(x), rtol=1e-5, atol=1e-5):
                    errors.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_parameter_views_follow_the_parameter():
    # Linear's weight enters the matmul transposed: a view of a Parameter made once
    m = _mlp()
    x = torch.randn(4, 16)
    fast, exe = _compiled(m, x)
    cells = [v for k, v in exe._call.__globals__.items() if k.startswith("C") and isinstance(v, list)]
    assert cells and all(isinstance(c[0][0], nn.Parameter) for c in cells)
    with torch.no_grad():
        m[0].weight.mul_(2)                                  # in place: same data pointer
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
        m[2].weight.data = torch.randn(32, 32)               # new data, same Parameter
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
        # both ran this executable: its cached view of m[2].weight was made again
        assert len(fast.graphs) == 1
        assert m[2].weight.data_ptr() in {c[0][1] for c in cells}
        m[4].weight = nn.Parameter(torch.randn(8, 32))       # another Parameter
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)


def test_views_of_plain_tensor_inputs_are_not_kept():
    def f(x, w):
        return torch.tanh(x @ w.t()) + 1

    x = torch.randn(4, 16)
    fast, exe = _compiled(f, x, torch.randn(8, 16))
    cells = [v for k, v in exe._call.__globals__.items() if k.startswith("C") and isinstance(v, list)]
    with torch.no_grad():
        for _ in range(3):
            w = torch.randn(8, 16)
            torch.testing.assert_close(fast(x, w), f(x, w), rtol=1e-5, atol=1e-5)
    # a plain tensor is not held by the executable after the call
    assert all(c[0][0] is None for c in cells)


def test_workspace_made_in_inference_mode_serves_calls_outside_it():
    # the executable itself (no capture guard between the modes): workspace buffers and
    # Parameter views made on a first call in inference mode are written with out= later
    m = _mlp()
    x = torch.randn(4, 16)
    fast, _ = _compiled(m, x)
    (graph,) = fast.graphs
    ins = graph.last_inputs()
    exe = cpu.CpuPlanExecutable(graph.linalg_ir)
    with torch.no_grad():
        want = m(x)
    with torch.inference_mode():
        for _ in range(3):
            torch.testing.assert_close(exe(*ins)[0], want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(exe(*ins)[0], want, rtol=1e-5, atol=1e-5)
    ws = exe._call.__globals__["POOL"][0]
    assert not any(t.is_inference() for t in ws if isinstance(t, torch.Tensor))
