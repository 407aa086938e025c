"""Ops that ran through torch (eager islands, "no CPU kernel") and now compile with
eager's values: each test checks the compiled result against eager, bit for bit,
and that every graph compiled whole (no eager island, no fallback)."""
from __future__ import annotations

import random

import pytest
import torch

import op_cases  # test/python/op_cases.py

import mlircap
from mlircap import logs


# --- max_pool{2,3}d_with_indices_backward: torch-mlir's scatter had no CPU kernel ---
# On the CPU the 2-D one runs eager's kernel as a library step by default (partition.CPU_LIBRARY_OPS);
# these tests compile the decomposition (maxpool.max_pool_backward), as MLIRCAP_CPU_LIBRARY_OPS=0
# and CUDA do.


@pytest.fixture
def pool_backward_compiled(monkeypatch):
    monkeypatch.setenv("MLIRCAP_CPU_LIBRARY_OPS", "0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(op_cases.POOLS)))
def test_max_pool2d_backward_compiles_like_eager(pool_backward_compiled, compiled_whole, dtype, case):
    # Overlapping windows (stride < kernel) and inputs of few distinct values: many
    # windows pick the same element, whose gradients eager adds in window order,
    # rounding each sum to the dtype (bfloat16: 1 + 2^-8 + 2^-8 stays 1).
    compiled_whole(*op_cases.max_pool2d_backward(case, dtype, "cpu"))


def test_max_pool2d_backward_low_precision_sums_in_window_order(pool_backward_compiled, compiled_whole):
    x = torch.zeros(1, 1, 1, 9, dtype=torch.bfloat16)
    x[..., 4] = 10                                  # every window of 5 picks element 4
    grad = torch.tensor([[[[1.0, 2 ** -8, 2 ** -8, 2 ** -8, 2 ** -8]]]], dtype=torch.bfloat16)
    _, idx = torch.nn.functional.max_pool2d(x, (1, 5), 1, return_indices=True)
    got = compiled_whole(lambda gr, x, i: torch.ops.aten.max_pool2d_with_indices_backward(
        gr, x, [1, 5], [1, 1], [0, 0], [1, 1], False, i), grad, x, idx)
    assert got[..., 4].item() == 1.0                # float32 sums would give 1.015625


def test_max_pool3d_backward_compiles_like_eager(compiled_whole):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 3, (2, 2, 5, 6, 7), generator=g).float()
    _, idx = torch.nn.functional.max_pool3d(x, 3, 2, 1, return_indices=True)
    grad = torch.randn(idx.shape, generator=g)
    compiled_whole(lambda gr, x, i: torch.ops.aten.max_pool3d_with_indices_backward(
        gr, x, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False, i), grad, x, idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool2d_backward_runs_eagers_kernel_on_the_cpu(capsys, monkeypatch, dtype):
    # by default the CPU backward of a 2-D max pool is eager's kernel, a library step between
    # compiled parts: eager's gradient bit for bit
    f = lambda x: (torch.nn.functional.max_pool2d(x * 1.5, 3, 2, 1, ceil_mode=True) ** 2).sum()   # noqa: E731
    err = _pool_grad_like_eager(f, torch.randint(0, 4, (2, 3, 9, 9)).to(dtype), capsys, monkeypatch)
    assert "max_pool2d_with_indices_backward: library" in err


def _pool_grad_like_eager(f, x, capsys, monkeypatch) -> str:
    """The compiled gradient of f at x is eager's bit for bit; returns the fallback log."""
    monkeypatch.setattr(logs, "_enabled", logs._enabled | {"fallback"})
    want = x.clone().requires_grad_()
    f(want).backward()
    fast = mlircap.compile(f)
    capsys.readouterr()
    for _ in range(2):
        got = x.clone().requires_grad_()
        fast(got).backward()
    assert torch.equal(got.grad, want.grad)
    return capsys.readouterr().err


def test_max_pool_backward_graph_like_eager(pool_backward_compiled, capsys, monkeypatch):
    # the backward graph of a pooling layer (autograd's own indices), traced by
    # aot_autograd with the decomposition
    f = lambda x: (torch.nn.functional.max_pool2d(x * 1.5, 3, 2, 1) ** 2).sum()   # noqa: E731
    err = _pool_grad_like_eager(f, torch.randint(0, 4, (2, 3, 8, 8)).float(), capsys, monkeypatch)
    assert "eager islands" not in err and "no part of the graph compiled" not in err, err


# --- linspace / logspace in the dtypes whose eager kernels round their own way ---

_RANGE_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", _RANGE_DTYPES)
def test_constant_linspace_logspace_fold_to_eagers_values(compiled_whole, dtype):
    # Endpoints known when the graph is traced: eager's CPU kernel evaluates the
    # range then (truncated endpoints, fused multiply-add in double, ...).
    x = torch.zeros((), dtype=dtype)
    hi = 255 if dtype == torch.uint8 else 100
    for start, end, steps in ((4.3, -3 if dtype != torch.uint8 else 3, 50), (0, hi, 37), (50, 50, 7),
                              (2.5, hi, 1), (0, 1, 0)):
        compiled_whole(lambda x: torch.linspace(start, end, steps, dtype=dtype) + x, x)
        compiled_whole(lambda x: torch.logspace(start / 30, end / 60, steps, 2.0, dtype=dtype) + x, x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_linspace_logspace_of_tensors_round_like_eager(compiled_whole, dtype):
    # Endpoints from tensors: the steps of eager's kernel, each rounded to the dtype.
    rnd = random.Random(0)
    for _ in range(6):
        s = torch.tensor(rnd.uniform(-40, 40))
        e = torch.tensor(rnd.uniform(-40, 40)).to(rnd.choice([torch.float32, torch.bfloat16, torch.float64]))
        steps = rnd.choice([1, 2, 5, 17, 50, 301])
        compiled_whole(lambda s, e: torch.linspace(s, e, steps, dtype=dtype), s, e)
        compiled_whole(lambda s, e: torch.logspace(s / 10, e / 10, steps, 1.7, dtype=dtype), s, e)
        compiled_whole(lambda s: torch.logspace(s / 10, 2, steps, dtype=dtype), s)


def test_integer_logspace_of_a_uint8_tensor_compiles(compiled_whole):
    # torch's logspace decomposition calls linspace on the start as uint8
    compiled_whole(lambda s: torch.logspace(s, 6, 7, 2.0, dtype=torch.uint8), torch.tensor(0))
    compiled_whole(lambda s: torch.logspace(s, 3, 4, dtype=torch.int16), torch.tensor(1, dtype=torch.uint8))


# --- roll and sort: torch-mlir's lowerings had no CPU kernel ---

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.bool, torch.bfloat16])
def test_roll_compiles_like_eager(compiled_whole, dtype):
    x = (torch.arange(60) % 7).view(3, 4, 5).to(dtype)
    compiled_whole(lambda x: torch.roll(x, 2, 0), x)
    compiled_whole(lambda x: torch.roll(x, (1, -7), (1, 2)), x)
    compiled_whole(lambda x: torch.roll(x, 13), x)            # flattened
    compiled_whole(lambda x: torch.fft.fftshift(x), x)


def _sortable(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g)
    if dtype.is_floating_point:
        x = x.float()
        x[torch.rand(shape, generator=g) < 0.2] = float("nan")
        x[torch.rand(shape, generator=g) < 0.2] = -0.0       # equal to 0.0: input order kept
    elif dtype in (torch.uint8, torch.bool):
        x = x.abs()
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8, torch.uint8, torch.bool])
def test_sort_compiles_like_eager(compiled_whole, dtype):
    # many equal elements, NaN and -0.0: values and indices bit for bit (stable
    # order; NaN last ascending, first descending)
    x = _sortable(dtype, (4, 16), 0)
    for descending in (False, True):
        compiled_whole(lambda x: torch.sort(x, dim=1, descending=descending, stable=True).values, x)
        compiled_whole(lambda x: torch.sort(x, dim=0, descending=descending, stable=True).indices, x)
        compiled_whole(lambda x: torch.argsort(x, dim=-1, descending=descending, stable=True), x)
    y = _sortable(dtype, (3, 9), 1)   # unstable sort of short slices: insertion sort, stable
    compiled_whole(lambda x: torch.sort(x, dim=1).values, y)
    compiled_whole(lambda x: torch.sort(x, dim=1).indices, y)


# --- searchsorted with a sorter, and of a number ---

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_searchsorted_with_sorter_compiles_like_eager(compiled_whole, dtype):
    seq = torch.tensor([3, 1, 2, 5, 4, 0, 9, 7, 8, 6, 4, 4]).to(dtype)
    values = torch.tensor([[2, 0, 9, 4], [4, 11, 1, 7]]).to(dtype)
    sorter = torch.argsort(seq, stable=True)
    for side in ("left", "right"):
        compiled_whole(lambda s, v, o: torch.searchsorted(s, v, side=side, sorter=o), seq, values, sorter)


def test_searchsorted_sorter_out_of_range_raises_like_eager():
    f = lambda s, v, o: torch.searchsorted(s, v, sorter=o)   # noqa: E731
    seq, values = torch.tensor([3.0, 1.0, 2.0]), torch.tensor([2.5])
    fast = mlircap.compile(f)
    for _ in range(2):
        fast(seq, values, torch.tensor([1, 2, 0]))
    with pytest.raises(RuntimeError, match="out of range"):
        f(seq, values, torch.tensor([1, 5, 0]))
    with pytest.raises(RuntimeError, match="out of range"):
        fast(seq, values, torch.tensor([1, 5, 0]))


def test_searchsorted_of_a_number_compiles_like_eager(compiled_whole):
    # the number and the sequence converted to their promoted dtype, as eager does
    compiled_whole(lambda s: torch.searchsorted(s, -1.6054), torch.linspace(-3, 3, 20))
    compiled_whole(lambda s: torch.searchsorted(s, 3.5, right=True), torch.arange(20))
    compiled_whole(lambda s: torch.searchsorted(s, 3), torch.arange(20, dtype=torch.int8))


# --- ops that write at indices from the inputs: unrolled without a scatter (scatter.py) ---

def _data(shape, dtype, g):
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-20, 50, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_compiles_like_eager(compiled_whole, dtype, reduce):
    # Duplicate indices (several sources per element, combined in index order; bf16
    # sums and products accumulate in float32), an index block smaller than self.
    g = torch.Generator().manual_seed(0)
    x, src = _data((4, 5, 3), dtype, g), _data((4, 7, 3), dtype, g)
    idx = torch.randint(0, 5, (3, 6, 2), generator=g)
    for include_self in (True, False):
        compiled_whole(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), x, idx, src)
        compiled_whole(lambda x, i, s: x.scatter_reduce(0, i[:, :4], s, reduce, include_self=include_self),
                       x, idx[:2] % 4, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_scatter_and_scatter_add_compile_like_eager(compiled_whole, dtype):
    g = torch.Generator().manual_seed(1)
    x, src = _data((5, 4), dtype, g), _data((6, 4), dtype, g)
    idx = torch.randint(0, 5, (6, 3), generator=g)
    compiled_whole(lambda x, i, s: x.scatter(0, i, s), x, idx, src)              # last write wins
    compiled_whole(lambda x, i: x.scatter(-1, i[:5] % 4, 2), x, idx)
    if dtype != torch.bool:
        compiled_whole(lambda x, i, s: x.scatter_add(0, i, s), x, idx, src)
        compiled_whole(lambda x, i, s: torch.zeros_like(x).scatter_add_(1, i[:5] % 4, s) * 2, x, idx, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_index_put_add_copy_reduce_compile_like_eager(compiled_whole, dtype):
    # index_add/index_copy decompose to index_put; negative indices wrap
    g = torch.Generator().manual_seed(2)
    x = _data((5, 6, 3), dtype, g)
    i = torch.tensor([0, -1, 2, 2, 4, 0])
    compiled_whole(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, i, _data((6, 6, 3), dtype, g))
    compiled_whole(lambda x, i, v: x.index_put((i,), v), x, i % 5, _data((6, 3), dtype, g))
    compiled_whole(lambda x, i, j, v: torch.ops.aten.index_put(x, [None, i, j], v, True), x, i, i % 3,
                   _data((5, 6), dtype, g))
    compiled_whole(lambda x, i, s: x.index_add(1, i, s, alpha=2), x, i % 6, _data((5, 6, 3), dtype, g))
    compiled_whole(lambda x, i, s: x.index_copy(2, i, s), x, torch.tensor([2, 0]), _data((5, 6, 2), dtype, g))
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            compiled_whole(lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self),
                           x, i % 5, _data((6, 6, 3), dtype, g))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_unpool_compiles_like_eager(compiled_whole, dtype):
    g = torch.Generator().manual_seed(3)
    y, idx = torch.nn.functional.max_pool2d(torch.randn(2, 3, 6, 6, generator=g).to(dtype), 2, return_indices=True)
    compiled_whole(lambda y, i: torch.nn.functional.max_unpool2d(y, i, 2), y, idx)
    y, idx = torch.nn.functional.max_pool1d(torch.randn(2, 3, 9, generator=g).to(dtype), 3, return_indices=True)
    compiled_whole(lambda y, i: torch.nn.functional.max_unpool1d(y, i, 3), y, idx)
    y, idx = torch.nn.functional.max_pool3d(torch.randn(1, 2, 3, 6, 5, generator=g).to(dtype), 2, return_indices=True)
    compiled_whole(lambda y, i: torch.nn.functional.max_unpool3d(y, i, 2, output_size=(3, 6, 5)), y, idx)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.bool])
def test_small_integer_index_writes_compile_like_eager(compiled_whole, dtype):
    # uint8 (computed as int32, widen.py) and int8 (its mean divides in int64):
    # sums wrap in the dtype at every step as eager's do; bool sums and maxima are
    # logical ors, products and minima ands
    g = torch.Generator().manual_seed(4)
    x, src = _data((5, 4), dtype, g), _data((6, 4), dtype, g)
    idx = torch.randint(0, 5, (6, 3), generator=g)
    i = torch.tensor([3, 0, 3, 1])
    compiled_whole(lambda x, i, s: x.scatter_add(0, i, s), x, idx, src)
    compiled_whole(lambda x, i, s: x.index_copy(0, i, s), x, i[:3] + 1, src[:3])
    compiled_whole(lambda x, i: x.index_fill(1, i, True), x, i % 4)
    compiled_whole(lambda x, i, s: x.scatter(0, i, s, reduce="multiply"), x, idx.int(), src)   # int32 index
    compiled_whole(lambda x, i, s: x.index_copy(0, i, s), x[0, 0], i[:1] * 0, src[0, 0])        # 0-dim
    for reduce in ("sum", "prod", "amax", "amin") + (("mean",) if dtype != torch.bool else ()):
        for include_self in (True, False):
            compiled_whole(lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)
    if dtype != torch.bool:
        compiled_whole(lambda x, i, s: x.index_add(0, i, s, alpha=3), x, i, src[:4])


@pytest.mark.parametrize("case", ["scatter", "scatter_add", "scatter_reduce", "index_put", "index_add"])
def test_index_write_out_of_range_raises_like_eager(case):
    fns = {
        "scatter": lambda x, i, s: x.scatter(0, i, s),
        "scatter_add": lambda x, i, s: x.scatter_add(0, i, s),
        "scatter_reduce": lambda x, i, s: x.scatter_reduce(0, i, s, "amax"),
        "index_put": lambda x, i, s: x.index_put((i[:, 0],), s[:, 0], accumulate=True),
        "index_add": lambda x, i, s: x.index_add(0, i[:, 0], s),
    }
    fn = fns[case]
    x, s = torch.zeros(4, 3), torch.ones(3, 3)
    good, bad = torch.tensor([[0, 1, 3]] * 3).T.contiguous(), torch.tensor([[0, 4, 1]] * 3).T.contiguous()
    fast = mlircap.compile(fn)
    fast(x, good, s)
    assert torch.equal(fast(x, good, s), fn(x, good, s))
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
    with pytest.raises(Exception) as want:
        fn(x, bad, s)
    with pytest.raises(type(want.value)):
        fast(x, bad, s)
    assert torch.equal(fast(x, good, s), fn(x, good, s))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
def test_put_compiles_like_eager(compiled_whole, dtype):
    # put: index_put into the flattened tensor; negative indices wrap, duplicates accumulate in order
    g = torch.Generator().manual_seed(6)
    x, src = _data((3, 4), dtype, g), _data((2, 3), dtype, g)
    idx = torch.tensor([[0, -1, 5], [5, 11, -12]])
    compiled_whole(lambda x, i, s: x.put(i, s, accumulate=True), x, idx, src)
    compiled_whole(lambda x, i, s: x.put(i, s), x, idx, src)
    fn = lambda x, i, s: x.put(i, s, accumulate=True)   # noqa: E731
    fast = mlircap.compile(fn)
    fast(x, idx, src)
    with pytest.raises(Exception) as want:
        fn(x, idx * 0 + 12, src)
    with pytest.raises(type(want.value)):     # out of range: reruns eagerly, raises eager's error
        fast(x, idx * 0 + 12, src)


# --- cumprod: torch-mlir's scan had no CPU kernel ---

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool])
def test_cumprod_compiles_like_eager(compiled_whole, dtype):
    # eager multiplies in double (float32) / float (bf16) and rounds each prefix:
    # the masked product in the same wider type rounds to the same values
    g = torch.Generator().manual_seed(7)
    for shape, dim in (((5, 7), 1), ((4, 3, 6), 0), ((3, 40), -1)):
        x = (torch.rand(shape, generator=g) * 2 + 0.3).to(dtype) if dtype.is_floating_point \
            else torch.randint(0, 5, shape, generator=g).to(dtype)
        compiled_whole(lambda x: torch.cumprod(x, dim), x)
    x = torch.tensor([[2.0, float("inf"), 0.0, 3.0], [-0.0, 5.0, float("nan"), 1.0]])
    compiled_whole(lambda x: torch.cumprod(x, 1), x.to(dtype) if dtype.is_floating_point else x.to(torch.int64))


def test_uint8_count_nonzero_and_empty_permuted_compile(compiled_whole):
    x = torch.tensor([[0, 255, 3], [7, 0, 200]], dtype=torch.uint8)
    compiled_whole(lambda x: torch.count_nonzero(x + 1, 1), x)
    compiled_whole(lambda x: torch.empty_permuted((2, 3), (1, 0), dtype=torch.uint8).fill_(3) + x, x)
