"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2101-2104: op forms that ran
through torch (an eager island, a whole graph eagerly) or gave another result than eager.
Each case compares compiled calls with eager and checks that every graph compiled."""
import pytest
import torch

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py


# --------------------------------------------------------------------------------- bucketize
@pytest.mark.parametrize("bdtype", [torch.uint8, torch.int8, torch.int64, torch.float32])
@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
def test_bucketize_of_uint8(bdtype, right, out_int32, fallback_log):
    # OpInfo bucketize uint8 #19 (seed 2101): 'aten.bucketize (dtype uint8)' ran through torch.
    # It only compares the values 0..255 with the boundaries: exact in int32 (widen.py);
    # values above 127 would read negative as signless i8
    x = torch.tensor([[0, 3, 127, 128, 200], [255, 5, 6, 129, 1]], dtype=torch.uint8)
    bounds = torch.tensor([0, 3, 6, 100, 127], dtype=bdtype)
    if bdtype is not torch.int8:
        bounds = torch.cat([bounds, torch.tensor([128, 200, 250], dtype=bdtype)])
    check_compiled(lambda v, b: torch.bucketize(v, b, right=right, out_int32=out_int32), [x, bounds], fallback_log)
    check_compiled(lambda v, b: torch.bucketize(v + 1, b, right=right, out_int32=out_int32), [x, bounds],
                   fallback_log)   # with a wrapping add before it


# --------------------------------------------------------- bf16 / f16 floor and trunc division
def _every_value(dtype):
    """Every bfloat16 / float16 value (NaN, inf, subnormals, -0.0 included)."""
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype)


_DIVISORS = [0.7, -11.5, 1e-3, 2.5, -3.0, 1e5, 1e-30, 0.0, -0.0, float("inf"), float("nan")]


def _divisors(dtype, n):
    torch.manual_seed(0)
    d = torch.tensor(_DIVISORS, dtype=torch.float32)
    return torch.cat([d, torch.randn(n - len(d)) * 10.0 ** torch.randint(-3, 4, (n - len(d),))]).to(dtype)


_FORMS = {
    "floor_divide": lambda a, b: torch.floor_divide(a, b),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "reversed": lambda a, b: b // a,
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("form", list(_FORMS))
def test_low_precision_division_by_a_tensor(dtype, form, fallback_log):
    # OpInfo div.floor_rounding bf16 reference #29 (seed 2102), floor_divide / remainder bf16:
    # 'eager islands: div (numerics)'. Eager's kernel for a divisor tensor rounds each step of
    # div_floor_floating ((a - fmod) / b, the - 1, the + 1) and trunc's quotient to the dtype
    # (1096 // -11.5 is -97 in bf16, -96 exactly); computed in float32 it was 1 off
    a = _every_value(dtype).repeat(16)
    b = _divisors(dtype, 16).repeat_interleave(65536)
    check_compiled(_FORMS[form], [a, b], fallback_log, calls=2, signs=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("divisor", _DIVISORS[:6])
def test_low_precision_division_by_a_scalar(dtype, divisor, fallback_log):
    # a divisor of one element (a number, a 0-dim or a fully broadcast tensor) takes eager's
    # scalar kernel: the quotient in float32 with the divisor as float32, rounded once
    # (x // 0.7 in bf16: 191 of 65536 values differ from the stepwise kernel's)
    x = _every_value(dtype)
    b0 = torch.tensor(divisor, dtype=dtype)
    for fn, args in (
            (lambda a: a // divisor, [x]),
            (lambda a: torch.div(a, divisor, rounding_mode="trunc"), [x]),
            (lambda a: divisor // a, [x]),                                   # a number dividend: stepwise
            (lambda a, b: a // b, [x, b0]),
            (lambda a, b: torch.div(a.reshape(256, 256), b, rounding_mode="floor"), [x, b0.reshape(1, 1)]),
            (lambda a, b: torch.div(a, b, rounding_mode="trunc"), [x, b0.reshape(1)]),
            (lambda a, b: a // b, [x, torch.tensor(divisor)]),              # a float32 0-dim divisor
            (lambda a, b: torch.div(a.reshape(256, 256), b, rounding_mode="floor"),   # broadcast along one dim
             [x, _divisors(dtype, 256).reshape(256, 1)])):
        check_compiled(fn, args, fallback_log, calls=2, signs=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_division_of_other_dtypes(dtype, fallback_log):
    # operands converted to the result's dtype first, as eager's TensorIterator does
    x = _every_value(dtype)
    big = torch.arange(-3000, 3000) * 7919
    for fn, args in (
            (lambda a, b: a // b, [x, torch.tensor(1000003)]),                  # an int64 0-dim divisor
            (lambda a, b: a // b, [big, torch.tensor(0.7, dtype=dtype)]),       # an int64 dividend
            (lambda a, b: a // b, [big, torch.randn(6000).to(dtype)]),
            (lambda a, b: torch.div(a, b, rounding_mode="trunc"), [x, torch.randint(-1000, 1000, (65536,))]),
            (lambda a, b: torch.div(a, b, rounding_mode="floor") + a // b,          # all 0-dim
             [torch.tensor(1096.0, dtype=dtype), torch.tensor(-11.5, dtype=dtype)])):
        check_compiled(fn, args, fallback_log, calls=2, signs=True)


def _eager_values(fn, args, log, calls=3):
    """fn compiled gives eager's values (signs of zeros too) on every call, the calls whose
    check fails rerun eagerly (their bounds-check log read here)."""
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    for _ in range(calls):
        same(fast(*[a.clone() for a in args]), want, signs=True)
    log.readouterr()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_fmod_and_remainder(dtype, fallback_log):
    # OpInfo remainder / __rmod__ bf16 reference #63 / #98 (seed 2102), fmod bf16 #4 (seed
    # 2101): 'eager islands: remainder (numerics)'. Exact in float32, rounded once, as
    # eager's; where some |a / b| overflows float32 (2.9e38 % 0.85) eager's vector loop
    # gives NaN: such a call reruns eagerly (every bf16 value x 16 divisors has them)
    a = _every_value(dtype).repeat(16)
    b = _divisors(dtype, 16).repeat_interleave(65536)
    small = a[:65536].clone()
    small[small.abs() > 60000] = 1.0   # no quotient past float32 below: compiled
    for fn in (torch.fmod, torch.remainder):
        _eager_values(lambda x, y: fn(x, y), [a, b], fallback_log, calls=2)
        _eager_values(lambda x: fn(x, 1e-3) * 2, [a[:65536]], fallback_log, calls=2)
        check_compiled(lambda x, y: fn(x, y), [small, _divisors(dtype, 16).repeat(4096)], fallback_log, calls=2,
                       signs=True)
        check_compiled(lambda x: fn(x, -0.3), [small], fallback_log, calls=2, signs=True)
    _eager_values(lambda x: 3.5 % x, [a[:65536]], fallback_log, calls=2)   # (3.5 % 1e-40: past float32)
    check_compiled(lambda x: 3.5 % x, [small[small.abs() > 1e-20]], fallback_log, calls=2, signs=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fmod_where_the_quotient_overflows_is_eager(dtype, fallback_log):
    # compiled float32 fmod / remainder were exact where eager's vector loop gives NaN
    # (|a / b| past the dtype's range: fmod(2.9e38, 0.85)); such a call now reruns eagerly
    big = torch.finfo(dtype).max / 1.2
    a = torch.tensor([big, -big, 1e10, 7.25, -5.5, big / 2, 3.0, 1.0] * 8, dtype=dtype)
    b = torch.full((64,), 0.84765625, dtype=dtype)
    for fn in (torch.fmod, torch.remainder, torch.floor_divide):
        _eager_values(lambda x, y: fn(x, y), [a, b], fallback_log)
    _eager_values(lambda x: torch.fmod(x, 1e-3) + torch.remainder(x, 1e-3), [a], fallback_log)
    # the other calls compile
    check_compiled(lambda x, y: torch.fmod(x, y) + torch.remainder(x, y), [a, b * 4], fallback_log, signs=True)


# ------------------------------------------------------------------------------ trunc of -0.0
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_trunc_keeps_negative_zero(dtype, fallback_log):
    # torch-mlir's trunc is sign(x) * floor(|x|): trunc(-0.0) gave +0.0 (the division above
    # truncates a rounded -0.0 quotient: 0 / -11.5)
    x = torch.tensor([-0.0, 0.0, -0.5, 0.5, -2.5, 2.5, float("inf"), -float("inf"), float("nan"), -1e-30, 7.0],
                     dtype=dtype)
    check_compiled(lambda t: torch.trunc(t), [x], fallback_log, signs=True)
    check_compiled(lambda t: t.trunc() * 2, [x], fallback_log, signs=True)
    check_compiled(lambda t: torch.fix(t - 0.0), [x], fallback_log, signs=True)
    check_compiled(lambda t: torch.trunc(t.to(torch.int32)), [x[4:6]], fallback_log)   # integers: unchanged


# ---------------------------------------------------------------------- uint8 new_empty_strided
@pytest.mark.parametrize("size,stride", [((2, 3), (1, 2)), ((4,), (2,)), ((2, 2, 3), (6, 1, 2)), ((0, 3), (3, 1))])
def test_uint8_new_empty_strided(size, stride, fallback_log):
    # OpInfo new_empty_strided uint8 #3 (seed 2103): 'aten.new_empty_strided (dtype uint8)' ran
    # through torch; a factory of uninitialized memory, as new_empty (widen.py): filled here,
    # compared with eager's values and strides
    x = torch.tensor([[3, 200], [255, 7]], dtype=torch.uint8)

    def f(t):
        e = t.new_empty_strided(size, stride)
        return e.fill_(201) + t.flatten()[1], e

    fast = check_compiled(f, [x], fallback_log)
    got = fast(x.clone())
    assert got[1].dtype == torch.uint8
    if size != (4,):   # (strides with gaps, (4,) by (2,), come back contiguous, as in float32)
        assert got[1].stride() == torch.empty_strided(size, stride).stride()


# ---------------------------------------------------------------------------------- nextafter
_TOWARD = [0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), 2.0, 1e-30, -3e38]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nextafter_of_every_low_precision_value(dtype, fallback_log):
    # OpInfo nextafter: 'aten.nextafter' ran through torch (torch-mlir has no lowering, and
    # no bitcast to step the bits): the binade by comparisons, one exact step (subnormals,
    # powers of two stepping down, overflow to inf, infinities, signed zeros included)
    x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dtype).repeat(len(_TOWARD))
    y = torch.tensor(_TOWARD).to(dtype).repeat_interleave(65536)
    check_compiled(lambda a, b: torch.nextafter(a, b), [x, y], fallback_log, calls=2, signs=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nextafter_float32_float64(dtype, fallback_log):
    fi = torch.finfo(dtype)
    torch.manual_seed(0)
    p = 2.0 ** torch.arange(-150, 128, dtype=dtype)
    x = torch.cat([torch.tensor(_TOWARD, dtype=dtype), p, -p, p * 1.5, fi.tiny * torch.arange(-40, 40, dtype=dtype),
                   torch.tensor([fi.max, -fi.max, fi.smallest_normal, 5e-324 if dtype == torch.float64 else 1e-45],
                                dtype=dtype),
                   torch.randn(2000, dtype=dtype) * 10.0 ** torch.randint(-40, 38, (2000,)).to(dtype)])
    y = torch.tensor(_TOWARD, dtype=dtype)
    check_compiled(lambda a, b: torch.nextafter(a, b), [x.repeat(len(y)), y.repeat_interleave(len(x))],
                   fallback_log, calls=2, signs=True)
    check_compiled(lambda a, b: torch.nextafter(a[:, None], b) * 2, [x, y], fallback_log, calls=2, signs=True)
    check_compiled(lambda a: torch.nextafter(a, torch.tensor(1.0, dtype=torch.float64)), [x.float()], fallback_log,
                   calls=2, signs=True)   # promoted to float64, as eager
