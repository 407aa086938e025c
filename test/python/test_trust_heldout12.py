"""Held-out trust sweep, batch 12 (issue 10): regressions found by bench/modules10.py (training steps
inside the compiled function, parametrizations, torch.func, hooks and attributes changed between
calls, integer / bitwise / float64 / complex programs, torch.linalg, torch.distributions, sorting,
guards). Each test compares mlircap.compile with eager.

PYTEST_DONT_REWRITE"""

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from compiled_check import check_compiled


def _same_state(a, b):
    for (k, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(q, p, msg=lambda m: f"{k}: {m}")
    for (k, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert (p.grad is None) == (q.grad is None), k
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, msg=lambda m: f"{k}.grad: {m}")


class _GradAccum(nn.Module):
    """Gradient accumulation over micro-batches: each micro-batch's loss backpropagated, then
    summed into a running total through `.detach()` (or `.data`, or under no_grad)."""

    def __init__(self, how="detach", k=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        self.how, self.k = how, k

    def forward(self, x, y):
        total = 0.0
        for xb, yb in zip(x.chunk(self.k), y.chunk(self.k)):
            loss = F.mse_loss(self.net(xb), yb) / self.k
            loss.backward()
            if self.how == "plain":   # the running total keeps each loss's graph (eager frees none it needs)
                total = total + loss
            elif self.how == "iadd":   # from the second loss on, an in-place add_ on the total
                total += loss
            elif self.how == "detach":
                total = total + loss.detach()
            elif self.how == "data":
                total = total + loss.data * 2
            else:
                with torch.no_grad():
                    total = total + loss
        self.opt.step()
        self.opt.zero_grad()
        return total


def _check_accum(how):
    torch.manual_seed(0)
    ref = _GradAccum(how)
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    for i in range(4):
        torch.manual_seed(i)
        x, y = torch.randn(9, 4), torch.randn(9, 1)
        want = ref(x, y)
        got = fast(x, y)
        torch.testing.assert_close(got, want)
        assert got.requires_grad == want.requires_grad
        _same_state(ref, mine)


def test_grad_accumulation_loss_detached_after_backward():
    """A loss read through .detach() after its backward, in the next graph: aot_autograd's
    Function took it as an input with a gradient edge into the earlier graph, whose saved
    tensors the backward had freed ('backward through the graph a second time' on the replay)."""
    _check_accum("detach")


def test_grad_accumulation_loss_data_after_backward():
    _check_accum("data")


def test_grad_accumulation_loss_under_no_grad_after_backward():
    _check_accum("no_grad")


def test_grad_accumulation_total_keeps_losses_with_their_graphs():
    """`total = total + loss` after each micro-batch's backward (no detach): the next graph
    computes the next loss and the total; as one aot_autograd node, the next backward walked
    through the total's edge into the earlier graph whose saved tensors were freed."""
    _check_accum("plain")


def test_grad_accumulation_total_added_in_place():
    """`total += loss` (add_ on the running total from the second micro-batch on): the graph's
    groups split around the in-place write, which belongs to the total's group alone."""
    _check_accum("iadd")


class _RetainedTotal(nn.Module):
    """Losses backpropagated with retain_graph=True and summed into a total that the caller
    backpropagates again at the end: both gradient paths against eager's."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)

    def forward(self, x):
        total = 0.0
        for xb in x.chunk(3):
            loss = self.net(xb).pow(2).mean()
            loss.backward(retain_graph=True)
            total = total + loss * 0.5
        return total


def test_accumulated_total_backpropagated_after_the_loop():
    torch.manual_seed(0)
    ref = _RetainedTotal()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    for i in range(3):
        torch.manual_seed(i)
        x = torch.randn(6, 3)
        want, got = ref(x), fast(x)
        torch.testing.assert_close(got, want)
        want.backward()
        got.backward()
        _same_state(ref, mine)


def test_input_read_by_detach_and_differentiably_keeps_its_gradient():
    """An input used both through .detach() and differentiably still gets its gradient."""
    def f(a, w):
        return a * w + a.detach() ** 2

    fast = mlircap.compile(f)
    for i in range(3):
        torch.manual_seed(i)
        w0 = torch.randn(5, requires_grad=True)
        a_e = (w0 * 3).sum()
        a_c = (w0 * 3).sum()
        w = torch.randn(5, requires_grad=True)
        want = f(a_e, w)
        got = fast(a_c, w)
        torch.testing.assert_close(got, want)
        g_e = torch.autograd.grad(want.sum(), [w0, w])
        g_c = torch.autograd.grad(got.sum(), [w0, w])
        for a, b in zip(g_c, g_e):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
@pytest.mark.parametrize("exp", [0, 1, 2, 3, 13])
def test_integer_tensor_to_python_int_power_compiles(dtype, exp, fallback_log):
    """`ids ** 2` / torch.pow(a, 3) of integer tensors: torch-mlir lowered aten.pow.Tensor_Scalar
    with a float compare on the integers (rejected), so it ran through torch as an eager island
    (bench/modules10.py int_pow_and_clamp_float_bounds_promotion). Exact, wrapping as eager's."""
    lo = 0 if dtype == torch.uint8 else -100
    a = torch.randint(lo, 100, (64,), generator=torch.Generator().manual_seed(exp)).to(dtype)
    check_compiled(lambda x: (x ** exp, torch.pow(x, exp) + 1), [a], fallback_log)


def test_integer_negative_power_still_raises():
    fast = mlircap.compile(lambda x: x ** -1)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="negative integer powers"):
            fast(torch.tensor([1, 2]))


_CLAMPS = {
    "min_max": lambda a: torch.clamp(a, min=-1.5, max=2.5),
    "min": lambda a: a.clamp(min=0.5),
    "max": lambda a: a.clamp(max=3.25),
    "clamp_min": lambda a: torch.clamp_min(a, 1.5),
    "clamp_max": lambda a: torch.clamp_max(a, -0.5),
    "int_and_float": lambda a: a.clamp(-2, 2.5),
    "min_above_max": lambda a: a.clamp(min=2.0, max=1.0),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool])
@pytest.mark.parametrize("kind", sorted(_CLAMPS))
def test_integer_clamp_with_float_bounds_compiles(dtype, kind, fallback_log):
    """clamp of an integer (or bool) tensor with a Python float bound is float32 in eager; torch-mlir
    compared the integers with arith.cmpf and rejected it (bench/modules10.py
    int_pow_and_clamp_float_bounds_promotion: the graph ran eagerly / the op through torch)."""
    g = torch.Generator().manual_seed(len(kind))
    a = (torch.randint(0, 2, (16,), generator=g) if dtype == torch.bool else
         torch.randint(-5, 6, (16,), generator=g)).to(dtype)
    check_compiled(_CLAMPS[kind], [a], fallback_log)


def _no_backend_failure(fn, args, ctx):
    """fn compiled, called 3 times under `ctx` against eager, no 'backend failed' warning."""
    fast = mlircap.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with ctx():
                got, want = fast(*args), fn(*args)
            torch.testing.assert_close(got, want)
    failed = [str(w.message) for w in caught if "backend failed" in str(w.message)]
    assert not failed, failed[0][:300]
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


_W = torch.randn(4, 3, dtype=torch.cfloat, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode])
def test_complex_matmul_under_no_grad_compiles(ctx):
    """A complex matmul (kept whole: torch-mlir cannot lower it) under no_grad: functionalization
    decomposed matmul through its Python kernel, which kept it whole and met itself again,
    recursing until RecursionError; the graph ran uncompiled (bench/modules10.py --inference
    complex_weight_linear_modrelu, stft_istft_roundtrip_hann)."""
    x = torch.randn(5, 4, dtype=torch.cfloat, generator=torch.Generator().manual_seed(1))
    _no_backend_failure(lambda a: torch.view_as_real(a @ _W).relu(), [x], ctx)


def test_data_error_on_a_graphs_first_replay_keeps_it_compiled():
    """Integer division by a zero on the first replay: eager raises, the compiled graph raised
    the same error, and _FirstRunChecked took that for a backend failure and ran the graph
    uncompiled for good (bench/modules10.py int_division_by_zero_raises_like_eager: fallback)."""
    def f(a, b):
        return a // b, a % b

    fast = mlircap.compile(f)
    a = torch.tensor([7, -9, 4, 5])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, b in enumerate([torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, 4]), torch.tensor([2, -2, 3, 1])]):
            if i == 1:
                with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                    f(a, b)
                with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                    fast(a, b)
            else:
                for g, w in zip(fast(a, b), f(a, b)):
                    assert torch.equal(g, w)
    assert not [w for w in caught if "failed on its first run" in str(w.message)]
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
