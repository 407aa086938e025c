"""Reductions that keep a middle or the innermost dim on the GPU (BatchNorm's training statistics,
means over tokens): the launch plan splits each output's reduction across a block's threads with
enough blocks to spread over the SMs (before: BatchNorm2d(96) on 4x96x16x16 ran its statistics in
3 blocks of 8 slices, its variance in one thread per channel, 0.1-0.4 ms a kernel on an H100,
heldout3's efficientnet_sd 0.37x eager there), and its kernels, run by the SIMT interpreter, equal
the CPU JIT on the same IR."""
import pytest
import torch
from test_numerics import check  # (test/python is on sys.path)

import mlircap


def _bn_train(x):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(x.shape[1]).train()
    return lambda t: torch.nn.functional.silu(bn(t))


CASES = {
    # NCHW statistics: the innermost loop reduces -> slices on adjacent elements
    "batchnorm_train": (_bn_train, (4, 24, 8, 8), "reduction_split_rows"),
    # columns innermost: mean / variance over the tokens of [N, L, C]
    "token_stats": (lambda x: (lambda t: (t.mean((0, 1)), torch.var(t, (0, 1)))), (4, 40, 96),
                    "reduction_split"),
    # long reductions: each slice keeps 4 independent partials (an unguarded loop over whole rounds),
    # the rest of the reduction into the first one
    "batchnorm_train_long": (_bn_train, (9, 4, 32, 32), "reduction_split_rows_vec4"),
    # 16-byte vector loads a chunk of the innermost loop, 4 chunks in flight a round and the rest
    # one chunk at a time (rows of 64 floats; the scalar version runs on misaligned buffers)
    "batchnorm_train_vec_rounds": (_bn_train, (17, 4, 32, 64), "reduction_split_rows_vec4"),
    "token_stats_long": (lambda x: (lambda t: (t.mean((0, 1)), torch.var(t, (0, 1)))), (16, 161, 24),
                         "reduction_split"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_reductions_fill_the_gpu_and_match(monkeypatch, tmp_path, name):
    make, shape, strategy = CASES[name]
    monkeypatch.setenv("MLIRCAP_DUMP_DIR", str(tmp_path))
    x = torch.randn(*shape)
    fn = make(x)
    fast = mlircap.compile(fn)
    with torch.no_grad():
        fast(x)
        fast(x)
    ir = next(tmp_path.glob("*/linalg.mlir")).read_text()
    # the plan's kernels in the SIMT interpreter against the CPU JIT (test_numerics' check)
    plan = check(ir, atol=1e-5, rtol=1e-5)
    assert plan["outputs"]
    reductions = [s for s in plan["steps"] if s["kind"] == "kernel" and s["strategy"].startswith("reduction")]
    assert reductions, [s.get("strategy") for s in plan["steps"]]
    # every long reduction split, none left to one thread per output (the variance with its
    # dtype conversion and running-statistics epilogue was), and not a handful of blocks
    assert {s["strategy"] for s in reductions} == {strategy}, [s["strategy"] for s in reductions]
    n_out = shape[1] if name.startswith("batchnorm_train") else shape[2]
    assert all(s["grid"][0] >= n_out // 8 for s in reductions), [s["grid"] for s in reductions]
    if "_vec" in strategy:
        # inputs one element off 16-byte alignment take the scalar loop: the same results
        check(ir, atol=1e-5, rtol=1e-5, misalign=True)
