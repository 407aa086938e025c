"""bench/modules13.py's second half (its CASES are appended to modules13.CASES; run it through
modules13.py): tensor_split by a tensor of indices or sections, module hooks that change values
(forward / forward-pre / full backward / backward-pre hooks, Opacus-style per-sample gradients by
hooks, DropConnect by a pre-hook, a hook registered inside forward), torch.utils.checkpoint, and
module-state idioms (PINN second derivatives, EWC, evolution strategies by
vector_to_parameters, functional_call with tied weights, vmap over a module)."""
from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, grad_ctx, registrars
from torch.func import functional_call, grad, jacrev, vmap
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _mlp(i=4, h=8, o=1):
    return nn.Sequential(nn.Linear(i, h), nn.Tanh(), nn.Linear(h, o))


# ============================================================================ tensor_split
@fn_case("tensor_split_tensor_of_indices", lambda: (R(9, 3), torch.tensor([2, 5, 5])))
def _ts_idx(x, idx):
    return [t.sum(0) for t in torch.tensor_split(x, idx)]


@fn_case("tensor_split_zero_dim_tensor_sections_dim1", lambda i=0: (R(2, 7 + i), torch.tensor(3)))
def _ts_sec(x, n):
    return torch.stack([c.mean(1) for c in x.tensor_split(n, dim=1)], 1)


@fn_case("tensor_split_indices_from_cumsum_lengths", lambda: (R(10, 2), torch.tensor([3, 1, 4, 2])))
def _ts_cumsum(x, lengths):
    parts = torch.tensor_split(x, lengths.cumsum(0)[:-1])
    return torch.stack([p.max(0).values for p in parts]), len(parts)


@fn_case("split_by_lengths_tolist_pad_sequence", lambda: (R(10, 2), torch.tensor([3, 1, 4, 2])))
def _split_tolist(x, lengths):
    parts = torch.split(x, lengths.tolist())
    return nn.utils.rnn.pad_sequence(list(parts), batch_first=True)


# ============================================================================ hooks
class ForwardHookScale(nn.Module):
    """A forward hook replacing a layer's output (activation clamp), a forward pre-hook with
    kwargs rewriting an input, a hook that records each block's output mean in a dict."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 2)
        self.stats = {}
        self.a.register_forward_hook(lambda m, inp, out: out.clamp(-0.5, 0.5))
        self.b.register_forward_pre_hook(lambda m, args, kw: ((args[0] * 2,), kw), with_kwargs=True)
        for n, mod in (("a", self.a), ("b", self.b)):
            mod.register_forward_hook(functools.partial(self._record, n))   # (a deep copy's hook is the copy's)

    def _record(self, name, m, inp, out):
        self.stats[name] = out.detach().mean()

    def forward(self, x):
        return self.b(F.relu(self.a(x))), dict(self.stats)


case("forward_hook_replace_output_pre_hook_kwargs_stats", lambda: (R(3, 4),))(lambda: ForwardHookScale())


class BackwardHooks(nn.Module):
    """A full backward hook scaling grad_input, a backward pre-hook clipping grad_output,
    Tensor.register_hook on an activation; a training step inside forward."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 1)
        self.a.register_full_backward_hook(lambda m, gi, go: tuple(g * 0.5 if g is not None else None for g in gi))
        self.b.register_full_backward_pre_hook(lambda m, go: (go[0].clamp(-0.1, 0.1),))

    def forward(self, x, y):
        x = x.requires_grad_(True)
        h = torch.tanh(self.a(x))
        h.register_hook(lambda g: g / (g.norm() + 1e-3))
        loss = F.mse_loss(self.b(h), y)
        self.zero_grad()
        loss.backward()
        return loss.detach(), x.grad


case("full_backward_hook_pre_hook_tensor_hook_train", lambda: (R(3, 4), R(3, 1)), train=True,
     context=grad_ctx)(lambda: BackwardHooks())


def _toggle_hook(m, i):
    if i == 1:
        m.h = m.a.register_forward_hook(lambda mod, inp, out: out * 3)
    elif i == 3:
        m.h.remove()


case("forward_hook_added_then_removed_ncalls5", lambda: (R(3, 4),), ncalls=5, between=_toggle_hook)(
    lambda: ForwardHookScale())


class GlobalHook(nn.Module):
    """A hook that keeps a running count in a module attribute (int) and a buffer, changing
    the output by the count: state written by a hook on every call."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)
        self.calls = 0
        self.register_buffer("acc", torch.zeros(3))
        self.l.register_forward_hook(self._hook)

    def _hook(self, m, inp, out):
        self.calls += 1
        self.acc.add_(out.detach().mean(0))
        return out + self.calls

    def forward(self, x):
        return self.l(x)


case("forward_hook_counts_calls_writes_buffer", lambda: (R(2, 3),), ncalls=4)(lambda: GlobalHook())


# ============================================================================ checkpoint
class Ckpt(nn.Module):
    """Activation checkpointing: checkpoint(use_reentrant=False) around blocks with dropout (RNG
    state preserved), checkpoint_sequential over a Sequential, a train step inside."""

    def __init__(self, seq=False):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Dropout(0.2)) for _ in range(4)])
        self.head, self.seq = nn.Linear(6, 1), seq

    def forward(self, x, y):
        if self.seq:
            h = checkpoint_sequential(self.blocks, 2, x, use_reentrant=False)
        else:
            h = x
            for b in self.blocks:
                h = checkpoint(b, h, use_reentrant=False)
        loss = F.mse_loss(self.head(h), y)
        self.zero_grad()
        loss.backward()
        return loss.detach()


case("checkpoint_non_reentrant_dropout_train_step", lambda: (R(4, 6), R(4, 1)), train=True,
     context=grad_ctx)(lambda: Ckpt())
case("checkpoint_sequential_segments_train_step", lambda: (R(4, 6), R(4, 1)), train=True,
     context=grad_ctx)(lambda: Ckpt(seq=True))


class CkptFn(nn.Module):
    """checkpoint of a plain function with kwargs and a non-tensor argument, in eval mode (no
    backward): the output must equal the unwrapped function's."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        f = lambda h, scale, act="tanh": getattr(torch, act)(self.l(h)) * scale  # noqa: E731
        return checkpoint(f, x, 2.0, act="sigmoid", use_reentrant=False)


case("checkpoint_function_kwargs_eval", lambda: (R(3, 4),))(lambda: CkptFn())


# ============================================================================ more module-state idioms
class PINN(nn.Module):
    """Physics-informed loss: u(x, t) by an MLP, u_t, u_x and u_xx by autograd.grad with
    create_graph=True, a Burgers residual, backward into the parameters."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, xt):
        xt = xt.clone().requires_grad_(True)
        u = self.net(xt)
        du = torch.autograd.grad(u.sum(), xt, create_graph=True)[0]
        u_x, u_t = du[:, :1], du[:, 1:]
        u_xx = torch.autograd.grad(u_x.sum(), xt, create_graph=True)[0][:, :1]
        res = u_t + u * u_x - 0.01 / torch.pi * u_xx
        loss = res.pow(2).mean()
        self.zero_grad()
        loss.backward()
        return loss.detach(), u.detach()


case("pinn_burgers_second_derivative_create_graph", lambda: (R(6, 2),), train=True, context=grad_ctx)(lambda: PINN())


class OpacusHooks(nn.Module):
    """Opacus-style per-sample gradients by hooks: a forward hook keeps each Linear's input, a
    full backward hook its grad_output, per-sample weight gradients by einsum."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(4, 5), nn.Linear(5, 1)
        self.acts, self.psg = {}, {}
        for n, m in (("l1", self.l1), ("l2", self.l2)):
            m.register_forward_hook(functools.partial(self._save_act, n))
            m.register_full_backward_hook(functools.partial(self._save_grad, n))

    def _save_act(self, name, m, inp, out):
        self.acts[name] = inp[0].detach()

    def _save_grad(self, name, m, gi, go):
        self.psg[name] = torch.einsum("bo,bi->boi", go[0], self.acts[name])

    def forward(self, x, y):
        loss = F.mse_loss(self.l2(torch.relu(self.l1(x))), y, reduction="sum")
        self.zero_grad()
        loss.backward()
        return loss.detach(), self.psg["l1"].norm(dim=(1, 2)), self.psg["l2"].sum(0)


case("opacus_hooks_per_sample_grads_einsum", lambda: (R(4, 4), R(4, 1)), train=True, context=grad_ctx)(
    lambda: OpacusHooks())


class WeightDrop(nn.Module):
    """DropConnect by a forward pre-hook: the raw weight kept as a parameter, the module's
    weight set to a dropped copy before each forward (AWD-LSTM's WeightDrop on a Linear)."""

    def __init__(self, p=0.3):
        super().__init__()
        self.l = nn.Linear(5, 3)
        self.raw = nn.Parameter(self.l.weight.detach().clone())
        del self.l.weight
        self.p = p
        self.l.register_forward_pre_hook(self._drop)

    def _drop(self, m, args):
        m.weight = F.dropout(self.raw, self.p, self.training)

    def forward(self, x):
        return self.l(x)


case("weight_drop_forward_pre_hook_sets_weight_eval", lambda: (R(3, 5),))(lambda: WeightDrop())
case("weight_drop_forward_pre_hook_sets_weight_train", lambda: (R(3, 5),), train=True)(lambda: WeightDrop())


class VecParams(nn.Module):
    """Evolution strategies: parameters_to_vector, antithetic perturbations from a generator,
    vector_to_parameters into the module for each evaluation, the mean restored and stepped."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(3, 4, 1)
        self.gen = torch.Generator().manual_seed(7)

    @torch.no_grad()
    def forward(self, x, y):
        theta = nn.utils.parameters_to_vector(self.net.parameters())
        eps = torch.randn(3, theta.numel(), generator=self.gen)
        scores = []
        for e in torch.cat([eps, -eps]):
            nn.utils.vector_to_parameters(theta + 0.1 * e, self.net.parameters())
            scores.append(-F.mse_loss(self.net(x), y))
        s = torch.stack(scores)
        g = ((s[:3] - s[3:])[:, None] * eps).mean(0)
        nn.utils.vector_to_parameters(theta + 0.05 * g, self.net.parameters())
        return s


case("evolution_strategies_vector_to_parameters", lambda: (R(5, 3), R(5, 1)), ncalls=4)(lambda: VecParams())


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.dec = nn.Linear(4, 7, bias=False)
        self.dec.weight = self.emb.weight

    def forward(self, ids):
        return self.dec(self.emb(ids))


class TiedFunctionalCall(nn.Module):
    """functional_call on a model with tied weights (decoder.weight is embedding.weight): one
    replacement for the tied tensor (tie_weights=True), strict=True with every name given."""

    def __init__(self):
        super().__init__()
        self.lm = TiedLM()

    def forward(self, ids):
        w = self.lm.emb.weight * 0.5
        a = functional_call(self.lm, {"emb.weight": w}, (ids,))
        b = functional_call(self.lm, {"emb.weight": w, "dec.weight": w}, (ids,), strict=True)
        return a, b, self.lm(ids)


case("functional_call_tied_weights_strict", lambda: (I(0, 7, 2, 3),))(lambda: TiedFunctionalCall())


@fn_case("jacrev_has_aux_and_vmap_randomness_same", lambda: (R(4, 3),))
def _jac_aux(x):
    j, aux = jacrev(lambda z: (z.sin() * 2, z.sum()), has_aux=True)(x[0])
    y = vmap(lambda r: F.dropout(r, 0.5, training=True), randomness="same")(x)
    return j, aux, (y == 0).sum(1)


class VmapModule(nn.Module):
    """vmap over a module called directly (a batch of sequences through a GRU-free MLP with
    LayerNorm), in_dims=1 and out_dims=1, and vmap of a method with a None input."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.GELU(), nn.Linear(6, 2))

    def step(self, x, scale):
        return self.mlp(x) * scale

    def forward(self, x, s):
        a = vmap(self.mlp, in_dims=1, out_dims=1)(x)
        b = vmap(self.step, in_dims=(0, None))(x, s)
        return a, b


case("vmap_over_module_and_method_in_out_dims", lambda: (R(3, 5, 4), R(())))(lambda: VmapModule())


class EWC(nn.Module):
    """Elastic weight consolidation: a diagonal Fisher from per-sample gradients (vmap(grad)),
    kept in buffers with the anchor weights, the penalty added to the next task's loss."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(3, 5, 2)
        for n, p in self.net.named_parameters():
            self.register_buffer("fisher_" + n.replace(".", "_"), torch.zeros_like(p))
            self.register_buffer("anchor_" + n.replace(".", "_"), p.detach().clone())

    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}
        lp = lambda p, xi, yi: F.cross_entropy(functional_call(self.net, p, (xi[None],)), yi[None])  # noqa: E731
        g = vmap(grad(lp), in_dims=(None, 0, 0))(params, x, y)
        pen = 0.0
        for k, v in g.items():
            key = k.replace(".", "_")
            f = getattr(self, "fisher_" + key)
            f.mul_(0.9).add_(0.1 * v.pow(2).mean(0))
            pen = pen + (f * (self.net.get_parameter(k) - getattr(self, "anchor_" + key)).pow(2)).sum()
        return F.cross_entropy(self.net(x), y) + 100 * pen


case("ewc_fisher_per_sample_grads_buffers_penalty", lambda: (R(4, 3), I(0, 2, 4)), train=True, ncalls=4)(
    lambda: EWC())


class HookInsideForward(nn.Module):
    """A hook registered and removed inside forward (feature extraction for one call: Grad-CAM
    style activations and gradients of a chosen layer), a torch.no_grad-free backward."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.head = nn.Linear(3, 4)

    def forward(self, x):
        store = {}
        h1 = self.conv.register_forward_hook(lambda m, i, o: store.__setitem__("a", o))
        feats = F.relu(self.conv(x))
        h1.remove()
        store["a"].retain_grad()
        logits = self.head(feats.mean((2, 3)))
        logits[:, 0].sum().backward(inputs=[store["a"]])
        w = store["a"].grad.mean((2, 3), keepdim=True)
        return logits.detach(), F.relu((w * store["a"]).sum(1)).detach()


case("grad_cam_hook_registered_inside_forward_retain_grad", lambda: (R(2, 2, 5, 5),), context=grad_ctx)(
    lambda: HookInsideForward())
