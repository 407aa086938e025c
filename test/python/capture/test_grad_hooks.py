"""`h.register_hook(fn)` on a tensor the graph computed, with a pure gradient hook the
function made (`lambda g: g.clamp(-0.1, 0.1)`) and the handle dropped, is a node of the
graph (grad_hooks.py, as Dynamo's register_hook op): one graph, no break, and aot_autograd
traces the hook into the backward.  Before, the call was a step between graphs (two graphs)
and its RemovableHandle result was guarded, so every call recorded a new variant
(bench/capture2.py tensor_register_hook_train: 2 graphs, 3 variants over 3 calls).
Hooks that read or write anything but their gradient stay steps between graphs, whose
handle result is an opaque value (not guarded by value: one variant, not one per call).
Custom autograd.Functions whose forward and backward are pure tensor code are one node of
the graph too (bench/capture.py autograd_function_grad_reverse: 2 graphs -> 1)."""
import copy

import pytest
import torch
import torch.nn as nn
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mlircap
from harness import EAGER, same
from mlircap.capture import capture


def _aot(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward),
                                 bw_compiler=lambda g, e: make_boxed_func(g.forward))


BACKENDS = {"eager": EAGER, "aot": _aot}
LOG = []
SCALE = 0.5


class Clipped(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.clip = 0.1

    def forward(self, x):
        h = self.fc(x)
        if h.requires_grad:
            h.register_hook(lambda g: g.clamp(-0.1, 0.1) * 2)
        return torch.relu(h).sum(-1)


class Logged(Clipped):   # the hook writes the program's state
    def forward(self, x):
        h = self.fc(x)
        h.register_hook(lambda g: LOG.append(float(g.abs().sum())))
        return torch.relu(h).sum(-1)


class Closure(Clipped):   # the hook reads a value of the call (a cell)
    def forward(self, x):
        h = self.fc(x)
        c = self.clip
        h.register_hook(lambda g: g.clamp(-c, c))
        return torch.relu(h).sum(-1)


class GlobalScale(Clipped):   # the hook reads a global at backward time
    def forward(self, x):
        h = self.fc(x)
        h.register_hook(lambda g: g * SCALE)
        return torch.relu(h).sum(-1)


class KeptHandle(Clipped):   # the handle is used: removed before the backward
    def forward(self, x):
        h = self.fc(x)
        hd = h.register_hook(lambda g: g * 0.0)
        y = torch.relu(h).sum(-1)
        hd.remove()
        return y


def _run(cls, backend, calls=4, between=None):
    torch.manual_seed(0)
    ref = cls()
    m = copy.deepcopy(ref)
    fast = capture(m, BACKENDS[backend])
    for i in range(calls):
        if between is not None:
            between(ref, m, i)
        x = torch.randn(4, 8)
        LOG.clear()
        le = ref(x)
        le.sum().backward()
        log_e = list(LOG)
        LOG.clear()
        lc = fast(x)
        lc.sum().backward()
        same(lc, le, f"call {i} output")
        assert LOG == log_e, (LOG, log_e)
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p.grad, q.grad, f"call {i} grad {n}")
    return fast._mlircap_capture


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_hook_is_a_graph_node(backend):
    c = _run(Clipped, backend)
    assert len(c.variants) == 1 and not c.variants[0].eager
    assert len(c.variants[0].graphs) == 1 and c.variants[0].breaks == [], c.variants[0].breaks
    assert c.stats.replays == 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [Logged, Closure, GlobalScale, KeptHandle])
def test_other_hooks_stay_steps_between_graphs(cls, backend):
    def between(ref, m, i):
        global SCALE
        ref.clip = m.clip = 0.1 * (i + 1)
        SCALE = 0.5 * (i + 1)
    c = _run(cls, backend, between=between)
    # (a closure over the call's values cannot be rebuilt at replay: that function runs eagerly)
    assert all(v.eager or any("register_hook" in b[0] for b in v.breaks) for v in c.variants), \
        [(v.reason, v.breaks) for v in c.variants]
    if cls is not Closure:
        # the handle is an opaque result (before, guarded by value: its id counts the hooks
        # ever made, so every call missed and recorded a new variant)
        assert len(c.variants) == 1 and c.stats.replays == 3, c.stats.recompile_reasons


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_method_replaced_between_calls(backend):
    """The hook's `g.clamp` looks up Tensor.clamp at backward time: replacing it is seen
    (with aot_autograd the hook's ops are in the compiled backward)."""
    orig = torch.Tensor.clamp

    def between(ref, m, i):
        if i == 2:
            torch.Tensor.clamp = lambda t, lo, hi: orig(t, lo * 5, hi * 5)
    try:
        c = _run(Clipped, backend, between=between)
    finally:
        torch.Tensor.clamp = orig
    assert len(c.variants) == 2, c.stats.recompile_reasons


# ------------------------------------------------------------ custom autograd.Functions
class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


class _ExpSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return g * y * 0.5   # (not exp's gradient: the Function's own backward must run)


class _Logged(torch.autograd.Function):   # its backward writes the program's state
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        LOG.append(1)
        return g * 2


class DANN(nn.Module):
    fn = _GradReverse

    def __init__(self):
        super().__init__()
        self.feat, self.cls, self.dom = nn.Linear(8, 8), nn.Linear(8, 3), nn.Linear(8, 2)

    def forward(self, x, alpha=0.5):
        f = torch.relu(self.feat(x))
        if self.fn is _GradReverse:
            r = _GradReverse.apply(f, alpha)
        else:
            r = self.fn.apply(f)
        return self.cls(f).sum(-1) + self.dom(r).sum(-1)


class SavedDANN(DANN):
    fn = _ExpSaved


class LoggedDANN(DANN):
    fn = _Logged


def _run_dann(cls, compile_fn, alphas=(0.5, 0.5, 0.3, 0.5)):
    torch.manual_seed(0)
    ref = cls()
    m = copy.deepcopy(ref)
    fast = compile_fn(m)
    for i, alpha in enumerate(alphas):
        x = torch.randn(4, 8)
        LOG.clear()
        le = ref(x, alpha)
        le.sum().backward()
        log_e = list(LOG)
        LOG.clear()
        lc = fast(x, alpha)
        lc.sum().backward()
        assert LOG == log_e
        assert torch.allclose(lc, le, atol=1e-6), i
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-6), (i, n)
    return fast


COMPILERS = {"eager": lambda m: capture(m, EAGER), "aot": lambda m: capture(m, _aot), "mlircap": mlircap.compile}


@pytest.mark.parametrize("how", COMPILERS)
@pytest.mark.parametrize("cls", [DANN, SavedDANN])
def test_pure_autograd_function_is_a_graph_node(cls, how):
    """Before: a step between graphs (bench/capture.py autograd_function_grad_reverse: 2 graphs)."""
    fast = _run_dann(cls, COMPILERS[how])
    c = fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture
    assert not any(v.eager for v in c.variants)
    assert all(len(v.graphs) == 1 and v.breaks == [] for v in c.variants), [v.breaks for v in c.variants]
    # a float handed to the Function is a graph input (number_calls.py; before, guarded by value: 0.3
    # was a second variant)
    assert len(c.variants) == 1


@pytest.mark.parametrize("how", ["eager", "aot"])
def test_autograd_function_with_side_effects_stays_a_step(how):
    fast = _run_dann(LoggedDANN, COMPILERS[how])
    c = fast._mlircap_capture
    assert all(any("autograd.Function" in b[0] for b in v.breaks) for v in c.variants)
