"""Held-out trust sweep, batch 4 (issue 10): defects found by adversarial user-style
programs (/tmp/trust_h: losses, attention masks, scatter/sort, dtype mixes, aliasing,
module state, dynamic shapes, conv/pool/pad/interp, ...), each compared with eager over
several calls, outputs and mutated state. One regression test per defect fixed.

PYTEST_DONT_REWRITE: the assert statements of test_torch_compile_assert_... must reach
Dynamo as Python asserts (rewritten by pytest, Dynamo breaks the graph there instead)."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import mlircap


def gen(i, *shape, dtype=torch.float32, lo=-3, hi=3):
    g = torch.Generator().manual_seed(1000 + i)
    return (torch.rand(*shape, generator=g) * (hi - lo) + lo).to(dtype)


def _tol(dtype):
    return {torch.float16: dict(rtol=1e-3, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}.get(
        dtype, dict(rtol=1.3e-6, atol=1e-5))


# --------------------------------------------------------------------------- low-precision norms

NORMS = {
    "norm": lambda x: x.norm(),
    "norm_p1": lambda x: x.norm(p=1),
    "vector_norm_p3": lambda x: torch.linalg.vector_norm(x, 3),
    "norm_dim": lambda x: x.view(4, -1).norm(dim=1),
    "normalize": lambda x: F.normalize(x.view(4, -1), dim=1),
    "cosine_similarity": lambda x: F.cosine_similarity(x.view(4, -1), x.view(4, -1).flip(1)),
    "dist": lambda x: torch.dist(x, x.flip(0)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_low_precision_norms_accumulate_in_float32(name, dtype):
    """torch-mlir lowered linalg_vector_norm with its accumulator in the tensor's dtype:
    the bf16 norm of 4096 values in [0, 1] was 16.0 (eager 37.0), f16 2.5% off; the
    compiled graph now computes it in float32 and rounds once, as eager does."""
    fn = NORMS[name]
    fast = mlircap.compile(fn)
    for i in range(3):   # the first call is the recording run; the later ones run compiled
        x = gen(i, 4096, dtype=dtype, lo=0, hi=1)
        torch.testing.assert_close(fast(x), fn(x), **_tol(dtype))
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


def test_low_precision_prod_accumulates_in_float32():
    """An f16 prod of 4096 factors near 1 accumulated in f16 was 6.39 (the product is
    7.751 in float64); in float32 and rounded once it is within f16's rounding of it.
    (Eager's own vectorized f16 prod gives 7.488 there: the first call, which records
    eagerly, is not compared.)"""
    fn = lambda x: (1 + x * 1e-3).prod()   # noqa: E731
    fast = mlircap.compile(fn)
    fast(gen(9, 4096, dtype=torch.float16))
    for i in range(3):
        x = gen(i, 4096, dtype=torch.float16, lo=0, hi=1)
        exact = (1 + x * 1e-3).double().prod()
        torch.testing.assert_close(fast(x).double(), exact, rtol=1e-3, atol=0)


# --------------------------------------------------------------------------- torch.compile front

def test_torch_compile_item_outputs_do_not_break_the_backend():
    """Dynamo's TensorifyScalarRestartAnalysis (trace again with the float specialized)
    raised inside the backend was caught as a failure of the graph; formatting its empty
    message raised IndexError out of the user's call. It is Dynamo's to handle now."""
    def f(x):
        return x.sum().item(), x.max().item() > 0, x.argmax().item()

    fast = torch.compile(f, backend="mlircap")
    for i in range(3):
        x = gen(i, 5)
        got, want = fast(x), f(x)
        assert got[1:] == want[1:]
        assert got[0] == pytest.approx(want[0], rel=1e-5, abs=1e-6)


# --------------------------------------------------------------------------- autograd leaves made inside

def test_factory_with_requires_grad_then_backward_inside_the_function():
    """`w = torch.ones(4, requires_grad=True)` made in the function and `.backward()`
    on a result of it: the replay's graph made w without the flag and the second call
    raised 'element 0 of tensors does not require grad'. The leaf is now made between
    graphs, as for w.requires_grad_()."""
    def f(x):
        w = torch.ones(4, requires_grad=True)
        b = torch.zeros_like(x, requires_grad=True)
        v = torch.tensor([1.0, -2.0, 3.0, 0.5], requires_grad=True)
        y = (x * w * v + b).sum()
        y.backward()
        return w.grad, b.grad, v.grad, y.detach(), w.is_leaf, w.requires_grad

    fast = mlircap.compile(f)
    for i in range(3):
        x = gen(i, 4)
        got, want = fast(x), f(x)
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor):
                torch.testing.assert_close(g, w)
            else:
                assert g == w
    assert len(fast.graphs) >= 1


# --------------------------------------------------------------------------- integer clamp bounds

@pytest.mark.parametrize("front", ["mlircap", "torch.compile"])
@pytest.mark.parametrize("bound", [-50, -1, -200, 30])
@pytest.mark.parametrize("op", ["clamp", "clamp_min", "clamp_max", "clamp_min_fn"])
def test_uint8_clamp_bounds_wrap_like_eager(op, bound, front):
    """Eager converts a clamp bound to the tensor's dtype before clamping (uint8
    clamp_min(-50) is max(x, 206): every element 206; clamp_max(-50) leaves x as it is).
    The compiled graph, computing uint8 in int32, kept -50 and returned x unchanged
    (clamp_min) or 206 everywhere (clamp_max)."""
    fn = {"clamp": lambda x: x.clamp(bound, 50), "clamp_min": lambda x: x.clamp(min=bound),
          "clamp_max": lambda x: x.clamp(max=bound), "clamp_min_fn": lambda x: torch.clamp_min(x, bound)}[op]
    fast = mlircap.compile(fn) if front == "mlircap" else torch.compile(fn, backend="mlircap")
    for i in range(3):
        x = torch.tensor([0, 10, 49, 50, 51, 100, 127, 25, 3, 7, 200, 255], dtype=torch.uint8) + i
        got, want = fast(x), fn(x)
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_int8_clamp_in_range_bounds_unchanged():
    fn = lambda x: (x.clamp(-100, 100), x.clamp(min=-3), x.clamp_max(5))   # noqa: E731
    fast = mlircap.compile(fn)
    for i in range(3):
        x = torch.arange(-128, 128, 7, dtype=torch.int8) + i
        for g, w in zip(fast(x), fn(x)):
            assert g.dtype == w.dtype and torch.equal(g, w)


# --------------------------------------------------------------------------- torch.compile asserts

def test_torch_compile_assert_on_tensor_values_raises():
    """Dynamo turns `assert (x < 3).all(), msg` into aten._assert_async(cond, msg); the
    compiled graph dropped it and returned a result where eager raises. Its condition is
    now an error flag of the compiled graph: a failed assert reruns the graph eagerly,
    where the assert raises AssertionError as eager's (aot_eager raises RuntimeError)."""
    def f(x, y):
        assert (x < 3).all(), "too big"
        assert x.sum(), "zero sum"
        return x.exp() + y.sum()

    fast = torch.compile(f, backend="mlircap")
    y = torch.arange(3.0)
    for x in (torch.ones(3), torch.full((3,), 0.5)):
        torch.testing.assert_close(fast(x, y), f(x, y))
    with pytest.raises(AssertionError, match="too big"):
        fast(torch.full((3,), 5.0), y)
    with pytest.raises(AssertionError, match="zero sum"):
        fast(torch.zeros(3), y)
    torch.testing.assert_close(fast(torch.ones(3) * 2, y), f(torch.ones(3) * 2, y))


# --------------------------------------------------------------------------- symbolic shapes

def test_torch_compile_dynamic_training_graph_with_islands_runs_eagerly():
    """A training graph with symbolic shapes (torch.compile's automatic dynamic, here
    dynamic=True) and an eager island (dropout) was split into parts; the SymInt the
    backward reads (b * 6) had no part producing it and the backend raised RuntimeError
    'graph output mul_.. is produced by no part' out of the user's call (met in a training
    loop: one nn.Sequential after another made Sequential.forward dynamic). Such a graph
    now runs eagerly whole, with the usual warning."""
    def f(x, w):
        b = x.shape[0]
        h = (x.reshape(b * 6, 16) @ w).view(b, 6, -1)
        return F.dropout(h.softmax(-1), 0.1, training=True).reshape(b * 6, -1).sum(0)

    fast = torch.compile(f, backend="mlircap", dynamic=True)
    for b in (2, 3):
        x = torch.randn(b, 6, 16, requires_grad=True)
        w = torch.randn(16, 8, requires_grad=True)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fast(x, w)
        out.sum().backward()
        gx, gw = x.grad.clone(), w.grad.clone()
        x.grad = w.grad = None
        torch.manual_seed(0)
        ref = f(x, w)
        ref.sum().backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(gx, x.grad)
        torch.testing.assert_close(gw, w.grad)
