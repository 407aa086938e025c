"""Held-out set 4: PROGRAMS, not models. Hand-written torch code the way public repositories write it
around (or instead of) a model: optimizer steps over lists of parameters with step counters, gradient
clipping, EMA copies, loss scaling with inf checks, ODE integrators, stencil iterations to a tolerance,
k-means, PCA, Kalman filters, Gaussian processes, greedy / beam / sampled decoding with data-dependent
stops, a KV cache, NMS written in torch, box coding, seeded augmentations, metrics, a padding pipeline,
sparse matmul, GAE, a replay buffer, a MoCo queue, Welford statistics, piecewise functions, a
straight-through estimator and whole training steps with torch.optim.

Each case is called several times with different inputs, eagerly and compiled, each side on its own copy
of the program's state (built twice from the same seed; the global RNG seeded alike before each call).
After every call the outputs, the state (module buffers and parameters, optimizer state, Python counters
and lists, generator states) and the arguments (which some programs write) are compared with eager's:
floating values relative to each value's scale, integers, booleans and Python values exactly.

Same report and options as bench/heldout3.py (bench/heldout.py's runner helpers):

    python bench/heldout4.py --device cpu --dtypes fp32
    python bench/heldout4.py --device cpu --dtypes bf16           # the cases where bf16 is meaningful
    python bench/heldout4.py --device cpu --dtypes fp32 --models kmeans,nms --json /tmp/h4.jsonl

A line reads: calls, graphs compiled, graph breaks, recompiles (variants past the first), graphs that fell
back to eager, variants that ran eagerly, the worst difference over all calls and where it occurred, and
the time of one more call against eager's (many of these programs are host-bound).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from heldout import DTYPES, TOL, geomean, record_error, side_by_side_ms  # noqa: E402  (bench/heldout.py's runner helpers)

import mlircap  # noqa: E402


# ------------------------------------------------------------------------------------------------ optimizers
class HandAdam:
    """Adam over a list of parameters, torch.optim-style state dict per parameter, Python step counter,
    bias correction with ** step (the pre-2.0 torch.optim.Adam loop)."""

    def __init__(self, params, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = list(params)
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay
        self.state = {}

    @torch.no_grad()
    def step(self):
        b1, b2 = self.betas
        for p in self.params:
            if p.grad is None:
                continue
            g = p.grad
            if self.wd != 0:
                g = g.add(p, alpha=self.wd)
            st = self.state.setdefault(p, {})
            if len(st) == 0:
                st["step"] = 0
                st["exp_avg"] = torch.zeros_like(p)
                st["exp_avg_sq"] = torch.zeros_like(p)
            st["step"] += 1
            m, v = st["exp_avg"], st["exp_avg_sq"]
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            bc1 = 1 - b1 ** st["step"]
            bc2 = 1 - b2 ** st["step"]
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / bc1)


def _params(shapes, dt):
    ps = [torch.randn(*s, dtype=dt) for s in shapes]
    return ps


SHAPES = [(16, 8), (16,), (4, 16), (4,)]


def _grads(i, dt, shapes=SHAPES):
    return [torch.randn(*s, dtype=dt) * (1 + i) for s in shapes]


def make_adam(dt):
    ps = [p.requires_grad_() for p in _params(SHAPES, dt)]
    opt = HandAdam(ps, weight_decay=1e-2)

    def set_grads_and_step(grads):
        for p, g in zip(opt.params, grads):
            p.grad = g
        opt.step()
        return [p.detach() for p in opt.params]
    return set_grads_and_step, lambda: (opt.params, [opt.state.get(p) for p in opt.params])


def adamw_functional(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, amsgrad, lr,
                     beta1, beta2, weight_decay, eps):
    """torch.optim._functional.adamw's single-tensor loop, steps as tensors (capturable style)."""
    for i, param in enumerate(params):
        grad = grads[i]
        exp_avg, exp_avg_sq, step_t = exp_avgs[i], exp_avg_sqs[i], state_steps[i]
        step_t += 1
        param.mul_(1 - lr * weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
        step = step_t
        bias_correction1 = 1 - torch.pow(beta1, step)
        bias_correction2 = 1 - torch.pow(beta2, step)
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2.sqrt()
        step_size_neg = step_size.neg()
        if amsgrad:
            torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
            denom = (max_exp_avg_sqs[i].sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(eps / step_size_neg)
        else:
            denom = (exp_avg_sq.sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(eps / step_size_neg)
        param.addcdiv_(exp_avg, denom)


def make_adamw(dt):
    ps = _params(SHAPES, dt)
    st = dict(m=[torch.zeros_like(p) for p in ps], v=[torch.zeros_like(p) for p in ps],
              vmax=[torch.zeros_like(p) for p in ps], steps=[torch.tensor(0.0) for _ in ps])

    def step(grads):
        adamw_functional(ps, grads, st["m"], st["v"], st["vmax"], st["steps"], amsgrad=True, lr=1e-2,
                         beta1=0.9, beta2=0.99, weight_decay=0.05, eps=1e-8)
        return ps[0].sum()
    return step, lambda: (ps, st)


class Lion(torch.optim.Optimizer):
    """lucidrains lion-pytorch's update_fn inside an Optimizer subclass."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in filter(lambda p: p.grad is not None, group["params"]):
                grad, lr, wd, state = p.grad, group["lr"], group["weight_decay"], self.state[p]
                beta1, beta2 = group["betas"]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.data.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss


def make_lion(dt):
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).to(dt)
    opt = Lion(model.parameters(), lr=1e-2, weight_decay=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda: (dict(model.state_dict()), opt.state_dict()["state"])


def lamb_step(params, grads, ms, vs, step, lr=1e-2, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    """LAMB (cybertronai/pytorch-lamb): per-layer trust ratio from weight and update norms."""
    ratios = []
    for p, g, m, v in zip(params, grads, ms, vs):
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        m_hat = m / (1 - b1 ** step)
        v_hat = v / (1 - b2 ** step)
        upd = m_hat / (v_hat.sqrt() + eps) + wd * p
        w_norm = p.norm(p=2).clamp(0, 10)
        u_norm = upd.norm(p=2)
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        p.add_(upd * trust, alpha=-lr)
        ratios.append(trust)
    return torch.stack(ratios)


def make_lamb(dt):
    ps = _params(SHAPES, dt)
    ps[1].zero_()   # a zero bias: trust ratio 1 branch of the where
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    counter = {"step": 0}

    def step(grads):
        counter["step"] += 1
        return lamb_step(ps, grads, ms, vs, counter["step"])
    return step, lambda: (ps, ms, vs, counter)


def clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """torch.nn.utils.clip_grad_norm_ written out (foreach-free)."""
    if len(grads) == 0:
        return torch.tensor(0.0)
    if norm_type == math.inf:
        norms = [g.detach().abs().max() for g in grads]
        total_norm = norms[0] if len(norms) == 1 else torch.max(torch.stack(norms))
    else:
        total_norm = torch.norm(torch.stack([torch.norm(g.detach(), norm_type) for g in grads]), norm_type)
    if error_if_nonfinite and torch.logical_or(total_norm.isnan(), total_norm.isinf()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients is non-finite")
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    for g in grads:
        g.detach().mul_(clip_coef_clamped.to(g.device))
    return total_norm


def make_clip(dt):
    hist = []

    def clip_and_log(grads, norm_type):
        n = clip_grad_norm_(grads, 5.0, norm_type, error_if_nonfinite=True)
        hist.append(float(n))
        if len(hist) > 4:
            hist.pop(0)
        return n
    return clip_and_log, lambda: hist


class EMA:
    """timm ModelEmaV2-style EMA of a model copy, decay warmup from a Python update counter."""

    def __init__(self, model, decay=0.999):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        self.updates = 0

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        msd = model.state_dict()
        for k, v in self.module.state_dict().items():
            if v.dtype.is_floating_point:
                v.mul_(d).add_(msd[k].detach(), alpha=1 - d)
            else:
                v.copy_(msd[k])
        return d


def make_ema(dt):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.LazyLinear(4)).to(dt)
    model(torch.randn(2, 3, 8, 8, dtype=dt))
    ema = EMA(model)

    def train_and_ema(x):
        with torch.no_grad():
            model.train()
            y = model(x)      # BatchNorm running stats move
            for p in model.parameters():
                p.add_(0.01 * torch.sign(p))
        d = ema.update(model)
        return y, d
    return train_and_ema, lambda: (ema.module.state_dict(), model.state_dict(), ema.updates)


class Scaler:
    """A GradScaler written by hand: unscale, found_inf via torch.isfinite, skip the step and halve the
    scale on overflow, grow it every growth_interval good steps."""

    def __init__(self, params, init_scale=2.0 ** 10, growth_interval=2):
        self.params = params
        self.scale = torch.tensor(init_scale)
        self.growth_tracker = 0
        self.growth_interval = growth_interval
        self.skipped = []

    def step(self, grads, lr=0.1):
        found_inf = torch.zeros(())
        inv = 1.0 / self.scale
        unscaled = []
        for g in grads:
            u = g * inv
            found_inf += (~torch.isfinite(u)).any().float()
            unscaled.append(u)
        if found_inf.item() > 0:
            self.scale *= 0.5
            self.growth_tracker = 0
            self.skipped.append(True)
            return None
        with torch.no_grad():
            for p, u in zip(self.params, unscaled):
                p.sub_(lr * u)
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            self.scale *= 2.0
            self.growth_tracker = 0
        self.skipped.append(False)
        return sum(u.abs().sum() for u in unscaled)


def make_scaler(dt):
    ps = _params(SHAPES, dt)
    sc = Scaler(ps)
    return sc.step, lambda: (ps, sc.scale, sc.growth_tracker, sc.skipped)


def scaler_inputs(i, dt):
    g = [x * 1024 for x in _grads(i, dt)]
    if i == 2:
        g[2][1, 3] = float("inf")
    if i == 4:
        g[0][0, 0] = float("nan")
    return (g,)


# ------------------------------------------------------------------------------------------------ numerics
def lotka_volterra(t, y, a=1.5, b=1.0, c=3.0, d=1.0):
    x, p = y[..., 0], y[..., 1]
    return torch.stack([a * x - b * x * p, -c * p + d * x * p], dim=-1)


def rk4_integrate(f, y0, t0, t1, n_steps):
    h = (t1 - t0) / n_steps
    t, y = t0, y0
    traj = [y0]
    for _ in range(n_steps):
        k1 = f(t, y)
        k2 = f(t + h / 2, y + h / 2 * k1)
        k3 = f(t + h / 2, y + h / 2 * k2)
        k4 = f(t + h, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + h
        traj.append(y)
    return torch.stack(traj)


def make_rk4(dt):
    return (lambda y0, t1: rk4_integrate(lotka_volterra, y0, 0.0, t1, 20)), lambda: None


def euler_adaptive(y0, k, t_end=1.0, h=0.05, tol=1e-3):
    """explicit Euler with step doubling: the step halves while the local error is above tol (a
    data-dependent while loop over Python floats)."""
    t, y, n = 0.0, y0, 0
    while t < t_end - 1e-12:
        h = min(h, t_end - t)
        full = y + h * (-k * y ** 3)
        half = y + h / 2 * (-k * y ** 3)
        half = half + h / 2 * (-k * half ** 3)
        err = (full - half).abs().max()
        if err > tol and h > 1e-3:
            h = h / 2
            continue
        t, y, n = t + h, half, n + 1
        if err < tol / 4:
            h = h * 1.5
    return y, n


def make_euler(dt):
    return euler_adaptive, lambda: None


def jacobi_heat(u, f, tol=1e-4, max_iter=200):
    """Jacobi iteration of the 2-D Poisson equation until the update is below tol."""
    h2 = 1.0 / (u.shape[-1] - 1) ** 2
    it = 0
    for it in range(max_iter):
        un = u.clone()
        un[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] + h2 * f[1:-1, 1:-1])
        diff = torch.max(torch.abs(un - u))
        u = un
        if diff < tol:
            break
    return u, it


def make_jacobi(dt):
    return jacobi_heat, lambda: None


class NBody(nn.Module):
    """leapfrog N-body with softening; positions and velocities are buffers updated in place."""

    def __init__(self, n=24, G=1.0, soft=0.1):
        super().__init__()
        self.register_buffer("pos", torch.randn(n, 3))
        self.register_buffer("vel", torch.randn(n, 3) * 0.1)
        self.register_buffer("mass", torch.rand(n) + 0.5)
        self.G, self.soft = G, soft
        self.t = 0.0

    def acc(self, pos):
        d = pos[None, :, :] - pos[:, None, :]
        inv = (d.pow(2).sum(-1) + self.soft ** 2).pow(-1.5)
        return self.G * (d * (inv * self.mass[None, :])[..., None]).sum(1)

    @torch.no_grad()
    def forward(self, dt, steps):
        for _ in range(steps):
            self.vel += 0.5 * dt * self.acc(self.pos)
            self.pos += dt * self.vel
            self.vel += 0.5 * dt * self.acc(self.pos)
            self.t += dt
        ke = 0.5 * (self.mass * self.vel.pow(2).sum(-1)).sum()
        return ke


def make_nbody(dt):
    m = NBody().to(dt)
    return m, lambda: (m.pos, m.vel, m.t)


def kmeans(x, k, iters=20, tol=1e-4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = x[torch.randperm(x.shape[0], generator=g)[:k]].clone()
    for it in range(iters):
        assign = torch.cdist(x, centers).argmin(dim=1)
        sums = torch.zeros_like(centers).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).to(x.dtype)
        new = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centers)
        shift = (new - centers).norm(dim=1).max()
        centers = new
        if shift < tol:
            break
    inertia = torch.zeros(k, dtype=x.dtype).scatter_reduce(
        0, assign, (x - centers[assign]).pow(2).sum(1), reduce="sum", include_self=True)
    return centers, assign, inertia, it


def make_kmeans(dt):
    return kmeans, lambda: None


def kmeans_inputs(i, dt):
    g = torch.Generator().manual_seed(i)
    centers = torch.tensor([[0., 0.], [6., 0.], [0., 6.], [6., 6.]])
    x = centers[torch.randint(0, 4, (120,), generator=g)] + 0.5 * torch.randn(120, 2, generator=g)
    return x.to(dt), 4


def pca(x, k):
    """sklearn-style PCA: centered SVD, svd_flip on u (largest |u| of each column positive)."""
    mean = x.mean(0, keepdim=True)
    xc = x - mean
    U, S, Vh = torch.linalg.svd(xc, full_matrices=False)
    max_abs_rows = torch.argmax(torch.abs(U), dim=0)
    signs = torch.sign(U[max_abs_rows, torch.arange(U.shape[1])])
    U = U * signs
    Vh = Vh * signs[:, None]
    explained = S ** 2 / (x.shape[0] - 1)
    ratio = explained / explained.sum()
    comps = Vh[:k]
    proj = xc @ comps.T
    # eigh of the covariance, same components up to sign: fix the sign by the first nonzero entry
    cov = xc.T @ xc / (x.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(cov)
    evecs = evecs.flip(-1)[:, :k]
    evecs = evecs * torch.sign(evecs[0:1, :])
    return proj, ratio[:k], evals.flip(-1)[:k], evecs


def make_pca(dt):
    return pca, lambda: None


def pca_inputs(i, dt):
    g = torch.Generator().manual_seed(10 + i)
    basis = torch.randn(4, 12, generator=g)
    z = torch.randn(64, 4, generator=g) * torch.tensor([5.0, 3.0, 2.0, 1.0])
    return (z @ basis + 0.05 * torch.randn(64, 12, generator=g)).to(dt), 3


class Kalman:
    """constant-velocity Kalman filter; x and P reassigned per step, a Python count of updates."""

    def __init__(self, dt_=0.1, q=1e-2, r=0.5):
        self.F = torch.tensor([[1, 0, dt_, 0], [0, 1, 0, dt_], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.float32)
        self.H = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
        self.Q = q * torch.eye(4)
        self.R = r * torch.eye(2)
        self.x = torch.zeros(4, 1)
        self.P = torch.eye(4) * 10
        self.n = 0
        self.nis = []

    def step(self, z):
        x = self.F @ self.x
        P = self.F @ self.P @ self.F.T + self.Q
        if z is not None:
            y = z.reshape(2, 1) - self.H @ x
            S = self.H @ P @ self.H.T + self.R
            K = torch.linalg.solve(S, self.H @ P).T
            x = x + K @ y
            I_KH = torch.eye(4) - K @ self.H
            P = I_KH @ P @ I_KH.T + K @ self.R @ K.T      # Joseph form
            self.nis.append((y.T @ torch.linalg.inv(S) @ y).squeeze())
            self.n += 1
        self.x, self.P = x, P
        return x.squeeze(1)


def make_kalman(dt):
    k = Kalman()
    return k.step, lambda: (k.x, k.P, k.n, k.nis)


def kalman_inputs(i, dt):
    return (None if i == 3 else torch.tensor([0.1 * i, 0.05 * i * i]) + 0.1 * torch.randn(2),)


def gp_predict(x, y, xs, lengthscale, noise):
    def rbf(a, b):
        d2 = (a[:, None, :] - b[None, :, :]).pow(2).sum(-1)
        return torch.exp(-0.5 * d2 / lengthscale ** 2)
    K = rbf(x, x) + noise * torch.eye(x.shape[0], dtype=x.dtype)
    L = torch.linalg.cholesky(K)
    alpha = torch.cholesky_solve(y[:, None], L)
    Ks = rbf(x, xs)
    mean = (Ks.T @ alpha).squeeze(-1)
    v = torch.linalg.solve_triangular(L, Ks, upper=False)
    var = rbf(xs, xs).diagonal() - v.pow(2).sum(0)
    lml = -0.5 * (y[:, None] * alpha).sum() - torch.log(torch.diagonal(L)).sum() - 0.5 * x.shape[0] * math.log(2 * math.pi)
    return mean, var, lml


def make_gp(dt):
    return gp_predict, lambda: None


def gp_inputs(i, dt):
    x = torch.rand(20 + 4 * i, 2)
    y = torch.sin(3 * x[:, 0]) + torch.cos(2 * x[:, 1])
    return x.to(dt), y.to(dt), torch.rand(7, 2).to(dt), 0.3 + 0.1 * i, 1e-2


# ------------------------------------------------------------------------------------------------ decoding
class TinyLM(nn.Module):
    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.GRUCell(d, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, tok, h):
        h = self.rnn(self.emb(tok), h)
        return self.out(h), h


EOS = 2


def make_greedy(dt):
    lm = TinyLM().eval()
    with torch.no_grad():
        lm.out.bias[EOS] += 1.5

    @torch.no_grad()
    def greedy_decode(bos, max_len=12):
        b = bos.shape[0]
        h = torch.zeros(b, 16)
        seqs = bos[:, None]
        done = torch.zeros(b, dtype=torch.bool)
        tok = bos
        for _ in range(max_len):
            logits, h = lm(tok, h)
            tok = logits.argmax(-1)
            tok = torch.where(done, torch.full_like(tok, EOS), tok)
            seqs = torch.cat([seqs, tok[:, None]], dim=1)
            done = done | (tok == EOS)
            if done.all():
                break
        lengths = (seqs != EOS).sum(1)
        return seqs, lengths
    return greedy_decode, lambda: None


def make_beam(dt):
    lm = TinyLM().eval()

    @torch.no_grad()
    def beam_search(bos, beam=3, max_len=8):
        V = 20
        h = torch.zeros(beam, 16)
        seqs = torch.full((beam, 1), int(bos), dtype=torch.long)
        scores = torch.tensor([0.0] + [-1e9] * (beam - 1))
        finished = []
        for step in range(max_len):
            logits, h = lm(seqs[:, -1], h)
            logp = F.log_softmax(logits, -1) + scores[:, None]
            top, idx = logp.view(-1).topk(beam)
            src = torch.div(idx, V, rounding_mode="floor")
            tok = idx % V
            seqs = torch.cat([seqs.index_select(0, src), tok[:, None]], 1)
            h = h.gather(0, src[:, None].expand(-1, h.shape[1]))
            scores = top
            is_eos = tok == EOS
            if is_eos.any():
                for j in is_eos.nonzero().flatten().tolist():
                    finished.append((scores[j].item() / seqs.shape[1], seqs[j].tolist()))
                scores = scores.masked_fill(is_eos, -1e9)
            if len(finished) >= beam:
                break
        if not finished:
            finished = [(scores[0].item() / seqs.shape[1], seqs[0].tolist())]
        best = max(finished, key=lambda t: t[0])
        return torch.tensor(best[1]), best[0], len(finished)
    return beam_search, lambda: None


def make_sample(dt):
    def top_k_top_p_sample(logits, top_k=0, top_p=1.0, temperature=1.0, filter_value=-float("inf")):
        logits = logits / temperature
        if top_k > 0:
            kth = torch.topk(logits, top_k)[0][..., -1, None]
            logits = logits.masked_fill(logits < kth, filter_value)
        if top_p < 1.0:
            sorted_logits, sorted_indices = torch.sort(logits, descending=True)
            cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
            sorted_indices_to_remove = cumulative_probs > top_p
            sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
            sorted_indices_to_remove[..., 0] = 0
            indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
            logits = logits.masked_fill(indices_to_remove, filter_value)
        probs = F.softmax(logits, dim=-1)
        return torch.multinomial(probs, num_samples=2, replacement=True), probs
    return top_k_top_p_sample, lambda: None


def sample_inputs(i, dt):
    return torch.randn(4, 50, dtype=dt) * 3, [0, 10, 5, 0, 10][i], [0.9, 1.0, 0.8, 0.7, 0.9][i], 0.7 + 0.1 * i


class KVDecoder(nn.Module):
    """one attention layer decoding a token per call into a preallocated KV cache (index_copy_ at a Python
    position counter), attending to cache[:, :, :pos+1]."""

    def __init__(self, d=32, heads=4, max_len=16, b=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.h = heads
        self.register_buffer("k_cache", torch.zeros(b, heads, max_len, d // heads))
        self.register_buffer("v_cache", torch.zeros(b, heads, max_len, d // heads))
        self.pos = 0

    @torch.no_grad()
    def forward(self, x):
        B, T, D = x.shape
        if self.pos + T > self.k_cache.shape[2]:   # a new sequence
            self.pos = 0
            self.k_cache.zero_()
            self.v_cache.zero_()
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        idx = torch.arange(self.pos, self.pos + T)
        self.k_cache.index_copy_(2, idx, k)
        self.v_cache.index_copy_(2, idx, v)
        self.pos += T
        K, V = self.k_cache[:, :, :self.pos], self.v_cache[:, :, :self.pos]
        att = (q @ K.transpose(-1, -2)) / math.sqrt(D // self.h)
        if T > 1:
            causal = torch.ones(T, self.pos, dtype=torch.bool).tril(self.pos - T)
            att = att.masked_fill(~causal, float("-inf"))
        y = att.softmax(-1) @ V
        return self.o(y.transpose(1, 2).reshape(B, T, D))


def make_kv(dt):
    m = KVDecoder().to(dt)
    return m, lambda: (m.k_cache, m.v_cache, m.pos)


def kv_inputs(i, dt):
    return (torch.randn(2, 4 if i == 0 else 1, 32, dtype=dt),)


# ------------------------------------------------------------------------------------------------ vision
def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def nms(boxes, scores, thresh):
    """py-faster-rcnn's NMS written in torch: sort, take the best, drop overlaps, while boxes remain."""
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        ious = box_iou(boxes[i][None], boxes[order[1:]])[0]
        order = order[1:][ious <= thresh]
    return torch.stack(keep)


def make_nms(dt):
    return nms, lambda: None


def nms_inputs(i, dt):
    xy = torch.rand(30, 2) * 40
    wh = torch.rand(30, 2) * 20 + 4
    return torch.cat([xy, xy + wh], 1).to(dt), torch.rand(30).to(dt), 0.3 + 0.1 * i


def encode_boxes(gt, anchors, weights=(10.0, 10.0, 5.0, 5.0)):
    wx, wy, ww, wh = weights
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return torch.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah, ww * torch.log(gw / aw), wh * torch.log(gh / ah)], 1)


def decode_boxes(rel, anchors, weights=(10.0, 10.0, 5.0, 5.0), clip=math.log(1000.0 / 16)):
    wx, wy, ww, wh = weights
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    dx, dy = rel[:, 0] / wx, rel[:, 1] / wy
    dw, dh = (rel[:, 2] / ww).clamp(max=clip), (rel[:, 3] / wh).clamp(max=clip)
    cx, cy = dx * aw + ax, dy * ah + ay
    w, h = torch.exp(dw) * aw, torch.exp(dh) * ah
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], 1)


def make_anchors(dt):
    def match_and_code(gt, feat_hw, stride):
        H, W = feat_hw
        sizes = torch.tensor([16.0, 32.0])
        ys, xs = torch.meshgrid(torch.arange(H) * stride, torch.arange(W) * stride, indexing="ij")
        ctr = torch.stack([xs, ys], -1).reshape(-1, 1, 2).to(gt.dtype) + stride / 2
        half = (sizes[None, :, None] / 2).to(gt.dtype)
        anchors = torch.cat([ctr - half, ctr + half], -1).reshape(-1, 4)
        iou = box_iou(anchors, gt)
        best, idx = iou.max(1)
        labels = torch.where(best >= 0.5, 1, torch.where(best < 0.3, 0, -1))
        rel = encode_boxes(gt[idx], anchors)
        back = decode_boxes(rel, anchors)
        return rel, labels, back
    return match_and_code, lambda: None


def anchor_inputs(i, dt):
    xy = torch.rand(5, 2) * 40
    return torch.cat([xy, xy + 8 + torch.rand(5, 2) * 24], 1).to(dt), (6, 6 + i), 8


class Augment:
    """torchvision-v1-style random flip, crop and color jitter driven by a torch.Generator the object owns."""

    def __init__(self, seed=0, size=12):
        self.g = torch.Generator().manual_seed(seed)
        self.size = size

    def __call__(self, img):
        if torch.rand(1, generator=self.g) < 0.5:
            img = img.flip(-1)
        H, W = img.shape[-2:]
        top = int(torch.randint(0, H - self.size + 1, (1,), generator=self.g))
        left = int(torch.randint(0, W - self.size + 1, (1,), generator=self.g))
        img = img[..., top:top + self.size, left:left + self.size]
        b = float(torch.empty(1).uniform_(0.8, 1.2, generator=self.g))
        c = float(torch.empty(1).uniform_(0.8, 1.2, generator=self.g))
        img = (img * b).clamp(0, 1)
        mean = img.mean(dim=(-3, -2, -1), keepdim=True)
        img = ((img - mean) * c + mean).clamp(0, 1)
        return img


def make_augment(dt):
    aug = Augment()
    return aug, lambda: aug.g.get_state()


def make_mixup(dt):
    beta = torch.distributions.Beta(torch.tensor([1.0]), torch.tensor([1.0]))

    def mix(x, y, num_classes=5, cutmix=False):
        lam = beta.sample().item()
        idx = torch.randperm(x.shape[0])
        y1 = F.one_hot(y, num_classes).to(x.dtype)
        if cutmix:
            H, W = x.shape[-2:]
            cut = math.sqrt(1.0 - lam)
            ch, cw = int(H * cut), int(W * cut)
            cy, cx = int(torch.randint(H, (1,))), int(torch.randint(W, (1,)))
            y0, y1_, x0, x1 = max(cy - ch // 2, 0), min(cy + ch // 2, H), max(cx - cw // 2, 0), min(cx + cw // 2, W)
            x = x.clone()
            x[:, :, y0:y1_, x0:x1] = x[idx, :, y0:y1_, x0:x1]
            lam = 1 - (y1_ - y0) * (x1 - x0) / (H * W)
        else:
            x = lam * x + (1 - lam) * x[idx]
        return x, lam * y1 + (1 - lam) * y1[idx]
    return mix, lambda: None


def mixup_inputs(i, dt):
    return torch.rand(6, 3, 8, 8, dtype=dt), torch.randint(0, 5, (6,)), 5, i % 2 == 1


class Metrics:
    """a running confusion matrix (bincount of target * C + pred) in a buffer, and per-call accuracy,
    per-class IoU and a ranking AUC."""

    def __init__(self, C=4):
        self.C = C
        self.cm = torch.zeros(C, C, dtype=torch.long)
        self.seen = 0

    def update(self, logits, target, score, label):
        pred = logits.argmax(1)
        self.cm += torch.bincount(target * self.C + pred, minlength=self.C ** 2).reshape(self.C, self.C)
        self.seen += target.numel()
        acc = (pred == target).float().mean()
        inter = self.cm.diag()
        union = self.cm.sum(0) + self.cm.sum(1) - inter
        iou = inter.float() / union.clamp(min=1).float()
        order = torch.argsort(score, descending=True)
        lab = label[order]
        tps = torch.cumsum(lab, 0).float()
        fps = torch.cumsum(1 - lab, 0).float()
        tpr = torch.cat([torch.zeros(1), tps / tps[-1]])
        fpr = torch.cat([torch.zeros(1), fps / fps[-1]])
        auc = torch.trapz(tpr, fpr)
        return acc, iou, iou.mean(), auc


def make_metrics(dt):
    m = Metrics()
    return m.update, lambda: (m.cm, m.seen)


def metrics_inputs(i, dt):
    n = 40 + 8 * i
    label = (torch.rand(n) < 0.4).long()
    label[0], label[1] = 0, 1
    return (torch.randn(n, 4, dtype=dt), torch.randint(0, 4, (n,)), torch.randn(n, dtype=dt) + label.to(dt),
            label)


def make_tokenize(dt):
    def collate(batch, pad_id=0, max_len=10):
        """a tokenizer collate: truncate, pad to the longest, attention mask, position ids by cumsum
        (padding-aware, left padding), token type ids."""
        seqs = [torch.tensor(s[:max_len]) for s in batch]
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, L - len(s):] = s
        mask = (ids != pad_id).long()
        pos = (mask.cumsum(1) - 1).clamp(min=0) * mask
        sep = (ids == 3).long()
        ttype = (sep.cumsum(1) - sep).clamp(max=1)
        return ids, mask, pos, ttype
    return collate, lambda: None


def tokenize_inputs(i, dt):
    g = torch.Generator().manual_seed(i)
    return ([torch.randint(4, 30, (int(n),), generator=g).tolist() + [3, 7, 8]
             for n in torch.randint(1, 9, (3 + i % 2,), generator=g)],)


def make_sparse(dt):
    def spmm(indices, values, n, dense):
        A = torch.sparse_coo_tensor(indices, values, (n, dense.shape[0])).coalesce()
        y1 = torch.sparse.mm(A, dense)
        row, col = A.indices()
        y2 = torch.zeros(n, dense.shape[1], dtype=dense.dtype).index_add_(0, row, A.values()[:, None] * dense[col])
        deg = torch.zeros(n, dtype=dense.dtype).scatter_add_(0, row, torch.ones_like(A.values()))
        return y1, y2, deg
    return spmm, lambda: None


def sparse_inputs(i, dt):
    nnz = 30 + 5 * i
    idx = torch.stack([torch.randint(0, 12, (nnz,)), torch.randint(0, 9, (nnz,))])
    return idx, torch.randn(nnz, dtype=dt), 12, torch.randn(9, 5, dtype=dt)


# ------------------------------------------------------------------------------------------------ RL
def make_gae(dt):
    def compute_gae(rewards, values, dones, last_value, gamma=0.99, lam=0.95):
        T = rewards.shape[0]
        adv = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(T)):
            if t == T - 1:
                nextnonterminal = 1.0 - dones[t]
                nextvalues = last_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            adv[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
        returns = adv + values
        disc, running = [], torch.zeros_like(last_value)
        for r, d in zip(reversed(rewards), reversed(dones)):
            running = r + gamma * running * (1 - d)
            disc.insert(0, running)
        norm = (adv - adv.mean()) / (adv.std() + 1e-8)
        return norm, returns, torch.stack(disc)
    return compute_gae, lambda: None


def gae_inputs(i, dt):
    T, n = 16, 4
    return (torch.randn(T, n, dtype=dt), torch.randn(T, n, dtype=dt), (torch.rand(T, n) < 0.1).to(dt),
            torch.randn(n, dtype=dt))


class ReplayBuffer:
    def __init__(self, cap=20, obs=6):
        self.obs = torch.zeros(cap, obs)
        self.act = torch.zeros(cap, dtype=torch.long)
        self.rew = torch.zeros(cap)
        self.ptr, self.size, self.cap = 0, 0, cap

    def add_and_sample(self, o, a, r, batch=5):
        for j in range(o.shape[0]):
            self.obs[self.ptr] = o[j]
            self.act[self.ptr] = a[j]
            self.rew[self.ptr] = r[j]
            self.ptr = (self.ptr + 1) % self.cap
            self.size = min(self.size + 1, self.cap)
        idx = torch.randint(0, self.size, (batch,))
        return self.obs[idx], self.act[idx], self.rew[idx]


def make_replay(dt):
    rb = ReplayBuffer()
    rb.obs, rb.rew = rb.obs.to(dt), rb.rew.to(dt)
    return rb.add_and_sample, lambda: (rb.obs, rb.act, rb.rew, rb.ptr, rb.size)


def replay_inputs(i, dt):
    n = 7
    return torch.randn(n, 6, dtype=dt), torch.randint(0, 4, (n,)), torch.randn(n, dtype=dt)


class MoCo(nn.Module):
    """MoCo v2's InfoNCE with a key queue: momentum encoder update, queue written at queue_ptr."""

    def __init__(self, d=16, K=24, m=0.99, T=0.07):
        super().__init__()
        self.enc_q = nn.Linear(10, d)
        self.enc_k = copy.deepcopy(self.enc_q)
        for p in self.enc_k.parameters():
            p.requires_grad = False
        self.K, self.m, self.T = K, m, T
        self.register_buffer("queue", F.normalize(torch.randn(d, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.enc_q.parameters(), self.enc_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr

    def forward(self, im_q, im_k):
        q = F.normalize(self.enc_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = F.normalize(self.enc_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return F.cross_entropy(logits, labels), logits


def make_moco(dt):
    m = MoCo().to(dt)
    return m, lambda: (m.queue, m.queue_ptr, dict(m.enc_k.state_dict()))


class Welford(nn.Module):
    """running mean / variance by Chan's parallel merge in buffers (count, mean, M2), normalizing the batch."""

    def __init__(self, d=8):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("m2", torch.zeros(d))

    def forward(self, x, update=True):
        if update:
            n_b = x.shape[0]
            mean_b = x.mean(0)
            m2_b = ((x - mean_b) ** 2).sum(0)
            n = self.count + n_b
            delta = mean_b - self.mean
            self.mean += delta * n_b / n
            self.m2 += m2_b + delta ** 2 * self.count * n_b / n
            self.count += n_b
        var = self.m2 / (self.count - 1).clamp(min=1)
        return (x - self.mean) / torch.sqrt(var + 1e-5)


def make_welford(dt):
    m = Welford().to(dt)
    return m, lambda: dict(m.state_dict())


def welford_inputs(i, dt):
    return torch.randn(5 + i, 8, dtype=dt) * 3 + 1, i != 3


# ------------------------------------------------------------------------------------------------ elementwise / autograd
def make_piecewise(dt):
    def piecewise(x, beta=1.0, delta=1.5):
        smooth_l1 = torch.where(x.abs() < beta, 0.5 * x ** 2 / beta, x.abs() - 0.5 * beta)
        huber = torch.where(x.abs() <= delta, 0.5 * x * x, delta * (x.abs() - 0.5 * delta))
        softplus = torch.where(x * 2 > 20, x, torch.log1p(torch.exp(x * 2)) / 2)
        safe_log = torch.where(x > 0, torch.log(torch.where(x > 0, x, torch.ones_like(x))), torch.zeros_like(x))
        spline = torch.where(x < -1, -1 - (x + 1) ** 2 / 2,
                             torch.where(x > 1, 1 + (x - 1) ** 2 / 2, x - x ** 3 / 6 + x / 6))
        sinc = torch.where(x == 0, torch.ones_like(x), torch.sin(math.pi * x) / (math.pi * x))
        return smooth_l1 + huber, softplus, safe_log, spline, sinc
    return piecewise, lambda: None


def piecewise_inputs(i, dt):
    x = torch.randn(64, dtype=dt) * (2 + 3 * i)
    x[::9] = 0
    return (x,)


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return torch.round(x).clamp(lo, hi)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ((x >= ctx.lo) & (x <= ctx.hi)).to(g.dtype), None, None


class QuantLinear(nn.Module):
    def __init__(self, i=12, o=6, bits=4):
        super().__init__()
        self.w = nn.Parameter(torch.randn(o, i) * 0.5)
        self.scale = nn.Parameter(torch.tensor(0.1))
        self.bits = bits

    def forward(self, x):
        q = 2 ** (self.bits - 1)
        wq = RoundSTE.apply(self.w / self.scale, -q, q - 1) * self.scale
        return x @ wq.T


def make_ste(dt):
    m = QuantLinear().to(dt)

    def step(x, y):
        for p in m.parameters():
            p.grad = None
        loss = (m(x) - y).pow(2).mean()
        loss.backward()
        return loss.detach(), m.w.grad, m.scale.grad
    return step, lambda: None


def ste_inputs(i, dt):
    return torch.randn(8, 12, dtype=dt), torch.randn(8, 6, dtype=dt)


def make_train(opt_name):
    def make(dt):
        model = nn.Sequential(nn.Linear(10, 32), nn.LayerNorm(32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 3)).to(dt)
        if opt_name == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        stats = {"steps": 0, "losses": []}

        def train_step(x, y):
            model.train()
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.1)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            stats["steps"] += 1
            stats["losses"].append(loss.item())
            return loss.detach(), (logits.argmax(1) == y).float().mean()
        return train_step, lambda: (dict(model.state_dict()), opt.state_dict()["state"], stats)
    return make


def train_inputs(i, dt):
    return torch.randn(16, 10, dtype=dt), torch.randint(0, 3, (16,))


# ------------------------------------------------------------------------------------------------ the cases
def _g(i, dt):
    return (_grads(i, dt),)


def _clip_in(i, dt):
    return _grads(i, dt), [2.0, 2.0, math.inf, 2.0, 1.0][i]


CASES = [
    # name, make(dt) -> (callable, state()), inputs(i, dt) -> args, calls, bf16 meaningful
    ("hand_adam", make_adam, _g, 5, True),
    ("adamw_functional", make_adamw, _g, 5, True),
    ("lion_optimizer", make_lion, lambda i, dt: (torch.randn(8, 8, dtype=dt), torch.randn(8, 3, dtype=dt)), 5, True),
    ("lamb", make_lamb, _g, 5, True),
    ("clip_grad_norm", make_clip, _clip_in, 5, True),
    ("ema_update", make_ema, lambda i, dt: (torch.randn(4, 3, 8, 8, dtype=dt),), 5, True),
    ("grad_scaler", make_scaler, scaler_inputs, 5, False),
    ("rk4_lotka", make_rk4, lambda i, dt: (torch.rand(3, 2, dtype=dt) + 0.5, 1.0 + 0.5 * i), 4, False),
    ("euler_adaptive", make_euler, lambda i, dt: (torch.rand(6, dtype=dt) * 2, 1.0 + i), 4, False),
    ("jacobi_heat", make_jacobi, lambda i, dt: (torch.zeros(12 + 2 * i, 12 + 2 * i, dtype=dt),
                                               torch.randn(12 + 2 * i, 12 + 2 * i, dtype=dt)), 3, False),
    ("nbody_leapfrog", make_nbody, lambda i, dt: (0.01 * (1 + i), 3), 4, False),
    ("kmeans", make_kmeans, kmeans_inputs, 4, False),
    ("pca_svd_eigh", make_pca, pca_inputs, 4, False),
    ("kalman", make_kalman, kalman_inputs, 5, False),
    ("gp_cholesky", make_gp, gp_inputs, 4, False),
    ("greedy_decode", make_greedy, lambda i, dt: (torch.randint(3, 20, (3 + i % 2,)),), 4, False),
    ("beam_search", make_beam, lambda i, dt: (3 + i,), 4, False),
    ("topk_topp_sample", make_sample, sample_inputs, 5, False),
    ("kv_cache_decode", make_kv, kv_inputs, 5, True),
    ("nms", make_nms, nms_inputs, 4, False),
    ("anchor_codec", make_anchors, anchor_inputs, 3, False),
    ("augment_generator", make_augment, lambda i, dt: (torch.rand(3, 16, 16 + i, dtype=dt),), 5, True),
    ("mixup_cutmix", make_mixup, mixup_inputs, 4, True),
    ("metrics", make_metrics, metrics_inputs, 4, False),
    ("tokenize_collate", make_tokenize, tokenize_inputs, 4, False),
    ("sparse_coo_mm", make_sparse, sparse_inputs, 4, False),
    ("gae_returns", make_gae, gae_inputs, 4, True),
    ("replay_buffer", make_replay, replay_inputs, 5, True),
    ("moco_queue", make_moco, lambda i, dt: (torch.randn(6, 10, dtype=dt), torch.randn(6, 10, dtype=dt)), 5, True),
    ("welford", make_welford, welford_inputs, 5, True),
    ("piecewise_where", make_piecewise, piecewise_inputs, 3, True),
    ("ste_quant", make_ste, ste_inputs, 4, True),
    ("train_sgd", make_train("sgd"), train_inputs, 5, False),
    ("train_adam", make_train("adam"), train_inputs, 5, False),
]


# ------------------------------------------------------------------------------------------------ the runner
def _leaves(x, path="out"):
    """(path, leaf) of a nested output / state: tensors, numbers, strings, None."""
    if isinstance(x, torch.Tensor):
        yield path, x
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        yield path, f"<{type(x).__name__}>"
        for f in dataclasses.fields(x):
            yield from _leaves(getattr(x, f.name), f"{path}.{f.name}")
    elif isinstance(x, dict):
        for k in x:
            yield from _leaves(x[k], f"{path}[{k!r}]" if not isinstance(k, torch.Tensor) else f"{path}[t{id(k) % 997}]")
    elif isinstance(x, (list, tuple)):
        yield path, f"<{type(x).__name__} of {len(x)}>"
        for j, v in enumerate(x):
            yield from _leaves(v, f"{path}[{j}]")
    else:
        yield path, x


def _dict_by_order(x):
    """dicts keyed by tensors (optimizer state keyed by the parameter) are compared in insertion order."""
    if isinstance(x, dict):
        return {(j if isinstance(k, torch.Tensor) else k): _dict_by_order(v) for j, (k, v) in enumerate(x.items())}
    if isinstance(x, (list, tuple)):
        return type(x)(_dict_by_order(v) for v in x) if not hasattr(x, "_fields") else [_dict_by_order(v) for v in x]
    return x


def diff(ref, got, where):
    """(worst relative difference, where): floating tensors relative to the reference's scale, everything
    else exact (inf on any mismatch)."""
    ra, ga = list(_leaves(_dict_by_order(ref), where)), list(_leaves(_dict_by_order(got), where))
    if len(ra) != len(ga):
        return float("inf"), f"{where}: {len(ra)} values against {len(ga)}"
    worst, at = 0.0, ""
    for (p, r), (_, g) in zip(ra, ga):
        if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
            return float("inf"), f"{p}: {type(r).__name__} against {type(g).__name__}"
        if isinstance(r, torch.Tensor):
            if r.shape != g.shape or r.dtype != g.dtype:
                return float("inf"), f"{p}: {r.dtype}{list(r.shape)} against {g.dtype}{list(g.shape)}"
            if r.is_floating_point() or r.is_complex():
                r64, g64 = r.detach().double(), g.detach().double()
                same_nan = torch.isnan(r64) == torch.isnan(g64)
                fin = torch.isfinite(r64)
                if not bool(same_nan.all()) or not bool((r64[~fin & ~torch.isnan(r64)] ==
                                                         g64[~fin & ~torch.isnan(r64)]).all()):
                    return float("inf"), f"{p}: nan/inf placement differs"
                if fin.any():
                    scale = r64[fin].abs().max().item() or 1.0
                    e = (g64[fin] - r64[fin]).abs().max().item() / scale
                else:
                    e = 0.0
            else:
                e = 0.0 if torch.equal(r, g) else float("inf")
        elif isinstance(r, float) and isinstance(g, float):
            e = 0.0 if r == g or (math.isnan(r) and math.isnan(g)) else abs(r - g) / max(abs(r), 1e-30)
        else:
            e = 0.0 if (type(r) is type(g) and r == g) else float("inf")
        if not e <= worst:
            worst, at = e, p
    return worst, at


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return x


def with_rng(make, ncalls):
    """Case `make` with the global RNG's state compared after each compared call too (heldout6/7): the
    eager instance (run_case makes it first) snapshots it after its call; the compiled instance's is
    read when the state is (nothing draws between)."""
    made = []

    def wrapped(dt):
        fn, state = make(dt)
        made.append(fn)
        if len(made) % 2:
            box = {"n": 0, "rng": None}

            def eager(*a):
                r = fn(*a)
                box["n"] += 1
                if box["n"] <= ncalls:
                    box["rng"] = torch.get_rng_state()
                return r
            return eager, lambda: (state(), box["rng"])
        return fn, lambda: (state(), torch.get_rng_state())
    return wrapped


def run_case(name, make, inputs, ncalls, dt):
    """eager and compiled side by side over `ncalls` calls; the record of the case."""
    torch.manual_seed(0)
    fe, state_e = make(dt)
    torch.manual_seed(0)
    fc_raw, state_c = make(dt)
    torch.manual_seed(1)
    calls = [inputs(i, dt) for i in range(ncalls)]
    fast = mlircap.compile(fc_raw)
    worst, at = 0.0, ""
    t0 = time.perf_counter()
    first_s = None
    for i, args in enumerate(calls):
        ae, ac = _clone(args), _clone(args)
        torch.manual_seed(100 + i)
        re = fe(*ae)
        torch.manual_seed(100 + i)
        rc = fast(*ac)
        if first_s is None:
            first_s = time.perf_counter() - t0
        for what, r, g in ((f"call {i} out", re, rc), (f"call {i} state", state_e(), state_c()),
                           (f"call {i} args", ae, ac)):
            e, p = diff(r, g, what)
            if not e <= worst:
                worst, at = e, p
    ex = fast.explain()
    rec = dict(calls=ncalls, graphs=len(fast.graphs), breaks=ex.break_count, recompiles=max(0, ex.variants - 1),
               fell_back=sum(1 for g in fast.graphs if g.fallback_reason), eager_variants=len(ex.eager_reasons),
               err=worst, err_at=at, first_call_s=first_s, eager_reasons=ex.eager_reasons[:2],
               break_reasons=[r[:140] for r, _ in ex.breaks[:3]], recompile_reasons=ex.recompile_reasons[:3])
    # one more call's time (the last call's arguments), eager against compiled, in turns; grad mode on
    last = calls[-1]

    def timed(f):
        def call(*a):
            with torch.enable_grad():
                torch.manual_seed(7)
                return f(*_clone(a))
        return call
    variants_before = ex.variants
    te, tm = side_by_side_ms([timed(fe), timed(fast)], last, rounds=5)
    rec.update(eager_ms=te, mlircap_ms=tm, ratio=te / tm,
               timing_recompiles=fast.explain().variants - variants_before, replays=fast._call.stats.replays,
               records=fast._call.stats.records, eager_calls=fast._call.stats.eager_calls)
    return rec


def main(cases=None, doc=__doc__, script="bench/heldout4.py"):
    """the command line over `cases` (default: this file's CASES); bench/heldout5.py passes its own."""
    cases = CASES if cases is None else cases
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--skip", default="", help="comma-separated names to leave out")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="", help="also append one JSON record per case to this file")
    a = ap.parse_args()
    if a.device != "cpu":
        raise SystemExit(f"{script}'s programs build CPU tensors (their Python control flow is the point)")
    torch.set_num_threads(a.threads)
    only, skip = set(filter(None, a.models.split(","))), set(filter(None, a.skip.split(",")))
    ratios, bad, off = [], 0, []
    for dname in a.dtypes.split(","):
        dt = DTYPES[dname]
        for name, make, inputs, ncalls, low_ok in cases:
            if (only and name not in only) or name in skip or (dname != "fp32" and not low_ok):
                continue
            rec = {"model": name, "dtype": dname}
            try:
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    rec.update(run_case(name, make, inputs, ncalls, dt))
            except Exception as e:  # noqa: BLE001 - one case's failure must not lose the others'
                bad += 1
                record_error(rec, f"{name} {dname}", e, a.json)
                continue
            notes = sorted({str(x.message).splitlines()[0][:160] for x in w if "mlircap" in str(x.message)})
            ok = rec["err"] <= TOL[dname]
            ratios.append(rec["ratio"])
            line = (f"{name} {dname}: eager {rec['eager_ms']:.3f} ms, mlircap {rec['mlircap_ms']:.3f} ms = "
                    f"{rec['ratio']:.2f}x eager, max|diff| {rec['err']:.1e} rel"
                    f"{' at ' + rec['err_at'] if rec['err'] else ''}, calls {rec['calls']}, graphs {rec['graphs']} "
                    f"({rec['fell_back']} fell back), breaks {rec['breaks']}, recompiles {rec['recompiles']}"
                    f"{' +' + str(rec['timing_recompiles']) + ' while timed' if rec['timing_recompiles'] else ''}"
                    f", eager variants {rec['eager_variants']}, first call {rec['first_call_s']:.0f} s")
            if not ok:
                off.append(f"{name} {dname}")
                line += "  <-- OFF TOLERANCE"
            extra = []
            if rec["break_reasons"]:
                extra.append(f"breaks: {rec['break_reasons']}")
            if rec["recompile_reasons"]:
                extra.append(f"recompiles: {rec['recompile_reasons']}")
            if rec["eager_reasons"]:
                extra.append(f"eager: {rec['eager_reasons']}")
            if notes:
                extra.append(f"warnings: {notes[:3]}")
            print(line + "".join(f"\n    {x}" for x in extra), flush=True)
            rec.update(ok=ok, warnings=notes[:3])
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(rec, default=str) + "\n")
    print(f"geomean mlircap/eager {geomean(ratios):.2f}x over {len(ratios)} cases" + (f"; {bad} errors" if bad else "")
          + (f"; off tolerance: {', '.join(off)}" if off else ""))


if __name__ == "__main__":
    main()
