"""Special functions torch-mlir cannot import, compiled as eager's CPU kernels compute them
(issue 10: the OpInfo sweep ran them eagerly): i0, special.i0e/i1/i1e, the modified Bessel
functions I0, I1, K0, K1 (and the scaled K0, K1), Bessel J0, J1, Y0, Y1, spherical_bessel_j0,
airy_ai (special_bessel.py), erfc, erfcx, log_ndtr, ndtri and erfinv (special_erf.py). Each case
checks that every graph compiled with no eager island (the 'fallback' log, the graphs'
fallback_reason) and that the values match eager's on dense grids and at the edges of each
function (NaN, +-inf, 0, poles, the boundaries of each algorithm's intervals, overflow),
NaN and inf positions exactly, finite values within a few ulp of eager's (near the zeros of
J, Y and Ai: a few ulp of the function's scale)."""
import math
import warnings

import pytest
import torch

import mlircap
from mlircap import logs


@pytest.fixture
def fallback_log(capsys, monkeypatch):
    # erfc and erfinv are CPU library calls by default (partition.CPU_LIBRARY_OPS: eager's MKL
    # kernels are several times faster); their compiled forms are checked here as they run with
    # MLIRCAP_CPU_LIBRARY_OPS=0
    monkeypatch.setenv("MLIRCAP_CPU_LIBRARY_OPS", "0")
    logs.set_logs("fallback")
    yield capsys
    logs.set_logs()


@pytest.mark.parametrize("op", [torch.erfc, torch.erfinv])
def test_erfc_and_erfinv_are_cpu_library_calls_by_default(op):
    x = torch.linspace(-0.999, 0.999, 1001)
    fast = mlircap.compile(lambda t: op(t) * 2 + 1)
    for _ in range(2):
        got, want = fast(x), op(x) * 2 + 1
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


def _compiled(fn, args, log):
    """fn compiled and run twice (record, then the compiled code): its second result, after
    checking that every graph compiled and no eager island ran."""
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no 'runs through torch' / 'eagerly' warning
        fast(*[a.clone() for a in args])
        got = fast(*[a.clone() for a in args])
    err = log.readouterr().err
    assert "eager islands" not in err, err
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    return got


# the boundaries of the algorithms' intervals, and the values around them
_BOUNDS = [0.5, 1.0, 2.0, 2.09, 5.0, 8.0, 8.3203353, 26.7, 50.0, 103.892, 5e7, 6.1, 1e-5, 0.13533528323661269189,
           1 - 0.13533528323661269189]


def _inputs(dtype):
    inf, nan = float("inf"), float("nan")
    f = torch.finfo(dtype)
    g = torch.Generator().manual_seed(10)
    b = torch.tensor(_BOUNDS, dtype=dtype)
    around = torch.cat([b, torch.nextafter(b, b * 2), torch.nextafter(b, b * 0)])
    top = 700.0 if dtype == torch.float64 else 88.0
    mags = torch.exp(torch.linspace(-top, top, 1501, dtype=dtype))
    edges = torch.tensor([0.0, -0.0, 1.0, inf, -inf, nan, f.max, f.tiny, f.tiny / 4, f.eps, 1 - f.eps / 2, 40.0, 20.0,
                          -40.0, -20.0, -8.0, -5.0, -3.0], dtype=dtype)
    return torch.cat([torch.linspace(-30, 30, 6001, dtype=dtype), torch.randn(3000, generator=g, dtype=dtype) * 6,
                      torch.rand(2000, generator=g, dtype=dtype), around, -around, mags, -mags, edges])


def _close(got, want, dtype, ulps=16, scale=None):
    """NaN and inf positions as eager's; finite values within `ulps` ulp of eager's, or of
    `scale` (the function's magnitude there, where it crosses zero)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), (got[torch.isnan(got) != nan], want[torch.isnan(got) != nan])
    inf = torch.isinf(want)
    assert torch.equal(got[inf], want[inf]) and not torch.isinf(got[~inf & ~nan]).any()
    fin = ~inf & ~nan
    eps = torch.finfo(dtype).eps
    bound = ulps * eps * want[fin].abs().double()
    if scale is not None:
        bound = torch.maximum(bound, ulps * eps * scale[fin].double())
    bound = torch.maximum(bound, torch.full_like(bound, torch.finfo(dtype).tiny))   # eager's subnormals
    err = (got[fin].double() - want[fin].double()).abs()
    if err.numel():
        worst = int((err - bound).argmax())
        assert (err <= bound).all(), (int((err > bound).sum()), got[fin][worst].item(), want[fin][worst].item())


def _bessel_scale(x):   # J and Y oscillate with the amplitude sqrt(2 / (pi x)) beyond x = 5
    return torch.sqrt(2 / (math.pi * x.abs().clamp(min=1.0)))


def _airy_scale(x):   # Ai oscillates with the amplitude |x|^(-1/4) / sqrt(pi) below 0
    return torch.where(x < 0, x.abs().clamp(min=1.0) ** -0.25 / math.sqrt(math.pi), torch.zeros_like(x))


S = torch.special
_OPS = {
    "i0": (torch.i0, None), "i0e": (S.i0e, None), "i1": (S.i1, None), "i1e": (S.i1e, None),
    "modified_bessel_i0": (S.modified_bessel_i0, None), "modified_bessel_i1": (S.modified_bessel_i1, None),
    "modified_bessel_k0": (S.modified_bessel_k0, None), "modified_bessel_k1": (S.modified_bessel_k1, None),
    "scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0, None),
    "scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1, None),
    "bessel_j0": (S.bessel_j0, _bessel_scale), "bessel_j1": (S.bessel_j1, _bessel_scale),
    "bessel_y0": (S.bessel_y0, _bessel_scale), "bessel_y1": (S.bessel_y1, _bessel_scale),
    "spherical_bessel_j0": (S.spherical_bessel_j0, lambda x: 1 / x.abs().clamp(min=1.0)),
    "airy_ai": (S.airy_ai, _airy_scale), "erfc": (torch.erfc, None), "erfcx": (S.erfcx, None),
    "log_ndtr": (S.log_ndtr, None), "ndtri": (S.ndtri, None), "erfinv": (torch.erfinv, None),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(_OPS))
def test_special_function_compiles_like_eager(name, dtype, fallback_log):
    op, scale = _OPS[name]
    x = _inputs(dtype)
    if name in ("ndtri", "erfinv"):   # probabilities: [0, 1] (erfinv: [-1, 1]), both tails, and outside
        g = torch.Generator().manual_seed(11)
        x = torch.cat([x, torch.rand(4000, generator=g, dtype=dtype), torch.rand(1000, generator=g, dtype=dtype) ** 20,
                       1 - torch.rand(1000, generator=g, dtype=dtype) * 1e-6])
        x = torch.cat([x, -x]) if name == "erfinv" else x
    want = op(x)
    got = _compiled(lambda v: op(v), [x], fallback_log)
    _close(got, want, dtype, scale=None if scale is None else scale(x))


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3)], ids=str)
def test_zero_dim_and_empty_inputs(shape, fallback_log):
    # a 0-d x: erfcx's table row x[i] read i with .item() (a data-dependent graph, eager)
    x = torch.full(shape, 0.7)
    ops = [op for op, _ in _OPS.values()]
    want = [op(x) for op in ops]
    got = _compiled(lambda v: tuple(op(v) for op in ops), [x], fallback_log)
    for g, w in zip(got, want):
        _close(g, w, torch.float32)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool], ids=str)
def test_integer_inputs_compute_in_the_default_float_dtype(dtype, fallback_log):
    x = torch.arange(-12, 40).to(dtype) if dtype != torch.bool else torch.tensor([True, False, True])

    # one graph: airy_ai with erfcx's [N, 7] gather of table rows (bounds-checked) was
    # rejected by the CPU plan builder (mlircap-fuse-elementwise did not converge) and the
    # gathers ran as eager islands; the columns are gathered one by one since
    def fn(v):
        return (torch.i0(v), S.i1e(v), S.bessel_j1(v), S.modified_bessel_k0(v), S.airy_ai(v), S.erfcx(v), v.erfc(),
                S.ndtri(v), S.log_ndtr(v), v.erfinv())

    want = fn(x)
    got = _compiled(fn, [x], fallback_log)
    for g, w in zip(got, want):
        assert w.dtype == torch.float32
        _close(g, w, torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_computes_in_float32_and_rounds_once(dtype, fallback_log):
    # eager's i0, i1, i1e, erfc and erfinv kernels upcast bfloat16/float16 to float32 and round
    # once: the same rounding but where the float32 values (a few ulp apart) straddle a
    # rounding boundary of the dtype (one ulp of it; 42 of 14111 float16 elements of i1)
    x = _inputs(torch.float32).clamp(-80, 80).to(dtype)

    def fn(v):
        return torch.i0(v), S.i1(v), S.i1e(v), v.erfc(), (v / 100).erfinv()

    want = fn(x)
    got = _compiled(fn, [x], fallback_log)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=2 * torch.finfo(dtype).eps, atol=torch.finfo(dtype).tiny)
        assert ((g != w) & ~(g.isnan() & w.isnan())).sum() <= g.numel() // 200


def test_log_ndtr_tails_keep_float64_precision(fallback_log):
    # the upper tail is log1p(-erfc(t) / 2), erfc ~ 1e-105 at x = 21.7: the compiled float64
    # log1p is log(1 + u), which gave 0 there; the lower tail subtracts t^2 from log(erfcx)
    x = torch.cat([torch.linspace(5, 37, 4001, dtype=torch.float64), -torch.logspace(0, 150, 301, dtype=torch.float64)])
    want = S.log_ndtr(x)
    got = _compiled(lambda v: S.log_ndtr(v), [x], fallback_log)
    assert (want[x > 21] != 0).all()
    _close(got, want, torch.float64)


def test_special_functions_fuse_with_other_ops(fallback_log):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(64, 33, generator=g) * 4

    def fn(v):
        r = S.bessel_j0(v) * S.i0e(v) + v.erfc() - S.airy_ai(v) / (1 + S.modified_bessel_k1(v.abs() + 0.1))
        return r.sum(-1), S.erfcx(v).amax(0), S.ndtri(torch.sigmoid(v)) * 2

    want = fn(x)
    for gv, w in zip(_compiled(fn, [x], fallback_log), want):
        torch.testing.assert_close(gv, w, rtol=4e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e", "erfc", "erfcx", "log_ndtr", "ndtri", "erfinv"])
def test_gradients_follow_eager(name, fallback_log):
    # autograd's formulas (i0' = i1, i1e' = i0e - i1e (sign(x) + 1 / x), ...) call the decomposed ops
    op = _OPS[name][0]
    g = torch.Generator().manual_seed(13)
    x = torch.rand(257, generator=g, dtype=torch.float64) * (0.98 if name in ("ndtri", "erfinv") else 12) + 0.01
    if name != "ndtri":
        x = x * torch.where(torch.rand(257, generator=g) < 0.5, -1.0, 1.0).double()
    w = torch.linspace(-1, 1, x.numel(), dtype=x.dtype)

    def run(fn):
        v = x.clone().requires_grad_()
        y = fn(v)
        (y * w).sum().backward()
        return y.detach(), v.grad

    want = run(op)
    fast = mlircap.compile(lambda v: op(v) * 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(fast)
        got = run(fast)
    assert "eager islands" not in fallback_log.readouterr().err
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
    for gv, wv in zip(got, want):
        torch.testing.assert_close(gv, wv, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8, torch.bool], ids=str)
def test_integer_logit_computes_in_float32(dtype, fallback_log):
    # partition.EAGER_NUMERICS keeps logit whole outside float32/float64 (its bfloat16 kernel
    # rounds x / (1 - x)): integer and bool inputs ran eagerly, but eager promotes them to
    # float32 and runs its float32 kernel, which the decomposition reproduces
    x = torch.arange(-3, 5).to(dtype) if dtype != torch.bool else torch.tensor([True, False, True])

    def fn(v):
        return torch.logit(v), torch.logit(v, eps=0.1), S.logit(v, 1e-6) * 2

    want = fn(x)
    for g, w in zip(_compiled(fn, [x], fallback_log), want):
        assert w.dtype == torch.float32
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)
