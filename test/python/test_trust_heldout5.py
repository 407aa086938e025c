"""Held-out trust sweep, batch 5 (issue 10): ~100 small programs written the way a user
writes them (mixed dtypes, views + in-place, integer ops, bad indices, empty tensors,
broadcasting, reductions over dims of size 0/1, NaN/inf, non-contiguous inputs), each run
through mlircap.compile and torch.compile(backend="mlircap") over several calls on fresh
inputs and compared with eager: results (dtype, shape, values, NaN pattern), the inputs
they mutate, and the exception type where eager raises.

PYTEST_DONT_REWRITE"""

import warnings

import pytest
import torch
import torch.nn.functional as F

import mlircap


def gen(i, *shape, dtype=torch.float32, lo=-3, hi=3):
    g = torch.Generator().manual_seed(5000 + i)
    x = torch.rand(*shape, generator=g) * (hi - lo) + lo
    if dtype.is_floating_point:
        return x.to(dtype)
    return x.floor().to(dtype)


def special(i, *shape):
    """Values with NaN, +-inf, -0.0 and large magnitudes among normal ones."""
    x = gen(i, *shape).flatten()
    vals = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, -1e-30, 3.0])
    at = torch.arange(0, x.numel(), 3)
    x[at] = vals[(at + i) % len(vals)]
    return x.view(*shape)


def nc(i, *shape, dtype=torch.float32):
    """A non-contiguous tensor of the given shape (a transposed, strided slice)."""
    big = gen(i, *reversed([2 * s for s in shape]), dtype=dtype)
    sl = big[tuple(slice(None, None, 2) for _ in shape)]
    return sl.permute(*reversed(range(len(shape))))


def _ret_compare(got, want, tol):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        if want.is_floating_point() or want.is_complex():
            torch.testing.assert_close(got, want, equal_nan=True, **tol)
        else:
            assert torch.equal(got, want), (got, want)
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _ret_compare(g, w, tol)
    elif isinstance(want, float):
        assert type(got) is float and (got == pytest.approx(want, rel=1e-5, abs=1e-6, nan_ok=True)), (got, want)
    else:
        assert type(got) is type(want) and got == want, (got, want)


def _clone(args):
    """Fresh copies of the arguments with their layout (strides, storage offset) and
    requires_grad."""
    return [_same_layout(a.detach()).requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in args]


def _same_layout(a):
    """A copy of `a` with its strides and storage offset (a view of a copy of its storage)."""
    if a.is_contiguous() and a.storage_offset() == 0:
        return a.clone()
    base = torch.empty(0, dtype=a.dtype).set_(a.untyped_storage()).clone()
    return base.as_strided(a.shape, a.stride(), a.storage_offset())


def run_both(fn, make_args, front="mlircap", calls=3, tol=None):
    """fn on fresh copies of make_args(i) eagerly and compiled, for i in range(calls):
    results, mutated inputs and raised exception types must agree."""
    tol = tol or {}
    fast = mlircap.compile(fn) if front == "mlircap" else torch.compile(fn, backend="mlircap")
    for i in range(calls):
        args = make_args(i)
        ea, ca = _clone(args), _clone(args)
        want = got = werr = gerr = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = fn(*ea)
            except Exception as e:  # noqa: BLE001
                werr = e
            try:
                got = fast(*ca)
            except Exception as e:  # noqa: BLE001
                gerr = e
        if werr is not None:
            assert gerr is not None, f"call {i}: eager raised {werr!r}, compiled returned {got!r}"
            assert isinstance(gerr, type(werr)), f"call {i}: eager raised {werr!r}, compiled {gerr!r}"
            continue
        assert gerr is None, f"call {i}: compiled raised {gerr!r}"
        _ret_compare(got, want, tol)
        for a, b in zip(ca, ea):   # in-place mutations of the inputs
            if isinstance(b, torch.Tensor):
                _ret_compare(a, b, tol)
    return fast


P = {}


def prog(name, make_args, *, tol=None, fronts=("mlircap",)):
    def deco(fn):
        P[name] = (fn, make_args, tol, fronts)
        return fn
    return deco


BOTH = ("mlircap", "torch.compile")

# --------------------------------------------------------------------------- mixed dtypes


@prog("int32_plus_half", lambda i: [gen(i, 5, 4, dtype=torch.int32, lo=-100, hi=100), gen(i, 4, dtype=torch.float16)],
      tol=dict(rtol=1e-3, atol=1e-3), fronts=BOTH)
def _p(a, b):
    return a + b, (a * b).sum(0)


@prog("uint8_image_normalize", lambda i: [gen(i, 2, 3, 4, 5, dtype=torch.uint8, lo=0, hi=256)], fronts=BOTH)
def _p(x):
    y = x.float() / 255.0
    return (y - 0.5) / 0.25, x.max(), x.sum(), (x // 16).to(torch.uint8)


@prog("bool_plus_int", lambda i: [gen(i, 6, dtype=torch.int64, lo=-5, hi=5)])
def _p(x):
    m = x > 0
    return m + m, m + x, m * 3, m.sum(), (~m).int().cumsum(0)


@prog("int_true_division", lambda i: [gen(i, 7, dtype=torch.int64, lo=-20, hi=20),
                                      gen(i + 9, 7, dtype=torch.int64, lo=1, hi=6)], fronts=BOTH)
def _p(a, b):
    return a / b, a // b, a % b, torch.div(a, -b, rounding_mode="trunc"), torch.fmod(a, b)


@prog("bf16_with_f32_zero_dim", lambda i: [gen(i, 4, 4, dtype=torch.bfloat16), torch.tensor(1.5 + i)],
      tol=dict(rtol=1.6e-2, atol=1e-5))
def _p(x, s):
    return x * s, x + s.double(), (x * 2.5).dtype == x.dtype and x * 2.5


@prog("where_scalar_mixed", lambda i: [gen(i, 3, 5), gen(i + 1, 3, 5, dtype=torch.int32, lo=-4, hi=4)])
def _p(x, k):
    return torch.where(x > 0, k, 0.5), torch.where(k > 0, k, -1), torch.where(x > 0, x, k)


@prog("int16_overflow_wraps", lambda i: [gen(i, 8, dtype=torch.int16, lo=30000, hi=32767)], fronts=BOTH)
def _p(x):
    return x + x, x * 3, -x - x, (x.to(torch.int8)), x.sum(), x.sum(dtype=torch.int16)


@prog("int8_abs_min", lambda i: [torch.tensor([-128, -127, -1, 0, 1, 127], dtype=torch.int8).roll(i)])
def _p(x):
    return x.abs(), -x, x.sign(), x.neg().to(torch.int32)


@prog("float_to_int_cast", lambda i: [gen(i, 9, lo=-300, hi=300)])
def _p(x):
    return x.to(torch.int32), x.clamp(-127, 127).to(torch.int8), x.round().long(), x.trunc().to(torch.int16)


@prog("mixed_compare_promote", lambda i: [gen(i, 6, dtype=torch.int32, lo=-5, hi=5), gen(i, 6) * 2])
def _p(a, b):
    return a < b, a == b.round(), torch.maximum(a, b), torch.minimum(a.to(torch.uint8), a.to(torch.int8))


@prog("float64_mix", lambda i: [gen(i, 4, 3, dtype=torch.float64), gen(i + 1, 3)])
def _p(a, b):
    return a @ b.double(), a + b, (a.float() * b).sum()


@prog("mean_of_int_cast", lambda i: [gen(i, 5, 6, dtype=torch.int32, lo=0, hi=50)], fronts=BOTH)
def _p(x):
    return x.float().mean(1), x.sum(1, dtype=torch.float32) / x.shape[1], x.to(torch.float16).mean()


# --------------------------------------------------------------------------- views + in-place


@prog("column_add_inplace", lambda i: [gen(i, 4, 5)], fronts=BOTH)
def _p(x):
    x[:, 1].add_(1)
    x[2] *= 3
    return x.sum(0)


@prog("transpose_mul_inplace", lambda i: [gen(i, 3, 4)])
def _p(x):
    y = x.t()
    y.mul_(2)
    y[0].zero_()
    return x + 1


@prog("strided_zero", lambda i: [gen(i, 12)], fronts=BOTH)
def _p(x):
    x.view(3, 4)[:, ::2].zero_()
    return x * 2


@prog("diagonal_fill", lambda i: [gen(i, 4, 4)])
def _p(x):
    x.diagonal().fill_(-1)
    return x.sum(), x


@prog("narrow_copy_into", lambda i: [gen(i, 6, 3), gen(i + 1, 2, 3)], fronts=BOTH)
def _p(x, y):
    x.narrow(0, 2, 2).copy_(y)
    return x.cumsum(0)


@prog("masked_fill_on_view", lambda i: [gen(i, 4, 6)])
def _p(x):
    v = x[1:3]
    v.masked_fill_(v < 0, 0.0)
    return x, v.sum()


@prog("index_add_inplace", lambda i: [gen(i, 5, 3), torch.tensor([0, 4, 0, 2]), gen(i + 2, 4, 3)], fronts=BOTH)
def _p(x, idx, s):
    x.index_add_(0, idx, s)
    return x * 1


@prog("unsqueeze_then_inplace_relu", lambda i: [gen(i, 3, 4)])
def _p(x):
    y = x.unsqueeze(0)
    y.relu_()
    return y.squeeze(0) + x


@prog("out_argument", lambda i: [gen(i, 3, 3), gen(i + 1, 3, 3), torch.empty(3, 3)])
def _p(a, b, out):
    torch.add(a, b, alpha=2, out=out)
    return out * 2


@prog("view_as_real_like_reshape_inplace", lambda i: [gen(i, 2, 6)])
def _p(x):
    y = x.reshape(2, 3, 2)
    y[..., 0] = y[..., 1] * 2
    return x


@prog("alias_two_views_add", lambda i: [gen(i, 10)], fronts=BOTH)
def _p(x):
    # eager rejects the partial overlap; torch.compile's functionalized graph did not
    a, b = x[:6], x[4:]
    a.add_(b)
    return x


@prog("inplace_on_expanded_raises", lambda i: [gen(i, 1, 4)])
def _p(x):
    y = x.expand(3, 4)
    y.add_(1)
    return y


@prog("clamp_inplace_int", lambda i: [gen(i, 8, dtype=torch.int32, lo=-20, hi=20)])
def _p(x):
    x.clamp_(-5, 5)
    x.mul_(2)
    return x.float().mean()


@prog("scatter_inplace_reduce", lambda i: [torch.zeros(3, 5), torch.tensor([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]]),
                                            gen(i, 2, 5)], fronts=BOTH)
def _p(x, idx, src):
    x.scatter_add_(0, idx, src)
    return x, x.scatter(0, idx, src, reduce="multiply")


@prog("setitem_bool_mask", lambda i: [gen(i, 4, 5)])
def _p(x):
    x[x > 1] = 0
    x[:, 0] = torch.arange(4.0)
    return x


@prog("inplace_pow_on_slice", lambda i: [gen(i, 3, 8)])
def _p(x):
    x[:, 2:5].pow_(2)
    x[-1].exp_()
    return x


# --------------------------------------------------------------------------- integer ops


@prog("bitwise_mix", lambda i: [gen(i, 8, dtype=torch.int32, lo=-1000, hi=1000), gen(i + 3, 8, dtype=torch.int32,
                                                                                        lo=0, hi=40)], fronts=BOTH)
def _p(a, b):
    return a & b, a | b, a ^ ~b, a << (b % 8), a >> (b % 31), torch.bitwise_right_shift(a, 3)


@prog("uint8_shifts_wrap", lambda i: [gen(i, 8, dtype=torch.uint8, lo=0, hi=256)])
def _p(x):
    return x << 3, x >> 2, x << 9, x + 200, x - 7, x * x


@prog("remainder_negative", lambda i: [gen(i, 9, dtype=torch.int64, lo=-50, hi=50)])
def _p(x):
    return x % 7, x % -7, torch.remainder(x, 3), torch.fmod(x, -4), x.remainder(torch.tensor(5))


@prog("int_division_by_zero", lambda i: [gen(i, 5, dtype=torch.int32, lo=-5, hi=5),
                                         torch.tensor([1, 2, 0, 3, 1], dtype=torch.int32)])
def _p(a, b):
    return a // b


@prog("int_float_division_by_zero", lambda i: [gen(i, 5, dtype=torch.int32, lo=-5, hi=5),
                                               torch.tensor([1, 2, 0, 3, 0], dtype=torch.int32)])
def _p(a, b):
    return a / b, (a.float() // b.float())


@prog("int_sum_promotes", lambda i: [gen(i, 40, dtype=torch.int8, lo=-128, hi=128)], fronts=BOTH)
def _p(x):
    return x.sum(), x.cumsum(0), x.prod(), x.to(torch.uint8).sum(), x.bool().sum()


@prog("int_mean_raises", lambda i: [gen(i, 6, dtype=torch.int64, lo=0, hi=9)])
def _p(x):
    return x.mean()


@prog("argmax_ties_int", lambda i: [torch.tensor([[3, 1, 3, 0], [0, 0, -1, 0], [2, 5, 5, 5]]) + i])
def _p(x):
    return x.argmax(1), x.argmin(0), x.max(1), torch.topk(x, 2, dim=1).values


@prog("bool_reductions", lambda i: [gen(i, 4, 5) > 0.5])
def _p(m):
    return m.any(1), m.all(0), m.sum(1), m.float().mean(), m.int().max(), m.argmax(1)


@prog("int_matmul", lambda i: [gen(i, 3, 4, dtype=torch.int64, lo=-9, hi=9), gen(i + 1, 4, 2, dtype=torch.int64,
                                                                                 lo=-9, hi=9)], fronts=BOTH)
def _p(a, b):
    return a @ b, torch.mm(a.int(), b.int()), (a.unsqueeze(0) @ b).squeeze(0)


@prog("int_clamp_tensor_bounds", lambda i: [gen(i, 10, dtype=torch.int32, lo=-50, hi=50),
                                            torch.tensor(-10 - i, dtype=torch.int32), torch.tensor(7)])
def _p(x, lo, hi):
    return x.clamp(lo, hi), torch.clamp(x, min=lo), x.clamp(max=hi)


@prog("integer_pow_scalar", lambda i: [gen(i, 7, dtype=torch.int64, lo=-4, hi=5)])
def _p(x):
    return x ** 2, x ** 3, 2 ** x.clamp(min=0), x.pow(0)


@prog("gcd_lcm_bincount", lambda i: [gen(i, 6, dtype=torch.int64, lo=1, hi=30), gen(i + 1, 6, dtype=torch.int64,
                                                                                       lo=1, hi=30)])
def _p(a, b):
    return torch.gcd(a, b), torch.lcm(a, b)


# --------------------------------------------------------------------------- bad indices


@prog("index_out_of_range", lambda i: [gen(i, 5, 3), torch.tensor([0, 4, 5 + i])], fronts=BOTH)
def _p(x, idx):
    return x[idx] * 2


@prog("index_negative_ok", lambda i: [gen(i, 5, 3), torch.tensor([-1, -5, 2])], fronts=BOTH)
def _p(x, idx):
    return x[idx] + x[:, idx[:2] + 3]


@prog("index_negative_too_far", lambda i: [gen(i, 5, 3), torch.tensor([-1, -6])])
def _p(x, idx):
    return x[idx].sum(0)


@prog("gather_bad_index", lambda i: [gen(i, 3, 4), torch.tensor([[0, 1], [3, 4], [1, 1]])], fronts=BOTH)
def _p(x, idx):
    return torch.gather(x, 1, idx)


@prog("gather_ok", lambda i: [gen(i, 3, 4), torch.tensor([[0, 1], [3, 2], [1, 1]])])
def _p(x, idx):
    return torch.gather(x, 1, idx), x.gather(0, idx[:2].clamp(max=2))


@prog("index_select_bad", lambda i: [gen(i, 4, 3), torch.tensor([1, 2, 7])])
def _p(x, idx):
    return x.index_select(0, idx)


@prog("embedding_bad", lambda i: [gen(i, 10, 4), torch.tensor([[1, 2], [9, 10 + i]])], fronts=BOTH)
def _p(w, idx):
    return F.embedding(idx, w).sum(-1)


@prog("embedding_padding_idx", lambda i: [gen(i, 10, 4), torch.tensor([[1, 0], [9, 3]])])
def _p(w, idx):
    return F.embedding(idx, w, padding_idx=0) * 2


@prog("scatter_bad_index", lambda i: [torch.zeros(3, 4), torch.tensor([[0, 5]]), gen(i, 1, 2)])
def _p(x, idx, src):
    return x.scatter(1, idx, src)


@prog("index_put_bad", lambda i: [torch.zeros(5), torch.tensor([1, 8]), torch.tensor([1.0, 2.0])])
def _p(x, idx, v):
    x[idx] = v
    return x


@prog("index_put_accumulate_dups", lambda i: [torch.zeros(5), torch.tensor([1, 1, 3, 1]), gen(i, 4)], fronts=BOTH)
def _p(x, idx, v):
    return x.index_put((idx,), v, accumulate=True)


@prog("take_bad", lambda i: [gen(i, 3, 3), torch.tensor([0, 8, 9])])
def _p(x, idx):
    return torch.take(x, idx)


@prog("mask_wrong_shape", lambda i: [gen(i, 4, 3), torch.tensor([True, False, True])])
def _p(x, m):
    return x[m]


@prog("one_hot_bad_class", lambda i: [torch.tensor([0, 2, 3 + i])])
def _p(t):
    return F.one_hot(t, 4).float().sum(0)


@prog("cross_entropy_bad_target", lambda i: [gen(i, 3, 5), torch.tensor([0, 4, 5])])
def _p(x, t):
    return F.cross_entropy(x, t)


@prog("cross_entropy_ignore_index", lambda i: [gen(i, 4, 5), torch.tensor([0, -100, 4, 1])], fronts=BOTH)
def _p(x, t):
    return F.cross_entropy(x, t), F.nll_loss(x.log_softmax(1), t, reduction="sum")


# --------------------------------------------------------------------------- empty tensors


@prog("empty_reductions", lambda i: [torch.zeros(0, 3)], fronts=BOTH)
def _p(x):
    return x.sum(0), x.sum(), x.prod(0), x.mean(0), x.logsumexp(0), x.norm()


@prog("empty_max_raises", lambda i: [torch.zeros(0, 3)])
def _p(x):
    return x.max()


@prog("empty_amax_dim_raises", lambda i: [torch.zeros(0, 3)])
def _p(x):
    return x.amax(0)


@prog("empty_amax_other_dim", lambda i: [torch.zeros(0, 3)])
def _p(x):
    return x.amax(1), x.argmax(1), x.softmax(1), x.cumsum(0)


@prog("cat_with_empty", lambda i: [gen(i, 2, 3), torch.zeros(0, 3), torch.zeros(0)], fronts=BOTH)
def _p(a, b, c):
    return torch.cat([a, b]), torch.cat([b, a, b], 0) * 2, torch.cat([a.flatten(), c])


@prog("matmul_zero_inner", lambda i: [torch.zeros(3, 0), torch.zeros(0, 4)])
def _p(a, b):
    return a @ b + 1, torch.addmm(torch.ones(3, 4), a, b)


@prog("empty_sort_topk", lambda i: [torch.zeros(0)])
def _p(x):
    return x.sort().values, torch.topk(x, 0).values, x.argsort(), x.cumprod(0)


@prog("argmax_empty_raises", lambda i: [torch.zeros(0)])
def _p(x):
    return x.argmax()


@prog("empty_slice_ops", lambda i: [gen(i, 5, 4)], fronts=BOTH)
def _p(x):
    e = x[3:3]
    return e * 2, e.sum(1), e.t(), x[:, 4:].mean(1), x[5:].sum()


@prog("empty_index", lambda i: [gen(i, 5, 4), torch.zeros(0, dtype=torch.int64)])
def _p(x, idx):
    return x[idx], x.index_select(1, idx), x.gather(0, idx.view(0, 1).expand(0, 4))


@prog("empty_batch_linear", lambda i: [torch.zeros(0, 8), gen(i, 4, 8), gen(i, 4)])
def _p(x, w, b):
    return F.linear(x, w, b).relu(), F.layer_norm(x, (8,))


# --------------------------------------------------------------------------- broadcasting


@prog("outer_broadcast", lambda i: [gen(i, 3, 1), gen(i + 1, 1, 4)], fronts=BOTH)
def _p(a, b):
    return a + b, a * b - b, torch.where(a > b, a, b), torch.maximum(a, b)


@prog("broadcast_mismatch_raises", lambda i: [gen(i, 3, 2), gen(i + 1, 3)])
def _p(a, b):
    return a + b


@prog("broadcast_inplace_wrong_way", lambda i: [gen(i, 1, 4), gen(i, 3, 4)])
def _p(a, b):
    a.add_(b)
    return a


@prog("broadcast_zero_dim", lambda i: [gen(i, 4, 5), torch.tensor(2.0 + i)])
def _p(x, s):
    return x * s, x.clamp(max=s), torch.pow(s, x.clamp(-2, 2)), x / s


@prog("expand_as_and_sum", lambda i: [gen(i, 4), gen(i + 1, 3, 4)])
def _p(v, m):
    return v.expand_as(m) * m, (v.expand(2, 3, 4) + m).sum((0, 1))


@prog("broadcast_bool_and_float", lambda i: [gen(i, 3, 1) > 0, gen(i, 1, 5)])
def _p(m, x):
    return m * x, m & (x > 0), torch.where(m, x, -x)


# --------------------------------------------------------------------------- size 0/1 reductions


@prog("std_single_element", lambda i: [gen(i, 4, 1)], fronts=BOTH)
def _p(x):
    return x.std(1), x.var(1, correction=0), x.std(0), torch.var_mean(x, 1)


@prog("reduce_size_one_dim", lambda i: [gen(i, 1, 5)])
def _p(x):
    return x.max(0), x.argmin(0), x.logsumexp(0), x.softmax(0), x.prod(0), x.median(0)


@prog("keepdim_reductions", lambda i: [gen(i, 3, 1, 4)])
def _p(x):
    return x.sum(1, keepdim=True), x.amax((0, 2), keepdim=True), x.mean((-1,), keepdim=True) - x


@prog("reduce_zero_size_dim", lambda i: [torch.zeros(3, 0, 2)])
def _p(x):
    return x.sum(1), x.mean(1), x.prod(1), x.std(1), x.any(1), x.all(1), x.amax(0)


@prog("norm_dims", lambda i: [gen(i, 2, 3, 4)], fronts=BOTH)
def _p(x):
    return x.norm(dim=(1, 2)), torch.linalg.vector_norm(x, ord=float("inf"), dim=0), x.norm(p=0, dim=2)


@prog("var_mean_correction", lambda i: [gen(i, 5, 7)])
def _p(x):
    return torch.var(x, 1, correction=2), torch.std_mean(x, 0, correction=0), x.var(unbiased=True)


# --------------------------------------------------------------------------- NaN / inf


@prog("nan_max_min", lambda i: [special(i, 4, 6)], fronts=BOTH)
def _p(x):
    return x.max(1), x.min(), x.amax(0), x.argmax(1), torch.maximum(x, x.flip(0)), torch.fmax(x, x.flip(1))


@prog("nan_sort_topk", lambda i: [special(i, 3, 8)])
def _p(x):
    return x.sort(1), x.sort(1, descending=True).values, torch.topk(x, 3, 1).values, x.argsort(0)


@prog("nan_clamp", lambda i: [special(i, 12)], fronts=BOTH)
def _p(x):
    return x.clamp(-1, 1), F.hardtanh(x), x.clamp_min(0), F.relu6(x), F.relu(x)


@prog("inf_softmax", lambda i: [special(i, 3, 4)])
def _p(x):
    return x.softmax(1), x.log_softmax(0), torch.logsumexp(x, 1)


@prog("masked_softmax_all_inf_row", lambda i: [gen(i, 3, 4), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0],
                                                                              [1, 0, 1, 0]], dtype=torch.bool)],
      fronts=BOTH)
def _p(x, keep):
    return x.masked_fill(~keep, float("-inf")).softmax(-1)


@prog("log_zero_and_friends", lambda i: [torch.tensor([0.0, -0.0, -1.0, 1.0, float("inf"), float("nan"), 1e-45])])
def _p(x):
    return x.log(), x.log1p(), x.sqrt(), x.rsqrt(), 1 / x, x.reciprocal(), torch.log2(x)


@prog("zero_times_inf", lambda i: [special(i, 8)])
def _p(x):
    return x * 0, x - x, x / x, torch.nan_to_num(x), torch.nan_to_num(x, nan=1.0, posinf=2.0), x.isfinite()


@prog("nan_reductions", lambda i: [special(i, 3, 5)])
def _p(x):
    return x.nansum(1), x.nanmean(0), x.sum(1), x.cumsum(1), x.cummax(1).values, x.prod(0)


@prog("nan_median_mode", lambda i: [special(i, 3, 5)])
def _p(x):
    return x.median(1), x.nanmedian(), x.median()


@prog("sign_of_special", lambda i: [special(i, 16)])
def _p(x):
    return x.sign(), x.sgn(), torch.signbit(x), x.abs(), torch.copysign(torch.ones(16), x), x.floor(), x.ceil()


@prog("int_cast_of_nan_inf_trapped", lambda i: [torch.tensor([1.5, -2.5, 2.5, 0.5, -0.5, 1e3])])
def _p(x):
    return x.round(), torch.round(x, decimals=1), x.to(torch.int64)


@prog("exp_overflow_tanh", lambda i: [gen(i, 10, lo=-200, hi=200)], fronts=BOTH)
def _p(x):
    return x.exp(), x.tanh(), x.sigmoid(), F.softplus(x), F.silu(x), F.gelu(x), torch.expm1(x)


# --------------------------------------------------------------------------- non-contiguous inputs


@prog("nc_elementwise", lambda i: [nc(i, 4, 5), nc(i + 1, 4, 5)], fronts=BOTH)
def _p(a, b):
    return a * b + a.sin(), (a - b).abs().sum(1)


@prog("nc_matmul", lambda i: [nc(i, 4, 6), nc(i + 1, 6, 3)], tol=dict(rtol=1e-4, atol=1e-5))
def _p(a, b):
    return a @ b, torch.addmm(torch.ones(3), a, b), F.linear(a, b.t())


@prog("expanded_stride_zero", lambda i: [gen(i, 5).expand(3, 5), gen(i, 3, 1).expand(3, 5)])
def _p(a, b):
    return a + b, (a * b).sum(0), a.cumsum(1), a.contiguous().view(-1)


@prog("channels_last_conv", lambda i: [gen(i, 2, 3, 8, 8).to(memory_format=torch.channels_last), gen(i, 4, 3, 3, 3),
                                       gen(i, 4)], tol=dict(rtol=1e-4, atol=1e-4), fronts=BOTH)
def _p(x, w, b):
    y = F.conv2d(x, w, b, padding=1)
    return F.max_pool2d(y.relu(), 2), y.mean((2, 3))


@prog("nc_reductions", lambda i: [nc(i, 6, 4)])
def _p(x):
    return x.sum(0), x.amax(1), x.softmax(0), x.argmax(0), x.var(1)


@prog("nc_view_needs_copy", lambda i: [nc(i, 4, 6)])
def _p(x):
    return x.reshape(24) * 2, x.flatten()[::5], x.unflatten(1, (2, 3)).sum(-1)


@prog("storage_offset_input", lambda i: [gen(i, 30)[7:27].view(4, 5)], fronts=BOTH)
def _p(x):
    return x.t() @ x, x.cumsum(1), x[1:, 1:] - x[:-1, :-1]


@prog("nc_inplace", lambda i: [nc(i, 4, 4)])
def _p(x):
    x.add_(1).mul_(x)
    return x.sum()


# --------------------------------------------------------------------------- user-style blocks


@prog("attention_with_mask", lambda i: [gen(i, 2, 4, 8), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()],
      tol=dict(rtol=1e-4, atol=1e-5), fronts=BOTH)
def _p(x, keep):
    s = x @ x.transpose(1, 2) / 8 ** 0.5
    s = s.masked_fill(~keep[:, None, :], float("-inf"))
    return s.softmax(-1) @ x


@prog("layer_norm_bf16", lambda i: [gen(i, 3, 16, dtype=torch.bfloat16), gen(i, 16), gen(i + 1, 16)],
      tol=dict(rtol=1.6e-2, atol=1e-2))
def _p(x, w, b):
    return F.layer_norm(x.float(), (16,), w, b).to(torch.bfloat16), F.rms_norm(x.float(), (16,))


@prog("loss_mix", lambda i: [gen(i, 6, 3), gen(i + 1, 6, 3, lo=0, hi=1)], fronts=BOTH)
def _p(x, y):
    return (F.mse_loss(x, y), F.l1_loss(x, y, reduction="none"), F.smooth_l1_loss(x, y, beta=0.5),
            F.binary_cross_entropy_with_logits(x, y), F.huber_loss(x, y, delta=2.0), F.kl_div(x, y, reduction="batchmean"))


@prog("bce_out_of_range_raises", lambda i: [gen(i, 4, lo=-0.5, hi=1.5), gen(i, 4, lo=0, hi=1)])
def _p(p, y):
    return F.binary_cross_entropy(p, y)


@prog("pad_modes", lambda i: [gen(i, 1, 2, 5, 5)], fronts=BOTH)
def _p(x):
    return (F.pad(x, (1, 2, 0, 1)), F.pad(x, (2, 2, 1, 1), mode="reflect"), F.pad(x, (1, 1, 1, 1), mode="replicate"),
            F.pad(x, (-1, 1, 0, -2)), F.pad(x, (1, 1, 2, 2), mode="circular"))


@prog("interpolate_modes", lambda i: [gen(i, 1, 2, 4, 5)], tol=dict(rtol=1e-4, atol=1e-5))
def _p(x):
    return (F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
            F.interpolate(x, size=(3, 7), mode="nearest"), F.interpolate(x, size=(6, 6), mode="bicubic"),
            F.adaptive_avg_pool2d(x, (3, 2)), F.avg_pool2d(x, 2, ceil_mode=True))


@prog("cumulative_ops", lambda i: [gen(i, 3, 6)])
def _p(x):
    return x.cumsum(1), x.cumprod(0), x.cummin(1), torch.logcumsumexp(x, 1), x.flip(1).cumsum(1).flip(1)


@prog("unique_like_ops", lambda i: [gen(i, 12, dtype=torch.int64, lo=0, hi=5)])
def _p(x):
    return torch.bincount(x, minlength=6), x.unique(), torch.unique_consecutive(x), x.sort(stable=True).indices


@prog("sort_stable_ties", lambda i: [gen(i, 3, 10, dtype=torch.int32, lo=0, hi=3)])
def _p(x):
    return x.sort(1, stable=True), x.argsort(1, descending=True, stable=True), x.kthvalue(3, 1)


@prog("where_nonzero_masks", lambda i: [gen(i, 4, 5)])
def _p(x):
    return x[x > 0].sum(), torch.nonzero(x > 1), x.masked_select(x < 0), (x > 0).nonzero(as_tuple=True)[1]


@prog("tensor_from_python_list", lambda i: [gen(i, 3)])
def _p(x):
    w = torch.tensor([1.0, -2.0, 0.5])
    return x * w, torch.stack([x, w, torch.zeros(3)]), x.new_tensor([1, 2, 3]) + x


@prog("arange_linspace_factories", lambda i: [gen(i, 5)], fronts=BOTH)
def _p(x):
    return (x + torch.arange(5), torch.linspace(0, 1, 5) * x, torch.arange(0, 1, 0.2) + x,
            torch.full((5,), 7, dtype=torch.int32) + torch.arange(5, dtype=torch.int32), torch.eye(5) @ x)


@prog("tril_triu_masks", lambda i: [gen(i, 4, 4)])
def _p(x):
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    return x.masked_fill(~causal, 0), x.triu(1), x.tril(-1), torch.triu_indices(3, 3)


@prog("repeat_tile_chunk", lambda i: [gen(i, 2, 6)], fronts=BOTH)
def _p(x):
    a, b, c = x.chunk(3, 1)
    return x.repeat(2, 1), x.tile((1, 2)), a * b + c, x.repeat_interleave(2, 0), torch.split(x, [1, 5], 1)[1]


@prog("einsum_bmm", lambda i: [gen(i, 2, 3, 4), gen(i + 1, 2, 4, 5)], tol=dict(rtol=1e-4, atol=1e-5))
def _p(a, b):
    return torch.einsum("bij,bjk->bik", a, b), torch.bmm(a, b), torch.einsum("bij->j", a), torch.baddbmm(
        torch.zeros(5), a, b)


@prog("dropout_eval_identity", lambda i: [gen(i, 4, 4)])
def _p(x):
    return F.dropout(x, 0.5, training=False) * 2, F.alpha_dropout(x, 0.2, training=False)


@prog("complex_rejected_or_right", lambda i: [gen(i, 4, 2)])
def _p(x):
    z = torch.view_as_complex(x.contiguous())
    return (z * z).abs(), z.angle(), torch.view_as_real(z.conj().resolve_conj())


@prog("group_norm_batch_norm_eval", lambda i: [gen(i, 2, 4, 3, 3), gen(i, 4, lo=0.5, hi=2), gen(i + 1, 4)],
      tol=dict(rtol=1e-4, atol=1e-5), fronts=BOTH)
def _p(x, rv, rm):
    return F.group_norm(x, 2), F.batch_norm(x, rm, rv, training=False), F.instance_norm(x)


@prog("batch_norm_train_updates_stats", lambda i: [gen(i, 4, 3, 2), torch.zeros(3), torch.ones(3)],
      tol=dict(rtol=1e-4, atol=1e-5))
def _p(x, rm, rv):
    y = F.batch_norm(x, rm, rv, training=True, momentum=0.1)
    return y, rm, rv


@prog("argmax_bool_front", lambda i: [gen(i, 3, 5) > 0], fronts=BOTH)
def _p(m):
    # torch.compile: eager's dtype check is not in the meta kernel (the compiled graph
    # returned indices); the graph's first call runs eagerly until one completes
    return m.argmax(1), m.int().argmax()


@prog("topk_largest_false_int", lambda i: [gen(i, 3, 7, dtype=torch.int16, lo=-100, hi=100)])
def _p(x):
    return torch.topk(x, 3, 1, largest=False), x.max(0), x.min(1).indices


@prog("topk_k_too_large", lambda i: [gen(i, 3, 4)])
def _p(x):
    return torch.topk(x, 5, 1)


@prog("view_wrong_shape_raises", lambda i: [gen(i, 3, 4)])
def _p(x):
    return x.view(5, -1)


@prog("view_of_nc_raises", lambda i: [gen(i, 3, 4).t()])
def _p(x):
    return x.view(12)


@prog("matmul_shape_mismatch", lambda i: [gen(i, 3, 4), gen(i, 3, 4)], fronts=BOTH)
def _p(a, b):
    return a @ b


@prog("cdist_and_pdist", lambda i: [gen(i, 4, 3), gen(i + 1, 5, 3)], tol=dict(rtol=1e-4, atol=1e-4))
def _p(a, b):
    return torch.cdist(a, b), torch.cdist(a, b, p=1), F.pairwise_distance(a, a.flip(0)), F.pdist(a)


@prog("cdist_bf16_raises", lambda i: [gen(i, 4, 3, dtype=torch.bfloat16), gen(i + 1, 5, 3, dtype=torch.bfloat16)],
      fronts=BOTH)
def _p(a, b):
    return torch.cdist(a, b)


@prog("cosine_sim_zero_vectors", lambda i: [torch.zeros(3, 4), gen(i, 3, 4)])
def _p(a, b):
    return F.cosine_similarity(a, b), F.normalize(a, dim=1), F.normalize(b, dim=0)


@prog("scalar_outputs", lambda i: [gen(i, 5)], fronts=BOTH)
def _p(x):
    return x.shape[0] * 2, x.sum() * 0, x.numel(), x.dim(), x.dtype == torch.float32


@prog("clone_detach_requires_grad", lambda i: [gen(i, 4).requires_grad_()])
def _p(x):
    y = (x * 2).detach()
    return y + 1, x.detach().clone().add_(3)


@prog("backward_inside", lambda i: [gen(i, 5).requires_grad_()], fronts=BOTH)
def _p(x):
    y = (x.sin() * x).sum()
    (g,) = torch.autograd.grad(y, x)
    return g, y.detach()


@prog("bf16_accumulation", lambda i: [gen(i, 2048, dtype=torch.bfloat16, lo=0, hi=1)],
      tol=dict(rtol=1.6e-2, atol=1e-2), fronts=BOTH)
def _p(x):
    return x.sum(), x.mean(), x.cumsum(0)[-1:], (x * x).sum(), x.var()


@prog("half_overflow", lambda i: [gen(i, 8, dtype=torch.float16, lo=-300, hi=300)], tol=dict(rtol=1e-3, atol=1e-3))
def _p(x):
    return x * x * x, x.exp(), x.sum() * 1000, x.float().pow(2).half()


@prog("int64_large_values", lambda i: [torch.tensor([2**40 + i, -2**53 - 1, 2**62, 7])])
def _p(x):
    return x + 1, x * 2, x // 3, x.float(), x.double(), x.max(), x.sort().values


@prog("uint8_compare_negative_scalar", lambda i: [gen(i, 10, dtype=torch.uint8, lo=0, hi=256)])
def _p(x):
    return x > -1, x == 255, x < 300, x.clamp(10, 200), torch.where(x > 128, x, 0)


# ---------------------------------------------------------------------------


CASES = [(name, front) for name, (_, _, _, fronts) in P.items() for front in fronts]


@pytest.mark.parametrize("name,front", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_heldout_program_matches_eager(name, front):
    fn, make_args, tol, _ = P[name]
    run_both(fn, make_args, front=front, tol=tol)
