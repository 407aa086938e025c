"""The quick-start demo: compile real models with mlircap and report.

    python -m mlircap.demo [--models mlp,bert] [--device cpu|cuda]

For each model: result check against eager (max |diff|), compile time, and
latency of eager vs mlircap: on the CPU measured side by side (in turns, blocks of
calls, median of rounds: benchutil.side_by_side_ms), on CUDA with CUDA events.
--threads N sets torch.set_num_threads first (mlircap's CPU kernels follow it).
"""
from __future__ import annotations

import argparse
import os
import warnings

import torch

import mlircap
from mlircap._core import core
from mlircap import models
from mlircap.benchutil import latency_ms, max_err, side_by_side_ms, timed_first_call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="mlp,attention,bert")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N) first; 0: torch's default")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    where = a.device if a.device != "cpu" else \
        f"cpu, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f}"
    print(f"mlircap demo on {where} | core: {core().version()} | torch {torch.__version__}")
    print(f"{'model':<10} {'max|diff|':>10} {'compile s':>10} {'eager ms':>10} {'mlircap ms':>11} {'speedup':>8}")
    for name in a.models.split(","):
        m, args = models.build(name, device=a.device)
        with torch.no_grad():
            ref = m(*args)
        fast = mlircap.compile(m)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            compile_s, out = timed_first_call(fast, args, a.device)
        fell_back = any(g.fallback_reason for g in fast.graphs)
        if a.device == "cpu":
            t_eager, t_fast = side_by_side_ms([m, fast], args)
        else:
            t_eager = latency_ms(m, args, device=a.device)
            t_fast = latency_ms(fast, args, device=a.device)
        note = "  (fell back to eager: " + fast.graphs[0].fallback_reason.splitlines()[0] + ")" if fell_back else ""
        print(f"{name:<10} {max_err(out, ref):>10.2e} {compile_s:>10.2f} {t_eager:>10.3f} {t_fast:>11.3f} "
              f"{t_eager / t_fast:>7.2f}x{note}")
        for msg in w:
            if "mlircap" in str(msg.message):
                print("   warning:", str(msg.message).splitlines()[0])
    print("IR of the last model, linalg stage (first 15 lines):")
    print("\n".join(fast.ir("linalg").splitlines()[:15]))


if __name__ == "__main__":
    main()
