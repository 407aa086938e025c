"""uint16 / uint32 / uint64 held as the signed integer of their width in compiled code
(unsigned_bits.py): torch.hash_tensor (OpInfo hash_tensor, every dtype: 'aten.hash_tensor
(dtype uint64)' ran through torch, bench/opinfo.py seed 2801) and bit views to and from
the unsigned dtypes compile; arithmetic on them still runs through torch."""
import warnings

import pytest
import torch

import mlircap


def _run(fn, *args, calls=2):
    fast = mlircap.compile(fn)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [fast(*[a.clone() for a in args]) for _ in range(calls)]
    text = "\n".join(str(w.message) for w in seen)
    return fast, outs, text


def _all_compiled(fast, text):
    assert fast.graphs, "no graph captured"
    assert all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    assert "run through torch" not in text and "eagerly" not in text, text


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert torch.equal(a.view(torch.int64) if a.dtype == torch.uint64 else a,
                       b.view(torch.int64) if b.dtype == torch.uint64 else b)


def _sample(dtype, shape):
    g = torch.Generator().manual_seed(7)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        x = (torch.randn(shape, generator=g) * 100).to(dtype)
        if x.numel() > 2:
            x.view(-1)[0], x.view(-1)[1] = float("nan"), -0.0
        return x
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=dtype)


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]
FORMS = [((3, 5), {}), ((3, 5), {"dim": 0, "keepdim": True}), ((3, 5), {"dim": -1}),
         ((3, 5), {"dim": (0, 1)}), ((3, 2, 1, 2), {"dim": (0, -1), "keepdim": True}),
         ((3, 2, 1, 2), {"dim": 2, "keepdim": True}), ((3, 7, 2), {"dim": 1}), ((), {}),
         ((0, 3), {"dim": 1}), ((2, 9), {"dim": (1,)})]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", range(len(FORMS)))
def test_hash_tensor_compiles_bit_for_bit(dtype, form):
    shape, kw = FORMS[form]
    x = _sample(dtype, shape)

    def f(x):
        return torch.hash_tensor(x, **kw)

    fast, outs, text = _run(f, x)
    want = f(x)
    for out in outs:
        _same_bits(out, want)
    _all_compiled(fast, text)


def test_hash_tensor_of_one_element_per_row_is_no_view_of_the_input():
    # one element per hash (the int64 bits are the element's own): a new tensor, as eager's
    x = torch.arange(6, dtype=torch.int64).reshape(3, 2, 1)
    fast, outs, text = _run(lambda x: torch.hash_tensor(x, 2), x)
    inp = x.clone()
    out = mlircap.compile(lambda x: torch.hash_tensor(x, 2))
    for _ in range(2):
        r = out(inp)
    r.view(torch.int64).add_(100)
    assert torch.equal(inp, x), "writing the hash wrote the input"
    _all_compiled(fast, text)


def test_hash_tensor_after_compiled_ops_and_used_beside_them():
    def f(x, y):
        z = x.abs() * y   # exactly rounded in both: the hash reads every bit
        return torch.hash_tensor(z, 1), z.sum()

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    fast, outs, text = _run(f, x, y)
    want = f(x, y)
    for out in outs:
        _same_bits(out[0], want[0])
        torch.testing.assert_close(out[1], want[1])
    _all_compiled(fast, text)


@pytest.mark.parametrize("src,dst", [(torch.int64, torch.uint64), (torch.float64, torch.uint64),
                                     (torch.int32, torch.uint32), (torch.float32, torch.uint32),
                                     (torch.int16, torch.uint16), (torch.bfloat16, torch.uint16)], ids=str)
def test_bit_view_to_unsigned_of_a_computed_value(src, dst):
    def f(x):
        return (x * 3).t().contiguous().view(dst)

    x = _sample(src, (4, 3))
    fast, outs, text = _run(f, x)
    want = f(x)
    for out in outs:
        assert out.dtype == dst and out.shape == want.shape
        signed = {8: torch.int64, 4: torch.int32, 2: torch.int16}[x.element_size()]
        assert torch.equal(out.view(signed), want.view(signed))   # the bits (NaN, -0.0)
    _all_compiled(fast, text)


def test_unsigned_input_viewed_and_moved():
    u = torch.randint(-2 ** 62, 2 ** 62, (3, 4), dtype=torch.int64).view(torch.uint64)

    def f(u):
        return u.view(torch.int64) ^ 5, u.t().contiguous(), torch.cat([u, u[:1]])

    fast, outs, text = _run(f, u)
    want = f(u)
    for out in outs:
        for a, b in zip(out, want):
            _same_bits(a, b)
    _all_compiled(fast, text)


def test_arithmetic_on_uint64_still_runs_through_torch():
    u = torch.tensor([1, -2 ** 63 + 5, 7], dtype=torch.int64).view(torch.uint64)

    def f(u):   # unsigned values read (a conversion, an order): eager's kernels
        return u.to(torch.float64) * 2, u.sort()[0], u * 3

    fast, outs, text = _run(f, u)
    want = f(u)
    assert want[0][1] > 0 and want[1][-1].view(torch.int64) < 0   # read as unsigned
    for out in outs:
        for a, b in zip(out, want):
            _same_bits(a, b)
    assert "(dtype uint64)" in text, text   # named, not compiled as signed
