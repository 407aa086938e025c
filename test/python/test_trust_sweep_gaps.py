"""OpInfo sweep (bench/opinfo.py, issue 10), seeds 404 and 7: fallbacks turned into compiled
code, one wrong result the new compiled forms exposed, the strict=True contract for graphs
that run compiled with bounded or speculated parts, and the sweep's classification of
designed library calls. Each compiled case compares with eager and checks that every graph
compiled and no eager island ran (the 'fallback' log)."""
import functools
import warnings

import pytest
import torch
import torch.nn.functional as F

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py
from mlircap import logs
from test_opinfo import _load_opinfo   # bench/opinfo.py as a module


_same = same
_check = functools.partial(check_compiled, warnings_error=False)


INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _ints(dtype, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (n,), dtype=dtype, generator=g)
    b = torch.randint(info.min, info.max, (n,), dtype=dtype, generator=g)
    small = torch.randint(0 if dtype == torch.uint8 else -12, 12, (n,), generator=g).to(dtype)
    a[: n // 2], b[: n // 2] = small[: n // 2], small.flip(0)[: n // 2]
    a[:4] = torch.tensor([0, 0, info.min, info.max]).to(dtype)
    b[:4] = torch.tensor([0, 5, 0, info.max - 1]).to(dtype)
    return a, b


# ----------------------------------------------------------------- gcd / lcm (intmath.py)
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", [torch.gcd, torch.lcm])
def test_gcd_lcm(fallback_log, op, dtype):
    a, b = _ints(dtype)
    _check(lambda x, y: op(x, y), [a, b], fallback_log)


def test_gcd_fibonacci_worst_case(fallback_log):
    f = [0, 1]
    while f[-1] < 2 ** 62:
        f.append(f[-1] + f[-2])
    a, b = torch.tensor(f[2:-1]), torch.tensor(f[3:])
    _check(lambda x, y: torch.gcd(x, y) + 0, [a, b], fallback_log)


# ----------------------------------------------------------------- all / any (intmath.py)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int32, torch.bool])
@pytest.mark.parametrize("case", ["all", "any", "all_dims", "any_dims_keep", "all_dims_empty", "any_0d_empty_dims"])
def test_all_any(fallback_log, dtype, case):
    x = torch.tensor([[0, 3, 200], [1, 1, 7]]).to(dtype)
    fn = {"all": lambda t: torch.all(t), "any": lambda t: torch.any(t, 1),
          "all_dims": lambda t: torch.all(t, dim=(0, 1)), "any_dims_keep": lambda t: torch.any(t, dim=(1,), keepdim=True),
          "all_dims_empty": lambda t: torch.all(t, dim=()), "any_0d_empty_dims": lambda t: torch.any(t[0, 1], dim=())}[case]
    if dtype == torch.float32:
        x[1, 2] = float("nan")
    _check(fn, [x], fallback_log)


# ----------------------------------------------------------------- uint8 computed in int32 (widen.py)
@pytest.mark.parametrize("case", ["mm", "matmul_batched", "linear_bias", "rot90", "floor_divide", "zero_"])
def test_uint8_ops(fallback_log, case):
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 256, (4, 5), dtype=torch.uint8, generator=g)
    b = torch.randint(0, 256, (5, 3), dtype=torch.uint8, generator=g)
    fn, args = {"mm": (lambda x, y: torch.mm(x, y), [a, b]),
                "matmul_batched": (lambda x, y: torch.matmul(x.expand(2, 4, 5), y), [a, b]),
                "linear_bias": (lambda x, w, c: F.linear(x, w, c), [a, b.t().contiguous(), b[0].clone()]),
                "rot90": (lambda x: torch.rot90(x, 1, (0, 1)) + 1, [a]),
                "floor_divide": (lambda x, y: torch.floor_divide(x, y[:4, :3].clamp_min(1).repeat(1, 2)[:, :5]),
                                 [a, torch.randint(1, 256, (5, 6), dtype=torch.uint8, generator=g)]),
                "zero_": (lambda x: x.clone().zero_() + x, [a])}[case]
    _check(fn, args, fallback_log)


# ----------------------------------------------------------------- cummax / cummin / logcumsumexp
def _special(dtype):
    x = torch.tensor([[1.0, 3.0, -0.0, 0.0, 3.0, float("nan"), 5.0, float("nan"), 2.0],
                      [float("-inf"), float("-inf"), -1.0, 7.0, 7.0, 0.0, -0.0, 0.0, 8.0]])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("dim", [0, 1])
def test_cummax_cummin(fallback_log, op, dtype, dim):
    x = _special(torch.float32)
    x = x.to(dtype) if dtype.is_floating_point else x.nan_to_num(0, 9, -9).to(dtype)
    _check(lambda t: tuple(op(t, dim)), [x], fallback_log)
    if dtype.is_floating_point:   # the sign of a zero tie, exactly eager's
        got = mlircap.compile(lambda t: op(t, dim).values)(x)
        assert torch.equal(torch.signbit(got), torch.signbit(op(x, dim).values))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logcumsumexp(fallback_log, dtype):
    x = torch.cat([_special(torch.float32), torch.tensor([[float("inf"), 1.0, float("-inf"), 2.0, 1e4, -1e4,
                                                            0.5, 3.0, float("inf")]])]).to(dtype)
    _check(lambda t: torch.logcumsumexp(t, 1), [x], fallback_log, exact=False)
    _check(lambda t: torch.logcumsumexp(t, 0), [torch.randn(40, 3).to(dtype)], fallback_log, exact=False)


# ----------------------------------------------------------------- data-dependent ops with a static form
STATIC_CASES = {
    "nonzero_empty": (lambda x: torch.nonzero(x), torch.zeros(5, 0, 5, dtype=torch.int64)),
    "nonzero_empty_tuple": (lambda x: torch.nonzero(x, as_tuple=True), torch.zeros(5, 0, 5)),
    "nonzero_0d": (lambda x: torch.nonzero(x), torch.tensor(3)),
    "nonzero_0d_zero": (lambda x: torch.nonzero(x), torch.tensor(0.0)),
    "nonzero_0d_tuple": (lambda x: torch.nonzero(x, as_tuple=True), torch.tensor(True)),
    "argwhere_0d": (lambda x: torch.argwhere(x), torch.tensor(-2, dtype=torch.int32)),
    "unique_empty_dim": (lambda x: torch.unique(x, return_inverse=True, return_counts=True, dim=1),
                         torch.zeros(5, 0, 5, dtype=torch.bool)),
    "unique_empty": (lambda x: torch.unique(x, return_inverse=True), torch.zeros(3, 0)),
    "unique_consecutive_empty": (lambda x: torch.unique_consecutive(x, return_counts=True, dim=1),
                                 torch.zeros(5, 0, 5, dtype=torch.int16)),
}


@pytest.mark.parametrize("name", sorted(STATIC_CASES))
def test_data_dependent_op_with_a_static_result(fallback_log, name):
    fn, x = STATIC_CASES[name]
    _check(fn, [x], fallback_log)


@pytest.mark.parametrize("n,r,rep", [(1, 1, False), (4, 2, False), (4, 2, True), (3, 3, False), (3, 4, False),
                                     (3, 0, False), (5, 3, True)])
def test_combinations(fallback_log, n, r, rep):
    x = torch.arange(n, dtype=torch.float32) * 1.5 - 1
    _check(lambda t: torch.combinations(t, r, rep), [x], fallback_log)


# ----------------------------------------------------------------- special functions (special.py)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32])
def test_digamma(fallback_log, dtype):
    x = torch.cat([torch.linspace(-30.5, 30.25, 97), torch.tensor([0.0, -0.0, -1.0, -2.0, 10.0, 1e-3, 1e18,
                                                                 float("inf"), float("nan"), -100.3, 1.4616321])])
    x = x.to(dtype) if dtype.is_floating_point else torch.arange(-5, 40, dtype=dtype)
    _check(lambda t: torch.digamma(t), [x], fallback_log, exact=False)
    _check(lambda t: torch.polygamma(0, t) * 2, [x], fallback_log, exact=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_hypot(fallback_log, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.cat([torch.randn(60, generator=g) * 1e3, torch.tensor([0.0, float("inf"), float("nan"), 3e38, 1e-40])])
    b = torch.cat([torch.randn(60, generator=g), torch.tensor([-0.0, float("nan"), float("inf"), 3e38, 1e-40])])
    _check(lambda x, y: torch.hypot(x, y), [a.to(dtype), b.to(dtype)], fallback_log, exact=dtype != torch.float64)
    _check(lambda x, y: torch.hypot(x, y[:1]), [a.to(dtype), b.to(dtype)], fallback_log, exact=dtype != torch.float64)


# ----------------------------------------------------------------- 1-D convolutions as 2-D library steps
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stride,padding,dilation,bias", [(1, 0, 1, True), (2, 1, 1, False), (1, 2, 2, True)])
def test_conv1d_is_a_plan_convolution(fallback_log, dtype, stride, padding, dilation, bias):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 4, 17, generator=g).to(dtype), torch.randn(6, 4, 3, generator=g).to(dtype)
    c = torch.randn(6, generator=g).to(dtype) if bias else None
    fn = lambda t, k: F.conv1d(t, k, c, stride, padding, dilation)   # noqa: E731
    # bit for bit, also with a bias: the CPU plan hands it to the library convolution, which
    # adds it inside its accumulation as eager's oneDNN kernel does (added after the
    # convolution it was 1 ulp apart on AVX2: test_conv_bias)
    _check(fn, [x, w], fallback_log, exact=dtype == torch.float32)


# ----------------------------------------------------------------- bf16 matrix products and their f32 result
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_addmm_rounds_once(fallback_log, dtype):
    # eager adds the bias to the f32 product and rounds once: was an eager island
    # (numerics); now the f32 product of the converted operands plus the bias, rounded once
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(s, generator=g).to(dtype) for s in ((16, 32), (32, 24), (24,)))
    _check(lambda x, y, z: torch.addmm(z, x, y), [a, b, c], fallback_log, exact=False)
    _check(lambda x, w, z: F.linear(x, w, z), [a, b.t().contiguous(), c], fallback_log, exact=False)
    got = mlircap.compile(lambda x, y, z: torch.addmm(z, x, y))(a, b, c)
    assert (got != torch.addmm(c, a, b)).sum() <= 1   # at most an f32 summation-order tie


def test_f32_product_of_upcast_bf16_is_not_rounded_to_bf16(fallback_log):
    # mlircap-narrow-library-operands stored the f32 result of a matmul of upcast bf16
    # tensors in bf16 whatever its users did with it: `a.float() @ b.float()` came back
    # rounded to bf16 (0.06 off on 16x32x8, against f32's 1e-5 tolerance). It is stored
    # narrow only where every use rounds it to bf16 (a bf16 matmul), and the CPU
    # library step computes bf16 x bf16 -> f32 in f32.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 32, generator=g).bfloat16(), torch.randn(32, 8, generator=g).bfloat16()
    _check(lambda x, y: x.float() @ y.float(), [a, b], fallback_log, exact=False)
    _check(lambda x, y: torch.bmm(x.float().expand(2, 16, 32), y.float().expand(2, 32, 8)) * 3, [a, b],
           fallback_log, exact=False)
    x, w = torch.randn(1, 4, 8, 8, generator=g).bfloat16(), torch.randn(8, 4, 3, 3, generator=g).bfloat16()
    _check(lambda t, k: F.conv2d(t.float(), k.float()) + 1, [x, w], fallback_log, exact=False)
    # a genuine bf16 matmul keeps its bf16 result
    _check(lambda x, y: torch.mm(x, y) * 2, [a, b], fallback_log, exact=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_conv_bias_rounds_once(fallback_log, dtype):
    # eager's oneDNN kernel adds the bias before its one rounding; the plan rounded the
    # library convolution and added the bias after (56 of 180 elements off)
    g = torch.Generator().manual_seed(0)
    x, w, c = (torch.randn(s, generator=g).to(dtype) for s in ((2, 4, 5, 17), (6, 4, 2, 3), (6,)))
    _check(lambda t, k, b: F.conv2d(t, k, b), [x, w, c], fallback_log, exact=False)
    _check(lambda t, k, b: F.relu(F.conv2d(t, k, b, padding=1)), [x, w, c], fallback_log, exact=False)
    got = mlircap.compile(lambda t, k, b: F.conv2d(t, k, b))(x, w, c)
    assert (got != F.conv2d(x, w, c)).sum() <= 2   # f32 summation-order ties at most


# ----------------------------------------------------------------- strict=True: raises only for eager execution
def test_strict_runs_bounded_data_dependent_ops_compiled():
    x = torch.tensor([1, 1, 2, 3, 0, 3])
    for f in (lambda t: torch.unique(t) * 2, lambda t: t.nonzero() + 1,
              lambda t: torch.unique(t, return_counts=True)[1] * 2, lambda t: torch.nonzero(t[0]) + 1):
        fast = mlircap.compile(f, strict=True)
        for _ in range(2):
            torch.testing.assert_close(fast(x), f(x), rtol=0, atol=0)


def test_strict_raises_where_the_op_runs_through_torch():
    x = torch.tensor([1.0, 1.0, 2.0, 3.0])
    with pytest.raises(mlircap.MlircapCompileError, match="data"):   # (a mask past bounded.py's 1024)
        mlircap.compile(lambda t: t[t > 1] * 3, strict=True)(torch.arange(2048.0) % 4)
    # unique of floats with NaN: eager's unstable sort decides, the bounded form reruns
    # torch's op; strict=True raises for that call instead
    fast = mlircap.compile(lambda t: torch.unique(t) * 2, strict=True)
    torch.testing.assert_close(fast(x), torch.unique(x) * 2)
    with pytest.raises(mlircap.MlircapCompileError, match="NaN"):
        fast(torch.tensor([1.0, float("nan"), 2.0, 1.0]))


def test_strict_runs_speculated_graphs_and_raises_on_a_failed_guard():
    f = lambda x, t, v: F.gaussian_nll_loss(x, t, v)   # noqa: E731
    fast = mlircap.compile(f, strict=True)
    x, t = torch.randn(3), torch.randn(3)
    for v in (torch.rand(3) + 0.1, torch.rand(3) + 0.2):
        torch.testing.assert_close(fast(x, t, v), f(x, t, v))
    with pytest.raises(mlircap.MlircapCompileError, match="strict=True"):
        fast(x, t, -torch.rand(3) - 0.1)   # eager raises ValueError: would rerun eagerly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = mlircap.compile(f)
        default(x, t, torch.rand(3) + 0.1)
        with pytest.raises(ValueError):
            default(x, t, -torch.rand(3) - 0.1)


# ----------------------------------------------------------------- the sweep's classification
def test_sweep_counts_library_calls_next_to_compiled_parts_only():
    opinfo = _load_opinfo()
    x = torch.randn(4, 5)
    with torch.no_grad():
        both = mlircap.compile(lambda t: F.log_softmax(t.double() * 2, 1) + 1)   # compiled parts + library call
        alone = mlircap.compile(lambda t: F.log_softmax(t, 1))                    # the library call only
        for fast in (both, alone):
            logs.set_logs("fallback")
            import contextlib
            import io

            buf = io.StringIO()
            try:
                with contextlib.redirect_stderr(buf):
                    fast(x)
                    fast(x)
            finally:
                logs.set_logs()
            notes = []
            status = opinfo.compiled_status(fast, [], buf.getvalue(), notes)
            if fast is both:
                assert status is None and notes == ["library calls: _log_softmax"], (status, notes, buf.getvalue())
            else:
                assert status is not None, notes   # runs eagerly: a fallback
    assert opinfo._library_islands(["_log_softmax (library)", "convolution (library)"]) == \
        ["_log_softmax", "convolution"]
    assert opinfo._library_islands(["_log_softmax (library)", "addmm (numerics)"]) is None
