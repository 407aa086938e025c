"""OpInfo sweep (bench/opinfo.py, issue 10), seeds 1701-1703: a wrong result (a Python int
divided by a uint8 tensor) and ops that ran through torch (integer addmv / addbmm, uint8 addr
and nonzero_static, `x | n` / `x ^ n`, powers of bool tensors, `n % t`, the polynomials'
number overloads, topk). Each case compares compiled calls with eager; strict=True also
asserts that nothing ran through torch."""
import pytest
import torch

import mlircap

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _check(fn, *args, strict=True, calls=2, exact=True):
    fast = mlircap.compile(fn, strict=strict)
    want = fn(*args)
    for _ in range(calls):
        got = fast(*args)
        wants, gots = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        assert len(gots) == len(wants)
        for g, w in zip(gots, wants):
            assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
            tol = {"rtol": 0, "atol": 0} if exact else {}   # else: the dtype's default tolerance
            torch.testing.assert_close(g, w, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("number", [300, -3])
@pytest.mark.parametrize("form", ["floor_divide", "rfloordiv", "floor", "trunc"])
def test_python_int_divided_by_integer_tensor_as_eager(dtype, number, form):
    # OpInfo floor_divide int8 (reference inputs) ran through torch; a uint8 divisor was
    # WRONG: eager converts the Python int dividend to the tensor's dtype (300 is 44 in uint8,
    # 300 // 3 = 14), the widened uint8 code divided 300 (100)
    t = torch.tensor([3, 2, 7, 5, 1, 9], dtype=dtype)
    fn = {"floor_divide": lambda t: torch.floor_divide(number, t),
          "rfloordiv": lambda t: number // t,
          "floor": lambda t: torch.div(number, t, rounding_mode="floor"),
          "trunc": lambda t: torch.div(number, t, rounding_mode="trunc")}[form]
    _check(fn, t)


def test_python_int_divided_by_zero_raises_like_eager():
    t = torch.tensor([3, 0, 7], dtype=torch.uint8)
    fast = mlircap.compile(lambda t: torch.floor_divide(300, t))
    for _ in range(2):
        with pytest.raises(RuntimeError):
            fast(t)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("op", ["addmv", "addbmm"])
@pytest.mark.parametrize("scales", [{}, {"beta": 3, "alpha": -2}, {"beta": 0}])
def test_integer_addmv_addbmm_compile(dtype, op, scales):
    # OpInfo addmv int64 / addbmm uint8 ran through torch: torch-mlir lowers them for floats only
    g = torch.Generator().manual_seed(0)
    lo = 0 if dtype == torch.uint8 else -100
    r = (lambda *s: torch.randint(lo, 100, s, generator=g).to(dtype))
    if op == "addmv":
        args = (r(5), r(5, 70), r(70))
        fn = (lambda c, a, b: torch.addmv(c, a, b, **scales))
    else:
        args = (r(5, 3), r(4, 5, 60), r(4, 60, 3))
        fn = (lambda c, a, b: torch.addbmm(c, a, b, **scales))
    _check(fn, *args)


def test_integer_addmv_of_0d_input_compiles():
    c, a, b = torch.tensor(7), torch.arange(50).reshape(5, 10), torch.arange(10)
    _check(lambda c, a, b: torch.addmv(c, a, b), c, a, b)


@pytest.mark.parametrize("scales", [{}, {"beta": 3, "alpha": 7}, {"beta": 0}])
def test_uint8_addr_compiles(scales):
    g = torch.Generator().manual_seed(1)
    c, a, b = (torch.randint(0, 256, s, generator=g).to(torch.uint8) for s in ((3, 4), (3,), (4,)))
    _check(lambda c, a, b: torch.addr(c, a, b, **scales), c, a, b)


def test_uint8_nonzero_static_compiles():
    x = torch.tensor([0, 200, 0, 3, 255], dtype=torch.uint8)
    _check(lambda x: torch.nonzero_static(x, size=4), x)


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
@pytest.mark.parametrize("number", [300, -3, True])
@pytest.mark.parametrize("op", ["or", "xor", "ror"])
def test_bitwise_or_xor_of_a_number_compile(dtype, number, op):
    # OpInfo __ror__ / bitwise_or int16: aten.bitwise_or.Scalar (and bitwise_xor.Scalar) ran
    # through torch; eager converts the number to the result's dtype (int8 | 300 ors 44)
    x = torch.tensor([1, 0, 5, 127, 44, 3]).to(dtype)   # (uint8 / int8 | 300: 300 wraps, as in eager)
    fn = {"or": lambda x: x | number, "xor": lambda x: torch.bitwise_xor(x, number),
          "ror": lambda x: number | x}[op]
    _check(fn, x)
    _check(fn, x[0].clone())   # a 0-dim tensor (OpInfo __ror__ int16 #83)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int64, torch.bool])
@pytest.mark.parametrize("op", [torch.bitwise_or, torch.bitwise_xor, torch.bitwise_and])
def test_bitwise_of_a_number_and_a_tensor_compile(dtype, op):
    # OpInfo bitwise_xor int64 (reference inputs): torch.bitwise_xor(n, t), the .Scalar_Tensor
    # overload, ran through torch
    x = torch.tensor([1, 0, 5, 127, 44, 3]).to(dtype)
    for number in (300, -3, True):
        _check(lambda x: op(number, x), x)


@pytest.mark.parametrize("exponent", [2, 3, 0, True, False, 2.0, 0.5])
def test_power_of_bool_tensor_compiles(exponent):
    # OpInfo square bool: pow.Tensor_Scalar of a bool tensor ran through torch (2.0 failed to
    # compile: 'math.fpowi' of i1)
    b = torch.tensor([[True, False, True], [False, False, True]])
    _check(lambda b: torch.pow(b, exponent), b)
    _check(lambda b: torch.square(b), b)


@pytest.mark.parametrize("dtype", INTS + [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("number", [-7, 300, 2.5])
def test_number_remainder_tensor_compiles(dtype, number):
    # `n % t` (aten.remainder.Scalar_Tensor) ran through torch
    t = torch.tensor([3, 2, 7, 5, 1, 9]).to(dtype)
    if not dtype.is_floating_point:
        t = torch.where(t == 0, torch.ones_like(t), t)
    _check(lambda t: number % t, t)
    _check(lambda t: torch.remainder(number, t), t)


@pytest.mark.parametrize("name", ["chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
                                  "chebyshev_polynomial_t", "hermite_polynomial_h", "legendre_polynomial_p"])
def test_polynomial_number_overloads_compile(name):
    # OpInfo special.chebyshev_polynomial_u float32 (n a Python float: .n_scalar) and
    # legendre_polynomial_p int32 (x a Python int: .x_scalar) ran through torch
    op = getattr(torch.special, name)
    x = torch.tensor([[-0.9, -0.25, 0.0, 0.3, 0.75]])
    n = torch.tensor([[0, 3, 5, 2, 4]], dtype=torch.int32)   # (degrees past 6 may take eager's closed form: reruns)
    # (the compiled recurrence is within float32's tolerance of eager's: one ulp at places)
    _check(lambda x: op(x, 3), x, exact=False)
    _check(lambda x: op(x, 1.135), x, exact=False)
    _check(lambda n: op(0.5, n), n, exact=False)
    _check(lambda n: op(2, n), n, exact=False)
    _check(lambda b: op(b, 4), torch.tensor([True, False]), exact=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int16])
@pytest.mark.parametrize("dim", [-1, 1, 0])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_distinct_values_compiles(dtype, dim, largest):
    # OpInfo topk float32 #6 (dim=-2) ran through torch: torch-mlir's topk has no CPU kernel
    # (every topk did); now ranked (selection.py), as eager orders distinct values
    x = torch.randperm(60, generator=torch.Generator().manual_seed(3)).reshape(3, 4, 5).to(dtype)
    _check(lambda x: torch.topk(x, 2, dim, largest), x)
    _check(lambda x: torch.topk(x * 2, 3, -1, largest, sorted=True).values + 1, x)


def test_topk_with_nan_and_unsorted_forms():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(0))
    x[1, 3] = float("nan")
    _check(lambda x: torch.topk(x, 3), x)
    _check(lambda x: torch.topk(x, 3, largest=False), x)
    _check(lambda x: torch.topk(x, 1, sorted=False), x)
    _check(lambda x: torch.topk(x, 2, sorted=False), torch.randn(3, 200))   # partial_sort: sorted
    _check(lambda x: torch.topk(x, 1), torch.tensor(2.5))


@pytest.mark.parametrize("x", [torch.tensor([[3, 1, 3, 2, 1], [0, 0, 5, 5, 1]]),
                               torch.tensor([[0.0, -0.0, 1.0, -1.0]]),
                               torch.tensor([[float("nan"), 1.0, float("nan"), 2.0]]),
                               torch.tensor([[7, 200, 7, 3]], dtype=torch.uint8)])
def test_topk_with_ties_gives_eagers_result(x):
    # equal values make eager's indices depend on its partial sort's swaps: the compiled
    # graph flags the call and it reruns eagerly (same values and indices as eager)
    _check(lambda x: torch.topk(x, 2), x, strict=False, calls=3)
    _check(lambda x: torch.topk(x, 2, largest=False), x, strict=False, calls=3)
