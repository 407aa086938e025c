"""Data-dependent checks inside an op compiled speculatively, with guards
(python/mlircap/speculate.py): gaussian_nll_loss and cov no longer run through torch."""
import contextlib
import io

import pytest
import torch

import mlircap
from mlircap import logs, speculate

F = torch.nn.functional


def _calls(fast, f, args_list):
    logs.set_logs("fallback")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            for args in args_list:
                torch.testing.assert_close(fast(*args), f(*args), equal_nan=True)
    finally:
        logs.set_logs()
    return err.getvalue()


def _compiled(fast):
    return fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


@pytest.mark.parametrize("f,args", [
    (lambda x, t, v: F.gaussian_nll_loss(x, t, v), (torch.randn(4, 3), torch.randn(4, 3), torch.rand(4, 3))),
    (lambda x, t, v: F.gaussian_nll_loss(x * 2, t, v, full=True, reduction="sum"),
     (torch.randn(4, 3), torch.randn(4, 3), torch.rand(4, 1))),
    (lambda x, w: torch.cov(x, fweights=w), (torch.randn(3, 5), torch.randint(1, 4, (5,)))),
    (lambda x: torch.cov(x, correction=0) + 1, (torch.randn(2, 6),)),
])
def test_checks_inside_ops_compile_guarded(f, args):
    fast = mlircap.compile(f)
    log = _calls(fast, f, [args, args, tuple(a.clone() for a in args)])
    assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    assert "eager islands" not in log and "guarded" in log, log


def test_a_failed_guard_reruns_eagerly_and_raises_like_eager():
    def f(x, t, v):
        return F.gaussian_nll_loss(torch.tanh(x), t, v)

    fast = mlircap.compile(f)
    x, t, v = torch.randn(5), torch.randn(5), torch.rand(5)
    _calls(fast, f, [(x, t, v), (x, t, v)])
    with pytest.raises(ValueError, match="var has negative"):
        fast(x, t, -v)
    log = _calls(fast, f, [(x, t, v)])   # and the compiled graph still runs
    assert "eager islands" not in log


def test_a_branch_the_data_does_not_take_reruns_eagerly_then_stays_eager():
    # cov zeroes a non-positive normalization factor (one observation, correction=1)
    def f(x, w):
        return torch.cov(x, fweights=w) * 2

    fast = mlircap.compile(f)
    x = torch.randn(2, 4)
    w2, w1 = torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 0, 0])
    with pytest.warns(UserWarning):   # eager's own warning, from the eager rerun
        log = _calls(fast, f, [(x, w2), (x, w2)] + [(x, w1)] * (speculate.MAX_MISSES + 2) + [(x, w2)])
    assert log.count("the data took another path") == speculate.MAX_MISSES, log


def test_observe_records_boolean_reads_and_refuses_module_state():
    import torch.fx as fx

    gm = fx.symbolic_trace(lambda x, t, v: F.gaussian_nll_loss(x, t, v))
    assert speculate.observe(gm, [torch.randn(3), torch.randn(3), torch.rand(3)]) == [False]
    assert speculate.observe(gm, [torch.randn(3), torch.randn(3), torch.rand(3).requires_grad_()]) is None

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(3))

        def forward(self, x):
            self.b.add_(1)
            return torch.cov(x + self.b)

    m = M()
    gm = fx.symbolic_trace(m)   # (which runs add_ once)
    before = m.b.clone()
    assert speculate.observe(gm, [torch.randn(3, 4)]) is None
    assert torch.equal(m.b, before)


def test_strict_runs_compiled_and_raises_where_a_guard_fails():
    # strict=True raises only where the graph would run eagerly: a failed guard
    fast = mlircap.compile(lambda x, t, v: F.gaussian_nll_loss(x, t, v), strict=True)
    x, t = torch.randn(3), torch.randn(3)
    v = torch.rand(3) + 0.1
    torch.testing.assert_close(fast(x, t, v), F.gaussian_nll_loss(x, t, v))
    with pytest.raises(mlircap.MlircapCompileError):
        fast(x, t, -v)
