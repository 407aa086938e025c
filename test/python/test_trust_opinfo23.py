"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2204-2206: op forms that ran
through torch (an eager island, a whole graph eagerly) or gave another result than eager.
Each case compares compiled calls with eager and checks that every graph compiled."""
import contextlib
import io
import re

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


# ------------------------------------------------- a parse error names the op and the user's line
def test_parse_error_names_the_op_and_the_users_line():
    # torch-mlir's parser rejected an imported graph (a copy_ into an input returned by the
    # graph: the part after a data-dependent narrow, `y = x.narrow(0, t, 2); y.mul_(3)`): the
    # warning read "Stage 'torch-mlir parse' (torch-mlir) rejected the graph. Unable to parse
    # module assembly:", no op, no line, and the whole graph ran eagerly. The error under the
    # header names the op: it is found in the graph (its user's line) and runs through torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from mlircap.backend import CompiledGraph, _failure_report, _unsupported_nodes
    from mlircap.frontend import FrontendError, import_fx, lower_torch_ir

    gm = make_fx(lambda a: (torch.ops.aten.copy_.default(a, a * 3),))(torch.randn(2, 3))
    with pytest.raises(FrontendError) as err:
        lower_torch_ir(import_fx(gm))
    e = err.value
    assert e.stage == "torch-mlir parse" and str(e).startswith("Unable to parse module assembly:"), str(e)
    named = list(_unsupported_nodes(gm, e).values())
    assert len(named) == 1 and named[0].startswith("aten.copy_ at "), named
    report = _failure_report(CompiledGraph(name="g", gm=gm), e)
    assert "'torch.aten.copy_' op operand #0" in report and "aten.copy_ at" in report, report


def test_inplace_through_a_data_dependent_narrow_after_the_guard_misses():
    # the graph compiled around narrow once its start keeps changing: the part after it
    # writes the input in place; eager's values, the input written as eager's, and a
    # warning, where any, names the op and this file's line, never only the parser's header
    def f(x, t):
        y = x.narrow(0, t, 2)
        y.mul_(3)
        return y

    fast = mlircap.compile(f)
    with pytest.warns() as record:
        for v in (1, 2, 3, 0, 1, 2, 3, 0):
            x1 = torch.randn(5, 3)
            x2 = x1.clone()
            want, got = f(x1, torch.tensor(v)), fast(x2, torch.tensor(v))
            same(got, want)
            same(x2, x1)
        import warnings
        warnings.warn("end of the calls")   # (pytest.warns needs one)
    msgs = [str(w.message) for w in record if str(w.message).startswith("mlircap")]
    for m in msgs:
        assert "Unable to parse module assembly:\n" not in m + "\n" and "test_trust_opinfo23.py:" in m, m


# ---------------------------------------------------------- boolean masks computed at their bound
_MASKED = {
    "masked_select": lambda x, m: torch.masked_select(x, m) * 2,
    "method": lambda x, m: x.masked_select(m) + 1,
    "broadcast_mask": lambda x, m: torch.masked_select(x, m[0]),
    "broadcast_input": lambda x, m: torch.masked_select(x[0], m),
    "getitem": lambda x, m: x[m] - 1,
    "getitem_rows": lambda x, m: (x * 2)[m[:, 0]],
    "int8": lambda x, m: x.to(torch.int8)[m],
}


@pytest.mark.parametrize("form", list(_MASKED))
@pytest.mark.parametrize("threshold", [0.0, 5.0, -5.0], ids=["some", "none", "all"])
def test_boolean_mask_selection_compiles_at_its_bound(form, threshold, fallback_log):
    # OpInfo masked_select int64 #6 (seed 2206) ran through torch ('masked_select:
    # data-dependent'), as did x[mask]: the rows a mask selects, in row-major order, are
    # nonzero.py's static indices of the mask gathered (every row, padded), trimmed to the
    # count (bounded.py). Eager's values, shapes and fresh contiguous storage
    f = _MASKED[form]
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(3)) * 3
    fast = check_compiled(f, [x, x > threshold], fallback_log)
    got, want = fast(x, x > threshold), f(x, x > threshold)
    assert got.stride() == want.stride() or got.numel() == 0
    assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes()


def test_boolean_mask_counts_vary_between_calls(fallback_log):
    def f(x, m):
        return torch.masked_select(x, m) * 3, x[m] * 2, x[m].amax(0) if m.dim() == 1 else m.sum()

    fast = mlircap.compile(f)
    g = torch.Generator().manual_seed(4)
    for t in (0.0, 1.0, -1.0, 0.5, 0.0):
        x = torch.randn(6, 7, generator=g)
        got, want = fast(x, x > t), f(x, x > t)
        for a, b in zip(got, want):
            same(a, b)
    err = fallback_log.readouterr().err
    assert not re.search(r"eager islands: \S", err), err
    all_compiled(fast)


def test_mask_errors_and_large_or_grad_masks_stay_eager():
    # a mask of another shape raises eager's IndexError; one past 1024 elements and an input
    # that requires grad keep the op through torch (eager's values, eager's gradient)
    def f(x, m):
        return x[m] * 2

    fast = mlircap.compile(f)
    x = torch.randn(4, 5)
    with pytest.raises(IndexError):
        fast(x, torch.ones(3, 5, dtype=torch.bool))
    big = torch.randn(64, 40)
    same(fast(big, big > 0), f(big, big > 0))
    xg = torch.randn(4, 5, requires_grad=True)
    xe = xg.detach().clone().requires_grad_()
    fast(xg, xg > 0).sum().backward()
    f(xe, xe > 0).sum().backward()
    same(xg.grad, xe.grad)
