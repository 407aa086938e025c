"""CPU float row sums: eager's cascade order (lib/Transforms/CascadeSums.cpp) vs the
blocked / sequential sums, side by side with eager in one run.

For each case (op over the last dim, dtype, row length, layout) the same function is
compiled twice, once with MLIRCAP_CASCADE_SUMS=1 (cascade) and once with =0 (the
sums it replaces), and timed in turns with eager within one run (`--rounds` rounds
of blocks of ~20 ms, the fastest round's time per call), on 1 and 2 threads
(torch.set_num_threads; the compiled code uses torch's thread count): on one thread the
calling thread's CPU time (time.thread_time: little changed by other processes' load), on
more the wall time (which a loaded host makes meaningless: OpenMP's barriers spin). Prints ms per call of eager and the
ratios eager / compiled (above 1: faster than eager) for the cascade and the other
sums, and whether each result is eager's to the bit. Rows are chosen so that each
call reads about `--elements` elements. On a shared host compare ratios within a run.

  python bench/sum_speed.py [--ops sum,mean,var,layer_norm,softmax] [--dtypes f32,f64]
      [--lengths 7,64,1000,4096,65536] [--layouts contiguous,strided] [--threads 1,2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

import mlircap

OPS = {
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "var": lambda x: x.var(-1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "softmax": lambda x: torch.softmax(x, -1),
}
DTYPES = {"f32": torch.float32, "f64": torch.float64}


def make_input(n, rows, dtype, layout):
    g = torch.Generator().manual_seed(n)
    if layout == "contiguous":
        return torch.randn(rows, n, generator=g, dtype=torch.float64).to(dtype)
    # every other element of each row: the last dim has stride 2
    return torch.randn(rows, 2 * n, generator=g, dtype=torch.float64).to(dtype)[:, ::2]


def compiled(fn, x, cascade):
    before = os.environ.get("MLIRCAP_CASCADE_SUMS")
    os.environ["MLIRCAP_CASCADE_SUMS"] = "1" if cascade else "0"
    try:
        c = mlircap.compile(lambda x: fn(x))
        c(x)  # compiles under this setting (it is part of the cache key)
    finally:
        if before is None:
            os.environ.pop("MLIRCAP_CASCADE_SUMS", None)
        else:
            os.environ["MLIRCAP_CASCADE_SUMS"] = before
    return c


def time_fronts(fronts, x, rounds, clock):
    for f in fronts:
        f(x)
    t0 = clock()
    fronts[0](x)
    calls = max(1, int(0.02 / max(clock() - t0, 1e-6)))
    times = [[] for _ in fronts]
    for _ in range(rounds):
        for i, f in enumerate(fronts):
            t = clock()
            for _ in range(calls):
                f(x)
            times[i].append((clock() - t) / calls * 1e3)
    return [min(t) for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--dtypes", default="f32,f64")
    ap.add_argument("--lengths", default="7,64,1000,4096,65536")
    ap.add_argument("--layouts", default="contiguous,strided")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--elements", type=int, default=1 << 18)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    print(f"torch {torch.__version__}, cores {sorted(os.sched_getaffinity(0))}, load average "
          f"{os.getloadavg()[0]:.2f}; eager ms per call (1 thread: CPU ms), eager / compiled (cascade on | off), "
          f"bit-equal to eager (on | off)")
    print(f"{'op':<10} {'dtype':<4} {'n':>6} {'rows':>6} {'layout':<10} {'thr':>3} {'eager ms':>9} "
          f"{'on':>6} {'off':>6}  equal")
    ratios = {}
    for op in a.ops.split(","):
        fn = OPS[op]
        for dt in a.dtypes.split(","):
            dtype = DTYPES[dt]
            for n in [int(v) for v in a.lengths.split(",")]:
                rows = max(1, a.elements // n)
                for layout in a.layouts.split(","):
                    x = make_input(n, rows, dtype, layout)
                    with torch.no_grad():
                        on, off = compiled(fn, x, True), compiled(fn, x, False)
                        want = fn(x)
                        equal = ["y" if torch.equal(c(x), want) else "n" for c in (on, off)]
                        for t in threads:
                            torch.set_num_threads(t)
                            # one thread: the calling thread's CPU time (both eager's and the
                            # compiled loops run on it), which other processes' load changes
                            # little; more: wall time
                            clock = time.thread_time if t == 1 else time.perf_counter
                            e, m_on, m_off = time_fronts([fn, on, off], x, a.rounds, clock)
                            ratios.setdefault((True, t), []).append(e / m_on)
                            ratios.setdefault((False, t), []).append(e / m_off)
                            print(f"{op:<10} {dt:<4} {n:>6} {rows:>6} {layout:<10} {t:>3} {e:9.4f} "
                                  f"{e / m_on:6.2f} {e / m_off:6.2f}  {equal[0]} | {equal[1]}", flush=True)
    for (flag, t), r in sorted(ratios.items()):
        print(f"cascade {'on ' if flag else 'off'}, {t} thread(s): geometric mean eager / compiled "
              f"{statistics.geometric_mean(r):.3f} over {len(r)} cases, min {min(r):.2f}")


if __name__ == "__main__":
    main()
