"""OpInfo sweep (bench/opinfo.py, issue 10), seeds 404 and 11 on 2026-12-02: fallbacks
turned into compiled code. Complex values as pairs of reals with FFTs as library calls
(complex_pairs.py), and the sweep's classification of graphs with nothing to compute.
Each compiled case compares with eager and checks which islands ran (the 'fallback' log)."""
import contextlib
import io
import re
import warnings

import pytest
import torch

import mlircap
from mlircap import logs
from test_opinfo import _load_opinfo   # bench/opinfo.py as a module


def _as_real(t):
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def _islands(err: str) -> list[str]:
    found = []
    for m in re.finditer(r"eager islands: ([^\n]*)", err):
        found += [i.strip() for i in m.group(1).split(", ") if i.strip()]
    return found


def _check(fn, args, log, library=(), exact=False):
    """fn compiled: eager's values, every graph compiled, and the only islands the
    `library` calls (node names' op part)."""
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no 'runs through torch' / 'eagerly' warning
        for _ in range(3):
            got = fast(*[a.clone() for a in args])
            assert got.dtype == want.dtype and got.shape == want.shape
            tol = {"rtol": 0, "atol": 0} if exact else {}
            torch.testing.assert_close(_as_real(got), _as_real(want), equal_nan=True, **tol)
    err = log.readouterr().err
    islands = _islands(err)
    assert all(i.endswith(": library") for i in islands), err
    assert sorted({re.sub(r"(_default)?(_\d+)?: library$", "", i) for i in islands}) == sorted(library), err
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    return fast


# ----------------------------------------------------------------- complex values as pairs
def _ints(dtype, shape=(4, 6)):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0 if dtype == torch.uint8 else -5, 6, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("op,library", [
    ("ifft", ["_fft_r2c"]),             # conversion, r2c, conjugate
    ("ihfft", ["_fft_r2c"]),
    ("fft", ["_fft_r2c"]),
    ("ifft2", ["_fft_c2c"]),            # real -> complex, c2c
    ("fftn", ["_fft_c2c"]),
    ("hfftn", ["_fft_c2c", "_fft_c2r"]),  # conjugate and clone between two FFTs
    ("ihfft2", ["_fft_r2c", "_fft_c2c"]),   # conj_physical between
    ("irfft", ["_fft_c2r"]),
])
def test_fft_of_integers(fallback_log, op, library, dtype):
    x = _ints(dtype) if dtype != torch.bool else _ints(torch.int8) > 0
    fn = getattr(torch.fft, op)
    _check(lambda t: fn(t), [x], fallback_log, library)


def test_fft_padding_and_slicing(fallback_log):
    # s= pads and crops the complex operand (constant_pad_nd, slice on pairs)
    x = _ints(torch.int64)
    _check(lambda t: torch.fft.ifft2(t, s=(3, 9)), [x], fallback_log, ["_fft_c2c"])
    _check(lambda t: torch.fft.irfft(t, n=5), [x], fallback_log, ["_fft_c2r"])


@pytest.mark.parametrize("case", ["complex", "polar", "cfloat", "cdouble", "view_as_complex_conj", "mul_add",
                                  "real_imag_abs_angle", "views"])
def test_complex_ops_compile_whole(fallback_log, case):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    fn = {
        "complex": lambda t: torch.complex(t, t * 2),
        "polar": lambda t: torch.polar(t.abs(), t),
        "cfloat": lambda t: t.cfloat(),
        "cdouble": lambda t: t.cdouble() * 2,
        "view_as_complex_conj": lambda t: torch.view_as_complex((t + 1).reshape(3, 2, 2)).conj_physical(),
        "mul_add": lambda t: torch.complex(t, -t) * torch.complex(t + 1, t) + torch.complex(t, t) * t - t.cfloat(),
        "real_imag_abs_angle": lambda t: torch.stack([(c := torch.complex(t, 1 - t)).real, c.imag, c.abs(),
                                                      c.angle()]),
        "views": lambda t: torch.cat([torch.complex(t, t).t().unsqueeze(0)[..., 1:].reshape(2, 2, 2).permute(2, 0, 1)
                                      .squeeze(), t.cfloat()[:2].reshape(2, 2, 2)], 0).transpose(0, 1).clone(),
    }[case]
    _check(fn, [x], fallback_log)


def test_fft_then_compiled_abs(fallback_log):
    # the library FFT's result read by compiled code as a pair (view_as_real, no copy)
    x = torch.randn(3, 8)
    _check(lambda t: torch.fft.rfft(t * 2).abs() + 1, [x], fallback_log, ["_fft_r2c"])


def test_lone_fft_runs_as_captured():
    # a graph of nothing but the library call compiles nothing: it runs as captured
    x = torch.randn(8)
    fast = mlircap.compile(lambda t: torch.fft.rfft(t))
    for _ in range(2):
        torch.testing.assert_close(fast(x), torch.fft.rfft(x))


def test_unsupported_complex_op_stays_an_island():
    # exp of a complex value has no pair form: the graph is left as it was (an island
    # for the complex ops), and its result is still eager's
    x = torch.randn(3, 4)
    fn = lambda t: torch.exp(torch.complex(t, t)) + 1   # noqa: E731
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            torch.testing.assert_close(fast(x), fn(x))
    with pytest.raises(mlircap.MlircapCompileError):
        mlircap.compile(fn, strict=True)(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_angle_of_reals(fallback_log, dtype):
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan"), float("-inf")]).to(dtype) if dtype.is_floating_point \
        else torch.tensor([-2, 0, 3, 1]).to(dtype)
    _check(lambda t: torch.angle(t), [x], fallback_log, exact=True)


# ----------------------------------------------------------------- the sweep's classification
def _status(fast, *args):
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


def test_sweep_counts_an_empty_graph_as_nothing_to_compute():
    x = torch.randn(3)
    status, notes, opinfo = _status(mlircap.compile(lambda t: t.real), x)
    assert status is None and notes == [opinfo.NOTHING_TO_COMPUTE]
    recs = [{"category": "ok", "detail": "; ".join(notes), "dtype": "float32", "op": "real"}]
    assert opinfo.summarize(recs)["ok_empty"] == 1


def test_sweep_counts_fft_between_compiled_parts_as_library_call():
    x = torch.randint(-3, 4, (6,), dtype=torch.int8)
    status, notes, _ = _status(mlircap.compile(lambda t: torch.fft.ifft(t)), x)
    assert status is None and notes == ["library calls: _fft_r2c_default"], (status, notes)
    status, notes, _ = _status(mlircap.compile(lambda t: torch.fft.rfft(t)), x.float())
    assert status is not None   # the library call alone runs as captured: a fallback


# ----------------------------------------------------------------- int8 matrix products (intmath.py)
def _i8(*shape, seed=0):
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", ["mm", "bmm", "matmul", "mv", "dot", "addmm", "baddbmm", "addbmm", "addmv"])
def test_int8_products_wrap_like_eager(fallback_log, case):
    # computed in int32 and converted back: eager's wrapping int8 sums (full-range
    # operands overflow int8 on almost every element)
    fn, args = {
        "mm": (lambda a, b: a @ b, (_i8(5, 7), _i8(7, 3, seed=1))),
        "bmm": (lambda a, b: torch.bmm(a, b), (_i8(2, 5, 7), _i8(2, 7, 3, seed=1))),
        "matmul": (lambda a, b: torch.matmul(a, b), (_i8(2, 5, 7), _i8(7, 3, seed=1))),
        "mv": (lambda a, b: torch.mv(a, b), (_i8(5, 7), _i8(7, seed=1))),
        "dot": (lambda a, b: torch.dot(a, b), (_i8(7), _i8(7, seed=1))),
        "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=3, alpha=-2), (_i8(5, 3), _i8(5, 7, seed=1), _i8(7, 3, seed=2))),
        "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, alpha=5), (_i8(2, 5, 3), _i8(2, 5, 7, seed=1), _i8(2, 7, 3, seed=2))),
        "addbmm": (lambda c, a, b: torch.addbmm(c, a, b), (_i8(5, 3), _i8(2, 5, 7, seed=1), _i8(2, 7, 3, seed=2))),
        "addmv": (lambda c, a, b: torch.addmv(c, a, b, beta=2), (_i8(1), _i8(5, 7, seed=1), _i8(7, seed=2))),
    }[case]
    _check(fn, list(args), fallback_log, exact=True)


# ----------------------------------------------------------------- view scatters and view copies (view_ops.py)
@pytest.mark.parametrize("case", ["diag", "diag_neg_swapped", "diag_3d_bf16", "diag_uint8", "diag_empty",
                                  "strided", "strided_transposed_input"])
def test_view_scatters_compile(fallback_log, case):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g)
    fn, args = {
        "diag": (lambda a, s: torch.diagonal_scatter(a, s, 1), (x, torch.randn(4, generator=g))),
        "diag_neg_swapped": (lambda a, s: torch.diagonal_scatter(a, s, -2, 1, 0), (x, torch.randn(3, generator=g))),
        "diag_3d_bf16": (lambda a, s: torch.diagonal_scatter(a, s, 0, 0, 2),
                         (torch.randn(3, 2, 3, generator=g).bfloat16(), torch.randn(2, 3, generator=g).bfloat16())),
        "diag_uint8": (lambda a, s: torch.diagonal_scatter(a, s) + 1,
                       (torch.randint(0, 255, (3, 3), dtype=torch.uint8, generator=g),
                        torch.randint(0, 255, (3,), dtype=torch.uint8, generator=g))),
        "diag_empty": (lambda a, s: torch.diagonal_scatter(a, s, 7), (x, torch.randn(0))),
        "strided": (lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (1, 2), 1) * 2, (x, torch.randn(2, 2, generator=g))),
        # eager writes through the strides of its clone of the (transposed) input
        "strided_transposed_input": (lambda a, s: torch.as_strided_scatter(a.t(), s, (3,), (3,), 2) + 0,
                                     (x, torch.randn(3, generator=g))),
    }[case]
    _check(fn, list(args), fallback_log, exact=True)


def test_overlapping_as_strided_scatter_stays_eager():
    # a stride-0 view writes one element twice: eager refuses it, and so does the
    # compiled function (the op is left to eager, not turned into a gather)
    x, s = torch.randn(4, 5), torch.randn(2)
    fn = lambda a, b: torch.as_strided_scatter(a, b, (2,), (0,)) + 1   # noqa: E731
    with pytest.raises(RuntimeError, match="more than one element"):
        fn(x, s)
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            with pytest.raises(RuntimeError, match="more than one element"):
                fast(x, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
@pytest.mark.parametrize("case", ["view_copy", "permute_copy", "unbind_copy", "narrow_copy", "diagonal_copy",
                                  "transpose_copy"])
def test_view_copies_compile(fallback_log, case, dtype):
    x = torch.arange(24).reshape(2, 3, 4).to(dtype)
    fn = {
        "view_copy": lambda t: torch.view_copy(t, [6, 4]) + 1,
        "permute_copy": lambda t: torch.permute_copy(t, [2, 0, 1]) + 1,
        "unbind_copy": lambda t: torch.stack(torch.unbind_copy(t, 1)) + 1,
        "narrow_copy": lambda t: torch.narrow_copy(t, 2, 1, 2) + 1,
        "diagonal_copy": lambda t: torch.diagonal_copy(t, 0, 1, 2) + 1,
        "transpose_copy": lambda t: torch.transpose_copy(t, 0, 2) + 1,
    }[case]
    _check(fn, [x], fallback_log, exact=True)


# ----------------------------------------------------------------- LAPACK library calls, dist
def test_lapack_between_compiled_parts_is_a_library_call(fallback_log):
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    _check(lambda t: torch.linalg.svdvals(t * 2 + 1) * 3, [x], fallback_log, ["_linalg_svd"])
    _check(lambda t: torch.linalg.slogdet(t[:4] - 1)[1] + 1, [x], fallback_log, ["_linalg_slogdet"])


@pytest.mark.parametrize("p", [2, 1, 0, 3.5, float("inf")])
def test_dist_compiles(fallback_log, p):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 4, generator=g), torch.randn(4, generator=g)
    _check(lambda x, y: torch.dist(x, y, p), [a, b], fallback_log)


# ----------------------------------------------------------------- Chebyshev polynomials (polynomials.py)
_POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
          "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
          "shifted_chebyshev_polynomial_w"]


def _poly_inputs(shifted: bool):
    # the recurrence's ranges only (no element in the trigonometric closed form): degrees
    # -3..16, x outside [-1, 1] (shifted: [0, 1]) or small degrees, and the interval's ends
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(60, generator=g) * 8 + 1.5, -torch.rand(60, generator=g) * 8 - 1.5,
                   torch.rand(40, generator=g) * 2 - 1, torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])])
    n = torch.cat([torch.randint(-3, 17, (120,), generator=g), torch.randint(-2, 5, (40,), generator=g),
                   torch.tensor([7, 8, 9, 10, 9, 12])]).float()
    return ((x + 1) / 2 if shifted else x), n


@pytest.mark.parametrize("name", _POLYS)
def test_chebyshev_recurrence_compiles(fallback_log, name):
    fn = getattr(torch.special, name)
    x, n = _poly_inputs(name.startswith("shifted"))
    _check(lambda a, b: fn(a, b), [x, n], fallback_log)
    _check(lambda a, b: fn(a, b), [(x * 3).round().int(), n.int()], fallback_log)   # promoted to float


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u"])
def test_chebyshev_past_the_bound_reruns_eagerly(capsys, name):
    # a degree above MAX_DEGREE, a closed-form element, a NaN degree: the flag is set and the
    # call reruns eagerly (eager's values), logged as an island; strict=True raises
    fn = getattr(torch.special, name)
    x = torch.tensor([0.3, 2.0, 0.7])
    fast = mlircap.compile(lambda a, b: fn(a, b))
    strict = mlircap.compile(lambda a, b: fn(a, b), strict=True)
    ok = torch.tensor([3.0, 4.0, 2.0])
    for f in (fast, strict):
        f(x, ok)
        torch.testing.assert_close(f(x, ok), fn(x, ok))
    for n in (torch.tensor([3.0, 40.0, 2.0]), torch.tensor([12.0, 3.0, 2.0]), torch.tensor([3.0, float("nan"), 2.0])):
        logs.set_logs("fallback")
        try:
            torch.testing.assert_close(fast(x, n), fn(x, n), equal_nan=True)
        finally:
            logs.set_logs()
        assert "bounds check" in capsys.readouterr().err
        with pytest.raises(mlircap.MlircapCompileError, match="bounds check"):
            strict(x, n)


def test_sweep_counts_a_bounds_check_rerun_as_a_fallback():
    fn = torch.special.chebyshev_polynomial_t
    x, n = torch.tensor([0.3, 2.0]), torch.tensor([12.0, 3.0])
    fast = mlircap.compile(lambda a, b: fn(a, b))
    fast(x, torch.tensor([2.0, 3.0]))
    status, _, _ = _status(fast, x, n)
    assert status is not None and "bounds check" in status, status


# ----------------------------------------------------------------- segment_reduce (segments.py)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["max", "min", "sum", "mean", "prod"])
@pytest.mark.parametrize("form", ["lengths", "offsets", "lengths_2d", "lengths_initial"])
def test_segment_reduce_compiles(fallback_log, form, reduce, dtype):
    g = torch.Generator().manual_seed(0)
    data = torch.randn(6, 3, generator=g).to(dtype)
    data[2, 1] = float("nan")
    kw = {"lengths": torch.tensor([2, 0, 3, 1])} if form.startswith("lengths") else \
        {"offsets": torch.tensor([0, 2, 2, 5, 6])}
    if form == "lengths_2d":
        data = torch.randn(2, 6, generator=g).to(dtype)
        kw = {"lengths": torch.tensor([[2, 0, 3, 1], [1, 1, 4, 0]]), "axis": 1}
    if form == "lengths_initial":
        kw["initial"] = 2
    fn = lambda d, b: torch.segment_reduce(d, reduce, **{**kw, next(iter(kw)): b})   # noqa: E731
    _check(fn, [data, next(iter(kw.values()))], fallback_log, exact=True)


def test_segment_reduce_bad_lengths_raise_like_eager():
    data, ok, bad = torch.randn(6), torch.tensor([2, 0, 3, 1]), torch.tensor([2, 0, 3, 3])
    fn = lambda d, b: torch.segment_reduce(d, "sum", lengths=b)   # noqa: E731
    fast = mlircap.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(fast(data, ok), fn(data, ok))
    with pytest.raises(RuntimeError) as eager:
        fn(data, bad)
    with pytest.raises(type(eager.value)):
        fast(data, bad)


# ----------------------------------------------------------------- Hurwitz zeta (zeta.py)
def test_zeta_compiles(fallback_log):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(200, generator=g) * 9 + 1, torch.tensor([1.0, 0.5, 2.0, 2.5, 30.0])])
    q = torch.cat([torch.rand(200, generator=g) * 20 + 0.01, torch.tensor([1.0, 2.0, -1.0, -1.5, 0.5])])
    _check(lambda a, b: torch.special.zeta(a, b), [x, q], fallback_log)
    _check(lambda a, b: torch.special.zeta(a, b), [(x * 2).int(), (q + 1).int()], fallback_log)


def test_zeta_of_negative_q_reruns_eagerly(capsys):
    # q <= 0 with an integer x: negative bases of pow and a long sum, left to eager
    fn = lambda a, b: torch.special.zeta(a, b)   # noqa: E731
    x, q = torch.tensor([3.0, 2.0]), torch.tensor([1.5, 2.0])
    fast = mlircap.compile(fn)
    fast(x, q)
    torch.testing.assert_close(fast(x, q), fn(x, q))
    q2 = torch.tensor([-41.5, 2.0])
    logs.set_logs("fallback")
    try:
        torch.testing.assert_close(fast(x, q2), fn(x, q2))
    finally:
        logs.set_logs()
    assert "bounds check" in capsys.readouterr().err


@pytest.mark.parametrize("n", [2, 3, 4])
def test_polygamma_of_higher_order_compiles(fallback_log, n):
    # (-1)^(n+1) n! zeta(n + 1, x), as eager's calc_polygamma
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(100, generator=g) * 9 + 0.1, torch.tensor([1.0, 2.0, 0.5, 0.0])])
    _check(lambda t: torch.polygamma(n, t), [x], fallback_log)
    _check(lambda t: torch.special.polygamma(n, t), [torch.arange(1, 9)], fallback_log)


@pytest.mark.parametrize("p", [0, 1, 2, 1.5, float("inf")])
def test_cdist_compiles(fallback_log, p):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 5, 3, generator=g), torch.randn(2, 4, 3, generator=g)
    b[0, 1] = a[0, 2]   # a zero distance
    _check(lambda x, y: torch.cdist(x, y, p), [a, b], fallback_log)


# ----------------------------------------------------------------- grid_sampler_3d (sampling.py)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_compiles(fallback_log, mode, padding, align_corners):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 3, 4, 5, 6, generator=g)
    grid = torch.rand(2, 3, 2, 4, 3, generator=g) * 6 - 3   # well outside [-1, 1] too
    a[0, 0, 0, 0, 0] = float("inf")   # an outside corner clamped onto it must add nothing
    fn = lambda x, gr: torch.nn.functional.grid_sample(x, gr, mode=mode, padding_mode=padding,   # noqa: E731
                                                       align_corners=align_corners)
    _check(fn, [a, grid], fallback_log)
