"""Timing helpers shared by the demo and bench/ programs."""
from __future__ import annotations

import statistics
import time

import torch


def latency_ms(fn, args, warmup=3, iters=20, device="cpu", max_seconds=20.0) -> float:
    """Median latency of fn(*args) in ms (CUDA events on GPU, perf_counter on CPU)."""
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        times = []
        budget = time.perf_counter() + max_seconds
        for _ in range(iters):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*args)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn(*args)
                times.append((time.perf_counter() - t0) * 1e3)
            if time.perf_counter() > budget and len(times) >= 3:
                break
    return statistics.median(times)


def side_by_side_ms(fns, args, rounds=15, block_s=0.02):
    """Latency in ms of each of `fns` (CPU) on `args`, measured in turns so that load
    changes hit each alike: the median over `rounds` rounds of the mean time per call
    of a block of calls, the block sized from a first timed call to last about
    `block_s`. Process CPU time on one thread (other processes on a loaded machine do
    not inflate it), wall time on more."""
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    with torch.no_grad():
        for fn in fns:
            for _ in range(3):
                fn(*args)
        t0 = time.perf_counter()
        fns[0](*args)
        calls = max(1, int(block_s / max(time.perf_counter() - t0, 1e-6)))
        samples = [[] for _ in fns]
        for _ in range(rounds):
            for fn, out in zip(fns, samples):
                t0 = clock()
                for _ in range(calls):
                    fn(*args)
                out.append((clock() - t0) / calls * 1e3)
    return [statistics.median(s) for s in samples]


def timed_first_call(fn, args, device="cpu"):
    """(seconds of the first call: capture, compile and one run; output of the
    second call). The output checked is the second call's: mlircap's first call
    records the program while running it eagerly, so only later calls run the
    compiled code."""
    with torch.no_grad():
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        return seconds, fn(*args)


def max_err(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return float("nan")
    import math

    return math.exp(sum(math.log(x) for x in xs) / len(xs))
