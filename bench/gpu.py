"""GPU benchmark: eager vs torch.compile (inductor, with and without CUDA graphs) vs mlircap.

    python bench/gpu.py [--models mlp,cnn,attention,bert,gpt2] [--dtypes fp32,bf16] [--no-inductor]
                        [--out bench/RESULTS.md]

Measured side by side in one run on the current GPU: latency (CUDA events, warm-up, median),
ratios over eager, cold compile time of each compiler (first call), mlircap's kernel and library
call counts, and the achieved bandwidth of a memory-bound fused kernel against a copy kernel
timed in the same run. Writes the table (with date and commit) to RESULTS.md and a PNG plot.
"""
import argparse
import datetime
import os
import subprocess
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import mlircap  # noqa: E402
from mlircap import config, models  # noqa: E402
from mlircap.benchutil import geomean, latency_ms, max_err, timed_first_call  # noqa: E402
from profile_gpu import device_kernels  # noqa: E402

DT = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _axpy_relu(x, y):
    return torch.relu(x * 0.5 + y)


def bandwidth_check(dtype):
    """relu(x*0.5+y) on 8192x8192: one fused, memory-bound kernel (eager: 3 kernels),
    3 tensors of traffic, against a copy kernel (2 tensors) timed in the same run."""
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=dtype)
    y = torch.randn(n, n, device="cuda", dtype=dtype)
    fast = mlircap.compile(_axpy_relu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, out = timed_first_call(fast, (x, y), "cuda")
    err = max_err(out, _axpy_relu(x, y))
    t = latency_ms(fast, (x, y), device="cuda", iters=30)
    moved = 3 * x.numel() * x.element_size()
    dst = torch.empty_like(x)
    copy = lambda a: dst.copy_(a)  # noqa: E731
    t_copy = latency_ms(copy, (x,), device="cuda", iters=30)
    copy_moved = 2 * x.numel() * x.element_size()
    kernels = sum(getattr(g.executable, "n_kernels", 0) for g in fast.graphs if g.fallback_reason is None)
    # The same, from the kernels' device time alone (CUPTI): the per-call numbers above
    # also hold the host time of a call (guards, launch), which a 0.1 ms kernel feels.
    k_us = sum(us for _, us in device_kernels(fast, (x, y)).values())
    kc_us = sum(us for _, us in device_kernels(copy, (x,)).values())
    return dict(gbs=moved / t / 1e6, copy_gbs=copy_moved / t_copy / 1e6, kernels=kernels, err=err,
                k_gbs=moved / k_us / 1e3 if k_us else float("nan"),
                kc_gbs=copy_moved / kc_us / 1e3 if kc_us else float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="mlp,cnn,attention,bert,gpt2")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.cuda.get_device_name()
    try:
        commit = config.env("MLIRCAP_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    rows = []
    cols = ["model", "dtype", "eager ms", "inductor ms", "inductor+cg ms", "mlircap ms", "mlircap/eager",
            "mlircap/inductor", "mlircap/inductor+cg", "kernels", "library", "compile s (ind/mc)", "max|diff|"]
    print(" | ".join(cols), flush=True)
    for dname in a.dtypes.split(","):
        dtype = DT[dname]
        for name in a.models.split(","):
            try:
                bench_one(a, name, dname, dtype, rows)
            except Exception as e:  # one model's failure must not lose the others' numbers
                print(f"{name} | {dname} | ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
                rows.append(dict(model=name, dtype=dname, error=f"{type(e).__name__}: {str(e)[:200]}"))
            torch.cuda.empty_cache()
    finish(a, rows, dev, commit)


def bench_one(a, name, dname, dtype, rows):
    if True:
        if True:
            m, args = models.build(name, scale="bench", dtype=dtype, device="cuda")
            with torch.no_grad():
                ref = m(*args)
            t_eager = latency_ms(m, args, device="cuda")
            t_ind = t_cg = c_ind = ind_dev_ms = float("nan")
            if not a.no_inductor:
                # a baseline that fails leaves its columns empty (nan, left out of the
                # geomeans) and says so, instead of losing the model's mlircap numbers
                try:
                    torch._dynamo.reset()
                    ind = torch.compile(m)
                    c_ind, _ = timed_first_call(ind, args, "cuda")
                    t_ind = latency_ms(ind, args, device="cuda")
                    if name in models.KERNELS:   # device time of its kernels (CUPTI), for the row-kernel table
                        ind_dev_ms = sum(us for _, us in device_kernels(ind, args).values()) / 1e3
                except Exception as e:  # noqa: BLE001
                    print(f"{name} | {dname} | inductor failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
                try:
                    torch._dynamo.reset()
                    cg = torch.compile(m, mode="reduce-overhead")
                    timed_first_call(cg, args, "cuda")
                    t_cg = latency_ms(cg, args, device="cuda")
                except Exception as e:  # noqa: BLE001
                    print(f"{name} | {dname} | inductor+CUDA graphs failed: {type(e).__name__}: {str(e)[:200]}",
                          flush=True)
                torch._dynamo.reset()
                torch.cuda.synchronize()
            fast = mlircap.compile(m)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c_mc, out = timed_first_call(fast, args, "cuda")
            t_mc = latency_ms(fast, args, device="cuda")
            with torch.no_grad():
                out = fast(*args)   # a compiled call (the first call records, running eagerly)
            graphs = fast.graphs
            ok = all(g.fallback_reason is None for g in graphs) and graphs
            kern = sum(g.executable.n_kernels for g in graphs) if ok else "-"
            lib = sum(g.executable.n_library for g in graphs) if ok else "-"
            # Device time per kernel (CUPTI, one call, the compiled graphs as they run):
            # per-step CUDA events would also count launch gaps.
            # Every graph names its kernels main_k0, main_k1, ...: the profiler's rows add up the
            # kernels of one name over the graphs, so such a row names no one graph's kernel.
            descs: dict = {}
            for g in graphs:
                ex = g.executable
                plan = getattr(ex, "plan", None)
                for st in plan.kernels if plan is not None else ():
                    descs.setdefault(st.name, []).append(ex.describe_kernel(st))
            names = {k: d[0] if len(set(d)) == 1 else f"{k} [{len(d)} graphs' kernels of this name]"
                     for k, d in descs.items()}
            ks = device_kernels(fast, args)
            worst = sorted(((names.get(k, k[:80]) + (f" x{n:.0f}" if n > 1 else ""), us / 1e3)
                            for k, (n, us) in ks.items()), key=lambda x: -x[1])[:4]
            dev_ms = sum(us for _, us in ks.values()) / 1e3
            fallback = next((g.fallback_reason for g in graphs if g.fallback_reason), None)
            row = dict(model=name, dtype=dname, eager=t_eager, ind=t_ind, cg=t_cg, mc=t_mc, kernels=kern,
                       library=lib, c_ind=c_ind, c_mc=c_mc, err=max_err(out, ref), fallback=fallback,
                       worst=worst, graphs=len(graphs), dev_ms=dev_ms)
            if name in models.KERNELS:
                # the least traffic the function needs: read every input once, write the output once
                row["moved"] = sum(t.nbytes for t in args) + sum(t.nbytes for t in tree_leaves(ref) if isinstance(t, torch.Tensor))
                row["ind_dev_ms"] = ind_dev_ms
            rows.append(row)
            print(f"{name} | {dname} | {t_eager:.3f} | {t_ind:.3f} | {t_cg:.3f} | {t_mc:.3f} | "
                  f"{t_eager / t_mc:.2f}x | {t_ind / t_mc:.2f}x | {t_cg / t_mc:.2f}x | {kern} | {lib} | "
                  f"{c_ind:.1f}/{c_mc:.1f} | {row['err']:.1e} | graphs={len(graphs)}" + ("" if ok else f" | FALLBACK: {(fallback or 'no graph').splitlines()[0]}"),
                  flush=True)
            print(f"    device kernel time per call {dev_ms:.3f} ms, host and gaps {t_mc - dev_ms:.3f} ms")
            for desc, ms in worst:
                print(f"    slowest kernel: {ms:.3f} ms  {desc}")
            cap = getattr(fast._compiled, "_mlircap_capture", None)
            if cap is not None:
                print(f"    capture: {cap.stats.__dict__}")
            del fast, m


def fallback_overhead(name="bert", dtype=torch.bfloat16):
    """A graph that cannot compile runs its captured FX graph: the cost of that
    fallback over eager (issue: at most 5%). Forced with a chip no GPU has, so
    every graph falls back whole. Eager and the fallback timed alternately, 3
    rounds, the best of each."""
    m, args = models.build(name, scale="bench", dtype=dtype, device="cuda")
    fast = mlircap.compile(m, chip="sm_1")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref, out = m(*args), fast(*args)
        fast(*args)
    from mlircap.backend import _runs_nothing_compiled

    # views-only graphs (as_strided, no kernel) count as fallen back: they compute nothing
    ok = bool(fast.graphs) and all(_runs_nothing_compiled(g) for g in fast.graphs)
    t_e = t_f = float("inf")
    for _ in range(3):
        t_e = min(t_e, latency_ms(m, args, device="cuda"))
        t_f = min(t_f, latency_ms(fast, args, device="cuda"))
    return dict(model=name, eager=t_e, fallback=t_f, all_fell_back=ok, err=max_err(out, ref))


def finish(a, rows, dev, commit):
    try:
        fb = fallback_overhead()
    except Exception as e:  # noqa: BLE001 - the model table must still be written
        print(f"whole-graph fallback: not measured ({type(e).__name__}: {str(e)[:200]})")
        fb = None
    if fb is not None:
        print(f"whole-graph fallback ({fb['model']} bf16, every graph fell back: {fb['all_fell_back']}): "
          f"{fb['fallback']:.3f} ms vs eager {fb['eager']:.3f} ms = {100 * (fb['fallback'] / fb['eager'] - 1):+.1f}%, "
          f"max|diff| {fb['err']:.1e}", flush=True)
    bw = {d: bandwidth_check(DT[d]) for d in a.dtypes.split(",")}
    for d, b in bw.items():
        print(f"bandwidth {d}: mlircap fused elementwise {b['gbs']:.0f} GB/s vs copy {b['copy_gbs']:.0f} GB/s "
              f"({100 * b['gbs'] / b['copy_gbs']:.0f}%), kernels={b['kernels']}, max|diff|={b['err']:.1e}; "
              f"kernel device time only: {b['k_gbs']:.0f} vs {b['kc_gbs']:.0f} GB/s "
              f"({100 * b['k_gbs'] / b['kc_gbs']:.0f}%)")
    errors = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    copy_bw = {d: b["kc_gbs"] for d, b in bw.items()}   # the copy kernel bandwidth_check timed
    for r in rows:
        if "moved" in r:
            r["k_gbs"] = r["moved"] / r["dev_ms"] / 1e6
            r["k_copy"] = r["k_gbs"] / copy_bw[r["dtype"]]
            print(f"row kernel {r['model']} {r['dtype']}: {r['moved'] / 1e6:.0f} MB in {r['dev_ms']:.3f} ms device "
                  f"= {r['k_gbs']:.0f} GB/s, {100 * r['k_copy']:.0f}% of copy ({copy_bw[r['dtype']]:.0f} GB/s); "
                  f"inductor device {r['ind_dev_ms']:.3f} ms; per call vs inductor {r['ind'] / r['mc']:.2f}x", flush=True)
    gm_eager = geomean([r["eager"] / r["mc"] for r in rows])
    gm_ind = geomean([r["ind"] / r["mc"] for r in rows])
    gm_cg = geomean([r["cg"] / r["mc"] for r in rows])
    gm_ind_e = geomean([r["eager"] / r["ind"] for r in rows])
    gm_cg_e = geomean([r["eager"] / r["cg"] for r in rows])
    summary = (f"geomean mlircap/eager {gm_eager:.2f}x, mlircap/inductor {gm_ind:.2f}x, "
               f"mlircap/inductor+cudagraphs {gm_cg:.2f}x; inductor/eager {gm_ind_e:.2f}x, "
               f"inductor+cudagraphs/eager {gm_cg_e:.2f}x")
    print(summary)
    write_results(Path(a.out), rows, bw, summary, dev, commit, errors, fb)


def write_results(path, rows, bw, summary, dev, commit, errors=(), fb=None):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# GPU benchmark results", "",
             f"Produced by one run of `bench/gpu.py` on {dev}, {now}, commit `{commit}`, torch {torch.__version__}.",
             "Latency: median of CUDA-event timings after warm-up; ratios > 1 mean mlircap is faster. "
             "TF32 off for all. Compile: first call, seconds.", "",
             "| model | dtype | eager ms | inductor ms | inductor+CUDA graphs ms | mlircap ms | mlircap vs eager | "
             "vs inductor | vs inductor+cg | kernels | library calls | compile s inductor / mlircap | max abs diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['dtype']} | {r['eager']:.3f} | {r['ind']:.3f} | {r['cg']:.3f} | {r['mc']:.3f} | "
                     f"{r['eager'] / r['mc']:.2f}x | {r['ind'] / r['mc']:.2f}x | {r['cg'] / r['mc']:.2f}x | {r['kernels']} | "
                     f"{r['library']} | {r['c_ind']:.1f} / {r['c_mc']:.1f} | {r['err']:.1e} |")
    lines += ["", summary, "", "## Memory-bound fused kernel vs copy", ""]
    for d, b in bw.items():
        lines.append(f"- {d}: relu(x*0.5+y) 8192x8192 (one fused kernel expected, kernels={b['kernels']}): "
                     f"per call {b['gbs']:.0f} GB/s vs copy {b['copy_gbs']:.0f} GB/s = "
                     f"{100 * b['gbs'] / b['copy_gbs']:.0f}%; kernel device time only (CUPTI) "
                     f"{b['k_gbs']:.0f} GB/s vs copy kernel {b['kc_gbs']:.0f} GB/s = "
                     f"{100 * b['k_gbs'] / b['kc_gbs']:.0f}%")
    kr = [r for r in rows if "k_gbs" in r]
    if kr:
        lines += ["", "## Row reductions and gated activations at LLM sizes", "",
                  "Least traffic (inputs read once, output written once) over the device time of the kernels "
                  "one compiled call launches (CUPTI), against a device-to-device copy kernel's bandwidth "
                  "in the same run (issue 12 target: >= 80% of copy, >= 1.0x inductor per call).", "",
                  "| case | dtype | MB moved | mlircap device ms | GB/s | % of copy | inductor device ms "
                  "| per call vs inductor | vs inductor+cg |", "|---|---|---|---|---|---|---|---|---|"]
        for r in kr:
            lines.append(f"| {r['model']} | {r['dtype']} | {r['moved'] / 1e6:.0f} | {r['dev_ms']:.3f} | "
                         f"{r['k_gbs']:.0f} | {100 * r['k_copy']:.0f}% | {r['ind_dev_ms']:.3f} | "
                         f"{r['ind'] / r['mc']:.2f}x | {r['cg'] / r['mc']:.2f}x |")
    if fb is not None:
        lines += ["", "## Whole-graph fallback vs eager", "",
                  f"- {fb['model']} bf16 compiled for a chip no GPU has (every graph falls back to its captured "
                  f"FX graph: {fb['all_fell_back']}): {fb['fallback']:.3f} ms vs eager {fb['eager']:.3f} ms = "
                  f"{100 * (fb['fallback'] / fb['eager'] - 1):+.1f}% (best of 3 alternating rounds)"]
    lines += ["", "## Where mlircap's time goes", "",
              "Device time of the kernels one compiled call launches (CUPTI via torch.profiler), the rest of "
              "the latency (host: capture guards, aot_autograd, launch; gaps between graph nodes), and the "
              "kernels with the most device time (library calls show cuBLAS/cuDNN kernel names).", ""]
    for r in rows:
        lines.append(f"- {r['model']} {r['dtype']}: {r['mc']:.3f} ms = {r['dev_ms']:.3f} ms device kernels + "
                     f"{r['mc'] - r['dev_ms']:.3f} ms host/gaps")
        for desc, ms in r.get("worst", []):
            lines.append(f"  - {ms:.3f} ms {desc}")
    if errors:
        lines += ["", "## Errors", ""] + [f"- {r['model']} {r['dtype']}: {r['error']}" for r in errors]
    fallbacks = [r for r in rows if r["fallback"]]
    if fallbacks:
        lines += ["", "## Fallbacks", ""] + [f"- {r['model']} {r['dtype']}: {r['fallback'].splitlines()[0]}" for r in fallbacks]
    path.write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [f"{r['model']}\n{r['dtype']}" for r in rows]
        xs = range(len(rows))
        fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
        w = 0.27
        ax.bar([x - w for x in xs], [r["eager"] / r["ind"] for r in rows], w, label="inductor")
        ax.bar(list(xs), [r["eager"] / r["cg"] for r in rows], w, label="inductor + CUDA graphs")
        ax.bar([x + w for x in xs], [r["eager"] / r["mc"] for r in rows], w, label="mlircap")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_ylabel("speedup over eager")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=120)
        print(f"wrote {path} and {path.with_suffix('.png')}")
    except Exception as e:  # plotting is optional; the table is the result
        print(f"wrote {path} (no plot: {e})")


if __name__ == "__main__":
    main()
