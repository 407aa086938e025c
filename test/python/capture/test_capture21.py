"""Capture defects of issue 11 (capture rate): a module's `.to()` that converts nothing, called
inside a captured function (`self.classifier = self.classifier.to(self.dtype)` of a
Switch-Transformers router), gave up on the whole frame ('parameter reached through an
untracked path (in Tensor.to)'); nn.Module.to / _apply, library code, walked the module's
parameters and buffers untracked."""
import copy

import torch
import torch.nn as nn

from harness import EAGER
from mlircap.capture import explain


class Router(nn.Module):
    def __init__(self, dtype=torch.float32, reassign=True):
        super().__init__()
        self.classifier = nn.Sequential(nn.BatchNorm1d(6), nn.Linear(6, 4))   # (buffers: an integer one too)
        self.dtype, self.reassign = dtype, reassign

    def forward(self, x):
        if self.reassign:
            self.classifier = self.classifier.to(self.dtype)
        else:
            self.classifier.to(x.dtype)
        return self.classifier(x.to(self.classifier[1].weight.dtype)).softmax(-1).topk(2, -1).values


def _state(m):
    return {k: (v.dtype, v.clone()) for k, v in m.state_dict(keep_vars=True).items()}


def _same_state(a, b):
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k][0] == sb[k][0], k
        assert torch.allclose(sa[k][1].double(), sb[k][1].double(), rtol=1e-5, atol=1e-6), k


def _run(m, inputs):
    ref = copy.deepcopy(m)
    ex = explain(m, EAGER)
    for i, x in enumerate(inputs):
        out = ex(x)
        got, want = ex.captured(x), ref(x)
        assert got.dtype == want.dtype and torch.allclose(got.double(), want.double(), rtol=1e-5, atol=1e-6), i
        ref(x)   # (the same number of calls: BatchNorm's running statistics)
        _same_state(m, ref)
        assert all(type(p) is nn.Parameter for p in m.classifier.parameters())
    return out


def test_module_to_its_own_dtype_is_captured():
    m = Router()
    p = m.classifier[1].weight
    out = _run(m, [torch.randn(5, 6) + i for i in range(4)])
    assert out.variants == 1 and not out.eager_reasons, out
    assert out.graph_count == 1 and out.break_count == 0, out
    assert m.classifier[1].weight is p   # (the same parameter: nothing converted)


def test_module_to_its_own_dtype_in_eval_mode_and_without_assignment():
    m = Router(reassign=False).eval()
    out = _run(m, [torch.randn(3, 6) * (i + 1) for i in range(3)])
    assert out.variants == 1 and not out.eager_reasons, out
    assert out.graph_count == 1 and out.break_count == 0, out


def test_module_to_that_converts_stays_correct():
    # the first call converts the parameters to float64 (eager's state), the later ones not
    m = Router(dtype=torch.float64)
    out = _run(m, [torch.randn(5, 6) + i for i in range(4)])
    assert m.classifier[1].weight.dtype == torch.float64
    assert out.variants == 2 and not out.eager_reasons and out.graph_count >= 1, out   # (converting, then not)


def test_module_to_the_inputs_dtype_as_it_changes():
    m = Router(reassign=False).eval()
    dts = [torch.float32, torch.float32, torch.float64, torch.float64, torch.float32, torch.float64]
    out = _run(m, [torch.randn(4, 6, dtype=dt) for dt in dts])
    assert not out.eager_reasons and out.graph_count >= 1, out


def test_module_to_with_gradients_converts_them_as_eager():
    m = Router(reassign=False)
    m.classifier(torch.randn(2, 6)).sum().backward()
    g = m.classifier[1].weight.grad.clone()
    out = _run(m, [torch.randn(4, 6, dtype=torch.float64) for _ in range(3)])
    assert m.classifier[1].weight.grad.dtype == torch.float64 and torch.allclose(m.classifier[1].weight.grad, g.double())
    assert not out.eager_reasons and out.graph_count >= 1, out


def test_module_to_its_own_dtype_with_gradients():
    m = Router(reassign=False)
    m.classifier(torch.randn(2, 6)).sum().backward()
    g = m.classifier[1].weight.grad
    out = _run(m, [torch.randn(4, 6) for _ in range(3)])
    assert m.classifier[1].weight.grad is g
    assert out.variants == 1 and not out.eager_reasons and out.graph_count == 1 and out.break_count == 0, out


def test_module_to_follows_torch_future_overwrite_flag():
    # with torch.__future__.set_overwrite_module_params_on_conversion(True), eager's .to() makes
    # new parameters even where it converts nothing: the replay of a recording that skipped it
    # must not run then (guarded flags)
    m = Router()
    ex = explain(m, EAGER)
    x = torch.randn(5, 6)
    ex(x)
    ex(x)
    p = m.classifier[1].weight
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        ex.captured(x)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert m.classifier[1].weight is not p and torch.equal(m.classifier[1].weight, p)


# -- `self.router = self.router.to(...)` before a callee capture gives up in ---------------------
class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4, 4))

    def forward(self, x, sel):
        out = torch.zeros_like(x)
        for e in sel.unique().unbind(0):   # (data-dependent: capture gives up on this forward)
            m = sel == e
            out[m] = x[m] @ self.w[e]
        return out


class Sparse(nn.Module):
    def __init__(self, swap=False):
        super().__init__()
        self.router, self.other = nn.Linear(4, 3), nn.Linear(4, 3)
        self.experts = Experts()
        self.swap = swap

    def forward(self, x):
        self.router = self.router.to(x.dtype)
        if self.swap:   # (a store of another module: a real write)
            self.router, self.other = self.other, self.router
        return self.experts(x, self.router(x).argmax(-1)) * 2


def test_storing_back_the_same_submodule_is_no_write():
    # it was a write of state before a call into Experts.forward (run eagerly): the whole
    # forward ran eagerly
    for swap in (False, True):
        torch.manual_seed(0)
        m = Sparse(swap)
        ref = copy.deepcopy(m)
        ex = explain(m, EAGER)
        for i in range(5):
            x = torch.randn(6, 4)
            assert torch.allclose(ex.captured(x), ref(x), rtol=1e-5, atol=1e-6), (swap, i)
            assert torch.equal(m.router.weight, ref.router.weight) and torch.equal(m.other.weight, ref.other.weight)
        out = ex(x)
        if not swap:
            assert out.variants == 1 and not out.eager_reasons, out
            assert out.graph_count == 2 and out.break_count == 1, out


# -- a submodule whose forward a `def wrapper(*args)` decorator wraps, called by an eager frame ---
def _plain_deco(fn):
    def wrapper(*args):   # (no functools.wraps: nothing leads to the function it wraps)
        return fn(*args)
    return wrapper


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    @_plain_deco
    def forward(self, x):
        self.calls += 1
        return self.lin(x).relu() * 2 + 1

    @_plain_deco
    def shifted(self, x):   # (the same wrapper code: not forward)
        return self.lin(x) - 3


class Caller(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Wrapped()

    def forward(self, x):
        y = self.inner(x) + self.inner.shifted(x)
        for v in y.sum(1).unique().unbind(0):   # (data-dependent: this frame runs eagerly)
            y = y + v
        return y


def test_a_decorated_forward_is_captured_as_a_callee():
    # it was never captured on its own: the callee lookup keyed by the first bound argument,
    # the wrapper's *args tuple here
    torch.manual_seed(0)
    m = Caller()
    ref = copy.deepcopy(m)
    ex = explain(m, EAGER)
    for i in range(5):
        x = torch.randn(3, 4)
        assert torch.allclose(ex.captured(x), ref(x), rtol=1e-5, atol=1e-6), i
        assert m.inner.calls == ref.inner.calls == i + 1
    c = ex.captured._mlircap_capture
    chs = {type(ch.fn).__name__: ch for _, ch in c.callees.by_key.values()}
    assert chs["Wrapped"].stats.replays >= 3 and all(not v.eager for v in chs["Wrapped"].variants), chs
