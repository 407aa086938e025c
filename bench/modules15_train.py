"""bench/modules15.py's training part (same runner, its CASES appended there): whole training
steps as notebooks and reference repositories write them, inside the compiled function:
optimizers built with parameter groups by name, schedulers stepped per call (cosine with warm
restarts, OneCycle, ReduceLROnPlateau on a Python float), CPU autocast with a GradScaler,
gradient accumulation over micro-batches, a GAN step with two optimizers, a VAE, knowledge
distillation, a Lookahead wrapper, custom autograd.Functions (setup_context style, mark_dirty,
LSQ quantizer with a gradient scale, a function returning an integer tensor), tensor and module
hooks, torch.utils.checkpoint (non-reentrant, checkpoint_sequential), and the parametrizations
API's weight_norm / spectral_norm / orthogonal.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, grad_ctx, registrars
from torch.nn.utils import parametrizations as P
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _mlp(i=6, h=12, o=3):
    return nn.Sequential(nn.Linear(i, h), nn.LayerNorm(h), nn.GELU(), nn.Linear(h, o))


class ParamGroupsCosine(nn.Module):
    """The timm / HF recipe: no weight decay for biases and norm weights (chosen by name and ndim),
    AdamW over two groups, CosineAnnealingWarmRestarts stepped with a fractional epoch, the lr of
    each group returned."""

    def __init__(self):
        super().__init__()
        self.net = _mlp()
        decay = [p for n, p in self.net.named_parameters() if p.ndim > 1 and "norm" not in n]
        no_decay = [p for n, p in self.net.named_parameters() if p.ndim <= 1]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=3e-3, betas=(0.9, 0.95))
        self.sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(self.opt, T_0=2, T_mult=2)
        self.epoch = 0.0

    def forward(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.epoch += 0.5
        self.sched.step(self.epoch)
        return loss.item(), [g["lr"] for g in self.opt.param_groups]


case("adamw_param_groups_by_name_cosine_warm_restarts", lambda: (R(8, 6), I(0, 3, 8)), train=True, ncalls=4,
     context=grad_ctx)(lambda: ParamGroupsCosine())


class AccumSteps(nn.Module):
    """Gradient accumulation over micro-batches split by torch.chunk, the loss divided by the
    number of steps, SGD stepped once, clip_grad_norm_ with its total norm checked finite."""

    def __init__(self, accum=3):
        super().__init__()
        self.net = _mlp(5, 8, 2)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9, dampening=0.1)
        self.accum = accum
        self.skipped = 0

    def forward(self, x, y):
        total = 0.0
        for xb, yb in zip(x.chunk(self.accum), y.chunk(self.accum)):
            loss = F.mse_loss(self.net(xb), yb) / self.accum
            loss.backward()
            total += loss.item()
        norm = nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        if torch.isfinite(norm):
            self.opt.step()
        else:
            self.skipped += 1
        self.opt.zero_grad()
        return total, norm


case("grad_accumulation_chunks_clip_finite_check", lambda: (R(9, 5), R(9, 2)), train=True, ncalls=4,
     context=grad_ctx)(lambda: AccumSteps())


class ScalerStep(nn.Module):
    """torch.autocast('cpu', bfloat16) forward + GradScaler('cpu'): scale, backward, unscale_,
    clip, step, update; the scale and the found-inf state read after each step; OneCycleLR."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(3, 6, 3, padding=1), nn.BatchNorm1d(6), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(6 * 5, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.02)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=0.05, total_steps=10)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1)

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.net(x)
            loss = F.cross_entropy(out.float(), y)
        self.opt.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        nn.utils.clip_grad_value_(self.net.parameters(), 0.5)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        return loss.detach(), out.dtype, self.scaler.get_scale()


case("autocast_bf16_conv1d_batchnorm_grad_scaler_onecycle", lambda: (R(4, 3, 5), I(0, 2, 4)), train=True,
     ncalls=4, context=grad_ctx)(lambda: ScalerStep())


class Plateau(nn.Module):
    """ReduceLROnPlateau stepped on a validation loss computed under no_grad in eval mode inside the
    same call (train() / eval() switched in forward), Adam; patience 0 so the lr drops."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.ReLU(), nn.Linear(8, 1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-2)
        self.sched = torch.optim.lr_scheduler.ReduceLROnPlateau(self.opt, patience=0, factor=0.5, threshold=0.5)

    def forward(self, x, y, xv, yv):
        self.net.train()
        self.opt.zero_grad()
        loss = F.smooth_l1_loss(self.net(x).squeeze(-1), y)
        loss.backward()
        self.opt.step()
        self.net.eval()
        with torch.no_grad():
            val = F.mse_loss(self.net(xv).squeeze(-1), yv).item()
        self.sched.step(val)
        return loss.detach(), val, self.opt.param_groups[0]["lr"]


case("reduce_lr_on_plateau_train_eval_switch_inside", lambda: (R(6, 4), R(6), R(4, 4), R(4)), train=True, ncalls=4,
     context=grad_ctx)(lambda: Plateau())


class GANStep(nn.Module):
    """The DCGAN tutorial's step in one call: D on real and detached fake (BCE with label
    smoothing), D's Adam step, then G through D with D's gradients left in place, G's step."""

    def __init__(self):
        super().__init__()
        self.G = nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.Linear(8, 4), nn.Tanh())
        self.D = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        self.optD = torch.optim.Adam(self.D.parameters(), lr=2e-3, betas=(0.5, 0.999))
        self.optG = torch.optim.Adam(self.G.parameters(), lr=2e-3, betas=(0.5, 0.999))

    def forward(self, real, z):
        fake = self.G(z)
        self.optD.zero_grad()
        lr = F.binary_cross_entropy_with_logits(self.D(real), torch.full((real.shape[0], 1), 0.9))
        lf = F.binary_cross_entropy_with_logits(self.D(fake.detach()), torch.zeros(z.shape[0], 1))
        (lr + lf).backward()
        self.optD.step()
        self.optG.zero_grad()
        lg = F.binary_cross_entropy_with_logits(self.D(fake), torch.ones(z.shape[0], 1))
        lg.backward()
        self.optG.step()
        return (lr + lf).item(), lg.item(), fake.detach()


case("gan_two_optimizers_detach_fake_one_call", lambda: (R(5, 4), R(5, 3)), train=True, ncalls=4,
     context=grad_ctx)(lambda: GANStep())


class VAE(nn.Module):
    """The PyTorch examples' VAE: encoder to mu / logvar, reparameterisation with randn_like, BCE
    summed + KL, an Adam step, a sample decoded under no_grad."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 6)
        self.mu, self.lv = nn.Linear(6, 2), nn.Linear(6, 2)
        self.dec = nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 8))
        self.opt = torch.optim.Adam(self.parameters(), lr=1e-3)

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.lv(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        recon = torch.sigmoid(self.dec(z))
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        self.opt.zero_grad()
        (bce + kld).backward()
        self.opt.step()
        with torch.no_grad():
            sample = torch.sigmoid(self.dec(torch.randn(2, 2)))
        return bce.item() / len(x), kld.item(), sample


case("vae_reparam_bce_kl_adam_sample", lambda: (torch.rand(6, 8),), train=True, ncalls=4, context=grad_ctx)(
    lambda: VAE())


class Distill(nn.Module):
    """Hinton distillation: a frozen teacher in eval mode under no_grad, KL of temperature-softened
    distributions scaled by T**2 plus hard-label CE, the student's SGD step."""

    def __init__(self, T=4.0, alpha=0.7):
        super().__init__()
        self.teacher = _mlp(6, 16, 4).eval().requires_grad_(False)
        self.student = nn.Sequential(nn.Linear(6, 4))
        self.opt = torch.optim.SGD(self.student.parameters(), lr=0.1)
        self.T, self.alpha = T, alpha

    def forward(self, x, y):
        with torch.no_grad():
            t = self.teacher(x)
        s = self.student(x)
        soft = F.kl_div(F.log_softmax(s / self.T, 1), F.softmax(t / self.T, 1), reduction="batchmean") * self.T ** 2
        loss = self.alpha * soft + (1 - self.alpha) * F.cross_entropy(s, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item(), (s.argmax(1) == t.argmax(1)).float().mean()


case("distillation_frozen_teacher_kl_t_squared", lambda: (R(7, 6), I(0, 4, 7)), train=True, ncalls=4,
     context=grad_ctx)(lambda: Distill())


class Lookahead:
    """A hand-written Lookahead wrapper (as in lonePatient's repository): slow weights in a dict
    keyed by the parameter, every k steps interpolated and copied back."""

    def __init__(self, base, k=2, alpha=0.5):
        self.base, self.k, self.alpha, self.counter = base, k, alpha, 0
        self.slow = {p: p.detach().clone() for g in base.param_groups for p in g["params"]}

    def step(self):
        self.base.step()
        self.counter += 1
        if self.counter % self.k == 0:
            for p, q in self.slow.items():
                q.add_(p.detach() - q, alpha=self.alpha)
                p.data.copy_(q)


class LookaheadNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 8, 2)
        self.opt = Lookahead(torch.optim.RAdam(self.net.parameters(), lr=1e-2))

    def forward(self, x, y):
        self.opt.base.zero_grad()
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach(), self.opt.counter


case("lookahead_wrapper_slow_weights_dict_radam", lambda: (R(6, 4), I(0, 2, 6)), train=True, ncalls=5,
     context=grad_ctx)(lambda: LookaheadNet())


# ============================================================================ autograd.Function
class ScaledSoftplus(torch.autograd.Function):
    """The torch 2 style: forward without ctx, setup_context saving inputs and output, backward
    from the saved output; vmap-free."""

    @staticmethod
    def forward(x, beta):
        return F.softplus(x * beta) / beta

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, beta = inputs
        ctx.save_for_backward(x)
        ctx.beta = beta

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x * ctx.beta), None


class LSQ(torch.autograd.Function):
    """Learned step size quantization (Esser et al.): round with a straight-through gradient, the
    step's gradient from the in-range / clipped masks, scaled by 1 / sqrt(numel * Qp)."""

    @staticmethod
    def forward(ctx, x, s, qn, qp):
        g = 1.0 / math.sqrt(x.numel() * qp)
        ctx.save_for_backward(x, s)
        ctx.other = g, qn, qp
        return (x / s).clamp(qn, qp).round() * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        g, qn, qp = ctx.other
        q = x / s
        lo, hi = (q < qn).float(), (q > qp).float()
        mid = 1.0 - lo - hi
        gs = ((lo * qn + hi * qp + mid * (q.round() - q)) * grad * g).sum().view_as(s)
        return grad * mid, gs, None, None


class QATNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(5, 8), nn.Linear(8, 2)
        self.s_w = nn.Parameter(torch.tensor(0.05))
        self.s_a = nn.Parameter(torch.tensor(0.1))
        self.opt = torch.optim.SGD(self.parameters(), lr=0.05)

    def forward(self, x, y):
        w = LSQ.apply(self.fc1.weight, self.s_w, -8, 7)
        h = ScaledSoftplus.apply(F.linear(x, w, self.fc1.bias), 2.0)
        h = LSQ.apply(h, self.s_a, 0, 15)
        loss = F.cross_entropy(self.fc2(h), y)
        self.opt.zero_grad()
        loss.backward()
        grads = (self.s_w.grad.clone(), self.s_a.grad.clone())
        self.opt.step()
        return loss.detach(), grads


case("lsq_quantizer_setup_context_function_train", lambda: (R(6, 5), I(0, 2, 6)), train=True, ncalls=4,
     context=grad_ctx)(lambda: QATNet())


class InplaceClamp(torch.autograd.Function):
    """An in-place Function: the input clamped in place, mark_dirty, the mask saved for backward."""

    @staticmethod
    def forward(ctx, x, lo, hi):
        mask = (x >= lo) & (x <= hi)
        x.clamp_(lo, hi)
        ctx.mark_dirty(x)
        ctx.save_for_backward(mask)
        return x

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None, None


class ArgTopK(torch.autograd.Function):
    """Values and their int64 indices from one Function, the indices non-differentiable; backward
    scatters into zeros of the input's shape saved as a Python tuple."""

    @staticmethod
    def forward(ctx, x, k):
        v, i = x.topk(k, -1)
        ctx.mark_non_differentiable(i)
        ctx.save_for_backward(i)
        ctx.shape = x.shape
        return v, i

    @staticmethod
    def backward(ctx, gv, gi):
        (i,) = ctx.saved_tensors
        return torch.zeros(ctx.shape, dtype=gv.dtype).scatter(-1, i, gv), None


@fn_case("functions_mark_dirty_and_int_outputs_grad", lambda: (R(4, 6).requires_grad_(),), context=grad_ctx)
def dirty_and_topk(x):
    h = x * 1.5
    h = InplaceClamp.apply(h, -1.0, 1.0)
    v, i = ArgTopK.apply(h * 2, 3)
    loss = (v * torch.arange(1, 4)).sum()
    (g,) = torch.autograd.grad(loss, x)
    return v.detach(), i, g


# ============================================================================ hooks
class HookedNet(nn.Module):
    """A forward pre-hook normalising the input, a forward hook storing activations in a dict (the
    feature-extraction idiom) and one adding noise-free scaling of the output, a tensor hook on an
    intermediate clipping its gradient; a training step reads the stored activations."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)
        self.acts = {}

    def install_hooks(self):
        """Registered on each copy by the case's `between` (closures over `self`: a deepcopy of a
        hooked module keeps hooks that write into the original's dict)."""
        self.a.register_forward_pre_hook(lambda m, inp: ((inp[0] - inp[0].mean(0)) / (inp[0].std(0) + 1e-5),))
        self.a.register_forward_hook(lambda m, inp, out: self.acts.__setitem__("a", out.detach()))
        self.b.register_forward_hook(lambda m, inp, out: out * 0.5)

    def forward(self, x, y):
        h = torch.tanh(self.a(x))
        if h.requires_grad:
            h.register_hook(lambda g: g.clamp(-0.01, 0.01))
        loss = F.cross_entropy(self.b(h), y)
        grads = torch.autograd.grad(loss, [self.a.weight, self.b.weight])
        return loss.detach(), grads, self.acts["a"].abs().mean()


case("forward_pre_hook_activation_dict_tensor_grad_hook", lambda: (R(6, 4), I(0, 3, 6)), train=True,
     context=grad_ctx, between=lambda m, i: m.install_hooks() if i == 0 else None)(lambda: HookedNet())


class ActivationStats(nn.Module):
    """Forward hooks registered on every ReLU by named_modules (the dead-neuron monitor), counts
    accumulated into a Python dict of tensors across calls; the hooks removed after call 2."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        self.dead = {}
        self.handles = []

    def install_hooks(self):
        self.handles = [m.register_forward_hook(self._hook(n)) for n, m in self.net.named_modules()
                        if isinstance(m, nn.ReLU)]

    def _hook(self, name):
        def fn(m, inp, out):
            z = (out == 0).sum(0)
            self.dead[name] = self.dead.get(name, torch.zeros_like(z)) + z
        return fn

    def forward(self, x):
        return self.net(x), dict(self.dead)


def _remove_hooks(m, i):
    if i == 0:
        m.install_hooks()
    if i == 2:
        for h in m.handles:
            h.remove()


case("relu_monitor_hooks_dict_across_calls_removed", lambda: (R(6, 5),), ncalls=4, between=_remove_hooks)(
    lambda: ActivationStats())


# ============================================================================ checkpointing
class CkptBlocks(nn.Module):
    """Blocks checkpointed with use_reentrant=False when self.gradient_checkpointing and training
    (HF's idiom), dropout inside the checkpoint (RNG state preserved), an SGD step."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.25), nn.SiLU()) for _ in range(3))
        self.gradient_checkpointing = True
        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)

    def forward(self, x):
        h = x
        for blk in self.blocks:
            if self.gradient_checkpointing and self.training:
                h = h + checkpoint(blk, h, use_reentrant=False)
            else:
                h = h + blk(h)
        loss = h.pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach()


case("checkpoint_non_reentrant_dropout_inside_sgd", lambda: (R(4, 6),), train=True, ncalls=4, context=grad_ctx)(
    lambda: CkptBlocks())


class CkptSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(*[nn.Sequential(nn.Linear(5, 5), nn.Tanh()) for _ in range(4)])

    def forward(self, x):
        out = checkpoint_sequential(self.seq, 2, x, use_reentrant=False)
        grads = torch.autograd.grad(out.sum(), list(self.seq.parameters())[:2])
        return out, grads


case("checkpoint_sequential_two_segments_grad", lambda: (R(3, 5).requires_grad_(),), train=True,
     context=grad_ctx)(lambda: CkptSeq())


# ============================================================================ parametrizations
class ParamNorms(nn.Module):
    """torch.nn.utils.parametrizations: weight_norm on a conv, spectral_norm on a linear (power
    iteration buffers updated in training), orthogonal on a square linear; SGD with momentum
    (Adam turned orthogonal's exactly-zero gradients, 1e-9 of float32 noise, into lr-sized
    steps: eager itself 3e-3 from its float64 run)."""

    def __init__(self):
        super().__init__()
        self.conv = P.weight_norm(nn.Conv1d(2, 4, 3, padding=1))
        self.fc = P.spectral_norm(nn.Linear(4 * 5, 6))
        self.rot = P.orthogonal(nn.Linear(6, 6, bias=False))
        self.opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def forward(self, x):
        h = self.rot(F.relu(self.fc(F.relu(self.conv(x)).flatten(1))))
        loss = h.pow(2).sum(1).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), torch.linalg.matrix_norm(self.fc.weight.detach(), 2)


case("parametrizations_weight_spectral_orthogonal_sgd", lambda: (R(3, 2, 5),), train=True, ncalls=4,
     context=grad_ctx)(lambda: ParamNorms())
