"""bench/modules14.py's second part (same runner, its CASES appended there): custom
torch.autograd.Functions (save_for_backward, needs_input_grad, mark_non_differentiable,
once_differentiable, a gradient-reversal coefficient scheduled per call), the old weight_norm /
spectral_norm hooks and a weight-standardized conv, EMA teachers (a decay warmed up by a Python
step counter, _foreach updates, state_dict copies skipping integer buffers), torch.distributions
(Independent Normal with KL, tanh-squashed SAC policy, a Gaussian mixture, Beta mixup),
hand-written einops rearranges (ViT patchify / unpatchify, Swin windows with a cyclic shift),
nn.ModuleDict routing by a string argument or attribute, and training steps inside the compiled
function (AdamW + LambdaLR warmup + clip_grad_norm_, SGD momentum + StepLR + clip_grad_value_
with gradient accumulation, SAM's two passes).
"""
from __future__ import annotations

import math

import torch
import torch.distributions as D
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, grad_ctx, registrars
from torch.autograd.function import once_differentiable

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ autograd.Function
class ClampedExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, limit):
        y = x.clamp(max=limit).exp()
        ctx.save_for_backward(y, x)
        ctx.limit = limit
        return y

    @staticmethod
    def backward(ctx, g):
        y, x = ctx.saved_tensors
        gx = g * y * (x <= ctx.limit) if ctx.needs_input_grad[0] else None
        return gx, None


class FnTrainStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, y):
        out = ClampedExp.apply(self.fc(x), 1.0)
        loss = F.mse_loss(out, y)
        self.fc.zero_grad()
        loss.backward()
        with torch.no_grad():
            self.fc.weight -= 0.05 * self.fc.weight.grad
        return loss.detach(), out.detach()


case("autograd_function_needs_input_grad_train_step", lambda: (R(5, 4), R(5, 3)), train=True, ncalls=4,
     context=grad_ctx)(lambda: FnTrainStep())


class SortWithIdx(torch.autograd.Function):
    """Values and the indices, the indices marked non-differentiable, backward once_differentiable."""

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
        return torch.zeros_like(gv).scatter_(-1, i, gv)


@fn_case("autograd_function_mark_non_differentiable_once_diff", lambda: (R(3, 6).requires_grad_(),),
         context=grad_ctx)
def sort_fn(x):
    v, i = SortWithIdx.apply(x * 2)
    w = torch.linspace(0, 1, x.shape[-1])
    (g,) = torch.autograd.grad((v * w).sum(), x)
    return v.detach(), i, g


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, coeff):
        ctx.coeff = coeff
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.neg() * ctx.coeff, None


class DANN(nn.Module):
    """DANN: a gradient-reversal layer whose coefficient follows 2 / (1 + exp(-10 p)) - 1 of a
    progress counter advanced per call; both losses backpropagated, gradients returned."""

    def __init__(self):
        super().__init__()
        self.feat, self.cls, self.dom = nn.Linear(4, 6), nn.Linear(6, 3), nn.Linear(6, 1)
        self.iter, self.total = 0, 5

    def forward(self, x, y, d):
        p = self.iter / self.total
        self.iter += 1
        coeff = 2.0 / (1.0 + math.exp(-10 * p)) - 1.0
        f = torch.relu(self.feat(x))
        loss = F.cross_entropy(self.cls(f), y) + \
            F.binary_cross_entropy_with_logits(self.dom(GradReverse.apply(f, coeff)).squeeze(1), d)
        grads = torch.autograd.grad(loss, list(self.parameters()))
        return loss.detach(), [g.norm() for g in grads]


case("dann_grad_reverse_coeff_schedule_per_call", lambda: (R(6, 4), I(0, 3, 6), I(0, 2, 6).float()), train=True,
     ncalls=4, context=grad_ctx)(lambda: DANN())


# ============================================================================ norms
class OldNorms(nn.Module):
    """nn.utils.weight_norm and nn.utils.spectral_norm (the forward-pre-hook versions): in train
    mode spectral norm's power iteration writes weight_u each call.  Applied under no_grad, as
    model builders do, so the computed weight is a leaf and the module can be deep-copied."""

    def __init__(self):
        super().__init__()
        with torch.no_grad():
            self.a = nn.utils.weight_norm(nn.Conv1d(3, 4, 3, padding=1))
            self.b = nn.utils.spectral_norm(nn.Linear(4, 2))

    def forward(self, x):
        return self.b(F.leaky_relu(self.a(x), 0.2).mean(-1))


case("old_weight_norm_spectral_norm_hooks_train", lambda: (R(2, 3, 7),), train=True, ncalls=4)(lambda: OldNorms())
case("old_weight_norm_spectral_norm_hooks_eval", lambda: (R(2, 3, 7),), ncalls=3)(lambda: OldNorms())


class WSConv2d(nn.Conv2d):
    """Weight Standardization (BiT): a Conv2d subclass whose forward standardizes its weight."""

    def forward(self, x):
        w = self.weight
        m = w.mean(dim=(1, 2, 3), keepdim=True)
        v = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return F.conv2d(x, (w - m) / torch.sqrt(v + 1e-10), self.bias, self.stride, self.padding)


case("weight_standardized_conv_subclass_groupnorm", lambda: (R(2, 3, 6, 6),))(
    lambda: nn.Sequential(WSConv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU()))


# ============================================================================ EMA
class EMATeacher(nn.Module):
    """A student trained one SGD step per call, a teacher updated by EMA with a decay warmed up by
    a Python step counter, through torch._foreach_mul_ / _foreach_add_ over parameter lists."""

    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
        self.teacher = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
        self.teacher.load_state_dict(self.student.state_dict())
        self.teacher.requires_grad_(False)
        self.step = 0

    def forward(self, x):
        with torch.no_grad():
            target = self.teacher(x).softmax(-1)
        loss = F.kl_div(self.student(x).log_softmax(-1), target, reduction="batchmean")
        self.student.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for p in self.student.parameters():
                p.add_(p.grad, alpha=-0.5)
            self.step += 1
            decay = min(0.99, (1 + self.step) / (10 + self.step))
            tp, sp = list(self.teacher.parameters()), list(self.student.parameters())
            torch._foreach_mul_(tp, decay)
            torch._foreach_add_(tp, sp, alpha=1 - decay)
        return loss.detach(), decay


case("ema_teacher_foreach_decay_warmup_counter", lambda: (R(5, 4),), train=True, ncalls=4, context=grad_ctx)(
    lambda: EMATeacher())


class MeanTeacherBN(nn.Module):
    """Mean teacher with BatchNorm: the EMA walks state_dict() values of both, copying integer
    buffers (num_batches_tracked) and lerping floating ones."""

    def __init__(self, alpha=0.9):
        super().__init__()
        mk = lambda: nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2))  # noqa: E731
        self.model, self.ema = mk(), mk()
        self.alpha = alpha

    def forward(self, x):
        out = self.model(x)
        with torch.no_grad():
            for e, m in zip(self.ema.state_dict().values(), self.model.state_dict().values()):
                if e.dtype.is_floating_point:
                    e.mul_(self.alpha).add_(m.detach(), alpha=1 - self.alpha)
                else:
                    e.copy_(m)
            t = self.ema(x)
        return out, t


case("mean_teacher_state_dict_values_ema_bn", lambda: (R(6, 4),), train=True)(lambda: MeanTeacherBN())


# ============================================================================ distributions
class GaussianPolicyKL(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu, self.log_std = nn.Linear(4, 2), nn.Parameter(torch.zeros(2) - 0.5)

    def forward(self, obs, old_mu):
        pi = D.Independent(D.Normal(self.mu(obs), self.log_std.exp()), 1)
        old = D.Independent(D.Normal(old_mu, torch.ones_like(old_mu)), 1)
        a = pi.rsample()
        return a, pi.log_prob(a), pi.entropy().mean(), D.kl_divergence(old, pi).mean()


case("independent_normal_rsample_logprob_kl", lambda: (R(5, 4), R(5, 2)))(lambda: GaussianPolicyKL())


class SACActor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 4)

    def forward(self, obs, deterministic: bool = False):
        mu, log_std = self.net(obs).chunk(2, -1)
        std = log_std.clamp(-5, 2).exp()
        dist = D.TransformedDistribution(D.Normal(mu, std), [D.TanhTransform(cache_size=1)])
        a = torch.tanh(mu) if deterministic else dist.rsample()
        return a, dist.log_prob(a.clamp(-0.999, 0.999)).sum(-1)


case("sac_tanh_transformed_normal_rsample", lambda: (R(4, 3),))(lambda: SACActor())


@fn_case("gaussian_mixture_same_family_log_prob", lambda: (R(3, 4), R(3, 4, 2), R(3, 4, 2), R(3, 2)))
def gmm_nll(logits, mu, log_sigma, x):
    mix = D.Categorical(logits=logits)
    comp = D.Independent(D.Normal(mu, log_sigma.exp()), 1)
    gmm = D.MixtureSameFamily(mix, comp)
    return -gmm.log_prob(x).mean(), gmm.mean


@fn_case("mixup_beta_sample_randperm_soft_targets", lambda: (R(6, 5), I(0, 3, 6)))
def mixup(x, y, alpha=0.4):
    lam = D.Beta(torch.tensor(alpha), torch.tensor(alpha)).sample()
    perm = torch.randperm(x.shape[0])
    xm = lam * x + (1 - lam) * x[perm]
    yo = F.one_hot(y, 3).float()
    return xm, lam * yo + (1 - lam) * yo[perm]


# ============================================================================ rearranges
class PatchifyViT(nn.Module):
    """ViT / MAE patchify 'b c (h p) (w q) -> b (h w) (p q c)' by reshape / einsum, random masking
    by argsort of noise (MAE), then unpatchify back to an image."""

    def __init__(self, p=2, c=3, ratio=0.5):
        super().__init__()
        self.p, self.ratio = p, ratio
        self.proj = nn.Linear(p * p * c, p * p * c)

    def forward(self, imgs):
        p = self.p
        b, c, H, W = imgs.shape
        h, w = H // p, W // p
        x = imgs.reshape(b, c, h, p, w, p)
        x = torch.einsum("nchpwq->nhwpqc", x).reshape(b, h * w, p * p * c)
        noise = torch.rand(b, h * w)
        ids_shuffle = noise.argsort(1)
        ids_restore = ids_shuffle.argsort(1)
        keep = ids_shuffle[:, :int(h * w * (1 - self.ratio))]
        vis = self.proj(torch.gather(x, 1, keep.unsqueeze(-1).repeat(1, 1, x.shape[2])))
        full = torch.cat([vis, torch.zeros(b, h * w - vis.shape[1], x.shape[2])], 1)
        full = torch.gather(full, 1, ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        y = full.reshape(b, h, w, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", y).reshape(b, c, H, W)


case("mae_patchify_random_masking_unpatchify", lambda i=0: (R(2, 3, 4 + 4 * (i // 2), 4),), ncalls=4)(
    lambda: PatchifyViT())


def window_partition(x, ws):
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, c)


def window_reverse(win, ws, h, w):
    b = int(win.shape[0] / (h * w / ws / ws))
    x = win.view(b, h // ws, w // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class SwinShiftBlock(nn.Module):
    def __init__(self, c=4, ws=2, shift=1):
        super().__init__()
        self.ws, self.shift = ws, shift
        self.qkv = nn.Linear(c, 3 * c)

    def forward(self, x):
        b, h, w, c = x.shape
        x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = window_partition(x, self.ws).view(-1, self.ws * self.ws, c)
        q, k, v = self.qkv(win).chunk(3, -1)
        att = (q @ k.transpose(-2, -1) * c ** -0.5).softmax(-1)
        out = window_reverse((att @ v).view(-1, self.ws, self.ws, c), self.ws, h, w)
        return torch.roll(out, shifts=(self.shift, self.shift), dims=(1, 2))


case("swin_window_partition_cyclic_shift", lambda: (R(2, 4, 6, 4),))(lambda: SwinShiftBlock())


# ============================================================================ ModuleDict routing
class MultiTask(nn.Module):
    """Multi-task heads in an nn.ModuleDict routed by a task name passed as a string argument."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(5, 6)
        self.heads = nn.ModuleDict({"cls": nn.Linear(6, 3), "reg": nn.Linear(6, 1), "seg": nn.Linear(6, 5)})

    def forward(self, x, task):
        h = torch.relu(self.trunk(x))
        out = self.heads[task](h)
        return out.log_softmax(-1) if task != "reg" else out.squeeze(-1)


case("moduledict_routed_by_string_argument", lambda i=0: (R(3, 5), ["cls", "reg", "seg", "cls"][i]), ncalls=4)(
    lambda: MultiTask())


class Adapters(nn.Module):
    """Adapters by language in a ModuleDict, the active key an attribute set between calls
    (set_active_adapter), and a key missing from the dict meaning no adapter."""

    def __init__(self):
        super().__init__()
        self.base = nn.Linear(4, 4)
        self.adapters = nn.ModuleDict({k: nn.Sequential(nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 4))
                                       for k in ("en", "de")})
        self.active = "en"

    def forward(self, x):
        h = self.base(x)
        if self.active in self.adapters:
            h = h + self.adapters[self.active](h)
        return h


case("moduledict_adapter_key_attribute_between_calls", lambda: (R(2, 4),), ncalls=4,
     between=lambda m, i: setattr(m, "active", ["en", "de", "fr", "en"][i]))(lambda: Adapters())


# ============================================================================ training steps
class AdamWWarmup(nn.Module):
    """A full training step inside forward: AdamW, a LambdaLR linear warmup, clip_grad_norm_ (its
    total norm returned), zero_grad(set_to_none=True), the learning rate read back as a float."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=1e-2, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / 3))

    def forward(self, x, y):
        loss = F.mse_loss(self.net(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
        self.opt.step()
        self.sched.step()
        return loss.detach(), norm, self.sched.get_last_lr()[0]


case("adamw_lambdalr_warmup_clip_grad_norm_step", lambda: (R(6, 4), R(6, 1)), train=True, ncalls=5,
     context=grad_ctx)(lambda: AdamWWarmup())


class SGDAccum(nn.Module):
    """Gradient accumulation: backward every call, the SGD (momentum) step, clip_grad_value_ and
    StepLR only every second call by a Python counter."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 2)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5)
        self.micro, self.accum = 0, 2

    def forward(self, x, y):
        loss = F.cross_entropy(self.net(x), y) / self.accum
        loss.backward()
        self.micro += 1
        if self.micro % self.accum == 0:
            nn.utils.clip_grad_value_(self.net.parameters(), 0.1)
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad()
        return loss.detach()


case("sgd_grad_accumulation_counter_clip_value_steplr", lambda: (R(4, 3), I(0, 2, 4)), train=True, ncalls=5,
     context=grad_ctx)(lambda: SGDAccum())


class SAMStep(nn.Module):
    """Sharpness-aware minimization: ascend to w + rho g / |g| (e_w kept per parameter in a dict),
    a second forward / backward there, restore w, then the base optimizer's step."""

    def __init__(self, rho=0.05):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.rho = rho

    def forward(self, x, y):
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        with torch.no_grad():
            gn = torch.norm(torch.stack([p.grad.norm(2) for p in self.net.parameters()]), 2)
            e = {}
            for p in self.net.parameters():
                e[p] = p.grad * (self.rho / (gn + 1e-12))
                p.add_(e[p])
        self.opt.zero_grad()
        F.mse_loss(self.net(x), y).backward()
        with torch.no_grad():
            for p in self.net.parameters():
                p.sub_(e[p])
        self.opt.step()
        self.opt.zero_grad()
        return loss.detach()


case("sam_two_pass_perturb_restore_step", lambda: (R(6, 4), R(6, 1)), train=True, ncalls=4, context=grad_ctx)(
    lambda: SAMStep())
