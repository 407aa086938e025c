"""Per-call host overhead of tiny programs: eager vs mlircap vs torch.compile (inductor),
measured side by side in one process.

    python bench/overhead.py [--calls 20000] [--no-inductor] [--grad] [--cases x+1,mlp,...]
    python bench/overhead.py --profile mlp     # cProfile of mlircap's calls of one case
    python bench/overhead.py --profile mlp --step   # ... of its training steps
    python bench/overhead.py --step            # a training step per call: forward, pow(2).mean(), backward
    python bench/overhead.py --step --aot-runtime   # also mlircap with aot_autograd's own Function
                                                    # forward/backward (lean_autograd.py off)
    python bench/overhead.py --device cuda          # on the GPU: host time per call (kernels run
                                                    # asynchronously; each block ends synchronized), with
                                                    # inductor+CUDA graphs (mode="reduce-overhead") too

Each program is tiny (a few elements), so its time is host time: the wrapper, guards,
the compiled graph's call and the runtime's per-call work.  Times are process CPU time
(time.process_time) per call over blocks of calls, the fronts interleaved block by block
so load changes hit each alike; the number reported is the minimum over blocks (the
least disturbed), with the median in parentheses.  torch runs on one thread.  By default
the calls run under torch.no_grad() (inference); --grad runs them with grad mode on (no
input requires grad).  Ratios, not assertions: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")

import torch  # noqa: E402

import mlircap  # noqa: E402

SCALE = 2.0   # a global read by the `global` case


def _add_one(x):
    return x + 1


def _int_arg(x, n: int, s: float):
    return x * n + s


def _global(x):
    return x * SCALE + 1


class _TenParams(torch.nn.Module):
    """A module with 10 parameters, all used elementwise."""

    def __init__(self) -> None:
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(8)) for _ in range(10)])

    def forward(self, x):
        for p in self.ps:
            x = x * p
        return x


def cases(device: str = "cpu") -> list[tuple[str, object, tuple]]:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval().to(device)

    def r(*shape):
        return torch.randn(*shape).to(device)
    return [
        ("x+1", _add_one, (r(8),)),
        ("mlp", mlp, (r(1, 16),)),
        ("10 params", _TenParams().eval().to(device), (r(8),)),
        ("int/float arg", _int_arg, (r(8), 3, 0.5)),
        ("global", _global, (r(8),)),
    ]


def _per_call_us(fns: list, args: tuple, calls: int, block: int, sync=lambda: None) -> list[tuple[float, float]]:
    """(min, median) µs of process CPU time per call of each fn, over blocks of `block`
    calls run round-robin (`sync`: waits for the device at each block's end, counted)."""
    clock = time.process_time_ns
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(max(1, calls // block)):
        for fn, out in zip(fns, samples):
            sync()
            t0 = clock()
            for _ in range(block):
                fn(*args)
            sync()
            out.append((clock() - t0) / block / 1e3)
    return [(min(s), statistics.median(s)) for s in samples]


def _check(name: str, ref, out) -> None:
    ref = ref if isinstance(ref, torch.Tensor) else ref[0]
    out = out if isinstance(out, torch.Tensor) else out[0]
    if not torch.allclose(ref, out, rtol=1e-5, atol=1e-5):
        print(f"  !! {name}: result differs from eager (max |diff| {(ref - out).abs().max().item():.2e})")


def _training_step(fn):
    """`fn` called as a training step: its (first) output's pow(2).mean() backward. The
    parameters' .grad accumulate (so does eager's, alike)."""
    def step(*args):
        out = fn(*args)
        out = out if isinstance(out, torch.Tensor) else out[0]
        if out.requires_grad:
            out.pow(2).mean().backward()
        return out
    return step


def _aot_runtime_front(fn, args):
    """mlircap.compile(fn) compiled (at its second call) with aot_autograd's own Function
    forward and backward (lean_autograd.ENABLED off while it compiles)."""
    from mlircap import lean_autograd

    lean_autograd.ENABLED = False
    try:
        slow = mlircap.compile(fn)
        slow(*args)
        slow(*args)
    finally:
        lean_autograd.ENABLED = True
    return slow


def run(names: list[str], calls: int, block: int, inductor: bool, grad: bool, step: bool = False,
        aot_runtime: bool = False, device: str = "cpu") -> None:
    torch.set_num_threads(1)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    cudagraphs = inductor and cuda and not step
    mode = "training step (forward, pow(2).mean(), backward)" if step else \
        "grad mode on" if grad else "torch.no_grad()"
    print(f"per-call process CPU time (µs), min over blocks of {block} calls (median), {calls} calls each, "
          f"1 thread, {mode}, {device}")
    hdr = f"{'program':<14} {'eager':>14} {'mlircap':>14} {'x eager':>8}"
    if inductor:
        hdr += f" {'inductor':>14} {'x eager':>8}"
    if cudagraphs:
        hdr += f" {'inductor+cg':>14} {'x eager':>8}"
    if aot_runtime:
        hdr += f" {'aot runtime':>14} {'x eager':>8}"
    print(hdr)
    ctx = torch.enable_grad if grad or step else torch.no_grad
    for name, fn, args in cases(device):
        if name not in names:
            continue
        fronts = [fn]
        with ctx(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = fn(*args)
            fast = mlircap.compile(fn)
            fast(*args)
            _check(name, ref, fast(*args))
            fronts.append(fast)
            if inductor:
                torch._dynamo.reset()
                ind = torch.compile(fn)
                ind(*args)
                _check(name + " (inductor)", ref, ind(*args))
                fronts.append(ind)
            if cudagraphs:
                torch._dynamo.reset()
                cg = torch.compile(fn, mode="reduce-overhead")
                for _ in range(3):
                    cg(*args)
                _check(name + " (inductor+cg)", ref, cg(*args))
                fronts.append(cg)
            if aot_runtime:
                slow = _aot_runtime_front(fn, args)
                _check(name + " (aot runtime)", ref, slow(*args))
                fronts.append(slow)
            if step:
                fronts = [_training_step(f) for f in fronts]
            for f in fronts:   # warm up
                for _ in range(200):
                    f(*args)
            res = _per_call_us(fronts, args, calls, block, sync)
        (e, em), (m, mm) = res[0], res[1]
        line = f"{name:<14} {e:>6.2f} ({em:>5.2f}) {m:>6.2f} ({mm:>5.2f}) {m / e:>7.2f}x"
        if inductor:
            i, im = res[2]
            line += f" {i:>6.2f} ({im:>5.2f}) {i / e:>7.2f}x"
        if cudagraphs:
            c, cm = res[3]
            line += f" {c:>6.2f} ({cm:>5.2f}) {c / e:>7.2f}x"
        if aot_runtime:
            a, am = res[-1]
            line += f" {a:>6.2f} ({am:>5.2f}) {a / e:>7.2f}x"
        print(line, flush=True)


def profile(name: str, calls: int, grad: bool, step: bool = False, device: str = "cpu") -> None:
    import cProfile
    import pstats

    torch.set_num_threads(1)
    fn, args = next((f, a) for n, f, a in cases(device) if n == name)
    ctx = torch.enable_grad if grad or step else torch.no_grad
    with ctx():
        fast = mlircap.compile(fn)
        if step:
            fast = _training_step(fast)
        for _ in range(10):
            fast(*args)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(calls):
            fast(*args)
        pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--block", type=int, default=500)
    ap.add_argument("--cases", default=",".join(n for n, _, _ in cases()))
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--grad", action="store_true", help="calls with grad mode on (no input requires grad)")
    ap.add_argument("--step", action="store_true",
                    help="a training step per call (grad mode on): the output's pow(2).mean() backward too")
    ap.add_argument("--aot-runtime", action="store_true",
                    help="also mlircap with aot_autograd's own Function forward/backward (lean_autograd.py off)")
    ap.add_argument("--profile", metavar="CASE", help="cProfile mlircap's calls of one case instead")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    a = ap.parse_args()
    if a.profile:
        profile(a.profile, a.calls, a.grad, a.step, a.device)
        return
    run(a.cases.split(","), a.calls, a.block, not a.no_inductor, a.grad, a.step, a.aot_runtime, a.device)


if __name__ == "__main__":
    main()
