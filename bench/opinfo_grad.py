"""Differential gradient sweep over torch's OpInfo database (CPU, float32; --dtype float64 /
bfloat16 / float16 for the ops that support it).

For each op that supports autograd (shuffled by --seed, --start/--count of them) and its
first sample (--pick random: one of its first 16 samples, drawn with --seed, so that new
seeds draw samples the default never does): the gradients of a fixed random weighting of
its float outputs with respect to its float inputs, eager against `mlircap.compile` (two compiled calls).
A graph that falls back to eager counts as ok here: this sweep looks for wrong
gradients (the forward-only sweep, bench/opinfo.py, measures what compiles). Prints
one JSON record per sample and a summary. Run each chunk in its own process:

    python bench/opinfo_grad.py --start 0 --count 80 --seed 7
"""
import argparse
import collections
import json
import random
import warnings

import torch

import mlircap
import opinfo as OI  # bench/opinfo.py: Python puts this script's directory first on sys.path


def _leaves(ts):
    out = []
    for t in ts:
        c = t.detach().clone()
        if c.is_floating_point():
            c.requires_grad_(True)
        out.append(c)
    return out


def _loss_and_grads(f, ts):
    xs = _leaves(ts)
    out = f(*xs)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
    if not outs:
        return None, None
    g = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    return loss.detach(), torch.autograd.grad(loss, [x for x in xs if x.requires_grad], allow_unused=True)


# (rtol, atol) of the loss and of each gradient, atol relative to the gradient's largest
# magnitude (at least 1) in the 16-bit dtypes, whose sums of many rounded terms differ by order
TOLERANCES = {"float32": ((1e-4, 1e-4), (1e-3, 1e-4)), "float64": ((1e-4, 1e-4), (1e-3, 1e-4)),
              "bfloat16": ((5e-2, 5e-2), (5e-2, 5e-2)), "float16": ((1e-2, 1e-2), (1e-2, 1e-2))}


def check(op, sample, dtype: str = "float32") -> dict:
    fn, ts = OI.make_fn(op, sample)
    try:
        want_loss, want = _loss_and_grads(fn, ts)
    except Exception:  # noqa: BLE001 - eager rejects the sample
        return {"status": "eager_error"}
    if want_loss is None:
        return {"status": "no_grad"}
    fast = mlircap.compile(fn)
    for _ in range(2):
        try:
            loss, got = _loss_and_grads(fast, ts)
        except Exception as e:  # noqa: BLE001 - eager ran: compiled must too
            return {"status": "raised", "why": f"{type(e).__name__}: {str(e)[:150]}"}
        (lr, la), (gr, ga) = TOLERANCES[dtype]
        scale = 1.0 if dtype in ("float32", "float64") else max(1.0, want_loss.abs().item())
        if not torch.allclose(want_loss, loss, rtol=lr, atol=la * scale, equal_nan=True):
            return {"status": "wrong", "why": f"loss {want_loss.item()} vs {loss.item()}"}
        for a, b in zip(want, got):
            if a is not None and b is not None and dtype not in ("float32", "float64"):
                scale = max(1.0, a.float().abs().nan_to_num(0, 0, 0).max().item()) if a.numel() else 1.0
            else:
                scale = 1.0
            if (a is None) != (b is None) or (a is not None and not torch.allclose(a, b, rtol=gr, atol=ga * scale,
                                                                                  equal_nan=True)):
                diff = "None" if a is None or b is None else f"{(a - b).abs().max().item():.2e}"
                return {"status": "wrong", "why": f"gradient differs (max {diff})"}
    return {"status": "ok"}


def main():
    from torch.testing._internal.common_methods_invocations import op_db

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=10 ** 6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pick", choices=("first", "random", "all"), default="first",
                    help="which sample of each op: the first, one of the first 16 drawn with --seed, "
                         "or all of the first 16")
    ap.add_argument("--ops", help="comma-separated op names (op.name or op.name.variant): only these")
    ap.add_argument("--dtype", choices=tuple(TOLERANCES), default="float32",
                    help="the samples' dtype (ops that support it); float64 and the 16-bit dtypes "
                         "check gradients the float32 sweeps never computed")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    ops = [o for o in op_db if o.supports_autograd and getattr(torch, a.dtype) in o.supported_dtypes("cpu")]
    if a.ops:
        keep = {n.strip() for n in a.ops.split(",")}
        ops = [o for o in ops if OI.op_key(o) in keep]
    rng = random.Random(a.seed)
    rng.shuffle(ops)
    picks = [rng.randrange(16) if a.pick == "random" else 15 if a.pick == "all" else 0
             for _ in ops]   # independent of --start
    counts = collections.Counter()
    for op, pick in list(zip(ops, picks))[a.start:a.start + a.count]:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        try:
            samples = OI.generate_samples(op, "cpu", a.dtype, pick + 1)
        except Exception:  # noqa: BLE001
            samples = []
        first = 0 if a.pick == "all" else max(len(samples) - 1, 0)
        for index, sample in enumerate(samples[first:], first):
            try:
                rec = check(op, sample, a.dtype)
            except Exception as e:  # noqa: BLE001 - the harness cannot run the sample (sparse layouts)
                rec = {"status": "harness", "why": f"{type(e).__name__}: {str(e)[:150]}"}
            counts[rec["status"]] += 1
            print(json.dumps({"op": name, "index": index, **rec}), flush=True)
    print(json.dumps({"summary": dict(counts)}))


if __name__ == "__main__":
    main()
