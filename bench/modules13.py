"""Thirteenth real-world-style corpus (issue 11 capture): functorch and module-state idioms.

Written the way public repositories write them: torch.func transforms over modules (per-sample
gradients by vmap(grad(functional_call)), grad_and_value with aux outputs, jacrev / jacfwd /
hessian of small functions and of a model's parameters, NTK by jacrev over parameters, vjp / jvp,
hessian-vector products), model ensembles (torch.func.stack_module_state + vmap over a meta-device
base model, one or many minibatches), meta-learning inner loops (MAML with create_graph=True,
ANIL, Reptile, MAML with torch.func.grad), DP-SGD per-sample clipping, nn.utils.parametrize on
deep-copied modules (custom parametrizations, several on one tensor, right_inverse assignments,
orthogonal / weight_norm / spectral_norm); bench/modules13_state.py adds tensor_split by a
tensor of indices or sections, module hooks that change values (forward / forward-pre / full
backward / backward-pre hooks, Tensor.register_hook, per-sample gradients by hooks),
torch.utils.checkpoint (non-reentrant, checkpoint_sequential, with dropout's RNG preserved) and
more module-state idioms.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as P
from corpus_cases import I, R, grad_ctx, registrars, run
from torch.func import (functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, stack_module_state,
                        vjp, vmap)

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _mlp(i=4, h=8, o=1):
    return nn.Sequential(nn.Linear(i, h), nn.Tanh(), nn.Linear(h, o))


# ============================================================================ per-sample gradients
class PerSampleGrads(nn.Module):
    """Opacus-style per-sample gradients: vmap(grad(loss over functional_call)) with detached
    parameters, the per-sample gradient norms returned."""

    def __init__(self, loss="mse"):
        super().__init__()
        self.net, self.loss = _mlp(), loss

    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def one(p, xi, yi):
            out = functional_call(self.net, p, (xi.unsqueeze(0),))
            return F.mse_loss(out, yi.unsqueeze(0)) if self.loss == "mse" else F.smooth_l1_loss(out, yi.unsqueeze(0))

        g = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.stack([v.flatten(1).norm(dim=1) for v in g.values()], 1).norm(dim=1)
        return g, norms


case("per_sample_grads_vmap_grad_functional_call", lambda: (R(6, 4), R(6, 1)))(lambda: PerSampleGrads())
case("per_sample_grads_smooth_l1_train_mode", lambda: (R(5, 4), R(5, 1)), train=True)(lambda: PerSampleGrads("l1"))


class DPSGDStep(nn.Module):
    """DP-SGD: per-sample gradients, each clipped to norm C, summed, Gaussian noise from an
    explicit generator, averaged and applied under no_grad."""

    def __init__(self, clip=0.5, sigma=0.1):
        super().__init__()
        self.net, self.clip, self.sigma = _mlp(), clip, sigma
        self.gen = torch.Generator().manual_seed(3)

    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}
        loss = lambda p, xi, yi: F.mse_loss(functional_call(self.net, p, (xi[None],)), yi[None])  # noqa: E731
        g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        n = torch.stack([v.flatten(1).norm(dim=1) for v in g.values()], 1).norm(dim=1)
        factor = (self.clip / (n + 1e-6)).clamp(max=1.0)
        with torch.no_grad():
            for (k, p), v in zip(self.net.named_parameters(), g.values()):
                noisy = torch.einsum("b,b...->...", factor, v)
                noisy = noisy + self.sigma * self.clip * torch.randn(p.shape, generator=self.gen)
                p.sub_(0.1 * noisy / x.shape[0])
        return n


case("dp_sgd_clip_noise_generator_update_params", lambda: (R(6, 4), R(6, 1)), ncalls=4)(lambda: DPSGDStep())


class GradAndValueAux(nn.Module):
    """torch.func.grad_and_value with has_aux over a dict of parameters; an SGD step by hand."""

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


case("grad_and_value_has_aux_sgd_new_params", lambda: (R(5, 4), I(0, 3, 5)))(lambda: GradAndValueAux())


# ============================================================================ ensembles
class Ensemble(nn.Module):
    """stack_module_state over N members kept in a ModuleList, a meta-device copy as the
    stateless base, vmap over the stacked parameters (same minibatch or one per member)."""

    def __init__(self, n=4, per_member=False, bn=False):
        super().__init__()
        mk = (lambda: nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))) if bn else \
            (lambda: _mlp(4, 6, 2))
        self.members = nn.ModuleList([mk() for _ in range(n)])
        self.per_member = per_member

    def forward(self, x):
        params, buffers = stack_module_state(list(self.members))
        base = copy.deepcopy(self.members[0]).to("meta")

        def call(p, b, xb):
            return functional_call(base, (p, b), (xb,))

        out = vmap(call, in_dims=(0, 0, 0 if self.per_member else None))(params, buffers, x)
        return out.mean(0), out.std(0)


case("ensemble_stack_module_state_vmap_same_batch", lambda: (R(3, 4),))(lambda: Ensemble())
case("ensemble_stack_module_state_vmap_per_member_batch", lambda: (R(4, 3, 4),))(lambda: Ensemble(per_member=True))
case("ensemble_stack_module_state_batchnorm_eval", lambda: (R(3, 4),))(lambda: Ensemble(bn=True))


class EnsembleLoop(nn.Module):
    """An ensemble written as a Python loop over members with functional_call and a shared
    parameter dict per member (no vmap), outputs stacked and the disagreement returned."""

    def __init__(self, n=3):
        super().__init__()
        self.members = nn.ModuleList([_mlp(4, 5, 2) for _ in range(n)])

    def forward(self, x):
        outs = [functional_call(self.members[0], dict(m.named_parameters()), (x,)) for m in self.members]
        o = torch.stack(outs)
        return o.mean(0), (o - o.mean(0)).pow(2).mean()


case("ensemble_python_loop_functional_call_shared_base", lambda: (R(3, 4),), train=True)(lambda: EnsembleLoop())


class EnsembleTrain(nn.Module):
    """Ensemble training: stacked parameters as leaves, vmap'd loss, autograd.grad with respect
    to the stacked tensors, an SGD update that writes back into every member."""

    def __init__(self, n=3):
        super().__init__()
        self.members = nn.ModuleList([_mlp(4, 5, 1) for _ in range(n)])

    def forward(self, x, y):
        params, _ = stack_module_state(list(self.members))
        base = copy.deepcopy(self.members[0]).to("meta")
        out = vmap(lambda p: functional_call(base, p, (x,)))(params)
        loss = F.mse_loss(out, y.expand_as(out), reduction="none").mean((1, 2)).sum()
        gs = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for (k, _), g in zip(params.items(), gs):
                for j, m in enumerate(self.members):
                    m.get_parameter(k).sub_(0.1 * g[j])
        return loss.detach()


case("ensemble_stacked_autograd_grad_write_back", lambda: (R(5, 4), R(5, 1)), ncalls=4,
     context=grad_ctx)(lambda: EnsembleTrain())


# ============================================================================ jacobians / hessians
@fn_case("jacrev_hessian_of_small_function_argnums", lambda: (R(3), R(3)))
def _jac_argnums(x, y):
    f = lambda a, b: (a.sin() * b + a * b.cos()).tanh()  # noqa: E731
    ja, jb = jacrev(f, argnums=(0, 1))(x, y)
    return ja, jb, hessian(lambda a: (a ** 3 * y).sum())(x)


@fn_case("jacfwd_of_jacrev_vs_hessian_rosenbrock", lambda: (R(4),))
def _rosen(x):
    f = lambda z: (100 * (z[1:] - z[:-1] ** 2) ** 2 + (1 - z[:-1]) ** 2).sum()  # noqa: E731
    return jacfwd(jacrev(f))(x), hessian(f)(x), grad(f)(x)


@fn_case("vmap_jacrev_batched_jacobian", lambda: (R(5, 3),))
def _batched_jac(x):
    w = torch.linspace(-1, 1, 9).view(3, 3)
    return vmap(jacrev(lambda z: torch.tanh(w @ z) + z ** 2))(x)


@fn_case("autograd_functional_jacobian_hessian_hvp", lambda: (R(3), R(3)))
def _af(x, v):
    f = lambda z: (z.exp() * z.sin()).sum()  # noqa: E731
    j = torch.autograd.functional.jacobian(lambda z: z.exp() * z.sin(), x)
    h = torch.autograd.functional.hessian(f, x)
    _, hv = torch.autograd.functional.hvp(f, x, v)
    return j, h, hv


@fn_case("vjp_jvp_hvp_forward_over_reverse", lambda: (R(4), R(4)))
def _fwd_over_rev(x, v):
    f = lambda z: (z.sin() * z.cos().exp()).sum()  # noqa: E731
    _, hvp = jvp(grad(f), (x,), (v,))
    out, pull = vjp(lambda z: z.tanh() * 2, x)
    return hvp, out, pull(v)[0]


class ModelJacobian(nn.Module):
    """jacrev of a model's output with respect to its parameters (functional_call), the
    empirical NTK as a contraction of the two Jacobians over every parameter."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(3, 5, 2)

    def forward(self, x1, x2):
        params = {k: v.detach() for k, v in self.net.named_parameters()}
        f = lambda p, x: functional_call(self.net, p, (x,))  # noqa: E731
        j1 = jacrev(f)(params, x1)
        j2 = jacrev(f)(params, x2)
        ntk = sum(torch.einsum("Naf,Mbf->NMab", a.flatten(2), b.flatten(2)) for a, b in zip(j1.values(), j2.values()))
        return ntk


case("ntk_jacrev_params_functional_call_einsum", lambda: (R(3, 3), R(2, 3)))(lambda: ModelJacobian())


class InputGradPenalty(nn.Module):
    """Jacobian regularisation / gradient penalty: autograd.grad of the output wrt the input
    with create_graph=True, its squared norm added to the loss, backward into the parameters."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 8, 1)

    def forward(self, x):
        x = x.requires_grad_(True)
        out = self.net(x)
        (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        loss = out.mean() + 10 * ((gx.norm(2, dim=1) - 1) ** 2).mean()
        self.net.zero_grad()
        loss.backward()
        return loss.detach(), gx.detach()


case("gradient_penalty_create_graph_backward_params", lambda: (R(5, 4),), train=True, context=grad_ctx)(
    lambda: InputGradPenalty())


# ============================================================================ meta-learning
class MAML(nn.Module):
    """MAML: inner steps by autograd.grad(create_graph=True) on fast weights held in a dict,
    query loss through functional_call, meta-gradient by backward, outer SGD step."""

    def __init__(self, steps=2, first_order=False, anil=False):
        super().__init__()
        self.body, self.head = nn.Sequential(nn.Linear(3, 6), nn.ReLU()), nn.Linear(6, 2)
        self.steps, self.first_order, self.anil = steps, first_order, anil

    def forward(self, xs, ys, xq, yq):
        fast = dict(self.head.named_parameters())
        feats_s = self.body(xs)
        for _ in range(self.steps):
            loss = F.cross_entropy(functional_call(self.head, fast, (feats_s,)), ys)
            gs = torch.autograd.grad(loss, list(fast.values()), create_graph=not self.first_order)
            fast = {k: w - 0.4 * g for (k, w), g in zip(fast.items(), gs)}
        qloss = F.cross_entropy(functional_call(self.head, fast, (self.body(xq),)), yq)
        self.zero_grad()
        qloss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p.sub_(0.05 * p.grad)
        return qloss.detach()


_maml_in = lambda: (R(6, 3), I(0, 2, 6), R(4, 3), I(0, 2, 4))  # noqa: E731
case("maml_head_create_graph_two_inner_steps", _maml_in, train=True, ncalls=4, context=grad_ctx)(lambda: MAML())
case("maml_first_order_three_steps", _maml_in, train=True, ncalls=4, context=grad_ctx)(
    lambda: MAML(3, first_order=True))


class MAMLFunc(nn.Module):
    """MAML by torch.func: the inner adaptation is grad over functional_call, the outer loss
    differentiated by a second grad (second-order through the inner step)."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(2, 8, 1)

    def forward(self, xs, ys, xq, yq):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def inner(p):
            return F.mse_loss(functional_call(self.net, p, (xs,)), ys)

        def outer(p):
            g = grad(inner)(p)
            p2 = {k: p[k] - 0.1 * g[k] for k in p}
            return F.mse_loss(functional_call(self.net, p2, (xq,)), yq)

        return grad_and_value(outer)(params)


case("maml_torch_func_grad_of_grad", lambda: (R(5, 2), R(5, 1), R(4, 2), R(4, 1)))(lambda: MAMLFunc())


class Reptile(nn.Module):
    """Reptile: a deep copy of the model trained k steps with a real torch.optim.SGD made inside,
    the outer weights moved toward the adapted ones."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(2, 6, 1)

    def forward(self, x, y):
        inner = copy.deepcopy(self.net)
        opt = torch.optim.SGD(inner.parameters(), lr=0.05)
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(inner(x), y).backward()
            opt.step()
        with torch.no_grad():
            for p, q in zip(self.net.parameters(), inner.parameters()):
                p.add_(0.5 * (q - p))
        return F.mse_loss(self.net(x), y).detach()


case("reptile_deepcopy_inner_sgd_interpolate", lambda: (R(5, 2), R(5, 1)), train=True, ncalls=4,
     context=grad_ctx)(lambda: Reptile())


# ============================================================================ parametrize
class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class PositiveDiag(nn.Module):
    def forward(self, X):
        return X - torch.diag_embed(X.diagonal()) + torch.diag_embed(F.softplus(X.diagonal()))


class Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = nn.Parameter(torch.tensor(s))

    def forward(self, X):
        return X * self.s

    def right_inverse(self, X):
        return X / self.s


class ParamStack(nn.Module):
    """Two parametrizations chained on one weight (Symmetric then PositiveDiag), one with its own
    parameter (Scale) on a bias; the model is deep-copied by the runner (the copy's
    parametrizations are new objects)."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(4, 4), nn.Linear(4, 3)
        P.register_parametrization(self.l1, "weight", Symmetric())
        P.register_parametrization(self.l1, "weight", PositiveDiag())
        P.register_parametrization(self.l2, "bias", Scale(2.0))

    def forward(self, x):
        return self.l2(F.gelu(self.l1(x))), self.l1.weight.diagonal()


case("parametrize_two_chained_and_scale_param_deepcopied", lambda: (R(3, 4),), train=True)(lambda: ParamStack())


def _assign_weight(m, i):
    if i == 2:
        with torch.no_grad():
            m.l2.bias = torch.full((3,), 0.5)     # goes through Scale.right_inverse


case("parametrize_right_inverse_assignment_between_calls", lambda: (R(3, 4),), ncalls=4,
     between=_assign_weight)(lambda: ParamStack())


class ParamTrainStep(nn.Module):
    """A training step through parametrized weights (orthogonal and weight_norm from
    torch.nn.utils.parametrizations), gradients reaching original0 / original1."""

    def __init__(self):
        super().__init__()
        from torch.nn.utils.parametrizations import orthogonal, weight_norm
        self.a = orthogonal(nn.Linear(4, 4))
        self.b = weight_norm(nn.Linear(4, 2))

    def forward(self, x, y):
        loss = F.mse_loss(self.b(torch.tanh(self.a(x))), y)
        self.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p.sub_(0.1 * p.grad)
        return loss.detach()


case("parametrizations_orthogonal_weight_norm_train_step", lambda: (R(5, 4), R(5, 2)), train=True, ncalls=4,
     context=grad_ctx)(lambda: ParamTrainStep())


class ParamRemove(nn.Module):
    """parametrize.cached() over two uses of one parametrized layer, then a functional_call that
    replaces the parametrization's original tensor (the parametrization still applies)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)
        P.register_parametrization(self.l, "weight", Symmetric())

    def forward(self, x):
        with P.cached():
            y = self.l(self.l(x).relu())
        z = functional_call(self.l, {"parametrizations.weight.original": torch.eye(3) * 2}, (x,))
        return y, z


case("parametrize_cached_and_functional_call_override", lambda: (R(2, 3),))(lambda: ParamRemove())


# the hooks, checkpoint, tensor_split and module-state cases: bench/modules13_state.py (same CASES list)
import modules13_state  # noqa: E402

CASES += modules13_state.CASES


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
