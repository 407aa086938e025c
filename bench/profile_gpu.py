"""Where the GPU time goes: device kernel times (CUPTI, through torch.profiler) per call of
eager, inductor and mlircap, side by side, for the models of bench/gpu.py.

    python bench/profile_gpu.py [--models bert,gpt2] [--dtypes bf16] [--top 12]
    python bench/profile_gpu.py --models timm:convnext_tiny --cudagraphs   # a timm model, batch 8

For each compiler: wall latency per call (CUDA events), the summed device time of the
kernels one call launches, their count, and the kernels with the largest total time.
Latency minus device time is what the host (launches, Python, guards) adds.
"""
import argparse
import os
import sys
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import mlircap  # noqa: E402
from mlircap import models  # noqa: E402
from mlircap.benchutil import latency_ms  # noqa: E402

DT = {"fp32": torch.float32, "bf16": torch.bfloat16}


def device_kernels(fn, args, calls=5):
    """{kernel name: (count, total us)} per call, from CUPTI kernel records."""
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize()
    table = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:   # kernels, and memcpy/memset work
            table[e.name][0] += 1
            table[e.name][1] += e.device_time
    return {k: (n / calls, us / calls) for k, (n, us) in table.items()}


def report(label, fn, args, top):
    ms = latency_ms(fn, args, device="cuda")
    ks = device_kernels(fn, args)
    total = sum(us for _, us in ks.values()) / 1e3
    count = sum(n for n, _ in ks.values())
    print(f"  {label:12s} latency {ms:.3f} ms | device kernels {total:.3f} ms in {count:.0f} launches | "
          f"host/gaps {ms - total:.3f} ms")
    for name, (n, us) in sorted(ks.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"      {us / 1e3:7.3f} ms  x{n:<4.0f} {name[:110]}")


def host_breakdown(fast, args):
    """Latency of the whole call vs each compiled graph's executable alone vs its CUDA graph
    replay alone: what capture guards + aot_autograd + the executable's Python add."""
    import time
    parts = [f"whole call {latency_ms(fast, args, device='cuda'):.3f} ms"]
    for g in fast.graphs:
        ins = g.last_inputs()
        ex = g.executable
        if not ins or not hasattr(ex, "_graph"):
            continue
        parts.append(f"{g.name} executable {latency_ms(ex, ins, device='cuda'):.3f} ms")
        if ex._graph is not None:
            parts.append(f"{g.name} graph replay {latency_ms(lambda: ex._graph.replay(), (), device='cuda'):.3f} ms")
        with torch.no_grad():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(50):
                ex(*ins)
            host = (time.perf_counter() - t0) / 50 * 1e3
            torch.cuda.synchronize()
        parts.append(f"{g.name} executable host time {host:.3f} ms")
    print("  mlircap host breakdown: " + " | ".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="bert,gpt2")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--cudagraphs", action="store_true", help="inductor with CUDA graphs (mode='reduce-overhead')")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for dname in a.dtypes.split(","):
        for name in a.models.split(","):
            print(f"== {name} {dname}", flush=True)
            if name.startswith("timm:"):   # a timm image model (where timm is installed), batch 8
                import timm
                m = timm.create_model(name[5:], pretrained=False).eval().to("cuda", DT[dname])
                args = (torch.randn(8, 3, 224, 224, device="cuda", dtype=DT[dname]),)
            else:
                m, args = models.build(name, scale="bench", dtype=DT[dname], device="cuda")
            report("eager", m, args, a.top)
            if not a.no_inductor:
                torch._dynamo.reset()
                mode = "reduce-overhead" if a.cudagraphs else None
                report("inductor+cg" if a.cudagraphs else "inductor", torch.compile(m, mode=mode), args, a.top)
                torch._dynamo.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fast = mlircap.compile(m)
                with torch.no_grad():
                    fast(*args)
                report("mlircap", fast, args, a.top)
                host_breakdown(fast, args)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
