"""GroupNorm statistics as per-channel spatial sums (split_reductions.channel_stats,
MLIRCAP_GPU_GROUP_STATS, on CUDA by default): the rewritten graph matches eager, and the GPU plan of a
convolution -> GroupNorm -> SiLU -> convolution runs both convolutions NHWC (the
reductions read the NHWC result as columns), its kernels checked by the SIMT
interpreter against the CPU JIT on the same IR."""
import json

import pytest
import simt  # test/python/simt.py
import torch
import torch.nn as nn

import mlircap
from mlircap._core import core, tool_path

G = 4


class CudaStyleGroupNorm(nn.Module):
    """conv -> GroupNorm as torch decomposes it on CUDA (statistics in float32 on the
    grouped view, each group normalized there and viewed back) -> SiLU -> conv."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(8, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 16, 3, padding=1)
        self.w = nn.Parameter(torch.randn(32))
        self.b = nn.Parameter(torch.randn(32))

    def forward(self, x):
        h = self.c1(x)
        n, c, hh, ww = h.shape
        v = h.float().view(n, G, c // G, hh * ww)
        var, mean = torch.var_mean(v, [2, 3], correction=0, keepdim=True)
        y = ((v - mean) * torch.rsqrt(var + 1e-5)).view(n, c, hh, ww)
        y = y * self.w[None, :, None, None] + self.b[None, :, None, None]
        return self.c2(nn.functional.silu(y.to(h.dtype)))


def _modules():
    torch.manual_seed(0)
    gn = nn.Sequential(nn.Conv2d(8, 32, 3, padding=1), nn.GroupNorm(G, 32), nn.SiLU(),
                       nn.Conv2d(32, 16, 3, padding=1))
    with torch.no_grad():
        gn[1].weight.normal_()
        gn[1].bias.normal_()
    return {"nn.GroupNorm": gn.eval(), "cuda_style": CudaStyleGroupNorm().eval()}


@pytest.mark.parametrize("name", ["nn.GroupNorm", "cuda_style"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_stats_match_eager(monkeypatch, capfd, tmp_path, name, dtype):
    monkeypatch.setenv("MLIRCAP_GPU_GROUP_STATS", "force")
    monkeypatch.setenv("MLIRCAP_DUMP_DIR", str(tmp_path))
    # the whole graph compiled (the CPU runs large bf16 convolutions with a bias
    # through torch, as islands): its IR is the one the GPU plan is built from
    monkeypatch.setenv("MLIRCAP_CPU_LIBRARY_OPS", "0")
    m = _modules()[name].to(dtype)
    x = (torch.randn(2, 8, 16, 16) * 2 + 1).to(dtype)
    mlircap.set_logs("passes")
    try:
        fast = mlircap.compile(m)
        with torch.no_grad():
            fast(x)
            got, want = fast(x), m(x)
    finally:
        mlircap.set_logs()
    assert all(g.fallback_reason is None for g in fast.graphs)
    assert "channel_stats: 1 group statistic(s)" in capfd.readouterr().err
    tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, want, **tol)
    # The GPU plan of the same IR: both convolutions NHWC, no NCHW convolution left,
    # the plan's values equal to the CPU JIT's.
    ir = next(tmp_path.glob("*/linalg.mlir")).read_text()
    plan = json.loads(core().gpu_compile(ir))
    convs = [s["op"] for s in plan["steps"] if s["kind"] == "library"]
    assert convs == ["conv2d_nhwc_fhwc", "conv2d_nhwc_fhwc"], convs
    if dtype == torch.float32:
        _, _, kernels = simt.load_kernels(str(tool_path("mlircap-opt")), ir)
        g = torch.Generator().manual_seed(0)
        specs = sorted((v for v in plan["values"] if v["kind"] == "input"), key=lambda v: v["index"])
        inputs = [torch.randn(v["shape"], generator=g) for v in specs]
        vals = {v["id"]: v for v in plan["values"]}
        out = simt.run_plan(plan, kernels, inputs)
        ref = simt.reference(core(), ir, inputs, [vals[o] for o in plan["outputs"]])
        for a, b in zip(out, ref):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_cuda_only_and_only_where_it_pays(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from mlircap import split_reductions as sr

    x, w = torch.randn(2, 8, 4, 4), torch.randn(8, 8, 1, 1)
    conv = torch.nn.functional.conv2d

    def graph(fn):
        gm = make_fx(fn)(x, w)
        FakeTensorProp(gm).propagate(x, w)
        return gm

    def stats(t, w):
        return torch.var_mean(conv(t, w).view(2, 4, 2, 16), [2, 3], keepdim=True)

    def other_reader(t, w):
        v = conv(t, w).view(2, 4, 32)
        return torch.var_mean(v, 2), v.cumsum(2)

    grouped = graph(stats)
    monkeypatch.delenv("MLIRCAP_GPU_GROUP_STATS", raising=False)
    assert sr.channel_stats(grouped) == 0      # on by default, on CUDA graphs only
    monkeypatch.setenv("MLIRCAP_GPU_GROUP_STATS", "0")
    assert sr.channel_stats(grouped) == 0
    monkeypatch.setenv("MLIRCAP_GPU_GROUP_STATS", "force")
    for fn in (lambda t, w: conv(t, w).view(2, 4, 2, 16).sum(3),   # not the whole group
               lambda t, w: conv(t, w).view(4, 4, 16).mean(2),     # the batch mixed into the groups
               lambda t, w: torch.var_mean(t.view(2, 4, 2, 16), [2, 3]),   # no convolution writes x
               other_reader):   # the grouped view read by more than elementwise ops viewed back
        assert sr.channel_stats(graph(fn)) == 0
    # a group of one channel (InstanceNorm-like) is one too
    per_channel = graph(lambda t, w: conv(t, w).view(2, 8, 16).mean(2))
    assert sr.channel_stats(per_channel) == 1
    per_channel.recompile()
    torch.testing.assert_close(per_channel(x, w), conv(x, w).view(2, 8, 16).mean(2))
    assert sr.channel_stats(grouped) == 1
    grouped.recompile()
    for a, b in zip(grouped(x, w), stats(x, w)):
        torch.testing.assert_close(a, b)
