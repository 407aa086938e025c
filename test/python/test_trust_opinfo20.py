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


# -------------------------------------------------------------------------------- histogram
def _hist_input(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 7, generator=g, dtype=torch.float64).to(dtype) * 2
    x[0, :5] = torch.tensor([float("nan"), -1.0, 0.0, 1.0, 3.0], dtype=dtype)   # NaN, edges, outside
    return x, torch.rand(6, 7, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("edges", [[-1.0, 0.0, 0.5, 1.0, 3.0], [-1.0, 1.0, 1.0, 2.0], [0.0, 2.0, 1.0, 3.0, -1.0, 4.0],
                                   [-3.0, float("nan"), 3.0], [1.0, 1.0]],
                         ids=["sorted", "repeated", "unsorted", "nan", "one-bin"])
@pytest.mark.parametrize("weighted,density", [(False, False), (True, False), (False, True), (True, True)])
def test_histogram_of_a_bins_tensor_compiles(fallback_log, dtype, edges, weighted, density):
    # OpInfo histogram float32 #31 (seed 2001) ran through torch (aten.histogram.bins_tensor,
    # no torch-mlir lowering). Each element's bin is eager's std::upper_bound, whatever the
    # order of the edges (an unsorted or NaN edge too); the last edge is in the last bin
    x, w = _hist_input(dtype)
    b = torch.tensor(edges, dtype=dtype)
    kw = {"density": density}
    if weighted:
        check_compiled(lambda a, e, v: torch.histogram(a, e, weight=v, **kw), [x, b, w], fallback_log, exact=False)
    else:
        check_compiled(lambda a, e: torch.histogram(a, e, **kw), [x, b], fallback_log, exact=not density)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bins,rng", [(4, (-1.0, 3.0)), (7, (-2.5, 2.5)), (1, (0.0, 1.0)), (100, (-3.0, 3.0)),
                                      (3, (1.0, 1.0)), (10, (0.1, 0.7))])
@pytest.mark.parametrize("weighted,density", [(False, False), (True, True)])
def test_histogram_with_a_range_compiles(fallback_log, dtype, bins, rng, weighted, density):
    # aten.histogram.bin_ct with range=: eager's linspace edges (a constant), the bin
    # interpolated in the dtype then searched around as eager's kernel does
    x, w = _hist_input(dtype)
    x = torch.cat([x.reshape(-1), torch.linspace(rng[0], rng[1], bins + 1, dtype=dtype)])   # the edges themselves
    w = torch.cat([w.reshape(-1), torch.ones(bins + 1, dtype=dtype)])
    kw = {"range": rng, "density": density}
    if weighted:
        check_compiled(lambda a, v: torch.histogram(a, bins, weight=v, **kw), [x, w], fallback_log, exact=False)
    else:
        check_compiled(lambda a: torch.histogram(a, bins, **kw), [x], fallback_log)


def test_histogram_without_a_range_stays_eager():
    # bins from the data (eager raises on a non-finite element): left whole, eager's values
    fn = lambda a: torch.histogram(a, 5)   # noqa: E731
    fast = mlircap.compile(fn)
    x = torch.tensor([0.0, 1.0, 2.5, 2.5, 4.0])
    for _ in range(2):
        got, want = fast(x), fn(x)
        torch.testing.assert_close(got.hist, want.hist, rtol=0, atol=0)
        torch.testing.assert_close(got.bin_edges, want.bin_edges, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="not finite"):
        fast(torch.tensor([0.0, float("inf")]))


# ------------------------------------------------------------------------ repeat_interleave
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("repeats,dim,size", [([0, 1, 2, 3], 0, 6), ([2, 0], 1, 2), ([1, 1, 1, 2, 0, 0, 0, 1], None, 6),
                                              ([3], None, 24)])
@pytest.mark.parametrize("rdtype", [torch.int64, torch.int32])
def test_repeat_interleave_with_output_size_compiles(fallback_log, dtype, repeats, dim, size, rdtype):
    # OpInfo repeat_interleave uint8 #4 (seed 2003: 'aten.repeat_interleave (no CPU kernel)'):
    # with output_size= the length is known, the indices are a comparison count
    x = (torch.arange(8.0).reshape(4, 2) * 37).to(dtype)
    if repeats == [3]:
        x = x.reshape(-1)
        repeats = [3] * 8
    r = torch.tensor(repeats, dtype=rdtype)
    check_compiled(lambda a, b: torch.repeat_interleave(a, b, dim=dim, output_size=size), [x, r], fallback_log)
    check_compiled(lambda b: torch.repeat_interleave(b, output_size=size), [r], fallback_log)


@pytest.mark.parametrize("bad,match", [([0, 1, 2, 4], "does not match"), ([4, 1, 2, -1], "negative")])
def test_repeat_interleave_with_output_size_raises_as_eager(bad, match):
    # a sum other than output_size, a negative repeat: eager raises; compiled, the assert
    # reruns the graph eagerly, which raises the same
    x = torch.arange(8.0).reshape(4, 2)
    fast = mlircap.compile(lambda a, b: torch.repeat_interleave(a, b, dim=0, output_size=6) * 2)
    torch.testing.assert_close(fast(x, torch.tensor([3, 1, 2, 0])), torch.repeat_interleave(x, torch.tensor([3, 1, 2, 0]), dim=0) * 2)
    with pytest.raises(RuntimeError, match=match):
        fast(x, torch.tensor(bad))


# ------------------------------------------------------------------- gradients through cdist
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, float("inf")])
@pytest.mark.parametrize("extra", [False, True])
def test_cdist_gradients_as_eager(p, extra):
    # bench/opinfo_grad.py --seed 2004 --pick random: cdist #11 (p=0) 'gradient differs (max
    # None)': eager's formula gives x1 and x2 zero gradients, compiled left them None (the
    # reach of inputs to outputs read autograd's edges off the decomposed forward, cut at the
    # `ne` of its count of differing features)
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(2, 5, 3, generator=g), torch.randn(2, 4, 3, generator=g)
    x2[0, 1] = x1[0, 2]   # a pair at distance 0

    def fn(a, b):
        d = torch.cdist(a, b, p)
        return d + a.sum() if extra else d

    fast = mlircap.compile(fn)
    w = torch.randn(2, 5, 4, generator=g)
    grads = []
    for f in (fn, fast, fast, fast):
        a, b = x1.clone().requires_grad_(), x2.clone().requires_grad_()
        (f(a, b) * w).sum().backward()
        grads.append((a.grad, b.grad))
    for ga, gb in grads[1:]:
        assert ga is not None and gb is not None
        torch.testing.assert_close(ga, grads[0][0])
        torch.testing.assert_close(gb, grads[0][1])


def test_unused_head_through_cdist_keeps_none_gradient():
    # the reach still cuts where eager's autograd does: an input feeding only an output the
    # loss does not use keeps a None gradient (p=0 cdist of b alone)
    fn = lambda a, b: (a * 2, torch.cdist(b, b, 0.0))   # noqa: E731
    fast = mlircap.compile(fn)
    for f in (fn, fast, fast):
        a, b = torch.randn(3, 2, requires_grad=True), torch.randn(4, 2, requires_grad=True)
        f(a, b)[0].sum().backward()
        assert a.grad is not None and b.grad is None
