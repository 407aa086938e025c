"""OpInfo sweep (bench/opinfo.py, issue 10) fallbacks turned into compiled code: each test
compares compiled calls with eager and checks that the graph compiled whole (no eager
island on the 'fallback' log, every graph compiled)."""
import re

import pytest
import torch

import mlircap
from mlircap import logs


@pytest.fixture
def fallback_log(capsys):
    logs.set_logs("fallback")
    yield capsys
    logs.set_logs()


def _check(fn, args, log, exact=True):
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    for _ in range(3):
        got = fast(*[a.clone() for a in args])
        if exact:
            torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        else:
            torch.testing.assert_close(got, want, equal_nan=True)
    err = log.readouterr().err
    assert not re.search(r"eager islands: \S", err), err
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]


# Ops whose tensor inputs have no elements compute a value of their shapes alone: folded
# to a fill (partition._fold_empty_inputs) instead of an 'empty' eager island.
EMPTY_INPUT_CASES = {
    "vector_norm": (lambda x: torch.linalg.vector_norm(x), [torch.randn(0, 3)]),
    "vector_norm_dim": (lambda x: torch.linalg.vector_norm(x, 2, dim=0), [torch.randn(0, 3)]),
    "sum_dim_plus": (lambda x, y: x.sum(0) + y, [torch.randn(0, 4), torch.randn(4)]),
    "prod_int": (lambda x: x.prod(1), [torch.ones(3, 0, dtype=torch.int32)]),
    "mm_inner_empty": (lambda a, b: a @ b * 2, [torch.randn(3, 0), torch.randn(0, 5)]),
    "mm_int": (lambda a, b: torch.matmul(a, b), [torch.ones(2, 0, dtype=torch.int32),
                                                 torch.ones(0, 4, dtype=torch.int32)]),
    "inv_ex": (lambda x: torch.linalg.inv_ex(x), [torch.randn(0, 0)]),
    "inv_ex_batch": (lambda x: torch.linalg.inv_ex(x)[1] + 1, [torch.randn(2, 0, 0)]),
    "any_all": (lambda x: (x.any(1), x.all(1)), [torch.zeros(2, 0, dtype=torch.bool)]),
    "count_nonzero": (lambda x: torch.count_nonzero(x, 0), [torch.randn(0, 3)]),
}


@pytest.mark.parametrize("name", sorted(EMPTY_INPUT_CASES))
def test_op_of_empty_inputs_is_folded(fallback_log, name):
    fn, args = EMPTY_INPUT_CASES[name]
    _check(fn, args, fallback_log)


def test_fold_keeps_a_non_uniform_result(fallback_log):
    # the complete QR / full SVD of a 3x0 matrix: Q and U are the identity, a result
    # that is not one repeated value, folded to a tensor constant
    def f(x, y):
        q, r = torch.linalg.qr(x, mode="complete")
        u, s, vh = torch.linalg.svd(x)
        return q + y, u * 2, r, s

    _check(f, [torch.randn(3, 0), torch.randn(3, 3)], fallback_log)


def test_fold_is_per_shape():
    # a second shape recompiles and folds again: each fold is of its own shapes
    def f(a, b):
        return (a @ b) + 1

    fast = mlircap.compile(f)
    for k, n in ((0, 3), (0, 5), (2, 5)):
        a, b = torch.randn(4, k), torch.randn(k, n)
        torch.testing.assert_close(fast(a, b), f(a, b))


def test_nan_result_of_empty_input_stays_correct():
    # the variance of nothing is NaN: left as an island (a plan's NaN constant does not
    # round-trip through its JSON), still eager's value
    def f(x):
        return torch.var(x), torch.mean(x, 0)

    x = torch.randn(0, 2)
    fast = mlircap.compile(f)
    for _ in range(2):
        for a, b in zip(fast(x), f(x)):
            torch.testing.assert_close(a, b, equal_nan=True)
