"""Capture of functorch / module-state idioms (issue 11), session 28 (bench/modules13.py).

1. torch.func.stack_module_state(models) reads the members' parameters and buffers in torch's
   own (untraced) code: the recorded torch.stack saw parameters the recording had no source for
   ("parameter reached through an untracked path") and capture gave up on the whole function
   (ensembles by stack_module_state + vmap over a meta-device base).  Modules handed to a library
   function now have their subtrees sourced first (calls._module_args), as for parameters().
2. A module with full backward hooks (register_full_backward_hook / register_full_backward_pre_hook)
   is called through a BackwardHookFunction (a custom autograd.Function run in nn.Module's
   untraced __call__): its recorded ops gave up on the whole function.  Such a call now runs between
   graphs as it is (its hooks fire in backward as eager's).
3. nn.utils.parametrize under P.cached() on a deep-copied module (see its test).
4. Leaves made from a graph's values wait for their first reader (see its test).
5. Draws from an explicit torch.Generator run before the open graph (see its test).

Each test compares results, parameters, gradients and module state with eager after every call,
with inputs and state changing between calls (guards)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as P
from torch.func import functional_call, stack_module_state, vmap

import mlircap
from harness import EAGER
from mlircap.capture import capture

COMPILERS = {"eager": lambda m: capture(m, EAGER), "mlircap": mlircap.compile}


def _capture_of(fast, how):
    return fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture


def _no_give_up(fast, how):
    c = _capture_of(fast, how)
    assert c.variants and not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    return c


def _same_state(a, b, i):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.allclose(sa[k], sb[k], atol=1e-6), (i, k)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert (p.grad is None) == (q.grad is None), (i, n)
        assert p.grad is None or torch.allclose(p.grad, q.grad, atol=1e-5), (i, n)


class Ensemble(nn.Module):
    def __init__(self, bn=False):
        super().__init__()
        mk = (lambda: nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 2))) if bn else \
            (lambda: nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2)))
        self.members = nn.ModuleList([mk() for _ in range(3)])

    def forward(self, x):
        params, buffers = stack_module_state(list(self.members))
        base = copy.deepcopy(self.members[0]).to("meta")
        out = vmap(lambda p, b, xb: functional_call(base, (p, b), (xb,)), in_dims=(0, 0, None))(params, buffers, x)
        return out.mean(0), out.std(0), params["0.weight"].requires_grad


@pytest.mark.parametrize("how", COMPILERS)
@pytest.mark.parametrize("bn", [False, True])
def test_stack_module_state_ensemble_reads_members_each_call(how, bn):
    torch.manual_seed(0)
    ref = Ensemble(bn).eval()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(5):
        if i == 2:   # the members' weights written in place: the stacked values follow
            for mod in (ref, m):
                with torch.no_grad():
                    mod.members[1][0].weight.mul_(-2.0)
        if i == 3:   # a member replaced: another parameter is stacked
            torch.manual_seed(5)
            new = ref.members[2].__class__(*[copy.deepcopy(x) for x in ref.members[2]])
            with torch.no_grad():
                new[0].weight.normal_()
            ref.members[2] = new.eval()
            m.members[2] = copy.deepcopy(new)
        x = torch.randn(3, 4)
        want, got = ref(x), fast(x)
        assert want[2] == got[2], i
        for a, b in zip(want[:2], got[:2]):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-6), i
            assert a.requires_grad == b.requires_grad, i
    _no_give_up(fast, how)
    _same_state(ref, m, "end")


class EnsembleTrain(nn.Module):
    """The stacked parameters are fresh leaves: autograd.grad with respect to them, an SGD step
    written back into every member."""

    def __init__(self):
        super().__init__()
        self.members = nn.ModuleList([nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1)) for _ in range(3)])

    def forward(self, x, y):
        params, _ = stack_module_state(list(self.members))
        base = copy.deepcopy(self.members[0]).to("meta")
        out = vmap(lambda p: functional_call(base, p, (x,)))(params)
        loss = F.mse_loss(out, y.expand_as(out), reduction="none").mean((1, 2)).sum()
        gs = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for k, g in zip(params, gs):
                for j, mem in enumerate(self.members):
                    mem.get_parameter(k).sub_(0.1 * g[j])
        return loss.detach()


@pytest.mark.parametrize("how", COMPILERS)
def test_stack_module_state_ensemble_training_writes_back(how):
    torch.manual_seed(0)
    ref = EnsembleTrain()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        x, y = torch.randn(5, 4), torch.randn(5, 1)
        want, got = ref(x, y), fast(x, y)
        assert torch.allclose(want, got, atol=1e-6), i
        _same_state(ref, m, i)
    _no_give_up(fast, how)


class BackwardHooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 1)
        self.ha = self.a.register_full_backward_hook(
            lambda mod, gi, go: tuple(g * 0.5 if g is not None else None for g in gi))
        self.hb = self.b.register_full_backward_pre_hook(lambda mod, go: (go[0].clamp(-0.1, 0.1),))

    def forward(self, x, y):
        x = x.requires_grad_(True)
        loss = F.mse_loss(self.b(torch.tanh(self.a(x))), y)
        self.zero_grad()
        loss.backward()
        return loss.detach(), x.grad


@pytest.mark.parametrize("how", COMPILERS)
def test_full_backward_hooks_change_gradients_as_eager(how):
    torch.manual_seed(0)
    ref = BackwardHooked()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(5):
        if i == 3:   # a hook removed: the gradients are no longer clamped
            ref.hb.remove()
            m.hb.remove()   # (the deep copy's handle: the copy's hook dict)
            assert not m.b._backward_pre_hooks and not ref.b._backward_pre_hooks
        x, y = torch.randn(3, 4) * 3, torch.randn(3, 1) * 3
        (le, ge), (lc, gc) = ref(x.clone(), y), fast(x.clone(), y)
        assert torch.allclose(le, lc, atol=1e-6), i
        assert torch.allclose(ge, gc, atol=1e-6), i
        _same_state(ref, m, i)
    _no_give_up(fast, how)


def test_full_backward_hook_without_grad_is_captured_whole():
    """Under no_grad the hooks do not apply: the module's call stays in the graph."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    ref[0].register_full_backward_hook(lambda mod, gi, go: gi)
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(2, 4)
            assert torch.equal(ref(x), fast(x)), i
    c = _no_give_up(fast, "eager")
    assert all(v.breaks == [] for v in c.variants), [v.breaks for v in c.variants]


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.tensor(2.0))

    def forward(self, X):
        return X * self.s

    def right_inverse(self, X):
        return X / self.s


class CachedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)
        P.register_parametrization(self.l, "weight", Symmetric())
        P.register_parametrization(self.l, "bias", Scale())

    def forward(self, x):
        with P.cached():
            y = self.l(self.l(x).relu())
        return y, self.l.weight.diagonal()


@pytest.mark.parametrize("how", COMPILERS)
def test_parametrize_cached_on_deep_copied_module(how):
    """3. parametrize's property getter is a closure over the module it was made for: a deep
    copy's class property still closes over the original module, whose id() is parametrize's
    cache key under P.cached().  That module had no source: id(module) was an uncapturable call
    ('module created during the call') and capture gave up on the whole function.  The getter is
    now sourced through its (guarded) property, so its cells are guarded external state."""
    torch.manual_seed(0)
    orig = CachedTwice()
    ref, m = copy.deepcopy(orig), copy.deepcopy(orig)
    assert type(ref.l) is type(orig.l)   # (the copies share the parametrized class)
    fast = COMPILERS[how](m)
    for i in range(5):
        if i == 2:
            for mod in (ref, m):
                with torch.no_grad():
                    mod.l.parametrizations.weight.original.mul_(-1.5)
        if i == 3:
            for mod in (ref, m):
                with torch.no_grad():
                    mod.l.bias = torch.full((3,), 0.25)   # through Scale.right_inverse
        x = torch.randn(2, 3)
        want, got = ref(x), fast(x)
        for a, b in zip(want, got):
            assert torch.allclose(a, b, atol=1e-6), i
        assert P._cache == {} and not P._cache_enabled, i
        _same_state(ref, m, i)
    c = _no_give_up(fast, how)
    assert all(v.breaks == [] for v in c.variants), [v.breaks for v in c.variants]


def _leaves(x, w):
    # three leaves made from values the graph computes, ops not reading them in between
    a = (x * 2).detach().requires_grad_()
    h = torch.tanh(x @ w)
    b = h.sum(0).detach().requires_grad_()
    c = torch.zeros(3, requires_grad=True)
    s = x.sin().sum()          # reads none of them: stays in the first graph
    loss = (a * w[:, 0]).sum() + (b ** 2).sum() + (c * s).sum()
    ga, gb, gc = torch.autograd.grad(loss, [a, b, c])
    return loss.detach(), ga, gb, gc, a.is_leaf, b.requires_grad


def _leaf_read_at_once(x):
    a = x.exp().detach().requires_grad_()
    y = (a * 3).sum()          # reads the leaf right away: the graph ends before it
    x.add_(1)                  # (the source written afterwards: the leaf keeps its values)
    (g,) = torch.autograd.grad(y, a)
    return y.detach(), g, a


@pytest.mark.parametrize("how", COMPILERS)
def test_leaves_made_in_a_graph_wait_for_their_first_reader(how):
    """4. `t.detach().requires_grad_()` / a factory with requires_grad=True on a value the open
    graph made was a step between graphs at once, a break per leaf (stack_module_state: one per
    parameter name; autograd.functional: one per input).  The step now waits until an op reads
    the tensor (or the graph ends otherwise): one break for the three leaves here."""
    fast = COMPILERS[how](_leaves)
    for i in range(4):
        x, w = torch.randn(3, 3), torch.randn(3, 3)
        want, got = _leaves(x, w), fast(x.clone(), w.clone())
        for a, b in zip(want, got):
            assert a == b if isinstance(a, bool) else torch.allclose(a, b, atol=1e-6), i
    c = _no_give_up(fast, how)
    assert all(len(v.breaks) <= 1 for v in c.variants), [v.breaks for v in c.variants]


@pytest.mark.parametrize("how", COMPILERS)
def test_leaf_read_at_once_then_its_source_written(how):
    fast = COMPILERS[how](_leaf_read_at_once)
    for i in range(3):
        x = torch.randn(4)
        xe, xc = x.clone(), x.clone()
        want, got = _leaf_read_at_once(xe), fast(xc)
        assert torch.equal(xe, xc), i
        for a, b in zip(want, got):
            assert torch.allclose(a, b, atol=1e-6), i
        assert got[2].is_leaf and got[2].requires_grad, i
    _no_give_up(fast, how)


class DPNoise(nn.Module):
    """DP-SGD's update: noise per parameter from an explicit generator, written in place."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1))
        self.gen = torch.Generator().manual_seed(3)

    def forward(self, x):
        loss = self.net(x).pow(2).mean()
        gs = torch.autograd.grad(loss, list(self.net.parameters()))
        with torch.no_grad():
            for p, g in zip(self.net.parameters(), gs):
                p.sub_(0.1 * (g + 0.01 * torch.randn(p.shape, generator=self.gen)))
            u = torch.rand(2, generator=self.gen)
        return loss.detach(), u


@pytest.mark.parametrize("how", COMPILERS)
def test_explicit_generator_draws_run_before_the_open_graph(how):
    """5. A draw of new values from an explicit torch.Generator (no tensor argument) was a step
    between graphs, a break each (one per parameter here); it now runs before the open graph, as a
    Python RNG draw does.  The generator reseeded between calls: the same draws as eager's."""
    torch.manual_seed(0)
    ref = DPNoise()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(5):
        if i == 3:
            ref.gen.manual_seed(11)
            m.gen.manual_seed(11)
        x = torch.randn(6, 4)
        want, got = ref(x), fast(x)
        for a, b in zip(want, got):
            assert torch.allclose(a, b, atol=1e-6), i
        assert torch.equal(ref.gen.get_state(), m.gen.get_state()), i
        _same_state(ref, m, i)
    c = _no_give_up(fast, how)
    assert all(len(v.breaks) <= 1 for v in c.variants), [v.breaks for v in c.variants]
