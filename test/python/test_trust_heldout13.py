"""Held-out trust sweep, batch 13 (issue 10): regressions found by bench/heldout2.py (hand-written
torch models of families bench/heldout.py's transformers architectures leave out: recurrent
seq2seq, diffusion, graph networks, state-space scans, RWKV, point clouds, capsules, ...).
Each test compares mlircap.compile with eager.

PYTEST_DONT_REWRITE"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from compiled_check import check_compiled


@pytest.mark.parametrize("pads", [(1, -1), (-1, 1), (0, 0, 1, -1), (0, 0, -2, 2), (1, -1, 0, 0),
                                  (-1, 1, 2, -2), (3, -3), (1, 1, -1, -1), (-1, -1), (2, -1)])
def test_constant_pad_with_a_negative_pad(pads, fallback_log):
    """A negative pad crops. torch-mlir folded a constant_pad_nd whose result has its input's
    shape to the input itself: F.pad(x, (1, -1)) (a shift by one along the last dim) returned x."""
    x = torch.randn(2, 6, 5)
    check_compiled(lambda x: F.pad(x, pads, value=0.5), (x,), fallback_log)


def test_rwkv_token_shift(fallback_log):
    """RWKV's token shift: nn.ZeroPad2d((0, 0, 1, -1)) over [batch, time, channels], the previous
    token's features mixed with the current one's (bench/heldout2.py rwkv: 0.19 of the output's
    scale apart)."""
    torch.manual_seed(0)
    shift, mix = nn.ZeroPad2d((0, 0, 1, -1)), torch.rand(1, 1, 8)

    def token_mix(x):
        return x * mix + shift(x) * (1 - mix)

    check_compiled(token_mix, (torch.randn(2, 7, 8),), fallback_log)


@pytest.mark.parametrize("pads", [(1, -1), (0, 0, 2, -2), (2, 3)])
def test_constant_pad_gradient(pads):
    """The backward of a pad is a pad by the negated amounts: a shift's gradient shifts back."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 6, 5, requires_grad=True), torch.randn(12, 12)

    def f(x):
        y = F.pad(x * 2, pads)
        return (y * w[: y.shape[1], : y.shape[2]].exp()).sum()

    want = f(x)
    (gw,) = torch.autograd.grad(want, x)
    fast = mlircap.compile(f)
    for _ in range(2):
        got = fast(x)
        (gg,) = torch.autograd.grad(got, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gg, gw)
    assert all(g.fallback_reason is None for g in fast.graphs)
