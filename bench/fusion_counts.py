"""Kernels per model before/after fusion, and estimated memory traffic.

    python bench/fusion_counts.py [--scale small|bench]

Per model: the aten compute ops of the captured, decomposed graph (views and
metadata ops not counted). This overstates eager's launches where eager has
one fused kernel for a decomposed op (layer_norm, softmax, gelu). mlircap's GPU
launch plan (fused kernels + library calls), and bytes moved estimated from
each side: eager reads every input and writes every output of every op;
mlircap's plan reads and writes the arguments of each kernel and library call.
No GPU needed (the plan is built on any machine).
"""
import argparse
import json
import os
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

import mlircap  # noqa: E402
from mlircap import config, models  # noqa: E402
from mlircap._core import core  # noqa: E402
from mlircap.runtime.schema import Plan  # noqa: E402

# Metadata-only aten ops: no kernel in eager.
VIEW_OPS = {"view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
            "slice", "select", "alias", "detach", "as_strided", "split", "split_with_sizes", "unbind",
            "lift_fresh_copy"}


def nbytes(val) -> int:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(nbytes(v) for v in val)
    return 0


def eager_stats(gm):
    ops = traffic = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or not hasattr(n.target, "_schema"):
            continue
        name = n.target._schema.name.split("::")[-1]
        if name in VIEW_OPS:
            continue
        ops += 1
        traffic += nbytes(n.meta.get("val"))
        for a in n.all_input_nodes:
            traffic += nbytes(a.meta.get("val"))
    return ops, traffic


def plan_stats(plan: Plan):
    def size(vid):
        return plan.values[vid].nbytes

    traffic = sum(size(a) for s in plan.kernels for a in s.value_args)
    traffic += sum(size(i) for s in plan.library_steps for i in (*s.ins, s.out))
    return len(plan.kernels), len(plan.library_steps), traffic


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scale", default="small", choices=["small", "bench"])
    ap.add_argument("--models", default=",".join(models.NAMES))
    a = ap.parse_args()
    print(f"{'model':<12} {'aten ops':>9} {'mlircap kernels':>15} {'library':>8} {'launches':>9} "
          f"{'aten MB':>9} {'mlircap MB':>11} {'traffic':>8}")
    for name in a.models.split(","):
        m, args = models.build(name, scale=a.scale)
        fast = mlircap.compile(m, device="cpu")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast(*args)
            fast(*args)
        e_ops = e_bytes = k = lib = p_bytes = 0
        for g in fast.graphs:
            o, b = eager_stats(g.gm)
            e_ops, e_bytes = e_ops + o, e_bytes + b
            try:
                kk, ll, pb = plan_stats(Plan.from_json(json.loads(core().gpu_compile(g.linalg_ir, config.DEFAULT_CHIP, config.DEFAULT_PTX_FEATURES))))
            except RuntimeError as err:
                print(f"  {name}: {g.name} has no GPU plan: {str(err).splitlines()[-1][:120]}")
                continue
            k, lib, p_bytes = k + kk, lib + ll, p_bytes + pb
        print(f"{name:<12} {e_ops:>9} {k:>15} {lib:>8} {k + lib:>9} {e_bytes / 1e6:>9.2f} {p_bytes / 1e6:>11.2f} "
              f"{p_bytes / max(e_bytes, 1):>7.2f}x")


if __name__ == "__main__":
    main()
