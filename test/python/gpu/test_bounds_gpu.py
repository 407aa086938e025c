"""Index reads with indices from the inputs compile on CUDA (bounds.py, device "cuda"):
gather, index_select, embedding, take and x[idx] no longer run as eager islands. The
compiled kernels read clamped indices; an index out of range is torch._assert_async's
device-side assert, as eager's CUDA kernels assert. Each behaviour is compared with
eager's own, observed in a child process (a device-side assert ends the CUDA context)."""
import contextlib
import io
import os
import subprocess
import sys

import pytest
import torch

import mlircap
from mlircap import logs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")

CASES = {
    "embedding": ("torch.nn.functional.embedding(i, w)", "(20, 8)", "(3, 5)", 20),
    "gather": ("torch.gather(w, 1, i)", "(6, 20)", "(6, 4)", 20),
    "index_select": ("torch.index_select(w, 0, i.flatten())", "(20, 8)", "(3, 5)", 20),
    "take": ("torch.take(w, i)", "(4, 5)", "(3, 5)", 20),
    "getitem": ("w[i] * 2", "(20, 8)", "(3, 5)", 20),
    "getitem2": ("w[i, i.flip(0)]", "(20, 20)", "(3, 5)", 20),
}


def _run(f, *args, calls=4):
    """Compiled f against eager, `calls` times (records, compiles, captures a CUDA graph,
    replays); returns (compiled, fallback log)."""
    fast = mlircap.compile(f)
    err = io.StringIO()
    logs.set_logs("fallback")
    try:
        with contextlib.redirect_stderr(err):
            for _ in range(calls):
                torch.testing.assert_close(fast(*args), f(*args), rtol=0, atol=0)
    finally:
        logs.set_logs()
    return fast, err.getvalue()


def _all_compiled(fast, log):
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    assert "eager islands" not in log, log


def _fn(expr):
    return eval(f"lambda w, i: ({expr}).float().sin() + 1")   # a compiled consumer after the read


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_reads_compile_without_islands(name):
    expr, wshape, ishape, n = CASES[name]
    g = torch.Generator().manual_seed(0)
    w = torch.randn(*eval(wshape), generator=g).cuda()
    i = torch.randint(0, n, eval(ishape), generator=g).cuda()   # n: the size indexed
    fast, log = _run(_fn(expr), w, i)
    _all_compiled(fast, log)
    if name != "take":   # int32 indices (take wants int64): the same values
        _run(_fn(expr), w, i.to(torch.int32))


def test_negative_indices_wrap_as_eager_wraps_them():
    w = torch.randn(20, 8, device="cuda")
    i = torch.tensor([[-1, 0, -20], [19, -7, 3]], device="cuda")
    fast, log = _run(lambda w, i: w[i] + torch.take(w, i * 5).unsqueeze(-1), w, i)
    _all_compiled(fast, log)


def test_embedding_layer_norm_block_is_one_compiled_graph():
    emb, pos = torch.nn.Embedding(100, 32).cuda(), torch.nn.Embedding(16, 32).cuda()
    ln = torch.nn.LayerNorm(32).cuda()

    def f(ids):
        return ln(emb(ids) + pos(torch.arange(ids.shape[1], device=ids.device)))

    with torch.no_grad():
        fast = mlircap.compile(f)
        ids = torch.randint(0, 100, (4, 16), device="cuda")
        for _ in range(4):
            torch.testing.assert_close(fast(ids), f(ids))
    assert len(fast.graphs) == 1 and fast.graphs[0].fallback_reason is None


def test_switched_off_keeps_the_islands(monkeypatch):
    monkeypatch.setenv("MLIRCAP_GPU_BOUNDS_CHECKS", "0")
    w, i = torch.randn(20, 8, device="cuda"), torch.randint(0, 20, (5,), device="cuda")
    fast, log = _run(_fn("w[i]"), w, i)
    assert "eager islands: index" in log, log


_CHILD = """
import sys, torch, mlircap
torch.manual_seed(0)   # the same w in eager's child and the compiled one's
w = torch.randn(*{wshape}, device="{device}")
f = lambda w, i: ({expr}).float().sin() + 1
good = torch.zeros({ishape}, dtype=torch.long, device="{device}")
bad = good.clone(); bad.view(-1)[3] = {bad}
run = mlircap.compile(f) if sys.argv[1] == "compiled" else f
try:
    run(w, good); run(w, good); run(w, good)
    out = run(w, bad); torch.cuda.synchronize() if w.is_cuda else None
    print("RETURNED", out.double().sum().item())
except Exception as e:
    print("RAISED", type(e).__name__)
"""

BAD = [("embedding", 10**6), ("gather", 20), ("index_select", -3), ("take", -21), ("getitem", -2),
       ("getitem2", -21)]


def _behaviours(cases, device="cuda"):
    """{(mode, name, bad): the last RAISED / RETURNED line} of each case run eagerly and compiled,
    each in a child process of its own (a device-side assert ends the CUDA context), all
    children at once (each spends most of its ~30 s importing and initialising CUDA)."""
    procs = {}
    for name, bad in cases:
        expr, wshape, ishape, _ = CASES[name]
        code = _CHILD.format(wshape=wshape, expr=expr, ishape=ishape, bad=bad, device=device)
        for mode in ("eager", "compiled"):
            procs[mode, name, bad] = subprocess.Popen([sys.executable, "-c", code, mode], stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    out = {}
    for key, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        lines = [ln for ln in stdout.splitlines() if ln.startswith(("RAISED", "RETURNED"))]
        out[key] = lines[-1] if lines else "NO RESULT\n" + stdout + stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def behaviours():
    return _behaviours(BAD)


@pytest.mark.parametrize("name,bad", BAD)
def test_bad_index_behaves_as_eager(behaviours, name, bad):
    eager, compiled = behaviours["eager", name, bad], behaviours["compiled", name, bad]
    assert eager.startswith(("RAISED", "RETURNED")), eager
    if eager.startswith("RAISED"):
        assert compiled.startswith("RAISED"), (eager, compiled)
    else:   # eager wraps the index: the same values
        assert compiled.startswith("RETURNED") and float(compiled.split()[1]) == pytest.approx(
            float(eager.split()[1]), rel=1e-6), (eager, compiled)
