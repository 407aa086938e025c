"""CPU float sums in eager's order (lib/Transforms/CascadeSums.cpp): a compiled
sum / mean over a contiguous last dim adds its terms as eager's CPU sum kernel
does (256-bit vectors, four accumulators, a four-level cascade), so the result
is eager's to the bit (float64, and float32 sums whose f64 accumulation
mlircap-widen-sums made), and a tie against the mean agrees with eager; and
as accurate as eager's against a float64 (math.fsum) reference.

The fuzzer's case (bench/fuzz_graphs.py --families userops --seed 2029): a
float64 row repeated along the last dim (an expanded input), `v >= v.mean()`:
the sequential sum of twelve equal values was 1 ulp off eager's cascade, the
mean 1 ulp below the value, and every element of the row compared the other
way. Sizes stay under eager's parallel-reduction grain (32768 elements),
where eager splits a long row by thread count."""
import math
import os

import pytest
import torch

import mlircap

# Opt-in (slower than the blocked sums in places: bench/sum_speed.py): set for this file's
# tests only. Set at import, it was on during collection and so for every test file that
# runs before this one. The compile worker takes the parent's MLIRCAP_* settings with each
# request (worker.settings).
@pytest.fixture(autouse=True, scope="module")
def _cascade_sums_only_here():
    before = os.environ.get("MLIRCAP_CASCADE_SUMS")
    os.environ["MLIRCAP_CASCADE_SUMS"] = "1"
    yield
    if before is None:
        os.environ.pop("MLIRCAP_CASCADE_SUMS", None)
    else:
        os.environ["MLIRCAP_CASCADE_SUMS"] = before


# Row lengths around every boundary of the order: below a vector (4 doubles,
# 8 floats), whole vectors, groups of four vectors, 16 groups (a level of the
# cascade), 256 groups (the next level).
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 77, 100,
           255, 256, 257, 511, 512, 513, 768, 1000, 1024, 4095, 4096, 4097, 8192 + 5]


def _rows(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(3, n, generator=g, dtype=torch.float64) * 10 + 3).to(dtype)


def _compiled(fn):
    return mlircap.compile(fn, strict=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", LENGTHS)
def test_row_sum_and_mean_are_eagers_bits(n, dtype):
    def f(x):
        return x.sum(-1), x.mean(-1)

    x = _rows(n, dtype, n)
    got = _compiled(f)(x)
    want = f(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert torch.equal(g, w), (n, dtype, (g - w).abs().max().item())


def test_fuzz_2029_mean_tie_of_an_expanded_row():
    # fuzz_graphs' 'expand' layout with 'extreme' values: each row one value
    vals = torch.tensor([2.5, -0.017298878725426025, 0.0], dtype=torch.float64)
    x0 = vals[:, None].expand(3, 12)

    def f(x0):
        v9 = torch.lerp(x0, x0, 0.25)
        return v9 >= v9.mean(-1, keepdim=True), v9.mean(-1)

    got = _compiled(f)(x0)
    want = f(x0)
    assert torch.equal(got[1], want[1])
    assert torch.equal(got[0], want[0])
    assert want[0].all()  # eager's mean is each row's value: every element ties with it


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [3, 12, 77, 768, 1000])
def test_constant_rows_tie_with_their_mean_as_eager(n, dtype):
    g = torch.Generator().manual_seed(7)
    vals = torch.randn(16, 1, generator=g, dtype=torch.float64).to(dtype) * 3

    def f(x):
        return x >= x.mean(-1, keepdim=True), x <= x.mean(-1, keepdim=True)

    x = vals.expand(16, n).contiguous()
    got = _compiled(f)(x)
    want = f(x)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def _fsum_rows(x):
    return torch.tensor([math.fsum(r) for r in x.double().tolist()], dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [1000, 30000, 2 ** 20 + 3])
def test_sum_as_accurate_as_eager(n, dtype):
    # Terms of both signs and magnitudes 1e-3..1e3: a sequential sum's error
    # grows with n, the cascade's with log n. Past the grain both eager and
    # the compiled sum split the row (into parts of other lengths): no longer
    # bit for bit, still as accurate.
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(2, n, generator=g, dtype=torch.float64)
         * torch.exp(torch.randn(2, n, generator=g, dtype=torch.float64) * 3)).to(dtype)
    ref = _fsum_rows(x)
    scale = x.double().abs().sum(-1)

    def f(x):
        return x.sum(-1)

    got = _compiled(f)(x).double()
    want = f(x).double()
    eager_err = ((want - ref).abs() / scale).max().item()
    err = ((got - ref).abs() / scale).max().item()
    eps = torch.finfo(dtype).eps
    assert err <= max(2 * eager_err, 4 * eps), (err, eager_err)


def test_f64_accumulated_sum_read_as_f64_keeps_f64_terms():
    # x.double().sum(): a float64 sum of float32 values, read as float64 (not
    # one of widen-sums' float32 sums): summed in double as eager does, not
    # in float32.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4096, generator=g) * 1000 + 1e4

    def f(x):
        return x.double().sum(-1)

    got = _compiled(f)(x)
    ref = _fsum_rows(x)
    assert ((got - ref).abs() / ref.abs()).max().item() < 1e-14


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [5, 40, 1000])
def test_sum_of_index_weighted_terms(n, dtype):
    # terms computed from their position along the row (x * arange(n): the fused payload
    # reads linalg.index): the cascade's vectors of indices are a constant [0, 1, ...] added
    # to the row offset, which every CPU pipeline lowers (vector.step was left for LLVM IR
    # translation: 'missing LLVMTranslationDialectInterface', the graph ran eagerly)
    x = _rows(n, dtype, n + 1)

    def f(x):
        return (x * torch.arange(x.shape[-1], dtype=x.dtype)).sum(-1)

    got = _compiled(f)(x)
    want = f(x)
    assert torch.equal(got, want), (got - want).abs().max().item()
