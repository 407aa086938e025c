"""Held-out CPU models on more than one thread: where the wall time goes.

For each model (bench/cpu_heldout.py's), in turns within one run (blocks of ~50 ms,
`--rounds` rounds): eager, mlircap with the core's parallel-job backoff off (every
kernel job goes to torch's OpenMP team and waits at its barrier), mlircap with it on
(lib/CAPI/Parallel.cpp: jobs run on the calling thread while the team does not help).
Prints median wall ms per call and x eager, median process CPU ms per call (all
threads: CPU time far above wall time x threads means threads spinning at barriers),
the core's job counters over the run (team jobs, helped by another team thread, run
on the caller) and the load average. On a shared host compare ratios within a run;
a load above the core count makes OpenMP's spinning barriers dominate both fronts.

  python bench/cpu_threads.py [--threads 0] [--models a,b] [--rounds 15]
  taskset -c 0 python bench/cpu_threads.py --threads 2   # two threads on one core
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlircap  # noqa: E402
from cpu_heldout import build  # noqa: E402
from mlircap._core import core  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N); 0: torch's default")
    ap.add_argument("--models", default="effnet_se,mixer,vit_tiny,mobilenetv2")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    lib = ctypes.CDLL(str(Path(core().__file__).parent / "libmlircap_core.so"))

    def stats():
        arr = (ctypes.c_int64 * 3)()
        lib.mlircap_parallel_stats(arr)
        return list(arr)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cores {sorted(os.sched_getaffinity(0))}, "
          f"load average {os.getloadavg()[0]:.2f}; wall ms (x eager) | process CPU ms | jobs team/helped/caller")
    for name in a.models.split(","):
        m, args = build(name, torch.float32)
        fast = mlircap.compile(m)
        fronts = [(m, None), (fast, 0), (fast, 1)]
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                m(*args)
                fast(*args)
            t0 = time.perf_counter()
            m(*args)
            calls = max(1, int(0.05 / (time.perf_counter() - t0)))
            wall, cpu = [[] for _ in fronts], [[] for _ in fronts]
            s0 = stats()
            for _ in range(a.rounds):
                for i, (fn, backoff) in enumerate(fronts):
                    if backoff is not None:
                        lib.mlircap_parallel_backoff(backoff)
                    w0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(calls):
                        fn(*args)
                    wall[i].append((time.perf_counter() - w0) / calls * 1e3)
                    cpu[i].append((time.process_time() - c0) / calls * 1e3)
            lib.mlircap_parallel_backoff(1)
            jobs = [y - x for x, y in zip(s0, stats())]
        w = [statistics.median(x) for x in wall]
        c = [statistics.median(x) for x in cpu]
        print(f"{name:<12} eager {w[0]:8.2f} | backoff off {w[1]:8.2f} ({w[0] / w[1]:.2f}x) | on {w[2]:8.2f} "
              f"({w[0] / w[2]:.2f}x) | cpu {c[0]:.2f} / {c[1]:.2f} / {c[2]:.2f} | jobs {jobs} | "
              f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
