"""CPU reductions of every loop shape against eager (mlircap-reduction-loops):
reduction dims innermost (accumulators in registers, parallel dims moved
outside: BatchNorm statistics over N, H, W), parallel dims innermost (column
sums, x.sum(1) on NCHW: accumulators in a stack tile, long columns cut into
tiles that run in parallel), contiguous dims collapsed (NCHW's H, W), and
layouts or maps that keep them apart (slices, keepdim, transposes)."""
import pytest
import torch

import mlircap


def _gen():
    return torch.Generator().manual_seed(0)


def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_gen(), dtype=dtype)


CASES = {
    # parallel dims innermost: a tile of accumulators
    "sum1_nchw": (lambda x: x.sum(1), lambda: (_randn(4, 16, 8, 8),)),
    "sum1_nchw_odd": (lambda x: x.sum(1), lambda: (_randn(3, 5, 7, 9),)),
    "sum1_keepdim": (lambda x: x.sum(1, keepdim=True) * 2, lambda: (_randn(2, 6, 5, 4),)),
    "mean0": (lambda x: x.mean(0), lambda: (_randn(64, 1000),)),      # 5 parallel tiles of 200
    "mean0_partial": (lambda x: x.mean(0), lambda: (_randn(64, 1001),)),  # 8 of 128, last partial
    "mean0_long": (lambda x: x.mean(0), lambda: (_randn(3, 5000),)),  # tiles of at most 1024
    "sum1_long_partial": (lambda x: x.sum(1), lambda: (_randn(9, 3, 2053),)),
    "sum0_small": (lambda x: x.sum(0), lambda: (_randn(64, 32),)),
    "sum0_of_square_plus": (lambda x: (x * x).sum(0) + 1, lambda: (_randn(37, 300),)),
    "sum_0_2": (lambda x: x.sum((0, 2)), lambda: (_randn(6, 5, 7, 8),)),   # r p r p
    "amax1": (lambda x: x.amax(1), lambda: (_randn(2, 8, 5, 6),)),
    "amin0": (lambda x: x.amin(0), lambda: (_randn(9, 130),)),
    "prod0": (lambda x: x.prod(0), lambda: (torch.rand(5, 300, generator=_gen()) + 0.5,)),
    "argmax1": (lambda x: x.argmax(1), lambda: (_randn(2, 8, 5, 6),)),
    "max1_values_indices": (lambda x: tuple(torch.max(x, 1)), lambda: (_randn(3, 7, 4, 5),)),
    "argmin0_ties": (lambda x: x.argmin(0), lambda: (torch.randint(0, 3, (40, 70), generator=_gen()).float(),)),
    "sum0_int64": (lambda x: x.sum(0), lambda: (torch.randint(-50, 50, (33, 77), generator=_gen()),)),
    "sum0_f64": (lambda x: x.sum(0), lambda: (_randn(50, 200, dtype=torch.float64),)),
    "sum0_sliced": (lambda x: x[:, 3:].sum(0), lambda: (_randn(20, 67),)),    # strided input
    "sum0_transposed": (lambda x: x.t().sum(0), lambda: (_randn(30, 40),)),  # a row sum underneath
    # reduction dims innermost, parallel dims moved outside them
    "sum023": (lambda x: x.sum((0, 2, 3)), lambda: (_randn(4, 16, 8, 8),)),
    "bn_stats": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), lambda: (_randn(4, 16, 8, 8),)),
    "sum_1_3": (lambda x: x.sum((1, 3)), lambda: (_randn(3, 4, 5, 6),)),   # p r p r
    # reduction dims innermost, short rows collapsed
    "sum_last32": (lambda x: x.sum(-1), lambda: (_randn(16, 8, 32),)),
    "sum_23": (lambda x: x.sum((2, 3)), lambda: (_randn(2, 6, 32, 32),)),
    "amax_last": (lambda x: x.amax(-1), lambda: (_randn(2, 32, 32, 32),)),
}


@pytest.mark.parametrize("name", CASES)
def test_reduction_matches_eager(name):
    fn, make = CASES[name]
    args = make()
    fast = mlircap.compile(fn, strict=True)
    with torch.no_grad():
        want = fn(*args)
        fast(*args)
        got = fast(*args)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)
    torch.testing.assert_close(got, want)


def test_batch_norm_training_matches_eager():
    bn = torch.nn.BatchNorm2d(16)
    ref = torch.nn.BatchNorm2d(16)
    ref.load_state_dict(bn.state_dict())
    x = _randn(4, 16, 8, 8)
    fast = mlircap.compile(bn)
    fast(x)
    got = fast(x)
    ref(x)             # two calls each: the running statistics are updated twice
    torch.testing.assert_close(got, ref(x))
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    assert all(g.fallback_reason is None for g in fast.graphs)


def test_column_tile_lowering_is_used():
    """The NCHW channel sum runs through the stack tile (alloca_scope lowers
    to stacksave/stackrestore), not the generic's loops through memory."""
    fast = mlircap.compile(lambda x: x.sum(1), strict=True)
    x = _randn(4, 16, 8, 8)
    fast(x)
    llvm = fast.ir("llvm")
    assert "llvm.intr.stacksave" in llvm and "llvm.alloca" in llvm
    torch.testing.assert_close(fast(x), x.sum(1))


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


PARALLEL = {
    # few outputs, long rows: chunks of the row summed in parallel, combined in chunk order
    "sum_all": (lambda x: x.sum(), lambda: (_randn(1 << 20),)),
    "sum_all_odd": (lambda x: x.sum(), lambda: (_randn(1000003),)),
    "mean_var_2_rows": (lambda x: (x.mean(-1), x.var(-1)), lambda: (_randn(2, 300001),)),
    "amax_all": (lambda x: x.amax(), lambda: (_randn(5, 70001),)),
    "prod_rows": (lambda x: x.prod(-1), lambda: (torch.rand(3, 50000, generator=_gen()) * 0.001 + 0.9995,)),
    "sum_int64": (lambda x: x.sum(), lambda: (torch.randint(-1000, 1000, (300000,), generator=_gen()),)),
    "sum_f64": (lambda x: x.sum(), lambda: (_randn(200003, dtype=torch.float64),)),
    "norm_all": (lambda x: x.norm(), lambda: (_randn(4, 256, 256),)),
    "sum1_nchw": (lambda x: x.sum(1), lambda: (_randn(8, 64, 32, 32),)),
    "mean0_tiles": (lambda x: x.mean(0), lambda: (_randn(256, 1000),)),
    "sum0_partial_tiles": (lambda x: x.sum(0), lambda: (_randn(256, 1001),)),
    "bn_stats": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), lambda: (_randn(8, 64, 32, 32),)),
    "argmax1": (lambda x: x.argmax(1), lambda: (_randn(8, 64, 32, 32),)),
}


@pytest.mark.parametrize("name", PARALLEL)
def test_same_bits_on_1_and_2_threads(name, restore_threads):
    fn, make = PARALLEL[name]
    args = make()
    fast = mlircap.compile(fn, strict=True)
    outs = []
    with torch.no_grad():
        for n in (1, 2):
            torch.set_num_threads(n)
            fast(*args)
            outs.append(fast(*args))
        want = fn(*args)
    # a product of 50000 f32 factors is 1e-5 off in any order (eager's as well)
    torch.testing.assert_close(outs[0], want, **({"rtol": 1e-4, "atol": 0} if name == "prod_rows" else {}))
    for a, b in zip(outs[0] if isinstance(want, tuple) else [outs[0]],
                    outs[1] if isinstance(want, tuple) else [outs[1]]):
        assert torch.equal(a, b)
    assert "mlircap_parallel_for" in fast.ir("llvm")


def test_reduction_over_a_column_of_nan_and_inf_like_eager():
    x = _randn(16, 40)
    x[3, 5] = float("nan")
    x[7, 9] = float("inf")
    x[2, 11] = float("-inf")
    for fn in (lambda t: t.sum(0), lambda t: t.amax(0), lambda t: t.amin(0), lambda t: t.argmax(0)):
        fast = mlircap.compile(fn, strict=True)
        fast(x)
        torch.testing.assert_close(fast(x), fn(x), equal_nan=True)



@pytest.mark.parametrize("where", ["none", "first", "middle", "last", "all_nan", "all_ninf"])
def test_row_max_and_min_with_nan_and_inf_like_eager(where):
    # Row max/min accumulate as a max that assumes no NaN plus a NaN flag
    # (mlircap-reduction-loops): a NaN anywhere in a row, also in the middle of
    # a multi-dim reduction or a chunk of a long row, gives NaN.
    x = _randn(6, 5, 300)
    x[1, :, 7] = float("inf")
    x[2, 3, :] = float("-inf")
    pos = {"first": 0, "middle": 150, "last": 299}.get(where)
    if pos is not None:
        x[0, 0, pos] = float("nan")
        x[4, 2, pos] = float("nan")
    elif where == "all_nan":
        x[3] = float("nan")
    elif where == "all_ninf":
        x[3] = float("-inf")
    long = _randn(2, 70000)
    if pos is not None:
        long[1, pos * 200] = float("nan")
    fns = (lambda t: t.amax(-1), lambda t: t.amin(-1), lambda t: t.amax((1, 2)),
           lambda t: t.amin((0, 2)), lambda t: torch.softmax(t, -1),
           lambda t: F.max_pool2d(t.unsqueeze(0), 3, 2))
    for fn in fns:
        fast = mlircap.compile(fn, strict=True)
        fast(x)
        torch.testing.assert_close(fast(x), fn(x), equal_nan=True)
    for fn in (lambda t: t.amax(-1), lambda t: t.amin(-1)):
        fast = mlircap.compile(fn, strict=True)
        fast(long)
        torch.testing.assert_close(fast(long), fn(long), equal_nan=True)


@pytest.mark.parametrize("n", [257, 1000, 1024, 4096])
def test_long_rows_unrolled_twice_like_eager(n):
    # Innermost reduction loops of >= 256 iterations are unrolled at most twice
    # (vector loop, remainder): a NaN or inf in any position of a vector,
    # an unrolled copy or the remainder gives eager's result.
    x = _randn(8, n)
    for row, pos in enumerate([0, 15, 16 * 4 + 3, 16 * 8 + 5, n // 2, n - 17, n - 1]):
        x[row, pos] = float("nan")
    x[7, n - 1] = float("inf")
    for fn in (lambda t: t.amax(-1), lambda t: t.amin(-1), lambda t: t.sum(-1),
               lambda t: torch.softmax(t, -1)):
        fast = mlircap.compile(fn, strict=True)
        for t in (x, x.nan_to_num(0.0)):
            fast(t)
            torch.testing.assert_close(fast(t), fn(t), equal_nan=True)



@pytest.mark.parametrize("shape", [(256, 1024), (64, 768), (16, 4096), (4, 3000), (32, 77)])
@pytest.mark.parametrize("kind", ["randn", "offset", "small"])
def test_layer_norm_f32_as_accurate_as_eager(shape, kind):
    # float32 LayerNorm on the CPU: mean and variance summed in float (blocked sums,
    # batchnorm._layer_norm_f32) as eager's kernel does, not var_mean's double: the
    # output, mean and rstd are as close to a float64 LayerNorm as eager's.
    # Rows far from 0 (offset): the mean is corrected by the mean deviation from it,
    # summed in the variance pass (one f32 block sum alone was 2-3x eager's error).
    factor = 2
    g = _gen()
    n = shape[-1]
    x = torch.randn(*shape, generator=g)
    x = {"randn": x, "offset": x * 3 + 1000, "small": x * 1e-3 - 0.5}[kind]
    w, b = torch.randn(n, generator=g), torch.randn(n, generator=g)

    def fn(x, w, b):
        return torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)

    fast = mlircap.compile(fn, strict=True)
    fast(x, w, b)
    got, want = fast(x, w, b), fn(x, w, b)
    exact = fn(x.double(), w.double(), b.double())
    for g_, w_, e in zip(got, want, exact):
        torch.testing.assert_close(g_, w_, rtol=1e-4, atol=1e-3)
        err_got, err_want = ((g_.double() - e).abs().max().item(), (w_.double() - e).abs().max().item())
        assert err_got <= max(factor * err_want, 4e-7 * e.abs().max().item()), (err_got, err_want)


def test_layer_norm_f32_gradients_like_eager():
    g = _gen()
    x = torch.randn(64, 768, generator=g, requires_grad=True)
    w = torch.randn(768, generator=g, requires_grad=True)
    b = torch.randn(768, generator=g, requires_grad=True)
    dy = torch.randn(64, 768, generator=g)

    def fn(x, w, b):
        return F.layer_norm(x, (768,), w, b)

    fast = mlircap.compile(fn, strict=True)
    grads = []
    for f in (fast, fn):
        for t in (x, w, b):
            t.grad = None
        f(x, w, b).backward(dy)
        grads.append([t.grad.clone() for t in (x, w, b)])
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

F = torch.nn.functional
# f32 sums over an innermost dim of at least 64 elements are summed in blocks of 1024
# (mlircap-reduction-loops): each block in f32, the blocks' sums in f64
BLOCKED = {
    "row_sum_63": (lambda x: x.sum(-1), (8, 63)),         # f64 accumulators (too short)
    "row_sum_511": (lambda x: x.sum(-1), (8, 511)),       # one partial block
    "row_sum_1024": (lambda x: x.sum(-1), (8, 1024)),
    "row_sum_2049": (lambda x: x.sum(-1), (8, 2049)),     # a partial last block
    "row_sum_4097": (lambda x: x.sum(-1), (3, 4097)),
    "row_sum_long": (lambda x: x.sum(-1), (3, 100003)),   # split into chunks (few rows)
    "mean_rows": (lambda x: x.mean(-1), (16, 3000)),
    "var_rows": (lambda x: x.var(-1), (16, 3000)),
    "layer_norm": (lambda x: F.layer_norm(x, (2048,)), (8, 2048)),
    "softmax": (lambda x: torch.softmax(x, -1), (8, 2048)),
    "logsumexp": (lambda x: torch.logsumexp(x, -1), (8, 2048)),
    "norm": (lambda x: x.norm(dim=-1), (8, 2048)),
    "sum_all": (lambda x: x.sum(), (1 << 20,)),
    "sum_23_nchw": (lambda x: x.sum((2, 3)), (2, 4, 32, 32)),   # H, W collapsed to 1024
}


@pytest.mark.parametrize("name", BLOCKED)
def test_blocked_sums_match_eager_and_are_accurate(name):
    fn, shape = BLOCKED[name]
    x = torch.rand(*shape, generator=_gen()) + 0.5      # positive: errors of a long f32 chain add up
    fast = mlircap.compile(fn, strict=True)
    with torch.no_grad():
        fast(x)
        got = fast(x)
    want = fn(x)
    torch.testing.assert_close(got, want)
    exact = fn(x.double())

    def err(t):   # largest error relative to the result's scale
        return ((t.double() - exact).abs().max() / exact.abs().max()).item()
    assert err(got) <= max(2 * err(want), 2.5e-7), (name, err(got), err(want))


def test_blocked_sum_of_a_million_is_as_accurate_as_eager():
    # one f32 chain over 2^20 terms in [0.5, 1.5): relative error ~1e-5; blocks of 1024
    # in f32 and their sums in f64 stay at a few ulps, as eager's cascade sum does
    x = torch.rand(1 << 20, generator=_gen()) + 0.5
    fast = mlircap.compile(lambda t: t.sum(-1), strict=True)
    fast(x)
    exact = x.double().sum()
    err = abs(fast(x).double() - exact) / exact
    eager_err = abs(x.sum().double() - exact) / exact
    assert err <= max(2 * eager_err, 1.2e-7)


def test_split_full_sum_runs_chunks_in_parallel():
    """x.sum() of 2^20 elements: its one output's row is cut into chunks
    (mlircap-reduction-loops), the chunks' loop outlined onto the thread pool."""
    fast = mlircap.compile(lambda x: x.sum(), strict=True)
    x = torch.rand(1 << 20, generator=_gen()) + 0.5
    fast(x)
    llvm = fast.ir("llvm")
    assert "mlircap_parallel_for" in llvm and "llvm.intr.stacksave" in llvm
    exact = x.double().sum()
    assert abs(fast(x).double() - exact) / exact <= max(2 * abs(x.sum().double() - exact) / exact, 1.2e-7)
