"""Graphs with data-dependent output shapes (python/mlircap/ddsplit.py): the op runs
through torch, the graph around it stays compiled, results match eager."""
import pytest
import torch

import mlircap
from mlircap import ddsplit, logs


def _close(a, b):
    for p, q in zip(a, b):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-5)


def _compiled(fast):
    assert fast.graphs
    return [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]


def test_mask_in_the_middle_keeps_both_sides_compiled(capfd):
    def f(x, w):
        y = torch.tanh(x @ w) + 1          # before the mask: compiled
        z = y[y > 1.2]                      # data-dependent shape: through torch
        return (z * 2).sum(), z.exp()       # after: compiled per shape of z

    fast = mlircap.compile(f)
    w = torch.randn(8, 8)
    logs.set_logs("fallback")
    try:
        for i in range(4):
            # (a mask past bounded.py's 1024 elements: smaller ones are computed compiled)
            x = torch.randn(160 + i % 2, 8)
            _close(f(x, w), fast(x, w))
    finally:
        logs.set_logs()
    err = capfd.readouterr().err
    assert "eager islands: __getitem__: data-dependent" in err
    assert "backend failed" not in err
    # the part before the mask and the part after it (one per shape of z) compiled
    assert len(_compiled(fast)) >= 3, [g.fallback_reason for g in fast.graphs]


def test_unique_sizes_vary_and_variants_are_capped(monkeypatch):
    monkeypatch.setattr(ddsplit, "MAX_VARIANTS", 2)

    def f(x):
        u = torch.unique(x * 1)
        return u * 3 + 1

    fast = mlircap.compile(f)
    for n in (3, 5, 7, 9, 5):   # five calls, four sizes of u: the 3rd and 4th run eagerly
        x = torch.randint(0, n, (40,))
        x[:n] = torch.arange(n)
        torch.testing.assert_close(fast(x), f(x), rtol=0, atol=0)
    sizes = {tuple(g.gm.graph.find_nodes(op="placeholder")[0].meta.get("val", torch.empty(0)).shape)
             for g in _compiled(fast)}
    assert len(_compiled(fast)) <= 2 + 1, sizes


def test_in_place_update_before_the_op_is_kept():
    def f(x):
        x.mul_(2)
        y = torch.nonzero(x > 1)
        return y + 1, x.sum()

    fast = mlircap.compile(f)
    for _ in range(3):
        a = torch.randn(5, 4)
        b = a.clone()
        ref = f(a)
        out = fast(b)
        assert torch.equal(a, b)
        torch.testing.assert_close(out[0], ref[0], rtol=0, atol=0)
        torch.testing.assert_close(out[1], ref[1])


def test_gradients_flow_through_the_split():
    def f(x):
        y = torch.sigmoid(x) * 3
        z = y[y > 1.5]
        return (z * z).sum()

    fast = mlircap.compile(f)
    for _ in range(3):
        x = torch.randn(16, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        f(x).backward()
        fast(x2).backward()
        torch.testing.assert_close(x2.grad, x.grad)


def test_two_data_dependent_ops_split_twice():
    def f(x):
        a = x[x > 0] + 1
        b = torch.unique(a.floor())
        return b * 2, a.mean()

    fast = mlircap.compile(f)
    for _ in range(3):
        x = torch.randn(50) * 3
        _close(f(x), fast(x))


def test_strict_still_raises():
    def f(x):
        return x[x > 0] * 2

    fast = mlircap.compile(f, strict=True)
    with pytest.raises(mlircap.MlircapCompileError, match="data"):
        fast(torch.randn(2048))   # (past bounded.py's 1024 mask elements)


def test_first_data_dependent_node():
    import torch.fx as fx

    def f(x):
        y = x + 1
        z = torch.masked_select(y, y > 0)
        return z.sum()

    gm = fx.symbolic_trace(f)
    node = ddsplit.first_data_dependent(gm, [torch.randn(4)])
    assert node is not None and node.target is torch.masked_select
    gm2 = fx.symbolic_trace(lambda x: (x + 1).sum())
    assert ddsplit.first_data_dependent(gm2, [torch.randn(4)]) is None


@torch.library.custom_op("mlircap_test::picky_scale", mutates_args=())
def _picky_scale(x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return x * offs.sum()


@_picky_scale.register_fake
def _(x, offs):
    # a meta kernel stricter than the real one (torch 2.11's _grouped_mm rejects
    # int64 offsets that its CUDA kernel takes: the MoE model fell back whole)
    if offs.dtype != torch.int32:
        raise RuntimeError("Offsets tensor must be integer (int32) tensor")
    return torch.empty_like(x)


def test_op_fake_tensors_cannot_run_is_split_off_and_the_rest_compiled():
    def f(x, offs):
        y = torch.tanh(x) + 1
        z = torch.ops.mlircap_test.picky_scale(y, offs)
        return torch.relu(z) * 2

    x, offs = torch.randn(4, 8), torch.tensor([1, 2], dtype=torch.int64)
    fast = mlircap.compile(f)
    with pytest.warns(UserWarning, match=r"picky_scale at .*test_ddsplit.py:\d+ runs through torch.*int32"):
        out = fast(x, offs)
    _close(f(x, offs), out)
    _close(f(x * 2, offs), fast(x * 2, offs))
    compiled = [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]
    assert len(compiled) == 2, [g.fallback_reason for g in fast.graphs]   # tanh + 1, and relu * 2
    with pytest.raises(mlircap.MlircapCompileError, match="int32"):
        mlircap.compile(f, strict=True)(x, offs)
