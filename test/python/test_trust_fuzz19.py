"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), seeds 1500:1800 of each
mode and userops seeds 400:650, and the cases left open at seeds 1200:1500: the wrong results
it found, minimized, and the fuzzer's own fixes (false positives)."""
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import mlircap
from test_trust_fuzz17 import _load_fuzz  # bench/fuzz_graphs.py as a module (test/python is on sys.path)

inf = float("inf")


def _same(got, want):
    """Equal values, NaN where eager has NaN, infinities of eager's signs."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), (got, want)


# ---------------------------------------- batch norm's non-finite channels as eager's kernel
# default seed 1385: training-mode F.batch_norm with a -inf weight. Eager's CPU kernel computes
# `x * alpha + beta` (alpha = invstd * weight, beta = bias - mean * alpha): inf - inf = NaN in 4 of
# 6 elements; the decomposition's `(x - mean) * invstd * weight` gave +-inf there.
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["weight", "bias", "overflow"])
def test_batch_norm_nonfinite_channels_as_eager(training, dtype, case):
    g = torch.Generator().manual_seed(1385)
    x = torch.randn(3, 4, 5, generator=g, dtype=dtype)
    rm, rv = torch.randn(4, generator=g, dtype=dtype), torch.rand(4, generator=g, dtype=dtype) + 0.5
    w, b = torch.randn(4, generator=g, dtype=dtype), torch.randn(4, generator=g, dtype=dtype)
    if case == "weight":
        w[1], w[2] = -inf, inf
    elif case == "bias":
        b[0] = inf
    else:   # mean * alpha past the range: beta is infinite, x * alpha too
        x[:, 3] += 1e30 if dtype == torch.float32 else 1e300
        w[3] = 1e20 if dtype == torch.float32 else 1e200

    def f(x, rm, rv, w, b):
        return F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1) * 1

    want = f(x, rm.clone(), rv.clone(), w, b)
    if case == "weight":
        assert want.isnan().any()
    c = mlircap.compile(f)
    for _ in range(2):
        _same(c(x, rm.clone(), rv.clone(), w, b), want)


def test_batch_norm_finite_channels_unchanged():
    # channels with finite alpha and beta keep the decomposition's values
    x = 1e4 + torch.randn(8, 3, 6, generator=torch.Generator().manual_seed(1))

    def f(x, w):
        return F.batch_norm(x, None, None, w, None, training=True) * 1

    c = mlircap.compile(f)
    w, finite = torch.tensor([1.0, -inf, 2.0]), torch.tensor([1.0, 3.0, 2.0])
    c(x, w)
    got, other = c(x, w), c(x, finite)
    assert torch.equal(got[:, 0::2], other[:, 0::2])
    _same(got[:, 1], f(x, w)[:, 1])


# ------------------------------------------------- fuzzer: position-dependent eager kernels
# --grad seed 1667: gelu of +inf is NaN in eager's vectorized loop (a contiguous tensor of 2 or
# more elements) and +inf in its scalar loop (one element, a strided input) and in float64.
def test_fuzz_gelu_of_inf_scalar_rule():
    fuzz = _load_fuzz()
    x = torch.tensor([inf, -inf, 1.0, float("nan"), -2.0] * 4)
    rule = fuzz.POSITION_DEPENDENT_KERNELS["gelu"]
    got = rule(x)
    assert torch.isnan(F.gelu(x)[0])                  # eager's vector body
    assert got[0] == inf and torch.isnan(got[1]) and torch.isnan(got[3])
    assert torch.equal(got[2::5], F.gelu(x)[2::5])     # finite inputs: eager's values
    assert got.is_contiguous() and got.shape == x.shape


def test_fuzz_seed_1667_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    res = fuzz.run_program(fuzz.generate(1667, grad=True))
    assert res["category"] in ("compiled", "fallback"), res


# --grad seed 1534: a bfloat16 F.linear of rows of -inf (K = 7, M = 96): eager's oneDNN product
# gives NaN in about half the elements where the same row alone and float32 give -inf.
def test_fuzz_bf16_product_row_rule():
    fuzz = _load_fuzz()
    a = torch.full((96, 7), -inf, dtype=torch.bfloat16)
    a[::2] = torch.randn(48, 7).bfloat16()
    w = (torch.rand(12, 7) + 0.1).bfloat16()
    rule = fuzz.POSITION_DEPENDENT_KERNELS["mm"]
    got = rule(a, w.t())
    assert torch.equal(got[1::2], torch.full((48, 12), -inf, dtype=torch.bfloat16))
    assert torch.allclose(got[::2].float(), (a[::2].float() @ w.float().t()), rtol=2e-2, atol=1e-2)
    bias = torch.randn(12).bfloat16()
    got = fuzz.POSITION_DEPENDENT_KERNELS["addmm"](bias, a, w.t())
    assert torch.equal(got[1::2], torch.full((48, 12), -inf, dtype=torch.bfloat16))
    x = torch.randn(5, 7)
    assert torch.equal(rule(x, w.float().t()), x @ w.float().t())   # other dtypes: eager's op


def test_fuzz_seed_1534_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    res = fuzz.run_program(fuzz.generate(1534, grad=True))
    assert res["category"] in ("compiled", "fallback"), res


# ---------------------------------------------- complex abs: hypot's infinities and range
# userops seed 563: rfft(...).abs() of nan+infj, compiled NaN where eager's hypot gives +inf;
# complex128 parts past 1e154 (or below 1e-154) squared out of float64's range (inf, 0).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_abs_as_hypot(dtype):
    nan = float("nan")
    vals = [(nan, inf), (inf, nan), (-inf, 1.0), (nan, 1.0), (3.0, 4.0), (0.0, -0.0), (-inf, -inf), (1.5, -2.25),
            (1e30, 1e30), (1e200, 1e200), (1e-200, 3e-200), (1e160, 1.0), (-0.0, 1e-310)]
    re = torch.tensor([v[0] for v in vals], dtype=dtype)
    im = torch.tensor([v[1] for v in vals], dtype=dtype)

    def f(re, im):
        return torch.complex(re, im).abs()

    want = f(re, im)
    c = mlircap.compile(f)
    for _ in range(2):
        got = c(re, im)
        assert torch.equal(got.isnan(), want.isnan()), (got, want)
        assert torch.allclose(got, want, rtol=1e-15 if dtype == torch.float64 else 0, atol=0, equal_nan=True), (got, want)


def test_fuzz_userops_seed_563_not_counted_wrong():
    fuzz = _load_fuzz()
    res = fuzz.run_program(fuzz.generate(563, ["userops"]))
    assert res["category"] in ("compiled", "fallback"), res


# ------------------------------------------- causal attention: the mask fills, it does not add
# userops seed 530: F.scaled_dot_product_attention(is_causal=True) with a NaN key above the
# diagonal. Eager's CPU kernel fills the scores there with -inf; the math form added a -inf mask,
# NaN + -inf = NaN, and the rows before that key were NaN where eager's ignore it.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grad", [False, True])
def test_causal_attention_ignores_nonfinite_keys_above_the_diagonal(dtype, grad):
    g = torch.Generator().manual_seed(530)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g, dtype=dtype) for n in (7, 5, 5))
    k[:, :, 3] = float("nan")
    k[1, 2, 4] = inf
    v[0, 1, 2] = -inf

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def run(fn):
        ins = [t.clone().requires_grad_(grad) for t in (q, k, v)]
        out = fn(*ins)
        if grad:
            out.sum().backward()
        return [out.detach()] + ([t.grad for t in ins] if grad else [])

    want = run(f)
    assert torch.isfinite(want[0][1, :, :3]).all()
    c = mlircap.compile(f)
    for _ in range(2):
        for got, w in zip(run(c), want):
            _same(got, w)
