"""Zero padding of a convolution's input is applied by the library convolution
(convInputPadding in lib/Transforms/KernelUtils.h): no pad kernel, the kernel
before the convolution writes the unpadded tensor, and the plan's conv step
carries the padding. Values against eager on the CPU launch plan."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap


def _plan(fast):
    (g,) = fast.graphs
    return g.executable.plan


class Block(nn.Module):
    def __init__(self, c=8, pad=1, stride=1, mode="zeros"):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, stride=stride, padding=pad, padding_mode=mode, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 5, padding=2)

    def forward(self, x):
        y = F.relu(self.bn(self.conv1(x)))
        return self.conv2(y) + y.mean()


def _check(m, x):
    m = m.eval()
    fast = mlircap.compile(m)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(x), m(x), rtol=1e-4, atol=1e-4)
    return _plan(fast)


def test_conv_applies_its_padding():
    plan = _check(Block(), torch.randn(2, 8, 16, 16))
    convs = [s for s in plan.library_steps if s.op.startswith("conv")]
    assert [c.padding for c in convs] == [(1, 1), (2, 2)]
    for c in convs:   # each reads the unpadded [2, 8, 16, 16] tensor
        assert plan.values[c.ins[0]].shape == (2, 8, 16, 16)


def test_strided_and_padded_variants_match_eager():
    _check(Block(pad=2, stride=2), torch.randn(1, 8, 15, 17))
    _check(Block(pad=(1, 2)), torch.randn(1, 8, 12, 12))
    # reflect padding is no zero padding: it stays a kernel
    plan = _check(Block(mode="reflect"), torch.randn(1, 8, 12, 12))
    conv1 = next(s for s in plan.library_steps if s.op.startswith("conv"))
    assert conv1.padding in (None, (0, 0))


def test_padded_input_also_returned():
    def f(x, w):
        p = F.pad(x, (1, 1, 1, 1))
        return F.conv2d(p, w), p * 2

    x, w = torch.randn(1, 4, 8, 8), torch.randn(6, 4, 3, 3)
    fast = mlircap.compile(f)
    for got, want in zip(fast(x, w), f(x, w)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
