"""CPU inference (session 27): behaviour checks of compiled calls across torch thread count
changes and of library matmuls on transposed operands, never timings."""
import os
import warnings

import pytest
import torch

import mlircap
from mlircap import thread_reads
from compiled_check import same  # test/python/compiled_check.py


@pytest.fixture(autouse=True)
def _threads(monkeypatch):
    # (a fresh process-wide record of compile-time reads no variant owned: see thread_reads)
    monkeypatch.setattr(thread_reads, "_unattributed", [False])
    old = torch.get_num_threads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    torch.set_num_threads(old)


def _stats(fast):
    return fast._compiled._mlircap_capture.stats


def _mm_relu(x, w):
    return torch.relu(x @ w) * 2 + 1


def test_thread_count_change_needs_no_recompile():
    """torch.set_num_threads between calls recompiled every graph: the thread count was part of
    the variant's global state guard (torch's GlobalStateGuard). Compiled CPU code follows the
    count at each call, and nothing compiled here read it: the one variant runs at every count,
    compiled, with eager's values."""
    x, w = torch.randn(64, 128), torch.randn(128, 64)
    fast = mlircap.compile(_mm_relu)
    for n in (1, 1, 2, 2, 1, 2, 1):
        torch.set_num_threads(n)
        same(fast(x, w), _mm_relu(x, w))
    assert len(fast.graphs) == 1 and fast.graphs[0].fallback_reason is None
    st = _stats(fast)
    assert st.records == 1 and st.eager_calls == 0, st
    assert "Variants: 1" in str(fast.explain())


def test_user_thread_count_read_is_guarded_by_value():
    """A function that reads torch.get_num_threads() is recorded for that count: its read is
    guarded by value, so another count records again (the result follows the count, as eager's)."""
    def f(x):
        return x + 1 if torch.get_num_threads() > 1 else x - 1

    x = torch.zeros(4)
    fast = mlircap.compile(f)
    for n in (1, 1, 2, 2, 1, 2):
        torch.set_num_threads(n)
        same(fast(x), f(x))
    assert "torch.get_num_threads() == 2" in str(fast.explain())


def test_compile_that_reads_thread_count_recompiles():
    """A graph compiled for one thread count (opmath: eager's thread chunks cut a bf16 add's
    vector loop, where its rounding changes) keeps the thread count guarded: another count
    compiles again, each bit for bit eager's at its count."""
    g = torch.Generator().manual_seed(27)
    x = (torch.randn(71, 600, generator=g) * 100).bfloat16()   # 42600 elements: 2 chunks on 2 threads
    y = (torch.randn(71, 600, generator=g) * 100).bfloat16()

    def f(x, y):
        return torch.add(x, y, alpha=0.7)

    fast = mlircap.compile(f)
    for n in (1, 1, 2, 2, 1):
        torch.set_num_threads(n)
        same(fast(x, y), f(x, y))
    assert _stats(fast).records == 2
    assert "num_threads differs" in str(fast.explain())


def test_read_outside_a_variant_compile_stops_other_counts():
    """A compile-time read no variant owns (a backward compiled at its first call) may be for any
    count: a variant that already ran at a count other than its recording's misses from then on,
    and none runs at another count again."""
    x, w = torch.randn(64, 128), torch.randn(128, 64)
    fast = mlircap.compile(_mm_relu)
    torch.set_num_threads(1)
    fast(x, w)
    fast(x, w)
    torch.set_num_threads(2)
    fast(x, w)
    assert _stats(fast).records == 1
    thread_reads.compile_threads()   # (as a lazily compiled graph's read)
    same(fast(x, w), _mm_relu(x, w))
    assert _stats(fast).records == 2
    torch.set_num_threads(1)
    same(fast(x, w), _mm_relu(x, w))
    assert _stats(fast).records == 3


# modules that read torch's thread count for what it is at a call, not to decide compiled code
_RUNTIME_THREAD_READERS = {"runtime/cpu.py", "benchutil.py", "demo.py", "thread_reads.py", "capture/replay.py"}


def test_compile_time_thread_reads_go_through_thread_reads():
    """A compile-time decision that reads torch.get_num_threads() directly is invisible to the
    variant's state guard, which then runs the code at other counts: every such read in
    python/mlircap goes through thread_reads.compile_threads (the runtime's own reads, of the
    count at each call, are listed in _RUNTIME_THREAD_READERS)."""
    import ast
    from pathlib import Path

    root = Path(mlircap.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in _RUNTIME_THREAD_READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "get_num_threads" or \
                    isinstance(node, ast.Name) and node.id == "get_num_threads":
                found.append(f"{rel}:{node.lineno}")
    # (capture/calls.py names it to guard a user's call of it by value)
    assert [f for f in found if not f.startswith("capture/calls.py:")] == [], \
        "use thread_reads.compile_threads() for compile-time reads of the thread count"


def test_other_backend_keeps_thread_guard():
    """Another backend's compiled code may be for the count it was compiled at (Inductor's
    OpenMP pragmas): a variant compiled by a backend that does not say it follows the count keeps
    the thread count guarded."""
    from mlircap.capture import capture

    compiled = []

    def backend(gm, examples):
        compiled.append(gm)
        return gm.forward

    fast = capture(_mm_relu, backend)
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    for n in (1, 1, 2, 2):
        torch.set_num_threads(n)
        same(fast(x, w), _mm_relu(x, w))
    assert len(compiled) == 2


# ------------------------------ intermediates past a plan's workspace, reused between calls
def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 8)).eval()


@pytest.fixture
def large(monkeypatch):
    """Every intermediate past the workspace (WORKSPACE_BYTES 0), a fresh process-wide pool."""
    from mlircap.runtime import cpu

    monkeypatch.setattr(cpu, "WORKSPACE_BYTES", 0)
    pool = cpu._LargeBuffers()
    monkeypatch.setattr(cpu, "_large", pool)
    return pool


def test_large_intermediates_are_reused_and_outputs_are_not(large):
    """Intermediates a plan's workspace does not keep were allocated per call, and glibc gave
    their memory back to the OS at each free (an encoder layer: 1400-2800 page faults a call
    against eager's 0): they are taken from the buffers earlier calls gave back. What a call
    returns is never one of them, and values stay eager's with new inputs each call."""
    m = _mlp()
    fast = mlircap.compile(m)
    outs = []
    with torch.no_grad():
        for seed in range(5):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed))
            y = fast(x)
            torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)
            outs.append((y, m(x)))
    (graph,) = fast.graphs
    exe = graph.executable
    assert not exe._workspace and "BIG.take" in exe.source
    kept = [t for ts in large.free.values() for t in ts]
    assert kept and large.bytes == sum(t.nbytes for t in kept)
    ids = {id(t) for t in kept}
    with torch.no_grad():
        fast(torch.randn(4, 16))
    assert {id(t) for ts in large.free.values() for t in ts} == ids   # the same buffers, taken and given back
    ptrs = {t.data_ptr() for t in kept}
    for y, ref in outs:
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        assert y.data_ptr() not in ptrs
    assert len({y.data_ptr() for y, _ in outs}) == len(outs)


def test_large_intermediates_made_in_inference_mode_serve_calls_outside_it(large):
    """A buffer first allocated in a call under torch.inference_mode is given back and then
    written with out= by a call outside it: made as a normal tensor."""
    m = _mlp()
    fast = mlircap.compile(m)
    x = torch.randn(4, 16)
    with torch.inference_mode():
        fast(x)
        fast(x)
    assert all(not t.is_inference() for ts in large.free.values() for t in ts)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)


def test_large_intermediates_kept_up_to_the_cap(large, monkeypatch):
    from mlircap.runtime import cpu

    monkeypatch.setattr(cpu, "LARGE_BUFFER_BYTES", 0)
    m = _mlp()
    fast = mlircap.compile(m)
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
    assert large.bytes == 0 and not any(large.free.values())


def test_large_intermediates_cap_is_an_environment_variable():
    """MLIRCAP_CPU_KEEP_MIB sets the memory the pool keeps (256 MiB by default; 0: none)."""
    import subprocess
    import sys

    code = "from mlircap.runtime import cpu; print(cpu.LARGE_BUFFER_BYTES)"
    for value, want in (("0", 0), ("3", 3 << 20), (None, 256 << 20)):
        env = {k: v for k, v in os.environ.items() if k != "MLIRCAP_CPU_KEEP_MIB"}
        if value is not None:
            env["MLIRCAP_CPU_KEEP_MIB"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert int(out.stdout.split()[-1]) == want, (value, out.stdout, out.stderr)
