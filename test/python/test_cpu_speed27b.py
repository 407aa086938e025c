"""CPU inference (session 27): behaviour checks of compiled calls across torch thread count
changes and of library matmuls on transposed operands, never timings."""
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
