"""torch.set_num_threads between calls of a compiled model: recordings and first-call time.

For each model (bench/cpu_heldout.py's), two compiled copies in one run: `guarded`, as
before 420d27a (the thread count part of every variant's global state guard: each new
count records and compiles again), and `follows` (the default since: a new count runs the
variant it has where nothing compiled read the count). Each calls the model at the thread
counts of `--counts` in turn (two calls per count), printing the first call's ms at each
count, the recordings (capture stats) and the compiled graphs, and whether every output
equals eager's at its count (max |diff|).

  python bench/thread_switch.py [--models encoder256,mha77] [--counts 1,2,1,2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlircap  # noqa: E402
from cpu_heldout import build  # noqa: E402
from mlircap.capture import guards  # noqa: E402


def run(m, args, counts, guarded: bool):
    own = guards._GlobalState.other_threads
    if guarded:   # (bound into the variant's guard when it is compiled: patched while compiling)
        guards._GlobalState.other_threads = lambda self: False
    try:
        fast = mlircap.compile(m)
        firsts, err = [], 0.0
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for n in counts:
                torch.set_num_threads(n)
                t0 = time.perf_counter()
                fast(*args)
                firsts.append((time.perf_counter() - t0) * 1e3)
                out = fast(*args)
                err = max(err, (out.float() - m(*args).float()).abs().max().item())
    finally:
        guards._GlobalState.other_threads = own
    st = fast._compiled._mlircap_capture.stats
    return firsts, st.records, len(fast.graphs), err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="encoder256,mha77")
    ap.add_argument("--counts", default="1,2,1,2")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    print(f"torch {torch.__version__}, counts {counts}, load average {os.getloadavg()[0]:.2f}")
    for name in a.models.split(","):
        m, args = build(name, torch.float32)
        for label, guarded in (("guarded", True), ("follows", False)):
            firsts, records, graphs, err = run(m, args, counts, guarded)
            print(f"{name:<12} {label:<8} first call ms per count: " + " ".join(f"{t:8.1f}" for t in firsts) +
                  f"   recordings {records}, graphs {graphs}, max|diff| {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
