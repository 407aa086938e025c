"""A loop that breaks the graph on every iteration: today's rule (recorder.LOOP_BREAKS: a break
site met 8 times in one call runs the frame eagerly, its callees captured on their own) against
unrolling it (LOOP_BREAKS raised: one graph per iteration, every break replayed and its result
guarded). Per-call median time, graphs compiled, variants, recordings, eager calls, replays;
first three calls' wall time (recording and compiling).

    python bench/loop_breaks.py [T]      # T iterations (default 16), one process, one thread

Loops (inline tensor ops, no callee to capture on its own):
  print      `print(float(h.sum()), file=buf)` each iteration: a break whose result no guard reads
  index      `h = h + E[int(h[0, :4].argmax())]`: a break whose result is guarded (a list index)
  early      the index loop leaving at `k == 0`: a data-dependent trip count
"""
from __future__ import annotations

import io
import sys
import time
import warnings

import torch

import mlircap
import mlircap.capture.recorder as recorder

BUF = io.StringIO()


def loop_print(x, W, U):
    h = torch.zeros(x.shape[1], W.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ W + h @ U) * 0.9 + 0.1 * h
        print(float(h.sum()), file=BUF)
    return h


def loop_index(x, W, U, E):
    h = torch.zeros(x.shape[1], W.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ W + h @ U) * 0.9 + 0.1 * h
        h = h + E[int(torch.argmax(h[0, :4]))]
    return h


def loop_early(x, W, U, E):
    h = torch.zeros(x.shape[1], W.shape[1])
    for t in range(x.shape[0]):
        h = torch.tanh(x[t] @ W + h @ U) * 0.9 + 0.1 * h
        k = int(torch.argmax(h[0, :4]))
        h = h + E[k]
        if k == 0:
            break
    return h


def _median_ms(fn, make, calls):
    ts = []
    for i in range(calls):
        a = make(i)
        t = time.perf_counter()
        fn(*a)
        ts.append(time.perf_counter() - t)
    return round(1e3 * sorted(ts)[len(ts) // 2], 3)


def run(fn, make, calls, loop_breaks):
    recorder.LOOP_BREAKS = loop_breaks
    f = mlircap.compile(fn, break_limit=max(64, loop_breaks))
    t0 = time.perf_counter()
    for i in range(3):
        f(*make(1000 + i))
    warm = round(time.perf_counter() - t0, 2)
    ms = _median_ms(f, make, calls)
    c = f._compiled._mlircap_capture
    s = c.stats
    return (f"{ms:8.3f} ms  graphs {len(f.graphs):3d}  variants {len(c.variants)}  records {s.records}  "
            f"eager calls {s.eager_calls}  replays {s.replays}  first 3 calls {warm} s")


def main():
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    torch.manual_seed(0)
    B, D = 8, 32
    W, U = torch.randn(D, D) * 0.1, torch.randn(D, D) * 0.1
    E = [torch.randn(D) * 0.01 for _ in range(4)]
    g = torch.Generator().manual_seed(1)
    cases = [("print", loop_print, lambda i: (torch.randn(T, B, D, generator=g), W, U)),
             ("index", loop_index, lambda i: (torch.randn(T, B, D, generator=g), W, U, E)),
             ("early", loop_early, lambda i: (torch.randn(T, B, D, generator=g), W, U, E))]
    default = recorder.LOOP_BREAKS
    for name, fn, make in cases:
        print(f"{name} (T={T}): eager {_median_ms(fn, make, 40):8.3f} ms")
        print(f"  rule (LOOP_BREAKS={default}): {run(fn, make, 40, default)}")
        print(f"  unrolled:          {run(fn, make, 40, 10 ** 6)}")
    recorder.LOOP_BREAKS = default


if __name__ == "__main__":
    main()
