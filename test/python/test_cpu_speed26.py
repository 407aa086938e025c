"""Host time of compiled CPU calls (session 26): behaviour checks of the per-call work a
compiled training step or inference call does, never timings."""
import warnings

import pytest
import torch
import torch.nn as nn

import mlircap


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_lean_backward_compares_no_tensor(monkeypatch):
    """The lean backward (lean_autograd) looks for missing gradients by identity: `None in
    grads` compared each gradient with None through Tensor.__eq__, whose argument parsing
    raises and catches a TypeError (30-60 us a tensor on this host, a quarter of a small MLP's
    training step). A training step's backward compares no tensor; gradients stay eager's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    compared = []
    eq = torch.Tensor.__eq__

    def counting_eq(self, other):
        compared.append(type(other).__name__)
        return eq(self, other)

    for i in range(4):
        m.zero_grad()
        out = fast(x)
        loss = out.pow(2).mean()
        if i >= 2:   # (compiled, the lean Function in place)
            monkeypatch.setattr(torch.Tensor, "__eq__", counting_eq)
        loss.backward()
        monkeypatch.undo()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).pow(2).mean().backward()
        for a, b in zip(got, (p.grad for p in m.parameters())):
            _close(a, b)
    assert compared == []


_FLASH_BW = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def _flash_case(B=2, H=3, T=20, D=8):
    """Eager's operands of the CPU flash attention backward: q, k, v and the output's gradient
    as permuted views of packed projections (unit last stride), the forward's out and lse."""
    torch.manual_seed(3)
    qkv = torch.randn(B, T, 3, H, D)
    q, k, v = [qkv[:, :, i].transpose(1, 2) for i in range(3)]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    go = torch.randn(B, T, H, D).transpose(1, 2)
    return [go, q, k, v, out, lse]


def test_flash_backward_island_takes_unit_stride_operands_as_they_are():
    """The CPU flash attention backward as an eager island: grad_out, q, k, v and out are read
    as they come where their last stride is 1 (no copy to eager's permuted layout), with
    eager's values bit for bit; an operand whose last stride is not 1 (which the kernel reads
    wrongly) still gets eager's layout."""
    from mlircap.backend import _EagerIsland, _unit_last_stride

    g = torch.fx.Graph()
    ins = [g.placeholder(n) for n in ("go", "q", "k", "v", "out", "lse")]
    alias = g.call_function(torch.ops.aten.alias.default, (ins[4],))
    bw = g.call_function(_FLASH_BW, (ins[0], ins[1], ins[2], ins[3], alias, ins[5], 0.0, False))
    g.output(tuple(g.call_function(__import__("operator").getitem, (bw, i)) for i in range(3)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    examples = _flash_case()
    inside = set(g.nodes)
    unit = [_unit_last_stride(n, inside) for n in ins]
    assert unit == [True, True, True, True, True, False]
    island = _EagerIsland(gm, {"flash": "library"}, examples, unit)
    want = _FLASH_BW(*examples, 0.0, False)
    contiguous = [t.contiguous() for t in examples]
    got = island(*contiguous)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # last stride not 1: restrided to eager's layout, not read as it is
    odd = [t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() == 4 else t for t in examples]
    assert odd[1].stride(-1) != 1
    got = island(*odd)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_unit_stride_needs_dropout_off_and_only_those_operands():
    """An input also read elsewhere in the island, or by the backward with dropout on, keeps
    eager's layout."""
    from mlircap.backend import _unit_last_stride

    g = torch.fx.Graph()
    ins = [g.placeholder(n) for n in ("go", "q", "k", "v", "out", "lse")]
    bw = g.call_function(_FLASH_BW, (*ins, 0.0, False))
    also = g.call_function(torch.ops.aten.mul.Tensor, (ins[1], 2.0))
    bw2 = g.call_function(_FLASH_BW, (*ins[:3], ins[3], ins[4], ins[5], 0.1, False))
    g.output((bw, also, bw2))
    inside = set(g.nodes)
    assert [_unit_last_stride(n, inside) for n in ins] == [False] * 6
    inside.discard(bw2)
    assert [_unit_last_stride(n, inside) for n in ins] == [True, False, True, True, True, False]


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)

    def forward(self, x):
        return self.layer(x)


def test_encoder_layer_step_restrides_no_attention_operand(fallback_log):
    """A TransformerEncoderLayer training step: the attention backward island gets none of its
    q / k / v / out / grad_out operands restrided (the log names none given eager's layout);
    every gradient as eager's."""
    torch.manual_seed(4)
    m = _Block()
    x = torch.randn(3, 10, 32)
    fast = mlircap.compile(m)
    params = list(m.parameters())
    for _ in range(3):
        res = []
        for fn in (m, fast):
            for p in params:
                p.grad = None
            fn(x).pow(2).mean().backward()
            res.append([p.grad.clone() for p in params])
        for a, b in zip(*res):
            _close(a, b)
    err = fallback_log.readouterr().err
    assert "_scaled_dot_product_flash_attention_for_cpu_backward" in err, err
    assert "0 of 6 inputs given eager's layout" in err, err


def _forward_graphs(registry_owner):
    import gc

    from mlircap.backend import CompiledGraph

    return [o for o in gc.get_objects() if isinstance(o, CompiledGraph) and
            o.gm.meta.get("mlircap_num_fwd_outputs") is not None and
            any(n.op == "placeholder" and n.name == registry_owner for n in o.gm.graph.nodes)]


class _ReluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(7, 13), nn.Linear(13, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_saved_only_aliases_are_not_remade_as_views():
    """A training forward saves a ReLU's output and aot_autograd's alias of it for the
    backward: two outputs only the backward reads, whose sharing memory nothing observes. They
    come back as the plan computes them (no as_strided per call, no detach when saved:
    backend._user_visible_views); gradients as eager's."""
    torch.manual_seed(5)
    m = _ReluMLP()
    fast = mlircap.compile(m)
    x = torch.randn(4, 7)
    params = list(m.parameters())
    for _ in range(3):
        res = []
        for fn in (m, fast):
            for p in params:
                p.grad = None
            fn(x).pow(2).mean().backward()
            res.append([p.grad.clone() for p in params])
        for a, b in zip(*res):
            _close(a, b)
    fws = [g for g in _forward_graphs("primals_1") if "relu" in g.gm.code and "alias" in g.gm.code]
    assert fws, "no compiled training forward with a saved ReLU"
    for g in fws:
        n = g.gm.meta["mlircap_num_fwd_outputs"]
        assert all(j < n or k < n for j, k, *_ in g._views), g._views
        assert not any(j >= n and k >= n for j, k, *_ in g._views)
    from mlircap.backend import _user_visible_views

    views = ((3, 2, (1, 4), (4, 1), 0, (4, 1)), (1, 0, (4,), (1,), 0, (4,)), (2, 0, (4,), (1,), 0, (4,)))
    assert _user_visible_views(views, 2) == views[1:]
    assert _user_visible_views(views, None) == views


def test_user_output_modified_in_place_still_raises_as_eager():
    """A ReLU output returned to the user and saved for the backward, modified in place before
    backward: eager's backward raises (the saved value changed); so does the compiled one."""
    def f(x, w):
        return torch.relu(x @ w)

    fast = mlircap.compile(f)
    for _ in range(3):
        for fn in (f, fast):
            x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
            out = fn(x, w)
            out.add_(1)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                out.sum().backward()
