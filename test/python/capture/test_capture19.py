"""Capture defects of issue 11: which calls draw from torch's RNG (classify._draws_rng: exact names
and aten's nondeterministic_seeded tag, plus the generators' state seen at a recording, instead of
a substring match that took `F.normalize` for a draw and `F.gumbel_softmax` for none)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from test_grad_hooks import _GradReverse  # (the test's own folder is on sys.path)
from mlircap.capture.draws import _draws_rng


def _lazy_head(fn):
    """A module that makes its head on the call that finds none: the constructor is a replayed
    call run before the open graph only where that graph has not drawn (module_factories.py)."""
    class M(nn.Module):
        def forward(self, x):
            h = fn(x)
            if not hasattr(self, "head"):
                self.head = nn.Linear(4, 3)
            return self.head(h)
    return M()


def _run_lazy(fn, calls=3):
    m, ref = _lazy_head(fn), _lazy_head(fn)
    g = mlircap.compile(m)
    for i in range(calls):
        torch.manual_seed(i)
        x = torch.randn(2, 4)
        out = g(x)
        rng = torch.get_rng_state()
        torch.manual_seed(i)
        x = torch.randn(2, 4)
        want = ref(x)
        assert torch.allclose(out, want, rtol=1e-5, atol=1e-6), i
        assert torch.equal(m.head.weight, ref.head.weight), i
        assert torch.equal(rng, torch.get_rng_state()), i
        del m.head, ref.head   # the next call makes its head again (the replay's constructor)
    return g.explain()


@pytest.mark.parametrize("name", ["normalize", "__rand__", "set_flush_denormal", "native_dropout_backward",
                                  "batch_norm", "randomize_weights", "operand"])
def test_look_alikes_are_not_draws(name):
    assert not _draws_rng(name)


@pytest.mark.parametrize("name", ["randn", "rand_like", "randint", "dropout", "feature_alpha_dropout", "normal_",
                                  "uniform_", "bernoulli", "multinomial", "gumbel_softmax", "poisson",
                                  "fractional_max_pool2d", "kaiming_uniform_", "random_", "exponential_"])
def test_draws(name):
    assert _draws_rng(name)


def test_normalize_does_not_stop_a_constructor_running_before_the_graph():
    ex = _run_lazy(lambda x: F.normalize(x, dim=-1))
    assert ex.graph_count == 1 and ex.break_count == 0 and ex.variants == 1


@pytest.mark.parametrize("fn", [lambda x: F.gumbel_softmax(x, tau=0.5),
                                lambda x: F.fractional_max_pool2d(x.reshape(1, 1, 2, 4).repeat(1, 1, 2, 1), 2,
                                                                  output_size=2).reshape(1, 4).expand(2, 4),
                                lambda x: F.scaled_dot_product_attention(x[None], x[None], x[None], dropout_p=0.5)[0]],
                         ids=["gumbel_softmax", "fractional_max_pool2d", "sdpa_dropout"])
def test_a_draw_not_named_so_keeps_the_constructor_after_it(fn):
    # the graph draws before the constructor does (its init): the replay made the head first, whose
    # weights and the graph's noise then came from the other draws than eager's
    ex = _run_lazy(fn)
    assert ex.variants == 1


# -- (a) floats handed to untraced torch functions and autograd.Functions ------------------------
class _Branchy(torch.autograd.Function):
    """Its forward branches on alpha: the graph cannot hold that branch for a 0-d input."""
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        if alpha > 0.5:
            return x * 2
        return x * alpha

    @staticmethod
    def backward(ctx, g):
        return g * ctx.alpha, None


def _nets():
    torch.manual_seed(0)
    return nn.Linear(4, 6), nn.Linear(6, 3)


def _train(fn, alphas, grad=True):
    """fn(feat, head, x, a) over a schedule of a, compiled and eager on copies: results, gradients
    and the RNG state after each step the same."""
    nets_c, nets_e = _nets(), _nets()
    g = mlircap.compile(fn)
    for i, a in enumerate(alphas):
        torch.manual_seed(100 + i)
        x = torch.randn(5, 4)
        out = g(*nets_c, x, a)
        rng = torch.get_rng_state()
        torch.manual_seed(100 + i)
        x = torch.randn(5, 4)
        want = fn(*nets_e, x, a)
        assert torch.allclose(out, want, rtol=1e-5, atol=1e-6), i
        assert torch.equal(rng, torch.get_rng_state()), i
        if grad:
            for p, q in zip([p for n in nets_c for p in n.parameters()], [p for n in nets_e for p in n.parameters()]):
                assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6), i
                p.grad = q.grad = None
    return g.explain()


_ANNEAL = [max(0.5, 1.0 * 0.85 ** i) for i in range(7)]


def _gumbel_step(feat, head, x, tau):
    y = F.gumbel_softmax(feat(x), tau=tau)
    loss = head(y).pow(2).mean()
    loss.backward()
    return loss.detach()


def test_gumbel_softmax_annealed_tau_is_a_graph_input():
    # before: the second value made the call a step between graphs (a break) on every later call
    ex = _train(_gumbel_step, _ANNEAL)
    assert ex.variants <= 2 and all("gumbel" not in r for r, _ in ex.breaks), ex


def _reverse_step(feat, head, x, alpha):
    h = torch.relu(feat(x))
    loss = head(_GradReverse.apply(h, alpha)).pow(2).mean()
    loss.backward()
    return loss.detach()


def test_autograd_function_scheduled_alpha_is_a_graph_input():
    # before: alpha guarded by value, a new variant per step
    ex = _train(_reverse_step, [2.0 / (1.0 + 2.718 ** (-0.5 * i)) - 1 for i in range(6)])
    assert ex.variants == 1, ex.recompile_reasons


def _branchy_step(feat, head, x, alpha):
    loss = head(_Branchy.apply(torch.relu(feat(x)), alpha)).pow(2).mean()
    loss.backward()
    return loss.detach()


def test_autograd_function_branching_on_alpha_stays_right():
    _train(_branchy_step, [0.3, 0.8, 0.2, 0.9, 0.55, 0.05])


@pytest.mark.parametrize("fn", [
    lambda x, v: F.dropout(x, p=v * 0.5, training=True),
    lambda x, v: F.rrelu(x, lower=v * 0.1, upper=0.3, training=True),
    lambda x, v: F.hardtanh(x, -v, v),
    lambda x, v: F.softplus(x, beta=v + 0.5),
    lambda x, v: F.huber_loss(x, x * 0.3, delta=v + 0.1, reduction="none"),
    lambda x, v: torch.pow(x.abs() + 1, v),
    lambda x, v: F.scaled_dot_product_attention(x[None], x[None], x[None], scale=v + 0.1)[0],
], ids=["dropout", "rrelu", "hardtanh", "softplus", "huber", "pow", "sdpa_scale"])
def test_floats_into_torch_functions_match_eager(fn):
    def f(feat, head, x, v):
        return head(fn(feat(x), v).relu() + 1)
    ex = _train(f, [0.3, 0.8, 0.2, 0.9, 0.55, 0.05], grad=False)
    assert ex.variants <= 2


def test_float_into_a_function_writing_its_tensors():
    # F.batch_norm writes the running statistics in place: the call made on copies first must
    # not write them twice, and the replay's writes are eager's
    bn_c, bn_e = nn.BatchNorm1d(6), nn.BatchNorm1d(6)

    def f(bn, x, m):
        return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, True, m, 1e-5).tanh()
    g = mlircap.compile(f)
    for i, m in enumerate([0.1, 0.2, 0.05, 0.3, 0.15]):
        x = torch.randn(8, 6)
        assert torch.allclose(g(bn_c, x, m), f(bn_e, x, m), rtol=1e-5, atol=1e-6), i
        assert torch.allclose(bn_c.running_mean, bn_e.running_mean, rtol=1e-6, atol=1e-7), i
        assert torch.allclose(bn_c.running_var, bn_e.running_var, rtol=1e-6, atol=1e-7), i
