"""Untuned CPU training steps: eager vs mlircap vs torch.compile (inductor), side by side in one run.

Each model is a plain torch.nn model nobody tuned for (default init, no special flags). A step is
`opt.zero_grad(); loss = model(*x).pow(2).mean(); loss.backward(); opt.step()` with the model
compiled (mlircap.compile(model) / torch.compile(model)) and the optimizer eager (torch's own, as
a user writes it). Every front trains its own copy of the same initial weights on the same inputs;
the first steps' losses and gradients are compared with eager's (max |diff| / scale printed).

Times: process CPU time per step on 1 thread (other processes on the shared host do not inflate
it), wall time on more; blocks of steps run in turns (eager, mlircap, inductor, eager, ...) so
load changes hit each front alike; the number is the median over rounds (min in parentheses).

    python bench/cpu_train.py                      # 1 thread, all models
    python bench/cpu_train.py --threads 0          # torch's default thread count on this host (wall
                                                   # time: meaningless with the load above the core count,
                                                   # OpenMP barriers spin; see bench/cpu_threads.py)
    python bench/cpu_train.py --models decoder --no-inductor --rounds 30
    python bench/cpu_train.py --profile decoder    # cProfile of mlircap's steps of one model
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
import warnings

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import mlircap  # noqa: E402


class Decoder(nn.Module):
    """nn.TransformerDecoderLayer(64, 4, 128, dropout=0), batch_first, causal self-attention."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(64, 4, 128, dropout=0.0, batch_first=True)

    def forward(self, tgt, memory, mask):
        return self.layer(tgt, memory, tgt_mask=mask)


class Conv1dNet(nn.Module):
    """A small 1-D convolution net: two Conv1d + BatchNorm1d + ReLU, a pool, a Linear head."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(8, 32, 5, padding=2), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Conv1d(32, 32, 5, padding=2, stride=2), nn.BatchNorm1d(32), nn.ReLU(),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.body(x).mean(-1))


class Conv1dPlain(nn.Module):
    """Conv1d + ReLU layers without norms, a Linear head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 16, 3, padding=1)
        self.c2 = nn.Conv1d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 64, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.flatten(1))


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer(64, 4, 128, dropout=0), batch_first, with a LayerNorm after."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(self.layer(x))


def models():
    """name -> (model factory, inputs factory, optimizer factory)."""
    def dec_in():
        return (torch.randn(4, 16, 64), torch.randn(4, 16, 64),
                nn.Transformer.generate_square_subsequent_mask(16))
    mlp = lambda: nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(),  # noqa: E731
                                nn.Linear(256, 10))
    adam = lambda ps: torch.optim.Adam(ps, lr=1e-3)  # noqa: E731
    sgd = lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9)  # noqa: E731
    return {
        "decoder": (Decoder, dec_in, adam),
        "encoder": (Encoder, lambda: (torch.randn(4, 16, 64),), adam),
        "conv1d": (Conv1dNet, lambda: (torch.randn(8, 8, 128),), sgd),
        "conv1d_plain": (Conv1dPlain, lambda: (torch.randn(8, 4, 64),), sgd),
        "mlp": (mlp, lambda: (torch.randn(32, 64),), adam),
    }


def make_step(model, opt):
    def step(*x):
        opt.zero_grad(set_to_none=True)
        loss = model(*x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    step.model, step.opt = model, opt
    return step


def fronts_for(name, inductor):
    make_model, make_in, make_opt = models()[name]
    torch.manual_seed(0)
    base = make_model().train()
    x = make_in()
    out = []
    for front in ["eager", "mlircap"] + (["inductor"] if inductor else []):
        m = copy.deepcopy(base)
        opt = make_opt(list(m.parameters()))
        fm = m if front == "eager" else mlircap.compile(m) if front == "mlircap" else torch.compile(m)
        out.append((front, m, make_step(fm, opt)))
    return out, x


def check(fronts, x, warm=3):
    """max |diff| / scale of the loss and every gradient against eager's, after `warm` steps (the
    compiled fronts compile there): each front's weights and buffers set to eager's, then one
    forward and backward (no optimizer step). A gradient's scale is its own largest value, at least
    1e-3 of the largest of all (a bias before a BatchNorm has a gradient of zero in exact arithmetic)."""
    for _front, _m, step in fronts:
        for _ in range(warm):
            step(*x)
    ref = fronts[0][1]
    res = []
    for _front, m, step in fronts:
        with torch.no_grad():
            for a, b in zip(list(m.parameters()) + list(m.buffers()), list(ref.parameters()) + list(ref.buffers())):
                a.copy_(b)
    for _front, m, step in fronts:
        for p in m.parameters():
            p.grad = None
    states = [copy.deepcopy(list(m.buffers())) for _f, m, _s in fronts]
    for (_front, m, step), st in zip(fronts, states):
        fm = step.model
        loss = fm(*x).pow(2).mean()
        loss.backward()
        res.append((loss.detach(), [p.grad for p in m.parameters()]))
        with torch.no_grad():
            for a, b in zip(m.buffers(), st):
                a.copy_(b)
    l0, g0 = res[0]
    top = max((g.abs().max().item() for g in g0 if g is not None), default=1.0)
    worst = {}
    for (front, _, _), (loss, g) in zip(fronts[1:], res[1:]):
        e = (loss - l0).abs().item() / max(l0.abs().item(), 1e-12)
        for a, b in zip(g, g0):
            if a is None or b is None:
                e = e if (a is None) == (b is None) else float("inf")
                continue
            e = max(e, (a - b).abs().max().item() / max(b.abs().max().item(), 1e-3 * top, 1e-12))
        worst[front] = e
    return worst


def timed(fronts, x, rounds, block_s):
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    for _front, _m, step in fronts:
        for _ in range(5):
            step(*x)
    t0 = time.perf_counter()
    fronts[0][2](*x)
    calls = max(1, int(block_s / max(time.perf_counter() - t0, 1e-6)))
    samples = [[] for _ in fronts]
    for _ in range(rounds):
        for (_front, _m, step), s in zip(fronts, samples):
            t0 = clock()
            for _ in range(calls):
                step(*x)
            s.append((clock() - t0) / calls * 1e6)
    return [(statistics.median(s), min(s)) for s in samples]


def run(names, threads, rounds, block_s, inductor):
    if threads:
        torch.set_num_threads(threads)
    n = torch.get_num_threads()
    clock = "process CPU time" if n == 1 else "wall time"
    print(f"training step (zero_grad, forward, pow(2).mean(), backward, optimizer step), {n} thread(s) "
          f"(host cpus {os.cpu_count()}), {clock}, us per step: median (min) over {rounds} rounds")
    hdr = f"{'model':<13} {'eager':>15} {'mlircap':>15} {'x eager':>8} {'err':>8}"
    if inductor:
        hdr += f" {'inductor':>15} {'x eager':>8} {'err':>8}"
    print(hdr)
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fronts, x = fronts_for(name, inductor)
            err = check(fronts, x)
            res = timed(fronts, x, rounds, block_s)
        (e, emin) = res[0]
        line = f"{name:<13} {e:>7.1f} ({emin:>6.1f}) "
        for (front, _, _), (t, tmin) in zip(fronts[1:], res[1:]):
            line += f"{t:>7.1f} ({tmin:>6.1f}) {e / t:>7.2f}x {err[front]:>8.1e} "
        print(line, flush=True)
    print("x eager: eager's time / the front's (above 1: faster than eager)")


def profile(name, steps):
    import cProfile
    import pstats

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fronts, x = fronts_for(name, False)
        step = fronts[1][2]
        for _ in range(10):
            step(*x)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(steps):
            step(*x)
        pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(models()))
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N); 0: torch's default")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-s", type=float, default=0.05)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--profile", metavar="MODEL", help="cProfile mlircap's steps of one model instead")
    ap.add_argument("--steps", type=int, default=200, help="steps profiled (--profile)")
    a = ap.parse_args()
    if a.profile:
        profile(a.profile, a.steps)
        return
    run(a.models.split(","), a.threads, a.rounds, a.block_s, not a.no_inductor)


if __name__ == "__main__":
    main()
