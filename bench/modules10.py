"""Tenth real-world-style corpus (issue 10 trust): domains and idioms modules.py .. modules9.py leave out.

Written the way public repositories write them: training steps with torch.optim inside the compiled
function (RMSprop / Adagrad / NAdam / RAdam / fused Adam, param groups, gradient accumulation over
micro-batches, clip_grad_value_, CPU bf16 autocast, EMA of weights by _foreach_lerp_, schedulers),
parametrizations (custom, orthogonal, weight_norm, spectral_norm, cached), torch.func
(functional_call, grad, vmap per-sample gradients, jacrev, hessian, jvp), hooks added and removed
between calls, attributes changed between calls (dropout p, scales, layer lists, momentum=None
BatchNorm), buffers updated in place (counters, KV caches by index_copy_ / slice writes),
load_state_dict between calls, nested ModuleDict / ParameterDict and string / enum dispatch,
tokenizer-free text (n-gram hashing with integer ops, EmbeddingBag offsets), time series (rolling
windows by unfold, EWMA loops, causal dilated convs, RevIN), scatter_reduce / index_reduce with
include_self=False, integer and bitwise arithmetic (negative floor division, shifts, int32 / int64
wraparound, uint8 image math), float64 programs, complex numbers and FFT convolution, torch.linalg,
torch.distributions with seeded sampling, sorting / searchsorted / bucketize / unique_consecutive,
calls repeated with new shapes, dtypes, Python values and layouts; then edge semantics (shifts
past the bit width, float -> int conversions out of range, integer division by zero, rounding
modes, NaN / inf, 0-d tensors where torch reads an int, bf16 / fp16 rounding and reductions),
inputs written in place and aliased outputs, autograd inside the function (GAN / WGAN-GP / A2C /
DQN steps, losses kept across calls or summed without detaching, gradient hooks, backward with
inputs= / retain_graph, closures), Python state across calls (queues, caches, explicit
generators, manual_seed, .data rebinding, lazily registered buffers, recursion over trees,
*args / **kwargs) and library ops less travelled (max_norm embeddings, ensembles by
stack_module_state, grid_sample, fold / unfold, CTC, cdist p, einsum diagonals, index_put_
accumulate, packed sequences, antialiased interpolation).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars, run


CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================ training steps with torch.optim
class OptStep(nn.Module):
    """forward + loss + backward + optimizer.step inside the compiled function, the optimizer
    made by `make(params)`; returns the detached loss and a copy of the first weight."""

    def __init__(self, make, clip=None, loss="mse"):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 3))
        self.opt = make(self.net.parameters())
        self.clip = clip
        self.loss = loss

    def forward(self, x, y):
        self.opt.zero_grad()
        out = self.net(x)
        loss = F.mse_loss(out, y) if self.loss == "mse" else F.smooth_l1_loss(out, y, beta=0.5)
        loss.backward()
        if self.clip == "value":
            nn.utils.clip_grad_value_(self.net.parameters(), 0.05)
        elif self.clip == "norm":
            nn.utils.clip_grad_norm_(self.net.parameters(), 0.3, norm_type=2.0, foreach=True)
        self.opt.step()
        return loss.detach(), self.net[0].weight.detach().clone()


def _xy(i=0):
    return R(6, 5), R(6, 3)


case("optim_rmsprop_centered_momentum_clip_value", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.RMSprop(p, lr=1e-2, alpha=0.9, centered=True, momentum=0.5), clip="value"))
case("optim_adagrad_lr_decay_initial_accumulator", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)))
case("optim_nadam_decoupled_weight_decay_momentum_decay", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.NAdam(p, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True), clip="norm"))
case("optim_radam_rectification_warmup_steps", _xy, train=True, ncalls=7)(
    lambda: OptStep(lambda p: torch.optim.RAdam(p, lr=1e-2), loss="huber"))
case("optim_adam_fused_cpu_amsgrad", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, fused=True)))
case("optim_adamax_foreach_false", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.Adamax(p, lr=1e-2, foreach=False)))
case("optim_asgd_averaging_t0", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.ASGD(p, lr=1e-2, t0=1)))
case("optim_rprop_sign_etas_step_sizes", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.Rprop(p, lr=1e-2)))
case("optim_adadelta_rho_weight_decay_maximize", _xy, train=True, ncalls=4)(
    lambda: OptStep(lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.8, weight_decay=1e-2, maximize=True)))


class ParamGroupsStep(nn.Module):
    """Two param groups (no weight decay for biases and norms, another lr for the head), AdamW,
    the lr of group 1 changed in place by a cosine schedule computed from a Python step counter."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.SiLU())
        self.head = nn.Linear(8, 2)
        decay = [p for n, p in self.body.named_parameters() if p.ndim == 2]
        no_decay = [p for n, p in self.body.named_parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                      {"params": no_decay, "weight_decay": 0.0},
                                      {"params": self.head.parameters(), "lr": 3e-2}], lr=1e-2)
        self.step_n = 0

    def forward(self, x, y):
        self.step_n += 1
        self.opt.param_groups[2]["lr"] = 3e-2 * 0.5 * (1 + math.cos(math.pi * self.step_n / 10))
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.head(self.body(x)), y)
        loss.backward()
        self.opt.step()
        return loss.detach(), self.opt.param_groups[2]["lr"]


case("optim_param_groups_no_decay_cosine_lr_by_hand", lambda: (R(6, 4), I(0, 2, 6)), train=True, ncalls=4)(
    lambda: ParamGroupsStep())


class GradAccum(nn.Module):
    """Gradient accumulation over micro-batches: x.chunk(k), each loss divided by k and
    backpropagated, one SGD step with momentum after the loop, then the grads zeroed."""

    def __init__(self, k=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9, dampening=0.1)
        self.k = k

    def forward(self, x, y):
        total = 0.0
        for xb, yb in zip(x.chunk(self.k), y.chunk(self.k)):
            loss = F.mse_loss(self.net(xb), yb) / self.k
            loss.backward()
            total = total + loss.detach()
        self.opt.step()
        self.opt.zero_grad()
        return total


case("grad_accumulation_microbatch_chunks_sgd_dampening", lambda i=0: (R(9 - 3 * (i == 2), 4), R(9 - 3 * (i == 2), 1)),
     train=True, ncalls=4)(lambda: GradAccum())


class EpochLossNoDetach(nn.Module):
    """Micro-batches inside the function: each loss backpropagated and summed into a running
    epoch loss without detaching (`epoch_loss += loss`: eager keeps each loss's graph alive, the
    next backward never walks into it), one Adam step after the loop, the sum returned."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-2)

    def forward(self, x, y):
        epoch_loss = 0
        self.opt.zero_grad()
        for xb, yb in zip(x.split(2), y.split(2)):
            loss = F.cross_entropy(self.net(xb), yb)
            loss.backward()
            epoch_loss += loss
        self.opt.step()
        return epoch_loss.detach() / 3


case("epoch_loss_sum_without_detach_one_step", lambda: (R(6, 4), I(0, 2, 6)), train=True, ncalls=4)(
    lambda: EpochLossNoDetach())


class AutocastBF16Step(nn.Module):
    """CPU autocast to bfloat16 around the forward (GradScaler-free), the loss computed in float32
    outside, backward and an SGD step; the bf16 activations returned too."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 4)
        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)

    def forward(self, x, y):
        self.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.relu(self.l1(x))
            out = self.l2(h)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        self.opt.step()
        return loss.detach(), h.detach(), out.dtype


case("autocast_cpu_bf16_forward_fp32_loss_sgd_step", lambda: (R(5, 8), I(0, 4, 5)), train=True)(lambda: AutocastBF16Step())


class EMAForeachLerp(nn.Module):
    """Mean-teacher EMA of weights after each SGD step by torch._foreach_lerp_ over the parameter
    lists (decay warmed up from a Python step counter), the teacher's output returned."""

    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
        self.teacher = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.SGD(self.student.parameters(), lr=0.1)
        self.n = 0

    def forward(self, x, y):
        self.opt.zero_grad()
        F.mse_loss(self.student(x), y).backward()
        self.opt.step()
        self.n += 1
        decay = min(0.99, (1 + self.n) / (10 + self.n))
        with torch.no_grad():
            torch._foreach_lerp_(list(self.teacher.parameters()), list(self.student.parameters()), 1 - decay)
        return self.teacher(x)


case("ema_teacher_foreach_lerp_warmup_decay", lambda: (R(5, 4), R(5, 2)), train=True, ncalls=4)(lambda: EMAForeachLerp())


class CheckpointNonReentrantKwargs(nn.Module):
    """torch.utils.checkpoint (use_reentrant=False) of a block called with a keyword argument and
    a Python float, the loss backpropagated and the input's gradient returned."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(6, 6)
        self.n = nn.LayerNorm(6)

    def block(self, x, scale=1.0):
        return self.n(F.gelu(self.l(x)) * scale) + x

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        x = x.detach().requires_grad_(True)
        h = checkpoint(self.block, x, use_reentrant=False, scale=0.5)
        h = checkpoint(self.block, h, use_reentrant=False)
        h.square().mean().backward()
        return h.detach(), x.grad, self.l.weight.grad.clone()


case("checkpoint_non_reentrant_kwargs_input_grad", lambda: (R(3, 6),), context=grad_ctx)(
    lambda: CheckpointNonReentrantKwargs())


class SchedulerStepInside(nn.Module):
    """MultiStepLR + LinearLR chained (SequentialLR) stepped inside the forward, lr read back."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.l.parameters(), lr=0.2)
        warm = torch.optim.lr_scheduler.LinearLR(self.opt, start_factor=0.25, total_iters=2)
        ms = torch.optim.lr_scheduler.MultiStepLR(self.opt, milestones=[1], gamma=0.5)
        self.sched = torch.optim.lr_scheduler.SequentialLR(self.opt, [warm, ms], milestones=[2])

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = (self.l(x) - y).abs().mean()
        loss.backward()
        self.opt.step()
        self.sched.step()
        return loss.detach(), self.opt.param_groups[0]["lr"], self.l.weight.detach().clone()


case("sequential_lr_linear_warmup_multistep_inside", lambda: (R(4, 3), R(4, 1)), train=True, ncalls=5)(
    lambda: SchedulerStepInside())


# ============================================================ parametrizations
class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class SymmetricParam(nn.Module):
    """nn.utils.parametrize with a custom Symmetric parametrization, read twice in one forward
    (recomputed each time), trained one SGD step."""

    def __init__(self):
        super().__init__()
        import torch.nn.utils.parametrize as P
        self.l = nn.Linear(5, 5)
        P.register_parametrization(self.l, "weight", Symmetric())

    def forward(self, x):
        return self.l(x) + x @ self.l.weight, self.l.weight.sum()


case("parametrize_custom_symmetric_weight_read_twice", lambda: (R(3, 5),))(lambda: SymmetricParam())


class CachedParam(nn.Module):
    """parametrize.cached(): the parametrized weight computed once inside the context and reused by
    two layers sharing it."""

    def __init__(self):
        super().__init__()
        import torch.nn.utils.parametrize as P
        self.l = nn.Linear(4, 4, bias=False)
        P.register_parametrization(self.l, "weight", Symmetric())

    def forward(self, x):
        import torch.nn.utils.parametrize as P
        with P.cached():
            return self.l(self.l(x).tanh()), P.is_parametrized(self.l)


case("parametrize_cached_context_shared_weight", lambda: (R(3, 4),))(lambda: CachedParam())


case("parametrizations_orthogonal_linear_householder", lambda: (R(4, 6),))(
    lambda: nn.utils.parametrizations.orthogonal(nn.Linear(6, 6), orthogonal_map="householder"))
case("parametrizations_orthogonal_matrix_exp_cayley", lambda i=0: (R(2 + i, 5),))(
    lambda: nn.Sequential(nn.utils.parametrizations.orthogonal(nn.Linear(5, 5), orthogonal_map="matrix_exp"),
                          nn.utils.parametrizations.orthogonal(nn.Linear(5, 5, bias=False), orthogonal_map="cayley")))
case("parametrizations_weight_norm_conv1d_dim0", lambda: (R(2, 3, 10),))(
    lambda: nn.utils.parametrizations.weight_norm(nn.Conv1d(3, 4, 3, padding=1), dim=0))
case("parametrizations_spectral_norm_train_power_iteration", lambda: (R(3, 6),), train=True, ncalls=4)(
    lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(6, 4), n_power_iterations=2))
case("parametrizations_spectral_norm_eval_conv2d", lambda: (R(1, 2, 6, 6),))(
    lambda: nn.utils.parametrizations.spectral_norm(nn.Conv2d(2, 3, 3)))


# ============================================================ torch.func
class MAMLInner(nn.Module):
    """MAML inner loop with torch.func.functional_call: support loss, autograd.grad with
    create_graph, fast weights as a dict, query loss on the fast weights, outer grad."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, xs, ys, xq, yq):
        from torch.func import functional_call
        params = dict(self.net.named_parameters())
        for _ in range(2):
            loss = F.mse_loss(functional_call(self.net, params, (xs,)), ys)
            grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
            params = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads)}
        q = F.mse_loss(functional_call(self.net, params, (xq,)), yq)
        outer = torch.autograd.grad(q, list(self.net.parameters()))
        return q.detach(), [g for g in outer]


case("maml_functional_call_create_graph_two_steps", lambda: (R(5, 3), R(5, 1), R(4, 3), R(4, 1)), context=grad_ctx)(
    lambda: MAMLInner())


class PerSampleGrads(nn.Module):
    """Per-sample gradients: torch.func.vmap(grad(loss)) over the batch with the params passed
    in_dims=None, through functional_call; their norms clipped per sample (DP-SGD)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, x, y):
        from torch.func import functional_call, grad, vmap
        params = {k: v.detach() for k, v in self.l.named_parameters()}

        def loss_fn(p, xb, yb):
            out = functional_call(self.l, p, (xb.unsqueeze(0),))
            return F.cross_entropy(out, yb.unsqueeze(0))

        g = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
        factor = (1.0 / norms).clamp(max=1.0)
        return {k: (v * factor.view(-1, *([1] * (v.ndim - 1)))).sum(0) for k, v in g.items()}


case("dp_sgd_per_sample_grads_vmap_grad_clip", lambda: (R(6, 4), I(0, 3, 6)))(lambda: PerSampleGrads())


@fn_case("func_jacrev_hessian_of_small_function", lambda i=0: (R(4 + i),))
def func_jacrev_hessian_of_small_function(x):
    """torch.func.jacrev of a vector function and torch.func.hessian of a scalar energy."""
    from torch.func import hessian, jacrev

    def f(v):
        return torch.sin(v) * v.sum() + v ** 3

    def energy(v):
        return (v.roll(1) * v).sum() + v.pow(4).sum() * 0.25
    return jacrev(f)(x), hessian(energy)(x)


@fn_case("func_jvp_and_vjp_linearize", lambda: (R(5), R(5)))
def func_jvp_and_vjp_linearize(x, t):
    """torch.func.jvp (forward-mode) and torch.func.vjp of the same function."""
    from torch.func import jvp, vjp

    def f(v):
        return torch.tanh(v) * v.exp() + v.cumsum(0)
    out, tangent = jvp(f, (x,), (t,))
    out2, pull = vjp(f, x)
    return out, tangent, pull(t)[0], out2


@fn_case("vmap_in_dims_none_out_dims_1_chunked", lambda i=0: (R(6, 3), R(3, 4)))
def vmap_in_dims_none_out_dims_1_chunked(x, w):
    """torch.vmap with in_dims=(0, None), out_dims=1 and chunk_size=2 over a row function that
    uses a Python branch on the shape."""

    def row(v, m):
        h = v @ m
        if h.shape[0] > 3:
            h = h - h.mean()
        return torch.softmax(h, 0)
    return torch.vmap(row, in_dims=(0, None), out_dims=1, chunk_size=2)(x, w)


# ============================================================ hooks and attributes that change
class HookedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _hooked_forward_hook():
    m = HookedNet()
    m.a.register_forward_hook(lambda mod, inp, out: out * 2 + inp[0])
    m.b.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0].clamp(max=0.5),), kwargs), with_kwargs=True)
    return m


case("forward_hook_and_kwargs_pre_hook_change_values", lambda: (R(3, 4),))(_hooked_forward_hook)


def _add_hook_between(m, i):
    if i == 1:
        m._h = m.a.register_forward_hook(lambda mod, inp, out: out.neg())
    if i == 3:
        m._h.remove()


case("forward_hook_added_then_removed_between_calls", lambda: (R(3, 4),), ncalls=5, between=_add_hook_between)(
    lambda: HookedNet())


def _tap_hook(mod, inp, out):
    mod._store[mod._tap] = out.mean((2, 3))


class FeatureTap(nn.Module):
    """Forward hooks that store intermediate features in a dict attribute shared by the tapped
    submodules (feature extraction), cleared each call, the forward returning the dict's values."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.feats = {}
        for name in ["1", "3"]:
            sub = self.net.get_submodule(name)
            sub._store, sub._tap = self.feats, name
            sub.register_forward_hook(_tap_hook)

    def forward(self, x):
        self.feats.clear()
        y = self.net(x)
        return y.sum(1), self.feats["1"], self.feats["3"], len(self.feats)


case("hooks_store_features_in_dict_attribute", lambda: (R(2, 2, 6, 6),))(lambda: FeatureTap())


class DropoutPChanged(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.1)
        self.scale = 1.0

    def forward(self, x):
        return self.drop(self.l(x)) * self.scale


def _change_p_and_scale(m, i):
    m.drop.p = [0.1, 0.5, 0.0, 0.9][i]
    m.scale = [1.0, 1.0, 2.5, -1.0][i]


case("dropout_p_and_scale_float_changed_between_calls", lambda: (R(4, 6),), train=True, ncalls=4,
     between=_change_p_and_scale)(lambda: DropoutPChanged())


class GrowingStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = x + torch.tanh(layer(x)) / (i + 1)
        return x, len(self.layers)


def _grow(m, i):
    if i in (1, 2):
        torch.manual_seed(10 + i)
        m.layers.append(nn.Linear(4, 4))


case("module_list_appended_between_calls", lambda: (R(3, 4),), ncalls=4, between=_grow)(lambda: GrowingStack())


class CumulativeBN(nn.Module):
    """BatchNorm1d with momentum=None (cumulative moving average from num_batches_tracked) in
    training, then eval on the last call (between sets eval)."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(5, momentum=None)

    def forward(self, x):
        return self.bn(x), self.bn.num_batches_tracked.clone()


case("batchnorm_momentum_none_cumulative_average_then_eval", lambda: (R(8, 5) * 2 + 1,), train=True, ncalls=4,
     between=lambda m, i: m.train(i < 3))(lambda: CumulativeBN())


class CounterBuffer(nn.Module):
    """A step counter buffer incremented in place (add_), a warmup factor min(1, step / 3) from it
    as a tensor, and a running max buffer updated with torch.maximum into itself."""

    def __init__(self):
        super().__init__()
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.register_buffer("running_max", torch.full((4,), -math.inf))

    def forward(self, x):
        self.step.add_(1)
        warm = (self.step.float() / 3).clamp(max=1.0)
        torch.maximum(self.running_max, x.amax(0), out=self.running_max)
        return x * warm / self.running_max.abs().clamp(min=1e-3)


case("counter_buffer_add_inplace_running_max_out", lambda: (R(3, 4),), ncalls=5)(lambda: CounterBuffer())


class KVCacheIndexCopy(nn.Module):
    """A decoder KV cache written by index_copy_ at positions given as a tensor (input_pos, as in
    gpt-fast), attention over the cache with a causal mask built from input_pos."""

    def __init__(self, maxlen=8, d=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.register_buffer("k_cache", torch.zeros(1, maxlen, d))
        self.register_buffer("v_cache", torch.zeros(1, maxlen, d))
        self.register_buffer("causal", torch.ones(maxlen, maxlen, dtype=torch.bool).tril())

    def forward(self, x, input_pos):
        q, k, v = self.qkv(x).chunk(3, -1)
        self.k_cache.index_copy_(1, input_pos, k)
        self.v_cache.index_copy_(1, input_pos, v)
        mask = self.causal[input_pos]
        att = (q @ self.k_cache.transpose(1, 2)) / 2.0
        att = att.masked_fill(~mask, -math.inf).softmax(-1)
        return att @ self.v_cache


case("kv_cache_index_copy_input_pos_tensor_gpt_fast",
     lambda i=0: (R(1, 3 if i == 0 else 1, 4), torch.arange(3) if i == 0 else torch.tensor([2 + i])), ncalls=4)(
    lambda: KVCacheIndexCopy())


class KVCacheSliceWrite(nn.Module):
    """A KV cache written by slice assignment at a Python int position attribute that advances
    each call (self.pos += T), the attention over cache[:, :pos]."""

    def __init__(self, d=4):
        super().__init__()
        self.k = nn.Linear(d, d)
        self.register_buffer("cache", torch.zeros(2, 10, d))
        self.pos = 0

    def forward(self, x):
        T = x.shape[1]
        self.cache[:, self.pos:self.pos + T] = self.k(x)
        self.pos += T
        keys = self.cache[:, :self.pos]
        att = torch.softmax(x @ keys.transpose(1, 2), -1)
        return att @ keys, self.pos


case("kv_cache_slice_assign_python_pos_advances", lambda i=0: (R(2, 3 if i == 0 else 1, 4),), ncalls=4)(
    lambda: KVCacheSliceWrite())


def _load_sd(m, i):
    if i == 2:
        torch.manual_seed(77)
        sd = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in m.state_dict().items()}
        m.load_state_dict(sd)


case("load_state_dict_between_calls_new_weights", lambda: (R(3, 4),), ncalls=4, between=_load_sd)(
    lambda: nn.Sequential(nn.Linear(4, 5), nn.LayerNorm(5), nn.Linear(5, 2)))


class NestedDicts(nn.Module):
    """Nested ModuleDict of ModuleDicts and a ParameterDict, the branch chosen by a string argument
    and the per-task scale by a key built with an f-string."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({
            "cls": nn.ModuleDict({"proj": nn.Linear(4, 3), "act": nn.Tanh()}),
            "reg": nn.ModuleDict({"proj": nn.Linear(4, 1), "act": nn.Identity()}),
        })
        self.scales = nn.ParameterDict({"scale_cls": nn.Parameter(torch.tensor(2.0)),
                                        "scale_reg": nn.Parameter(torch.tensor(-0.5))})

    def forward(self, x, task):
        h = self.heads[task]
        return h["act"](h["proj"](x)) * self.scales[f"scale_{task}"]


case("nested_module_dict_parameter_dict_string_task", lambda i=0: (R(3, 4), ["cls", "reg", "cls", "reg"][i]), ncalls=4)(
    lambda: NestedDicts())


class Mode(enum.Enum):
    SUM = "sum"
    MAX = "max"
    ATTN = "attn"


class EnumPool(nn.Module):
    """Pooling chosen by an Enum argument (is / == comparisons, .value in a string)."""

    def __init__(self):
        super().__init__()
        self.att = nn.Linear(4, 1)

    def forward(self, x, mode):
        if mode is Mode.SUM:
            out = x.sum(1)
        elif mode == Mode.MAX:
            out = x.amax(1)
        else:
            out = (self.att(x).softmax(1) * x).sum(1)
        return out, f"pool-{mode.value}"


case("enum_keyed_pooling_dispatch", lambda i=0: (R(2, 5, 4), [Mode.SUM, Mode.MAX, Mode.ATTN, Mode.SUM][i]), ncalls=4)(
    lambda: EnumPool())


class ParamListMix(nn.Module):
    """A ParameterList of per-layer mixing weights (ELMo scalar mix): softmax over a stacked list,
    gamma scaling, layers from a list of tensor arguments."""

    def __init__(self, n=3):
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.tensor(float(i) * 0.1)) for i in range(n)])
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers):
        norm = torch.softmax(torch.stack(list(self.w)), 0)
        return self.gamma * sum(w * t for w, t in zip(norm, layers))


case("scalar_mix_parameter_list_softmax_layers", lambda: ([R(2, 3, 4) for _ in range(3)],))(lambda: ParamListMix())


# ============================================================ tokenizer-free text
@fn_case("char_ngram_rolling_hash_int64_mod_buckets", lambda i=0: (I(32, 127, 2, 12 + i),))
def char_ngram_rolling_hash_int64_mod_buckets(chars, n=3, buckets=1009):
    """Character n-gram hashing with integer ops: h = sum c_j * 31^j over a sliding window (unfold),
    a large prime multiply with int64 wraparound, bucket = remainder (non-negative)."""
    win = chars.unfold(1, n, 1)
    powers = 31 ** torch.arange(n)
    h = (win * powers).sum(-1)
    h = h * 2654435761 + 12345
    return torch.remainder(h, buckets), h


@fn_case("fnv1a_hash_xor_multiply_int64_wraparound", lambda i=0: (I(0, 256, 3, 8),))
def fnv1a_hash_xor_multiply_int64_wraparound(bytes_):
    """FNV-1a over the last dim in a Python loop: xor, multiply by the 64-bit prime (wraps around
    in int64), the low 20 bits by bitwise_and, the high bits by a right shift."""
    h = torch.full(bytes_.shape[:1], -3750763034362895579, dtype=torch.int64)
    for j in range(bytes_.shape[1]):
        h = h ^ bytes_[:, j]
        h = h * 1099511628211
    return h & 0xFFFFF, h >> 44, h


class HashedBag(nn.Module):
    """Hashed bigram features into an nn.EmbeddingBag (mode='mean') with offsets from document
    lengths (cumsum), per_sample_weights unsupported for mean, so a second 'sum' bag weighted."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(97, 4, mode="mean")
        self.bag2 = nn.EmbeddingBag(97, 4, mode="sum")

    def forward(self, tokens, lengths):
        big = (tokens[:-1] * 31 + tokens[1:]) % 97
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)[:-1]])
        offsets = offsets.clamp(max=big.numel() - 1)
        w = torch.linspace(0.5, 1.5, big.numel())
        return self.bag(big, offsets), self.bag2(big, offsets, per_sample_weights=w)


case("hashed_bigram_embedding_bag_offsets_weights", lambda: (I(0, 50, 15), torch.tensor([4, 6, 4])))(lambda: HashedBag())


@fn_case("bag_of_words_bincount_tfidf", lambda i=0: (I(0, 20, 4, 9),))
def bag_of_words_bincount_tfidf(docs, vocab=20):
    """Bag of words per document with bincount (minlength=vocab) of offset ids, document
    frequency, idf = log((1 + N) / (1 + df)) + 1, l2-normalised tf-idf."""
    n = docs.shape[0]
    ids = docs + torch.arange(n)[:, None] * vocab
    tf = torch.bincount(ids.flatten(), minlength=n * vocab).view(n, vocab).float()
    df = (tf > 0).sum(0)
    idf = torch.log((1 + n) / (1 + df)) + 1
    return F.normalize(tf * idf, dim=1)


@fn_case("attention_mask_position_ids_cumsum_masked_mean", lambda i=0: (R(3, 7, 4), torch.tensor([7, 3 + i, 5])))
def attention_mask_position_ids_cumsum_masked_mean(h, lengths):
    """Left padding: mask from lengths (arange >= T - len), position ids by cumsum(mask) - 1
    filled with 1 where masked (HF generate), masked mean pooling."""
    T = h.shape[1]
    mask = (torch.arange(T)[None] >= (T - lengths)[:, None]).long()
    pos = mask.cumsum(-1) - 1
    pos = pos.masked_fill(mask == 0, 1)
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp(min=1e-9), pos


@fn_case("utf8_byte_class_bitwise_continuation", lambda i=0: (I(0, 256, 16, dtype=torch.uint8),))
def utf8_byte_class_bitwise_continuation(b):
    """Byte-level text: UTF-8 lead / continuation bytes by bitwise masks on uint8 (b & 0xC0 == 0x80),
    character starts counted with cumsum, ASCII lowercase by | 0x20 on letters."""
    cont = (b & 0xC0) == 0x80
    starts = ~cont
    char_idx = starts.long().cumsum(0) - 1
    upper = (b >= 65) & (b <= 90)
    lower = torch.where(upper, b | 0x20, b)
    return char_idx, lower, (b >> 4).to(torch.int32)


# ============================================================ time series
@fn_case("rolling_mean_std_unfold_zscore", lambda i=0: (R(2, 20 + 4 * i).cumsum(-1),))
def rolling_mean_std_unfold_zscore(x, w=5):
    """Rolling mean / std over a window by unfold (left edge padded by replicating the first value),
    rolling z-score, rolling max and min."""
    xp = torch.cat([x[:, :1].expand(-1, w - 1), x], 1)
    win = xp.unfold(-1, w, 1)
    mu, sd = win.mean(-1), win.std(-1, unbiased=False)
    return (x - mu) / (sd + 1e-6), win.amax(-1), win.amin(-1)


@fn_case("ewma_python_loop_adjust_false", lambda i=0: (R(3, 12),))
def ewma_python_loop_adjust_false(x, alpha=0.3):
    """pandas ewm(adjust=False).mean() by a Python loop over time, and the adjusted form from
    weights (1 - alpha)^k computed in closed form with cumsum."""
    out = [x[:, 0]]
    for t in range(1, x.shape[1]):
        out.append(alpha * x[:, t] + (1 - alpha) * out[-1])
    T = x.shape[1]
    w = (1 - alpha) ** torch.arange(T - 1, -1, -1, dtype=x.dtype)
    adj = (x * w).cumsum(1) / w.cumsum(0)
    adj = adj / (1 - alpha) ** torch.arange(T - 1, -1, -1, dtype=x.dtype)
    return torch.stack(out, 1), adj


class TCN(nn.Module):
    """Temporal convolutional network: causal dilated Conv1d (left pad by F.pad), weight-normed
    convs (parametrizations), residual 1x1 downsample, dilations 1, 2, 4."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.utils.parametrizations.weight_norm(nn.Conv1d(3 if i == 0 else 6, 6, 3, dilation=2 ** i))
                                    for i in range(3)])
        self.down = nn.Conv1d(3, 6, 1)

    def forward(self, x):
        h = x
        for i, c in enumerate(self.convs):
            h = F.relu(c(F.pad(h, (2 * 2 ** i, 0))))
        return h + self.down(x)


case("tcn_causal_dilated_conv_left_pad_weight_norm", lambda i=0: (R(2, 3, 16 + 3 * i),))(lambda: TCN())


class RevIN(nn.Module):
    """Reversible instance normalisation: statistics stored as attributes in norm mode (detached),
    affine, denorm called with the mode string on the model output."""

    def __init__(self, c=3):
        super().__init__()
        self.w = nn.Parameter(torch.ones(c) * 1.5)
        self.b = nn.Parameter(torch.zeros(c) + 0.1)
        self.proj = nn.Linear(16, 8)

    def norm(self, x, mode):
        if mode == "norm":
            self.mean = x.mean(1, keepdim=True).detach()
            self.stdev = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5).detach()
            return (x - self.mean) / self.stdev * self.w + self.b
        x = (x - self.b) / (self.w + 1e-10)
        return x * self.stdev + self.mean

    def forward(self, x):
        z = self.norm(x, "norm")
        y = self.proj(z.transpose(1, 2)).transpose(1, 2)
        return self.norm(y, "denorm")


case("revin_norm_denorm_attributes_stats", lambda: (R(2, 16, 3) * 3 + 5,))(lambda: RevIN())


@fn_case("seasonal_decompose_moving_avg_replicate_pad", lambda i=0: (R(2, 24) + torch.sin(torch.arange(24.0)),))
def seasonal_decompose_moving_avg_replicate_pad(x, k=5):
    """Series decomposition (Autoformer): trend by avg_pool1d over a replicate-padded series,
    seasonal remainder, lagged differences by roll, and the inverse by cumsum."""
    xp = F.pad(x.unsqueeze(1), ((k - 1) // 2, k // 2), mode="replicate")
    trend = F.avg_pool1d(xp, k, stride=1).squeeze(1)
    seasonal = x - trend
    diff = x - x.roll(1, -1)
    diff[:, 0] = x[:, 0]
    return trend, seasonal, diff.cumsum(-1)


@fn_case("patch_series_unfold_stride_instance_norm", lambda i=0: (R(2, 3, 32),))
def patch_series_unfold_stride_instance_norm(x, p=8, s=4):
    """PatchTST patching: x.unfold(-1, p, s) after padding the end by repeating the last value,
    per-patch instance norm, patches flattened."""
    x = torch.cat([x, x[..., -1:].expand(-1, -1, s)], -1)
    patches = x.unfold(-1, p, s)
    mu = patches.mean(-1, keepdim=True)
    return ((patches - mu) / (patches.std(-1, keepdim=True) + 1e-5)).flatten(2), patches.shape[2]


# ============================================================ scatter / index reductions
@fn_case("scatter_reduce_amax_amin_include_self_false", lambda i=0: (R(10, 3), I(0, 4, 10)))
def scatter_reduce_amax_amin_include_self_false(src, idx):
    """scatter_reduce amax / amin with include_self=False into a zero-initialised output (groups
    that no element reaches keep 0), and with include_self=True for comparison."""
    index = idx[:, None].expand(-1, 3)
    base = torch.zeros(5, 3)
    a = base.scatter_reduce(0, index, src, "amax", include_self=False)
    b = base.scatter_reduce(0, index, src, "amin", include_self=False)
    c = base.scatter_reduce(0, index, src, "amax", include_self=True)
    return a, b, c


@fn_case("scatter_reduce_mean_prod_include_self_false", lambda i=0: (R(12), I(0, 5, 12)))
def scatter_reduce_mean_prod_include_self_false(src, idx):
    """scatter_reduce 'mean' and 'prod' with include_self False and True on a non-zero base."""
    base = torch.full((6,), 2.0)
    return (base.scatter_reduce(0, idx, src, "mean", include_self=False),
            base.scatter_reduce(0, idx, src, "mean", include_self=True),
            base.scatter_reduce(0, idx, src, "prod", include_self=False),
            base.scatter_reduce(0, idx, src, "sum", include_self=False))


@fn_case("index_reduce_prod_mean_amax", lambda i=0: (R(7, 2), I(0, 3, 7)))
def index_reduce_prod_mean_amax(src, idx):
    """Tensor.index_reduce_ with 'prod', 'mean', 'amax' (include_self both ways)."""
    base = torch.ones(4, 2)
    return (base.clone().index_reduce_(0, idx, src, "prod"),
            base.clone().index_reduce_(0, idx, src, "mean", include_self=False),
            base.clone().index_reduce_(0, idx, src, "amax", include_self=False),
            base.clone().index_reduce_(0, idx, src, "amin"))


@fn_case("segment_softmax_scatter_amax_index_add", lambda i=0: (R(11), torch.sort(I(0, 4, 11))[0]))
def segment_softmax_scatter_amax_index_add(scores, seg, n=4):
    """Softmax within segments (GNN attention): the per-segment max by scatter_reduce amax
    (include_self=False), exp of the shifted scores, sums by index_add, gathered back."""
    mx = torch.full((n,), -math.inf).scatter_reduce(0, seg, scores, "amax", include_self=False)
    e = (scores - mx[seg]).exp()
    s = torch.zeros(n).index_add_(0, seg, e)
    return e / s[seg], mx


@fn_case("index_add_alpha_negative_and_int", lambda i=0: (R(6, 3), I(0, 4, 6), I(-5, 5, 6, 3)))
def index_add_alpha_negative_and_int(x, idx, xi):
    """index_add with alpha (negative float, and an int alpha on int64 tensors)."""
    a = torch.zeros(4, 3).index_add(0, idx, x, alpha=-0.5)
    b = torch.zeros(4, 3, dtype=torch.long).index_add(0, idx, xi, alpha=3)
    return a, b


@fn_case("sparse_coo_duplicates_coalesce_to_dense", lambda i=0: (I(0, 4, 2, 9), R(9)))
def sparse_coo_duplicates_coalesce_to_dense(ind, val):
    """torch.sparse_coo_tensor with duplicate indices, coalesce (sums them), to_dense, and
    sparse @ dense."""
    s = torch.sparse_coo_tensor(ind, val, (4, 4)).coalesce()
    d = s.to_dense()
    return d, torch.sparse.mm(s, torch.eye(4) * 2), s.values().shape[0]


# ============================================================ integer and bitwise arithmetic
@fn_case("floor_divide_remainder_fmod_negatives", lambda i=0: (I(-50, 50, 12), I(1, 7, 12) * torch.tensor([1, -1]).repeat(6)))
def floor_divide_remainder_fmod_negatives(a, b):
    """Integer division with negative operands: //, torch.div rounding_mode floor and trunc,
    %, remainder, fmod, and a negative Python divisor."""
    return (a // b, torch.div(a, b, rounding_mode="trunc"), a % b, torch.fmod(a, b),
            torch.remainder(a, -3), a // -4, torch.div(a, b), (-a) % 5)


@fn_case("bit_shifts_int32_and_or_xor_not", lambda i=0: (I(-1000, 1000, 10, dtype=torch.int32), I(0, 8, 10, dtype=torch.int32)))
def bit_shifts_int32_and_or_xor_not(a, s):
    """int32 bitwise: shifts by tensor and Python amounts (arithmetic right shift of negatives),
    and / or / xor / not, a rotate-left of 32-bit values emulated with masks."""
    left = a << s
    right = a >> s
    rot = ((a << 5) | ((a >> 27) & 0x1F))
    return left, right, a & 0x0F0F, a | s, a ^ -1, ~a, rot, a >> 2


@fn_case("int32_lcg_overflow_wraparound", lambda i=0: (I(0, 2 ** 31 - 1, 8, dtype=torch.int32),))
def int32_lcg_overflow_wraparound(seed):
    """A linear congruential generator in int32 (x * 1103515245 + 12345 wraps around), three steps,
    uniform floats from the top bits."""
    x = seed
    outs = []
    for _ in range(3):
        x = x * 1103515245 + 12345
        outs.append(((x >> 16) & 0x7FFF).float() / 32768.0)
    return x, torch.stack(outs)


@fn_case("splitmix64_int64_wraparound", lambda i=0: (I(-(2 ** 62), 2 ** 62, 6),))
def splitmix64_int64_wraparound(x):
    """splitmix64 in int64: add of the golden gamma, xor-shift-multiply rounds (multiplications
    wrap around), logical right shift emulated by masking the arithmetic shift."""
    def lsr(v, k):
        return (v >> k) & ((1 << (64 - k)) - 1)
    z = x + (-7046029254386353131)
    z = (z ^ lsr(z, 30)) * (-4658895280553007687)
    z = (z ^ lsr(z, 27)) * (-7723592293110705685)
    return z ^ lsr(z, 31)


@fn_case("uint8_image_brightness_blend_wraparound", lambda i=0: (I(0, 256, 3, 4, 4, dtype=torch.uint8), I(0, 256, 3, 4, 4, dtype=torch.uint8)))
def uint8_image_brightness_blend_wraparound(a, b):
    """uint8 image math: a + b wraps around, saturated add via int16 and clamp, integer alpha
    blend (a * 77 + b * (255 - 77)) // 255 in int32, inversion 255 - a, mean as float."""
    wrap = a + b
    sat = (a.to(torch.int16) + b.to(torch.int16)).clamp(0, 255).to(torch.uint8)
    blend = ((a.int() * 77 + b.int() * (255 - 77)) // 255).to(torch.uint8)
    return wrap, sat, blend, 255 - a, a.float().mean((1, 2)), a - b


@fn_case("uint8_to_float_normalize_round_back", lambda i=0: (I(0, 256, 2, 3, 5, 5, dtype=torch.uint8),))
def uint8_to_float_normalize_round_back(img):
    """torchvision-style: to float / 255, normalise by mean / std, a gamma curve, back to uint8 by
    (x * 255).round().clamp(0, 255).to(uint8), and a grayscale by integer weights >> 8."""
    x = img.float() / 255
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    norm = (x - mean) / std
    back = (x.pow(1 / 2.2) * 255).round().clamp(0, 255).to(torch.uint8)
    gray = ((img[:, 0].int() * 77 + img[:, 1].int() * 150 + img[:, 2].int() * 29) >> 8).to(torch.uint8)
    return norm, back, gray


@fn_case("int8_matmul_int32_accumulate_requant", lambda i=0: (I(-128, 128, 4, 16, dtype=torch.int8), I(-128, 128, 16, 3, dtype=torch.int8)))
def int8_matmul_int32_accumulate_requant(a, b):
    """int8 x int8 matmul accumulated in int32, requantised with a fixed-point multiplier and a
    rounding right shift, saturated to int8."""
    acc = a.int() @ b.int()
    m, shift = 1518500250, 38
    prod = acc.long() * m
    r = (prod + (1 << (shift - 1))) >> shift
    return acc, r.clamp(-128, 127).to(torch.int8)


@fn_case("popcount_bit_tricks_gray_code", lambda i=0: (I(0, 2 ** 30, 9),))
def popcount_bit_tricks_gray_code(x):
    """Population count with the SWAR bit trick, Gray code x ^ (x >> 1) and its inverse by a
    shift-xor loop, bit reversal of the low 8 bits."""
    v = x - ((x >> 1) & 0x55555555)
    v = (v & 0x33333333) + ((v >> 2) & 0x33333333)
    v = (((v + (v >> 4)) & 0x0F0F0F0F) * 0x01010101) & 0xFFFFFFFF
    pop = v >> 24
    g = x ^ (x >> 1)
    inv = g.clone()
    s = 1
    while s < 32:
        inv = inv ^ (inv >> s)
        s *= 2
    low = x & 0xFF
    rev = torch.zeros_like(low)
    for k in range(8):
        rev = rev | (((low >> k) & 1) << (7 - k))
    return pop, g, inv, rev


@fn_case("int_tensor_python_scalar_promotion", lambda i=0: (I(-9, 9, 6, dtype=torch.int16), I(-9, 9, 6, dtype=torch.int8)))
def int_tensor_python_scalar_promotion(a, b):
    """Type promotion of small integer tensors: int16 + int8, * Python float (float32), / (true
    division), int16 ** 2, abs of the minimum, sign, mixed with a bool mask."""
    return a + b, a * 1.5, a / b.clamp(min=1), a ** 2, (a * b).abs(), torch.sign(b), a + (b > 0), b.to(torch.uint8)


# ============================================================ float64 programs
class DoubleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Softplus(), nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 1))

    def forward(self, x):
        y = self.net(x)
        return y, torch.autograd.grad(y.sum(), x, create_graph=False)[0] if x.requires_grad else y.exp()


case("float64_mlp_softplus_layernorm_double_params", lambda: (R(5, 4, dtype=torch.float64),))(
    lambda: DoubleMLP().double())


@fn_case("float64_kahan_summation_loop", lambda i=0: (R(4, 50, dtype=torch.float64) * 1e8 + 1e-3,))
def float64_kahan_summation_loop(x):
    """Kahan compensated summation in float64 by a Python loop over columns, and the compensation
    term itself (exact IEEE double arithmetic: no reassociation allowed)."""
    s = torch.zeros(x.shape[0], dtype=torch.float64)
    c = torch.zeros_like(s)
    for j in range(x.shape[1]):
        y = x[:, j] - c
        t = s + y
        c = (t - s) - y
        s = t
    return s, c, x.sum(1)


@fn_case("float64_mixed_with_float32_promotion", lambda i=0: (R(3, 4, dtype=torch.float64), R(4, 2)))
def float64_mixed_with_float32_promotion(a, b):
    """A float64 tensor with a float32 one: @ needs the same dtype (b.double()), + promotes, a
    float32 reduction then promoted, float64 special functions (lgamma, erfinv, expm1)."""
    m = a @ b.double()
    return m, a[:, :2] + b[:1], b.sum() * a, torch.lgamma(a.abs() + 1), torch.erfinv(a.tanh() * 0.9), torch.expm1(a)


@fn_case("float64_ode_rk4_fixed_steps", lambda i=0: (R(3, 2, dtype=torch.float64),))
def float64_ode_rk4_fixed_steps(y0, h=0.05, steps=20):
    """RK4 integration of a damped pendulum in float64 with a Python step loop."""
    def f(y):
        return torch.stack([y[:, 1], -torch.sin(y[:, 0]) - 0.1 * y[:, 1]], 1)
    y = y0
    for _ in range(steps):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


# ============================================================ complex numbers and FFT
@fn_case("fft_conv1d_rfft_irfft_matches_direct", lambda i=0: (R(2, 20 + i), R(5)))
def fft_conv1d_rfft_irfft_matches_direct(x, k):
    """FFT convolution: rfft of both zero-padded to n = len(x) + len(k) - 1, product, irfft(n=n),
    and the same by conv1d of the flipped kernel."""
    n = x.shape[-1] + k.shape[-1] - 1
    y = torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(k, n=n), n=n)
    direct = F.conv1d(x.unsqueeze(1), k.flip(0).view(1, 1, -1), padding=k.shape[-1] - 1).squeeze(1)
    return y, direct


@fn_case("fft2_lowpass_fftshift_mask", lambda i=0: (R(2, 8, 8),))
def fft2_lowpass_fftshift_mask(img, r=2):
    """2-D low-pass filter: fft2, fftshift, a circular mask from a meshgrid, ifftshift, ifft2,
    real part; and the log magnitude spectrum."""
    f = torch.fft.fftshift(torch.fft.fft2(img), dim=(-2, -1))
    H, W = img.shape[-2:]
    yy, xx = torch.meshgrid(torch.arange(H) - H // 2, torch.arange(W) - W // 2, indexing="ij")
    mask = (yy ** 2 + xx ** 2) <= r * r
    low = torch.fft.ifft2(torch.fft.ifftshift(f * mask, dim=(-2, -1))).real
    return low, torch.log1p(f.abs())


@fn_case("complex_polar_mul_abs_angle_conj", lambda i=0: (R(6), R(6)))
def complex_polar_mul_abs_angle_conj(mag, ph):
    """Complex arithmetic: torch.polar, complex multiplication and division, conj, abs, angle,
    real / imag, view_as_real, complex exp."""
    z = torch.polar(mag.abs() + 0.1, ph)
    w = torch.complex(ph, mag)
    p = z * w.conj()
    q = z / (w + 1j)
    return torch.view_as_real(p), q.abs(), q.angle(), torch.exp(z).real, (z * z.conj()).real


class ComplexLinear(nn.Module):
    """A complex-valued layer (complex weight parameter, complex input), modReLU activation,
    the output split with view_as_real."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, dtype=torch.cfloat) * 0.5)
        self.b = nn.Parameter(torch.tensor(-0.2))

    def forward(self, x):
        z = x @ self.w
        m = z.abs()
        z = torch.relu(m + self.b) * z / (m + 1e-6)
        return torch.view_as_real(z)


case("complex_weight_linear_modrelu", lambda: (torch.randn(5, 4, dtype=torch.cfloat),))(lambda: ComplexLinear())


@fn_case("stft_istft_roundtrip_hann", lambda i=0: (R(2, 256),))
def stft_istft_roundtrip_hann(x, n_fft=64, hop=16):
    """STFT with a Hann window (return_complex=True), magnitude and phase, istft of the same
    spectrum back to the signal length."""
    win = torch.hann_window(n_fft)
    S = torch.stft(x, n_fft, hop, window=win, return_complex=True)
    y = torch.istft(S, n_fft, hop, window=win, length=x.shape[-1])
    return S.abs(), y


@fn_case("hilbert_envelope_analytic_signal_fft", lambda i=0: (torch.sin(torch.linspace(0, 12, 32 + 2 * i)) * R(32 + 2 * i).abs(),))
def hilbert_envelope_analytic_signal_fft(x):
    """scipy.signal.hilbert by FFT: h = [1, 2, ..., 2, 1, 0, ...] for even / odd n, ifft of the
    product, the envelope |analytic| and the instantaneous phase."""
    n = x.shape[-1]
    X = torch.fft.fft(x)
    h = torch.zeros(n)
    if n % 2 == 0:
        h[0] = h[n // 2] = 1
        h[1:n // 2] = 2
    else:
        h[0] = 1
        h[1:(n + 1) // 2] = 2
    a = torch.fft.ifft(X * h)
    return a.abs(), torch.angle(a)


@fn_case("rotary_view_as_complex_polar_freqs", lambda i=0: (R(2, 5 + i, 2, 8),))
def rotary_view_as_complex_polar_freqs(x, theta=10000.0):
    """LLaMA rotary embedding: freqs_cis = polar(ones, outer(t, freqs)), x viewed as complex pairs
    (reshape(..., -1, 2) then view_as_complex), multiplied, view_as_real, flattened, type_as."""
    T, d = x.shape[1], x.shape[-1]
    freqs = 1.0 / theta ** (torch.arange(0, d, 2)[: d // 2].float() / d)
    fc = torch.polar(torch.ones(T, d // 2), torch.outer(torch.arange(T).float(), freqs))
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * fc.view(1, T, 1, d // 2)).flatten(3)
    return out.type_as(x)


@fn_case("rfft_spectral_power_bands_irfft_odd_n", lambda i=0: (R(3, 31 + 2 * i),))
def rfft_spectral_power_bands_irfft_odd_n(x):
    """rfft of an odd length with norm='ortho', power per band summed over rfftfreq ranges,
    irfft back with n (odd), and rfftfreq / fftfreq values."""
    n = x.shape[-1]
    X = torch.fft.rfft(x, norm="ortho")
    f = torch.fft.rfftfreq(n, d=0.01)
    p = X.abs() ** 2
    bands = torch.stack([p[..., (f >= lo) & (f < hi)].sum(-1) for lo, hi in [(0, 10), (10, 30), (30, 60)]], -1)
    return bands, torch.fft.irfft(X, n=n, norm="ortho"), torch.fft.fftfreq(n)


# ============================================================ torch.linalg
def spd(n, b=()):
    a = torch.randn(*b, n, n, dtype=torch.float64)
    return a @ a.transpose(-1, -2) + n * torch.eye(n, dtype=torch.float64)


@fn_case("linalg_solve_batched_and_left_false", lambda i=0: (spd(4, (2,)), R(2, 4, 3, dtype=torch.float64)))
def linalg_solve_batched_and_left_false(A, B):
    """torch.linalg.solve batched, with left=False (X A = B^T), solve_ex's info, and inv @ B."""
    X = torch.linalg.solve(A, B)
    Y = torch.linalg.solve(A, B.transpose(-1, -2), left=False)
    Z, info = torch.linalg.solve_ex(A, B)
    return X, Y, Z, info, torch.linalg.inv(A) @ B


@fn_case("linalg_cholesky_solve_logdet_float64", lambda i=0: (spd(5), R(5, 2, dtype=torch.float64)))
def linalg_cholesky_solve_logdet_float64(A, b):
    """Gaussian log-likelihood by Cholesky: L = cholesky(A), cholesky_solve, solve_triangular,
    logdet as 2 sum log diag(L), against slogdet and det."""
    L = torch.linalg.cholesky(A)
    x = torch.cholesky_solve(b, L)
    z = torch.linalg.solve_triangular(L, b, upper=False)
    logdet = 2 * L.diagonal().log().sum()
    sign, ld = torch.linalg.slogdet(A)
    return x, z, logdet, sign, ld, torch.linalg.det(A)


@fn_case("linalg_qr_reduced_gram_schmidt_check", lambda i=0: (R(6, 4, dtype=torch.float64),))
def linalg_qr_reduced_gram_schmidt_check(A):
    """QR (reduced and complete), Q^T Q, R's diagonal signs normalised to positive."""
    Q, R_ = torch.linalg.qr(A)
    Qc, Rc = torch.linalg.qr(A, mode="complete")
    s = torch.sign(torch.diagonal(R_))
    return Q * s, s[:, None] * R_, Q.T @ Q, Qc.shape, (Qc @ Rc - A).abs().max()


@fn_case("linalg_eigh_whitening_eigvalsh", lambda i=0: (R(20, 4, dtype=torch.float64),))
def linalg_eigh_whitening_eigvalsh(X):
    """ZCA whitening: covariance, eigh, W = V diag(1/sqrt(l + eps)) V^T (invariant to the
    eigenvectors' signs), eigvalsh."""
    Xc = X - X.mean(0)
    C = Xc.T @ Xc / (X.shape[0] - 1)
    L, V = torch.linalg.eigh(C)
    W = V @ torch.diag(1.0 / torch.sqrt(L + 1e-5)) @ V.T
    return Xc @ W, torch.linalg.eigvalsh(C), L


@fn_case("linalg_svd_low_rank_reconstruction", lambda i=0: (R(6, 5),))
def linalg_svd_low_rank_reconstruction(A, k=2):
    """Truncated SVD reconstruction (sign-invariant), singular values, nuclear / spectral norms,
    pinv, matrix_rank."""
    U_, S, Vh = torch.linalg.svd(A, full_matrices=False)
    Ak = U_[:, :k] @ torch.diag(S[:k]) @ Vh[:k]
    return (Ak, S, torch.linalg.matrix_norm(A, "nuc"), torch.linalg.matrix_norm(A, 2), torch.linalg.pinv(A),
            torch.linalg.matrix_rank(A), torch.linalg.svdvals(A))


@fn_case("linalg_lstsq_polyfit_vander", lambda i=0: (torch.linspace(-1, 1, 12, dtype=torch.float64), R(12, dtype=torch.float64)))
def linalg_lstsq_polyfit_vander(x, noise, deg=3):
    """Polynomial fit: Vandermonde matrix (torch.vander, increasing), lstsq solution, residual
    norms, polyval by Horner's loop."""
    y = 1 + 2 * x - 3 * x ** 3 + 0.1 * noise
    V = torch.linalg.vander(x, N=deg + 1)
    sol = torch.linalg.lstsq(V, y.unsqueeze(-1)).solution.squeeze(-1)
    fit = torch.zeros_like(x)
    for c in sol.flip(0):
        fit = fit * x + c
    return sol, torch.linalg.vector_norm(fit - y)


@fn_case("linalg_matrix_exp_power_norms", lambda i=0: (R(2, 3, 3) * 0.3,))
def linalg_matrix_exp_power_norms(A):
    """matrix_exp, matrix_power (positive, zero and negative), Frobenius / inf / -1 matrix norms,
    vector_norm with ord inf and 0.5 over dims, cross products, multi_dot."""
    return (torch.linalg.matrix_exp(A), torch.linalg.matrix_power(A, 3), torch.linalg.matrix_power(A, 0),
            torch.linalg.matrix_power(A + 3 * torch.eye(3), -2), torch.linalg.matrix_norm(A),
            torch.linalg.matrix_norm(A, float("inf")), torch.linalg.matrix_norm(A, -1),
            torch.linalg.vector_norm(A, float("inf"), dim=(1, 2)), torch.linalg.vector_norm(A, 0.5, dim=-1),
            torch.linalg.cross(A[:, 0], A[:, 1]), torch.linalg.multi_dot([A[0], A[1], A[0]]))


@fn_case("linalg_lu_factor_solve_det_sign", lambda i=0: (R(4, 4, dtype=torch.float64), R(4, 2, dtype=torch.float64)))
def linalg_lu_factor_solve_det_sign(A, B):
    """LU factorisation (lu_factor / lu_solve), the permutation's sign from pivots, det as the
    product of U's diagonal times that sign."""
    LU, piv = torch.linalg.lu_factor(A)
    X = torch.linalg.lu_solve(LU, piv, B)
    swaps = (piv != torch.arange(1, 5, dtype=piv.dtype)).sum()
    sign = 1 - 2 * (swaps % 2)
    return X, sign * LU.diagonal().prod(), torch.linalg.det(A)


# ============================================================ torch.distributions
class GaussianPolicy(nn.Module):
    """A Gaussian policy: Normal(mu, softplus(s)).rsample() with the seeded generator, log_prob summed
    over the action dim, entropy, tanh squashing correction."""

    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(4, 2)
        self.s = nn.Linear(4, 2)

    def forward(self, x):
        d = torch.distributions.Normal(self.mu(x), F.softplus(self.s(x)) + 1e-3)
        a = d.rsample()
        lp = d.log_prob(a).sum(-1) - (2 * (math.log(2) - a - F.softplus(-2 * a))).sum(-1)
        return torch.tanh(a), lp, d.entropy().sum(-1)


case("distributions_normal_rsample_tanh_log_prob", lambda: (R(3, 4),))(lambda: GaussianPolicy())


@fn_case("distributions_categorical_sample_log_prob_entropy", lambda i=0: (R(4, 5),))
def distributions_categorical_sample_log_prob_entropy(logits):
    """Categorical(logits).sample() seeded, log_prob, entropy, probs; OneHotCategorical sample."""
    d = torch.distributions.Categorical(logits=logits)
    a = d.sample()
    oh = torch.distributions.OneHotCategorical(logits=logits).sample()
    return a, d.log_prob(a), d.entropy(), d.probs, oh


@fn_case("distributions_mvn_scale_tril_log_prob_rsample", lambda i=0: (R(3, 3), R(4, 3)))
def distributions_mvn_scale_tril_log_prob_rsample(L, x):
    """MultivariateNormal with a scale_tril made positive on the diagonal: log_prob of points,
    rsample((2,)), the covariance matrix, and KL to a standard normal."""
    tril = L.tril(-1) + torch.diag(F.softplus(L.diagonal()) + 0.1)
    d = torch.distributions.MultivariateNormal(torch.zeros(3), scale_tril=tril)
    ref = torch.distributions.MultivariateNormal(torch.zeros(3), torch.eye(3))
    return d.log_prob(x), d.rsample((2,)), d.covariance_matrix, torch.distributions.kl_divergence(d, ref)


@fn_case("distributions_beta_gamma_dirichlet_rsample", lambda i=0: (U(4) + 0.5, U(4) + 0.5))
def distributions_beta_gamma_dirichlet_rsample(a, b):
    """Beta, Gamma and Dirichlet rsample (reparameterised through _standard_gamma) with seeded
    draws, their log_probs and means."""
    be = torch.distributions.Beta(a, b)
    ga = torch.distributions.Gamma(a, b)
    di = torch.distributions.Dirichlet(a)
    x, y, z = be.rsample(), ga.rsample(), di.rsample()
    return x, y, z, be.log_prob(x.clamp(1e-4, 1 - 1e-4)), ga.log_prob(y + 1e-4), di.log_prob(z), be.mean


@fn_case("distributions_mixture_same_family_log_prob", lambda i=0: (R(5), R(3), R(3), R(3)))
def distributions_mixture_same_family_log_prob(x, logits, loc, s):
    """A Gaussian mixture by MixtureSameFamily (Categorical mixing, Normal components): log_prob
    of points, mean, variance, cdf."""
    mix = torch.distributions.Categorical(logits=logits)
    comp = torch.distributions.Normal(loc, F.softplus(s) + 0.1)
    gmm = torch.distributions.MixtureSameFamily(mix, comp)
    return gmm.log_prob(x), gmm.mean, gmm.variance, gmm.cdf(x)


@fn_case("distributions_bernoulli_relaxed_one_hot_independent", lambda i=0: (R(3, 4), R(3, 4)))
def distributions_bernoulli_relaxed_one_hot_independent(logits, x):
    """Bernoulli(logits) log_prob of {0,1} targets, RelaxedOneHotCategorical rsample with a
    temperature, Independent(Normal) log_prob over the event dim, Laplace / StudentT log_prob."""
    bern = torch.distributions.Bernoulli(logits=logits)
    lp = bern.log_prob((x > 0).float())
    rel = torch.distributions.RelaxedOneHotCategorical(torch.tensor(0.5), logits=logits).rsample()
    ind = torch.distributions.Independent(torch.distributions.Normal(logits, 1.0), 1)
    lap = torch.distributions.Laplace(0.0, 2.0).log_prob(x)
    st = torch.distributions.StudentT(3.0).log_prob(x)
    return lp, rel, ind.log_prob(x), lap, st


# ============================================================ sorting and searching
@fn_case("sort_stable_duplicates_argsort_descending", lambda i=0: (I(0, 4, 12).float(), I(0, 3, 12)))
def sort_stable_duplicates_argsort_descending(x, key2):
    """Stable sorts with many duplicates: sort(stable=True) ascending and descending, a
    lexicographic sort by two keys (stable sort by the minor, then by the major)."""
    v, i = torch.sort(x, stable=True)
    vd, idd = torch.sort(x, descending=True, stable=True)
    o = torch.argsort(key2, stable=True)
    o = o[torch.argsort(x[o], stable=True)]
    return v, i, vd, idd, o


@fn_case("searchsorted_right_sorter_side", lambda i=0: (R(10), R(6) * 2))
def searchsorted_right_sorter_side(seq, vals):
    """searchsorted on an unsorted sequence through sorter=argsort, right=True vs side='left',
    out_int32, and values outside the range."""
    srt = seq.argsort()
    a = torch.searchsorted(seq, vals, sorter=srt)
    b = torch.searchsorted(seq.sort().values, vals, right=True, out_int32=True)
    c = torch.searchsorted(seq.sort().values, vals, side="left")
    return a, b, c


@fn_case("bucketize_quantile_bins_histc", lambda i=0: (R(40),))
def bucketize_quantile_bins_histc(x):
    """Quantile binning: boundaries = torch.quantile at 0.25 / 0.5 / 0.75, bucketize (right both
    ways), counts per bucket by bincount, histc, and histogram."""
    q = torch.quantile(x, torch.tensor([0.25, 0.5, 0.75]))
    b = torch.bucketize(x, q)
    br = torch.bucketize(x, q, right=True, out_int32=True)
    return q, b, br, torch.bincount(b, minlength=4), torch.histc(x, bins=5, min=-2, max=2)


@fn_case("unique_consecutive_run_length_encoding", lambda i=0: (I(0, 3, 20),))
def unique_consecutive_run_length_encoding(x):
    """Run-length encoding: unique_consecutive with return_inverse and return_counts, the run
    starts by cumsum of counts, decoding with repeat_interleave."""
    vals, inv, counts = torch.unique_consecutive(x, return_inverse=True, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    return vals, inv, counts, starts, torch.repeat_interleave(vals, counts)


@fn_case("unique_sorted_counts_dim0_rows", lambda i=0: (I(0, 2, 8, 3),))
def unique_sorted_counts_dim0_rows(x):
    """torch.unique over rows (dim=0) with inverse and counts, and of the flattened tensor."""
    u, inv, c = torch.unique(x, dim=0, return_inverse=True, return_counts=True)
    return u, inv, c, torch.unique(x, return_counts=True)


@fn_case("kthvalue_median_mode_nanmedian", lambda i=0: (I(0, 5, 3, 7).float(),))
def kthvalue_median_mode_nanmedian(x):
    """kthvalue, median (lower middle for even counts), mode, nanmedian with NaNs written in."""
    y = x.clone()
    y[0, 0] = float("nan")
    return (torch.kthvalue(x, 3, dim=1), x.median(dim=1), torch.mode(x, dim=1), torch.nanmedian(y, dim=1),
            x[:, :6].median(), torch.nanmedian(y))


@fn_case("cummax_cummin_logcumsumexp_msort", lambda i=0: (R(3, 9),))
def cummax_cummin_logcumsumexp_msort(x):
    """Running extrema with indices (cummax / cummin), logcumsumexp, msort, cumprod."""
    return torch.cummax(x, 1), torch.cummin(x, 0), torch.logcumsumexp(x, 1), torch.msort(x), torch.cumprod(x, 1)


@fn_case("topk_largest_false_sorted_gather_rank", lambda i=0: (R(4, 10),))
def topk_largest_false_sorted_gather_rank(x, k=3):
    """Smallest-k with topk(largest=False), ranks of every element by a double argsort, and the
    values gathered back."""
    v, i = x.topk(k, dim=1, largest=False)
    ranks = x.argsort(1).argsort(1)
    return v, i, ranks, x.gather(1, i)


# ============================================================ guards: calls with changed inputs
@fn_case("new_shape_every_call_reduction_dims", lambda i=0: (R(2 + i, 3 + 2 * i, 4),), ncalls=4)
def new_shape_every_call_reduction_dims(x):
    """A function whose every call has a new shape: reductions over the last dims, a reshape that
    uses x.shape, and a view of size -1."""
    b, t, c = x.shape
    return x.reshape(b * t, c).softmax(-1).view(b, -1).sum(1), x.mean((1, 2)), t * c


@fn_case("new_dtype_every_call_same_function", lambda i=0: (R(3, 4).to([torch.float32, torch.float64, torch.bfloat16, torch.float16][i]),), ncalls=4)
def new_dtype_every_call_same_function(x):
    """The same function on float32, float64, bfloat16 and float16 inputs: gelu, softmax, a
    Python float constant and a dtype-dependent eps from torch.finfo."""
    eps = torch.finfo(x.dtype).eps
    return F.gelu(x) * 0.5 + x.softmax(-1), x / (x.norm() + eps), x.dtype


@fn_case("new_python_values_every_call", lambda i=0: (R(3, 5), [0.5, 2.0, -1.0, 0.0][i], [1, 2, 3, 1][i], [True, False, True, False][i], ["mean", "sum", "max", "none"][i]), ncalls=4)
def new_python_values_every_call(x, scale, k, flag, reduce):
    """A float, an int, a bool and a string argument that change every call."""
    y = x * scale
    y = y.topk(k, -1).values
    if flag:
        y = y.relu()
    if reduce == "mean":
        return y.mean()
    if reduce == "sum":
        return y.sum(0)
    if reduce == "max":
        return y.max(-1)
    return y


@fn_case("non_contiguous_inputs_transposed_strided", lambda i=0: ([R(4, 6), R(6, 4).t(), R(4, 12)[:, ::2], R(8, 6)[::2]][i],), ncalls=4)
def non_contiguous_inputs_transposed_strided(x):
    """Contiguous, transposed, column-strided and row-strided inputs of the same shape: view
    (where it works), in-place write into the input's clone, reshape, and a .stride() read."""
    y = x.clone()
    y[:, 0] = 0
    return y.reshape(-1).cumsum(0), x.t().contiguous().view(-1), x.is_contiguous(), (x * 2).stride()


class ConvCL(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.bn(self.c(x))
        return y, y.is_contiguous(memory_format=torch.channels_last), y.stride()


case("channels_last_and_contiguous_inputs_alternate",
     lambda i=0: (R(2, 3, 5, 5).contiguous(memory_format=torch.channels_last) if i % 2 else R(2, 3, 5, 5),), ncalls=4)(
    lambda: ConvCL())


@fn_case("zero_dim_one_element_and_empty_inputs", lambda i=0: ([torch.tensor(3.0), R(1), R(0, 3), R(1, 1)][i],), ncalls=4)
def zero_dim_one_element_and_empty_inputs(x):
    """0-d, 1-element, empty and 1x1 inputs to one function: sum, amax with a default, numel."""
    s = x.sum()
    m = x.amax() if x.numel() else torch.tensor(-1.0)
    return s, m, x.numel(), x * 2, x.ndim


@fn_case("list_of_variable_length_and_dict_inputs", lambda i=0: ([R(3) for _ in range(2 + i)], {"a": R(2), "b": R(2)} if i != 2 else {"a": R(2)}), ncalls=4)
def list_of_variable_length_and_dict_inputs(xs, d):
    """A list input whose length changes and a dict input whose keys change between calls."""
    tot = torch.stack(xs).sum(0)
    extra = sum(v.sum() for v in d.values())
    return tot * extra, sorted(d.keys()), len(xs)


@fn_case("requires_grad_input_changes_between_calls", lambda i=0: (R(3, 4).requires_grad_(i % 2 == 1),), ncalls=4, context=grad_ctx)
def requires_grad_input_changes_between_calls(x):
    """An input that requires grad on some calls and not others: the output's requires_grad and
    a detach branch on x.requires_grad."""
    y = (x * 2).tanh()
    if x.requires_grad:
        y = y + x.detach()
    return y, y.requires_grad


@fn_case("int_input_changes_to_float_dtype_arith", lambda i=0: ([I(0, 10, 5), R(5), I(0, 10, 5, dtype=torch.int32), torch.tensor([True, False, True, True, False])][i],), ncalls=4)
def int_input_changes_to_float_dtype_arith(x):
    """int64, float32, int32 and bool inputs through one function: true division, floor division,
    sum's dtype (int sums are int64), mean of a float copy, clamp."""
    return x / 2, x // 2 if x.dtype != torch.bool else x, x.sum(), x.float().mean(), x.clamp(max=3)


# ============================================================ integer edge semantics
@fn_case("shift_by_bit_width_or_more_int64_int32_uint8", lambda i=0: (I(-(2 ** 40), 2 ** 40, 8), torch.tensor([0, 1, 31, 32, 63, 64, 65, 100])))
def shift_by_bit_width_or_more_int64_int32_uint8(x, s):
    """Shifts by amounts at or past the bit width (torch gives 0 for <<, 0 / -1 for >> of
    non-negative / negative values), in int64, int32 and uint8."""
    x32, s32 = x.to(torch.int32), s.to(torch.int32)
    u, su = x.to(torch.uint8), s.to(torch.uint8)
    return x << s, x >> s, x32 << s32, x32 >> s32, u << su, u >> su, x >> 64, x << 70


@fn_case("float_to_int_conversion_out_of_range_negative_to_uint8", lambda i=0: (R(12) * 200,))
def float_to_int_conversion_out_of_range_negative_to_uint8(x):
    """Float to integer conversions: negative floats to uint8 (no clamp, as image code forgets to),
    truncation toward zero to int32 / int64 / int8, and .round() first."""
    return x.to(torch.uint8), x.to(torch.int32), x.long(), x.to(torch.int8), x.round().to(torch.int16), x.trunc()


@fn_case("int_division_by_zero_raises_like_eager", lambda i=0: (I(-9, 9, 6), torch.tensor([1, 2, 0 if i == 1 else 3, -1, 4, 5])), ncalls=3)
def int_division_by_zero_raises_like_eager(a, b):
    """Integer floor division / remainder by a tensor that holds a zero on one call (eager raises
    ZeroDivisionError as a RuntimeError), the other calls valid."""
    return a // b, a % b, torch.div(a, b, rounding_mode="trunc")


@fn_case("int8_uint8_overflow_abs_min_neg", lambda i=0: (I(-128, 128, 10, dtype=torch.int8), I(0, 256, 10, dtype=torch.uint8)))
def int8_uint8_overflow_abs_min_neg(a, u):
    """int8 add / mul wrap around, abs and negation of -128 stay -128, uint8 subtraction and
    negation wrap, uint8 // and %, int8 sum promotes to int64, cumsum of int8 to int64."""
    a = torch.cat([a, torch.tensor([-128, 127], dtype=torch.int8)])
    return (a + a, a * 3, a.abs(), -a, u - 200, -u, u // 7, u % 7, a.sum(), a.cumsum(0), u.sum(), u.prod(),
            a.to(torch.int16) * 300)


@fn_case("float_rounding_modes_half_even_decimals", lambda i=0: (torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.675, -3.14159, 1e-9]) + 0.0 * i,))
def float_rounding_modes_half_even_decimals(x):
    """round (half to even), round(decimals=2) and negative decimals, trunc, frac of negatives,
    floor / ceil, fmod and remainder of negatives by positive and negative divisors, //."""
    return (torch.round(x), torch.round(x, decimals=2), torch.round(x * 1000, decimals=-2), x.trunc(), x.frac(),
            x.floor(), x.ceil(), torch.fmod(x, 0.7), torch.remainder(x, -0.7), torch.remainder(x, 0.7), x // 0.3)


@fn_case("int_pow_and_clamp_float_bounds_promotion", lambda i=0: (I(-4, 5, 8), I(0, 4, 8)))
def int_pow_and_clamp_float_bounds_promotion(a, e):
    """Integer pow with tensor exponents (0 ** 0 = 1, negative bases), pow of a Python int base,
    clamp of an int tensor with float bounds (promotes), float ** int tensor."""
    return a ** e, 2 ** e, torch.clamp(a, min=-1.5, max=2.5), a.float() ** e, torch.pow(a, 3), a.clamp(min=0)


@fn_case("nan_inf_handling_nan_to_num_isfinite_where", lambda i=0: (torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -0.0, 3.0]) * (1 + i),))
def nan_inf_handling_nan_to_num_isfinite_where(x):
    """NaN / inf: nan_to_num with and without arguments, isfinite / isinf / isnan, max / min /
    amax with NaN (propagate), fmax / fmin (ignore), nansum / nanmean, sign of -0.0, where."""
    return (torch.nan_to_num(x), torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0), torch.isfinite(x), x.isinf(),
            x.max(), x.amin(), torch.fmax(x, torch.zeros_like(x)), torch.fmin(x, torch.ones_like(x)), x.nansum(),
            torch.nanmean(x), torch.sign(x), torch.signbit(x), torch.where(x.isnan(), torch.zeros_like(x), x).clamp(-5, 5))


@fn_case("zero_dim_tensor_as_python_int_everywhere", lambda i=0: (R(10, 4), torch.tensor(3 + i)))
def zero_dim_tensor_as_python_int_everywhere(x, n):
    """A 0-d integer tensor where torch reads a Python int: arange(n), narrow(0, n, 2), x[:n],
    repeat(n, 1), torch.zeros(n), F.pad(x, (n, 0)), roll(n), topk(n), chunk(n), new_full((n,), 1)."""
    return (torch.arange(n), x.narrow(0, n, 2), x[:n], x[:2].repeat(n, 1), torch.zeros(n), F.pad(x, (n, 0)),
            x.roll(int(n), 0), x[:, 0].topk(n).values, len(x.chunk(n)), x.new_full((n,), 1.0), x.view(-1, n + 1) if 40 % (n + 1) == 0 else x)


# ============================================================ inputs written in place, aliasing
@fn_case("inplace_write_into_strided_view_of_argument", lambda i=0: (R(4, 6),))
def inplace_write_into_strided_view_of_argument(x):
    """The function writes the caller's tensor through strided views (every other column
    scaled, a diagonal filled, a transposed slice added to): the caller sees the writes."""
    x[:, ::2].mul_(2)
    x.diagonal().fill_(0.5)
    x.t()[1:3].add_(1)
    return x.sum(0)


@fn_case("returns_views_of_inputs_and_input_itself", lambda i=0: (R(3, 4),))
def returns_views_of_inputs_and_input_itself(x):
    """Outputs that alias the input: the input itself, a view, a transpose, an unsqueeze, a
    reshape (a view here), and a fresh tensor; then a write through one view."""
    v = x[1]
    v.add_(1)
    return x, v, x.t(), x.unsqueeze(0), x.reshape(12), x * 1


@fn_case("out_kwarg_into_preallocated_and_resize", lambda i=0: (R(3, 4), torch.empty(0), torch.empty(3, 4)))
def out_kwarg_into_preallocated_and_resize(x, o1, o2):
    """out= into a 0-size tensor (resized by the op) and into a preallocated one, torch.add /
    matmul / cumsum with out=."""
    torch.add(x, 1, out=o1)
    torch.cumsum(x, 1, out=o2)
    return o1.shape, o1 * 2, o2


# ============================================================ attention / RNN library paths
class MHAMasks(nn.Module):
    """nn.MultiheadAttention (batch_first) with a bool key_padding_mask (every row keeps a key), a
    float causal attn_mask and average_attn_weights=False."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True, dropout=0.0)

    def forward(self, x, pad):
        T = x.shape[1]
        am = torch.triu(torch.full((T, T), -1e4), 1)
        out, w = self.mha(x, x, x, key_padding_mask=pad, attn_mask=am, average_attn_weights=False)
        return out, w


case("mha_key_padding_bool_float_attn_mask_per_head_weights",
     lambda i=0: (R(2, 5, 8), torch.tensor([[False] * 5, [False, False, False, True, True]])))(lambda: MHAMasks())


@fn_case("sdpa_is_causal_and_float_mask_scale_gqa", lambda i=0: (R(2, 4, 6, 8), R(2, 2, 6, 8), R(2, 2, 6, 8)))
def sdpa_is_causal_and_float_mask_scale_gqa(q, k, v):
    """F.scaled_dot_product_attention: is_causal, a float additive mask, scale=, and grouped-query
    attention by repeat_interleave of the K/V heads (and enable_gqa=True)."""
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    a = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    m = torch.randn(6, 6) * 0.1
    b = F.scaled_dot_product_attention(q, kk, vv, attn_mask=m, scale=0.2)
    c = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return a, b, c


class RNNVariants(nn.Module):
    """nn.LSTM with proj_size, bidirectional 2-layer GRU, nn.RNN with relu: outputs and states."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, proj_size=3, batch_first=True)
        self.gru = nn.GRU(4, 5, num_layers=2, bidirectional=True)
        self.rnn = nn.RNN(4, 3, nonlinearity="relu")

    def forward(self, x):
        a, (h, c) = self.lstm(x)
        b, hg = self.gru(x.transpose(0, 1))
        r, hr = self.rnn(x.transpose(0, 1))
        return a, h, c, b, hg, r, hr


case("lstm_proj_size_bigru_relu_rnn_states", lambda i=0: (R(2, 5 + i, 4),))(lambda: RNNVariants())


class OptimizerStateReload(nn.Module):
    """Adam stepped inside the forward; between calls the optimizer's state_dict is saved and
    loaded back into it (exp_avg tensors replaced by copies), lr changed through param_groups."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)
        self.opt = torch.optim.Adam(self.l.parameters(), lr=0.05)

    def forward(self, x):
        self.opt.zero_grad()
        self.l(x).pow(2).mean().backward()
        self.opt.step()
        return self.l.weight.detach().clone()


def _reload_opt(m, i):
    if i == 2:
        sd = m.opt.state_dict()
        sd["param_groups"][0]["lr"] = 0.01
        m.opt.load_state_dict(sd)


case("optimizer_state_dict_reloaded_between_calls", lambda: (R(4, 3),), train=True, ncalls=4, between=_reload_opt)(
    lambda: OptimizerStateReload())


class NoGradDecoratedMethod(nn.Module):
    """A method decorated with @torch.no_grad() called from the forward (a target network), an
    enable_grad() block inside it, and the outer output's gradient."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    @torch.no_grad()
    def target(self, x):
        t = self.b(x)
        with torch.enable_grad():
            u = self.a(x) * 2
        return t, u

    def forward(self, x):
        t, u = self.target(x)
        out = self.a(x) - t
        return out, u.requires_grad, t.requires_grad


case("no_grad_decorated_method_with_enable_grad_inside", lambda: (R(2, 3),), context=grad_ctx)(
    lambda: NoGradDecoratedMethod())


# ============================================================ Python state across calls
class MemoryQueue(nn.Module):
    """A MoCo-style queue kept as a Python list of detached tensors: appended each call, the
    oldest popped past 3 entries, logits against the concatenated queue."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.queue = []

    def forward(self, x):
        k = F.normalize(self.enc(x), dim=1)
        neg = torch.cat(self.queue) if self.queue else torch.zeros(1, 4)
        logits = k @ neg.t()
        self.queue.append(k.detach())
        if len(self.queue) > 3:
            self.queue.pop(0)
        return logits, len(self.queue)


case("memory_queue_python_list_append_pop", lambda i=0: (R(2 + i % 2, 4),), ncalls=6)(lambda: MemoryQueue())


class ShapeKeyedCache(nn.Module):
    """A dict attribute caching a positional table per sequence length (computed on a miss inside
    the forward, reused after), a try / except KeyError lookup."""

    def __init__(self):
        super().__init__()
        self.cache = {}

    def table(self, T, d):
        try:
            return self.cache[(T, d)]
        except KeyError:
            pos = torch.arange(T).float()[:, None] / (10 ** (torch.arange(d).float() / d))
            self.cache[(T, d)] = t = torch.sin(pos)
            return t

    def forward(self, x):
        return x + self.table(x.shape[1], x.shape[2]), len(self.cache)


case("shape_keyed_dict_cache_try_except_keyerror", lambda i=0: (R(2, [3, 5, 3, 7][i], 4),), ncalls=4)(lambda: ShapeKeyedCache())


class ExplicitGenerator(nn.Module):
    """An explicit torch.Generator held by the module (seeded once): randn / bernoulli /
    multinomial / randperm drawn from it, its state advancing call after call."""

    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(1234)

    def forward(self, x):
        noise = torch.randn(x.shape, generator=self.g)
        keep = torch.bernoulli(torch.full_like(x, 0.7), generator=self.g)
        idx = torch.multinomial(x.softmax(-1), 2, generator=self.g)
        perm = torch.randperm(x.shape[0], generator=self.g)
        return (x + noise) * keep, idx, perm


case("explicit_generator_attribute_draws_advance", lambda: (R(4, 5),), ncalls=4)(lambda: ExplicitGenerator())


@fn_case("manual_seed_inside_forward_then_draws", lambda i=0: (R(3, 4), 7 + (i == 2)))
def manual_seed_inside_forward_then_draws(x, seed):
    """torch.manual_seed(seed) inside the function, then randn_like / dropout / rand: the draws and
    the global generator's state after the call follow the seed."""
    torch.manual_seed(seed)
    a = torch.randn_like(x)
    b = F.dropout(x, 0.5, training=True)
    return a, b, torch.rand(2)


@fn_case("fork_rng_and_get_set_rng_state_replay_noise", lambda i=0: (R(3, 4),))
def fork_rng_and_get_set_rng_state_replay_noise(x):
    """The same noise drawn twice by saving and restoring torch's RNG state, and a draw inside
    torch.random.fork_rng() that leaves the outer stream untouched."""
    st = torch.get_rng_state()
    n1 = torch.randn_like(x)
    torch.set_rng_state(st)
    n2 = torch.randn_like(x)
    with torch.random.fork_rng():
        n3 = torch.rand_like(x)
    return n1 - n2, x + n1, n3, torch.rand(1)


_GLOBAL_SCALE = [1.0]


def _bump_global(m, i):
    _GLOBAL_SCALE[0] = [1.0, 1.0, 3.0, -0.5][i]


class GlobalScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        return self.l(x) * _GLOBAL_SCALE[0]


case("module_level_global_list_changed_between_calls", lambda: (R(2, 3),), ncalls=4, between=_bump_global)(
    lambda: GlobalScale())


class CarriedState(nn.Module):
    """An instance counter (self.calls += 1) and an attribute carrying the previous call's output
    (self.prev = h.detach(), None on the first call) used by the next call: truncated-BPTT state."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(3, 4)
        self.prev = None
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.cell(x, self.prev)
        self.prev = h.detach()
        return h * self.calls


case("instance_counter_and_carried_hidden_state_detached", lambda: (R(2, 3),), ncalls=4)(lambda: CarriedState())


class StreamingConv(nn.Module):
    """A streaming causal conv: the last k-1 frames of the previous chunk kept in a buffer,
    concatenated in front of each new chunk, the buffer replaced by copy_ of the new tail."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 3, 3)
        self.register_buffer("ctx", torch.zeros(1, 2, 2))

    def forward(self, x):
        full = torch.cat([self.ctx, x], -1)
        self.ctx.copy_(full[..., -2:])
        return self.conv(full)


case("streaming_conv_context_buffer_copy_tail", lambda i=0: (R(1, 2, 4 + i),), ncalls=4)(lambda: StreamingConv())


@fn_case("tolist_python_processing_back_to_tensor", lambda i=0: (I(0, 6, 8),))
def tolist_python_processing_back_to_tensor(ids):
    """ids.tolist(), Python dedup keeping order and a Counter, back to tensors with torch.tensor
    and as_tensor; the vocabulary size from max() of the list."""
    from collections import Counter
    lst = ids.tolist()
    seen, order = set(), []
    for t in lst:
        if t not in seen:
            seen.add(t)
            order.append(t)
    cnt = Counter(lst)
    return torch.tensor(order), torch.as_tensor([cnt[t] for t in order], dtype=torch.float32), max(lst) + 1


class _Out(tuple):
    pass


@fn_case("lru_cached_mask_helper_returns_same_tensor", lambda i=0: (R(2, [4, 4, 6][i], 4),))
def lru_cached_mask_helper_returns_same_tensor(x):
    """A functools.lru_cache'd helper returning a causal mask tensor per length (the same tensor
    object on a hit), used by masked_fill."""
    m = _causal(x.shape[1])
    s = (x @ x.transpose(1, 2)).masked_fill(~m, float("-inf"))
    return s.softmax(-1)


@functools.lru_cache(maxsize=4)
def _causal(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


@dataclasses.dataclass
class _DOut:
    logits: torch.Tensor
    loss: object = None


_P = collections.namedtuple("_P", "a b")


class DataclassOut(nn.Module):
    """Outputs as a dataclass (made inside, one field read) and a NamedTuple (ModelOutput style),
    an Optional field None."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 2)

    def forward(self, x):
        y = self.l(x)
        o = _DOut(y)
        return o.logits, o.loss, _P(y.sum(), y.mean())


case("dataclass_and_namedtuple_outputs", lambda: (R(2, 3),))(lambda: DataclassOut())


@fn_case("generator_function_yields_tensors_consumed", lambda i=0: (R(10, 3),))
def generator_function_yields_tensors_consumed(x):
    """A helper generator that yields sliding chunks (with a running offset), consumed by a list
    comprehension and by next() on a second generator."""
    def chunks(t, size=3):
        off = 0
        while off < t.shape[0]:
            yield t[off:off + size] * (off + 1)
            off += size
    parts = [c.sum(0) for c in chunks(x)]
    g = chunks(x, 4)
    first = next(g)
    return torch.stack(parts), first, sum(1 for _ in g)


# ============================================================ numeric edge semantics
@fn_case("bf16_fp16_rounding_residuals_exposed_in_fp32", lambda i=0: (R(64) * 10 ** (i - 1),))
def bf16_fp16_rounding_residuals_exposed_in_fp32(x):
    """The rounding of float32 to bfloat16 / float16 (nearest even) made visible in float32:
    x.to(bf16).float() - x, the same for half, and fp16 overflow to inf past 65504."""
    return (x.to(torch.bfloat16).float() - x, x.half().float() - x, (x * 1e4).half().float(),
            x.double().float() - x, x.to(torch.bfloat16).to(torch.float16).float())


@fn_case("low_precision_reductions_sum_mean_var_cumsum", lambda i=0: (R(4, 300).to([torch.bfloat16, torch.float16, torch.bfloat16][i]) + 3,))
def low_precision_reductions_sum_mean_var_cumsum(x):
    """Reductions of bf16 / fp16 tensors (eager accumulates in float32 and rounds once):
    sum, mean, var, std, norm, cumsum, softmax, logsumexp, prod of values near 1."""
    return (x.sum(1), x.mean(1), x.var(1), x.std(1), x.norm(dim=1), x.cumsum(1)[:, -1], x.softmax(1)[:, :5],
            x.logsumexp(1), (x / x.abs().amax()).prod(1))


@fn_case("argmax_ties_nan_sort_nan_topk_nan", lambda i=0: (torch.tensor([[1.0, 3.0, 3.0, float("nan"), 0.0], [2.0, 2.0, -1.0, 2.0, 1.0]]) + i,))
def argmax_ties_nan_sort_nan_topk_nan(x):
    """Ties and NaN in arg-reductions: argmax / argmin of ties (first index), NaN wins max /
    argmax, sort puts NaN last (first descending), topk with NaN, max(dim) values and indices."""
    return (x.argmax(1), x.argmin(1), x.max(1), x.min(1), x.sort(1), x.sort(1, descending=True),
            x.topk(2, 1), x.amax(1), torch.nan_to_num(x).argmax(1))


@fn_case("empty_reductions_sum_prod_mean_and_clamp_min_gt_max", lambda i=0: (R(0, 3), R(4)))
def empty_reductions_sum_prod_mean_and_clamp_min_gt_max(e, x):
    """Reductions over an empty dim (sum 0, prod 1, mean NaN, logsumexp -inf), clamp with
    min > max (max wins), clamp of NaN, lerp with weights on both sides of 0.5."""
    return (e.sum(0), e.prod(0), e.mean(0), e.logsumexp(0), x.clamp(min=1.0, max=0.0), torch.clamp(
        torch.tensor([float("nan"), 2.0]), 0, 1), torch.lerp(x, x * 3 + 1, torch.tensor([0.1, 0.5, 0.7, 1.0])))


@fn_case("special_values_xlogy_sinc_atan2_signed_zero_logaddexp", lambda i=0: (torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf")]),))
def special_values_xlogy_sinc_atan2_signed_zero_logaddexp(x):
    """Special values: xlogy(0, 0) = 0, sinc(0) = 1, atan2 with signed zeros in all quadrants,
    logaddexp(-inf, -inf) = -inf, copysign with -0.0, hypot with inf, remainder / fmod by zero."""
    y = x.flip(0)
    return (torch.xlogy(x.abs(), x.abs()), torch.sinc(x), torch.atan2(x, y), torch.logaddexp(x, x),
            torch.copysign(torch.ones(6), x), torch.hypot(x, y), torch.remainder(x, 0.0), torch.fmod(x, 0.0),
            torch.special.entr(x.abs()), torch.sigmoid(x * 1e3), F.softplus(x), F.logsigmoid(x))


@fn_case("int64_large_values_to_float_and_true_divide", lambda i=0: (torch.tensor([2 ** 53 + 1, 2 ** 62 + 2 ** 38 + 1, -(2 ** 60) - 3, 16777217, 7]) + i,))
def int64_large_values_to_float_and_true_divide(a):
    """int64 values past float precision converted to float32 / float64 (round to nearest even),
    true division by an int, float32 -> int64 back, and sums of them as int64."""
    return a.float(), a.double(), a / 3, a.double().long(), a.sum(), (a // 7) * 7 + a % 7 - a


@fn_case("int_reductions_promote_and_wrap_cumprod", lambda i=0: (I(1, 2 ** 20, 12, dtype=torch.int32), I(2, 60, 40)))
def int_reductions_promote_and_wrap_cumprod(a, b):
    """Integer reductions: sum / cumsum of int32 promote to int64, prod of int32 (int64), cumprod
    of int64 that wraps around, max / argmax of int, mean through float."""
    return a.sum(), a.cumsum(0), a.prod(), b.cumprod(0), a.max(), a.argmax(), a.float().mean(), (a * a).sum(0)


# ============================================================ autograd inside the function
class GANStep(nn.Module):
    """A GAN training step: D on real and G(z).detach(), D's optimizer step, then G's loss through
    the updated D and G's step; both losses returned detached."""

    def __init__(self):
        super().__init__()
        self.G = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4))
        self.D = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=1e-2, betas=(0.5, 0.999))
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=1e-2, betas=(0.5, 0.999))

    def forward(self, real, z):
        fake = self.G(z)
        self.opt_d.zero_grad()
        d_loss = F.binary_cross_entropy_with_logits(self.D(real), torch.ones(real.shape[0], 1)) + \
            F.binary_cross_entropy_with_logits(self.D(fake.detach()), torch.zeros(z.shape[0], 1))
        d_loss.backward()
        self.opt_d.step()
        self.opt_g.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(self.D(fake), torch.ones(z.shape[0], 1))
        g_loss.backward()
        self.opt_g.step()
        return d_loss.detach(), g_loss.detach(), fake.detach()


case("gan_step_detached_fake_two_optimizers", lambda: (R(5, 4), R(5, 3)), train=True, ncalls=4)(lambda: GANStep())


class WGANGP(nn.Module):
    """WGAN-GP critic step: interpolates with requires_grad_(), autograd.grad(create_graph=True)
    of the critic, the gradient penalty backpropagated with the critic loss, one step."""

    def __init__(self):
        super().__init__()
        self.D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.opt = torch.optim.SGD(self.D.parameters(), lr=0.05)

    def forward(self, real, fake):
        self.opt.zero_grad()
        eps = torch.rand(real.shape[0], 1)
        xi = (eps * real + (1 - eps) * fake).requires_grad_(True)
        g = torch.autograd.grad(self.D(xi).sum(), xi, create_graph=True)[0]
        gp = ((g.norm(2, dim=1) - 1) ** 2).mean()
        loss = self.D(fake).mean() - self.D(real).mean() + 10 * gp
        loss.backward()
        self.opt.step()
        return loss.detach(), gp.detach()


case("wgan_gp_gradient_penalty_create_graph_step", lambda: (R(6, 4), R(6, 4)), train=True, ncalls=3)(lambda: WGANGP())


class ActorCritic(nn.Module):
    """A2C update: advantage = (returns - value).detach(), policy loss with log_prob of taken
    actions, value loss, entropy bonus, one backward, grad clipping, RMSprop step."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 16)
        self.pi = nn.Linear(16, 3)
        self.v = nn.Linear(16, 1)
        self.opt = torch.optim.RMSprop(self.parameters(), lr=7e-4, eps=1e-5, alpha=0.99)

    def forward(self, obs, actions, returns):
        h = torch.tanh(self.body(obs))
        logits, value = self.pi(h), self.v(h).squeeze(-1)
        dist = torch.distributions.Categorical(logits=logits)
        adv = (returns - value).detach()
        loss = -(dist.log_prob(actions) * adv).mean() + 0.5 * (returns - value).pow(2).mean() - 0.01 * dist.entropy().mean()
        self.opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.parameters(), 0.5)
        self.opt.step()
        return loss.detach(), adv


case("a2c_advantage_detached_entropy_clip_rmsprop", lambda: (R(6, 4), I(0, 3, 6), R(6)), train=True, ncalls=4)(
    lambda: ActorCritic())


class DQNTarget(nn.Module):
    """DQN update: the target network's values under torch.no_grad(), max over actions, the TD
    target, Huber loss of the gathered Q values, a step, and a hard target update every 2 calls."""

    def __init__(self):
        super().__init__()
        self.q = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.t = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.t.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-2)
        self.n = 0

    def forward(self, s, a, r, s2, done):
        with torch.no_grad():
            target = r + 0.99 * (1 - done) * self.t(s2).max(1).values
        q = self.q(s).gather(1, a[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.n += 1
        if self.n % 2 == 0:
            self.t.load_state_dict(self.q.state_dict())
        return loss.detach(), q.detach()


case("dqn_target_no_grad_hard_update_every_two", lambda: (R(5, 4), I(0, 3, 5), R(5), R(5, 4), (U(5) > 0.7).float()),
     train=True, ncalls=5)(lambda: DQNTarget())


class LossCarriedAcrossCalls(nn.Module):
    """The previous call's loss kept as an attribute (with its graph) and used next call only
    through .detach() for a loss-change ratio; backward of the current loss each call."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 1)
        self.prev = None

    def forward(self, x, y):
        loss = F.mse_loss(self.l(x), y)
        ratio = loss.detach() / self.prev.detach() if self.prev is not None else torch.ones(())
        loss.backward()
        self.prev = loss
        return ratio, [p.grad.clone() for p in self.l.parameters()]


case("loss_attribute_carried_used_detached_next_call", lambda i=0: (R(4, 3) + i, R(4, 1)), train=True, ncalls=4)(
    lambda: LossCarriedAcrossCalls())


class HooksOnGrads(nn.Module):
    """Gradient hooks: a parameter hook clamping its gradient (registered by the first call: a
    deepcopy drops tensor hooks), a tensor hook on an intermediate scaling it, retain_grad() on an
    intermediate read after backward."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 1)
        self.hooked = False

    def forward(self, x):
        if not self.hooked:
            self.a.weight.register_hook(lambda g: g.clamp(-0.05, 0.05))
            self.hooked = True
        h = torch.tanh(self.a(x))
        h.register_hook(lambda g: g * 3)
        h.retain_grad()
        out = self.b(h).sum()
        out.backward()
        return h.grad, self.a.weight.grad.clone(), self.b.weight.grad.clone()


case("param_hook_tensor_hook_retain_grad_inside", lambda: (R(5, 3),), train=True)(lambda: HooksOnGrads())


class BackwardInputsAndRetain(nn.Module):
    """Two losses sharing a trunk: backward(retain_graph=True) of the first restricted to the
    head's parameters (inputs=), then the second's full backward; grads accumulate across calls
    (no zero_grad), returned as copies."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(3, 4)
        self.h1 = nn.Linear(4, 1)
        self.h2 = nn.Linear(4, 1)

    def forward(self, x):
        t = F.relu(self.trunk(x))
        l1, l2 = self.h1(t).pow(2).mean(), self.h2(t).abs().mean()
        l1.backward(retain_graph=True, inputs=list(self.h1.parameters()))
        l2.backward()
        return [p.grad.clone() if p.grad is not None else None for p in self.parameters()]


case("backward_inputs_restricted_retain_graph_accumulating", lambda: (R(4, 3),), train=True, ncalls=3)(
    lambda: BackwardInputsAndRetain())


class FreezeBetween(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)

    def forward(self, x):
        self.opt.zero_grad()
        loss = self.b(torch.relu(self.a(x))).pow(2).mean()
        loss.backward()
        self.opt.step()
        return loss.detach(), self.a.weight.grad is None


def _freeze(m, i):
    for p in m.a.parameters():
        p.requires_grad_(i not in (1, 2))


case("requires_grad_flag_flipped_on_params_between_calls", lambda: (R(4, 3),), train=True, ncalls=4, between=_freeze)(
    lambda: FreezeBetween())


class ClosureStep(nn.Module):
    """optimizer.step(closure) with SGD: the closure zeroes grads, computes the loss, backward and
    returns it; the step's return value returned."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.l.parameters(), lr=0.1, momentum=0.5)

    def forward(self, x, y):
        def closure():
            self.opt.zero_grad()
            loss = F.mse_loss(self.l(x), y)
            loss.backward()
            return loss
        loss = self.opt.step(closure)
        return loss.detach(), self.l.weight.detach().clone()


case("optimizer_step_with_closure_returns_loss", lambda: (R(4, 3), R(4, 1)), train=True, ncalls=3)(lambda: ClosureStep())


class FullBackwardHook(nn.Module):
    """A module full backward hook (register_full_backward_hook) that scales grad_input, and a
    backward pre-hook, with the backward run outside (the output returned with its graph)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 1)
        self.a.register_full_backward_hook(lambda m, gi, go: (gi[0] * 0.5,))
        self.b.register_full_backward_pre_hook(lambda m, go: (go[0] * 2,))

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


case("full_backward_hook_and_pre_hook_scale_grads", lambda: (R(4, 3).requires_grad_(),), train=True)(
    lambda: FullBackwardHook())


# ============================================================ parameters and buffers rebound, Python dynamics
class DataAssign(nn.Module):
    """Weight clipping and shrinking through .data: p.data.clamp_() each call (WGAN clipping) and
    p.data = p.data * 0.9 (rebinding the parameter's data to a new tensor) every call."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, x):
        for p in self.l.parameters():
            p.data.clamp_(-0.3, 0.3)
        self.l.weight.data = self.l.weight.data * 0.9
        return self.l(x)


case("param_data_clamp_and_data_rebinding_each_call", lambda: (R(2, 4),), ncalls=4)(lambda: DataAssign())


def _replace_param(m, i):
    if i == 2:
        torch.manual_seed(5)
        m.l.weight = nn.Parameter(torch.randn(3, 4))
    if i == 3:
        m.l.bias = None


case("parameter_object_replaced_then_bias_none_between_calls", lambda: (R(2, 4),), ncalls=4, between=_replace_param)(
    lambda: DataAssign())


class BufferRebind(nn.Module):
    """A buffer rebound (not in place) each call: self.avg = self.avg * 0.9 + x.mean(0) * 0.1, and
    a mask buffer replaced with a new size when the input width changes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(4))
        self.register_buffer("mask", torch.ones(4))

    def forward(self, x):
        if self.mask.shape[0] != x.shape[1]:
            self.mask = torch.ones(x.shape[1]) * 0.5
        self.avg = self.avg * 0.9 + x[:, :4].mean(0) * 0.1
        return x * self.mask, self.avg


case("buffer_rebound_each_call_and_resized", lambda i=0: (R(3, [4, 4, 6, 6][i]),), ncalls=4)(lambda: BufferRebind())


class LazyBuffer(nn.Module):
    """register_buffer on the first call (lazy statistics from the first batch), used after."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        if not hasattr(self, "mu0"):
            self.register_buffer("mu0", x.mean(0).detach().clone())
        return self.l(x - self.mu0)


case("register_buffer_lazily_on_first_call", lambda i=0: (R(4, 3) + i,), ncalls=3)(lambda: LazyBuffer())


class DynamicNames(nn.Module):
    """Layers reached by getattr(self, f"layer{i}") with a depth argument, setattr of a Python float
    attribute named from a string argument."""

    def __init__(self):
        super().__init__()
        for i in range(3):
            setattr(self, f"layer{i}", nn.Linear(4, 4))

    def forward(self, x, depth, tag):
        for i in range(depth):
            x = torch.relu(getattr(self, f"layer{i}")(x))
        setattr(self, f"last_{tag}", float(depth))
        return x


case("getattr_setattr_dynamic_names_depth_argument", lambda i=0: (R(2, 4), [1, 3, 2, 3][i], ["a", "b", "a", "c"][i]),
     ncalls=4)(lambda: DynamicNames())


class TreeRecursive(nn.Module):
    """A recursive network over a nested-list tree (Tree-LSTM-like): leaves are indices into an
    embedding, internal nodes combine children with a shared layer; the tree shape changes."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.comb = nn.Linear(8, 4)

    def encode(self, t):
        if isinstance(t, int):
            return self.emb.weight[t]
        left, right = self.encode(t[0]), self.encode(t[1])
        return torch.tanh(self.comb(torch.cat([left, right])))

    def forward(self, tree):
        return self.encode(tree)


_TREES = [[[1, 2], [3, [4, 5]]], [[1, 2], [3, [4, 5]]], [[[1, 2], 3], 7], [0, 9]]
case("recursive_tree_encoder_nested_list_input", lambda i=0: (_TREES[i],), ncalls=4)(lambda: TreeRecursive())


class RaisesOnBadInput(nn.Module):
    """Input validation that raises ValueError on a bad call (channels mismatch) and an assert on
    the batch size; other calls pass."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[-1] != 4:
            raise ValueError(f"expected 4 features, got {x.shape[-1]}")
        assert x.shape[0] <= 3, "batch too large"
        return self.l(x)


case("raises_value_error_and_assert_on_bad_calls", lambda i=0: (R(2, 4), R(2, 5), R(5, 4), R(3, 4))[i:i + 1], ncalls=4)(
    lambda: RaisesOnBadInput())


class KwargsForward(nn.Module):
    """A forward with *args / **kwargs and defaults: optional mask None on some calls, a scale
    keyword given on some calls, extra kwargs ignored, return_dict switching the output type."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x, *rest, mask=None, scale=1.0, return_dict=False, **kw):
        h = self.l(x) * scale
        if mask is not None:
            h = h.masked_fill(~mask, 0.0)
        for r in rest:
            h = h + r
        if return_dict:
            return {"h": h, "n_extra": len(kw)}
        return h


def _kw_inputs(i=0):
    return [(R(2, 4),), (R(2, 4), R(2, 4)), (R(2, 4),), (R(2, 4), R(4), R(2, 4))][i]


class KwargsDriver(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = KwargsForward()
        self.i = 0

    def forward(self, *args):
        self.i += 1
        if self.i == 1:
            return self.m(*args)
        if self.i == 2:
            return self.m(*args, mask=args[0] > 0, scale=2.0)
        if self.i == 3:
            return self.m(*args, return_dict=True, foo=1, bar=2)
        return self.m(*args, scale=0.5, mask=None)


case("star_args_kwargs_defaults_return_dict_switch", _kw_inputs, ncalls=4)(lambda: KwargsDriver())


@fn_case("optional_none_and_isinstance_dispatch_inputs", lambda i=0: ([R(3), [R(3), R(3)], 2.5, (R(3), None)][i],), ncalls=4)
def optional_none_and_isinstance_dispatch_inputs(x):
    """An argument that is a tensor, a list of tensors, a float or a (tensor, None) tuple on
    different calls, dispatched by isinstance."""
    if isinstance(x, torch.Tensor):
        return x * 2
    if isinstance(x, list):
        return torch.stack(x).sum(0)
    if isinstance(x, tuple):
        a, b = x
        return a if b is None else a + b
    return torch.full((3,), x)


@fn_case("shape_math_python_sqrt_prod_size_arithmetic", lambda i=0: (R(2, 3 + i, 8 * (1 + i)),))
def shape_math_python_sqrt_prod_size_arithmetic(x):
    """Python math on sizes: math.sqrt(d), math.prod(shape), torch.Size slicing and +, numel //,
    a scale from 1 / math.sqrt inside softmax attention."""
    b, t, d = x.shape
    scale = 1 / math.sqrt(d)
    att = (x @ x.transpose(1, 2) * scale).softmax(-1)
    flat = x.reshape(x.shape[:1] + (math.prod(x.shape[1:]),))
    return att @ x, flat.shape, flat.numel() // b, torch.Size([b]) + x.shape[2:]


# ============================================================ library ops less travelled
class EmbeddingMaxNorm(nn.Module):
    """nn.Embedding(max_norm=1.0): the forward renormalises the looked-up rows of the weight in
    place (eager writes the weight during the forward), repeated ids, the weight returned."""

    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 4, max_norm=1.0)
        with torch.no_grad():
            self.e.weight.mul_(3)

    def forward(self, ids):
        return self.e(ids).sum(1), self.e.weight.detach().clone()


case("embedding_max_norm_renormalizes_weight_in_place", lambda i=0: (I(0, 10, 3, 4),), ncalls=3)(lambda: EmbeddingMaxNorm())


class EnsembleVmap(nn.Module):
    """Model ensembling with torch.func.stack_module_state and vmap over functional_call of a
    base copy (the tutorial recipe), the ensemble's mean and spread."""

    def __init__(self):
        super().__init__()
        self.models = nn.ModuleList([nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)) for _ in range(4)])

    def forward(self, x):
        from torch.func import functional_call, stack_module_state
        import copy as _copy
        params, buffers = stack_module_state(list(self.models))
        base = _copy.deepcopy(self.models[0]).to("meta")

        def f(p, b, xx):
            return functional_call(base, (p, b), (xx,))
        out = torch.vmap(f, in_dims=(0, 0, None))(params, buffers, x)
        return out.mean(0), out.std(0)


case("ensemble_stack_module_state_vmap_functional_call", lambda: (R(6, 3),))(lambda: EnsembleVmap())


@fn_case("spatial_transformer_affine_grid_grid_sample", lambda i=0: (R(2, 3, 8, 8), R(2, 2, 3) * 0.1 + torch.eye(2, 3)))
def spatial_transformer_affine_grid_grid_sample(x, theta):
    """A spatial transformer: affine_grid (align_corners False) and grid_sample bilinear with
    border padding, nearest with zeros padding, pixel_shuffle / unshuffle round trip."""
    grid = F.affine_grid(theta, x.shape, align_corners=False)
    a = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    b = F.grid_sample(x, grid * 1.2, mode="nearest", padding_mode="zeros", align_corners=True)
    ps = F.pixel_unshuffle(x[:, :, :8, :8], 2)
    return a, b, F.pixel_shuffle(ps, 2) - x


@fn_case("fold_unfold_im2col_conv_by_matmul", lambda i=0: (R(2, 3, 7, 7), R(4, 3, 3, 3)))
def fold_unfold_im2col_conv_by_matmul(x, w):
    """Convolution by im2col: F.unfold with padding and stride, a matmul with the flattened
    kernel, reshaped; F.fold of the columns back (overlap-add counts) and against conv2d."""
    cols = F.unfold(x, 3, padding=1, stride=2)
    out = (w.view(4, -1) @ cols).view(2, 4, 4, 4)
    ref = F.conv2d(x, w, padding=1, stride=2)
    back = F.fold(cols, (7, 7), 3, padding=1, stride=2)
    return out, ref, back


@fn_case("losses_less_common_ctc_gaussian_poisson_kl_logtarget", lambda i=0: (R(12, 2, 5).log_softmax(-1), I(1, 5, 2, 4), R(6, 3), U(6, 3) + 0.1))
def losses_less_common_ctc_gaussian_poisson_kl_logtarget(lp, tgt, x, var):
    """CTC loss (mean / sum, zero_infinity), Gaussian NLL with full=True, Poisson NLL with
    log_input False, KL div with log_target=True, multilabel soft margin, cosine embedding."""
    il = torch.tensor([12, 10])
    tl = torch.tensor([4, 3])
    y = torch.tensor([1, -1, 1, 1, -1, 1])
    return (F.ctc_loss(lp, tgt, il, tl), F.ctc_loss(lp, tgt, il, tl, reduction="sum", zero_infinity=True),
            F.gaussian_nll_loss(x, x.flip(0), var, full=True), F.poisson_nll_loss(var, x.abs(), log_input=False),
            F.kl_div(x.log_softmax(-1), x.flip(0).log_softmax(-1), reduction="batchmean", log_target=True),
            F.multilabel_soft_margin_loss(x, (x > 0).float()), F.cosine_embedding_loss(x, x.flip(0), y))


@fn_case("distances_cdist_p_pdist_cosine_broadcast", lambda i=0: (R(5, 3), R(4, 3)))
def distances_cdist_p_pdist_cosine_broadcast(a, b):
    """cdist with p = 1, 2, inf and 0.5, pdist, pairwise_distance with eps and keepdim,
    cosine_similarity broadcast over a new axis, F.normalize with p=1."""
    return (torch.cdist(a, b, p=1), torch.cdist(a, b), torch.cdist(a, b, p=float("inf")), torch.cdist(a, b, p=0.5),
            F.pdist(a), F.pairwise_distance(a[:4], b, keepdim=True), F.cosine_similarity(a[:, None], b[None], dim=-1),
            F.normalize(a, p=1, dim=0))


@fn_case("einsum_ellipsis_diagonal_tensordot_kron_block_diag", lambda i=0: (R(2, 3, 3), R(3, 4), R(2, 2)))
def einsum_ellipsis_diagonal_tensordot_kron_block_diag(a, b, c):
    """einsum with an ellipsis, a repeated index (diagonal / trace), an outer product; tensordot
    over two dims, kron, block_diag, cartesian_prod, combinations, tril_indices."""
    return (torch.einsum("...ij,jk->...ik", a, b), torch.einsum("bii->bi", a), torch.einsum("bii->b", a),
            torch.einsum("i,j->ij", b[0], c[0]), torch.tensordot(a, a, dims=([1, 2], [1, 2])), torch.kron(c, c),
            torch.block_diag(c, b[:1], torch.ones(1, 1)), torch.cartesian_prod(c[0], c[1]), torch.combinations(b[0], 2),
            torch.tril_indices(3, 4, -1))


@fn_case("diff_gradient_trapezoid_cumulative", lambda i=0: (R(3, 9).cumsum(1),))
def diff_gradient_trapezoid_cumulative(y):
    """Numerical calculus: diff with prepend / n=2, torch.gradient with spacing and edge_order 2,
    trapezoid and cumulative_trapezoid with dx, renorm of rows."""
    return (torch.diff(y, dim=1, prepend=y[:, :1]), torch.diff(y, n=2), torch.gradient(y, spacing=0.5, dim=1)[0],
            torch.gradient(y, dim=1, edge_order=2)[0], torch.trapezoid(y, dx=0.1), torch.cumulative_trapezoid(y, dx=0.1),
            torch.renorm(y, 2, 0, 1.0))


@fn_case("index_put_accumulate_duplicates_put_scatter_multiply", lambda i=0: (R(5, 3), I(0, 5, 8), R(8, 3)))
def index_put_accumulate_duplicates_put_scatter_multiply(x, idx, v):
    """index_put_ with accumulate=True over duplicate indices, put_ with accumulate, scatter_ with
    reduce='multiply', masked_scatter_, bincount with weights."""
    a = x.clone().index_put_((idx,), v, accumulate=True)
    b = x.clone().flatten().put_(idx, v[:, 0], accumulate=True)
    c = torch.ones(5, 3).scatter_(0, idx[:5, None].expand(5, 3), v[:5], reduce="multiply")
    d = x.clone().masked_scatter_(x > 0, v)
    return a, b, c, d, torch.bincount(idx, weights=v[:, 0], minlength=5)


@fn_case("pad_sequence_pack_unpack_roundtrip", lambda i=0: ([R(4 - k + i % 2, 3) for k in range(3)],))
def pad_sequence_pack_unpack_roundtrip(seqs):
    """pad_sequence (batch_first, padding_value), pack_sequence (enforce_sorted False),
    pad_packed_sequence back with total_length, unpad_sequence."""
    from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence, pad_sequence, unpad_sequence
    padded = pad_sequence(seqs, batch_first=True, padding_value=-1.0)
    packed = pack_sequence(seqs, enforce_sorted=False)
    back, lens = pad_packed_sequence(packed, batch_first=True, total_length=6)
    un = unpad_sequence(padded, lens, batch_first=True)
    return padded, back, lens, [u.sum() for u in un]


@fn_case("interpolate_modes_antialias_scale_factor_recompute", lambda i=0: (R(1, 2, 9, 7),))
def interpolate_modes_antialias_scale_factor_recompute(x):
    """F.interpolate: bilinear with antialias downsampling, bicubic align_corners, nearest-exact,
    area, scale_factor with recompute_scale_factor, trilinear on a 5-d view."""
    return (F.interpolate(x, size=(4, 3), mode="bilinear", antialias=True),
            F.interpolate(x, scale_factor=1.7, mode="bicubic", align_corners=True),
            F.interpolate(x, size=(5, 11), mode="nearest-exact"), F.interpolate(x, size=(3, 3), mode="area"),
            F.interpolate(x, scale_factor=0.55, mode="bilinear", recompute_scale_factor=True),
            F.interpolate(x.unsqueeze(2), scale_factor=(1, 2, 2), mode="trilinear"))


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
