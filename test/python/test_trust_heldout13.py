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


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(2, 100003), (3, 1, 70001), (2, 576, 10, 16, 8)])
def test_broadcast_over_few_rows_runs_row_by_row(shape, threads, fallback_log):
    """A kernel over a few rows of a long last dim (CapsNet's W.expand(batch, ...) before its
    batched product; a [2, N] broadcast): mlircap-outline-parallel dispatched every element
    of the linearized space and recovered both indices from the linear one per element, a
    scalar loop at 2.4x eager's time. Now each chunk runs its rows, each row's part an inner
    loop: no division of the linear index in the chunk's body, and eager's values whatever
    row a chunk starts or ends in."""
    torch.manual_seed(0)
    w = torch.randn((1,) + shape[1:])
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fast = check_compiled(lambda w: w.expand(shape) * 2 + 1, (w,), fallback_log)
    finally:
        torch.set_num_threads(old)
    bodies = [f for f in fast.ir("llvm").split("llvm.func ") if f.split("(")[0].endswith("_parallel_body")]
    assert bodies and not any("llvm.urem" in b for b in bodies), bodies


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pieces, shape", [(21, (64, 16, 3)), (8, (256, 64)), (4, (256, 64))])
def test_cat_of_many_pieces_runs_through_torch(pieces, shape, dtype, fallback_log):
    """A CPU cat compiles to one generic that loads every piece for each element of its
    result: K loads an element (a cat of 21 [256, 64] pieces 2.6 ms against eager's 0.27;
    NeRF's positional encoding, 21 sin / cos pieces of [64, 16, 3], 730 us against 240).
    From 4 pieces and 2^18 such loads the cat runs through torch as a library island, its
    pieces' producers compiled; eager's values bit for bit."""
    torch.manual_seed(0)
    x = torch.randn(shape).to(dtype)

    def encode(x):
        return torch.cat([torch.sin(x * 2.0 ** (i // 2)) if i % 2 else x * (i + 1) for i in range(pieces)], -1)

    want = encode(x)
    fast = mlircap.compile(encode)
    for _ in range(2):
        got = fast(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-6 if dtype == torch.float32 else 0, atol=1e-6 if dtype == torch.float32 else 0)
    err = fallback_log.readouterr().err
    assert "eager islands: cat: library" in err, err
    assert all(g.fallback_reason is None for g in fast.graphs)


def test_cat_of_few_or_small_pieces_stays_compiled(fallback_log):
    """Few pieces, or small ones, stay one compiled graph: there the fused form wins."""
    torch.manual_seed(0)
    a, b = torch.randn(1024, 3), torch.randn(256, 64)
    check_compiled(lambda a: torch.cat([a * i for i in range(8)], -1), (a,), fallback_log)
    check_compiled(lambda b: torch.cat([b, b.sin(), b * 2], -1), (b,), fallback_log, exact=False)


def test_cat_of_many_pieces_gradient():
    """The library cat inside a training graph: loss and gradient as eager's."""
    torch.manual_seed(0)
    w, x = torch.randn(64, requires_grad=True), torch.randn(256, 64)

    def f(x):
        return torch.cat([(x * w * (i + 1)).sin() for i in range(8)], -1).pow(2).sum()

    want = f(x)
    (gw,) = torch.autograd.grad(want, w)
    fast = mlircap.compile(f)
    for _ in range(2):
        got = fast(x)
        (gg,) = torch.autograd.grad(got, w)
        torch.testing.assert_close(got, want)
        assert ((gg - gw).abs().max() / gw.abs().max()).item() < 1e-6   # (sums of 16K terms: order)
    assert all(g.fallback_reason is None for g in fast.graphs)


_BROADCAST_MATMULS = [((1, 96, 10, 16, 8), (2, 96, 1, 8, 1)), ((4, 1, 128, 64), (1, 6, 64, 96)),
                      ((1, 8, 64, 32), (5, 8, 32, 8)), ((3, 1, 1, 64, 32), (1, 7, 5, 32, 16)),
                      ((10, 1, 128, 64), (1, 12, 64, 8)), ((1, 300, 64), (7, 64, 16))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sa, sb", _BROADCAST_MATMULS)
def test_matmul_with_broadcast_batch_dims_is_not_expanded(sa, sb, dtype, fallback_log):
    """CapsNet's W[1, 576, 10, 16, 8] @ u[2, 576, 1, 8, 1]: torch's matmul expands both operands
    to the broadcast batch shape and copies them (W: 1.47M elements a call, more than the
    product's work). Batch dims only one operand has become rows / columns of the product
    instead (matmul_broadcast.py): no operand is copied at the broadcast shape, values as eager's."""
    torch.manual_seed(0)
    a, b = torch.randn(sa).to(dtype), torch.randn(sb).to(dtype)
    fast = check_compiled(lambda a, b: torch.matmul(a, b) * 2, (a, b), fallback_log, exact=False)
    batch = torch.broadcast_shapes(sa[:-2], sb[:-2])
    expanded = [str(list(batch + s[-2:])) for s in (sa, sb) if tuple(s[:-2]) != tuple(batch)]
    fx_text = fast.ir("fx")
    assert not any(e in fx_text for e in expanded), fx_text


def test_matmul_with_broadcast_batch_dims_gradient():
    torch.manual_seed(0)
    w = torch.randn(1, 96, 10, 16, 8, requires_grad=True)
    u = torch.randn(2, 96, 1, 8, 1, requires_grad=True)

    def f(w, u):
        return (w @ u).square().sum()

    want = f(w, u)
    gw, gu = torch.autograd.grad(want, (w, u))
    fast = mlircap.compile(f)
    for _ in range(2):
        got = fast(w, u)
        hw, hu = torch.autograd.grad(got, (w, u))
        torch.testing.assert_close(got, want)
        for h, g in ((hw, gw), (hu, gu)):   # (sums over the broadcast dims in another order)
            assert ((h - g).abs().max() / g.abs().max()).item() < 1e-6
    assert all(g.fallback_reason is None for g in fast.graphs)
