"""The core's float32 NCHW depthwise convolution (lib/CAPI/Depthwise.cpp): CPU plans run
conv2d_depthwise_nchw_chw library steps as a step of their C++ program instead of a call
through torch (runtime/cpu.py, _depthwise_call). Values against torch's conv2d over
shapes, strides, paddings, dilations, with and without a bias, non-finite weights, thread
counts; and the plans that use it (MobileNet/ConvNeXt/Conformer-style blocks) against eager."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from mlircap._core import core
from mlircap.runtime.cpu import sync_threads

DEPTHWISE = "conv2d_depthwise_nchw_chw"


def _run_kernel(x, w, bias, stride, padding, dilation):
    """x (N, C, H, W), w (C, KH, KW) through one CpuProgram step of the kernel."""
    ref = F.conv2d(x, w.unsqueeze(1), bias, stride, padding, dilation, groups=x.shape[1])
    y = torch.full_like(ref, float("nan"))   # every element must be written
    ts = [x, w] + ([bias] if bias is not None else []) + [y]
    program = core().CpuProgram()
    params = [int(bias is not None), *stride, *padding, *dilation]
    program.add(core().cpu_depthwise_conv2d(), list(range(len(ts))), [list(t.shape) for t in ts], params)
    sync_threads(core())
    program.run([t.data_ptr() for t in ts])
    return y, ref


CASES = [
    # (N, C, H, W), (KH, KW), stride, padding, dilation
    ((1, 144, 24, 24), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 96, 48, 48), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((2, 7, 13, 11), (3, 3), (2, 2), (1, 1), (1, 1)),      # odd sizes, stride 2
    ((1, 48, 16, 16), (7, 7), (1, 1), (3, 3), (1, 1)),      # ConvNeXt
    ((2, 144, 1, 100), (1, 31), (1, 1), (0, 15), (1, 1)),   # Conformer's Conv1d as 2-D
    ((2, 5, 9, 13), (3, 5), (2, 3), (1, 2), (2, 1)),        # uneven everything
    ((1, 8, 7, 7), (5, 5), (1, 1), (0, 0), (1, 1)),         # no padding
    ((3, 4, 6, 70), (2, 4), (3, 1), (2, 0), (1, 3)),        # rows wider than a 64-column block
    ((1, 3, 5, 5), (5, 5), (1, 1), (4, 4), (2, 2)),         # padding wider than the image's reach
    ((1, 16, 1, 1), (3, 3), (1, 1), (1, 1), (1, 1)),        # 1x1 image: only the centre tap
    ((1, 2, 4, 4), (1, 1), (1, 1), (0, 0), (1, 1)),
    ((1, 6, 20, 9), (3, 3), (4, 2), (0, 1), (1, 1)),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape,kernel,stride,padding,dilation", CASES)
def test_kernel_matches_torch(shape, kernel, stride, padding, dilation, bias):
    torch.manual_seed(0)
    x = torch.randn(shape)
    w = torch.randn(shape[1], *kernel)
    b = torch.randn(shape[1]) if bias else None
    y, ref = _run_kernel(x, w, b, stride, padding, dilation)
    assert not y.isnan().any()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def test_non_finite_weights_and_inputs_propagate_like_torch():
    # a padded tap of an infinite or NaN weight is skipped as the library skips it
    # (inf * 0 would be NaN); non-finite inputs propagate wherever a tap reads them
    torch.manual_seed(1)
    x = torch.randn(2, 4, 9, 10)
    w = torch.randn(4, 3, 3)
    w[1, 0, 0] = float("inf")
    w[2, 2, 1] = float("nan")
    x[0, 3, 4, 5] = float("inf")
    x[1, 0, 0, 0] = float("nan")
    b = torch.randn(4)
    y, ref = _run_kernel(x, w, b, (1, 1), (1, 1), (1, 1))
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert y[:, 1].isinf().any() and not y[:, 1].isnan().all()


def test_same_bits_on_any_thread_count():
    torch.manual_seed(2)
    x, w, b = torch.randn(2, 64, 20, 20), torch.randn(64, 3, 3), torch.randn(64)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = _run_kernel(x, w, b, (1, 1), (1, 1), (1, 1))
        torch.set_num_threads(2)
        two, ref = _run_kernel(x, w, b, (1, 1), (1, 1), (1, 1))
    finally:
        torch.set_num_threads(n)
    assert torch.equal(one, two)
    torch.testing.assert_close(two, ref, rtol=1e-5, atol=1e-5)


def _compiled(fn, *args, rtol=1e-4, atol=1e-4):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        ref = fn(*args)
        for _ in range(2):   # the first call and the generated call of later ones
            torch.testing.assert_close(fast(*args), ref, rtol=rtol, atol=atol)
    (g,) = fast.graphs
    assert g.fallback_reason is None
    return g.executable


@pytest.mark.parametrize("kernel,stride,padding,dilation,bias", [
    (3, 1, 1, 1, True), (3, 2, 1, 1, False), (7, 1, 3, 1, True), (5, 1, 4, 2, True), (3, 2, (1, 0), 1, True),
    (3, 1, 0, 1, False)])
def test_plan_runs_the_depthwise_step_in_its_program(kernel, stride, padding, dilation, bias):
    conv = nn.Conv2d(12, 12, kernel, stride=stride, padding=padding, dilation=dilation, groups=12,
                     bias=bias).eval()

    def f(x):
        return F.relu6(conv(x * 2)) + 1

    exe = _compiled(f, torch.randn(2, 12, 17, 15))
    (step,) = [s for s in exe.plan.library_steps if s.op == DEPTHWISE]
    assert id(step) in exe._native and DEPTHWISE in exe.labels
    # no library segment left: the whole graph is one run of the program
    assert all(s is None for s, _, _ in exe._segments)
    assert len(exe.program) == exe.n_kernels + 1


def test_mobilenet_block_with_batchnorm_and_residual():
    class Block(nn.Module):
        def __init__(self, c=16, e=4):
            super().__init__()
            h = c * e
            self.body = nn.Sequential(
                nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return x + self.body(x)

    torch.manual_seed(3)
    m = Block().eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    exe = _compiled(m, torch.randn(2, 16, 12, 12))
    assert exe.labels.count(DEPTHWISE) == 1


def test_conformer_depthwise_conv1d():
    class ConvModule(nn.Module):
        def __init__(self, d=24, k=15):
            super().__init__()
            self.pw1 = nn.Conv1d(d, 2 * d, 1)
            self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
            self.bn = nn.BatchNorm1d(d)
            self.pw2 = nn.Conv1d(d, d, 1)

        def forward(self, x):   # (b, t, d)
            h = F.glu(self.pw1(x.transpose(1, 2)), dim=1)
            return x + self.pw2(F.silu(self.bn(self.dw(h)))).transpose(1, 2)

    torch.manual_seed(4)
    exe = _compiled(ConvModule().eval(), torch.randn(2, 50, 24))
    assert DEPTHWISE in exe.labels


def test_generated_call_equals_step_by_step_reference():
    torch.manual_seed(5)
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8).eval()
    w = torch.randn(4, 8, 1, 1)

    def f(x):
        c = conv(torch.sigmoid(x))
        return c, F.conv2d(torch.relu(c), w)   # the depthwise result is returned and read on

    x = torch.randn(2, 8, 10, 10)
    fast = mlircap.compile(f)
    with torch.no_grad():
        fast(x)
        fast(x)
    (g,) = fast.graphs
    exe = g.executable
    assert DEPTHWISE in exe.labels
    ins = g.last_inputs()
    assert ins is not None
    with torch.no_grad():
        eager = f(x)
        for _ in range(2):
            got, ref = exe(*ins), exe._call_generic(*ins)
            for a, r, e in zip(got, ref, eager):
                torch.testing.assert_close(a, r, rtol=0, atol=0)
                torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_bf16_depthwise_stays_a_torch_step():
    # only float32 runs in the core's kernel; bf16 keeps the library call (and its rounding)
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8).eval().to(torch.bfloat16)
    x = torch.randn(2, 8, 9, 9, dtype=torch.bfloat16)
    fast = mlircap.compile(lambda x: torch.relu(conv(x)))
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(x), torch.relu(conv(x)), rtol=2e-2, atol=2e-2)
    for g in fast.graphs:
        assert DEPTHWISE not in getattr(g.executable, "labels", [])
