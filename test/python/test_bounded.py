"""Ops of data-dependent output size computed compiled at a static bound, then trimmed
(python/mlircap/bounded.py): unique and unique_consecutive no longer run through torch."""
import pytest
import torch

import mlircap
from mlircap import bounded, logs


def _same(actual, expected, exact=True):
    a = actual if isinstance(actual, (tuple, list)) else [actual]
    e = expected if isinstance(expected, (tuple, list)) else [expected]
    assert len(a) == len(e)
    for p, q in zip(a, e):
        assert p.shape == q.shape and p.dtype == q.dtype, (p, q)
        torch.testing.assert_close(p, q, rtol=0 if exact else None, atol=0 if exact else None, equal_nan=True)
        if p.is_floating_point() and exact:
            assert torch.equal(p.signbit(), q.signbit()), (p, q)


def _run(f, *inputs, calls=2, exact=True):
    """Compiles f, calls it `calls` times against eager; returns (compiled, fallback log)."""
    fast = mlircap.compile(f)
    logs.set_logs("fallback")
    try:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            for _ in range(calls):
                _same(fast(*[x.clone() for x in inputs]), f(*[x.clone() for x in inputs]), exact)
    finally:
        logs.set_logs()
    return fast, err.getvalue()


def _all_compiled(fast, log):
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    assert "eager islands" not in log, log
    assert "trimmed to their size" in log, log


CASES = [
    (lambda x: torch.unique(x), torch.tensor([3, 1, 3, 0, 1, 7])),
    (lambda x: torch.unique(x, sorted=False, return_inverse=True), torch.tensor([[5, 3, 5], [1, 9, 3]])),
    (lambda x: torch.unique(x, return_inverse=True, return_counts=True), torch.tensor([2.5, -1.0, 2.5, 0.0, 7.0])),
    (lambda x: x.unique(return_counts=True), torch.tensor([True, False, True, True])),
    (lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True),
     torch.tensor([[1, 2], [1, 2], [0, 5], [1, 1]], dtype=torch.int8)),
    (lambda x: torch.unique(x, dim=1, return_counts=True), torch.tensor([[2., 1., 2.], [1., 5., 1.]])),
    (lambda x: torch.unique_consecutive(x), torch.tensor([1, 1, 2, 2, 2, 3, 1], dtype=torch.int16)),
    (lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
     torch.tensor([[0.5, 0.5], [-2.0, 0.5]], dtype=torch.bfloat16)),
    (lambda x: x.unique_consecutive(dim=1, return_inverse=True, return_counts=True),
     torch.tensor([[[1, 1], [1, 1], [0, 1]], [[2, 2], [2, 2], [2, 2]]], dtype=torch.uint8)),
    (lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True), torch.tensor(4.0)),
    # NaN in unique_consecutive: each NaN its own run, computed exactly
    (lambda x: torch.unique_consecutive(x, return_counts=True), torch.tensor([1.0, float("nan"), float("nan"), 1.0])),
]


@pytest.mark.parametrize("k", range(len(CASES)))
def test_unique_forms_compile_and_match_eager(k):
    f, x = CASES[k]
    fast, log = _run(f, x)
    _all_compiled(fast, log)


def test_random_inputs_match_eager():
    # the bounded form itself (no compile) against eager on many small inputs
    g = torch.Generator().manual_seed(0)
    for i in range(300):
        shape = [int(v) for v in torch.randint(1, 5, (i % 3 + 1,), generator=g)]
        dt = (torch.float32, torch.int64, torch.bool, torch.uint8, torch.bfloat16)[i % 5]
        x = torch.randint(0, 3, shape, generator=g).to(dt)
        consecutive = i % 2 == 1
        dim = None if i % 4 < 2 else int(torch.randint(0, len(shape), (), generator=g))
        op = torch.unique_consecutive if consecutive else torch.unique
        kw = {"return_inverse": True, "return_counts": True, "dim": dim}
        trim = bounded.Trim(op, (), kw, dim, True, True)
        _same(trim(*bounded.bounded_unique(x, dim, consecutive), x), op(x, **kw))


def test_before_and_after_stay_compiled():
    def f(x):
        u, counts = torch.unique((x * 2).floor(), return_counts=True)
        return u.exp() * counts, counts.sum()

    fast, log = _run(f, torch.randn(40), exact=False)   # (exp: compiled polynomial)
    _all_compiled(fast, log)
    assert len(fast.graphs) >= 2   # before (with the bounded unique) and after
    for n in (10, 40):   # other data, other sizes of u
        x = torch.randn(40) * n
        _same(fast(x), f(x), exact=False)


@pytest.mark.parametrize("x", [torch.tensor([3.0, float("nan"), 1.0, 3.0, float("nan")]),
                               torch.tensor([0.0, -0.0, 1.0]), torch.tensor([[-0.0, 2.0], [0.0, 2.0]])])
def test_inputs_it_does_not_model_rerun_through_torch(x):
    # eager's unstable sort orders NaN its own way and picks -0.0 or 0.0: rerun eagerly, reported
    fast, log = _run(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x)
    assert "eager islands: unique: an input its bounded form does not compute" in log, log


def test_larger_inputs_keep_the_island(monkeypatch):
    monkeypatch.setattr(bounded, "MAX_WORK", 100)
    fast, log = _run(lambda t: torch.unique(t) + 1, torch.randint(0, 5, (20,)))
    assert "eager islands: unique: data-dependent" in log, log


@pytest.mark.parametrize("f,x", [
    (lambda x: torch.nonzero(x) + 1, torch.tensor([[0, 1, 2], [3, 0, 0]])),
    (lambda x: x.nonzero(as_tuple=True), torch.tensor([0.0, 1.0, 0.0, -0.0, 2.0])),
    (lambda x: torch.argwhere(x > 0), torch.randn(3, 4)),
    (lambda x: x.argwhere(), torch.tensor([True, False, True])),
    (lambda x: torch.nonzero(x), torch.zeros(2, 3)),   # no row at all
])
def test_nonzero_forms_compile_and_match_eager(f, x):
    fast, log = _run(f, x)
    _all_compiled(fast, log)


def test_larger_nonzero_keeps_the_island():
    # beyond nonzero.py's static form (1024 elements): through torch, as before
    fast, log = _run(lambda t: torch.nonzero(t) * 2, torch.randint(0, 2, (40, 40)))
    assert "eager islands: nonzero: data-dependent" in log, log
