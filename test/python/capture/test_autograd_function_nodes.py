"""Custom autograd.Functions as written in research code are one node of the graph
(grad_hooks.pure_autograd_function), not a step between graphs: bodies that call torch's own
functions through a global module (`torch.where`, `torch.sigmoid`; each lookup guarded),
convert with `.to(g.dtype)`, branch on `ctx.needs_input_grad[i]`, index with `...`, and a
backward made `@once_differentiable`.  Before, each such `Fn.apply` split the graph
(bench/modules2.py ternary_sign_ste_function: 2 graphs; modules7
autograd_function_leaky_ste_clamp / _once_differentiable_grad /
_non_differentiable_needs_input_grad one break each more).  Outputs and parameter gradients
are compared with eager for the eager backend, aot_autograd and mlircap.compile."""
import copy

import pytest
import torch
import torch.nn as nn
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mlircap
from harness import EAGER
from mlircap.capture import capture


def _aot(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward),
                                 bw_compiler=lambda g, e: make_boxed_func(g.forward))


class SignSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() <= 1).to(g.dtype)


class ClampSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        inside = (x >= ctx.lo) & (x <= ctx.hi)
        return g * torch.where(inside, 1.0, 0.1), None, None


class ScaledSiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * torch.sigmoid(x) * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        s = torch.sigmoid(x)
        gx = g * w * (s * (1 + x * (1 - s))) if ctx.needs_input_grad[0] else None
        gw = (g * x * s).sum(0) if ctx.needs_input_grad[1] else None
        return gx, gw


class OnceDiffLSE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        m = x.amax(-1, keepdim=True)
        out = m + (x - m).exp().sum(-1, keepdim=True).log()
        ctx.save_for_backward(x, out)
        return out.squeeze(-1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        return g[..., None] * (x - out).exp()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.rand(4) + 0.5)

    def forward(self, x, frozen_input=False):
        h = SignSTE.apply(self.a(x)) + ClampSTE.apply(self.a(x) * 3, -1.0, 1.0)
        if frozen_input:
            h = h.detach()   # ScaledSiLU's needs_input_grad[0] is False
        h = ScaledSiLU.apply(h, self.w)
        return OnceDiffLSE.apply(h)


COMPILERS = {"eager": lambda m: capture(m, EAGER), "aot": lambda m: capture(m, _aot), "mlircap": mlircap.compile}


def _capture_of(fast, how):
    return fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture


@pytest.mark.parametrize("how", COMPILERS)
def test_functions_are_graph_nodes(how):
    torch.manual_seed(0)
    ref = Net()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        x = torch.randn(3, 4)
        frozen = i >= 2
        le = ref(x, frozen)
        le.sum().backward()
        lc = fast(x, frozen)
        lc.sum().backward()
        assert torch.allclose(lc, le, atol=1e-6), i
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-5), (i, n)
    c = _capture_of(fast, how)
    assert not any(v.eager for v in c.variants)
    assert all(len(v.graphs) == 1 and v.breaks == [] for v in c.variants), [v.breaks for v in c.variants]
    assert c.stats.replays >= 2


def test_torch_function_lookup_in_a_body_is_guarded():
    """The backward's `torch.where` patched after compile: aot_autograd traced the old one
    into the backward graph, so the lookup is guarded (a new variant traces the new one)."""
    torch.manual_seed(0)
    ref = Net()
    m = copy.deepcopy(ref)
    fast = capture(m, _aot)
    x = torch.randn(3, 4)
    fast(x).sum().backward()
    real = torch.where
    try:
        torch.where = lambda c, a, b: real(c, a, b * 3)   # (eager and compiled both see it)
        for mod in (ref, m):
            mod.zero_grad()
        ref(x).sum().backward()
        fast(x).sum().backward()
    finally:
        torch.where = real
    for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), n
    assert len(fast._mlircap_capture.variants) == 2
