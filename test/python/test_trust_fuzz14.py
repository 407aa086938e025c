"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10): the wrong results and
errors it found, minimized. Each case compares compiled calls (the recording call and the
replayed compiled variant) with eager, values and dtype included."""
import pytest
import torch

import mlircap


def _calls(fn, *args, seed=None, n=3):
    """Eager's result and the compiled calls' results, each on fresh copies of the args
    (their layouts kept), after torch.manual_seed(seed) when seed is not None."""
    def run(f):
        if seed is not None:
            torch.manual_seed(seed)
        return f(*[a.clone(memory_format=torch.preserve_format) for a in args])
    want = run(fn)
    fast = mlircap.compile(fn)
    return want, [run(fast) for _ in range(n)], fast


# ----------------------------------------------------------------- random ops on strided inputs
_LAYOUTS = {
    "transposed": lambda: torch.randn(5, 4).t(),
    "channels_last": lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "permuted3d": lambda: torch.randn(2, 3, 4).permute(2, 0, 1),
}
_RANDOM_LIKES = {
    "rand_like": lambda x: torch.rand_like(x) * 2,
    "randn_like": lambda x: torch.randn_like(x) + x,
    "randn_like_bf16": lambda x: torch.randn_like(x.bfloat16()) * 3,
    "rand_like_double": lambda x: torch.rand_like(x.double()) - 0.5,
}


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("op", sorted(_RANDOM_LIKES))
def test_random_like_of_strided_tensor_draws_as_eager(layout, op):
    # seeds 171, 175, 372: rand_like / randn_like of a transposed or channels_last tensor gave
    # other numbers than eager's under the same torch.manual_seed. Eager draws into a tensor
    # laid out as its argument (memory order; randn one number at a time where a contiguous
    # result takes the vectorized path); the compiled graph drew a contiguous rand(shape).
    fn = _RANDOM_LIKES[op]
    x = _LAYOUTS[layout]()
    want, got, fast = _calls(fn, x, seed=7)
    for g in got:
        assert g.dtype == want.dtype and g.shape == want.shape
        assert torch.equal(g, want)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


# ----------------------------------------------------------------- fmin / fmax promotion
_PROMOTION_OPERANDS = [
    (torch.float16, torch.float32),    # a dimensioned float16 and a 0-dim float32: float16
    (torch.bfloat16, torch.float64),
    (torch.float32, torch.float64),
    (torch.int32, torch.int64),        # int32
    (torch.int64, torch.float64),      # a 0-dim float decides the category: float32
    (torch.uint8, torch.int64),
]


@pytest.mark.parametrize("op", ["fmin", "fmax"])
@pytest.mark.parametrize("dtypes", _PROMOTION_OPERANDS, ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
@pytest.mark.parametrize("zero_dim_first", [False, True])
def test_fmin_fmax_with_zero_dim_operand_promote_as_eager(op, dtypes, zero_dim_first):
    # seed 303: torch.fmin(x0, v6) of a float16 [4] x0 and a float32 0-dim v6 (a norm) came
    # back float32 from the compiled graph, float16 from eager: the decomposition expanded
    # both operands to the broadcast shape first, and the expanded 0-dim operand took part
    # in the type promotion as a dimensioned tensor.
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(3, 4, generator=g) * 50).to(dtypes[0])
    a.view(-1)[0] = 0
    b = torch.tensor(float("nan") if dtypes[1].is_floating_point else 7, dtype=dtypes[1])
    fn = getattr(torch, op)

    def f(a, b):
        return fn(b, a) if zero_dim_first else fn(a, b.abs() + 1)
    want, got, _ = _calls(f, a, b)
    for r in got:
        assert r.dtype == want.dtype and r.shape == want.shape
        assert torch.equal(r.isnan(), want.isnan()) if r.is_floating_point() else True
        assert torch.equal(torch.nan_to_num(r), torch.nan_to_num(want))


# ----------------------------------------------------------------- floor division of mixed dtypes
_INF = float("inf")
_DIVIDENDS = [_INF, -_INF, 5.0, -5.0, float("nan"), 0.0, -0.0, 7.5, 1e4, -3.0, 1.0, -7.25]
_DIVISORS = [1.0, -1.0, _INF, -_INF, 1.0, -_INF, 2.0, 0.0, 3.0, -0.0, 0.75, -2.5]
_MIXED = [(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64),
          (torch.float16, torch.float64), (torch.int64, torch.float32), (torch.float32, torch.float16)]


def _same_floats(r, want):
    assert r.dtype == want.dtype and r.shape == want.shape
    assert torch.equal(r.isnan(), want.isnan())
    ok = ~want.isnan()
    assert torch.equal(r[ok], want[ok])
    assert torch.equal(r[ok].signbit(), want[ok].signbit())   # -0.0 as eager


@pytest.mark.parametrize("dtypes", _MIXED, ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
@pytest.mark.parametrize("op", ["div_floor", "floor_divide", "remainder", "fmod", "div_trunc"])
def test_rounding_division_of_mixed_dtypes_as_eager(dtypes, op):
    # seed 297: torch.div(v1, v7, rounding_mode='floor') of a float16 v1 holding +-inf and a
    # float32 eye(1) gave +-inf; eager: NaN (inf // 1 is NaN in eager's div_floor_floating,
    # computed from fmod). The decomposition that follows eager's kernel declined operands
    # of two dtypes, and frontend kept the op whole for its float16 first operand while the
    # partition compiled it for its float32 result: torch-mlir's floor(a / b).
    a = torch.tensor(_DIVIDENDS)
    if not dtypes[0].is_floating_point:
        a = a.nan_to_num(0.0, 100.0, -100.0)
    a = a.to(dtypes[0]).view(3, 4)
    b = torch.tensor(_DIVISORS).to(dtypes[1]).view(3, 4)
    fns = {"div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
           "floor_divide": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod,
           "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc")}
    fn = fns[op]
    want, got, _ = _calls(lambda a, b: (fn(a, b), fn(a, b[:1, :1]), fn(a[:1], b)), a, b)
    for r in got:
        for x, w in zip(r, want):
            _same_floats(x, w)


# ----------------------------------------------------------------- reductions of a 0-d tensor
_ZERO_DIM_REDUCTIONS = {
    "sum": lambda x, y: y - x.sum(),
    "prod": lambda x, y: y - x.prod(),
    "mean": lambda x, y: y - x.float().mean(),
    "sum_dtype": lambda x, y: y * x.sum(dtype=torch.float64),
    "prod_times": lambda x, y: (y * x.prod()).sum(-1),
    "nansum": lambda x, y: y + x.nansum(),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64, torch.uint8, torch.bfloat16])
@pytest.mark.parametrize("op", sorted(_ZERO_DIM_REDUCTIONS))
def test_reduction_of_zero_dim_tensor_broadcast_into_pointwise(op, dtype):
    # seed 264: v3 = v2 - v0 with v0 = x1.prod() of a 0-d uint8 x1 gave values off by up to
    # 9e18: torch-mlir's sum / prod of a 0-d tensor is a generic of no loops that yields
    # out + in; fused into the broadcasting consumer (mlircap-fuse-elementwise), its initial
    # value became an output indexed by none of the consumer's loops and accumulated once
    # per element (y - x.sum() subtracted x, 2x, 3x, ... along y).
    fn = _ZERO_DIM_REDUCTIONS[op]
    if dtype in (torch.float32, torch.bfloat16):
        x = torch.tensor(1.75, dtype=dtype)
    else:
        x = torch.tensor(3, dtype=dtype)
    y = torch.arange(-5.0, 7.0).view(3, 4)     # sums of these are exact in any order
    want, got, fast = _calls(fn, x, y)
    for r in got:
        assert r.dtype == want.dtype and r.shape == want.shape
        torch.testing.assert_close(r, want, rtol=0, atol=0)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


# ----------------------------------------------------------------- random ops after scans
_SCANS = {
    "cumsum": lambda x: torch.cumsum(x, 0),
    "cumsum_bool": lambda x: torch.cumsum(x > 0, 1).float(),
    "cumprod": lambda x: torch.cumprod(x, 1),
    "cummax_values": lambda x: torch.cummax(x, 0)[0],
    "cummin_indices": lambda x: torch.cummin(x, 1)[1],
    "logcumsumexp": lambda x: torch.logcumsumexp(x, 0),
}
_DRAWS = {
    "uniform_": lambda t: t.float().uniform_(-1, 1) * 2,
    "randint_like": lambda t: torch.randint_like(t, 0, 10) + 1,
    "dropout": lambda t: torch.nn.functional.dropout(t.float(), 0.5, training=True),
}


@pytest.mark.parametrize("draw", sorted(_DRAWS))
@pytest.mark.parametrize("scan", sorted(_SCANS))
def test_random_op_on_a_scan_result_draws_as_eager(scan, draw):
    # seeds 400, 573: randint_like of cummin's indices, uniform_ of a cumsum's result drew
    # other numbers than eager's: the scans' decompositions (a masked reduction along the
    # last dim, moved back) returned a transposed layout where eager's cumulative ops return
    # a contiguous tensor, and the random island, given the trace's layout, filled it in
    # that memory order.
    x = torch.randn(6, 5, 4)
    fn = (lambda x: _DRAWS[draw](_SCANS[scan](x)))
    want, got, _ = _calls(fn, x, seed=11)
    for r in got:
        assert r.dtype == want.dtype and r.shape == want.shape
        assert torch.equal(r, want)


# ----------------------------------------------------------------- writes to expanded tensors
def _write_index_fill(x):
    v = x * 2
    e = v.expand(3, *v.shape)
    rows = torch.split(e, [1, 2], 0)[1]
    e.index_fill_(0, torch.tensor([1, -1]), 0)
    return rows * 1, v + 1


def _write_setitem(x):
    e = (x + 1).expand(3, *x.shape)
    e[1] = 5
    return e * 2


def _write_masked_fill(x):
    v = x - 1
    e = v.unsqueeze(0).expand(4, *v.shape)
    e.masked_fill_(torch.tensor([False, True, False, False]).view(4, 1, 1), 7)
    return v * 3


@pytest.mark.parametrize("fn", [_write_index_fill, _write_setitem, _write_masked_fill], ids=lambda f: f.__name__)
def test_in_place_write_to_expanded_tensor_as_eager(fn):
    # seed 1052: v3 = v2.expand(3, ...), v4 = a view of v3's rows 1..2, then
    # v3.index_fill_(0, [1, -1], 0.5): eager writes v2's elements (every row of v3 is them),
    # so v4 reads zeros; the compiled graph's functional index_fill wrote rows 1 and 2 of a
    # copy and v4 kept v2's values (14 of 60 differed). Such a write makes the function run
    # eagerly (capture: unreplayable), with eager's aliasing.
    x = torch.arange(12).view(3, 4)
    want, got, _ = _calls(fn, x)
    for r in got:
        for a, b in zip(r if isinstance(r, tuple) else (r,), want if isinstance(want, tuple) else (want,)):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)


def _seed1290(x0, x1):
    v0 = torch.where(x1 > 0, x1, 0)
    v1 = v0.abs().sqrt()
    v2 = v1.repeat(1, 2, 1)
    v3 = v2.permute(1, 0, 2)
    v4 = torch.cummax(v3, 2)[0]
    x0.diagonal().clamp_(min=0)
    v7 = x1[1:].abs_()
    v8 = v7.expand(3, *v7.shape)
    v10 = v2.diagonal(-1, 1, 0)
    return torch.hstack([v10, v10 * 2]), v0, v1, v8, v4


def _diagonal_of_expanded(x0, x1):
    x0.diagonal().clamp_(min=0)
    return x0 + 1, torch.cummax(x1.float(), 1)[0]


@pytest.mark.parametrize("fn", [_seed1290, _diagonal_of_expanded], ids=lambda f: f.__name__)
def test_in_place_write_through_view_of_expanded_argument(fn):
    # seed 1290: x0.diagonal().clamp_(min=0) of an expanded argument x0 (stride 0 along dim
    # 1; the diagonal itself has no overlap): the compiled replay wrote the whole of x0 back
    # and torch raised 'more than one element of the written-to tensor refers to a single
    # memory location', where eager returned. The function now runs eagerly.
    g = torch.Generator().manual_seed(5)
    base = torch.randn(5, 1, generator=g).bfloat16()
    x1 = torch.randint(0, 9, (12, 5, 8), generator=g)

    def args():
        return base.clone().expand(5, 12), x1.clone()
    want = fn(*args())
    fast = mlircap.compile(fn)
    for _ in range(3):
        a = args()
        got = fast(*a)
        for r, w in zip(got, want):
            assert r.dtype == w.dtype and r.shape == w.shape
            assert torch.equal(r, w)
        ref = args()
        fn(*ref)
        assert torch.equal(a[0], ref[0]) and torch.equal(a[1], ref[1])   # the arguments as eager left them


def _scatter_amax_from_own_rows(x):
    idx = torch.tensor([1, 7]).view(-1, 1).expand(2, x.shape[1])
    x.scatter_reduce_(0, idx, x[:2], "amax")
    return x * 1


def _index_add_own_rows(x):
    x.index_add_(0, torch.tensor([1, 2]), x[:2])
    return x + 0


def _scatter_add_own_rows(x):
    idx = torch.tensor([1, 3]).view(-1, 1).expand(2, x.shape[1])
    x.scatter_add_(0, idx, x[1:3])
    return x.sum(0)


@pytest.mark.parametrize("fn", [_scatter_amax_from_own_rows, _index_add_own_rows, _scatter_add_own_rows],
                         ids=lambda f: f.__name__)
def test_in_place_op_reading_the_memory_it_writes_as_eager(fn):
    # seed 894: x1.scatter_reduce_(0, [[1], [7]], x1[:2], 'amax'): eager's kernel writes row 1,
    # then reads it again as the source of row 7; the compiled graph (functional) read the
    # rows as they were before the call (1 of 96 elements of x1 off by 0.078). Such a call
    # (another operand viewing the written memory, laid out otherwise) runs eagerly.
    # every other row of a larger tensor, as the seed's input: on a contiguous one eager's
    # overlap check raises instead
    base = torch.arange(64, dtype=torch.float32).view(16, 4) * torch.tensor([1.0, -1.0, 0.5, 2.0])
    want_x = base.clone()[::2]
    want = fn(want_x)
    fast = mlircap.compile(fn)
    for _ in range(3):
        got_x = base.clone()[::2]
        got = fast(got_x)
        assert torch.equal(got, want) and torch.equal(got_x, want_x)
