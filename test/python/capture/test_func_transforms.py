"""torch.func transforms whose function reads the program's modules (transform_closures.py):
per-sample gradients by vmap(grad(functional_call(self.net, ...))), DP-SGD updating the
parameters in place between calls, grad_and_value with has_aux over parameters that require
grad, jacrev over a parameter dict.  Each was a graph break (the transform run between graphs);
now one node of one graph.  Every test compares outputs, parameters and gradients with eager
after each call, with guard misses (a batch of another size, an attribute the body branches on
changed, a submodule replaced), and bodies the node must not hold (a dropout drawing random
numbers, a user module class, a data-dependent branch) still run as eager does."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, grad_and_value, jacrev, vmap

import mlircap
from harness import EAGER
from mlircap.capture import capture

COMPILERS = {"eager": lambda m: capture(m, EAGER), "mlircap": mlircap.compile}


def _capture_of(fast, how):
    return fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture


def _one_graph(fast, how):
    c = _capture_of(fast, how)
    assert c.variants and not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    for v in c.variants:
        assert len(v.graphs) == 1 and not v.breaks, ([b for b in v.breaks], len(v.graphs))


def _close(a, b, i):
    fa, fb = torch.utils._pytree.tree_flatten(a)[0], torch.utils._pytree.tree_flatten(b)[0]
    assert len(fa) == len(fb), i
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            assert x.shape == y.shape and x.requires_grad == y.requires_grad, i
            assert torch.allclose(x, y, atol=1e-5, rtol=1e-5), (i, (x - y).abs().max())
        else:
            assert x == y, i


def _same_state(a, b, i):
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.allclose(p, q, atol=1e-5), (i, n)
        assert (p.grad is None) == (q.grad is None), (i, n)
        assert p.grad is None or torch.allclose(p.grad, q.grad, atol=1e-5), (i, n)


def _mlp(i=4, h=8, o=1, drop=False):
    return nn.Sequential(nn.Linear(i, h), nn.Tanh(), *([nn.Dropout(0.3)] if drop else []), nn.Linear(h, o))


class PerSample(nn.Module):
    def __init__(self, drop=False):
        super().__init__()
        self.net, self.loss = _mlp(drop=drop), "mse"

    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def one(p, xi, yi):
            out = functional_call(self.net, p, (xi.unsqueeze(0),))
            return F.mse_loss(out, yi.unsqueeze(0)) if self.loss == "mse" else F.smooth_l1_loss(out, yi.unsqueeze(0))

        g = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
        return g, torch.stack([v.flatten(1).norm(dim=1) for v in g.values()], 1).norm(dim=1)


@pytest.mark.parametrize("how", COMPILERS)
def test_per_sample_grads_one_graph_with_guard_misses(how):
    torch.manual_seed(0)
    ref = PerSample().eval()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        n = 5 if i < 2 else 3   # (a batch of another size: a guard miss)
        x, y = torch.randn(n, 4), torch.randn(n, 1)
        _close(ref(x, y), fast(x, y), i)
    _one_graph(fast, how)
    for mod in (ref, m):   # the attribute the body branches on: guarded
        mod.loss = "l1"
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    _close(ref(x, y), fast(x, y), "l1")
    for mod in (ref, m):   # a submodule replaced: the node must not keep the old one
        mod.net[1] = nn.ReLU()
    _close(ref(x, y), fast(x, y), "relu")
    with torch.no_grad():   # parameters written in place: the node reads them each call
        for mod in (ref, m):
            mod.net[0].weight.mul_(-1.5)
    _close(ref(x, y), fast(x, y), "written")
    _one_graph(fast, how)


class DPSGD(nn.Module):
    def __init__(self):
        super().__init__()
        self.net, self.clip = _mlp(), 0.5

    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}
        loss = lambda p, xi, yi: F.mse_loss(functional_call(self.net, p, (xi[None],)), yi[None])  # noqa: E731
        g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        n = torch.stack([v.flatten(1).norm(dim=1) for v in g.values()], 1).norm(dim=1)
        factor = (self.clip / (n + 1e-6)).clamp(max=1.0)
        with torch.no_grad():
            for p, v in zip(self.net.parameters(), g.values()):
                p.sub_(0.1 * torch.einsum("b,b...->...", factor, v) / x.shape[0])
        return n


@pytest.mark.parametrize("how", COMPILERS)
def test_dp_sgd_updates_parameters_the_node_reads(how):
    torch.manual_seed(0)
    ref = DPSGD()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(5):
        x, y = torch.randn(6, 4), torch.randn(6, 1)
        _close(ref(x, y), fast(x, y), i)
        _same_state(ref, m, i)
    _one_graph(fast, how)


class GradAndValue(nn.Module):
    """Parameters that require grad (not detached): grad_and_value with has_aux, a step by
    hand, the new parameters called again; backward through everything to the parameters."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 6, 3)

    def forward(self, x, y):
        params = dict(self.net.named_parameters())

        def loss(p):
            logits = functional_call(self.net, p, (x,))
            return F.cross_entropy(logits, y), logits.argmax(-1)

        g, (lv, pred) = grad_and_value(loss, has_aux=True)(params)
        new = {k: params[k] - 0.1 * g[k] for k in params}
        return lv, pred, functional_call(self.net, new, (x,))


@pytest.mark.parametrize("how", COMPILERS)
def test_grad_and_value_has_aux_backward_to_parameters(how):
    torch.manual_seed(0)
    ref = GradAndValue()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
        want, got = ref(x, y), fast(x, y)
        _close(want, got, i)
        want[2].square().sum().backward()
        got[2].square().sum().backward()
        _same_state(ref, m, i)
    _one_graph(fast, how)


class NTK(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _mlp(3, 5, 2)

    def forward(self, x1, x2):
        params = {k: v.detach() for k, v in self.net.named_parameters()}
        f = lambda p, x: functional_call(self.net, p, (x,))  # noqa: E731
        j1, j2 = jacrev(f)(params, x1), jacrev(f)(params, x2)
        return sum(torch.einsum("Naf,Mbf->NMab", a.flatten(2), b.flatten(2)) for a, b in zip(j1.values(), j2.values()))


@pytest.mark.parametrize("how", COMPILERS)
def test_ntk_jacrev_over_parameter_dict(how):
    torch.manual_seed(0)
    ref = NTK()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        x1, x2 = torch.randn(3 if i < 2 else 4, 3), torch.randn(2, 3)
        _close(ref(x1, x2), fast(x1, x2), i)
    _one_graph(fast, how)


class UserNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.scale = 2.0

    def forward(self, x):
        return self.fc(x) * self.scale


class Dropped(PerSample):
    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}
        return grad(lambda p: F.mse_loss(functional_call(self.net, p, (x,)), y))(params)


class WritesInput(PerSample):
    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def one(p, xi):
            F.relu(xi, inplace=True)
            return functional_call(self.net, p, (xi,)).sum()

        return grad(one)(params, x), x * 2


class DataBranch(PerSample):
    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def one(p, xi):
            out = functional_call(self.net, p, (xi,)).sum()
            return out * 2 if bool(out > 0) else out

        return grad(one)(params, x)


@pytest.mark.parametrize("kind", ["dropout", "user_class", "data_branch", "writes_input"])
def test_bodies_a_node_must_not_hold_run_as_eager(kind):
    torch.manual_seed(0)
    if kind == "dropout":   # draws random numbers in the body: not a node
        ref = Dropped(drop=True).train()
    elif kind == "user_class":   # a module of the program's own class: its forward is not checked
        ref = PerSample()
        ref.net = UserNet()
    elif kind == "writes_input":   # writes its argument in place: run once, as eager does
        ref = WritesInput()
    else:
        ref = DataBranch()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(4):
        x, y = torch.randn(5, 4), torch.randn(5, 1)
        if kind == "user_class" and i == 2:
            ref.net.scale = m.net.scale = -1.0
        torch.manual_seed(10 + i)
        x2 = x.clone()
        want = ref(x, y)
        torch.manual_seed(10 + i)
        got = fast(x2, y)
        _close(want, got, i)
        assert torch.equal(x, x2), i
    c = fast._mlircap_capture
    assert any(v.breaks or len(v.graphs) != 1 for v in c.variants)


class VmapModule(nn.Module):
    """vmap over a module called directly (in_dims / out_dims 1) and over a method of the
    program's module class reading its submodule."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.GELU(), nn.Linear(6, 2))

    def step(self, x, scale):
        return self.mlp(x) * scale

    def forward(self, x, s):
        return vmap(self.mlp, in_dims=1, out_dims=1)(x), vmap(self.step, in_dims=(0, None))(x, s)


@pytest.mark.parametrize("how", COMPILERS)
def test_vmap_of_a_module_and_of_a_method(how):
    torch.manual_seed(0)
    ref = VmapModule()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(5):
        if i == 2:   # parameters written in place: the node reads them
            with torch.no_grad():
                for mod in (ref, m):
                    mod.mlp[0].weight.mul_(0.5)
        if i == 3:   # a submodule replaced: a guard miss
            for mod in (ref, m):
                mod.mlp[2] = nn.Tanh()
        x, s = torch.randn(3, 5 if i < 4 else 2, 4), torch.tensor(float(i) - 1.5)
        _close(ref(x, s), fast(x, s), i)
    _one_graph(fast, how)


class Annealed(nn.Module):
    """The body reads numbers of the program's modules: a scale the call writes before the
    transform, a temperature changed between calls, a LeakyReLU slope in the used module."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.LeakyReLU(0.1), nn.Linear(6, 1))
        self.temp, self.scale = 1.0, 1.0

    def forward(self, x, y, write):
        if write:
            self.scale = self.scale * 1.5
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def one(p, xi, yi):
            out = functional_call(self.net, p, (xi[None],)) / self.temp
            return F.mse_loss(out * self.scale, yi[None])

        return vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)


@pytest.mark.parametrize("how", COMPILERS)
def test_numbers_the_body_reads_are_pinned(how):
    torch.manual_seed(0)
    ref = Annealed()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(7):
        for mod in (ref, m):
            mod.temp = 1.0 + 0.25 * (i % 3)   # (a float changing between calls)
            if i == 4:
                mod.net[1].negative_slope = 0.3
            if i == 5:
                mod.net.append(nn.Tanh())
        x, y = torch.randn(4, 4), torch.randn(4, 1)
        write = i >= 5
        _close(ref(x, y, write), fast(x, y, write), i)
        assert ref.scale == m.scale, i


class MethodInCell(nn.Module):
    """A bound method of the program's module held by the transformed closure's cell: its body
    is walked like the closure's (its reads of `self` guarded), not taken as a constant."""

    def __init__(self):
        super().__init__()
        self.lin, self.k = nn.Linear(3, 3), 2.0

    def scaled(self, z):
        return torch.tanh(self.lin(z)) * self.k

    def forward(self, x):
        f = self.scaled
        return grad(lambda z: f(z).sum())(x)


@pytest.mark.parametrize("how", COMPILERS)
def test_bound_method_in_a_cell_reads_are_guarded(how):
    torch.manual_seed(0)
    ref = MethodInCell()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(5):
        if i >= 2:
            ref.k = m.k = float(i)
        x = torch.randn(4, 3)
        _close(ref(x), fast(x), i)


class FreshNet(nn.Module):
    """A module made by the call, each call another (its weights drawn anew): the node must not
    hold the recording's."""

    def __init__(self):
        super().__init__()
        self.width = 3

    def forward(self, x):
        net = nn.Sequential(nn.Linear(4, self.width), nn.Tanh())
        params = dict(net.named_parameters())
        return grad(lambda p: functional_call(net, p, (x,)).sum())(params), vmap(net)(x)


@pytest.mark.parametrize("how", COMPILERS)
def test_a_module_the_call_makes_is_not_held(how):
    ref = FreshNet()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        if i == 2:
            ref.width = m.width = 5
        x = torch.randn(2, 4)
        torch.manual_seed(i)
        want = ref(x)
        torch.manual_seed(i)
        _close(want, fast(x), i)


class Saliency(nn.Module):
    """grad of one class's logit with respect to the input: a closure over the module and a
    class index from a literal (`cls = 1`: a constant of the node), or one computed by the call
    (`k`: from the input's shape; a loop variable): those run as eager does."""

    def __init__(self, how):
        super().__init__()
        self.net, self.how = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)), how

    def forward(self, x):
        if self.how == "literal":
            cls = 1

            def logit(v):
                return self.net(v)[..., cls].sum()
            return grad(logit)(x).abs()
        if self.how == "computed":
            k = x.shape[0] % 3
            return grad(lambda v: self.net(v)[..., k].sum())(x)
        outs = []
        for j in range(2):
            outs.append(grad(lambda v: self.net(v)[..., j].sum())(x))
        return outs


@pytest.mark.parametrize("kind", ["literal", "computed", "loop"])
def test_numbers_in_cells(kind):
    torch.manual_seed(0)
    ref = Saliency(kind)
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(5):
        x = torch.randn(4 + i % 3, 6)
        _close(ref(x), fast(x), i)
    if kind == "literal":
        _one_graph(fast, "eager")


def test_an_argument_cell_stored_a_literal_on_one_path_is_not_a_constant():
    net = nn.Sequential(nn.Linear(6, 4), nn.Tanh())

    def f(x, cls, reset):
        if reset:
            cls = 1

        def logit(v):
            return net(v)[..., cls].sum()
        return grad(logit)(x)
    fast = capture(f, EAGER)
    for i in range(5):
        x = torch.randn(3, 6)
        _close(f(x, i % 4, i == 0), fast(x, i % 4, i == 0), i)


MODEL = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1))


def per_sample_of_global_model(xs, ys):
    params = {k: v.detach() for k, v in MODEL.named_parameters()}

    def loss(p, x, y):
        return F.mse_loss(functional_call(MODEL, p, (x[None],)), y[None])
    return vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)


@pytest.mark.parametrize("how", COMPILERS)
def test_per_sample_grads_of_a_global_model(how):
    global MODEL
    torch.manual_seed(0)
    fast = capture(per_sample_of_global_model, EAGER) if how == "eager" else mlircap.compile(per_sample_of_global_model)
    saved = MODEL
    try:
        for i in range(5):
            if i == 2:
                with torch.no_grad():
                    MODEL[0].weight.mul_(0.5)
            if i == 3:   # the global rebound: a guard miss
                MODEL = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
            xs, ys = torch.randn(5, 4), torch.randn(5, 1)
            _close(per_sample_of_global_model(xs, ys), fast(xs, ys), i)
        _one_graph(fast, how)
    finally:
        MODEL = saved
