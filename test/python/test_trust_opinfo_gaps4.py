"""OpInfo sweep (bench/opinfo.py, issue 10), new seeds 401 and 977 on 2026-12-04: a wrong
result, a contained compiler crash and fallbacks turned into compiled code. Each case
compares compiled with eager bit for bit (these forms compute what eager's kernels
compute) and checks that no island ran (the 'fallback' log) and every graph compiled."""
import warnings

import pytest
import torch

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py


_same = same
_check = check_compiled


# ------------------------------------------------------------------ shifts by a tensor amount
# OpInfo bitwise_left_shift int8 #4 (seed 977) was a WRONG result: torch-mlir emitted
# arith.shli/shrsi of the amount as it is, and LLVM's shift by the width or more (or by a
# negative amount) is poison: int8 `5 << 9` gave 5 << 1 = 10 where eager gives 0.
_AMOUNTS = [8, 9, -1, 3, 70, 33, 65, 200, 0, 7, 15, 16, 31, 32, 63, 64]
_VALUES = [5, -3, 100, 1, 7, -128, 3, -1, 127, -7, 2, 9, -100, 1, 64, -2]


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
@pytest.mark.parametrize("op", ["left", "right", "<<", ">>"])
def test_shift_by_tensor_amounts_out_of_range_like_eager(dtype, op, fallback_log):
    a = torch.tensor(_VALUES * 2).to(dtype)
    b = torch.tensor(_AMOUNTS * 2).to(dtype)
    fn = {"left": lambda x, y: torch.bitwise_left_shift(x, y), "right": lambda x, y: torch.bitwise_right_shift(x, y),
          "<<": lambda x, y: x << y, ">>": lambda x, y: x >> y}[op]
    want = fn(a, b)
    # eager: 0 (left) or the sign fill (right) for amounts outside [0, bits)
    bits = torch.iinfo(dtype).bits
    outside = (b.long() < 0) | (b.long() >= bits)
    if dtype != torch.uint8:
        assert outside.any()
    if op in ("left", "<<"):
        assert (want[outside] == 0).all()
    _check(fn, [a, b], fallback_log)


@pytest.mark.parametrize("case", [
    lambda a, b: torch.bitwise_left_shift(a.to(torch.int8), b),         # promoted to int64
    lambda a, b: torch.bitwise_right_shift(-100, b),                    # Scalar_Tensor
    lambda a, b: 3 << b,
    lambda a, b: (a.to(torch.int8) >> b.to(torch.int8)) + 1,            # inside a fused kernel
])
def test_shift_mixed_forms_like_eager(case, fallback_log):
    a = torch.tensor(_VALUES * 3)
    b = torch.tensor(_AMOUNTS * 3)
    _check(case, [a, b], fallback_log)


def test_opinfo_bitwise_left_shift_int8_sample(fallback_log):
    """The sweep's sample: int8 values and amounts drawn from [0, 10): amounts 8 and 9."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-9, 10, (2, 8, 5), dtype=torch.int8, generator=g)
    b = torch.randint(0, 10, (2, 8, 5), dtype=torch.int8, generator=g)
    assert ((b >= 8) & (a != 0)).any()
    _check(lambda x, y: torch.bitwise_left_shift(x, y), [a, b], fallback_log)


# ------------------------------------------------------------------ arange of float / bool numbers
# OpInfo arange int8 #6 (seed 401): arange(False, True, True, dtype=int8) killed the compile
# worker (SIGSEGV in torch-mlir's lowering; contained, the graph ran eagerly); float numbers
# with an integer dtype ran as eager islands ('numerics'). Eager's kernels truncate start and
# step to int64 and take the length from the numbers as they are.
@pytest.mark.parametrize("start,end,step,dtype", [
    (False, True, True, torch.int8),       # OpInfo arange int8 #6
    (2.1, -2.9, -1.0, torch.uint8),        # OpInfo arange uint8 #15: 2, 1, 0, 255, 254
    (1.1, 1.1, 1.0, torch.int64),          # OpInfo arange int64 #16: empty
    (-2.5, 3, 1.5, torch.int8),            # step 1.5 truncated to 1, length 4
    (0.5, 7.2, 2.7, torch.int64),          # int64: the length from the truncated numbers
    (-3.7, 5, 2, torch.int16),
    (1, 10, 2.5, torch.int64),
    (0.5, 300.5, 1.0, torch.uint8),        # wraps past 255
    (-1.5, 70000.25, 3.0, torch.int16),    # wraps past 32767
    (True, 5, 1, None),                    # int64
    (False, True, True, torch.float32),
    (False, True, 0.25, torch.bfloat16),
])
def test_arange_of_float_and_bool_numbers_like_eager(start, end, step, dtype, fallback_log):
    fn = lambda: torch.arange(start, end, step, dtype=dtype)   # noqa: E731
    _check(fn, [], fallback_log)


def test_arange_float_numbers_in_a_graph_with_tensors(fallback_log):
    fn = lambda x: x + torch.arange(-0.5, 9.5, 1.5, dtype=torch.int32)   # noqa: E731
    _check(fn, [torch.arange(7, dtype=torch.int32)], fallback_log)


# ------------------------------------------------------------------ LAPACK error checks
# OpInfo linalg.solve #11, linalg.cholesky #2 (seed 401), linalg.lu_factor #1 (seed 977):
# torch orders aten._linalg_check_errors (eager's error for a singular input) as a side
# effect, and aot_autograd wraps it in the with_effects higher-order op, which the FX importer
# cannot take: an 'unsupported' island. It is part of the library call it checks.
_LAPACK = [
    (lambda a, b: torch.linalg.solve(a, b) * 2 + 1, 2),
    (lambda a, b: torch.linalg.cholesky(a @ a.mT + 3 * torch.eye(4)).exp() + b.sum(), 2),
    (lambda a, b: torch.linalg.inv(a).sum(-1) - b[..., 0], 2),
    (lambda a, b: torch.linalg.lu_factor(a)[0].abs() + 1, 2),
]


@pytest.mark.parametrize("fn,n", _LAPACK)
def test_lapack_error_check_runs_with_its_library_call(fn, n, fallback_log):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 4, 4, generator=g) + 4 * torch.eye(4)
    b = torch.randn(2, 4, 1, generator=g)
    want = fn(a, b)
    fast = mlircap.compile(fn)
    for _ in range(3):
        torch.testing.assert_close(fast(a, b), want)   # (sums: reduction order)
    err = fallback_log.readouterr().err
    islands = [line for line in err.splitlines() if "eager islands" in line]
    assert islands and all("with_effects: library" in line for line in islands), err
    assert "unsupported" not in err, err
    assert all(x.fallback_reason is None for x in fast.graphs), [x.fallback_reason for x in fast.graphs]


def test_lapack_error_check_still_raises_like_eager():
    fn = lambda a: torch.linalg.cholesky(a + 0).exp()   # noqa: E731
    fast = mlircap.compile(fn)
    torch.testing.assert_close(fast(torch.eye(3)), fn(torch.eye(3)))
    bad = -torch.eye(3)
    with pytest.raises(torch.linalg.LinAlgError):
        fn(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(torch.linalg.LinAlgError):
            fast(bad)
    torch.testing.assert_close(fast(2 * torch.eye(3)), fn(2 * torch.eye(3)))


# ------------------------------------------------------------------ linalg.pinv
# OpInfo linalg.pinv #14, linalg.pinv.singular #0/#43 (seed 401), #34 (seed 977): torch-mlir
# cannot import aten.linalg_pinv.atol_rtol_tensor: the whole pinv ran through torch. pinv.py
# follows eager's composite (SVD or eigh as a library call, float64 tolerances, the rest
# compiled): the same bits as eager's.
def _rank_deficient(g):
    a = torch.randn(3, 5, 4, generator=g)
    a[..., 0] = 0
    a[..., 1] = a[..., 2]
    return a


_PINV = [
    (lambda a: torch.linalg.pinv(a), False),
    (lambda a: torch.linalg.pinv(a), True),
    (lambda a: torch.linalg.pinv(a.mT @ a, hermitian=True), True),
    (lambda a: torch.linalg.pinv(a, rtol=0.3), False),
    (lambda a: torch.linalg.pinv(a, atol=1.0), False),
    (lambda a: torch.linalg.pinv(a, atol=torch.tensor([0.5, 0.0, 2.0]), rtol=torch.tensor(0.1)), False),
    (lambda a: torch.linalg.pinv(a, atol=torch.tensor(0.0)), True),   # atol given: rtol 0 only where atol > 0
    (lambda a: torch.pinverse(a, rcond=0.2), True),
    (lambda a: torch.linalg.pinv(a.double()), True),
    (lambda a: torch.linalg.pinv(a) * 2 + 1, False),                     # with compiled work after it
]


@pytest.mark.parametrize("fn,deficient", _PINV)
def test_pinv_compiled_around_its_decomposition_like_eager(fn, deficient, fallback_log):
    g = torch.Generator().manual_seed(0)
    a = _rank_deficient(g) if deficient else torch.randn(3, 5, 4, generator=g)
    want = fn(a)
    fast = mlircap.compile(fn)
    for _ in range(3):
        _same(fast(a), want)
    err = fallback_log.readouterr().err
    islands = [line for line in err.splitlines() if "eager islands" in line]
    assert all(("_linalg_svd: library" in line or "_linalg_eigh: library" in line) and "linalg_pinv" not in line
               for line in islands), err
    assert all(x.fallback_reason is None for x in fast.graphs), [x.fallback_reason for x in fast.graphs]


def test_pinv_gradient_like_eager():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 3, generator=g)
    w = torch.randn(3, 4, generator=g)

    def grads(f):
        x = a.clone().requires_grad_(True)
        (f(x) * w).sum().backward()
        return x.grad

    fn = lambda x: torch.linalg.pinv(x)   # noqa: E731
    fast = mlircap.compile(fn)
    want = grads(fn)
    for _ in range(2):
        torch.testing.assert_close(grads(fast), want)


# ------------------------------------------------------------------ combinations without rows
# Grad sweep (bench/opinfo_grad.py --pick random --seed 1301), combinations #2: x of one
# element, r = 2: no row. bounded.combinations returned a fill, not connected to x: the
# compiled result had no grad_fn where eager's (a stack of empty selections) has one, and a
# backward through it raised ('does not require grad').
@pytest.mark.parametrize("n,r,rep", [(1, 2, False), (1, 3, False), (0, 2, True), (2, 3, False), (1, 0, False),
                                     (3, 2, False), (3, 2, True)])
def test_combinations_keeps_autograd_like_eager(n, r, rep):
    fn = lambda x: torch.combinations(x, r, rep)   # noqa: E731
    fast = mlircap.compile(fn)
    for _ in range(3):
        x = torch.arange(float(n)).requires_grad_(True)
        got, want = fast(x), fn(x)
        _same(got, want)
        assert got.requires_grad == want.requires_grad
        if want.requires_grad:
            w = torch.randn(want.shape, generator=torch.Generator().manual_seed(0))
            _same(torch.autograd.grad((got * w).sum(), x)[0], torch.autograd.grad((want * w).sum(), x)[0])
