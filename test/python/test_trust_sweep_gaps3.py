"""OpInfo sweep (bench/opinfo.py, issue 10), seed 17 on 2026-12-03: fallbacks turned into
compiled code. Each case compares compiled calls with eager and checks that the first call's
recording is replayed by the next ones with every graph compiled."""
import re

import pytest
import torch
import torch.nn.functional as F

import mlircap
from mlircap import logs


def _islands(err: str) -> list[str]:
    found = []
    for m in re.finditer(r"eager islands: ([^\n]*)", err):
        found += [i.strip() for i in m.group(1).split(", ") if i.strip()]
    return found


def _replayed(fast):
    cap = fast._compiled._mlircap_capture
    assert cap.stats.records == 1 and cap.stats.replays >= 1, cap.stats
    assert not any(getattr(v, "eager", False) for v in cap.variants), [v.reason for v in cap.variants]
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]


# ----------------------------------------------------------------- ops that ran through torch
def _compiled_whole(fn, args, log, exact=True, meta_only=False):
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    for _ in range(3):
        got = fast(*[a.clone() for a in args])
        assert got.dtype == want.dtype and got.shape == want.shape
        if not meta_only:
            tol = {"rtol": 0, "atol": 0} if exact else {}
            torch.testing.assert_close(got, want, equal_nan=True, **tol)
    err = log.readouterr().err
    assert not _islands(err) and "run through torch" not in err, err
    _replayed(fast)


def _ints(dtype, lo, hi, shape=(6, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_pow_of_tensor_exponents(fallback_log, dtype):
    # eager's powi: square and multiply, wrapping; negative exponents give 1, +-1 or 0
    lo = 0 if dtype == torch.uint8 else -6
    a, b = _ints(dtype, lo, 7), _ints(dtype, lo, 14, seed=1)
    a[0, :3] = torch.tensor([1, 0, 2 if lo == 0 else -1])
    b[0, :3] = torch.tensor([lo, lo + 1, 13])
    _compiled_whole(lambda x, y: torch.pow(x, y) + 1, [a, b], fallback_log)
    _compiled_whole(lambda y: torch.pow(3, y), [b], fallback_log)


def test_integer_pow_mixed_dtypes(fallback_log):
    a, b = _ints(torch.int32, -9, 9), _ints(torch.uint8, 0, 40, seed=2)
    _compiled_whole(lambda x, y: x ** y, [a, b], fallback_log)


def test_uint8_nearest_upsampling(fallback_log):
    # aten._unsafe_index only moves elements: computed in int32 like aten.index (widen.py)
    x = _ints(torch.uint8, 0, 256, shape=(1, 2, 4, 5))
    _compiled_whole(lambda t: F.interpolate(t, scale_factor=2, mode="nearest"), [x], fallback_log)
    _compiled_whole(lambda t: F.interpolate(t, size=(3, 7), mode="nearest-exact"), [x], fallback_log)


def test_new_empty_strided_compiles(fallback_log):
    # an uninitialized allocation like empty_strided: a fill (its values are unspecified)
    x = torch.randn(5)
    _compiled_whole(lambda t: t.new_empty_strided((10,), (1,), dtype=torch.float64), [x], fallback_log,
                    meta_only=True)
    _compiled_whole(lambda t: t.new_empty_strided((2, 3), (3, 1)).fill_(2.0) + t.sum(), [x], fallback_log,
                    exact=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool])
def test_lgamma_compiles(fallback_log, dtype):
    # log|Gamma| in float64 (Lanczos; reflection below 0.5 with the poles at 0 and the
    # negative integers), rounded to the result's dtype
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        x = torch.cat([torch.randn(500, generator=g) * 4, torch.rand(100, generator=g) * 1e-3,
                       -torch.rand(200, generator=g) * 30, torch.randn(100, generator=g) * 1e4,
                       torch.tensor([0.0, -0.0, 1, 2, -1, -2, -3.5, 0.5, -0.5, 1e30, 3e38, -1e30,
                                     float("inf"), float("-inf"), float("nan")])]).to(dtype)
    else:
        x = torch.randint(0 if dtype in (torch.uint8, torch.bool) else -5, 200, (300,), generator=g).to(dtype)
    _compiled_whole(lambda t: torch.lgamma(t), [x], fallback_log, exact=False)
    if dtype == torch.float32:
        _compiled_whole(lambda t: torch.mvlgamma(t.abs() + 3, 5), [x[:500]], fallback_log, exact=False)


# ----------------------------------------------------------------- integer linspace (ranges.py)
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("steps", [1, 2, 7, 50, 301])
def test_integer_linspace_of_tensor_endpoints(fallback_log, dtype, steps):
    # eager truncates start + step * i computed with a fused multiply-add in double: the
    # compiled form computes it with its exact error, and is eager's wherever it is exact
    # or not near an integer (elsewhere the graph reruns eagerly: bounds.py)
    import random

    rng = random.Random(steps)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -10**6), min(info.max, 10**6)

    def f(s, e):
        return torch.linspace(s, e, steps, dtype=dtype)

    fast = mlircap.compile(f)
    for trial in range(12):
        s, e = rng.randint(lo, hi), rng.randint(lo, hi)
        st = torch.tensor(s + (0.75 if s < hi else 0.0)) if trial % 3 == 0 else torch.tensor(s)
        et = torch.tensor(e, dtype=torch.int32 if trial % 2 else torch.int64)
        want, got = f(st, et), fast(st, et)
        assert got.dtype == want.dtype and torch.equal(got, want), (st, et, got, want)
    assert "numerics" not in fallback_log.readouterr().err


@pytest.mark.parametrize("case", [(-2.7, 41, 50, torch.int8), (0, 0, 50, torch.int8), (-2.0, 1, 1, torch.int16),
                                  (50, 0, 1, torch.int64), (-5, 1000, 302, torch.int32), (7, 200, 2, torch.uint8),
                                  (3, 303, 301, torch.int16)])
def test_integer_linspace_compiles_whole(fallback_log, case):
    # no element near an integer it does not compute exactly: nothing reruns
    s, e, steps, dtype = case
    st = torch.tensor(s)
    _compiled_whole(lambda a, b: torch.linspace(a, b, steps, dtype=dtype), [st, torch.tensor(e)], fallback_log)


def test_integer_linspace_constant_end_and_reruns(fallback_log):
    def f(s):
        return torch.linspace(s, 2, 7, dtype=torch.int16) * 3

    fast = mlircap.compile(f)
    for s in (0, 5, -9, 2):   # 0 -> 2 in 7 steps: 1 - 2**-54 is near an integer (rerun eagerly)
        x = torch.tensor(s)
        assert torch.equal(fast(x), f(x))
    assert "numerics" not in fallback_log.readouterr().err


@pytest.mark.parametrize("start", [300, float("nan"), -128.5, 127.5])
def test_integer_linspace_endpoint_eager_rejects_raises(start):
    def f(s, e):
        return torch.linspace(s, e, 5, dtype=torch.int8)

    fast = mlircap.compile(f)
    ok = (torch.tensor(3), torch.tensor(9))
    assert torch.equal(fast(*ok), f(*ok))
    bad = (torch.tensor(start), torch.tensor(4))
    with pytest.raises(RuntimeError):
        f(*bad)
    with pytest.raises(RuntimeError):
        fast(*bad)


# ----------------------------------------------------------------- writes at no index (scatter.py)
@pytest.mark.parametrize("case", ["put_acc", "put", "put_0d", "index_put", "scatter", "index_add", "index_fill",
                                  "put_inplace"])
def test_write_at_no_index_is_a_copy(fallback_log, case):
    # an index op whose index tensor has no element writes nothing: its input (a copy),
    # not an 'empty' eager island
    i = torch.tensor([], dtype=torch.int64)
    s = torch.tensor([])
    x = torch.randn(()) if case == "put_0d" else torch.randn(4, 3)
    fn = {
        "put_acc": lambda t, i, s: torch.put(t, i, s, accumulate=True) * 2,
        "put": lambda t, i, s: torch.put(t, i, s),
        "put_0d": lambda t, i, s: torch.put(t, i, s, accumulate=True),
        "index_put": lambda t, i, s: t.index_put((i,), s.reshape(0, 1)) + 1,
        "scatter": lambda t, i, s: t.scatter(0, i.reshape(0, 1), s.reshape(0, 1)),
        "index_add": lambda t, i, s: t.index_add(0, i, s.reshape(0, 3)),
        "index_fill": lambda t, i, s: t.index_fill(1, i, 2.0),
        "put_inplace": lambda t, i, s: t.clone().put_(i, s) * 3,
    }[case]
    _compiled_whole(fn, [x, i, s], fallback_log)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("shapes", [((5, 5), (5, 5)), ((5, 5), (5,)), ((5,), (3, 5)), ((2, 1, 4), (3, 1))])
def test_masked_scatter_compiles(fallback_log, dtype, shapes):
    # the k-th True takes source's k-th element (a running count of Trues read in source)
    xs, ms = shapes
    g = torch.Generator().manual_seed(0)
    x = _ints(dtype, 0, 2 if dtype == torch.bool else 100, shape=xs)
    m = torch.rand(ms, generator=g) > 0.4
    src = _ints(dtype, 0, 2 if dtype == torch.bool else 100, shape=(40,), seed=3)
    _compiled_whole(lambda a, b, c: torch.masked_scatter(a, b, c), [x, m, src], fallback_log)


def test_masked_scatter_with_too_few_source_elements_raises():
    def f(a, b, c):
        return a.masked_scatter(b, c) * 2

    fast = mlircap.compile(f)
    x, m = torch.randn(4, 4), torch.ones(4, 4, dtype=torch.bool)
    assert torch.equal(fast(x, m, torch.randn(16) * 0 + 1), f(x, m, torch.ones(16)))
    with pytest.raises(RuntimeError):
        f(x, m, torch.ones(15))
    with pytest.raises(RuntimeError):
        fast(x, m, torch.ones(15))


# ----------------------------------------------------------------- the sweep's classification
def _sweep_status(fast, *args):
    import contextlib
    import io

    from test_opinfo import _load_opinfo   # bench/opinfo.py as a module

    opinfo = _load_opinfo()
    logs.set_logs("fallback")
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            fast(*args)
            fast(*args)
    finally:
        logs.set_logs()
    notes = []
    return opinfo.compiled_status(fast, [], buf.getvalue(), notes), notes, opinfo


def test_sweep_counts_a_function_without_tensor_ops_as_nothing_to_compute():
    status, notes, opinfo = _sweep_status(mlircap.compile(lambda a, b: torch.broadcast_shapes(a, b)),
                                          (5, 10, 5), (10, 5))
    assert status is None and notes == [opinfo.NOTHING_TO_COMPUTE], (status, notes)


def test_sweep_does_not_count_an_uncapturable_call_as_nothing_to_compute():
    def f(x):
        torch.manual_seed(3)   # an uncapturable call between (no) graphs
        return x.shape[0]

    status, notes, _ = _sweep_status(mlircap.compile(f), torch.randn(3))
    assert status is not None and not notes, (status, notes)


@pytest.mark.parametrize("case", [((2, 2), (), (0,), False, True, -2), ((3, 3), (2, 2), (1, 1), True, False, 5),
                                  ((3, 2), (1, 2), (1, 0), False, True, 3), (2, None, 1, True, True, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_avg_pool2d_with_divisor_override(fallback_log, case, dtype):
    # window sums over the input divided by the override: the mean over the input elements
    # times their count (a constant of the shapes) over the override
    k, s, p, ceil, incl, d = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 6, generator=g).to(dtype)
    _compiled_whole(lambda t: F.avg_pool2d(t, k, s, p, ceil, incl, d), [x], fallback_log, exact=False)
