"""max / min with indices and argmax / argmin on the CPU in two vectorizable passes
(argreduce.py): eager's indices (the first extreme, the first NaN), values, dtypes and
gradients, and the pass that compiles them."""
import pytest
import torch

import mlircap


def _compiled(fast) -> bool:
    return bool(fast.graphs) and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        x = torch.randn(4, 6, 33, generator=g).to(dtype)
        x[0, 0, 5] = x[0, 0, 9] = 50.0           # tie: the first index
        x[0, 1, 7] = float("nan")                # NaN: the first NaN's index
        x[0, 1, 20] = float("nan")
        x[0, 2] = float("-inf")
        x[0, 3, :4] = float("inf")
        x[1, 0] = 0.0
        x[1, 0, 3] = -0.0
        x[1, 1] = 1.5                            # a constant row
        return x
    lo, hi = (0, 200) if dtype == torch.uint8 else (-100, 100)
    x = torch.randint(lo, hi, (4, 6, 33), generator=g).to(dtype)
    x[0, 0, 5] = x[0, 0, 9] = hi                 # tie
    x[1, 1] = 7
    return x


def _same(got, want):
    if isinstance(want, tuple):
        for a, b in zip(got, want):
            _same(a, b)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


CASES = {
    "max_dim": lambda x: tuple(torch.max(x * 1, 2)),
    "min_dim_keepdim": lambda x: tuple(torch.min(x * 1, 1, keepdim=True)),
    "max_negative_dim": lambda x: tuple((x * 1).max(-1)),
    "argmax": lambda x: (x * 1).argmax(2),
    "argmin_keepdim": lambda x: (x * 1).argmin(0, keepdim=True),
    "argmax_none": lambda x: (x * 1).argmax(),
    "max_transposed": lambda x: tuple(torch.max((x * 1).transpose(1, 2), 1)),
    "max_values_only": lambda x: torch.max(x * 1, 2)[0] + 1,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.int8,
                                   torch.uint8, torch.int64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_eager(case, dtype):
    f = CASES[case]
    x = _inputs(dtype)
    fast = mlircap.compile(f)
    fast(x)
    _same(fast(x), f(x))
    assert _compiled(fast)


def test_gradient_goes_to_the_first_maximum():
    x = torch.randn(3, 5, 8)
    x[0, 0, 2] = x[0, 0, 6] = 9.0
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    f = lambda x: (torch.max(x, 2)[0] * torch.arange(5.0)).sum() + torch.min(x, 1).values.sum()  # noqa: E731
    fast = mlircap.compile(f)
    for _ in range(2):
        x1.grad = None
        fast(x1).backward()
    f(x2).backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=0, atol=0)


def test_two_pass_form_is_used():
    # the graph handed to torch-mlir computes the extreme and then the first index (amax/amin)
    from mlircap.frontend import decomposition_table

    table = decomposition_table()
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda x: torch.max(x, 1), decomposition_table=table)(
        torch.randn(4, 16))
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "aten.amax.default" in ops and "aten.amin.default" in ops and "aten.max.dim" not in ops
