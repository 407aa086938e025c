"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2204-2206: op forms that ran
through torch (an eager island, a whole graph eagerly) or gave another result than eager.
Each case compares compiled calls with eager and checks that every graph compiled."""
import contextlib
import io

import pytest
import torch

import mlircap
from compiled_check import all_compiled, check_compiled, same  # test/python/compiled_check.py
from mlircap import logs, speculate


def _outcome(f, *args):
    """f(*args), or the type of the exception it raised."""
    try:
        return f(*args)
    except Exception as e:  # noqa: BLE001
        return type(e)


def _same_outcome(got, want):
    if isinstance(want, type):
        assert got is want, (got, want)
    else:
        same(got, want)


# ------------------------------------------------------------ integer reads inside an op
# OpInfo narrow int8 #3 / bfloat16 #7 (seed 2204): x.narrow(dim, start, n) with a 0-d tensor start
# reads the start with .item(): aot_autograd failed on it and narrow ran as an eager island.
# Speculated now (speculate.py): compiled for the start eager read, guarded by `start == value`.
_NARROWS = {
    "last_dim": (lambda x, t: x.narrow(-1, t, 2) * 2, torch.tensor(2)),
    "negative_start": (lambda x, t: x.narrow(1, t, 3) + 1, torch.tensor(-4)),
    "int32_start": (lambda x, t: x.narrow(0, t, 1).sum(0), torch.tensor(1, dtype=torch.int32)),
    "tensor_split": (lambda x, t: [p * 2 for p in torch.tensor_split(x, t, dim=1)], torch.tensor(3)),
}


@pytest.mark.parametrize("form", list(_NARROWS))
def test_integer_read_inside_an_op_compiles_guarded(form, fallback_log):
    f, t = _NARROWS[form]
    x = torch.randn(4, 6)
    check_compiled(f, [x, t], fallback_log)


def test_integer_read_guard_reruns_eagerly_then_compiles_around_the_op(fallback_log):
    # every start, in range or not (eager's IndexError / RuntimeError), as eager: a start
    # other than the speculated one reruns eagerly, MAX_MISSES times, then the graph is
    # compiled around narrow (an island, what it was without speculation)
    def f(x, t):
        return x.narrow(-1, t, 2) * 2

    fast = mlircap.compile(f)
    x = torch.randn(4, 6)
    starts = [2, 2, 1, 3, -3, 0, 4, 2, 5, -7, 2]
    for v in starts:
        t = torch.tensor(v)
        _same_outcome(_outcome(fast, x, t), _outcome(f, x, t))
    err = fallback_log.readouterr().err
    assert err.count("the data took another path") == speculate.MAX_MISSES, err
    assert "eager islands: narrow" in err, err
    all_compiled(fast)


def test_integer_read_keeps_narrow_a_view_of_the_input():
    # narrow makes a view: an in-place update through it writes the input, as eager's
    def f(x, t):
        y = x.narrow(0, t, 2)
        y.mul_(3)
        return y

    fast = mlircap.compile(f)
    logs.set_logs("fallback")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            for v in (1, 1, 3, 1):
                x1 = torch.randn(5, 3)
                x2 = x1.clone()
                want, got = f(x1, torch.tensor(v)), fast(x2, torch.tensor(v))
                same(got, want)
                same(x2, x1)
                assert got.data_ptr() - x2.data_ptr() == want.data_ptr() - x1.data_ptr()
    finally:
        logs.set_logs()
    assert "guarded" in err.getvalue() and "eager islands: narrow" not in err.getvalue(), err.getvalue()
    all_compiled(fast)


def test_float_reads_are_not_speculated():
    import torch.fx as fx

    gm = fx.symbolic_trace(lambda x, t: x.narrow(0, t, 1))
    assert speculate.observe(gm, [torch.randn(3), torch.tensor(1)]) == [1]
    gm = fx.symbolic_trace(lambda x, t: x * t.item())
    assert speculate.observe(gm, [torch.randn(3), torch.tensor(0.5)]) is None


# ------------------------------------------------------------------------------ uint8 trace
@pytest.mark.parametrize("shape", [(1, 5), (4, 4), (5, 3)], ids=str)
def test_uint8_trace_compiles(shape, fallback_log):
    # OpInfo trace uint8 #3 (seed 2206) ran through torch ('aten.trace (dtype uint8)'): the
    # diagonal's sum in int64 (past 255: 4 x 200 is 800), exact computed in int32 as sum is;
    # x * 3 wraps in uint8 before the sum, as eager's
    x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(5))
    check_compiled(lambda v: (torch.trace(v), torch.trace(v * 3) + 1), [x], fallback_log)
    check_compiled(lambda v: torch.trace(v), [torch.full(shape, 200, dtype=torch.uint8)], fallback_log)
