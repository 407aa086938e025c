"""Convolutions in NHWC (mlircap-conv-channels-last): the GPU plan's default, run here
on the CPU launch plan (MLIRCAP_CPU_CHANNELS_LAST=1), which executes the same IR rewrite
and the same library step (conv2d_nhwc_fhwc through torch with channels-last views).
Values against eager; results are NCHW-contiguous as eager returns them; the
activations between convolutions are NHWC (the convolutions read kernel results, not
transposed views of NCHW buffers)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from mlircap import models


@pytest.fixture
def channels_last(monkeypatch):
    monkeypatch.setenv("MLIRCAP_CPU_CHANNELS_LAST", "1")


def _plans(fast):
    return [g.executable.plan for g in fast.graphs if hasattr(g.executable, "plan")]


def _run(m, *args, tol=1e-4):
    m = m.eval()
    fast = mlircap.compile(m)
    with torch.no_grad():
        ref = m(*args)
        for _ in range(3):
            out = fast(*args)
            torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
            assert out.is_contiguous(), out.stride()
    return fast


def _conv_steps(fast):
    return [s for p in _plans(fast) for s in p.library_steps if s.op.startswith("conv")]


class Chain(nn.Module):
    """conv -> BN -> ReLU -> conv (stride 2, padded) -> + residual of a 1x1 conv -> ReLU;
    the last convolution's result is the graph's output."""

    def __init__(self, c=8):
        super().__init__()
        self.c1 = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.down = nn.Conv2d(c, 2 * c, 1, stride=2)
        self.out = nn.Conv2d(2 * c, 4, 1)

    def forward(self, x):
        y = F.relu(self.bn(self.c1(x)))
        y = F.relu(self.c2(y) + self.down(y))
        return self.out(y)


def test_chain_runs_nhwc_and_returns_nchw(channels_last):
    m = Chain()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    fast = _run(m, torch.randn(2, 3, 16, 16))
    convs = _conv_steps(fast)
    assert [s.op for s in convs] == ["conv2d_nhwc_fhwc"] * 4
    plan = _plans(fast)[0]
    # c2 and down read the BN+ReLU kernel's result (an NHWC buffer) directly, padded by
    # the convolution: [2, 16, 16, 8]
    inner = [s for s in convs if plan.values[s.ins[0]].shape == (2, 16, 16, 8)]
    assert len(inner) == 2
    for s in inner:
        assert plan.values[s.ins[0]].kind == "buffer"
    assert sorted(s.padding or (0, 0) for s in inner) == [(0, 0), (1, 1)]


def test_default_cpu_plan_keeps_nchw():
    fast = _run(Chain(), torch.randn(1, 3, 8, 8))
    assert {s.op for s in _conv_steps(fast)} == {"conv2d_nchw_fchw"}


@pytest.mark.parametrize("name", ["cnn", "resnet", "unet"])
def test_conv_models_match_eager_in_nhwc(channels_last, name):
    m, args = models.build(name)
    fast = _run(m, *args, tol=2e-4)
    assert "conv2d_nhwc_fhwc" in {s.op for s in _conv_steps(fast)}


def test_conv_result_returned_with_a_view_of_it(channels_last):
    # a conv's result returned, reshaped, selected and sliced, with and without a bias
    # (without one the results are views of the NHWC result itself): equal to eager, and
    # contiguous wherever eager's are (a view of the NHWC result would not be, and
    # out.view(-1) would fail where eager's works)
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(4, 6, 3)
            self.d = nn.Conv2d(4, 6, 3, bias=False)

        def forward(self, x):
            outs = []
            for y in (self.c(x), self.d(x)):
                outs += [y, y.flatten(1), y.sum((2, 3)), y[1], y[:, 1:3]]
            return outs

    m = Two().eval()
    x = torch.randn(2, 4, 9, 7)
    fast = mlircap.compile(m)
    with torch.no_grad():
        for _ in range(2):
            for got, want in zip(fast(x), m(x)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                if want.is_contiguous():
                    assert got.is_contiguous(), got.stride()
                    assert got.view(-1).shape == want.view(-1).shape
    # reshaped, sliced and spatially summed results would read NHWC data strided: such
    # convolutions stay NCHW (mlircap-conv-channels-last's readsAlign)
    assert {s.op for s in _conv_steps(fast)} == {"conv2d_nchw_fchw"}


def test_mark_layout_forms():
    from mlircap import _core
    from mlircap.runtime.plan import mark_layout

    conv = "  func.func @f() {\n    // linalg.conv_2d_nchw_fchw\n    return\n  }\n"
    forms = ["#map = affine_map<(d0) -> (d0)>\nmodule {\n" + conv + "}\n",
             "module attributes {torch.debug_module_name = \"M\"} {\n" + conv + "}\n",
             conv]
    for ir in forms:
        marked = mark_layout(ir, channels_last=False)
        assert "mlircap.nchw_convs" in marked and mark_layout(ir, channels_last=True) == ir
        # still valid IR, the attribute on the module
        out = _core.core().run_pipeline(marked, "builtin.module(canonicalize)")
        assert "module attributes {mlircap.nchw_convs" in out
    assert mark_layout("module {\n}\n", channels_last=False) == "module {\n}\n"   # no convolution


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7 -> permute to NHWC -> LayerNorm -> MLP -> layer
    scale -> permute back -> residual; a strided depthwise conv after it."""

    def __init__(self, c=16):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.rand(c))
        self.down = nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c, bias=False)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.gamma
        return self.down(x + y.permute(0, 3, 1, 2))


def test_depthwise_runs_nhwc(channels_last):
    """Depthwise convolutions run NHWC too (conv2d_depthwise_nhwc_hwc: cuDNN's NHWC depthwise
    kernels on the GPU, 2x faster than the NCHW bf16 kernel), and the permute to channels-last
    after the first one composes with the transpose out of it."""
    fast = _run(ConvNeXtBlock(), torch.randn(2, 16, 12, 12))
    assert [s.op for s in _conv_steps(fast)] == ["conv2d_depthwise_nhwc_hwc"] * 2
    plan = _plans(fast)[0]
    # LayerNorm's kernel reads the first convolution's NHWC result: no transpose between
    first = _conv_steps(fast)[0]
    readers = [s for s in plan.kernels if first.out in s.value_args]
    assert readers and plan.values[first.out].shape == (2, 12, 12, 16)


def test_depthwise_nchw_by_default():
    fast = _run(ConvNeXtBlock(), torch.randn(1, 16, 8, 8))
    assert {s.op for s in _conv_steps(fast)} == {"conv2d_depthwise_nchw_chw"}
