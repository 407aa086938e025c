"""What a user gets from mlircap.compile on a loop over many sequence lengths (issue 11: a
recompile per new shape, eager past cache_limit variants).  A pre-norm transformer block
(LayerNorm, MultiheadAttention, GELU MLP; d=64, batch 2, eval, no_grad) runs over 20 lengths
(8, 11, .., 65) for several passes, compiled and eager; prints the first pass (which compiles),
then each later pass in this thread's CPU time (the compile worker and other processes of a
shared machine left out) and the largest difference from eager.

    PYTHONPATH=python python bench/varying_lengths.py [--passes 5] [--threads 1] [--lengths 20]"""
import argparse
import time
import warnings

import torch
import torch.nn as nn

import mlircap


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, 4, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln(x)
        x = x + self.att(h, h, h, need_weights=False)[0]
        return x + self.ff(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Block().eval()
    fast = mlircap.compile(m)
    lens = [8 + 3 * i for i in range(a.lengths)]
    xs = {n: torch.randn(2, n, 64) for n in lens}

    def run(f, clock):
        t0, out = clock(), []
        with torch.no_grad():
            for n in lens:
                out.append(f(xs[n]))
        return clock() - t0, out

    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        te, ref = run(m, time.perf_counter)
        tc, got = run(fast, time.perf_counter)
        print(f"pass 1 (wall, compiles): eager {te * 1e3:.1f} ms, compiled {tc * 1e3:.1f} ms")
        err = max((r - g).abs().max().item() for r, g in zip(ref, got))
        for p in range(2, a.passes + 2):
            te, ref = run(m, time.thread_time)
            tc, got = run(fast, time.thread_time)
            err = max([err] + [(r - g).abs().max().item() for r, g in zip(ref, got)])
            print(f"pass {p} (CPU): eager {te * 1e3:.2f} ms, compiled {tc * 1e3:.2f} ms ({te / tc:.2f}x eager)")
    print(f"max |compiled - eager| {err:.2e}")
    for w in wl:
        if "mlircap" in str(w.message):
            print("warning:", str(w.message)[:160])


if __name__ == "__main__":
    main()
