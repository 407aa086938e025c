"""bench/modules16.py's training part (same runner, its CASES appended there): hand-written losses
(focal with gamma switched between calls, soft multiclass dice, a MoCo queue with InfoNCE, FaceNet
semi-hard triplets, multi-similarity, OHEM with a minimum kept count, KL label smoothing),
quantization helpers (per-channel asymmetric fake-quant by a custom Function, BinaryConnect with
the real weights clipped after the step, dynamic per-token int8 activations), an EMA copy made by
deepcopy in __init__, accumulation across calls with a counter, gradient centralization, a manual
warmup writing param_group["lr"], FGSM adversarial training by autograd.grad, target-network sync
by load_state_dict, a learning-rate range test loop with an early break, a Function marking an
output non-differentiable.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _mlp(i=6, h=10, o=3):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


# ============================================================================ losses
class Focal(nn.Module):
    """Multi-class focal loss from log_softmax gathered at the target, an ignore index masked out,
    alpha per class from a buffer, gamma an attribute changed between calls (0 = cross entropy)."""

    def __init__(self):
        super().__init__()
        self.head = _mlp()
        self.register_buffer("alpha", torch.tensor([0.25, 0.5, 0.25]))
        self.gamma = 2.0

    def forward(self, x, y):
        logp = self.head(x).log_softmax(-1)
        valid = y != -100
        yv = y.clamp(min=0)
        lp = logp.gather(1, yv[:, None])[:, 0]
        loss = -self.alpha[yv] * (1 - lp.exp()) ** self.gamma * lp
        loss = loss[valid].sum() / valid.sum().clamp(min=1)
        loss.backward()
        return loss.detach(), self.head[0].weight.grad.norm()


case("focal_loss_gamma_attr_switched_ignore_index_backward",
     lambda: (R(7, 6), torch.tensor([0, 2, -100, 1, 1, -100, 0])), train=True, ncalls=4, context=grad_ctx,
     between=lambda m, i: setattr(m, "gamma", [2.0, 0.0, 1.5, 2.0][i]))(lambda: Focal())


class SoftDice(nn.Module):
    """Soft multi-class dice on softmax probabilities against one_hot targets permuted to NCHW,
    the background class excluded, smooth terms, + CE, an Adam step."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 4, 1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-2)

    def forward(self, x, y):
        logits = self.net(x)
        p = logits.softmax(1)
        oh = F.one_hot(y, 4).permute(0, 3, 1, 2).float()
        inter = (p * oh).sum((0, 2, 3))
        card = p.sum((0, 2, 3)) + oh.sum((0, 2, 3))
        dice = (2 * inter + 1.0) / (card + 1.0)
        loss = 1 - dice[1:].mean() + F.cross_entropy(logits, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item(), dice.detach()


case("soft_dice_one_hot_permute_exclude_background_adam", lambda: (R(2, 2, 5, 6), I(0, 4, 2, 5, 6)), train=True,
     context=grad_ctx)(lambda: SoftDice())


class MoCo(nn.Module):
    """MoCo v2: a key encoder updated by momentum under no_grad, keys enqueued into a buffer queue
    at a pointer kept as an int attribute (wrapping), InfoNCE with temperature over the positive
    and the queue's negatives, labels all zero."""

    def __init__(self, d=5, K=12, m=0.9, T=0.2):
        super().__init__()
        self.q = _mlp(6, 8, d)
        self.k = copy.deepcopy(self.q).requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(d, K), dim=0))
        self.ptr, self.m, self.T, self.K = 0, m, T, K

    def forward(self, xq, xk):
        q = F.normalize(self.q(xq), dim=1)
        with torch.no_grad():
            for pk, pq in zip(self.k.parameters(), self.q.parameters()):
                pk.data = pk.data * self.m + pq.data * (1 - self.m)
            k = F.normalize(self.k(xk), dim=1)
        pos = torch.einsum("nc,nc->n", q, k)[:, None]
        neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([pos, neg], 1) / self.T
        loss = F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long))
        loss.backward()
        b = k.shape[0]
        idx = (torch.arange(b) + self.ptr) % self.K
        self.queue[:, idx] = k.T
        self.ptr = (self.ptr + b) % self.K
        return loss.detach()


case("moco_queue_buffer_ptr_attr_infonce_momentum_data_assign", lambda: (R(5, 6), R(5, 6)), train=True, ncalls=4,
     context=grad_ctx)(lambda: MoCo())


@fn_case("facenet_semihard_triplet_fallback_hardest", lambda i=0: (F.normalize(R(8, 4), dim=1).requires_grad_(),
                                                                    torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])),
         context=grad_ctx)
def semihard(emb, labels):
    """FaceNet's semi-hard mining: for each anchor-positive pair, the closest negative farther than
    the positive (within the margin), else the hardest negative; the loss's gradient with respect
    to the embeddings returned with the count of semi-hard picks."""
    d = torch.cdist(emb, emb).pow(2)
    same = labels[:, None] == labels[None]
    eye = torch.eye(len(labels), dtype=torch.bool)
    pos_mask = same & ~eye
    neg_mask = ~same
    a, p = pos_mask.nonzero(as_tuple=True)
    dap = d[a, p]
    dan = d[a]                                      # P, N
    semi = neg_mask[a] & (dan > dap[:, None]) & (dan < dap[:, None] + 0.3)
    big = torch.finfo(d.dtype).max
    semi_d = torch.where(semi, dan, big).min(1).values
    hard_d = torch.where(neg_mask[a], dan, big).min(1).values
    dn = torch.where(semi.any(1), semi_d, hard_d)
    loss = F.relu(dap - dn + 0.3).mean()
    (g,) = torch.autograd.grad(loss, emb)
    return loss.detach(), g, semi.any(1).sum()


@fn_case("multi_similarity_loss_per_anchor_python_loop_empty_sets",
         lambda i=0: (F.normalize(R(6, 4), dim=1), torch.tensor([0, 0, 1, 1, 2, 3 + i])))
def multi_similarity(feats, labels):
    """MS loss (Wang et al.): per anchor a Python loop, positives / negatives mined by the other
    set's extreme with a margin, `continue` when either set is empty (a singleton class), the mean
    over the anchors that contributed (0 when none)."""
    sim = feats @ feats.T
    losses = []
    for i in range(len(labels)):
        pos = sim[i][(labels == labels[i]) & (torch.arange(len(labels)) != i)]
        neg = sim[i][labels != labels[i]]
        if len(pos) == 0 or len(neg) == 0:
            continue
        neg = neg[neg + 0.1 > pos.min()]
        pos = pos[pos - 0.1 < neg.max()] if len(neg) else pos
        if len(neg) == 0 or len(pos) == 0:
            continue
        lp = torch.log1p(torch.exp(-2.0 * (pos - 0.5)).sum()) / 2.0
        ln = torch.log1p(torch.exp(40.0 * (neg - 0.5)).sum()) / 40.0
        losses.append(lp + ln)
    return torch.stack(losses).mean() if losses else feats.new_zeros(()), len(losses)


@fn_case("ohem_cross_entropy_sort_threshold_min_kept", lambda i=0: (R(2, 4, 5, 5), I(0, 4, 2, 5, 5)))
def ohem(logits, y):
    """OHEM cross entropy (semantic segmentation repos): pixel probabilities of the target sorted,
    the threshold raised to the min_kept-th probability when fewer pixels fall under it, the loss
    averaged over the kept pixels; ignore label 255 planted by a mask."""
    y = y.masked_fill(logits[:, 0] > 1.5, 255)
    valid = y != 255
    pixel_loss = F.cross_entropy(logits, y, ignore_index=255, reduction="none").view(-1)
    prob = logits.softmax(1).gather(1, y.clamp(max=3)[:, None]).view(-1)
    prob = prob.masked_fill(~valid.view(-1), 1.0)
    sp, order = prob.sort()
    min_kept = 10
    thresh = 0.3
    if sp.numel() > 0:
        thresh = max(thresh, sp[min(min_kept, sp.numel() - 1)].item())
    kept = (prob < thresh) & valid.view(-1)
    return pixel_loss[kept].mean(), kept.sum(), order[:3]


@fn_case("label_smoothing_kl_div_log_target_batchmean_vs_ce", lambda: (R(5, 7), I(0, 7, 5)))
def ls_kl(logits, y):
    """Label smoothing written as KL(smoothed || p) with log_target=True in batchmean, compared
    against cross_entropy(label_smoothing=...); the smoothed log-target built by scatter_."""
    n, eps = logits.shape[1], 0.1
    true = torch.full_like(logits, eps / (n - 1))
    true.scatter_(1, y[:, None], 1 - eps)
    kl = F.kl_div(logits.log_softmax(-1), true.log(), reduction="batchmean", log_target=True)
    ce = F.cross_entropy(logits, y, label_smoothing=eps * n / (n - 1))
    return kl, ce, kl + (true * true.log()).sum(1).mean()


# ============================================================================ quantization helpers
class FakeQuantFn(torch.autograd.Function):
    """Per-channel asymmetric fake quantization; backward passes the gradient only inside the
    clamp range (straight-through with clipping)."""

    @staticmethod
    def forward(ctx, x, scale, zp, qmin, qmax):
        q = torch.round(x / scale + zp)
        ctx.save_for_backward((q >= qmin) & (q <= qmax))
        return (q.clamp(qmin, qmax) - zp) * scale

    @staticmethod
    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return g * inside, None, None, None, None


class QATLinear(nn.Module):
    """Weights fake-quantized per output channel from min / max (zero point rounded), activations
    per tensor with a running range buffer updated in training only, an SGD step."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(5, 8), nn.Linear(8, 2)
        self.register_buffer("amin", torch.tensor(0.0))
        self.register_buffer("amax", torch.tensor(0.0))
        self.opt = torch.optim.SGD(self.parameters(), lr=0.05)

    def qw(self, w, bits=4):
        lo, hi = w.min(1, keepdim=True).values.clamp(max=0), w.max(1, keepdim=True).values.clamp(min=0)
        scale = ((hi - lo) / (2 ** bits - 1)).clamp(min=1e-8)
        zp = torch.round(-lo / scale)
        return FakeQuantFn.apply(w, scale.detach(), zp.detach(), 0, 2 ** bits - 1)

    def forward(self, x, y):
        h = F.relu(F.linear(x, self.qw(self.fc1.weight), self.fc1.bias))
        if self.training:
            with torch.no_grad():
                self.amin.lerp_(h.min(), 0.1)
                self.amax.lerp_(h.max(), 0.1)
        s = ((self.amax - self.amin) / 255).clamp(min=1e-8)
        h = FakeQuantFn.apply(h, s, torch.round(-self.amin / s), 0, 255)
        loss = F.mse_loss(F.linear(h, self.qw(self.fc2.weight), self.fc2.bias), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach()


case("qat_per_channel_asym_fake_quant_function_clip_ste", lambda: (R(6, 5), R(6, 2)), train=True, ncalls=4,
     context=grad_ctx)(lambda: QATLinear())


class BinarizeFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w):
        ctx.save_for_backward(w)
        return torch.where(w >= 0, 1.0, -1.0)

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g * (w.abs() <= 1).to(g.dtype)


class BinaryConnect(nn.Module):
    """BinaryConnect: binarized weights in forward (sign with the hardtanh STE), real weights
    updated by Adam and then clipped to [-1, 1] through p.data.clamp_. (No bias before the
    BatchNorm: its gradient is rounding noise, ~1e-9, which Adam's normalization turns into
    steps of the learning rate, eager's and any other summation order's apart.)"""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4, bias=False)
        self.bn = nn.BatchNorm1d(4)
        self.opt = torch.optim.Adam(self.parameters(), lr=0.3)

    def forward(self, x, y):
        out = self.bn(F.linear(x, BinarizeFn.apply(self.fc.weight)))
        loss = F.cross_entropy(out, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.fc.weight.data.clamp_(-1, 1)
        return loss.detach(), (self.fc.weight.abs() == 1).sum()


case("binaryconnect_sign_ste_weight_data_clamp_after_adam", lambda: (R(8, 6), I(0, 4, 8)), train=True, ncalls=4,
     context=grad_ctx)(lambda: BinaryConnect())


@fn_case("dynamic_per_token_int8_activation_int32_matmul_dequant", lambda: (R(4, 6) * 3, R(5, 6)))
def dyn_quant(x, w):
    """LLM.int8-style dynamic quantization: per-token absmax scales of the activations, per-row of
    the weights, int8 tensors by round / clamp / to(int8), an int32 accumulate through float64
    matmul of the integers, dequantized by the outer product of the scales."""
    sx = x.abs().amax(1, keepdim=True).clamp(min=1e-6) / 127
    sw = w.abs().amax(1, keepdim=True).clamp(min=1e-6) / 127
    qx = torch.round(x / sx).clamp(-127, 127).to(torch.int8)
    qw = torch.round(w / sw).clamp(-127, 127).to(torch.int8)
    acc = (qx.to(torch.float64) @ qw.to(torch.float64).T).to(torch.int32)
    return acc, acc.float() * (sx * sw.T), (qx.to(torch.int16) * 2).amax()


# ============================================================================ training loops
class EMACopy(nn.Module):
    """An EMA model made by copy.deepcopy in __init__ (requires_grad_(False)), updated after the
    optimizer step with a decay warmed up by the step count (min(decay, (1 + n) / (10 + n))),
    buffers copied; the EMA model evaluated in eval mode."""

    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        self.ema = copy.deepcopy(self.model).requires_grad_(False)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.updates = 0

    def forward(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.updates += 1
        d = min(0.999, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            msd = self.model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v.mul_(d).add_(msd[k].detach(), alpha=1 - d)
                else:
                    v.copy_(msd[k])
        self.ema.eval()
        return loss.detach(), self.ema(x)


case("ema_deepcopy_state_dict_inplace_warmup_decay_eval_forward", lambda: (R(6, 5), R(6, 2)), train=True, ncalls=4,
     context=grad_ctx)(lambda: EMACopy())


class AccumAcrossCalls(nn.Module):
    """Gradient accumulation across calls: each call one micro-batch backward, the step (with an
    inf-norm clip_grad_norm_ with foreach=False) only on every second call by a counter."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 6, 2)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.2)
        self.micro, self.every = 0, 2

    def forward(self, x, y):
        loss = F.cross_entropy(self.net(x), y) / self.every
        loss.backward()
        self.micro += 1
        stepped = False
        norm = torch.tensor(0.0)
        if self.micro % self.every == 0:
            norm = nn.utils.clip_grad_norm_(self.net.parameters(), 0.5, norm_type=float("inf"), foreach=False)
            self.opt.step()
            self.opt.zero_grad(set_to_none=False)
            stepped = True
        return loss.detach(), stepped, norm


case("grad_accumulation_across_calls_counter_inf_norm_clip", lambda: (R(5, 4), I(0, 2, 5)), train=True, ncalls=5,
     context=grad_ctx)(lambda: AccumAcrossCalls())


class GradCentral(nn.Module):
    """Gradient centralization: each weight's gradient (ndim > 1) has its mean over all but the
    first dim subtracted in place before the step; a manual linear warmup writing
    param_group['lr'] from a Python step counter."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 3 * 3, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.0, momentum=0.5)
        self.step_n, self.warmup, self.base_lr = 0, 3, 0.1

    def forward(self, x, y):
        self.step_n += 1
        for g in self.opt.param_groups:
            g["lr"] = self.base_lr * min(1.0, self.step_n / self.warmup)
        loss = F.cross_entropy(self.net(x), y)
        self.opt.zero_grad()
        loss.backward()
        for p in self.net.parameters():
            if p.grad is not None and p.grad.dim() > 1:
                p.grad.sub_(p.grad.mean(dim=tuple(range(1, p.grad.dim())), keepdim=True))
        self.opt.step()
        return loss.item(), self.opt.param_groups[0]["lr"]


case("gradient_centralization_inplace_grad_manual_warmup_lr", lambda: (R(3, 2, 5, 5), I(0, 2, 3)), train=True,
     ncalls=4, context=grad_ctx)(lambda: GradCentral())


class FGSMTrain(nn.Module):
    """FGSM adversarial training: the input gradient by torch.autograd.grad on a leaf copy of x,
    x_adv = clamp(x + eps * sign(grad)), the step on the mean of the clean and adversarial losses."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(6, 8, 3)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def forward(self, x, y, eps: float = 0.1):
        xa = x.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(F.cross_entropy(self.net(xa), y), xa)
        x_adv = (x + eps * gx.sign()).clamp(-2, 2).detach()
        loss = 0.5 * (F.cross_entropy(self.net(x), y) + F.cross_entropy(self.net(x_adv), y))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), (x_adv - x).abs().max()


case("fgsm_adversarial_training_autograd_grad_input_sign", lambda: (R(6, 6), I(0, 3, 6)), train=True, ncalls=3,
     context=grad_ctx)(lambda: FGSMTrain())


class TargetSync(nn.Module):
    """DQN's hard target update: target.load_state_dict(online.state_dict()) every 2 calls, the TD
    target from the target net under no_grad, Huber loss, an RMSprop step."""

    def __init__(self):
        super().__init__()
        self.online, self.target = _mlp(4, 8, 3), _mlp(4, 8, 3)
        self.target.load_state_dict(self.online.state_dict())
        self.opt = torch.optim.RMSprop(self.online.parameters(), lr=1e-2)
        self.calls = 0

    def forward(self, s, a, r, s2, done):
        q = self.online(s).gather(1, a[:, None])[:, 0]
        with torch.no_grad():
            tgt = r + 0.9 * self.target(s2).max(1).values * (1 - done.float())
        loss = F.smooth_l1_loss(q, tgt)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.calls += 1
        if self.calls % 2 == 0:
            self.target.load_state_dict(self.online.state_dict())
        return loss.detach()


case("dqn_target_load_state_dict_every_two_calls_rmsprop",
     lambda: (R(5, 4), I(0, 3, 5), R(5), R(5, 4), U(5) > 0.7), train=True, ncalls=5, context=grad_ctx)(
    lambda: TargetSync())


class LRFinder(nn.Module):
    """fastai's learning-rate range test inside one call: the lr grown exponentially per
    iteration, the loss smoothed by a Python float EMA with bias correction, a break when it
    exceeds 4x the best; the model and optimizer state restored from copies at the end."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 6, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=1e-3)

    def forward(self, x, y, iters: int = 8):
        saved = copy.deepcopy(self.net.state_dict())
        lrs, losses, avg, best = [], [], 0.0, float("inf")
        for i in range(iters):
            lr = 1e-3 * (10.0 ** (4 * i / (iters - 1)))
            for g in self.opt.param_groups:
                g["lr"] = lr
            loss = F.mse_loss(self.net(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            avg = 0.7 * avg + 0.3 * loss.item()
            sm = avg / (1 - 0.7 ** (i + 1))
            lrs.append(lr)
            losses.append(sm)
            if sm > 4 * best or sm != sm:
                break
            best = min(best, sm)
        self.net.load_state_dict(saved)
        return lrs, losses


case("lr_range_test_python_float_ema_break_restore_state_dict", lambda: (R(8, 4), R(8, 1)), train=True,
     context=grad_ctx)(lambda: LRFinder())


class ArgmaxPool(torch.autograd.Function):
    """A Function returning (values, argmax indices) with the indices marked non-differentiable;
    backward scatters the gradient to the argmax positions."""

    @staticmethod
    def forward(ctx, x):
        v, i = x.max(-1)
        ctx.mark_non_differentiable(i)
        ctx.save_for_backward(i)
        ctx.n = x.shape[-1]
        return v, i

    @staticmethod
    def backward(ctx, gv, gi):
        (i,) = ctx.saved_tensors
        return torch.zeros(*gv.shape, ctx.n, dtype=gv.dtype).scatter(-1, i[..., None], gv[..., None])


class ArgmaxPoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 6)

    def forward(self, x):
        v, i = ArgmaxPool.apply(self.proj(x))
        loss = (v ** 2).sum()
        loss.backward()
        return v.detach(), i, i.requires_grad, self.proj.weight.grad.clone()


case("autograd_function_mark_non_differentiable_index_output", lambda: (R(3, 5, 4),), train=True, context=grad_ctx)(
    lambda: ArgmaxPoolNet())
