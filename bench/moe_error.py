"""How far the bench-size mixture of experts (bench/gpu.py's `moe`) is from its float32 self in bf16,
eager and compiled, on the CPU: is a max |diff| between mlircap and eager a wrong result or bf16's error?

    python bench/moe_error.py [--device cpu|cuda]

Prints the max and mean |difference| of mlircap bf16 vs eager bf16, eager bf16 vs eager float32 and
mlircap bf16 vs eager float32 (same weights: models.build seeds them before the cast).
"""
import argparse
import time
import warnings

import torch

import mlircap
from mlircap import models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    dev = ap.parse_args().device
    warnings.simplefilter("ignore")
    m32, a32 = models.build("moe", "bench", torch.float32, dev)
    m16, a16 = models.build("moe", "bench", torch.bfloat16, dev)
    with torch.no_grad():
        t = time.time()
        ref, eager = m32(*a32).float(), m16(*a16).float()
        print(f"eager float32 + bf16: {time.time() - t:.1f} s", flush=True)
        fast = mlircap.compile(m16)
        fast(*a16)
        got = fast(*a16).float()

    def diff(name, x, y):
        d = (x - y).abs()
        print(f"{name:24s} max {d.max().item():.3f}  mean {d.mean().item():.4f}")

    diff("mlircap bf16 - eager bf16", got, eager)
    diff("eager bf16 - float32", eager, ref)
    diff("mlircap bf16 - float32", got, ref)
    print(f"float32 output max |value| {ref.abs().max().item():.2f}")


if __name__ == "__main__":
    main()
