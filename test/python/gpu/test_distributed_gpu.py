"""GPU twin of test_distributed.py: compiled modules under DistributedDataParallel on NCCL.

World size 1 (one process, the test's own; a single-GPU host is enough): DDP still
builds its reducer, buckets and all-reduces every gradient through NCCL, so a compiled
module must give eager DDP's outputs, gradients and parameters. Covers
``DDP(mlircap.compile(m))``, ``DDP(m)`` with ``m.forward`` compiled,
``mlircap.compile(DDP(m))`` and ``torch.compile(DDP(m), backend="mlircap")``, and
collectives inside compiled functions (on CUDA a functional collective's result is
in flight until waited for: the graph must wait before reading it).
Runs on a CUDA host (scripts/gpu-bundle test); elsewhere every test is skipped with
the reason shown (pytest -rs).
"""
from __future__ import annotations

import contextlib
import datetime

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import mlircap

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)"),
    pytest.mark.skipif(not (dist.is_available() and dist.is_nccl_available()),
                       reason="torch built without torch.distributed / NCCL"),
]

TOL = dict(rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def nccl_group(tmp_path_factory):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    store = tmp_path_factory.mktemp("nccl") / "store"
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=120))
    try:
        yield
    finally:
        dist.destroy_process_group()


class WithBatchNorm(nn.Module):
    def __init__(self, unused: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.bn = nn.BatchNorm1d(64)
        self.fc2 = nn.Linear(64, 8)
        if unused:
            self.unused = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _build(unused=False):
    torch.manual_seed(0)
    return WithBatchNorm(unused).cuda()


def _data(n=4):
    g = torch.Generator(device="cuda").manual_seed(1)
    return [(torch.randn(16, 32, device="cuda", generator=g), torch.randn(16, 8, device="cuda", generator=g))
            for _ in range(n)]


def _ddp(m, **kw):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(m, device_ids=[0], **kw)


def _train(ddp, model, data, accumulate=1):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    rec = []
    for i in range(0, len(data), accumulate):
        opt.zero_grad()
        for j, (x, y) in enumerate(data[i:i + accumulate]):
            with contextlib.nullcontext() if j == accumulate - 1 else ddp.no_sync():
                out = ddp(x)
                torch.nn.functional.mse_loss(out, y).backward()
            rec.append(out.detach().clone())
        rec.append({n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
        rec.append({n: t.detach().clone() for n, t in model.state_dict().items()})
    ddp.eval()
    with torch.no_grad():
        rec.append(ddp(data[0][0]).clone())
    ddp.train()
    return rec


CASES = {"plain": ({}, 1, False), "unused": ({"find_unused_parameters": True}, 1, True),
         "no_sync": ({}, 2, False)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("how", ["wrap", "forward"])
def test_ddp_of_compiled_module_on_gpu(nccl_group, how, case):
    kw, acc, unused = CASES[case]
    data = _data()
    eager = _build(unused)
    want = _train(_ddp(eager, **kw), eager, data, acc)
    model = _build(unused)
    if how == "wrap":
        compiled = inner = mlircap.compile(model)
    else:
        compiled = model.forward = mlircap.compile(model.forward)
        inner = model
    ddp = _ddp(inner, **kw)
    assert list(ddp.state_dict()) == list(_ddp(_build(unused), **kw).state_dict())
    got = _train(ddp, model, data, acc)
    torch.testing.assert_close(got, want, **TOL)
    assert compiled.graphs and all(g.device == "cuda" and g.fallback_reason is None for g in compiled.graphs)


@pytest.mark.parametrize("how", ["mlircap", "torch_compile"])
def test_compiled_ddp_on_gpu(nccl_group, how):
    data = _data()
    eager = _build()
    want = _train(_ddp(eager), eager, data)
    model = _build()
    ddp = _ddp(model)
    if how == "mlircap":
        fast = mlircap.compile(ddp)
    else:
        torch._dynamo.reset()
        fast = torch.compile(ddp, backend="mlircap")
    got = _train(fast, model, data)
    torch.testing.assert_close(got, want, **TOL)


def _dist_all_reduce(x):
    y = x * 2 + 1
    dist.all_reduce(y)
    return y.sin() * x


def _functional_all_reduce(x):
    import torch.distributed._functional_collectives as fc

    y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
    return y + x


def _functional_all_gather(x):
    import torch.distributed._functional_collectives as fc

    return fc.all_gather_tensor(x.tanh(), 0, dist.group.WORLD) * 3


@pytest.mark.parametrize("fn", [_dist_all_reduce, _functional_all_reduce, _functional_all_gather],
                         ids=lambda f: f.__name__[1:])
def test_collective_inside_compiled_function_on_gpu(nccl_group, fn):
    g = torch.Generator(device="cuda").manual_seed(3)
    xs = [torch.randn(256, 64, device="cuda", generator=g) for _ in range(3)]
    want = [fn(x.clone()) for x in xs]
    fast = mlircap.compile(fn)
    got = [fast(x.clone()) for x in xs]   # recording call, then replays on new data
    torch.testing.assert_close(got, want, **TOL)
    assert fast.graphs and all(g.device == "cuda" for g in fast.graphs)
