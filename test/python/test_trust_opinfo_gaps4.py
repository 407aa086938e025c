"""OpInfo sweep (bench/opinfo.py, issue 10), new seeds 401 and 977 on 2026-12-04: a wrong
result, a contained compiler crash and fallbacks turned into compiled code. Each case
compares compiled with eager bit for bit (these forms compute what eager's kernels
compute) and checks that no island ran (the 'fallback' log) and every graph compiled."""
import warnings

import pytest
import torch

import mlircap
from mlircap import logs


@pytest.fixture
def fallback_log(capsys):
    logs.set_logs("fallback")
    yield capsys
    logs.set_logs()


def _same(g, w):
    assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
    torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


def _check(fn, args, log, calls=3):
    """fn compiled: eager's values bit for bit, every graph compiled, no eager island."""
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no 'runs through torch' / 'eagerly' warning
        for _ in range(calls):
            got = fast(*[a.clone() for a in args])
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                _same(g, w)
    err = log.readouterr().err
    assert "eager islands" not in err, err
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    return fast


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
