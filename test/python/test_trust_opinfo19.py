"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 1901-1903: op forms that ran
through torch (an eager island, or the whole graph eagerly). Each case compares compiled
calls with eager (results and the inputs an op writes in place); strict=True also asserts
that nothing ran through torch."""
import math

import pytest
import torch
import torch.nn.functional as F

import mlircap
from test_trust_opinfo17 import _check as _check17  # (test/python is on sys.path)


def _check(fn, *args, strict=True, calls=2):
    # test_trust_opinfo17's check (dtype, shape, values) at the dtype's default tolerance
    _check17(fn, *args, strict=strict, calls=calls, exact=False)


def _check_writes(fn, *args, calls=3):
    """fn(*args) writes into args: eager and compiled each run on their own copies, `calls`
    times in a row (each call sees the previous call's writes); results and written inputs
    compared at the dtype's default tolerance, NaN where eager has NaN."""
    fast = mlircap.compile(fn, strict=True)
    eager_args = [a.clone() for a in args]
    fast_args = [a.clone() for a in args]
    for _ in range(calls):
        want, got = fn(*eager_args), fast(*fast_args)
        torch.testing.assert_close(got, want, equal_nan=True)
        for g, w in zip(fast_args, eager_args):
            torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.5])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_embedding_max_norm_renorms_weight_in_place(dtype, norm_type, index_dtype):
    # F.embedding(max_norm=...) renormalises the looked-up rows of the weight in place
    # (aten.embedding_renorm_): torch-mlir cannot lower it, an island before every lookup.
    # Repeated indices, rows under max_norm, a NaN row (left as it is), three calls in a row
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(12, 5, generator=g) * 2).to(dtype)
    w[3] = float("nan")
    w[4] *= 0.01
    idx = torch.tensor([[1, 2, 4, 1], [3, 11, 2, 0]], dtype=index_dtype)
    _check_writes(lambda idx, w: F.embedding(idx, w, max_norm=0.7, norm_type=norm_type) * 2, idx, w)


def test_embedding_module_with_max_norm_compiles():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, max_norm=1.0)
    with torch.no_grad():
        emb.weight.mul_(3)
    ref = torch.nn.Embedding(10, 4, max_norm=1.0)
    ref.load_state_dict(emb.state_dict())
    fast = mlircap.compile(lambda i: emb(i).sum(1), strict=True)
    for ids in (torch.tensor([[0, 3, 3], [9, 1, 0]]), torch.tensor([[5, 6, 7], [0, 8, 2]])):
        with torch.no_grad():
            torch.testing.assert_close(fast(ids), ref(ids).sum(1))
        torch.testing.assert_close(emb.weight, ref.weight)


def _lce_args(dtype, n=8, c=5, k=6):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, k, generator=g).to(dtype)
    w = torch.randn(c, k, generator=g).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    t[2] = 1
    return x, w, t, torch.randn(c, generator=g).to(dtype), torch.rand(c, generator=g).to(dtype) + 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction,extra", [
    (r, e) for r in ("mean", "sum", "none")
    for e in ({}, {"bias": True, "weight": True}, {"ignore_index": 1}, {"weight": True, "ignore_index": 2})])
def test_chunked_linear_cross_entropy_compiles(dtype, reduction, extra, fallback_log):
    # OpInfo nn.functional.linear_cross_entropy.chunked bf16 #28 / #70 ran through torch: a
    # batch longer than batch_chunk_size calls torch's custom op
    # torch_nn::_linear_cross_entropy_batch_chunked (island 'empty': its (0, 0) gradient
    # placeholders), or ..._no_reduction for 'none'
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    opts = LinearCrossEntropyOptions(batch_chunk_size=3)
    x, w, t, b, cw = _lce_args(dtype)
    kw = {k: v for k, v in extra.items() if k in ("ignore_index", "label_smoothing")}

    def fn(x, w, t, b, cw):
        return F.linear_cross_entropy(x, w, t, linear_bias=b if extra.get("bias") else None,
                                      weight=cw if extra.get("weight") else None, reduction=reduction,
                                      options=opts, **kw) * 2

    _check(fn, x, w, t, b, cw)
    err = fallback_log.readouterr().err   # (an island of the op is by design: strict allows it)
    assert "eager islands" not in err and "no part of the graph compiled" not in err, err


def test_chunked_linear_cross_entropy_training_as_eager():
    # with gradients the custom op stays whole (its autograd formula): loss and grads as eager's
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    opts = LinearCrossEntropyOptions(batch_chunk_size=3)
    x, w, t, b, _ = _lce_args(torch.float32)

    def step(x, w, t, b):
        loss = F.linear_cross_entropy(x, w, t, linear_bias=b, options=opts)
        loss.backward()
        return loss

    fast = mlircap.compile(step)
    leaves = [[a.clone().requires_grad_() if a.is_floating_point() else a for a in (x, w, t, b)] for _ in range(3)]
    want = step(*leaves[0])
    for args in leaves[1:]:
        torch.testing.assert_close(fast(*args), want)
        for a, e in zip(args, leaves[0]):
            if a.is_floating_point():
                torch.testing.assert_close(a.grad, e.grad)


@pytest.mark.parametrize("form", ["int_input_float_min", "int_input_mixed_bounds", "int8_input_0dim_int64_bound",
                                  "uint8_input_int64_bound", "clamp_min_float", "clamp_max_int16"])
def test_clamp_of_operands_of_different_dtypes_compiles(form):
    # OpInfo clamp int8 (reference inputs #23: clamp(int64 0-dim, float32 min, int8 max)) ran
    # through torch: torch-mlir cannot lower a clamp whose input is not of the promoted dtype;
    # an int8 input with a 0-dim int64 bound crashed its lowering (SIGSEGV, contained: eager)
    g = torch.Generator().manual_seed(0)
    i8 = torch.randint(-100, 100, (3, 4), generator=g).to(torch.int8)
    f32 = torch.randn(1, 4, generator=g) * 50
    args, fn = {
        "int_input_float_min": ((i8, f32), lambda x, lo: torch.clamp(x, lo) * 2),
        "int_input_mixed_bounds": ((torch.tensor(-8), f32, i8), lambda x, lo, hi: torch.clamp(x, lo, hi) * 2),
        "int8_input_0dim_int64_bound": ((i8, torch.tensor(300)), lambda x, lo: torch.clamp(x, None, lo) * 2),
        "uint8_input_int64_bound": ((i8.to(torch.uint8), torch.tensor([3, 200, -1, 5])),
                                    lambda x, lo: torch.clamp(x, lo) * 2),
        "clamp_min_float": ((i8, f32), lambda x, lo: torch.clamp_min(x, lo) + 1),
        "clamp_max_int16": ((i8, (f32 * 5).to(torch.int16)), lambda x, hi: torch.clamp_max(x, hi) + 1),
    }[form]
    _check(fn, *args)


@pytest.mark.parametrize("form", ["unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes"])
def test_uint8_unsafe_split_compiles(form):
    # OpInfo unsafe_chunk uint8 (reference inputs #7) ran through torch ('dtype uint8'): the
    # unsafe_ forms only move elements, as split / chunk (widen.py)
    t = torch.arange(15, dtype=torch.uint8) * 17
    fn = {"unsafe_chunk": lambda t: [c * 3 for c in torch.unsafe_chunk(t, 7)],
          "unsafe_split": lambda t: [c * 3 for c in torch.unsafe_split(t, 4)],
          "unsafe_split_with_sizes": lambda t: [c * 3 for c in torch.unsafe_split_with_sizes(t, [5, 2, 8])]}[form]
    _check(lambda t: tuple(fn(t)), t)


@pytest.mark.parametrize("kw", [{}, {"invert": True}, {"assume_unique": True}])
@pytest.mark.parametrize("test_shape", [(5,), (2, 3), ()])
def test_uint8_isin_compiles(kw, test_shape):
    # OpInfo isin uint8 #0 ran through torch ('dtype uint8'): its decomposition only
    # compares elements (== against each test element), exact in int32 (widen.py)
    g = torch.Generator().manual_seed(0)
    e = torch.randperm(256, generator=g)[:20].reshape(4, 5).to(torch.uint8)
    t = torch.cat([e.reshape(-1)[:3], torch.tensor([255, 0, 7])]).to(torch.uint8)[:max(1, math.prod(test_shape))]
    t = t.reshape(test_shape)
    _check(lambda e, t: torch.isin(e, t, **kw), e, t)


@pytest.mark.parametrize("form", ["gradient", "gradient_edge_order_2", "mul_scalar", "sub_scalar_alpha",
                                  "mul_scalar_wraps", "mul_bool"])
def test_int8_mul_sub_scalar_compile(form):
    # OpInfo gradient int8 #5 (edge_order=2): torch's decomposition multiplies by Python ints
    # (aten.mul.Scalar / sub.Scalar), whose torch-mlir lowering on int8 crashed (SIGSEGV in the
    # compile worker, contained: the graph ran eagerly)
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-128, 128, (4, 4, 4), generator=g).to(torch.int8)
    fn = {"gradient": lambda x: torch.gradient(x, dim=(0, 1), spacing=[2.0, 1.0], edge_order=2),
          "gradient_edge_order_2": lambda x: torch.gradient(x, dim=0, spacing=2.0, edge_order=2)[0] * 3,
          "mul_scalar": lambda x: aten.mul.Scalar(x, 2) + x,
          "sub_scalar_alpha": lambda x: aten.sub.Scalar(x, 300, alpha=3) * x,
          "mul_scalar_wraps": lambda x: aten.mul.Scalar(x, 300) - x,
          "mul_bool": lambda x: aten.mul.Scalar(x, True) - aten.sub.Scalar(x, -129)}[form]
    _check17(fn, x, strict=True)   # exact: integer results, and the float gradient's steps as eager's
