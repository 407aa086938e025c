"""OpInfo sweep (bench/opinfo.py; issue 10), held-out seeds 731 and 741 on 2026-12-04: what
they found, fixed. Each case compares compiled calls with eager (bit for bit unless noted)
and checks that the first call's recording is replayed by the next ones with every graph
compiled: no eager island, no 'runs through torch' warning, no bounds-check rerun."""
import functools

import pytest
import torch

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py


_same = same
_check = functools.partial(check_compiled, one_record=True)


def _polygamma_inputs(dtype):
    # positive, negative (half-)integers and non-integers down to -13.9 (the direct sum of
    # zeta(n + 1, q) then runs 23 steps), poles, tiny, huge, inf and NaN
    g = torch.Generator().manual_seed(0)
    v = torch.cat([torch.randn(300, generator=g) * 4, torch.rand(300, generator=g) * 27.8 - 13.9,
                   torch.arange(-10, 10).float(), torch.arange(-10, 10).float() + 0.5,
                   torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e4, float("inf"), float("nan"), -13.5, 0.25])])
    return v.to(dtype)


# ------------------------------------------- fallback: polygamma(n >= 2) of negative inputs
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_polygamma_of_negative_inputs_compiles(fallback_log, dtype, n):
    # zeta(n + 1, q) of a negative non-integer q: pow's negative bases give the sign of the
    # integer power, and the direct sum runs up to 9 - q steps; it set the bounds-check
    # flag and the call reran eagerly (OpInfo polygamma_n_2/3/4 float32: 48 of 69 samples)
    _check(lambda x: torch.polygamma(n, x), [_polygamma_inputs(dtype)], fallback_log)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_low_precision_polygamma_compiles(fallback_log, dtype, n):
    # ran through torch ('aten.polygamma' unsupported: OpInfo polygamma bfloat16, all 60
    # samples). n = 1: eager's trigamma in float, rounded once; n >= 2: zeta<bfloat16>
    # (float accumulation, its first power rounded to the type) times exp(lgamma(n + 1))
    # of floats, rounded once
    x = _polygamma_inputs(dtype)
    if n == 1 and dtype == torch.float16:
        # the float32 trigamma of a negative x is one ulp off eager's contracted kernel
        # in 2 of 40000 values (-12.5625): rounded to float16 that ulp shows
        x = x[x > 0]
    _check(lambda x: torch.polygamma(n, x), [x], fallback_log)


def test_polygamma_past_the_unrolled_sum_reruns_like_eager(fallback_log):
    # q < -14 needs more direct-sum steps than are unrolled: the flag reruns the call
    # eagerly, eager's values
    x = torch.tensor([-20.5, -15.25, 3.0, -2.5])
    fast = mlircap.compile(lambda x: torch.polygamma(3, x))
    for _ in range(3):
        _same(fast(x.clone()), torch.polygamma(3, x))
    assert "bounds check" in fallback_log.readouterr().err


# ------------------------------------------- fallback: integer bilinear (_trilinear)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("bias", [True, False])
def test_integer_bilinear_compiles(fallback_log, dtype, bias):
    # sums of products wrap exactly in any order: _trilinear was kept whole outside
    # float32/float64 ('numerics' island: OpInfo nn.functional.bilinear, 60 of 80 integer
    # samples; uint8 also outside widen's int32 ops). Values large enough to wrap.
    g = torch.Generator().manual_seed(0)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(1 << 20)), min(info.max, 1 << 20)

    def r(*shape):
        return torch.randint(lo, hi, shape, dtype=dtype, generator=g)

    a, b, w, c = r(4, 5), r(4, 6), r(3, 5, 6), r(3)
    if bias:
        _check(lambda a, b, w, c: torch.nn.functional.bilinear(a, b, w, c), [a, b, w, c], fallback_log)
    else:
        _check(lambda a, b, w: torch.nn.functional.bilinear(a, b, w), [a, b, w], fallback_log)


# ------------------------------------------- fallback: take with a 0-d index, gather of a 0-d input
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("i", [0, 5, -1, -6])
def test_take_with_a_0d_index_compiles(fallback_log, dtype, i):
    # torch's decomposition indexed with Python's [], which read the 0-d index as a number
    # (.item(): DataDependentOutputException, the graph ran eagerly: OpInfo take bf16 #4)
    x = torch.arange(6).reshape(2, 3).to(dtype)
    _check(lambda x, i: torch.take(x, i) if dtype == torch.bool else torch.take(x, i) * 2,
           [x, torch.tensor(i)], fallback_log)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.uint8])
@pytest.mark.parametrize("index_shape", [(), (1,), (3,)])
def test_gather_of_a_0d_input_compiles(fallback_log, dtype, index_shape):
    # torch-mlir cannot lower it: ran through torch (OpInfo gather int16 #5)
    x = torch.tensor(7).to(dtype)
    _check(lambda x, i: torch.gather(x, 0, i) + 1, [x, torch.zeros(index_shape, dtype=torch.int64)], fallback_log)


@pytest.mark.parametrize("fn,args", [
    (lambda x, i: torch.take(x, i), (torch.arange(6.0), torch.tensor(6))),
    (lambda x, i: torch.take(x, i), (torch.arange(6.0), torch.tensor(-7))),
    (lambda x, i: torch.gather(x, 0, i), (torch.tensor(7.0), torch.tensor([1]))),
])
def test_0d_take_and_gather_out_of_range_raise_like_eager(fn, args):
    with pytest.raises(Exception) as want:
        fn(*args)
    fast = mlircap.compile(fn)
    for _ in range(2):
        with pytest.raises(type(want.value)):
            fast(*args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_negative_tensor_indices_wrap_without_a_rerun(fallback_log, dtype):
    # x[idx] and take wrap a negative index as eager's CPU kernels do; the CPU bounds
    # check sent every negative index to an eager rerun (only the GPU wrapped them)
    x = torch.arange(24).reshape(4, 6).to(dtype)
    idx = torch.tensor([[-1, 0], [-4, 3]])
    _check(lambda x, i: x[i] * 3, [x, idx], fallback_log)
    _check(lambda x, i: x[:, i] + 1, [x, torch.tensor([-6, 5, -2])], fallback_log)
    _check(lambda x, i: torch.take(x, i) + 1, [x, torch.tensor([-24, 23, -1])], fallback_log)


@pytest.mark.parametrize("i", [-5, 4])
def test_tensor_index_out_of_range_still_raises(i):
    x = torch.arange(8.0).reshape(4, 2)
    with pytest.raises(IndexError):
        x[torch.tensor([i])]
    fast = mlircap.compile(lambda x, t: x[t] * 2)
    for _ in range(2):
        with pytest.raises(IndexError):
            fast(x, torch.tensor([i]))


# ------------------------------------------- fallback: strided slice writes (x[:, ::2] = y)
def _strided_write(dim, sl):
    def fn(x, y):
        x = x.clone()
        idx = [slice(None)] * x.dim()
        idx[dim] = sl
        x[tuple(idx)] = y
        return x + x
    return fn


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("dim,sl", [(1, slice(1, 8, 2)), (0, slice(None, None, 3)), (-1, slice(-5, None, 2)),
                                    (2, slice(0, 100, 4))])
def test_strided_slice_write_compiles(fallback_log, dtype, dim, sl):
    # functionalization makes slice_scatter(x, y, dim, start, end, step): with a step above
    # 1 torch-mlir lowers it to a scatter without a CPU kernel ('slice_scatter' unsupported,
    # an island splitting the graph: OpInfo slice_scatter bf16 #5, seed 737)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 9, 7, generator=g) * 50).to(dtype)
    shape = list(x[(slice(None),) * (dim % 3) + (sl,)].shape)
    y = (torch.randn(shape, generator=g) * 50).to(dtype)
    _check(_strided_write(dim, sl), [x, y], fallback_log)
    _check(lambda x, y: torch.slice_scatter(x, y, dim, sl.start, sl.stop, sl.step), [x, y], fallback_log)
