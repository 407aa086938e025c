"""CPU benchmark: eager vs mlircap vs torch.compile (inductor), side by side in one run.

    python bench/cpu.py [--models elementwise,mlp,...] [--no-inductor] [--threads N]
    python bench/cpu.py --overhead [--calls 5000]
    python bench/cpu.py --compile-times [--models mlp,bert]
    python bench/cpu.py --kernels [--kernel-names bias_gelu,layernorm] [--threads N]

Default models (mlircap.models.CPU_BENCH): elementwise, mlp, cnn, attention,
bert, gpt2, and a ResNet-style conv net (BatchNorm), a Llama-style decoder
(RMSNorm, SwiGLU, rotary, GQA) and a vision transformer, at the tests' sizes.

Per model: latency (ms), speedup over eager, cold compile time (first call,
seconds: for mlircap capture + compile; inductor with its caches off), and
mlircap's max |diff| against eager on a compiled call.

Latencies are measured side by side: eager, mlircap and inductor run in turns,
a block of calls each (about 20 ms) per round, for --rounds rounds; each
front's latency is the median over rounds of its mean per block. On one
thread (--threads 1) the clock is the process CPU time, which other
processes on a loaded machine do not inflate; on more threads, wall time.
The load average is printed with the table.

--overhead: per-call host time of tiny graphs (x + 1 on 8 floats; a 3-kernel
graph), median microseconds of single calls, eager and compiled interleaved in
one process: the compiled function (guards + graph), the graph's executable
alone, and eager.

--kernels: single fused kernels at sizes where the kernel's own speed shows
(bias + erf GELU, bias + tanh GELU, BatchNorm + ReLU, scale/shift + SiLU,
LayerNorm, softmax, conv + bias + ReLU, a small depthwise conv + BN + ReLU6),
eager vs mlircap vs inductor side by side as above.

--compile-times: the first call of each model (capture + compile + one run)
and the compile stages summed over its graphs, in seconds. Run it twice in
fresh processes with one MLIRCAP_CACHE_DIR to compare a cold CPU compile cache
with a warm one (MLIRCAP_CPU_CACHE=0: no cache).
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
from mlircap.benchutil import geomean, max_err, side_by_side_ms, timed_first_call  # noqa: E402


def _overhead_cases():
    def add_one(x):
        return x + 1

    def three_kernels(x):   # column sum, then a sum of its exp, then a scale: 3 kernels
        return (x.sum(0) + 1).exp().sum() * x

    return [("x + 1", add_one, (torch.randn(8),)), ("3 kernels", three_kernels, (torch.randn(4, 8),))]


def _median_us(fns, args, calls):
    """Median µs of single calls of each fn, run round-robin in blocks of 100 so
    load changes hit every fn alike."""
    import statistics
    import time

    samples = [[] for _ in fns]
    clock = time.perf_counter_ns
    with torch.no_grad():
        for _ in range(calls // 100):
            for fn, out in zip(fns, samples):
                for _ in range(100):
                    t0 = clock()
                    fn(*args)
                    out.append(clock() - t0)
    return [statistics.median(s) / 1e3 for s in samples]


def overhead(calls):
    print(f"per-call time, median of {calls} single calls (µs), {torch.get_num_threads()} threads")
    print(f"{'graph':<10} {'kernels':>7} {'eager':>8} {'compiled fn':>12} {'executable':>11} {'fn/eager':>9}")
    for name, fn, args in _overhead_cases():
        fast = mlircap.compile(fn)
        with torch.no_grad():
            fast(*args)
            fast(*args)
        (graph,) = fast.graphs
        exe = graph.executable
        assert not graph.fallback_reason, graph.fallback_reason
        eager_us, fn_us, exe_us = _median_us([fn, fast, exe], args, calls)
        print(f"{name:<10} {getattr(exe, 'n_kernels', '?'):>7} {eager_us:>8.2f} {fn_us:>12.2f} {exe_us:>11.2f}"
              f" {fn_us / eager_us:>8.2f}x", flush=True)


def _kernel_cases():
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    bn = torch.nn.BatchNorm2d(64).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1, generator=g)
        bn.running_var.uniform_(0.5, 2, generator=g)
    return {
        "bias_gelu": (lambda x, b: F.gelu(x + b), (r(128, 2048), r(2048))),
        "bias_gelu_tanh": (lambda x, b: F.gelu(x + b, approximate="tanh"), (r(128, 2048), r(2048))),
        "bn_relu": (lambda x: torch.relu(bn(x)), (r(8, 64, 32, 32),)),
        "scale_shift_silu": (lambda x, s, t: F.silu(x * s[:, None, None] + t[:, None, None]),
                             (r(4, 256, 32, 32), r(256), r(256))),
        "layernorm": (lambda x, w, b: F.layer_norm(x, (1024,), w, b), (r(256, 1024), r(1024), r(1024))),
        "softmax": (lambda x: torch.softmax(x, -1), (r(256, 1024),)),
        # a library convolution with its bias (added inside oneDNN's accumulation, as eager's)
        # and a ReLU epilogue kernel
        "conv_bias_relu": (lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)),
                           (r(2, 64, 28, 28), r(64, 64, 3, 3), r(64))),
        # a small depthwise convolution (MobileNet/EfficientNet's 3x3): torch's oneDNN NCHW
        # depthwise costs ~80 us a call whatever its size on Zen 3 (1x8x4x4 too), eager's and the
        # plan's library step alike; BatchNorm + ReLU6 fused after it
        "depthwise_bn_relu6": (lambda x, w, s, t: F.relu6(F.conv2d(x, w, None, 1, 1, 1, 192) *
                                                          s[:, None, None] + t[:, None, None]),
                               (r(1, 192, 12, 12), r(192, 1, 3, 3), r(192), r(192))),
    }


def kernels(names, rounds, inductor):
    cases = _kernel_cases()
    names = names.split(",") if names else list(cases)
    clock = "process CPU time" if torch.get_num_threads() == 1 else "wall time"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, single kernels; side by side, "
          f"{clock}, median of {rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    hdr = f"{'kernel':<18} {'shape':<14} {'eager us':>9} {'mlircap us':>11} {'x eager':>8} {'max|diff|':>10}"
    if inductor:
        hdr += f" {'inductor us':>12} {'x eager':>8}"
    print(hdr)
    for name in names:
        fn, args = cases[name]
        fast = mlircap.compile(fn, strict=True)
        with torch.no_grad():
            fast(*args)
            err = max_err(fast(*args), fn(*args))
        fns = [fn, fast]
        if inductor:
            torch._dynamo.reset()
            fns.append(torch.compile(fn))
        times = [t * 1e3 for t in side_by_side_ms(fns, args, rounds)]
        shape = "x".join(map(str, args[0].shape))
        line = f"{name:<18} {shape:<14} {times[0]:>9.1f} {times[1]:>11.1f} {times[0] / times[1]:>7.2f}x {err:>10.1e}"
        if inductor:
            line += f" {times[2]:>12.1f} {times[0] / times[2]:>7.2f}x"
        print(line, flush=True)


def compile_times(names):
    import time

    print(f"CPU compile cache {'on' if mlircap.config.env_flag('MLIRCAP_CPU_CACHE') else 'off'}, "
          f"{mlircap.config.cache_dir()}")
    for name in names:
        m, args = models.build(name)
        fast = mlircap.compile(m)
        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast(*args)
        first = time.perf_counter() - t0
        stages = {}
        for g in fast.graphs:
            for stage, sec in g.times.items():
                key = stage.split(": ", 1)[-1]
                stages[key] = stages.get(key, 0.0) + sec
        hits = [getattr(g.executable, "cache_hit", None) for g in fast.graphs]
        print(f"{name:<8} first call {first:6.2f} s, {len(fast.graphs)} graphs, cache hits {hits}")
        for stage, sec in stages.items():
            print(f"    {stage:<45} {sec:6.2f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(models.CPU_BENCH))
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads(N) first (mlircap's kernels follow it); 0: torch's default")
    ap.add_argument("--overhead", action="store_true", help="per-call host time of tiny graphs instead")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--compile-times", action="store_true", help="cold/warm compile times instead")
    ap.add_argument("--kernels", action="store_true", help="single fused kernels instead of models")
    ap.add_argument("--kernel-names", default="", help="comma-separated subset of --kernels' cases")
    ap.add_argument("--rounds", type=int, default=15, help="rounds of side-by-side timing per model")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.overhead:
        overhead(a.calls)
        return
    if a.compile_times:
        compile_times(a.models.split(","))
        return
    if a.kernels:
        kernels(a.kernel_names, a.rounds, not a.no_inductor)
        return
    clock = "process CPU time" if torch.get_num_threads() == 1 else "wall time"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, small model configs (tests' sizes); "
          f"side by side, {clock}, median of {a.rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    hdr = f"{'model':<12} {'eager ms':>9} {'mlircap ms':>11} {'x eager':>8} {'compile s':>10} {'max|diff|':>10}"
    if not a.no_inductor:
        hdr += f" {'inductor ms':>12} {'x eager':>8} {'compile s':>10}"
    print(hdr)
    ratios, ind_ratios = [], []
    for name in a.models.split(","):
        m, args = models.build(name)
        with torch.no_grad():
            ref = m(*args)
        fast = mlircap.compile(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c_mc, out = timed_first_call(fast, args)
        fb = " (eager fallback)" if any(g.fallback_reason for g in fast.graphs) else ""
        with torch.no_grad():
            out = fast(*args)   # a compiled call: the first one records while running eagerly
        fns = [m, fast]
        if not a.no_inductor:
            torch._dynamo.reset()
            ind = torch.compile(m)
            c_ind, _ = timed_first_call(ind, args)
            fns.append(ind)
        times = side_by_side_ms(fns, args, a.rounds)
        t_eager, t_mc = times[:2]
        ratios.append(t_eager / t_mc)
        line = f"{name:<12} {t_eager:>9.3f} {t_mc:>11.3f} {t_eager / t_mc:>7.2f}x {c_mc:>10.2f} {max_err(out, ref):>10.1e}"
        if not a.no_inductor:
            t_ind = times[2]
            ind_ratios.append(t_eager / t_ind)
            line += f" {t_ind:>12.3f} {t_eager / t_ind:>7.2f}x {c_ind:>10.2f}"
        print(line + fb, flush=True)
    print(f"geomean speedup over eager: mlircap {geomean(ratios):.2f}x"
          + ("" if a.no_inductor else f", inductor {geomean(ind_ratios):.2f}x"))


if __name__ == "__main__":
    main()
