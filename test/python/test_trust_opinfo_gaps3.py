"""OpInfo sweep (bench/opinfo.py, issue 10), seed 223 on 2026-12-04: fallbacks turned into
compiled code. Each compiled case compares with eager (bit for bit: these forms compute what
eager's kernels compute) and checks that no island ran (the 'fallback' log) and every graph
compiled."""
import functools
import warnings

import pytest
import torch

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py


_same = functools.partial(same, signs=True)
_check = functools.partial(check_compiled, signs=True)


# ----------------------------------------------------------------------------- copysign
_SIGNS = torch.tensor([1.0, -0.0, 0.0, -3.0, float("inf"), -float("inf"), 2.5, -1e-30])
_MAGS = torch.tensor([-2.0, 3.0, -0.0, 0.0, -1.5, float("nan"), 7.0, -4.0])


@pytest.mark.parametrize("a,b", [
    (_MAGS, _SIGNS),
    (torch.tensor(-8.478373527526855), torch.tensor(-1.765825867652893)),   # OpInfo float32 #0
    (_MAGS.bfloat16(), _SIGNS),                                             # promoted to float32
    (_MAGS.bfloat16(), _SIGNS.bfloat16()),
    (torch.arange(-4, 4), torch.tensor([1, -1, 0, 5, -2, 0, -7, 3])),       # integers: float32
    (torch.arange(-4, 4, dtype=torch.int8), _SIGNS.bfloat16()),
    (torch.tensor([True, False, True, True, False, True, False, True]), _SIGNS),
    (torch.randn(3, 1, 8, generator=torch.Generator().manual_seed(0)), _SIGNS),   # broadcast
], ids=["f32", "0d", "bf16-f32", "bf16", "int64", "int8-bf16", "bool", "broadcast"])
def test_copysign_compiles(fallback_log, a, b):
    # torch-mlir lowers neither copysign nor signbit: |a| negated where b < 0 or b is -0.0
    _check(lambda x, y: torch.copysign(x, y), [a, b], fallback_log)


@pytest.mark.parametrize("b", [-0.0, 0.0, -2, 3, float("-inf"), -float("nan"), float("nan")])
def test_copysign_by_a_number_compiles(fallback_log, b):
    # the sign of a Python number is known at trace time (NaN's too)
    _check(lambda x: torch.copysign(x, b), [_MAGS], fallback_log)
    _check(lambda x: torch.copysign(x, b), [torch.arange(-3, 4, dtype=torch.int16)], fallback_log)


def test_copysign_by_a_nan_tensor_reruns_eagerly(fallback_log):
    # a NaN's sign bit is not readable by comparisons: the flag reruns the call eagerly,
    # which gives eager's signs (-NaN is negative, NaN positive); strict=True raises
    fast = mlircap.compile(lambda x, y: torch.copysign(x, y))
    strict = mlircap.compile(lambda x, y: torch.copysign(x, y), strict=True)
    ok = torch.tensor([1.0, -2.0, -0.0])
    nan = torch.tensor([1.0, -float("nan"), float("nan")])
    x = torch.tensor([3.0, 4.0, 5.0])
    assert torch.copysign(x, nan).tolist() == [3.0, -4.0, 5.0]
    for f in (fast, strict):
        for _ in range(2):
            _same(f(x, ok), torch.copysign(x, ok))
    assert "bounds check" not in fallback_log.readouterr().err
    for _ in range(2):
        _same(fast(x, nan), torch.copysign(x, nan))
        assert "bounds check" in fallback_log.readouterr().err
    with pytest.raises(mlircap.MlircapCompileError, match="bounds check"):
        strict(x, nan)


# ------------------------------------------------------------------ triu/tril_indices
@pytest.mark.parametrize("fn", [torch.triu_indices, torch.tril_indices])
@pytest.mark.parametrize("row,col,offset", [(0, 20, 0), (20, 0, 0), (4, 5, 1), (7, 3, -2), (5, 5, 10),
                                            (6, 4, -9), (1, 1, 0), (33, 17, 3)])
def test_triangle_indices_compile(fallback_log, fn, row, col, offset):
    # OpInfo triu_indices int32 #2 is triu_indices(0, 20): a (2, 0) result
    for dtype in (torch.int32, torch.int64):
        _check(lambda x: (x, fn(row, col, offset, dtype=dtype)), [torch.zeros(1)], fallback_log)


# ------------------------------------------------------------------------ empty tensors
@pytest.mark.parametrize("op", [
    lambda x: torch.std(x, False), lambda x: torch.var(x), lambda x: torch.std(x, True),
    lambda x: torch.mean(x), lambda x: x.sum(), lambda x: x.prod(), lambda x: torch.logsumexp(x, 0),
    lambda x: torch.var_mean(x)[0],
], ids=["std_biased", "var", "std", "mean", "sum", "prod", "logsumexp", "var_mean"])
def test_reductions_of_nothing_compile(fallback_log, op):
    # OpInfo std.unbiased float32 #2: std of a (0,) tensor is NaN, a constant of the
    # shapes (partition._fold_empty_inputs), now also when it is NaN or infinite
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # eager's 'degrees of freedom is <= 0'
        want = op(torch.zeros(0))
    assert want.numel() == 1
    fast = mlircap.compile(lambda x, y: op(x) + y)
    y = torch.tensor([1.0, -2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            _same(fast(torch.zeros(0), y), op(torch.zeros(0)) + y)
    assert "eager islands" not in fallback_log.readouterr().err
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bfloat16, torch.bool, torch.int8])
def test_block_diag_with_empty_blocks_compiles(fallback_log, dtype):
    # OpInfo block_diag int64 #1: the zero blocks beside a block are cat inputs with no
    # elements (5x0), which eager skips: the cat of the others compiles
    g = torch.Generator().manual_seed(3)
    a, b, c = (torch.randint(-9, 9, (5, n), generator=g).to(dtype) for n in (1, 2, 3))
    _check(lambda x, y, z: torch.block_diag(x, y, z), [a, b, c], fallback_log)
    _check(lambda x, y: torch.block_diag(x, torch.zeros(0, 3, dtype=dtype), y), [a, b], fallback_log)


def test_cat_skips_empty_inputs(fallback_log):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    _check(lambda a, e: torch.cat([e, a * 2, e, a], 1), [x, torch.zeros(3, 0)], fallback_log)
    _check(lambda a, e: torch.cat([a, e, a + 1], 0), [x, torch.zeros(0)], fallback_log)   # legacy (0,)
    _check(lambda a, e: torch.cat([e, a], 0), [x, torch.zeros(0, 4)], fallback_log)      # one left


def test_cat_promoting_through_an_empty_input_keeps_eager_dtype(fallback_log):
    # eager promotes across empty inputs too (int64 + an empty float32 -> float32): the
    # rewrite leaves such a cat alone, and the result stays eager's (an island or not)
    x = torch.arange(6).reshape(2, 3)
    fast = mlircap.compile(lambda a, e: torch.cat([a, e], 0))
    for _ in range(2):
        _same(fast(x, torch.zeros(0, 3)), torch.cat([x, torch.zeros(0, 3)], 0))


# --------------------------------------------------------------- as_strided of a 0-d tensor
@pytest.mark.parametrize("dtype", [torch.int8, torch.float32, torch.bool])
@pytest.mark.parametrize("shape", [(1, 1, 1), (1,), ()])
def test_resize_of_a_scalar_compiles(fallback_log, dtype, shape):
    # OpInfo resize_ int8 #2 (x.clone().resize_((1, 1, 1)) of a 0-d x): as_strided of a
    # rank-0 tensor crashed torch-mlir's lowering (the compile worker died)
    x = torch.tensor(-8).to(dtype)
    fast = _check(lambda a: a.clone().resize_(shape), [x], fallback_log)
    assert fast(x.clone()).shape == torch.Size(shape)


def test_as_strided_of_a_scalar_broadcasts_it(fallback_log):
    _check(lambda a: torch.as_strided(a * 2, (2, 3), (0, 0)), [torch.tensor(3.5)], fallback_log)
    _check(lambda a: torch.as_strided(a + 1, (1, 4, 1), (5, 0, 7)), [torch.tensor(-1.25)], fallback_log)


# ------------------------------------------------------------------------------ allclose
@pytest.mark.parametrize("fn,a,b", [
    (lambda x, y: torch.allclose(x, y, rtol=0.1, atol=0.01), torch.tensor(-8.478373527526855),
     torch.tensor(-8.46837329864502)),                                       # OpInfo float32 #0
    (lambda x, y: x.allclose(y, 0.1, 0.01), torch.tensor([-8.47, -1.77, -4.32]), torch.tensor([3.61, -8.07, -0.57])),
    (lambda x, y: torch.allclose(x, y, equal_nan=True), torch.tensor([1.0, float("nan")]),
     torch.tensor([1.0, float("nan")])),
    (lambda x, y: torch.allclose(x, y), torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")])),
    (lambda x, y: torch.allclose(x * 2, y), torch.ones(3, 2), torch.full((2,), 2.0)),     # broadcast
], ids=["0d", "method", "equal_nan", "nan", "computed"])
def test_allclose_is_a_graph_and_a_bool(fallback_log, fn, a, b):
    # eager's allclose is isclose(...).all().item(): the two ops are a compiled graph, the
    # bool after them the only break (the call was one data-dependent step, no graph)
    want = fn(a, b)
    fast = mlircap.compile(fn)
    for _ in range(3):
        got = fast(a.clone(), b.clone())
        assert type(got) is bool and got == want
    assert len(fast.graphs) == 1 and fast.graphs[0].fallback_reason is None
    assert fast.explain().graph_count == 1
    assert "eager islands" not in fallback_log.readouterr().err


def test_allclose_raises_as_eager():
    fast = mlircap.compile(lambda x, y: torch.allclose(x, y))
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        torch.allclose(torch.ones(2), torch.ones(2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        fast(torch.ones(2), torch.ones(2, dtype=torch.float64))


# ------------------------------------------------------------------------ igamma, igammac
def _gamma_points():
    g = torch.Generator().manual_seed(0)
    a = torch.cat([torch.rand(3000, generator=g) * 12, torch.rand(300, generator=g) * 1e-3,
                   torch.rand(300, generator=g) * 40 + 10,
                   torch.tensor([0.0, 0.0, 1.0, -1.0, float("inf"), float("inf"), 2.0, float("nan"), 3.0, 0.5,
                                 1e-30, 20.0, 5.0, -0.0, 7.0])])
    x = torch.cat([torch.rand(3000, generator=g) * 12, torch.rand(300, generator=g) * 5,
                   a[3300:3600] * (0.5 + 0.5 * torch.rand(300, generator=g)),   # large a, x <= a
                   torch.tensor([0.0, 1.0, 0.0, 2.0, float("inf"), 3.0, float("inf"), 1.0, float("nan"), -1.0,
                                 1e-30, 1e-38, -0.0, 4.0, 6.5])])
    return a, x


@pytest.mark.parametrize("name", ["igamma", "igammac"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_incomplete_gamma_compiles_within_eagers_tolerance(fallback_log, name, dtype):
    # eager computes float32 (bfloat16/float16: in float32, rounded once) to ~1.4e-6 of the
    # exact value; compiled: the series in float64, rounded; eager's special cases (NaN for
    # negative operands, a == 0, x == 0, infinities) exactly
    fn = getattr(torch, name)
    a, x = (t.to(dtype) for t in _gamma_points())
    fast = mlircap.compile(lambda p, q: fn(p, q))
    want = fn(a, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            got = fast(a, x)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, equal_nan=True)
            assert torch.equal(got.isnan(), want.isnan())
    special = (a <= 0) | (x <= 0) | a.isinf() | x.isinf() | a.isnan() | x.isnan()
    assert torch.equal(got[special].nan_to_num(), want[special].nan_to_num())   # exactly
    assert "eager islands" not in fallback_log.readouterr().err
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)
    # broadcast operands (OpInfo igamma bfloat16 #7: (10, 1, 5) and (1, 10, 5))
    g = torch.Generator().manual_seed(7)
    p = (torch.rand(10, 1, 5, generator=g) * 18 - 9).to(dtype)
    q = (torch.rand(1, 10, 5, generator=g) * 18 - 9).to(dtype)
    _check_close = mlircap.compile(lambda u, v: fn(u, v))
    for _ in range(2):
        torch.testing.assert_close(_check_close(p, q), fn(p, q), equal_nan=True)


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma_past_the_series_reruns_eagerly(fallback_log, name):
    # x >= a + 64, or a sum whose tail may exceed 1e-14 (a, x ~ 1000; x = 40 for a small a):
    # the flag reruns the call eagerly (eager's values); strict=True raises
    fn = getattr(torch, name)
    fast = mlircap.compile(lambda p, q: fn(p, q))
    strict = mlircap.compile(lambda p, q: fn(p, q), strict=True)
    ok = (torch.tensor([1.0, 2.5, 7.0]), torch.tensor([0.5, 3.0, 9.0]))
    for f in (fast, strict):
        for _ in range(2):
            torch.testing.assert_close(f(*ok), fn(*ok))
    assert "bounds check" not in fallback_log.readouterr().err
    for far in ((torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 80.0, 1.0])),
                (torch.tensor([1.0, 1000.0, 3.0]), torch.tensor([0.5, 1000.0, 1.0])),
                (torch.tensor([1.0, 0.01, 3.0]), torch.tensor([0.5, 40.0, 1.0]))):
        torch.testing.assert_close(fast(*far), fn(*far), rtol=0, atol=0)
        assert "bounds check" in fallback_log.readouterr().err
        with pytest.raises(mlircap.MlircapCompileError, match="bounds check"):
            strict(*far)


# ------------------------------------------------------------------- histc, data bounds
def _histc_inputs():
    g = torch.Generator().manual_seed(0)
    yield torch.randn(5, 5, 5, generator=g) * 3                     # OpInfo float32 #52 shape
    yield torch.randint(-5, 5, (40,), generator=g).float()           # many on the edges
    yield torch.full((7,), 3.0)                                      # min == max: min - 1, max + 1
    yield torch.full((3,), -2.5).bfloat16()
    yield (torch.rand(200, generator=g) * 1e-3 + 7).bfloat16()
    yield torch.randn(100, generator=g).bfloat16() * 1e4
    yield torch.tensor(1.5)                                          # 0-d
    yield torch.tensor([-0.0, 0.0, 1.0])


@pytest.mark.parametrize("bins", [1, 4, 10, 100])
@pytest.mark.parametrize("bound", [0, 7, -1.5])
def test_histc_with_bounds_from_the_data_compiles(fallback_log, bins, bound):
    # min == max (any number): eager bins between the smallest and the largest element
    # (one apart where all are equal); compiled: amin/amax and eager's position arithmetic
    for x in _histc_inputs():
        _check(lambda t: torch.histc(t, bins, bound, bound), [x], fallback_log)


def test_histc_with_bounds_from_non_finite_data_raises_as_eager(fallback_log):
    # a NaN or infinite element: eager raises 'range of [...] is not finite'; compiled, the
    # flag reruns the call eagerly, which raises the same error; equal bounds that stay equal
    # when rounded (1e8 - 1 == 1e8 in float32) rerun too, eager's value
    fast = mlircap.compile(lambda t: torch.histc(t, 3, 0, 0))
    ok = torch.tensor([1.0, 5.0, 2.0])
    for _ in range(2):
        _same(fast(ok), torch.histc(ok, 3, 0, 0))
    for bad in (torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([1.0, float("inf"), 2.0])):
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(bad, 3, 0, 0)
        with pytest.raises(RuntimeError, match="is not finite"):
            fast(bad)
    big = torch.tensor([1e8, 1e8, 1e8])
    _same(fast(big), torch.histc(big, 3, 0, 0))
    assert "bounds check" in fallback_log.readouterr().err
