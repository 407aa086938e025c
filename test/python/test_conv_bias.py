"""A convolution's bias is passed to the library convolution on the CPU (mlircap-library-init
under the module attribute mlircap.conv_bias, which mlircap_cpu_plan_compile sets): the plan's
convolution step gets the 1-D bias as a third operand and torch's conv2d (oneDNN) adds it inside
its accumulation, as eager's conv2d with a bias does. Before, the bias was added by the epilogue
kernel after the convolution: one unit in the last place off eager's in places (AVX2) and a kernel
reading the bias. Other epilogues (ReLU, BatchNorm, a residual add) stay fused after it. Values
against eager, bit for bit in float32."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap


def _plans(fast):
    return [g.executable.plan for g in fast.graphs if hasattr(g.executable, "plan")]


def _conv_steps(fast):
    return [(p, s) for p in _plans(fast) for s in p.library_steps if s.op.startswith("conv")]


def _compiled(fn, *args):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        ref = fn(*args)
        for _ in range(2):
            out = fast(*args)
    return fast, ref, out


def _data(*shapes, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, 0, 1), (1, 2, 2)])
def test_conv2d_bias_is_eagers_bits(stride, padding, dilation):
    # 64 input channels x 3x3: sums long enough that adding the bias after the
    # convolution rounds differently from oneDNN's accumulation in places
    x, w, b = _data((2, 64, 14, 14), (32, 64, 3, 3), (32,))
    fn = lambda t, k, c: F.conv2d(t, k, c, stride, padding, dilation)   # noqa: E731
    fast, ref, out = _compiled(fn, x, w, b)
    assert torch.equal(out, ref)
    [(plan, step)] = _conv_steps(fast)
    assert step.op == "conv2d_nchw_fchw" and len(step.ins) == 3
    assert plan.values[step.ins[2]].shape == (32,)
    assert not plan.kernels   # nothing left to add after the convolution


def test_conv_bias_relu_keeps_the_relu_fused():
    m = nn.Sequential(nn.Conv2d(48, 24, 3, padding=1), nn.ReLU()).eval()
    x, = _data((2, 48, 12, 12), seed=1)
    fast, ref, out = _compiled(m, x)
    assert torch.equal(out, ref)
    [(plan, step)] = _conv_steps(fast)
    assert len(step.ins) == 3
    [k] = plan.kernels                      # the ReLU, reading the convolution's result only
    assert [plan.values[v].shape for v in k.value_args] == [(2, 24, 12, 12)] * 2


def test_conv_bias_batchnorm_residual():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(32, 32, 3, padding=1)
            self.bn = nn.BatchNorm2d(32)
            self.c2 = nn.Conv2d(32, 32, 3, padding=1)

        def forward(self, x):
            return F.relu(self.c2(F.relu(self.bn(self.c1(x)))) + x)

    m = Block().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    x, = _data((2, 32, 10, 10), seed=2)
    fast, ref, out = _compiled(m, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    steps = _conv_steps(fast)
    assert [len(s.ins) for _, s in steps] == [3, 3]


def test_depthwise_conv_bias():
    x, w, b = _data((2, 32, 15, 15), (32, 1, 5, 5), (32,), seed=3)
    fn = lambda t, k, c: F.gelu(F.conv2d(t, k, c, padding=2, groups=32))   # noqa: E731
    fast, ref, out = _compiled(fn, x, w, b)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    [(plan, step)] = _conv_steps(fast)
    assert step.op == "conv2d_depthwise_nchw_chw" and len(step.ins) == 3


def test_conv1d_bias_is_eagers_bits():
    x, w, b = _data((2, 16, 40), (24, 16, 5), (24,), seed=4)
    fn = lambda t, k, c: F.conv1d(t, k, c, padding=2)   # noqa: E731
    fast, ref, out = _compiled(fn, x, w, b)
    assert torch.equal(out, ref)
    [(_, step)] = _conv_steps(fast)
    assert len(step.ins) == 3


def test_bias_computed_in_the_graph():
    # the bias is itself computed (a kernel's result), and read again after the convolution
    x, w, b = _data((1, 8, 9, 9), (16, 8, 3, 3), (16,), seed=5)

    def fn(t, k, c):
        c2 = c * 2 + 1
        return F.conv2d(t, k, c2) + c2.view(1, -1, 1, 1)

    fast, ref, out = _compiled(fn, x, w, b)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    [(_, step)] = _conv_steps(fast)
    assert len(step.ins) == 3


def test_shared_bias_two_convolutions():
    x, w1, w2, b = _data((1, 8, 9, 9), (16, 8, 3, 3), (16, 8, 1, 1), (16,), seed=6)
    fn = lambda t, k1, k2, c: F.conv2d(t, k1, c, padding=1) * F.conv2d(t, k2, c)   # noqa: E731
    fast, ref, out = _compiled(fn, x, w1, w2, b)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    assert [len(s.ins) for _, s in _conv_steps(fast)] == [3, 3]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_conv_bias_rounds_once(dtype):
    x, w, b = _data((1, 16, 10, 10), (8, 16, 3, 3), (8,), dtype=dtype, seed=7)
    fn = lambda t, k, c: F.relu(F.conv2d(t, k, c, padding=1))   # noqa: E731
    fast, ref, out = _compiled(fn, x, w, b)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
    # the f32 convolution of the converted operands plus the bias, rounded once
    exact = F.relu(F.conv2d(x.float(), w.float(), b.float(), padding=1)).to(dtype)
    assert (out != exact).sum() <= 2


def test_channels_last_plan_keeps_the_bias(monkeypatch):
    monkeypatch.setenv("MLIRCAP_CPU_CHANNELS_LAST", "1")
    m = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 3, padding=1),
                      nn.Conv2d(8, 8, 3, padding=1, groups=8)).eval()
    x, = _data((2, 16, 12, 12), seed=8)
    fast, ref, out = _compiled(m, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    steps = _conv_steps(fast)
    assert [s.op for _, s in steps] == ["conv2d_nhwc_fhwc", "conv2d_nhwc_fhwc", "conv2d_depthwise_nhwc_hwc"]
    assert [len(s.ins) for _, s in steps] == [3, 3, 3]
