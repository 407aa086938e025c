"""OpInfo sweep (bench/opinfo.py, issue 10), session 24 (held-out seeds 2207-2209): op forms
that ran through torch (an eager island, a whole graph eagerly) or gave another result than
eager. Each case compares compiled calls with eager and checks that every graph compiled."""
import warnings

import pytest
import torch

import mlircap
from compiled_check import check_compiled  # test/python/compiled_check.py


def _bits(t):
    """A tensor's bytes (its elements' bits, NaN payloads included)."""
    return t.contiguous().reshape(-1).view(torch.uint8) if t.dtype != torch.bool else t


def _same_bits(got, want):
    gs = got if isinstance(got, tuple) else (got,)
    ws = want if isinstance(want, tuple) else (want,)
    for g, w in zip(gs, ws):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        assert torch.equal(_bits(g), _bits(w)), (g, w)


# ------------------------------------------------------------------------ view(dtype)
# x.view(dtype) ran through torch ('aten.view ... torch-mlir cannot lower it': torch-mlir has
# no lowering of torch.aten.view.dtype). bitcast.py rewrites it as linalg: one arith.bitcast
# per element for the same element size, a wider element split little-endian into the last
# dim's parts, narrower ones joined.
_ALL16 = torch.arange(65536, dtype=torch.int32).to(torch.int16)   # every 16-bit pattern
_VIEWS = {
    "f32_to_i32": (lambda x: x.view(torch.int32) + 1, torch.randn(4, 6)),
    "i32_to_f32": (lambda x: (x ^ 5).view(torch.float32), torch.randint(-2 ** 31, 2 ** 31 - 1, (4096,),
                                                                        dtype=torch.int32)),
    "f32_to_i16_after_op": (lambda x: (x * 2).view(torch.int16), torch.randn(4, 6)),
    "i16_to_f32": (lambda x: (x + 1).view(torch.float32), _ALL16.reshape(256, 256)),
    "bf16_every_pattern_to_i16": (lambda x: x.view(torch.bfloat16).view(torch.int16) ^ 0, _ALL16),
    "i16_every_pattern_to_bf16": (lambda x: (x ^ 0).view(torch.bfloat16), _ALL16),
    "f16_every_pattern_to_i16": (lambda x: x.view(torch.float16).view(torch.int16) * 1, _ALL16),
    "i16_every_pattern_to_f16": (lambda x: (x ^ 0).view(torch.float16), _ALL16),
    "f16_to_bf16": (lambda x: (x * 2).view(torch.bfloat16).view(torch.int16), torch.randn(3, 4).half()),
    "f64_to_i8": (lambda x: (x * 3).view(torch.int8), torch.randn(2, 3, dtype=torch.float64)),
    "i8_to_f64": (lambda x: (x + 1).view(torch.float64).view(torch.int64), torch.randint(-100, 100, (2, 16),
                                                                                       dtype=torch.int8)),
    "i64_to_i32_3d": (lambda x: (x ^ 0).view(torch.int32), torch.randint(-2 ** 62, 2 ** 62, (2, 3, 4))),
    "bf16_to_i8": (lambda x: (x * 1).view(torch.int8), torch.randn(5, 4).bfloat16()),
    "bool_to_i8": (lambda x: (~x).view(torch.int8), torch.rand(5, 3) > 0.5),
    "bool_to_i64": (lambda x: (~x).view(torch.int64) + 0, torch.rand(4, 16) > 0.5),
    "zero_dim": (lambda x: (x * 2).view(torch.int32), torch.tensor(1.5)),
    "strided_rows": (lambda x: x[:, :4].view(torch.int16) + 1, torch.randn(4, 6)),
    "transposed": (lambda x: x.t().view(torch.int32) - 1, torch.randn(4, 6)),
    "subnormals": (lambda x: (x * 1e-40).view(torch.int32), torch.randn(100)),
}


@pytest.mark.parametrize("form", list(_VIEWS))
def test_view_dtype_compiles(form, fallback_log):
    f, x = _VIEWS[form]
    fast = check_compiled(f, [x], fallback_log)
    _same_bits(fast(x.clone()), f(x.clone()))   # bit for bit (NaN payloads: assert_close does not look)


def test_view_dtype_writes_through_to_the_input(fallback_log):
    # an in-place op on the view writes the input's bits, and a view returned next to
    # compiled results is still the input's memory
    def f(x):
        x.view(torch.int32).bitwise_xor_(-2 ** 31)
        return x.view(torch.int32), x * 2

    x = torch.randn(4, 6)
    fast = check_compiled(f, [x], fallback_log)
    a, b = x.clone(), x.clone()
    got, want = fast(a), f(b)
    _same_bits(got, want)
    assert torch.equal(a, b) and got[0].data_ptr() == a.data_ptr()


def test_view_dtype_to_bool_stays_eager():
    # bytes other than 0 / 1 are no bool: a bool result runs through torch (eager's tensor)
    def f(x):
        return (x & 1).view(torch.bool)

    x = torch.randint(-3, 3, (8,), dtype=torch.int8)
    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):
            got = fast(x.clone())
    assert torch.equal(got, f(x)) and got.dtype == torch.bool
    assert any("aten.view at" in str(m.message) for m in w), [str(m.message) for m in w]


# ------------------------------------------------------------ convolution padding='valid'
# OpInfo nn.functional.conv2d bf16 #10 (seed 2208): conv2d(x, w, b, stride=2, padding='valid')
# reaches aten.convolution with padding [0] (one number for every spatial dim, ATen's
# expand_param_if_needed); partition.cpu_narrow_library read padding[1]: IndexError, and the
# whole graph ran eagerly ('backend failed to compile a captured graph').
_VALID = {
    "conv2d_bf16_bias": (torch.bfloat16, (1, 4, 5, 5), (1, 4, 2, 3), dict(stride=2, padding="valid")),
    "conv2d_f16_bias_dilated": (torch.float16, (2, 3, 9, 8), (4, 3, 3, 2), dict(padding="valid", dilation=2)),
    "conv1d_bf16_bias": (torch.bfloat16, (2, 4, 11), (3, 4, 3), dict(stride=2, padding="valid")),
}


@pytest.mark.parametrize("form", list(_VALID))
def test_valid_padding_convolution_with_bias_compiles(form, fallback_log):
    dtype, xs, ws, kw = _VALID[form]
    conv = torch.nn.functional.conv2d if len(xs) == 4 else torch.nn.functional.conv1d
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(xs, generator=g).to(dtype), torch.randn(ws, generator=g).to(dtype)
    b = torch.randn(ws[0], generator=g).to(dtype)
    check_compiled(lambda x, w, b: conv(x, w, b, **kw), [x, w, b], fallback_log)


def test_valid_padding_large_convolution_is_no_backend_failure():
    # large enough for torch's native kernel where the host has one (a library step, by
    # design): strict mode raised MlircapCompileError (the IndexError) before
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 32, 34, 34, generator=g).bfloat16(), torch.randn(32, 32, 3, 3, generator=g).bfloat16()
    b = torch.randn(32, generator=g).bfloat16()

    def f(x, w, b):
        return torch.nn.functional.conv2d(x, w, b, stride=1, padding="valid")

    fast = mlircap.compile(f, strict=True)
    for _ in range(2):
        got = fast(x, w, b)
    torch.testing.assert_close(got, f(x, w, b), rtol=0, atol=0)


# ------------------------------------------------------------------- uint8 block_diag
# OpInfo block_diag uint8 #2 (seed 2208): 'aten.block_diag (dtype uint8)' ran through torch.
# It only moves the blocks into a tensor of zeros: widen.py's uint8-computable ops.
@pytest.mark.parametrize("shapes", [((1,), (2,), (3,)), ((2, 3), (1, 1), (4,)), ((0, 2), (3, 0))])
def test_uint8_block_diag_compiles(shapes, fallback_log):
    g = torch.Generator().manual_seed(1)
    ts = [torch.randint(0, 256, s, generator=g, dtype=torch.uint8) for s in shapes]
    check_compiled(lambda *ts: torch.block_diag(*ts) + 1, ts, fallback_log)


# ------------------------------------------------------------ powers past 8
# x.pow(10.0) (nn.functional.pdist p=10, seed 2209, and any x ** n with |n| > 8): torch-mlir
# makes math.fpowi, on which mlircap-simplify-math's greedy rewrite never converged; the pass
# failed, 'pass pipeline failed', and the whole graph ran eagerly naming no op.
@pytest.mark.parametrize("exponent", [10.0, 16.0, -10.0, 9.0, 37.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_integer_power_past_eight_compiles(exponent, dtype, fallback_log):
    g = torch.Generator().manual_seed(2)
    x = (torch.rand(6, 5, generator=g) * 2.4 - 1.2).to(dtype)
    x[0, :4] = torch.tensor([0.0, float("nan"), float("inf"), -float("inf")]).to(dtype)
    check_compiled(lambda x: x.pow(exponent) + 1, [x], fallback_log, exact=False)


# -------------------------------------------------------------------------- pdist
# OpInfo nn.functional.pdist float32 #4 (seed 2209): 'aten._pdist_forward (unsupported)', torch-mlir
# cannot lower it. distances.py: the row pairs of triu_indices gathered, |difference| reduced.
_PDIST_X = torch.tensor([[1.0, float("nan"), 3.0], [2.0, 5.0, 1.0], [float("inf"), 0.0, 1.0], [2.0, 5.0, 1.0]])


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, 1.5, 0.5, 10.0, float("inf")])
@pytest.mark.parametrize("shape", [(5, 5), (7, 3), (5, 1), "special"])
def test_pdist_compiles(p, shape, fallback_log):
    if shape == "special":   # NaN, inf and equal rows
        x = _PDIST_X
    else:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    check_compiled(lambda x: torch.nn.functional.pdist(x, p), [x], fallback_log, exact=False)


def test_pdist_float64_and_small_inputs(fallback_log):
    x = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    check_compiled(lambda x: (torch.nn.functional.pdist(x), torch.nn.functional.pdist(x, 0.7)), [x], fallback_log,
                   exact=False)
    # one row: no pair; rows of no element: zeros (eager's)
    for y in (torch.randn(1, 5), torch.randn(3, 0)):
        fast = mlircap.compile(lambda y: torch.nn.functional.pdist(y) + 0)
        for _ in range(2):
            got = fast(y)
        torch.testing.assert_close(got, torch.nn.functional.pdist(y))


def test_pdist_gradient_as_eager():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(5))
    x[1] = x[3]   # a zero distance: eager's _pdist_backward gives 0 there (no NaN)
    fast = mlircap.compile(lambda x: torch.nn.functional.pdist(x).sum())
    for _ in range(2):
        xc = x.clone().requires_grad_()
        fast(xc).backward()
    xe = x.clone().requires_grad_()
    torch.nn.functional.pdist(xe).sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad)


# ------------------------------------------------------------------ uint8 view(dtype)
# A view of uint8 as another dtype (or of another dtype as uint8) ran through torch ('aten.view
# (dtype uint8)': widen.py computes uint8 as int32 and left bit views out). widen_uint8 now
# views the held value's int8 byte (int32 -> int8 wraps to it) and converts a uint8 result
# back (wrapped with & 255).
_U8 = torch.randint(0, 256, (6, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(6))
_U8_VIEWS = {
    "u8_to_i64": (lambda x: (x + 1).view(torch.int64), _U8),
    "u8_to_i8": (lambda x: (x * 3).view(torch.int8) + 0, _U8),
    "u8_to_f32_bits": (lambda x: (x ^ 7).view(torch.float32).view(torch.int32), _U8),
    "u8_to_bf16": (lambda x: (x + 0).view(torch.bfloat16).view(torch.int16) * 1, _U8),
    "i8_to_u8": (lambda x: (x + 1).view(torch.uint8) // 3, _U8.view(torch.int8)),
    "f32_to_u8": (lambda x: (x * 2).view(torch.uint8) + 1, torch.randn(4, 5)),
    "i64_to_u8_sum": (lambda x: (x ^ 1).view(torch.uint8).sum(-1), torch.randint(-2 ** 62, 2 ** 62, (3, 4))),
    "u8_to_u8": (lambda x: (x + 200).view(torch.uint8) + 100, _U8),
    "bool_to_u8": (lambda x: (~x).view(torch.uint8) * 200, torch.rand(3, 4) > 0.5),
    "u8_input_to_i16": (lambda x: x.view(torch.int16) + 1, _U8),
    "zero_dim": (lambda x: (x + 1).view(torch.int8), torch.tensor(250, dtype=torch.uint8)),
}


@pytest.mark.parametrize("form", list(_U8_VIEWS))
def test_uint8_view_dtype_compiles(form, fallback_log):
    f, x = _U8_VIEWS[form]
    fast = check_compiled(f, [x], fallback_log)
    _same_bits(fast(x.clone()), f(x.clone()))


def test_uint8_view_dtype_writes_through_and_aliases(fallback_log):
    def f(x):
        x.view(torch.int8).add_(100)
        return x.view(torch.int8), x * 2

    fast = check_compiled(f, [_U8], fallback_log)
    a, b = _U8.clone(), _U8.clone()
    got, want = fast(a), f(b)
    _same_bits(got, want)
    assert torch.equal(a, b) and got[0].data_ptr() == a.data_ptr()


# ------------------------------------------------------------- sparse results and operands
# OpInfo to_sparse bool #0 (seed 2209): torch-mlir's importer cannot type a sparse tensor, and
# the whole graph ran eagerly with a warning naming no op ("Stage 'fx-import' rejected the
# graph ... Unable to parse type ... #sparse_tensor.encoding"). An op with a sparse result or
# operand is an eager island now (partition: 'layout sparse_coo'), named with its line; the
# rest compiles.
def _islands_named(fn, x, *ops):
    fast = mlircap.compile(fn)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):
            got = fast(x.clone())
    want = fn(x.clone())
    gs, ws = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, e in zip(gs, ws):
        assert g.layout == e.layout
        torch.testing.assert_close(g.to_dense(), e.to_dense())   # (a compiled sum: another order)
    text = "\n".join(str(m.message) for m in w)
    for op in ops:
        assert f"aten.{op} at " in text and "(layout sparse_coo)" in text, text
    assert "fx-import" not in text, text
    return fast


def test_sparse_result_is_a_named_island():
    _islands_named(lambda x: x.to_sparse(), torch.tensor([[True, False], [False, True]]), "_to_sparse")


def test_sparse_island_leaves_the_rest_compiled():
    fast = _islands_named(lambda x: ((x * 2 + 1).to_sparse(), x.sum()), torch.randn(3, 4), "_to_sparse")
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)
    fast = _islands_named(lambda x: x.to_sparse().to_dense() * 3 + x, torch.randn(3, 4), "_to_sparse", "_to_dense")
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)
