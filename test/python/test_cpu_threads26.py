"""CPU kernels on more than one thread (lib/CAPI/Parallel.cpp).

Compiled kernels' parallel loops run on torch's OpenMP team, as many threads as
torch.get_num_threads(). A team job ends at the team's barrier, which waits for
every team thread to arrive, also one that ran no chunk because it was not on a
core (a host whose cores other processes use): when the calling thread did every
chunk of two jobs in a row, the next jobs run on it directly. These tests read
the core's counters (mlircap_parallel_stats: team jobs, team jobs another thread
helped with, jobs run on the caller while backing off) through ctypes; they
assert behaviour, never timings.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings
from pathlib import Path

import pytest
import torch

import mlircap
from mlircap._core import core


@pytest.fixture(scope="module")
def lib():
    return ctypes.CDLL(str(Path(core().__file__).parent / "libmlircap_core.so"))


def _stats(lib):
    arr = (ctypes.c_int64 * 3)()
    lib.mlircap_parallel_stats(arr)
    return list(arr)


def _delta(before, after):
    return [b - a for a, b in zip(before, after)]


def _fn(x):
    return torch.sigmoid(x) * 2.0 + x


def _compiled():
    # 256 x 1024 elements: above the 2 * 32768 innermost iterations the
    # outlining pass asks for before it runs a loop on the team.
    x = torch.randn(256, 1024)
    fast = mlircap.compile(_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast(x)
        fast(x)
    assert len(fast.graphs) == 1 and not fast.graphs[0].fallback_reason
    return fast, x


@pytest.fixture
def threads():
    old = torch.get_num_threads()
    yield
    torch.set_num_threads(old)


def _starve_other_threads(cpu):
    """Every thread of this process on core `cpu`, and all but this one (torch's
    OpenMP workers) at SCHED_IDLE, so that they run only while this thread waits:
    the caller does every chunk of a job before another team thread gets to it,
    as on a host whose other processes hold the cores. Returns how to undo it."""
    me = threading.get_native_id()
    old = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            old[tid] = (os.sched_getaffinity(tid), os.sched_getscheduler(tid), os.sched_getparam(tid))
            os.sched_setaffinity(tid, {cpu})
            if tid != me:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except OSError:  # a thread that ended meanwhile
            pass
    return old


def _restore(old):
    for tid, (cpus, policy, param) in old.items():
        try:
            os.sched_setscheduler(tid, policy, param)
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def test_one_thread_runs_no_team_job(lib, threads):
    fast, x = _compiled()
    torch.set_num_threads(1)
    ref = _fn(x)
    before = _stats(lib)
    for _ in range(5):
        out = fast(x)
    assert _delta(before, _stats(lib)) == [0, 0, 0]
    torch.testing.assert_close(out, ref)


def test_two_threads_use_the_team_and_match_one_thread(lib, threads):
    fast, x = _compiled()
    torch.set_num_threads(1)
    fast(x)  # the first call after a change of torch's thread count
    one = fast(x)
    torch.set_num_threads(2)
    fast(x)  # the first call after a change of torch's thread count
    lib.mlircap_parallel_backoff(0)
    try:
        before = _stats(lib)
        for _ in range(5):
            two = fast(x)
        team, _, caller = _delta(before, _stats(lib))
    finally:
        lib.mlircap_parallel_backoff(1)
    # Every call dispatched its kernel to the team (backoff off: none on the caller).
    assert team >= 5 and caller == 0
    assert torch.equal(two, one)


def _run_on_one_core(lib, fast, x, calls):
    """`calls` calls on torch's two team threads while the other one is starved."""
    torch.set_num_threads(2)
    fast(x)  # the team exists (two threads) before it is starved
    fast(x)
    old = _starve_other_threads(sorted(os.sched_getaffinity(0))[0])
    try:
        before = _stats(lib)
        for _ in range(calls):
            out = fast(x)
        return _delta(before, _stats(lib)), out
    finally:
        _restore(old)


def test_jobs_run_on_the_caller_while_the_team_does_not_help(lib, threads):
    fast, x = _compiled()
    torch.set_num_threads(1)
    fast(x)  # the first call after a change of torch's thread count
    ref = fast(x)
    lib.mlircap_parallel_backoff(1)
    (team, helped, caller), out = _run_on_one_core(lib, fast, x, 200)
    assert caller > 0, (team, helped, caller)
    assert team + caller >= 200
    assert torch.equal(out, ref)


def test_without_backoff_every_job_waits_for_the_team(lib, threads):
    # The same conditions with the backoff off (the behaviour before it): every
    # job goes to the team and its barrier, helped or not.
    fast, x = _compiled()
    torch.set_num_threads(1)
    fast(x)  # the first call after a change of torch's thread count
    ref = fast(x)
    lib.mlircap_parallel_backoff(0)
    try:
        (team, helped, caller), out = _run_on_one_core(lib, fast, x, 50)
    finally:
        lib.mlircap_parallel_backoff(1)
    assert caller == 0 and team >= 50
    assert torch.equal(out, ref)


def test_backoff_ends_when_the_team_helps_again(lib, threads):
    fast, x = _compiled()
    lib.mlircap_parallel_backoff(1)
    d, _ = _run_on_one_core(lib, fast, x, 200)
    assert d[2] > 0, d
    # Both cores again, and bigger jobs (each chunk long enough for the other
    # thread to be scheduled): after the backoff (at most 4096 jobs on the
    # caller) the team is asked again, and a job it helps with resets it.
    big = torch.randn(1024, 1024)
    fast_big = mlircap.compile(_fn)
    fast_big(big)
    before = _stats(lib)
    for _ in range(4200):
        out = fast_big(big)
        if _delta(before, _stats(lib))[1] > 0:
            break
    team, helped, caller = _delta(before, _stats(lib))
    assert helped > 0, (team, helped, caller)
    torch.testing.assert_close(out, _fn(big))
