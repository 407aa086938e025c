"""OpInfo sweep (bench/opinfo.py, issue 10), seeds 211/223/307 on 2026-12-03: fallbacks
turned into compiled code. Each compiled case compares with eager (bit for bit where the
compiled form follows eager's kernel) and checks that no island ran (the 'fallback' log)."""
import warnings

import pytest
import torch

import mlircap
from compiled_check import check_compiled  # test/python/compiled_check.py
from mlircap import logs


_check = check_compiled


# ----------------------------------------------------------------- Hermite, Laguerre, Legendre
_RECURRENCES = ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


def _degrees_and_points(n=400):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(n, generator=g) * 3, torch.rand(n, generator=g) * 2 - 1,
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 1.0, -1.0, float("inf"), -float("inf"), 2.0, -3.0])])
    deg = torch.cat([torch.randint(-3, 17, (2 * n,), generator=g).float() + torch.rand(2 * n, generator=g) * 0.9,
                     torch.tensor([3.0, 4.0, 5.0, 6.0, 0.0, -1.0, 2.0, 3.0, 1.0, 16.0])])
    return x, deg


@pytest.mark.parametrize("name", _RECURRENCES)
def test_recurrence_polynomials_compile_bit_for_bit(fallback_log, name):
    # eager's kernel contracts r = a * q - k * p to a fused multiply-add: without it a third
    # of the float32 values differed in their last bits
    fn = getattr(torch.special, name)
    x, deg = _degrees_and_points()
    _check(lambda a, b: fn(a, b), [x, deg], fallback_log)
    # integer operands compute in float32 (a broadcast degree, as OpInfo's samples)
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.int8, torch.int64, torch.uint8, torch.bool):
        lo = 0 if dtype in (torch.uint8, torch.bool) else -9
        xi = torch.randint(lo, 10, (5, 10), generator=g).to(dtype)
        ni = torch.randint(lo, 10, (10,), generator=g).to(dtype)
        _check(lambda a, b: fn(a, b), [xi, ni], fallback_log)


@pytest.mark.parametrize("name", _RECURRENCES)
def test_recurrence_polynomials_past_the_bound_rerun_eagerly(capsys, name):
    # a degree above MAX_DEGREE or not finite sets the flag: the call reruns eagerly
    # (eager's values, logged as an island); strict=True raises
    fn = getattr(torch.special, name)
    x = torch.tensor([0.3, 2.0, 0.7])
    fast = mlircap.compile(lambda a, b: fn(a, b))
    strict = mlircap.compile(lambda a, b: fn(a, b), strict=True)
    ok = torch.tensor([3.0, 4.0, 2.0])
    for f in (fast, strict):
        f(x, ok)
        torch.testing.assert_close(f(x, ok), fn(x, ok), rtol=0, atol=0)
    for n in (torch.tensor([3.0, 40.0, 2.0]), torch.tensor([3.0, float("nan"), 2.0])):
        logs.set_logs("fallback")
        try:
            torch.testing.assert_close(fast(x, n), fn(x, n), equal_nan=True)
        finally:
            logs.set_logs()
        assert "bounds check" in capsys.readouterr().err
        with pytest.raises(mlircap.MlircapCompileError, match="bounds check"):
            strict(x, n)


@pytest.mark.parametrize("name", ["laguerre_polynomial_l", "legendre_polynomial_p"])
def test_nan_points_rerun_where_eager_disagrees_with_itself(capsys, name):
    # eager returns 0 (or its uninitialized r: 1.5e-41 seen) or NaN for a NaN x of degree
    # >= 2 depending on the call (one element: not NaN; eight elements of degrees -1..6:
    # NaN at degree 3): such calls rerun eagerly
    fn = getattr(torch.special, name)
    assert not fn(torch.tensor([float("nan")]), torch.tensor([3.0])).isnan().any()
    assert fn(torch.full((8,), float("nan")), torch.arange(-1.0, 7.0))[4].isnan()
    fast = mlircap.compile(lambda a, b: fn(a, b))
    x, n = torch.tensor([float("nan"), 0.5, 2.0]), torch.tensor([3.0, 2.0, 4.0])
    fast(x, n)
    logs.set_logs("fallback")
    try:
        torch.testing.assert_close(fast(x, n)[1:], fn(x, n)[1:], rtol=0, atol=0)
    finally:
        logs.set_logs()
    assert "bounds check" in capsys.readouterr().err
    # NaN of degree 0 and 1 is the same in both loops: compiled
    _check(lambda a, b: fn(a, b), [torch.tensor([float("nan"), float("nan"), 0.5]), torch.tensor([0.0, 1.0, 3.0])],
           capsys)


# ----------------------------------------------------------------- histc (histogram.py)
def _hist_inputs(dtype, shape, lo, hi, bins):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 6).to(dtype)
    if x.numel() > 3:
        x.view(-1)[1] = float("nan")
        x.view(-1)[2] = float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bins,lo,hi", [(100, 0, 10), (1, 0, 10), (3, -10, 10), (10, -10, 0), (7, -3.3, 2.9),
                                        (13, -1, 1.7)])
def test_histc_compiles_like_eager(fallback_log, dtype, bins, lo, hi):
    for shape in [(), (5,), (5, 5), (5, 5, 5)]:
        x = _hist_inputs(dtype, shape, lo, hi, bins)
        _check(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), [x], fallback_log)
    # every edge, many times: eager's division puts some inner edges in the bin below
    # (7 bins over [-3.3, 2.9]: the edge -0.6428... in bin 2); the ends in the first/last bin
    edges = torch.linspace(lo, hi, bins + 1, dtype=dtype)
    x = torch.cat([edges] * (217 // (bins + 1) + 1))[:217]
    _check(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), [x], fallback_log)


def test_histc_inner_edge_in_the_bin_below_as_eager():
    e = torch.linspace(-3.3, 2.9, 8)
    assert torch.histc(e[3:4], bins=7, min=-3.3, max=2.9).nonzero().item() == 2   # eager's own answer
    fast = mlircap.compile(lambda t: torch.histc(t, bins=7, min=-3.3, max=2.9))
    fast(e)
    torch.testing.assert_close(fast(e), torch.histc(e, bins=7, min=-3.3, max=2.9), rtol=0, atol=0)


def test_histc_bounds_from_the_data_and_large_bf16_run_through_torch():
    # min == max (the data's extrema; eager raises for NaN/inf ones) and bfloat16 past 256
    # elements (counts past 256 are not all bfloat16 numbers) stay whole: same results,
    # through torch
    x = torch.randn(40)
    fast = mlircap.compile(lambda t: torch.histc(t, bins=5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast(x)
        torch.testing.assert_close(fast(x), torch.histc(x, bins=5), rtol=0, atol=0)
    y = torch.full((300,), 0.5, dtype=torch.bfloat16)
    slow = mlircap.compile(lambda t: torch.histc(t, bins=2, min=0, max=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        slow(y)
        torch.testing.assert_close(slow(y), torch.histc(y, bins=2, min=0, max=1), rtol=0, atol=0)


# ----------------------------------------------------------------- median, kthvalue, mode (selection.py)
def _sel_inputs(dtype):
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        x = torch.randint(-3, 4, (4, 9), generator=g).to(dtype)     # ties, -0.0 / 0.0
        x[0, 2], x[1, 4] = -0.0, 0.0
        x[2, ::2] = float("nan")
        x[3, :] = float("nan")                                       # all NaN: nanmedian's index
        return x
    lo = 0 if dtype in (torch.uint8, torch.bool) else -5
    return torch.randint(lo, 6, (4, 9), generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.uint8])
def test_median_and_nanmedian_compile_like_eager(fallback_log, dtype):
    # std::nth_element with eager's (value, index) comparator: a total order, so values and
    # indices are eager's (NaN rows: median's first NaN; nanmedian of only NaN: eager's index
    # for that length)
    x = _sel_inputs(dtype)
    _check(lambda t: torch.median(t), [x], fallback_log)
    _check(lambda t: torch.nanmedian(t), [x], fallback_log)
    _check(lambda t: torch.median(t, 1), [x], fallback_log)
    _check(lambda t: torch.nanmedian(t, 0, True), [x], fallback_log)
    _check(lambda t: torch.median(t[0, 0], 0), [x], fallback_log)   # 0-d


def test_nanmedian_all_nan_rows_of_every_length(fallback_log):
    for n in (1, 2, 3, 4, 5, 7, 8, 17):
        x = torch.full((2, n), float("nan"))
        x[1, 0] = 1.0
        _check(lambda t: torch.nanmedian(t, 1), [x], fallback_log, calls=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.uint8])
def test_kthvalue_of_distinct_values_compiles(fallback_log, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randperm(60, generator=g).reshape(5, 12).to(dtype)
    if dtype.is_floating_point:
        x[1, 3] = float("nan")   # after every number
    for k in (1, 4, 12):
        _check(lambda t: torch.kthvalue(t, k, 1), [x], fallback_log, calls=2)
    _check(lambda t: torch.kthvalue(t, 2, 0, True), [x], fallback_log, calls=2)


def test_kthvalue_with_ties_reruns_eagerly(capsys):
    # quickselect's swaps decide which of equal elements' index eager returns: the flag
    x = torch.tensor([[3, 1, 3, 2, 3], [5, 4, 3, 2, 1]])
    fast = mlircap.compile(lambda t: torch.kthvalue(t, 4, 1))
    fast(x)
    logs.set_logs("fallback")
    try:
        got, want = fast(x), torch.kthvalue(x, 4, 1)
    finally:
        logs.set_logs()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert "bounds check" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.uint8, torch.bool])
def test_mode_compiles_like_eager(fallback_log, dtype):
    # up to 16 elements std::sort is stable: the mode's largest index
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0 if dtype in (torch.uint8, torch.bool) else -2, 3, (5, 6, 7), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[0, 0, 0], x[0, 0, 1] = -0.0, 0.0
    for d in (0, 1, 2):
        _check(lambda t: torch.mode(t, d), [x], fallback_log, calls=2)
    _check(lambda t: torch.mode(t[0, 0, 0]), [x], fallback_log, calls=2)   # 0-d
    # longer rows of distinct values: the smallest, its index
    y = torch.stack([torch.randperm(40, generator=g) for _ in range(3)]).to(torch.float32)
    _check(lambda t: torch.mode(t, 1), [y], fallback_log, calls=2)


def test_mode_of_long_rows_with_repeats_or_nan_reruns_eagerly(capsys):
    x = torch.arange(40.0).remainder(7).reshape(2, 20)
    for t in (x, torch.tensor([1.0, float("nan"), 1.0])):
        fast = mlircap.compile(lambda a: torch.mode(a, -1))
        fast(t)
        logs.set_logs("fallback")
        try:
            got, want = fast(t), torch.mode(t, -1)
        finally:
            logs.set_logs()
        torch.testing.assert_close(got[0], want[0], equal_nan=True)
        assert torch.equal(got[1], want[1])
        assert "bounds check" in capsys.readouterr().err
