"""OpInfo sweep (bench/opinfo.py, issue 10), held-out seeds 2001-2003: op forms that ran
through torch (an eager island, a whole graph eagerly, or no graph at all). Each case
compares compiled calls with eager and checks that every graph compiled."""
import pytest
import torch

import mlircap
from compiled_check import all_compiled, check_compiled  # test/python/compiled_check.py


# ------------------------------------------------------------------------------------ equal
_NAN = float("nan")


@pytest.mark.parametrize("a,b", [
    (torch.tensor([1.0, 2.0, -0.0]), torch.tensor([1.0, 2.0, 0.0])),          # -0.0 == 0.0
    (torch.tensor([1.0, _NAN]), torch.tensor([1.0, _NAN])),                    # NaN is unequal
    (torch.tensor([[1, 2], [3, 4]], dtype=torch.int8), torch.tensor([[1, 2], [3, 5]], dtype=torch.int8)),
    (torch.arange(6), torch.arange(6.0)),                                      # promoted, as eager
    (torch.tensor([True, False]), torch.tensor([True, False])),
    (torch.tensor(3.5).bfloat16(), torch.tensor(3.5).bfloat16()),               # 0-dim
    (torch.zeros(0, 3), torch.zeros(0, 3)),                                    # empty: True
    (torch.ones(2, 3), torch.ones(3)),                                         # shapes differ: False
], ids=["signed-zero", "nan", "int8", "promote", "bool", "0d", "empty", "shapes"])
def test_equal_is_a_graph_and_a_bool(a, b):
    # OpInfo equal int8 #3 (seed 2001): torch.equal was one data-dependent call, no graph
    # ('no graph captured'). Eager's equal of same-shaped tensors is eq(a, b).all(): a
    # compiled graph, and the bool after it the only break (as allclose)
    for fn in (lambda x, y: torch.equal(x, y), lambda x, y: x.equal(y), lambda x, y: torch.equal(x * 1, y)):
        want = fn(a, b)
        fast = mlircap.compile(fn)
        for _ in range(3):
            got = fast(a.clone(), b.clone())
            assert type(got) is bool and got == want
        if a.shape == b.shape:
            all_compiled(fast)
            assert fast.explain().graph_count == 1


def test_equal_of_an_alias_with_nan_as_eager():
    # eager (2.13) compares a tensor with itself element by element too: NaN makes it False
    x = torch.tensor([1.0, _NAN, 2.0])
    for fn in (lambda t: torch.equal(t, t), lambda t: torch.equal(t, t.view(3)), lambda t: torch.equal(t[:2], t[:2])):
        fast = mlircap.compile(fn)
        for v in (x, torch.tensor([1.0, 2.0, 3.0])):
            assert fast(v) == fn(v)


def test_equal_of_a_data_dependent_shape_as_eager():
    # nonzero / a boolean mask stay inside a graph (their shape follows the data): equal of
    # such a tensor is left to eager's call, whose shapes may differ from call to call
    def f(x):
        return torch.equal(torch.nonzero(x), torch.tensor([[0], [2]])), torch.equal(x[x > 0] * 2, torch.tensor([2.0, 6.0]))

    fast = mlircap.compile(f)
    for v in ([1.0, 0, 3], [1.0, 0, 3], [1.0, 1, 3], [1.0, 0, 3, 0], [0.0, 0, 3], [1.0, 0, 3]):
        assert fast(torch.tensor(v)) == f(torch.tensor(v))


def test_equal_branch_compiles_around_the_break():
    # a program branching on torch.equal: the code before and after the test compile, and
    # each branch is taken as eager takes it
    def f(a, b):
        c = a * 2
        if torch.equal(c, b):
            return c + 1
        return c - b

    fast = mlircap.compile(f)
    x = torch.tensor([1.0, 2.0, 3.0])
    for b in (x * 2, x.clone(), x * 2, torch.tensor([2.0, 4.0, _NAN])):
        torch.testing.assert_close(fast(x, b), f(x, b), equal_nan=True, rtol=0, atol=0)
    all_compiled(fast)
    assert "Tensor.equal" not in str(fast.explain())   # the break is the bool, not eager's equal


# ------------------------------------------------------------------------------- resize_as_
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
@pytest.mark.parametrize("x_shape,y_shape", [((3, 4), (2, 6)), ((3, 4), (2, 2)), ((5,), ()), ((2, 3), (0, 4)),
                                             ((2, 1, 3), (3, 2))])
def test_resize_as_compiles(fallback_log, dtype, x_shape, y_shape):
    # OpInfo resize_as_ (x.clone().resize_as_(y)): functionalized to aten.resize, which
    # torch-mlir cannot lower (an island). A contiguous x keeps its storage: the result is its
    # first numel(y) elements in order
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(x_shape, generator=g) * 4).to(dtype)
    y = torch.randn(y_shape, generator=g).to(dtype)
    check_compiled(lambda a, b: torch.resize_as_(a.clone(), b) * 1, [x, y], fallback_log)
    check_compiled(lambda a, b: a.clone().resize_as_(b).clone(), [x, y], fallback_log)


def test_resize_as_of_a_transposed_clone_stays_eager():
    # a non-contiguous x (a clone keeps the transposed layout): eager's resize reinterprets
    # its storage, which this rewrite does not model: the op stays whole and gives eager's
    x = torch.arange(12.0).reshape(3, 4).t()
    fn = lambda a, b: torch.resize_as_(a.clone(), b) + 1   # noqa: E731
    fast = mlircap.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(fast(x, torch.zeros(2, 6)), fn(x, torch.zeros(2, 6)), rtol=0, atol=0)


def test_resize_as_of_uint8_compiles(fallback_log):
    # OpInfo resize_as_ uint8: kept whole for its dtype ('dtype uint8') before the rewrite
    x = torch.tensor([[0, 255, 128], [7, 200, 1]], dtype=torch.uint8)
    check_compiled(lambda a, b: torch.resize_as_(a.clone(), b) + 1, [x, torch.zeros(5, dtype=torch.uint8)],
                   fallback_log)


# ---------------------------------------------------------------------------------- aminmax
@pytest.mark.parametrize("kwargs", [{}, {"dim": 0}, {"dim": 1, "keepdim": True}, {"dim": -1}])
def test_uint8_aminmax_compiles(fallback_log, kwargs):
    # OpInfo aminmax uint8 #0 (seed 2001) ran through torch ('dtype uint8'): its
    # decomposition only compares (amin, amax), exact in the widened int32 code
    x = torch.tensor([[0, 255, 128, 3], [129, 127, 255, 0], [1, 2, 254, 200]], dtype=torch.uint8)
    check_compiled(lambda a: torch.aminmax(a, **kwargs), [x], fallback_log)
    check_compiled(lambda a: torch.aminmax(a, **kwargs), [x[:, ::2]], fallback_log)
