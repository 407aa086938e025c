"""A tensor indexed by an int that changes between calls (`betas[t]` in a sampling loop, a
ring buffer's `buf[self.ptr] = x`, `emb.weight[self.step]`) takes the int as a graph input
(scalar_inputs._index_input) instead of recompiling for every value until cache_limit; where
the graph's copy would read other values than eager's view, the function is recorded again
with the index guarded by value (index_copy_hazard)."""
import warnings

import pytest
import torch

import mlircap


def _run(f, make_args, calls=10):
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(calls):
            args = make_args(i)
            want, got = f(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]), fast(*args)
            assert type(want) is type(got)
            if isinstance(want, torch.Tensor):
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)   # (a compiled kernel's rounding)
    return fast


BETAS = torch.linspace(1e-4, 0.02, 50)


def test_table_lookup_by_a_timestep_compiles_once():
    def p_sample(x, t):
        mean = (x - BETAS[t] / (1 - BETAS[t]).sqrt() * x.tanh()) / (1 - BETAS[t]).sqrt()
        if t > 0:
            return mean + BETAS[t].sqrt()
        return mean
    x = torch.randn(4, 8)
    fast = _run(p_sample, lambda i: (x, 49 - i), calls=12)
    ex = fast.explain()
    assert ex.variants == 2, ex.recompile_reasons   # the first value, then followed
    assert len(fast.graphs) == 2
    torch.testing.assert_close(fast(x, 0), p_sample(x, 0), rtol=1e-6, atol=1e-6)   # the other branch: t > 0 guarded
    # negative and out-of-range indices: eager's values and eager's error
    torch.testing.assert_close(fast(x, -3), p_sample(x, -3), rtol=1e-6, atol=1e-6)
    with pytest.raises(IndexError):
        p_sample(x, 50)
    with pytest.raises(IndexError):
        fast(x, 50)


def test_ring_buffer_pointer_and_step_indexed_row():
    class Ring:
        def __init__(self):
            self.buf, self.ptr = torch.zeros(16, 4), 0

        def push(self, x):
            self.buf[self.ptr] = x * 2
            self.ptr = (self.ptr + 1) % 16
            return self.buf.sum(0)

    class Pos(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.step = torch.nn.Embedding(64, 8), 0

        def forward(self, x):
            y = x + self.emb.weight[self.step]
            self.step += 1
            return y

    a, b = Ring(), Ring()
    fast = mlircap.compile(b.push)
    for i in range(20):
        x = torch.randn(4)
        torch.testing.assert_close(fast(x), a.push(x), rtol=1e-6, atol=1e-6)
    assert torch.equal(a.buf, b.buf) and a.ptr == b.ptr
    assert fast.explain().variants == 2 and len(fast.graphs) == 2

    for grad in (True, False):   # (under no_grad eager's row of a parameter says it requires grad)
        m = Pos()
        fast = mlircap.compile(m)
        with torch.set_grad_enabled(grad):
            for i in range(5):
                x = torch.randn(2, 8)
                assert torch.equal(fast(x), x + m.emb.weight[i])
        assert fast.explain().variants == 2, (grad, fast.explain().recompile_reasons)

    torch.manual_seed(0)
    m1 = Pos()
    m2 = Pos()
    m2.load_state_dict(m1.state_dict())
    fast = mlircap.compile(m2)
    for i in range(12):
        x = torch.randn(2, 8)
        e, c = m1(x), fast(x)
        assert torch.equal(e, c) and c.requires_grad
    assert fast.explain().variants == 2 and len(fast.graphs) == 2
    e.sum().backward()
    c.sum().backward()
    assert torch.equal(m1.emb.weight.grad, m2.emb.weight.grad)   # the row's gradient


@pytest.mark.parametrize("case", ["returned", "base_written", "row_written", "view_returned"])
def test_where_a_copy_differs_from_eagers_view_the_index_is_guarded(case):
    # eager's buf[t] is a view of buf: returned (the program keeps it), written in place, or
    # read after buf is written, a copy would differ; such a function is recorded again
    # with t guarded by value, every call equal to eager's
    def f(buf, x, t):
        row = buf[t]
        if case == "returned":
            return row
        if case == "view_returned":
            return row.view(2, 2)
        if case == "base_written":
            buf.mul_(2)
            return row + x
        row.add_(x)
        return buf.sum()

    b = torch.randn(8, 4)
    bufs = [b, b.clone()]
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(6):
            x = torch.randn(4)
            want = f(bufs[0], x, i)
            got = fast(bufs[1], x, i)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            assert torch.equal(bufs[0], bufs[1]), (case, i)
            if case in ("returned", "view_returned"):
                assert got._base is bufs[1] or got._base is bufs[1]._base or got.data_ptr() != 0
                got.fill_(7.0)   # the program writes the view it kept: buf follows, as eager's
                want.fill_(7.0)
                assert torch.equal(bufs[0], bufs[1])
    ex = fast.explain()   # recorded again with t guarded by value: compiled per value, not eager
    assert not ex.eager_reasons and ex.variants == 6 - 1, (ex.eager_reasons, ex.variants)


def test_a_timestep_batch_filled_from_an_int_compiles_once():
    # a diffusion sampler's `torch.full((n,), t)` (the timestep batch for the model's
    # embedding) and `betas[t]`: t a graph input, not a constant per value
    def step(x, t):
        tt = torch.full((x.shape[0],), t, dtype=torch.long)
        f = torch.full((x.shape[0], 1), t, dtype=torch.float32)
        return x * (tt.float()[:, None] + 1) / BETAS[t] + f

    x = torch.randn(3, 5)
    fast = _run(step, lambda i: (x, 40 - 3 * i), calls=8)
    assert fast.explain().variants == 2, fast.explain().recompile_reasons
    # a float fill, and a fill of another dtype: the same conversion as torch.full's
    def g(x, s):
        return x + torch.full((2, x.shape[1]), s, dtype=torch.float16).float()
    y = torch.randn(2, 4)
    fast = _run(g, lambda i: (y, 0.1 * i + 1e-3), calls=5)
    assert fast.explain().variants == 1   # (a float argument: followed from the start)


@pytest.mark.parametrize("op", ["aten", "foreach", "out", "relu_inplace", "hardtanh_positional"])
def test_other_in_place_forms_on_the_indexed_tensor_are_found(op):
    # torch.ops.aten.mul_ (an overload's name, `mul_.Tensor`), or a foreach op (a list of
    # tensors written) on buf after its row is read: each read a copy where eager's view
    # saw the write (wrong from the second value of t on)
    def f(buf, x, t):
        row = buf[t]
        if op == "aten":
            torch.ops.aten.mul_.Tensor(buf, torch.full_like(buf, 2.0))
        elif op == "foreach":
            torch._foreach_mul_([x, buf], 3.0)
        elif op == "out":
            torch.mul(x.sum(), x.sum(), out=buf[2:3, 1])   # (a view of buf written through out=)
        elif op == "relu_inplace":
            torch.nn.functional.relu(buf, inplace=True)
        else:
            torch.nn.functional.hardtanh(buf, -0.5, 0.5, True)   # (inplace given by position)
        return row + x

    b = torch.randn(8, 4)
    bufs = [b, b.clone()]
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            x = torch.randn(4)
            torch.testing.assert_close(fast(bufs[1], x.clone(), i), f(bufs[0], x.clone(), i), rtol=1e-6, atol=1e-6)
            assert torch.equal(bufs[0], bufs[1])
