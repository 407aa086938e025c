"""Functions called with an int that changes on every call (issue 11: a recompile per value
until cache_limit, then eager): a diffusion sampler's step `p_sample(x, t)` (`betas[t]`, the
timestep batch `torch.full((n,), t)`, `if t > 0`), a ring buffer written at its pointer
(`buf[self.ptr] = x`), a decoder reading a positional row by its step (`emb.weight[self.step]`).
Each runs compiled and eagerly over the same calls; prints per program the mean time per call
of the last pass (this thread's CPU time: other processes of a shared machine left out; one
torch thread), the compiled first pass's wall time (its compiles), variants compiled, and the
largest difference from eager.

    PYTHONPATH=python python bench/int_steps.py [--passes 3] [--steps 50]"""
import argparse
import math
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap


class Denoiser(nn.Module):
    def __init__(self, c=16, tdim=32):
        super().__init__()
        self.tdim = tdim
        self.inp = nn.Conv2d(1, c, 3, padding=1)
        self.norm = nn.GroupNorm(4, c)
        self.t = nn.Linear(tdim, c)
        self.out = nn.Conv2d(c, 1, 3, padding=1)

    def forward(self, x, t):
        half = self.tdim // 2
        a = t.float()[:, None] * torch.exp(-math.log(10000) * torch.arange(half) / half)[None]
        te = torch.cat([a.sin(), a.cos()], -1)
        h = F.silu(self.norm(self.inp(x))) + self.t(te)[:, :, None, None]
        return self.out(h)


def sampler(steps):
    betas = torch.linspace(1e-4, 0.02, steps)
    alphas, net = 1 - betas, Denoiser().eval()
    abar = torch.cumprod(alphas, 0)

    @torch.no_grad()
    def p_sample(x, t):
        eps = net(x, torch.full((x.shape[0],), t, dtype=torch.long))
        mean = (x - betas[t] / (1 - abar[t]).sqrt() * eps) / alphas[t].sqrt()
        if t > 0:
            return mean + betas[t].sqrt() * 0.5
        return mean

    return p_sample, [(lambda t=t: (torch.ones(4, 1, 12, 12), t)) for t in reversed(range(steps))], False


class Ring:
    def __init__(self, n=64, d=32):
        self.buf, self.ptr, self.n = torch.zeros(n, d), 0, n

    def push(self, x):
        self.buf[self.ptr] = F.normalize(x, dim=-1)
        self.ptr = (self.ptr + 1) % self.n
        return self.buf @ x


class Decoder(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.pos, self.cell, self.step = nn.Embedding(512, d), nn.GRUCell(d, d), 0

    def forward(self, tok, h):
        h = self.cell(tok + self.pos.weight[self.step], h)
        self.step += 1
        return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cases = []
    f, calls, _ = sampler(a.steps)
    cases.append(("ddpm p_sample(x, t)", lambda: f, calls, None))
    rings = []

    def ring():
        rings.append(Ring())
        return rings[-1].push
    cases.append(("ring buffer push", ring, [(lambda: (torch.ones(32),))] * a.steps, None))
    torch.manual_seed(0)
    dec = Decoder()
    state = {k: v.clone() for k, v in dec.state_dict().items()}

    def decoder():
        d = Decoder()
        d.load_state_dict(state)
        return d
    cases.append(("decoder step row", decoder, [(lambda: (torch.ones(2, 64), torch.zeros(2, 64)))] * a.steps, None))
    for name, make, calls, _ in cases:
        timings, err, fast = {}, 0.0, None
        for kind in ("eager", "mlircap"):
            fn = make()
            if kind == "mlircap":
                fn = fast = mlircap.compile(fn)
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                outs = []
                for p in range(a.passes):
                    t0, w0 = time.thread_time(), time.perf_counter()
                    outs = [fn(*c()) for c in calls]
                    timings[kind] = (time.thread_time() - t0) / len(calls) * 1e3
                    if p == 0:
                        timings[kind + " first"] = time.perf_counter() - w0
            if kind == "eager":
                ref = outs
            else:
                err = max(float((o - r).abs().max()) for o, r in zip(outs, ref))
        ex = fast.explain()
        print(f"{name}: eager {timings['eager']:.3f} ms, mlircap {timings['mlircap']:.3f} ms per call "
              f"({timings['eager'] / timings['mlircap']:.2f}x eager), first pass (wall, compiles) "
              f"{timings['mlircap first']:.1f} s, variants {ex.variants}, "
              f"eager variants {len(ex.eager_reasons)}, max |diff| {err:.1e}")


if __name__ == "__main__":
    main()
