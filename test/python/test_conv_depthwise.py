"""Depthwise convolutions (groups == channels, one filter per channel: MobileNet,
ConvNeXt) are a library step of the launch plan (conv2d_depthwise_nchw_chw, through
torch's oneDNN / cuDNN) with their bias and epilogue fused into the next kernel,
instead of an eager island that splits the graph. Values against eager on the CPU."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap


def _compiled_plan(fn, *args):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(*args), fn(*args), rtol=1e-4, atol=1e-4)
    (g,) = fast.graphs   # one graph: no island around the convolution
    assert g.fallback_reason is None
    return g.executable.plan


@pytest.mark.parametrize("kernel,stride,padding,dilation,bias", [
    (3, 1, 1, 1, True), (7, 1, 3, 1, True), (3, 2, 1, 1, False), (5, 1, 4, 2, True), (3, 1, 0, 1, True),
    (3, 2, (1, 0), 1, True)])
def test_depthwise_is_a_plan_step(kernel, stride, padding, dilation, bias):
    conv = nn.Conv2d(12, 12, kernel, stride=stride, padding=padding, dilation=dilation, groups=12, bias=bias).eval()

    def f(x):
        return F.gelu(conv(x * 2)) + 1

    plan = _compiled_plan(f, torch.randn(2, 12, 17, 15))
    (step,) = plan.library_steps
    assert step.op == "conv2d_depthwise_nchw_chw"
    assert plan.values[step.ins[1]].shape == (12, kernel, kernel)
    assert step.strides == (stride, stride) and step.dilations == (dilation, dilation)
    if padding != 0 and isinstance(padding, int):   # zero padding applied by the convolution
        assert step.padding == (padding, padding)
        assert plan.values[step.ins[0]].shape == (2, 12, 17, 15)


def test_convnext_style_block_is_one_plan():
    # depthwise 7x7, channels-last LayerNorm, GELU MLP, layer scale, residual
    class Block(nn.Module):
        def __init__(self, d=16):
            super().__init__()
            self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.gamma = nn.Parameter(torch.rand(d))

        def forward(self, x):
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.fc2(F.gelu(self.fc1(self.norm(y))))
            return x + (self.gamma * y).permute(0, 3, 1, 2)

    plan = _compiled_plan(Block().eval(), torch.randn(2, 16, 12, 12))
    assert [s.op for s in plan.library_steps][0] == "conv2d_depthwise_nchw_chw"


@pytest.mark.parametrize("case", ["multiplier", "grouped"])
def test_other_grouped_convolutions_stay_islands(case):
    # a channel multiplier (out = 2 * in) or groups < channels: no plan step, torch runs them
    conv = {"multiplier": nn.Conv2d(8, 16, 3, padding=1, groups=8),
            "grouped": nn.Conv2d(8, 8, 3, padding=1, groups=2)}[case].eval()
    x = torch.randn(2, 8, 10, 10)
    fast = mlircap.compile(lambda x: conv(x * 2) + 1)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(x), conv(x * 2) + 1, rtol=1e-4, atol=1e-4)
    plans = [g.executable.plan for g in fast.graphs if hasattr(g.executable, "plan")]
    assert not any(s.op.startswith("conv") for p in plans for s in p.library_steps)


def test_depthwise_bf16():
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8).eval().to(torch.bfloat16)
    x = torch.randn(2, 8, 9, 9, dtype=torch.bfloat16)
    fast = mlircap.compile(lambda x: torch.relu(conv(x)))
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(x), torch.relu(conv(x)), rtol=2e-2, atol=2e-2)
