"""CPU benchmark: eager vs mlircap vs torch.compile (inductor), side by side in one run.

    python bench/cpu.py [--models elementwise,mlp,...] [--no-inductor] [--threads N]

Per model: latency (median ms), speedup over eager, cold compile time (first
call, seconds: for mlircap capture + compile; inductor with its caches off),
and mlircap's max |diff| against eager on a compiled call.
"""
import argparse
import os
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Cold compile times for inductor too: no FX-graph / kernel cache from earlier runs.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import warnings as _w  # noqa: E402
_w.filterwarnings("ignore", message="dynamo_pgo force disabled")
import torch  # noqa: E402

import mlircap  # noqa: E402
from mlircap import models  # noqa: E402
from mlircap.benchutil import geomean, latency_ms, max_err, timed_first_call  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(models.NAMES))
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads(N) first (mlircap's kernels follow it); 0: torch's default")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, small model configs (tests' sizes)")
    hdr = f"{'model':<12} {'eager ms':>9} {'mlircap ms':>11} {'x eager':>8} {'compile s':>10} {'max|diff|':>10}"
    if not a.no_inductor:
        hdr += f" {'inductor ms':>12} {'x eager':>8} {'compile s':>10}"
    print(hdr)
    ratios, ind_ratios = [], []
    for name in a.models.split(","):
        m, args = models.build(name)
        with torch.no_grad():
            ref = m(*args)
        t_eager = latency_ms(m, args)
        fast = mlircap.compile(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c_mc, out = timed_first_call(fast, args)
        fb = " (eager fallback)" if any(g.fallback_reason for g in fast.graphs) else ""
        t_mc = latency_ms(fast, args)
        with torch.no_grad():
            out = fast(*args)   # a compiled call: the first one records while running eagerly
        ratios.append(t_eager / t_mc)
        line = f"{name:<12} {t_eager:>9.3f} {t_mc:>11.3f} {t_eager / t_mc:>7.2f}x {c_mc:>10.2f} {max_err(out, ref):>10.1e}"
        if not a.no_inductor:
            torch._dynamo.reset()
            ind = torch.compile(m)
            c_ind, _ = timed_first_call(ind, args)
            t_ind = latency_ms(ind, args)
            ind_ratios.append(t_eager / t_ind)
            line += f" {t_ind:>12.3f} {t_eager / t_ind:>7.2f}x {c_ind:>10.2f}"
        print(line + fb, flush=True)
    print(f"geomean speedup over eager: mlircap {geomean(ratios):.2f}x"
          + ("" if a.no_inductor else f", inductor {geomean(ind_ratios):.2f}x"))


if __name__ == "__main__":
    main()
