"""Capture of real-world-style idioms (issue 11), session 29 (bench/modules14.py).

1. A float computed from a module's step counter (`decay = min(0.99, (1 + self.step) /
   (10 + self.step))`, an EMA's warmup) both returned and handed to an op that takes it as a
   constant (`torch._foreach_mul_(params, decay)`): the return kept its expression, reading the
   attribute as bound at the replay's start, and the op then guarded the attribute by value,
   which dropped its root: building the replay raised KeyError and capture gave up on the
   whole function.  The returned expression now keeps the attribute's own expression.
2. A custom autograd.Function whose backward writes in place into a tensor it has just made
   (`torch.zeros_like(g).scatter_(-1, idx, g)`, a sort's / gather's backward) ran between graphs
   ("a custom autograd.Function ... on a tensor that requires grad", a break): the graph now
   holds it as one node, as other pure Functions.
3. That decay handed to `torch._foreach_mul_` / `_foreach_add_(alpha=)` / `_foreach_lerp_` was a
   constant guarded by value: one variant per call (timm's / YOLO's EMA with a warmup).  It is
   now a 0-d graph input, as for `t.mul_(d)` / `t.add_(p, alpha=1 - d)`.

Each test compares results and module state with eager after every call."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from torch.autograd.function import once_differentiable
from harness import EAGER
from mlircap.capture import capture

COMPILERS = {"eager": lambda m: capture(m, EAGER), "mlircap": mlircap.compile}


def _capture_of(fast, how):
    return fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture


def _same_state(a, b, i):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.allclose(sa[k], sb[k], atol=1e-6), (i, k)
    assert vars(a).get("step") == vars(b).get("step"), i


class ForeachDecay(nn.Module):
    def __init__(self, backward):
        super().__init__()
        self.lin, self.ema = nn.Linear(3, 3), nn.Linear(3, 3)
        self.ema.requires_grad_(False)
        self.step, self.backward = 0, backward

    def forward(self, x):
        if self.backward:
            self.lin.zero_grad(set_to_none=True)
            F.mse_loss(self.lin(x), x).backward()
            with torch.no_grad():
                for p in self.lin.parameters():
                    p.add_(p.grad, alpha=-0.1)
        with torch.no_grad():
            self.step += 1
            decay = min(0.99, (1 + self.step) / (10 + self.step))
            ep, sp = list(self.ema.parameters()), list(self.lin.parameters())
            torch._foreach_mul_(ep, decay)
            torch._foreach_add_(ep, sp, alpha=1 - decay)
        return self.ema(x), decay


@pytest.mark.parametrize("how", COMPILERS)
@pytest.mark.parametrize("backward", [False, True])
def test_float_of_a_counter_returned_and_guarded_by_value(how, backward):
    torch.manual_seed(0)
    ref = ForeachDecay(backward)
    mine = copy.deepcopy(ref)
    fast = COMPILERS[how](mine)
    g = torch.Generator().manual_seed(1)
    for i in range(5):
        x = torch.randn(4, 3, generator=g)
        with torch.enable_grad():
            want, dw = ref(x)
            got, dg = fast(x)
        assert torch.allclose(got, want, atol=1e-6), i
        assert type(dg) is float and dg == dw, (i, dg, dw)
        _same_state(ref, mine, i)
    c = _capture_of(fast, how)
    assert c.variants and not any(v.eager for v in c.variants), [v.reason for v in c.variants]


class SortWithIdx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        v, i = x.sort(-1)
        ctx.mark_non_differentiable(i)
        ctx.save_for_backward(i)
        return v, i

    @staticmethod
    @once_differentiable
    def backward(ctx, gv, gi):
        (i,) = ctx.saved_tensors
        return torch.zeros_like(gv).scatter_(-1, i, gv * 2)


class SortedWeighting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        v, i = SortWithIdx.apply(self.lin(x))
        w = torch.linspace(0, 1, x.shape[-1])
        loss = (v * w).sum()
        (gx,) = torch.autograd.grad(loss, x, retain_graph=True)
        loss.backward()
        return v.detach(), i, gx


@pytest.mark.parametrize("how", COMPILERS)
def test_function_whose_backward_writes_a_tensor_it_made(how):
    torch.manual_seed(0)
    ref = SortedWeighting()
    mine = copy.deepcopy(ref)
    fast = COMPILERS[how](mine)
    g = torch.Generator().manual_seed(2)
    for i in range(4):
        x = torch.randn(3, 6, generator=g).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        with torch.enable_grad():
            want = ref(x)
            got = fast(x2)
        for a, b in zip(want, got):
            assert torch.allclose(a, b, atol=1e-6), i
        for p, q in zip(ref.parameters(), mine.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-6), i
    c = _capture_of(fast, how)
    assert c.variants and not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    # (loss.backward() is a break of its own; the Function's call is none)
    reasons = [r for v in c.variants for r, _ in v.breaks]
    assert reasons and not any("autograd.Function" in r for r in reasons), reasons


class ForeachEMA(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.lin, self.ema = nn.Linear(3, 3), nn.Linear(3, 3)
        self.ema.requires_grad_(False)
        self.updates, self.form = 0, form

    def forward(self, x):
        with torch.no_grad():
            self.updates += 1
            d = 0.999 * (1 - 0.5 ** (self.updates / 2.0))
            ep, sp = list(self.ema.parameters()), [p.detach() for p in self.lin.parameters()]
            if self.form == "mul_add":
                torch._foreach_mul_(ep, d)
                torch._foreach_add_(ep, sp, alpha=1.0 - d)
            else:
                torch._foreach_lerp_(ep, sp, 1.0 - d)
            self.lin.weight.add_(0.1)
        return self.ema(x)


@pytest.mark.parametrize("how", COMPILERS)
@pytest.mark.parametrize("form", ["mul_add", "lerp"])
def test_foreach_decay_of_a_counter_is_a_graph_input(how, form):
    torch.manual_seed(0)
    ref = ForeachEMA(form)
    mine = copy.deepcopy(ref)
    fast = COMPILERS[how](mine)
    g = torch.Generator().manual_seed(3)
    for i in range(6):
        x = torch.randn(2, 3, generator=g)
        want, got = ref(x), fast(x)
        assert torch.equal(got, want), i
        sa, sb = ref.state_dict(), mine.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), i
        assert ref.updates == mine.updates, i
    c = _capture_of(fast, how)
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert len(c.variants) <= 2, len(c.variants)   # (a variant per decay before)
