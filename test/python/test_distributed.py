"""Compiled modules compose with PyTorch's own distributed stack (CPU, gloo, 2 ranks).

"Users outgrowing one GPU stay on PyTorch's own distributed stack: compiled modules
must compose with it, not replace it." Each test starts ``WORLD`` processes running
this file (``python test_distributed.py SCENARIO,... RANK WORLD DIR``) over a FileStore;
each rank runs eager and compiled variants of the same program with the same seeds
on its own data and saves what it saw (outputs, gradients, parameters) for the test
to compare. A hang is a failure: the process group has a timeout (``PG_TIMEOUT_S``) and
the test kills ranks that finish no scenario for ``STALL_S``.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD = 2
STALL_S = 150            # one scenario, the imports and compiles included (a loaded 2-core machine)
PG_TIMEOUT_S = 60        # one collective
TOL = dict(rtol=1e-4, atol=1e-5)

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch built without torch.distributed / gloo")


# --------------------------------------------------------------------------- launcher
def launch(scenarios: list[str], world: int = WORLD, env: dict | None = None, stall_s: float = STALL_S) -> list[dict]:
    """Runs ``scenarios`` one after the other on ``world`` ranks (one launch: the imports
    and the compile worker's start are paid once); returns each rank's results, a dict
    from scenario name to what it saved, or to ``{"error": traceback}``."""
    import mlircap

    pkg_root = str(Path(mlircap.__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="mlircap-dist-") as tmp:
        child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [pkg_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
            OMP_NUM_THREADS="1", **(env or {}))
        logs = [open(os.path.join(tmp, f"rank{r}.log"), "w+") for r in range(world)]
        procs = [subprocess.Popen([sys.executable, __file__, ",".join(scenarios), str(r), str(world), tmp],
                                  stdout=logs[r], stderr=subprocess.STDOUT, env=child_env,
                                  start_new_session=True)   # killed with its compile worker
                 for r in range(world)]
        # a hang is a failure: a rank that finishes no scenario for STALL_S is killed (a
        # collective that never completes raises in the rank after PG_TIMEOUT_S already)
        progress = os.path.join(tmp, "progress")
        last, hung = time.monotonic(), False
        while any(p.poll() is None for p in procs):
            time.sleep(0.2)
            try:
                last = max(last, os.path.getmtime(progress) - time.time() + time.monotonic())
            except OSError:
                pass
            if time.monotonic() - last > stall_s:
                hung = True
                break
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        texts = []
        for f in logs:
            f.seek(0)
            texts.append(f.read())
            f.close()
        report = "\n".join(f"--- rank {r} (rc {p.returncode}) ---\n{t[-6000:]}"
                           for r, (p, t) in enumerate(zip(procs, texts)))
        if hung:
            pytest.fail(f"{scenarios}: no scenario finished for {stall_s}s (hang): ranks killed\n{report}")
        if any(p.returncode != 0 for p in procs):
            pytest.fail(f"{scenarios}: a rank failed\n{report}")
        return [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False) for r in range(world)]


def results_of(results: list[dict], name: str) -> list[dict]:
    """``name``'s results on every rank; a scenario that raised on a rank fails here."""
    errors = [f"rank {r}:\n{res[name]['error']}" for r, res in enumerate(results) if "error" in res[name]]
    if errors:
        pytest.fail(f"{name} raised\n" + "\n".join(errors))
    return [res[name] for res in results]


def _worker(scenarios: list[str], rank: int, world: int, tmp: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    try:
        out = {}
        for name in scenarios:
            try:
                out[name] = SCENARIOS[name](rank, world)
            except Exception:
                out[name] = {"error": traceback.format_exc()}
                traceback.print_exc()
            dist.barrier()
            Path(tmp, "progress").touch()
        torch.save(out, os.path.join(tmp, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _hang(rank, world):
    if rank == 1:
        time.sleep(3600)   # rank 0 waits for it in the barrier after the scenario
    return {}


def test_a_hang_is_a_failure_not_a_stuck_run():
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="hang"):
        launch(["hang"], stall_s=20)
    assert time.monotonic() - t0 < 20 + 30


# --------------------------------------------------------------------------- models
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class WithUnused(nn.Module):
    """``self.unused`` never takes part in forward: DDP needs find_unused_parameters."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.unused = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


MODELS = {"mlp": MLP, "bn": WithBatchNorm, "unused": WithUnused}


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    return MODELS[name]()


def batches(rank: int, n: int, batch: int = 6):
    """Each rank its own data (so gradients differ before the all-reduce)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(batch, 8, generator=g), torch.randn(batch, 4, generator=g)) for _ in range(n)]


# --------------------------------------------------------------------------- training
def train(ddp, params_of: nn.Module, data, accumulate: int = 1) -> dict:
    """SGD with momentum over ``ddp.parameters()`` (as users write it: the wrapper's
    parameters must be the model's) on ``data``; ``accumulate`` micro-batches per step,
    all but the last under ``ddp.no_sync()``. Records outputs, gradients after each synced
    backward, parameters and buffers after each step (named as in ``params_of``, the
    unwrapped model), and the outputs of an ``eval()`` call through the wrapper at the end
    (BatchNorm's running statistics: ``eval()`` must reach the module)."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    assert len(opt.param_groups[0]["params"]) == len(list(params_of.parameters()))
    rec = {"out": [], "grad": [], "param": [], "buffer": []}
    for i in range(0, len(data), accumulate):
        opt.zero_grad()
        for j, (x, y) in enumerate(data[i:i + accumulate]):
            last = j == accumulate - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                out = ddp(x)
                loss = torch.nn.functional.mse_loss(out, y)
                loss.backward()
            rec["out"].append(out.detach().clone())
        rec["grad"].append({n: None if p.grad is None else p.grad.clone()
                            for n, p in params_of.named_parameters()})
        opt.step()
        rec["param"].append({n: p.detach().clone() for n, p in params_of.named_parameters()})
        rec["buffer"].append({n: b.clone() for n, b in params_of.named_buffers()})
    ddp.eval()
    assert not any(m.training for m in params_of.modules())
    with torch.no_grad():
        rec["out"].append(ddp(data[0][0]).clone())
    ddp.train()
    assert all(m.training for m in params_of.modules())
    return rec


def _ddp(module, **kw):
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(module, **kw)


def _compare_rec(got: dict, want: dict, what: str) -> None:
    for key in ("out", "grad", "param", "buffer"):
        assert len(got[key]) == len(want[key]), (what, key)
        for step, (g, w) in enumerate(zip(got[key], want[key])):
            torch.testing.assert_close(g, w, **TOL, msg=lambda m: f"{what}: {key} of step {step}: {m}")


def _graph_stats(compiled) -> dict:
    """Graphs a mlircap.Compiled compiled, and those that run eagerly."""
    return {"graphs": len(compiled.graphs),
            "fallbacks": [g.fallback_reason for g in compiled.graphs if g.fallback_reason is not None]}


SCENARIOS = {"hang": _hang}


def _add(name, fn, *args, **kw):
    SCENARIOS[name] = lambda rank, world: fn(rank, world, *args, **kw)


# --------------------------------------------------------------------------- 1. DDP(compiled)
def _ddp_of_compiled(rank, world, model_name, how, accumulate=1, **ddp_kw):
    import mlircap

    data = batches(rank, 6)
    eager = build(model_name)
    rec_eager = train(_ddp(eager, **ddp_kw), eager, data, accumulate)
    model = build(model_name)
    if how == "wrap":                       # DDP(mlircap.compile(model))
        compiled = inner = mlircap.compile(model)
    elif how == "wrap_dynamo":              # the same, Dynamo as the capture front
        compiled = inner = mlircap.compile(model, capture="dynamo")
    else:                                   # model.forward compiled, DDP(model)
        compiled = model.forward = mlircap.compile(model.forward)
        inner = model
    rec = train(_ddp(inner, **ddp_kw), model, data, accumulate)
    return {"eager": rec_eager, "compiled": rec, "stats": _graph_stats(compiled)}


DDP_CASES = {"mlp": ("mlp", {}, 1), "bn": ("bn", {"broadcast_buffers": True}, 1),
             "unused": ("unused", {"find_unused_parameters": True}, 1), "mlp_no_sync": ("mlp", {}, 3),
             "mlp_static_graph": ("mlp", {"static_graph": True}, 1),
             "mlp_bucket_view": ("mlp", {"gradient_as_bucket_view": True}, 1)}
for _how in ("wrap", "forward"):
    for _case, (_model, _kw, _acc) in DDP_CASES.items():
        _add(f"ddp_of_compiled_{_how}_{_case}", _ddp_of_compiled, _model, _how, _acc, **_kw)
for _case in ("mlp", "bn"):
    _model, _kw, _acc = DDP_CASES[_case]
    _add(f"ddp_of_compiled_wrap_dynamo_{_case}", _ddp_of_compiled, _model, "wrap_dynamo", _acc, **_kw)


def _check_ddp_results(results, compiled_graphs=True):
    for r, res in enumerate(results):
        _compare_rec(res["compiled"], res["eager"], f"rank {r}")
        if compiled_graphs:
            assert res["stats"]["graphs"] >= 1 and not res["stats"]["fallbacks"], res["stats"]
    # the gradients were all-reduced: every rank ends with the same parameters
    for r in range(1, len(results)):
        for a, b in zip(results[0]["compiled"]["param"], results[r]["compiled"]["param"]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    # and the ranks saw different data (the test would prove nothing otherwise)
    assert not torch.equal(results[0]["eager"]["out"][0], results[1]["eager"]["out"][0])


DDP_OF_COMPILED = [n for n in SCENARIOS if n.startswith("ddp_of_compiled_")]


@pytest.fixture(scope="module")
def ddp_of_compiled_runs():
    return launch(DDP_OF_COMPILED)


@pytest.mark.parametrize("name", DDP_OF_COMPILED)
def test_ddp_of_compiled_module(ddp_of_compiled_runs, name):
    _check_ddp_results(results_of(ddp_of_compiled_runs, name))


# --------------------------------------------------------------------------- 2. compile(DDP)
def _compiled_ddp(rank, world, model_name, how, accumulate=1, **ddp_kw):
    import mlircap

    data = batches(rank, 6)
    eager = build(model_name)
    rec_eager = train(_ddp(eager, **ddp_kw), eager, data, accumulate)
    model = build(model_name)
    ddp = _ddp(model, **ddp_kw)
    if how == "mlircap":
        fast = mlircap.compile(ddp)
        stats = _graph_stats(fast)
    else:
        torch._dynamo.reset()
        fast = torch.compile(ddp, backend="mlircap")
        stats = {}
    rec = train(fast, model, data, accumulate)
    if how == "mlircap":
        stats = _graph_stats(fast)
    return {"eager": rec_eager, "compiled": rec, "stats": stats}


COMPILED_DDP_CASES = {"mlp": ("mlp", {}, 1), "bn": ("bn", {"broadcast_buffers": True}, 1),
                      "unused": ("unused", {"find_unused_parameters": True}, 1), "mlp_no_sync": ("mlp", {}, 3)}
for _how in ("mlircap", "torch_compile"):
    for _case, (_model, _kw, _acc) in COMPILED_DDP_CASES.items():
        _add(f"compiled_ddp_{_how}_{_case}", _compiled_ddp, _model, _how, _acc, **_kw)
COMPILED_DDP = [n for n in SCENARIOS if n.startswith("compiled_ddp_")]


@pytest.fixture(scope="module")
def compiled_ddp_runs():
    return launch(COMPILED_DDP)


@pytest.mark.parametrize("name", COMPILED_DDP)
def test_compiled_ddp(compiled_ddp_runs, name):
    """mlircap.compile(DDP(model)) / torch.compile(DDP(model), backend="mlircap"): eager
    DDP's outputs, all-reduced gradients and parameters (whatever part runs compiled)."""
    # mlircap.compile(DDP(m)): capture gives up on DDP's forward (its bookkeeping), which
    # runs eagerly, and compiles the module it calls on its own
    _check_ddp_results(results_of(compiled_ddp_runs, name), compiled_graphs="_mlircap_" in name)


# --------------------------------------------------------------------------- 3. collectives
def _c_all_reduce(x):
    y = x * 2 + 1
    dist.all_reduce(y)
    return y.sin() * x


def _c_all_reduce_max(x):
    y = x.cos()
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    return y + x


def _c_all_reduce_async(x):
    y = x * 3
    work = dist.all_reduce(y, async_op=True)
    work.wait()
    return y - x


def _c_broadcast(x):
    y = x.exp()
    dist.broadcast(y, src=0)
    return y * x


def _c_all_gather_into_tensor(x):
    y = x + 1
    out = torch.empty((dist.get_world_size() * y.shape[0],) + y.shape[1:], dtype=y.dtype)
    dist.all_gather_into_tensor(out, y)
    return out.relu() * 2


def _c_all_gather_list(x):
    y = x * x
    outs = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(outs, y)
    return torch.cat(outs) + 1


def _c_functional_all_reduce(x):
    import torch.distributed._functional_collectives as fc

    y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
    return y + x


def _c_functional_all_gather(x):
    import torch.distributed._functional_collectives as fc

    y = fc.all_gather_tensor(x.tanh(), 0, dist.group.WORLD)
    return y * 3


def _c_two_all_reduces_ordered(x):
    # two collectives on the same tensor with work between: order matters
    y = x.clone()
    dist.all_reduce(y)
    y = y * y
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    return y


COLLECTIVE_FNS = {f.__name__[3:]: f for f in (
    _c_all_reduce, _c_all_reduce_max, _c_all_reduce_async, _c_broadcast, _c_all_gather_into_tensor,
    _c_all_gather_list, _c_functional_all_reduce, _c_functional_all_gather, _c_two_all_reduces_ordered)}


def _collective(rank, world, fn_name, how):
    import mlircap

    fn = COLLECTIVE_FNS[fn_name]
    g = torch.Generator().manual_seed(7 + rank)
    xs = [torch.randn(4, 3, generator=g) for _ in range(4)]
    try:
        want = [fn(x.clone()) for x in xs]
    except Exception as e:   # torch/gloo itself does not support it: nothing to compare
        return {"eager_unsupported": f"{type(e).__name__}: {e}"}
    if how == "mlircap":
        fast = mlircap.compile(fn)
    else:
        torch._dynamo.reset()
        fast = torch.compile(fn, backend="mlircap")
    got = [fast(x.clone()) for x in xs]          # recording call, then replays on new data
    return {"want": [w.clone() for w in want], "got": [g_.clone() for g_ in got],
            "graphs": len(fast.graphs) if how == "mlircap" else None}


for _how in ("mlircap", "torch_compile"):
    for _fn in COLLECTIVE_FNS:
        _add(f"collective_{_how}_{_fn}", _collective, _fn, _how)
COLLECTIVES = [n for n in SCENARIOS if n.startswith("collective_")]


@pytest.fixture(scope="module")
def collective_runs():
    return launch(COLLECTIVES)


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collective_inside_compiled_function(collective_runs, name):
    """A collective inside a compiled function runs on every call, in program order, on
    the values of that call: the compiled function gives eager's results on each rank."""
    results = results_of(collective_runs, name)
    if "eager_unsupported" in results[0]:
        pytest.skip(f"eager torch/gloo does not run it: {results[0]['eager_unsupported']}")
    for r, res in enumerate(results):
        assert res["graphs"] is None or res["graphs"] >= 1, "the tensor work around it was not compiled"
        for i, (g, w) in enumerate(zip(res["got"], res["want"])):
            torch.testing.assert_close(g, w, **TOL, msg=lambda m: f"rank {r}, call {i}: {m}")


# --------------------------------------------------------------------------- 4. FSDP2
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return x + torch.tanh(self.norm(self.fc(x)))


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _fsdp_train(model, data) -> dict:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rec = {"loss": [], "param": []}
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        rec["loss"].append(loss.detach().clone())
        rec["param"].append({n: p.detach().full_tensor().clone() for n, p in model.named_parameters()})
    return rec


def _fsdp(rank, world, how):
    import mlircap
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    data = batches(rank, 4)

    def sharded():
        torch.manual_seed(0)
        m = Blocks()
        for b in m.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(m, mesh=mesh)
        return m

    try:
        rec_eager = _fsdp_train(sharded(), data)
    except Exception as e:
        return {"eager_unsupported": f"{type(e).__name__}: {e}"}
    m = sharded()
    compiled = []
    if how == "blocks":            # each block's forward compiled
        for b in m.blocks:
            b.forward = mlircap.compile(b.forward)
            compiled.append(b.forward)
        model = m
    else:                          # the whole sharded model
        model = mlircap.compile(m)
        compiled.append(model)
    rec = _fsdp_train(model, data)
    return {"eager": rec_eager, "compiled": rec, "stats": [_graph_stats(c) for c in compiled]}


for _how in ("blocks", "whole"):
    _add(f"fsdp2_{_how}", _fsdp, _how)
FSDP = [n for n in SCENARIOS if n.startswith("fsdp2_")]


@pytest.fixture(scope="module")
def fsdp_runs():
    return launch(FSDP)


@pytest.mark.parametrize("name", FSDP)
def test_fsdp2_compiled(fsdp_runs, name):
    results = results_of(fsdp_runs, name)
    if "eager_unsupported" in results[0]:
        pytest.skip(f"eager FSDP2 on CPU/gloo fails in this torch: {results[0]['eager_unsupported']}")
    for r, res in enumerate(results):
        for key in ("loss", "param"):
            for step, (g, w) in enumerate(zip(res["compiled"][key], res["eager"][key])):
                torch.testing.assert_close(g, w, **TOL, msg=lambda m: f"rank {r}: {key} of step {step}: {m}")
    torch.testing.assert_close(results[0]["compiled"]["param"], results[1]["compiled"]["param"], rtol=0, atol=0)
    # blocks: each compiled forward is one graph; whole: capture gives up on the root's
    # forward (FSDP's unshard hooks, storage resizes), which runs eagerly, and compiles the
    # blocks it calls on their own
    for res in results:
        assert all(s["graphs"] >= 1 and not s["fallbacks"] for s in res["stats"]), res["stats"]


def test_frame_run_eagerly_compiles_its_callees_also_for_a_hooked_module():
    """One process, no process group: what makes mlircap.compile(FSDP2 model) and
    mlircap.compile(DDP(m)) compile anything. Capture gives up on the root's forward (here
    sys._getframe; there the wrapper's bookkeeping); the frame runs eagerly and the modules
    it calls are captured on their own. The root has a forward hook (as FSDP's root has),
    so its frame reaches capture through the PEP 523 hook, whose callback ignored every
    frame, the callees' too: nothing compiled."""
    import warnings

    import mlircap

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x))

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            sys._getframe(0)   # capture gives up: the frame reads itself
            return self.inner(x) * 2

    x = torch.randn(2, 4)
    for hooked in (False, True):
        torch.manual_seed(0)
        m = Outer()
        if hooked:
            m.register_forward_pre_hook(lambda mod, args: None)
        fast = mlircap.compile(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                got = fast(x)
        torch.testing.assert_close(got, m(x))
        assert len(fast.graphs) == 1 and fast.graphs[0].fallback_reason is None, (hooked, fast.graphs)


def test_a_forward_reference_in_typing_does_not_make_capture_give_up():
    """torch.autograd.profiler.record_function (DDP's and FSDP's forwards) evaluates
    Optional["torch.classes.profiler._RecordFunction"]; typing_extensions (patched into
    typing) read the caller's frame with sys._getframe, and capture gave up on the whole
    function. A string not seen before, as typing caches subscriptions."""
    import warnings
    from typing import Optional

    import mlircap

    ref = "_ForwardRefNotSeenBefore"   # a forward reference, as record_function's

    def f(x):
        r = torch.jit.annotate(Optional[ref], None)
        return x.sin() + 1 if r is None else x

    fast = mlircap.compile(f)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no "capture gave up" warning
        for _ in range(3):
            got = fast(x)
    torch.testing.assert_close(got, f(x))
    assert len(fast.graphs) == 1


def test_record_function_inside_a_compiled_function_replays():
    """The profiler annotation DDP's and FSDP's forwards make: _record_function_enter_new
    returns a TorchScript handle that _record_function_exit takes. It was guarded by
    identity, a new handle on every call: every call recorded again until cache_limit,
    then the function ran eagerly. Now the handle is an opaque value passed from one
    replayed call to the other: one recording, then replays."""
    import warnings

    import mlircap

    def f(x):
        with torch.autograd.profiler.record_function("mlircap-test-block"):
            y = x.sin() * 2
        return y + 1

    # record_function's first use in a process imports torch.profiler._cupti_monitor; under
    # pytest's import hook that import loops over a graph break and the frame runs eagerly
    # (a separate gap: imports during a recording). Done here once, eagerly.
    f(torch.randn(4))
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no cache_limit warning
        for i in range(12):
            x = torch.randn(4) + i
            torch.testing.assert_close(fast(x), f(x))
    stats = fast._call.stats
    assert stats.records == 1 and stats.replays == 11, vars(stats)
    with torch.profiler.profile() as prof:   # the annotation still reaches the profiler
        fast(torch.randn(4))
    assert any(e.name == "mlircap-test-block" for e in prof.events())


# --------------------------------------------------------------------------- 5. state_dict
def _state_dict(rank, world):
    import mlircap

    out = {}
    eager_ddp = _ddp(build("bn"))
    model = build("bn")
    compiled = mlircap.compile(model)
    ddp = _ddp(compiled)
    out["keys"] = {
        "model": list(build("bn").state_dict()),
        "compiled": list(compiled.state_dict()),
        "ddp_eager": list(eager_ddp.state_dict()),
        "ddp_of_compiled": list(ddp.state_dict()),
        "compiled_ddp": list(mlircap.compile(_ddp(build("bn"))).state_dict()),
        "ddp_of_compiled_params": [n for n, _ in ddp.named_parameters()],
        "ddp_eager_params": [n for n, _ in eager_ddp.named_parameters()],
        "ddp_of_compiled_buffers": [n for n, _ in ddp.named_buffers()],
        "ddp_eager_buffers": [n for n, _ in eager_ddp.named_buffers()],
    }
    data = batches(rank, 3)
    train(ddp, model, data)            # train a little so the state differs from the init
    x = data[0][0]
    ddp.eval()
    with torch.no_grad():
        want = ddp(x).clone()
    sd = ddp.state_dict()
    # round trips: into a fresh DDP of a compiled module, into eager DDP, into the bare
    # module and the bare compiled module (after stripping DDP's "module." prefix)
    results = {}
    for target in ("ddp_of_compiled", "ddp_eager", "module", "compiled"):
        torch.manual_seed(123)
        fresh = WithBatchNorm()
        fast = mlircap.compile(fresh)
        if target == "ddp_of_compiled":
            wrapped = _ddp(fast)
            status = wrapped.load_state_dict(sd)
        elif target == "ddp_eager":
            wrapped = _ddp(fresh)
            status = wrapped.load_state_dict(sd)
        else:
            wrapped = fresh if target == "module" else fast
            status = wrapped.load_state_dict({k.removeprefix("module."): v for k, v in sd.items()})
        assert not status.missing_keys and not status.unexpected_keys, status
        wrapped.eval()
        with torch.no_grad():
            fast.eval()
            results[target] = {"compiled_out": fast(x).clone(), "state": {k: v.clone() for k, v in fresh.state_dict().items()}}
    out["want"] = want
    out["want_state"] = {k.removeprefix("module."): v.clone() for k, v in sd.items()}
    out["loaded"] = results
    # compiled before loading: the compiled code reads the loaded weights, not the old ones
    torch.manual_seed(123)
    fresh = WithBatchNorm().eval()
    fast = mlircap.compile(fresh)
    with torch.no_grad():
        fast(x)
        _ddp(fast).load_state_dict(sd)
        out["compiled_then_loaded"] = fast(x).clone()
    return out


_add("state_dict", _state_dict)


@pytest.fixture(scope="module")
def state_dict_runs():
    return launch(["state_dict"])


def test_state_dict_keys_of_ddp_of_compiled_module(state_dict_runs):
    """The contract: mlircap.compile(m) is transparent in names. Its state_dict has m's keys,
    DDP(mlircap.compile(m)) has eager DDP(m)'s ("module.<key>", no "_orig_mod." level),
    and so does mlircap.compile(DDP(m))."""
    for res in results_of(state_dict_runs, "state_dict"):
        k = res["keys"]
        assert k["compiled"] == k["model"]
        assert k["ddp_of_compiled"] == k["ddp_eager"] == ["module." + n for n in k["model"]]
        assert k["compiled_ddp"] == k["ddp_eager"]
        assert k["ddp_of_compiled_params"] == k["ddp_eager_params"]
        assert k["ddp_of_compiled_buffers"] == k["ddp_eager_buffers"]


def test_state_dict_round_trip_through_ddp_of_compiled_module(state_dict_runs):
    for res in results_of(state_dict_runs, "state_dict"):
        for target, got in res["loaded"].items():
            torch.testing.assert_close(got["state"], res["want_state"], rtol=0, atol=0, msg=target)
            torch.testing.assert_close(got["compiled_out"], res["want"], **TOL, msg=lambda m: f"{target}: {m}")
        torch.testing.assert_close(res["compiled_then_loaded"], res["want"], **TOL)


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()   # a crash prints every thread's stack into the rank's log
    try:
        _worker(sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
