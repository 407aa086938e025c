"""Training steps through mlircap.compile without the per-call autograd Function around each
compiled graph (capture/higher_order._HigherOrderGrad): the compiled graph's own aot_autograd
node carries the call's inputs, and only a backward with create_graph=True recomputes through
the captured FX graph. Every gradient (first order, create_graph, second order, retain_graph)
is compared with eager's."""
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


def _node_names(out):
    return type(out.grad_fn).__name__


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_plain_step_runs_without_the_wrapper():
    """A plain training step's compiled call: its output's node is the compiled graph's
    (no _RecomputeForHigherOrder Function around it); gradients equal eager's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
    fast = mlircap.compile(m)
    x = torch.randn(5, 6)
    for i in range(4):
        m.zero_grad()
        out = fast(x)
        if i > 0:
            assert "RecomputeForHigherOrder" not in _node_names(out), _node_names(out)
        out.square().mean().backward()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).square().mean().backward()
        for a, b in zip(got, (p.grad for p in m.parameters())):
            _close(a, b)


def _hvp_like(fn, x, w):
    """create_graph gradients, then a gradient of a function of them (a gradient penalty)."""
    gx, gw = torch.autograd.grad(fn(x, w), (x, w), create_graph=True)
    hx, hw = torch.autograd.grad((gx * gx).sum() + gw.sin().sum(), (x, w))
    return gx.detach(), gw.detach(), hx, hw


def test_create_graph_and_second_order_match_eager():
    def g(x, w):
        return (torch.tanh(x @ w) * x.sum(-1, keepdim=True)).pow(2).sum()
    c = mlircap.compile(g)
    torch.manual_seed(1)
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    for _ in range(4):
        for a, b in zip(_hvp_like(c, x, w), _hvp_like(g, x, w)):
            _close(a, b)
        # a plain backward between them stays the compiled one, with eager's values
        x.grad = w.grad = None
        c(x, w).backward()
        got = (x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        g(x, w).backward()
        _close(got[0], x.grad)
        _close(got[1], w.grad)


def test_gradient_penalty_through_a_module():
    """WGAN-GP style: the critic's gradient w.r.t. its input, create_graph=True, then a
    penalty on its norm backpropagated into the critic's parameters."""
    torch.manual_seed(2)
    critic = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    fast = mlircap.compile(critic)
    real = torch.randn(6, 8)

    def penalty(fn):
        critic.zero_grad()
        xi = real.clone().requires_grad_()
        (gi,) = torch.autograd.grad(fn(xi).sum(), xi, create_graph=True)
        loss = ((gi.norm(2, dim=1) - 1) ** 2).mean() + fn(real).mean()
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in critic.parameters()]

    for _ in range(4):
        for a, b in zip(penalty(fast), penalty(critic)):
            _close(a, b)


def test_retain_graph_then_create_graph_on_the_same_output():
    def g(x, w):
        return (x * w).exp().sum()
    c = mlircap.compile(g)
    x = torch.randn(5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    for _ in range(3):
        res = []
        for fn in (g, c):
            y = fn(x, w)
            (g1,) = torch.autograd.grad(y, w, retain_graph=True)          # plain, graph kept
            (g2,) = torch.autograd.grad(y, x, create_graph=True)          # differentiable
            (h,) = torch.autograd.grad(g2.sum(), w)
            res.append((g1, g2.detach(), h))
        for a, b in zip(*res):
            _close(a, b)


def test_inputs_computed_from_each_other():
    """The graph after a break takes a value and a weight it came from: every path's
    gradient counted once, also under create_graph."""
    def g(x, w):
        h = torch.tanh(x * w)
        print("", end="")   # a graph break: the second graph takes h and w
        return (h * w).sum() + h.pow(3).sum()
    c = mlircap.compile(g)
    x = torch.randn(4)
    w = torch.randn(4, requires_grad=True)
    for _ in range(4):
        res = []
        for fn in (g, c):
            (gw,) = torch.autograd.grad(fn(x, w), w, create_graph=True)
            (hw,) = torch.autograd.grad(gw.pow(2).sum(), w)
            w.grad = None
            fn(x, w).backward()
            res.append((gw.detach(), hw, w.grad.clone()))
        for a, b in zip(*res):
            _close(a, b)


def test_input_changed_in_place_before_a_create_graph_backward_raises():
    """The recompute reads the call's inputs: one changed in place after the call makes the
    create_graph backward raise (as the saved inputs of the Function did), never a gradient
    of other values."""
    def g(x, w):
        return (x * w).sin().sum()
    c = mlircap.compile(g)
    x = torch.randn(5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    for _ in range(2):
        torch.autograd.grad(c(x, w), x, create_graph=True)
    y = c(x, w)
    with torch.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(y, x, create_graph=True)


def test_multiple_outputs_some_without_grad():
    def g(x, w):
        y = x @ w
        return y.relu(), y.argmax(-1), (y * y).sum()
    c = mlircap.compile(g)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    for _ in range(4):
        res = []
        for fn in (g, c):
            a, idx, s = fn(x, w)
            (gw,) = torch.autograd.grad(a.sum() + s, w, create_graph=True)
            (hx,) = torch.autograd.grad(gw.pow(2).sum(), x)
            x.grad = w.grad = None
            a2, _, s2 = fn(x, w)
            (a2.pow(2).sum() + s2).backward()
            res.append((idx, gw.detach(), hx, x.grad.clone(), w.grad.clone()))
        assert torch.equal(res[0][0], res[1][0])
        for a, b in zip(res[0][1:], res[1][1:]):
            _close(a, b)


def test_node_class_is_checked_once():
    """The aot_autograd Function class of a compiled graph is checked once and marked fit for
    the direct call; its backward is the create_graph-aware one."""
    def g(x, w):
        return (x * w).cos().sum()
    c = mlircap.compile(g)
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    for _ in range(3):
        c(x, w).backward()
    y = c(x, w)
    cls = y.grad_fn._forward_cls
    assert cls.__dict__.get("_mlircap_direct_ok") is True
    assert "_mlircap_orig_backward" in cls.__dict__


def _views_and_repeated_input_grads_match_eager():
    """g(x, w) then g(x, x), whose outputs view one intermediate: first- and second-order
    gradients and x.grad / w.grad of the compiled calls as eager's."""
    def g(x, w):
        y = torch.sigmoid(x * w)
        return y.view(-1), y.t(), (y * w).sum()
    c = mlircap.compile(g)
    x = torch.randn(3, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    for args in [(x, w)] * 3 + [(x, x)] * 3:
        res = []
        for fn in (g, c):
            a, b, s = fn(*args)
            (gx,) = torch.autograd.grad(a.sum() + b.pow(2).sum() + s, x, create_graph=True)
            (hx,) = torch.autograd.grad(gx.pow(2).sum(), x)
            x.grad = w.grad = None
            a, b, s = fn(*args)
            (a.sum() + b[0].sum() + s).backward()
            res.append((gx.detach(), hx, x.grad.clone(), None if w.grad is None else w.grad.clone()))
        for p, q in zip(*res):
            if p is None or q is None:
                assert p is None and q is None
            else:
                _close(p, q)


def test_outputs_viewing_one_intermediate_and_a_repeated_input():
    """Outputs that are views of one intermediate (aot_autograd returns their base as an
    extra output and regenerates the views) and an input passed twice: where the node does
    not map one to one, the call runs under the Function; gradients as eager's."""
    _views_and_repeated_input_grads_match_eager()


# ------------------------------------------------ saved views of inputs (mlircap/saved_views.py)
def _aot_graphs(fn, *args):
    """aot_autograd's forward and backward graphs of `fn` with mlircap's partition."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_function

    from mlircap.saved_views import partition

    graphs = []

    def keep(gm, ex):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    out = aot_function(fn, fw_compiler=keep, bw_compiler=keep, partition_fn=partition)(*args)
    return out, graphs


def _saved_permutes_of_inputs(fw):
    """Forward outputs that are view ops of (views of) the forward's inputs."""
    from mlircap.saved_views import VIEW_OPS

    phs = set(fw.graph.find_nodes(op="placeholder"))
    outs = next(iter(fw.graph.find_nodes(op="output"))).args[0]
    found = []
    for o in outs:
        n = o
        while isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in VIEW_OPS:
            n = n.args[0]
        if n is not o and n in phs:
            found.append(o)
    return found


def test_linear_saves_its_weight_not_a_transpose():
    """The forward of x @ w.t() returns w itself for the backward (torch's partition
    returns permute(w), which a compiled forward writes as a transposed copy)."""
    torch.manual_seed(3)
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(16, 8, requires_grad=True)
    b = torch.randn(16, requires_grad=True)
    fn = lambda x, w, b: torch.nn.functional.linear(x, w, b).tanh()  # noqa: E731
    out, graphs = _aot_graphs(fn, x, w, b)
    assert not _saved_permutes_of_inputs(graphs[0]), graphs[0].code
    g = torch.randn_like(out)
    out.backward(g)
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    fn(x, w, b).backward(g)
    for a, t in zip(got, (x, w, b)):
        _close(a, t.grad)


def test_views_of_inputs_chained_and_expanded():
    """Chains of views (transpose, unsqueeze, expand, view) of inputs saved as the inputs:
    gradients as eager's."""
    def fn(x, w, s):
        wt = w.t().unsqueeze(0).expand(3, -1, -1)          # [3, 8, 16]
        h = torch.bmm(x, wt)                                # [3, 5, 16]
        return (h * s.view(1, 1, 16)).sin().sum(-1)
    torch.manual_seed(4)
    args = [torch.randn(3, 5, 8, requires_grad=True), torch.randn(16, 8, requires_grad=True),
            torch.randn(16, requires_grad=True)]
    out, graphs = _aot_graphs(fn, *args)
    assert not _saved_permutes_of_inputs(graphs[0]), graphs[0].code
    g = torch.randn_like(out)
    out.backward(g)
    got = [t.grad.clone() for t in args]
    for t in args:
        t.grad = None
    fn(*args).backward(g)
    for a, t in zip(got, args):
        _close(a, t.grad)


def test_compiled_mlp_grads_and_weight_changed_before_backward():
    """mlircap.compile of Linear layers: gradients as eager's over several steps; a weight
    changed in place between the forward and the backward raises as eager does (the
    weight itself is saved, as eager saves it)."""
    torch.manual_seed(5)
    m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4))
    fast = mlircap.compile(m)
    x = torch.randn(6, 8)
    for _ in range(3):
        m.zero_grad()
        fast(x).pow(2).mean().backward()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).pow(2).mean().backward()
        for a, p in zip(got, m.parameters()):
            _close(a, p.grad)
    errors = []
    for fn in (m, fast):
        loss = fn(x).pow(2).mean()
        with torch.no_grad():
            m[2].weight.mul_(1.0)
        try:
            loss.backward()
            errors.append(None)
        except RuntimeError as e:
            errors.append(type(e))
    assert errors == [RuntimeError, RuntimeError], errors


def test_weight_changed_in_the_function_after_its_use():
    """A weight scaled in place (under no_grad) after the product that saved it: the
    backward raises as eager's does, each call; without the change gradients equal eager's."""
    def scaled(x, w):
        y = (x @ w.t()).tanh().sum() + (w * w).sum()
        with torch.no_grad():
            w.mul_(0.5)
        return y

    def plain(x, w):
        return (x @ w.t()).tanh().sum() + (w * w).sum()

    for fn in (scaled, plain):
        c = mlircap.compile(fn)
        for seed in range(3):
            res = []
            for f in (fn, c):
                torch.manual_seed(seed)
                x = torch.randn(3, 4, requires_grad=True)
                w = torch.randn(5, 4, requires_grad=True)
                y = f(x, w)
                try:
                    y.backward()
                    res.append((y.detach(), x.grad, w.grad, w.detach().clone()))
                except RuntimeError as e:
                    assert "modified by an inplace operation" in str(e)
                    res.append(None)
            if res[0] is None or res[1] is None:
                assert res[0] is None and res[1] is None and fn is scaled
            else:
                for a, b in zip(*res):
                    _close(a, b)


def test_view_of_a_plain_input_made_without_switching_inference_mode(monkeypatch):
    """A plan's view of an input that is no Parameter is made for the call only: no
    inference_mode(False) block around it (about 2 µs a view, ~10 views per training step
    of a small transformer); a Parameter's view is still made once and reused."""
    from mlircap.runtime import cpu

    entered = []
    real = torch.inference_mode

    def counting(*a, **k):
        entered.append(a)
        return real(*a, **k)

    cell = [(None, 0, None)]
    make = cpu._view_maker([4, 2], [1, 4], 0, cell)
    t = torch.randn(2, 4)
    monkeypatch.setattr(torch, "inference_mode", counting)
    v = make(t, t.data_ptr())
    assert entered == [] and cell[0][0] is None
    assert torch.equal(v, t.t())
    p = nn.Parameter(torch.randn(2, 4))
    v = make(p, p.data_ptr())
    assert len(entered) == 1 and cell[0][0] is p and cell[0][2] is v and torch.equal(v, p.t())


# ------------------------------------------------ convolution backward islands' input layouts
class _PointConv(nn.Module):
    """PointNet's feature transform: a bmm on the transposed points, transposed back into
    Conv1d layers (eager's conv input is a transposed view)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(8, 16, 1)
        self.c2 = nn.Conv1d(16, 32, 1)
        self.bn = nn.BatchNorm1d(16)

    def forward(self, x, t):
        x = torch.bmm(x.transpose(2, 1), t).transpose(2, 1)
        x = self.c2(torch.relu(self.bn(self.c1(x))))
        return x.max(dim=2)[0]


def _grads_against_eager(m, args, steps=3):
    fast = mlircap.compile(m)
    params = list(m.parameters())
    for _ in range(steps):
        res = []
        for fn in (m, fast):
            for p in params:
                p.grad = None
            ins = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
            fn(*ins).pow(2).mean().backward()
            res.append([p.grad.clone() for p in params] + [a.grad for a in ins if a.requires_grad])
        for a, b in zip(*res):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_conv1d_backward_reads_its_operands_without_a_copy(fallback_log):
    """The convolution backward island takes the compiled parts' contiguous tensors as they
    are (it restrided them to eager's transposed strides: a copy per operand per call);
    gradients as eager's."""
    torch.manual_seed(6)
    m = _PointConv()
    x = torch.randn(2, 64, 8, requires_grad=True)   # [batch, points, features]
    t = torch.randn(2, 8, 8, requires_grad=True)
    _grads_against_eager(m, (x.transpose(1, 2).contiguous(), t))
    err = fallback_log.readouterr().err
    assert "island convolution_backward" in err or "convolution_backward" in err, err
    assert "given eager's layout" not in err, err


def test_channels_last_conv_backward_keeps_eager_layout(fallback_log):
    """A channels-last model's convolution backward still gets eager's (channels-last)
    operands, which pick eager's memory format; gradients as eager's."""
    torch.manual_seed(7)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
    m = m.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 12, 12).to(memory_format=torch.channels_last)
    _grads_against_eager(m, (x,))


# ------------------------------------------------ CPU plan outputs that reshape a buffer whole
def test_reshaped_buffer_output_is_allocated_in_its_shape():
    """An output that is a whole reshape of a plan buffer (a matmul result [B*T, D] returned
    as [B, T, D]) is allocated in its own shape: no view made per call (and none for
    aot_autograd to detach when it saves it); values as eager's."""
    torch.manual_seed(8)
    w = torch.randn(16, 24)

    def f(x):
        y = (x.reshape(-1, 16) @ w).relu()
        return (y @ w.t()).reshape(2, 5, 16) * 2, y.reshape(2, 5, 24)

    c = mlircap.compile(f)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        for _ in range(3):
            got, want = c(x), f(x)
            for a, b in zip(got, want):
                assert a.shape == b.shape
                _close(a, b)
    with torch.no_grad():
        got = c(x)
    assert not got[1]._is_view(), "the reshaped matmul result came back as a view"


def test_reshaped_output_still_aliases_its_buffer_where_eager_does():
    """Returned with the buffer it reshapes (y and y.view(...), aliases in eager), the two
    outputs still share memory, so an in-place change of one shows in the other as eager's."""
    w = torch.randn(8, 8)

    def f(x):
        y = x @ w
        return y, y.view(-1), y.sum()

    c = mlircap.compile(f)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(3):
            res = []
            for fn in (f, c):
                y, flat, s = fn(x)
                flat.mul_(2)
                res.append((y.clone(), flat.clone(), s))
            for a, b in zip(*res):
                _close(a, b)


def test_one_tensor_passed_twice_gets_its_own_variant_with_the_tensor_guard_extension():
    """f(x, x) after f(x, w) in grad mode: the variant recorded for distinct inputs must not
    serve it. With the tensor-guard extension built (as in a long-lived cache dir) it did, and
    x.grad and the second-order gradient came out wrong; the Distinct guard now covers
    differentiated graphs, in both guard paths."""
    from mlircap.capture import _tensor_ext

    _tensor_ext.load(block=True)
    torch.manual_seed(0)
    _views_and_repeated_input_grads_match_eager()
