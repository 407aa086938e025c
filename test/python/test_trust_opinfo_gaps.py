"""OpInfo sweep (bench/opinfo.py, issue 10) fallbacks turned into compiled code: each test
compares compiled calls with eager and checks that the graph compiled whole (no eager
island on the 'fallback' log, every graph compiled)."""
import functools
import re
import warnings

import pytest
import torch

import mlircap
from compiled_check import check_compiled  # test/python/compiled_check.py


_check = functools.partial(check_compiled, warnings_error=False)


# Ops whose tensor inputs have no elements compute a value of their shapes alone: folded
# to a fill (partition._fold_empty_inputs) instead of an 'empty' eager island.
EMPTY_INPUT_CASES = {
    "vector_norm": (lambda x: torch.linalg.vector_norm(x), [torch.randn(0, 3)]),
    "vector_norm_dim": (lambda x: torch.linalg.vector_norm(x, 2, dim=0), [torch.randn(0, 3)]),
    "sum_dim_plus": (lambda x, y: x.sum(0) + y, [torch.randn(0, 4), torch.randn(4)]),
    "prod_int": (lambda x: x.prod(1), [torch.ones(3, 0, dtype=torch.int32)]),
    "mm_inner_empty": (lambda a, b: a @ b * 2, [torch.randn(3, 0), torch.randn(0, 5)]),
    "mm_int": (lambda a, b: torch.matmul(a, b), [torch.ones(2, 0, dtype=torch.int32),
                                                 torch.ones(0, 4, dtype=torch.int32)]),
    "inv_ex": (lambda x: torch.linalg.inv_ex(x), [torch.randn(0, 0)]),
    "inv_ex_batch": (lambda x: torch.linalg.inv_ex(x)[1] + 1, [torch.randn(2, 0, 0)]),
    "any_all": (lambda x: (x.any(1), x.all(1)), [torch.zeros(2, 0, dtype=torch.bool)]),
    "count_nonzero": (lambda x: torch.count_nonzero(x, 0), [torch.randn(0, 3)]),
}


@pytest.mark.parametrize("name", sorted(EMPTY_INPUT_CASES))
def test_op_of_empty_inputs_is_folded(fallback_log, name):
    fn, args = EMPTY_INPUT_CASES[name]
    _check(fn, args, fallback_log)


def test_fold_keeps_a_non_uniform_result(fallback_log):
    # the complete QR / full SVD of a 3x0 matrix: Q and U are the identity, a result
    # that is not one repeated value, folded to a tensor constant
    def f(x, y):
        q, r = torch.linalg.qr(x, mode="complete")
        u, s, vh = torch.linalg.svd(x)
        return q + y, u * 2, r, s

    _check(f, [torch.randn(3, 0), torch.randn(3, 3)], fallback_log)


def test_fold_is_per_shape():
    # a second shape recompiles and folds again: each fold is of its own shapes
    def f(a, b):
        return (a @ b) + 1

    fast = mlircap.compile(f)
    for k, n in ((0, 3), (0, 5), (2, 5)):
        a, b = torch.randn(4, k), torch.randn(k, n)
        torch.testing.assert_close(fast(a, b), f(a, b))


def test_nan_result_of_empty_input_stays_correct(fallback_log):
    # the variance of nothing is NaN: folded to a NaN fill like any other value (a plan's
    # non-finite constants round-trip through its JSON as "nan"/"inf": runtime/schema.py)
    def f(x):
        return torch.var(x), torch.mean(x, 0)

    x = torch.randn(0, 2)
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # eager's 'degrees of freedom is <= 0'
        for _ in range(2):
            for a, b in zip(fast(x), f(x)):
                torch.testing.assert_close(a, b, equal_nan=True)
                assert a.isnan().all()
    assert not re.search(r"eager islands: \S", fallback_log.readouterr().err)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


# Ops over a dim of 0-d tensors run on their one-element views (frontend.
# _scalar_dims_as_vector): torch-mlir could not lower them over rank 0.
SCALAR_DIM_CASES = {
    "amax": lambda x: torch.amax(x, 0),
    "amin_keepdim": lambda x: torch.amin(x, -1, True),
    "argmax_all": lambda x: torch.argmax(x),
    "argmax_dim": lambda x: torch.argmax(x, 0, True),
    "argmin_dim": lambda x: torch.argmin(x, -1),
    "max_dim": lambda x: torch.max(x, 0),
    "min_dim_keepdim": lambda x: torch.min(x, 0, True),
    "prod_dim": lambda x: torch.prod(x, 0),
    "logsumexp": lambda x: torch.logsumexp(x, (0,), True),
    "sum_dim": lambda x: torch.sum(x, 0) + 1,
    "any_all": lambda x: (torch.any(x, 0), torch.all(x, -1)),
    "aminmax": lambda x: torch.aminmax(x, dim=0),
    "gather": lambda x: torch.gather(x, 0, torch.tensor(0)) * 2,
}
FLOAT_ONLY = {"logsumexp"}   # of integers it promotes (covered by the float dtypes)


@pytest.mark.parametrize("name,dtype", [(n, d) for n in sorted(SCALAR_DIM_CASES)
                                        for d in (torch.float32, torch.int32, torch.bfloat16)
                                        if d.is_floating_point or n not in FLOAT_ONLY])
def test_op_over_a_dim_of_a_0d_tensor(fallback_log, name, dtype):
    _check(SCALAR_DIM_CASES[name], [torch.tensor(-3.5).to(dtype)], fallback_log)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.0])
def test_op_over_a_dim_of_a_0d_tensor_special_values(fallback_log, value):
    def f(x):
        v, i = torch.max(x, 0)
        return v, i, torch.argmin(x), torch.var(x, 0, correction=0), torch.std(x, -1, correction=1)

    _check(f, [torch.tensor(value)], fallback_log)


def test_0d_dim_op_inside_a_larger_graph(fallback_log):
    def f(x, y):
        s = (x * 2).amax(0)
        return torch.softmax(y, 0) * s + torch.argmax(x, 0)

    _check(f, [torch.tensor(1.5), torch.randn(4)], fallback_log, exact=False)


@pytest.mark.parametrize("op", [torch.fmax, torch.fmin])
@pytest.mark.parametrize("shapes", [((5, 1), (5,)), ((10, 5), ()), ((5,), (10, 1, 5)), ((2, 1, 3), (1, 4, 1))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_fmax_fmin_with_broadcasting(fallback_log, op, shapes, dtype):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g) for s in shapes)
    if dtype.is_floating_point:
        a[a > 1] = float("nan")
        b[b < -1] = float("nan")
    _check(lambda x, y: op(x, y), [a.to(dtype), b.to(dtype)], fallback_log)


@pytest.mark.parametrize("fn", [
    lambda x, y: torch.rsub(x, y),
    lambda x, y: torch.rsub(x, y, alpha=3),
    lambda x, y: torch.rsub(x, 7),
    lambda x, y: torch.logsumexp(x, 1),
    lambda x, y: torch.logsumexp(x.to(torch.uint8) * 3, 0, keepdim=True),
], ids=["rsub", "rsub_alpha", "rsub_scalar", "logsumexp", "logsumexp_wrapped"])
def test_uint8_rsub_and_logsumexp(fallback_log, fn):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (5, 7), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 256, (7,), generator=g, dtype=torch.uint8)
    _check(fn, [x, y], fallback_log, exact=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape,normalized", [((1,), (1,)), ((4, 1), (1,)), ((3, 2, 1, 1), (1, 1)),
                                              ((2, 16), (16,)), ((3, 35), (35,)), ((2, 3, 8), (3, 8))])
def test_low_precision_layer_norm_rounds_like_eager(fallback_log, dtype, affine, shape, normalized):
    # eager's CPU kernel computes x * rstd + (-rstd * mean) as a fused multiply-add: where
    # x equals its row's mean (one element, a constant row) the result is that rounding
    # error, not 0 (OpInfo native_layer_norm bf16 #10/#11 were wrong by 1e-3 / 1.2e-4)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    x[0] = -8.5   # a constant row
    n = torch.Size(normalized).numel()
    w = (torch.randn(n, generator=g).reshape(normalized) * 4).to(dtype) if affine != "none" else None
    b = torch.randn(n, generator=g).reshape(normalized).to(dtype) if affine == "both" else None
    args = [x] + [t for t in (w, b) if t is not None]

    def f(x, *wb):
        ww = wb[0] if wb else None
        bb = wb[1] if len(wb) > 1 else None
        return torch.native_layer_norm(x, list(normalized), ww, bb, 1e-5)

    _check(f, args, fallback_log, exact=False)


@pytest.mark.parametrize("shape", [(7,), (4, 5), (2, 3, 4), (5, 1, 5)])
@pytest.mark.parametrize("size", [3, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool])
def test_nonzero_static(fallback_log, shape, size, dtype):
    # a static-shape computation (mlircap/nonzero.py): torch-mlir cannot lower the op
    g = torch.Generator().manual_seed(size)
    x = torch.randint(-1, 2, shape, generator=g).to(dtype)
    if dtype.is_floating_point:
        x.view(-1)[:3] = torch.tensor([float("nan"), -0.0, float("inf")]).to(dtype)
    _check(lambda t: torch.nonzero_static(t, size=size, fill_value=-7), [x], fallback_log)
    _check(lambda t: torch.nonzero_static(t * 2, size=size) + 1, [x.to(torch.int32)], fallback_log)
