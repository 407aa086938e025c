"""Seventh real-world-style corpus (issue 10 trust): idioms the earlier corpora leave out.

Written the way public repositories write them: torch.distributions (Normal / Categorical /
Independent / MultivariateNormal / MixtureSameFamily / Beta / Dirichlet log_prob, entropy,
rsample, kl_divergence, SAC's tanh-squashed Gaussian), HMM forward and Kalman filter loops,
reinforcement learning losses (PPO clip with value clipping, GAE by a reversed loop, double DQN
targets by gather, n-step returns, V-trace, epsilon-greedy through a generator), normalizing flows
(Glow actnorm with a data-dependent init flag and invertible 1x1 convs by slogdet, planar flows,
piecewise-linear splines by searchsorted, MAF inverse loops), contrastive and metric losses
(CLIP with a learnable clamped temperature, SimCLR with a -inf diagonal, ArcFace / CosFace
margins, circle loss, proxy-anchor, center loss by index_add_), hand-written optimizers (Lion,
Adafactor, LAMB, SAM's two backward passes, centered RMSprop, cosine warmup from a Python step,
MAML's inner loop with create_graph), custom torch.autograd.Function (save_for_backward,
needs_input_grad, mark_non_differentiable, once_differentiable), torch.func (vmap of grad for
per-sample gradients, jacrev / hessian, jvp / vjp, nested vmap), einsum-heavy layers
(tensor-train, multi-operand bilinear), NamedTuple / dataclass / dict outputs, attention masks
built from prefixes, windows and segment ids, integer index arithmetic (searchsorted with a
sorter and out_int32, histc / bincount with weights, ragged offsets by cumsum, flat-index
coordinates), mixed dtypes (float64 buffers, int64 counters, autocast bf16 on CPU), time series
(TCN with a chomp, RevIN, N-BEATS bases, series decomposition), tabular (sparsemax, entmax by
bisection, feature tokenizers with category offsets), decoding loops that break, in-place state
(power iteration, batch renorm, rolling caches), requires_grad toggling and tensor hooks, stride
tricks (as_strided windows, im2col by unfold, zero-size batches) and numerically hard inputs
(log1mexp, signed zeros, overflow in norms, NaN-aware reductions).

    python bench/modules7.py [--filter NAME] [--jobs 2] [--timeout 240] [-v]
    python bench/modules7.py --case NAME      # one case in this process, with a traceback

Each case runs eager and mlircap.compile side by side on the same inputs (deep copies of one
model), for `ncalls` calls (default 3: calls 0 and 1 on the same values, later calls on new
values, or on other shapes / dtypes where the case's inputs take the call index), in a child
process per worker (a signal is a crash, not the end of the run). Categories: ok (compiled,
one graph, matches eager), breaks (compiled in several graphs, matches), fallback (matches, but
some part ran eagerly), wrong, error (mlircap raised where eager did not), crash, timeout.
The runner is bench/modules5.py's.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import NamedTuple, Optional

import torch
import torch.distributions as D
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars


CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ========================================================================= distributions
class GaussianHead(nn.Module):
    """A Gaussian policy / decoder head: Normal(mu, softplus(s)) log_prob of targets, entropy,
    a reparameterised sample, and KL to the standard normal by kl_divergence."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(6, 8)

    def forward(self, x, y):
        mu, s = self.net(x).chunk(2, -1)
        d = D.Normal(mu, F.softplus(s) + 1e-4)
        z = d.rsample()
        kl = D.kl_divergence(d, D.Normal(torch.zeros_like(mu), torch.ones_like(mu))).sum(-1)
        return d.log_prob(y).sum(-1), d.entropy().mean(), z, kl, d.cdf(y), d.icdf(torch.full_like(y, 0.25))


case("normal_log_prob_entropy_kl_rsample", lambda: (R(5, 6), R(5, 4)))(lambda: GaussianHead())


@fn_case("categorical_logits_probs_sample_entropy", lambda i=0: (R(4, 7) * (1 + i), I(0, 7, 4)))
def categorical_logits_probs_sample_entropy(logits, a):
    """Categorical from logits (normalised with logsumexp inside) and from probs: log_prob of
    actions, entropy, a sample from torch's generator, and the KL between the two."""
    d = D.Categorical(logits=logits)
    p = D.Categorical(probs=F.softmax(logits / 2, -1))
    s = d.sample()
    return d.log_prob(a), d.entropy(), s, d.log_prob(s), D.kl_divergence(d, p), p.probs, d.logits


@fn_case("independent_mvn_scale_tril_log_prob", lambda: (R(3, 4), R(3, 4), R(4, 4)))
def independent_mvn_scale_tril_log_prob(mu, x, a):
    """Independent(Normal, 1) against MultivariateNormal with a Cholesky factor from a SPD matrix
    (a a^T + I), log_prob and rsample of both, the Mahalanobis term by solve_triangular."""
    ind = D.Independent(D.Normal(mu, torch.ones_like(mu) * 0.5), 1)
    cov = a @ a.T + torch.eye(4)
    mvn = D.MultivariateNormal(mu, scale_tril=torch.linalg.cholesky(cov))
    return ind.log_prob(x), mvn.log_prob(x), mvn.rsample((2,)), ind.rsample(), mvn.entropy()


class GMMDensity(nn.Module):
    """Mixture density network: MixtureSameFamily(Categorical(logits), Independent(Normal)) NLL
    with a backward through it."""

    def __init__(self, k=3, d=2):
        super().__init__()
        self.k, self.d = k, d
        self.net = nn.Linear(5, k + 2 * k * d)

    def forward(self, x, y):
        h = self.net(x)
        logit, mu, ls = h.split([self.k, self.k * self.d, self.k * self.d], -1)
        comp = D.Independent(D.Normal(mu.view(-1, self.k, self.d), ls.view(-1, self.k, self.d).exp()), 1)
        gmm = D.MixtureSameFamily(D.Categorical(logits=logit), comp)
        nll = -gmm.log_prob(y).mean()
        nll.backward()
        return nll.detach(), gmm.mean, gmm.variance


case("mixture_same_family_gmm_nll_backward", lambda: (R(6, 5), R(6, 2)), train=True)(lambda: GMMDensity())


@fn_case("beta_dirichlet_bernoulli_log_prob", lambda: (R(4, 3), torch.rand(4), torch.rand(4, 3).softmax(-1), I(0, 2, 4).float()))
def beta_dirichlet_bernoulli_log_prob(h, u, simplex, t):
    """lgamma-heavy log densities: Beta and Dirichlet with softplus concentrations, and
    Bernoulli(logits).log_prob against -binary_cross_entropy_with_logits."""
    conc = F.softplus(h) + 0.1
    beta = D.Beta(conc[:, 0], conc[:, 1])
    dir_ = D.Dirichlet(conc)
    b = D.Bernoulli(logits=h[:, 2])
    return beta.log_prob(u.clamp(1e-3, 1 - 1e-3)), dir_.log_prob(simplex), b.log_prob(t), \
        -F.binary_cross_entropy_with_logits(h[:, 2], t, reduction="none"), beta.mean, dir_.entropy()


class SACActor(nn.Module):
    """SAC's actor: rsample from a Normal with log_std clamped to [-20, 2], tanh squashing, the
    log-probability corrected by log(1 - tanh^2 + eps), actions rescaled to the bounds."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(5, 16), nn.ReLU())
        self.mu, self.log_std = nn.Linear(16, 2), nn.Linear(16, 2)
        self.register_buffer("scale", torch.tensor([2.0, 0.5]))

    def forward(self, obs):
        h = self.trunk(obs)
        mu, ls = self.mu(h), self.log_std(h).clamp(-20, 2)
        dist = D.Normal(mu, ls.exp())
        u = dist.rsample()
        a = torch.tanh(u)
        logp = dist.log_prob(u) - torch.log(self.scale * (1 - a.pow(2)) + 1e-6)
        return a * self.scale, logp.sum(-1, keepdim=True), torch.tanh(mu) * self.scale


case("sac_tanh_squashed_gaussian_rsample", lambda: (R(7, 5),))(lambda: SACActor())


@fn_case("hmm_forward_algorithm_logsumexp_loop", lambda i=0: (R(2, 5 + i, 3), R(3, 3), R(3)))
def hmm_forward_algorithm_logsumexp_loop(emis, trans, init):
    """HMM forward algorithm in log space: a Python loop over time, logsumexp over the previous
    state, log_softmax'd transition and initial distributions, the sequence log-likelihood."""
    lt = trans.log_softmax(-1)
    alpha = init.log_softmax(-1) + emis[:, 0]
    alphas = [alpha]
    for t in range(1, emis.shape[1]):
        alpha = torch.logsumexp(alpha[:, :, None] + lt[None], dim=1) + emis[:, t]
        alphas.append(alpha)
    return torch.logsumexp(alpha, -1), torch.stack(alphas, 1)


@fn_case("kalman_filter_predict_update_loop", lambda: (R(6, 2), torch.tensor(0.3)))
def kalman_filter_predict_update_loop(zs, q):
    """A constant-velocity Kalman filter: predict / update per measurement with the gain by
    linalg.solve, the covariance in Joseph form, a 0-d process noise tensor."""
    dt = 1.0
    Fm = torch.tensor([[1, 0, dt, 0], [0, 1, 0, dt], [0, 0, 1, 0], [0, 0, 0, 1.0]])
    H = torch.eye(2, 4)
    Q = torch.eye(4) * q
    Rm = torch.eye(2) * 0.5
    x = torch.zeros(4)
    P = torch.eye(4) * 10
    out = []
    for z in zs:
        x = Fm @ x
        P = Fm @ P @ Fm.T + Q
        S = H @ P @ H.T + Rm
        K = torch.linalg.solve(S, H @ P).T
        x = x + K @ (z - H @ x)
        IKH = torch.eye(4) - K @ H
        P = IKH @ P @ IKH.T + K @ Rm @ K.T
        out.append(x)
    return torch.stack(out), P


# ========================================================================= reinforcement learning
class PPOLoss(nn.Module):
    """PPO's loss: advantages normalised per batch, ratio exp(logp - old), the clipped surrogate
    by min, a clipped value loss by max, an entropy bonus, approx-KL and clip fraction as floats,
    backward and a gradient norm clip."""

    def __init__(self):
        super().__init__()
        self.pi = nn.Linear(4, 3)
        self.v = nn.Linear(4, 1)
        self.clip = 0.2

    def forward(self, obs, act, old_logp, adv, ret, old_v):
        for p in self.parameters():
            p.grad = None
        dist = D.Categorical(logits=self.pi(obs))
        logp = dist.log_prob(act)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = torch.exp(logp - old_logp)
        pg = -torch.min(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv).mean()
        v = self.v(obs).squeeze(-1)
        v_clip = old_v + (v - old_v).clamp(-self.clip, self.clip)
        vl = 0.5 * torch.max((v - ret) ** 2, (v_clip - ret) ** 2).mean()
        ent = dist.entropy().mean()
        loss = pg + 0.5 * vl - 0.01 * ent
        loss.backward()
        gn = nn.utils.clip_grad_norm_(self.parameters(), 0.5)
        with torch.no_grad():
            approx_kl = ((ratio - 1) - (logp - old_logp)).mean().item()
            clipfrac = ((ratio - 1).abs() > self.clip).float().mean().item()
        return loss.detach(), gn, approx_kl, clipfrac


case("ppo_clipped_surrogate_value_clip_backward",
     lambda: (R(8, 4), I(0, 3, 8), R(8) * 0.1 - 1.1, R(8), R(8), R(8)), train=True)(lambda: PPOLoss())


@fn_case("gae_reverse_loop_dones", lambda i=0: (R(6 + i, 3), R(7 + i, 3), (torch.rand(6 + i, 3) < 0.2).float()))
def gae_reverse_loop_dones(rewards, values, dones):
    """Generalized advantage estimation: a reversed Python loop over time with a running
    advantage reset by done flags, returns = advantages + values[:-1]."""
    gamma, lam = 0.99, 0.95
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(T)):
        nonterm = 1.0 - dones[t]
        delta = rewards[t] + gamma * values[t + 1] * nonterm - values[t]
        last = delta + gamma * lam * nonterm * last
        adv[t] = last
    return adv, adv + values[:-1]


class DoubleDQN(nn.Module):
    """Double DQN: the online net picks argmax actions, the target net (a frozen copy updated by
    a polyak step under no_grad) evaluates them by gather; Huber loss, backward."""

    def __init__(self):
        super().__init__()
        self.q = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        self.tq = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).requires_grad_(False)
        self.tq.load_state_dict(self.q.state_dict())

    def forward(self, s, a, r, s2, done):
        q = self.q(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            a2 = self.q(s2).argmax(1, keepdim=True)
            target = r + 0.99 * (1 - done.float()) * self.tq(s2).gather(1, a2).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        loss.backward()
        with torch.no_grad():
            for tp, p in zip(self.tq.parameters(), self.q.parameters()):
                tp.mul_(0.995).add_(p, alpha=0.005)
        return loss.detach(), target


case("double_dqn_gather_argmax_polyak",
     lambda: (R(8, 4), I(0, 3, 8), R(8), R(8, 4), torch.rand(8) < 0.3), train=True)(lambda: DoubleDQN())


@fn_case("nstep_returns_discount_matrix", lambda i=0: (R(4, 5 + 2 * i), R(4), torch.rand(4, 5 + 2 * i) < 0.1))
def nstep_returns_discount_matrix(r, bootstrap, done):
    """Discounted returns without a loop: discounts by cumprod of a masked gamma, a triangular
    discount matrix from arange differences (pow of an int exponent), the bootstrap term."""
    T = r.shape[1]
    gamma = 0.9
    idx = torch.arange(T)
    expo = (idx[None, :] - idx[:, None]).clamp(min=0)
    mat = torch.where(idx[None, :] >= idx[:, None], gamma ** expo.float(), torch.zeros(()))
    ret = r @ mat.T
    alive = torch.cumprod((~done).float(), dim=1)
    boot = bootstrap[:, None] * gamma ** (T - idx).float() * alive[:, -1:]
    return ret + boot, alive, expo


@fn_case("vtrace_clipped_importance_reverse_scan", lambda: (R(5, 2), R(5, 2), R(5, 2), R(5, 2), R(2)))
def vtrace_clipped_importance_reverse_scan(behav_logp, target_logp, rewards, values, bootstrap):
    """IMPALA's V-trace: rhos = exp(target - behaviour) clamped at rho_bar and c_bar, the
    temporal differences, a reversed scan accumulating vs - V, pg advantages."""
    rhos = torch.exp(target_logp - behav_logp)
    crho = rhos.clamp(max=1.0)
    cs = rhos.clamp(max=0.9)
    v_next = torch.cat([values[1:], bootstrap[None]], 0)
    deltas = crho * (rewards + 0.99 * v_next - values)
    acc = torch.zeros_like(bootstrap)
    out = []
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + 0.99 * cs[t] * acc
        out.append(acc)
    vs = torch.stack(out[::-1]) + values
    vs_next = torch.cat([vs[1:], bootstrap[None]], 0)
    return vs, crho * (rewards + 0.99 * vs_next - values)


@fn_case("epsilon_greedy_generator_where", lambda i=0: (R(6, 4), 0.3 + 0.2 * i))
def epsilon_greedy_generator_where(q, eps):
    """Epsilon-greedy with a seeded torch.Generator: uniform draws against a Python float eps,
    random actions by randint with the same generator, argmax otherwise."""
    g = torch.Generator().manual_seed(7)
    explore = torch.rand(q.shape[0], generator=g) < eps
    rand_a = torch.randint(0, q.shape[1], (q.shape[0],), generator=g)
    return torch.where(explore, rand_a, q.argmax(-1)), explore


# ========================================================================= normalizing flows
class ActNormInvConv(nn.Module):
    """Glow's step: ActNorm initialised from the first batch's statistics (a bool buffer flag set
    in place), an invertible 1x1 convolution whose logdet is h*w*slogdet(W), the logdet summed."""

    def __init__(self, c=4):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.register_buffer("initialized", torch.tensor(False))
        w = torch.linalg.qr(torch.randn(c, c))[0]
        self.weight = nn.Parameter(w)

    def forward(self, x):
        if not self.initialized:
            with torch.no_grad():
                mean = x.mean((0, 2, 3), keepdim=True)
                std = x.std((0, 2, 3), keepdim=True)
                self.loc.data.copy_(-mean)
                self.logs.data.copy_(torch.log(1 / (std + 1e-6)))
                self.initialized.fill_(True)
        h, w = x.shape[2:]
        y = (x + self.loc) * self.logs.exp()
        ld = h * w * self.logs.sum()
        y = F.conv2d(y, self.weight[:, :, None, None])
        ld = ld + h * w * torch.slogdet(self.weight)[1]
        return y, ld, torch.linalg.inv(self.weight)


case("glow_actnorm_init_flag_invconv_slogdet", lambda: (R(3, 4, 5, 5) * 2 + 1,), ncalls=3)(lambda: ActNormInvConv())


class PlanarFlows(nn.Module):
    """A stack of planar flows z + u_hat tanh(w.z + b) with the invertibility fix
    u_hat = u + (softplus(w.u) - 1 - w.u) w / |w|^2 and log|1 + u_hat.psi| accumulated."""

    def __init__(self, d=3, k=4):
        super().__init__()
        self.u = nn.Parameter(torch.randn(k, d) * 0.5)
        self.w = nn.Parameter(torch.randn(k, d) * 0.5)
        self.b = nn.Parameter(torch.zeros(k))

    def forward(self, z):
        ld = torch.zeros(z.shape[0])
        for u, w, b in zip(self.u, self.w, self.b):
            wu = (w * u).sum()
            uh = u + (F.softplus(wu) - 1 - wu) * w / (w * w).sum()
            lin = z @ w + b
            z = z + uh * torch.tanh(lin)[:, None]
            psi = (1 - torch.tanh(lin) ** 2)[:, None] * w
            ld = ld + torch.log((1 + psi @ uh).abs() + 1e-8)
        return z, ld


case("planar_flow_stack_logdet", lambda: (R(6, 3),))(lambda: PlanarFlows())


@fn_case("piecewise_linear_spline_searchsorted", lambda i=0: (torch.rand(5, 3) * (1 + 0.2 * i) - 0.1 * i, R(3, 4)))
def piecewise_linear_spline_searchsorted(x, wlogits):
    """A piecewise-linear coupling transform: bin edges by cumsum of softmaxed widths padded with
    0, the bin by searchsorted (contiguous() of an expanded edge tensor), out-of-[0,1] inputs
    clamped, heights gathered, logdet from the bin density."""
    w = F.softmax(wlogits, -1)
    edges = F.pad(torch.cumsum(w, -1), (1, 0))
    edges[..., -1] = 1.0
    xc = x.clamp(0, 1 - 1e-6)
    be = edges[None].expand(x.shape[0], -1, -1).contiguous()
    b = torch.searchsorted(be, xc[..., None], right=True).squeeze(-1) - 1
    b = b.clamp(0, w.shape[-1] - 1)
    lo = be.gather(-1, b[..., None]).squeeze(-1)
    width = w[None].expand(x.shape[0], -1, -1).gather(-1, b[..., None]).squeeze(-1)
    nb = w.shape[-1]
    y = (b.float() + (xc - lo) / width) / nb
    return y, torch.log(1.0 / (nb * width)).sum(-1), b


class MAFInverse(nn.Module):
    """A masked autoregressive flow layer: the forward pass in one masked matmul, the inverse by a
    Python loop over dimensions writing y[:, i] in place."""

    def __init__(self, d=4):
        super().__init__()
        self.d = d
        self.lin = nn.Linear(d, 2 * d)
        self.register_buffer("mask", torch.tril(torch.ones(d, d), -1).repeat(2, 1))

    def mu_alpha(self, x):
        h = F.linear(x, self.lin.weight * self.mask, self.lin.bias)
        return h[:, :self.d], h[:, self.d:].tanh()

    def forward(self, u):
        x = torch.zeros_like(u)
        for i in range(self.d):
            mu, al = self.mu_alpha(x)
            x[:, i] = u[:, i] * torch.exp(al[:, i]) + mu[:, i]
        mu, al = self.mu_alpha(x)
        return x, (x - mu) * torch.exp(-al), -al.sum(-1)


case("maf_inverse_loop_inplace_columns", lambda: (R(5, 4),))(lambda: MAFInverse())


# ========================================================================= contrastive / metric
class CLIPLoss(nn.Module):
    """CLIP's loss: L2-normalised projections, logit_scale.exp() clamped at 100, a symmetric cross
    entropy with arange labels, the scale parameter updated by backward."""

    def __init__(self):
        super().__init__()
        self.img = nn.Linear(8, 6, bias=False)
        self.txt = nn.Linear(5, 6, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, im, tx):
        a = F.normalize(self.img(im), dim=-1)
        b = F.normalize(self.txt(tx), dim=-1)
        scale = self.logit_scale.exp().clamp(max=100)
        logits = scale * a @ b.t()
        labels = torch.arange(logits.shape[0])
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        loss.backward()
        acc = (logits.argmax(-1) == labels).float().mean()
        return loss.detach(), acc, self.logit_scale.grad


case("clip_symmetric_loss_learnable_scale", lambda i=0: (R(4 + i, 8), R(4 + i, 5)), train=True)(lambda: CLIPLoss())


@fn_case("simclr_nt_xent_fill_diagonal_inf", lambda: (R(4, 6), R(4, 6)))
def simclr_nt_xent_fill_diagonal_inf(z1, z2):
    """SimCLR: 2N normalised embeddings, a similarity matrix whose diagonal is set to -inf in place
    by fill_diagonal_, positives at (i + N) mod 2N, cross entropy over the rest."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    sim = z @ z.T / 0.5
    sim.fill_diagonal_(float("-inf"))
    targets = (torch.arange(2 * n) + n) % (2 * n)
    return F.cross_entropy(sim, targets), sim.softmax(-1)


class ArcFace(nn.Module):
    """ArcFace's margin: cos(theta + m) by the addition formula, the easy-margin fallback
    where(cos > th, phi, cos - mm), a one-hot made by scatter_, scaled logits, CE loss."""

    def __init__(self, d=6, n=5, s=30.0, m=0.5):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, d))
        self.s, self.m = s, m
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th, self.mm = math.cos(math.pi - m), math.sin(math.pi - m) * m

    def forward(self, x, label):
        cosine = F.linear(F.normalize(x), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size()).scatter_(1, label.view(-1, 1).long(), 1)
        out = (one_hot * phi + (1.0 - one_hot) * cosine) * self.s
        return F.cross_entropy(out, label), out


case("arcface_margin_scatter_one_hot", lambda: (R(6, 6), I(0, 5, 6)))(lambda: ArcFace())


@fn_case("circle_loss_masked_logsumexp", lambda: (F.normalize(R(6, 5), dim=-1), torch.tensor([0, 0, 1, 1, 2, 2])))
def circle_loss_masked_logsumexp(feat, labels):
    """Circle loss: similarities split by an equality mask with the diagonal removed (triu),
    clamp_min'd adaptive weights, masked logits filled with a large negative, softplus of the
    sum of the two logsumexps."""
    m, gamma = 0.25, 32
    sim = feat @ feat.T
    same = labels[:, None] == labels[None, :]
    upper = torch.triu(torch.ones_like(same), diagonal=1)
    pos, neg = same & upper, ~same & upper
    ap = torch.clamp_min(-sim.detach() + 1 + m, 0.0)
    an = torch.clamp_min(sim.detach() + m, 0.0)
    lp = torch.where(pos, -ap * (sim - (1 - m)) * gamma, torch.tensor(-1e12))
    ln = torch.where(neg, an * (sim - m) * gamma, torch.tensor(-1e12))
    return F.softplus(torch.logsumexp(ln.flatten(), 0) + torch.logsumexp(lp.flatten(), 0))


class ProxyAnchor(nn.Module):
    """Proxy-anchor loss: cosine to learnable proxies, one_hot positives, exp of margins, sums over
    the batch masked per proxy, log1p averaged over proxies with positives (nonzero count)."""

    def __init__(self, n=4, d=5):
        super().__init__()
        self.proxies = nn.Parameter(torch.randn(n, d))
        self.n = n

    def forward(self, x, y):
        cos = F.linear(F.normalize(x), F.normalize(self.proxies))
        P = F.one_hot(y, self.n).float()
        N = 1 - P
        pos_exp = torch.exp(-32 * (cos - 0.1))
        neg_exp = torch.exp(32 * (cos + 0.1))
        with_pos = (P.sum(0) != 0).sum()
        ps = torch.where(P == 1, pos_exp, torch.zeros_like(pos_exp)).sum(0)
        ns = torch.where(N == 1, neg_exp, torch.zeros_like(neg_exp)).sum(0)
        return torch.log1p(ps).sum() / with_pos + torch.log1p(ns).sum() / self.n, with_pos


case("proxy_anchor_one_hot_log1p", lambda i=0: (R(6, 5), I(0, 4 - i, 6)))(lambda: ProxyAnchor())


class CenterLoss(nn.Module):
    """Center loss with centers as a buffer updated by hand: per-class deltas summed with
    index_add_, divided by 1 + bincount(minlength), subtracted in place."""

    def __init__(self, n=4, d=3):
        super().__init__()
        self.register_buffer("centers", torch.randn(n, d))
        self.n = n

    def forward(self, x, y):
        c = self.centers.index_select(0, y)
        loss = ((x - c) ** 2).sum(1).mean() / 2
        with torch.no_grad():
            delta = torch.zeros_like(self.centers).index_add_(0, y, c - x)
            cnt = torch.bincount(y, minlength=self.n).to(x.dtype)
            self.centers.sub_(0.5 * delta / (1 + cnt[:, None]))
        return loss


case("center_loss_index_add_bincount_buffer", lambda: (R(7, 3), I(0, 4, 7)), ncalls=4)(lambda: CenterLoss())


@fn_case("triplet_with_distance_fn_swap", lambda: (R(5, 4), R(5, 4), R(5, 4)))
def triplet_with_distance_fn_swap(a, p, n):
    """TripletMarginWithDistanceLoss with a cosine distance lambda and swap=True, next to
    TripletMarginLoss(p=1) and F.cosine_embedding_loss with +/-1 targets."""
    cos_d = nn.TripletMarginWithDistanceLoss(distance_function=lambda x, y: 1 - F.cosine_similarity(x, y), swap=True)
    l1 = nn.TripletMarginLoss(margin=0.5, p=1, reduction="none")
    t = torch.tensor([1, -1, 1, -1, 1])
    return cos_d(a, p, n), l1(a, p, n), F.cosine_embedding_loss(a, p, t, margin=0.2)


# ========================================================================= hand-written optimizers
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 7)
        self.b = nn.Linear(7, 2)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


class LionStep(nn.Module):
    """Lion: update = sign(lerp(m, g, 1 - b1)), decoupled weight decay by mul_, the momentum by
    lerp_ with b2, all under no_grad after backward."""

    def __init__(self):
        super().__init__()
        self.net = _Net()
        self.exp_avg = [torch.zeros_like(p) for p in self.net.parameters()]

    def forward(self, x, y):
        self.net.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        with torch.no_grad():
            for p, m in zip(self.net.parameters(), self.exp_avg):
                p.mul_(1 - 1e-3 * 0.1)
                upd = m.lerp(p.grad, 1 - 0.9).sign_()
                p.add_(upd, alpha=-1e-3)
                m.lerp_(p.grad, 1 - 0.99)
        return loss.detach()


case("lion_sign_update_lerp", lambda: (R(6, 5), R(6, 2)), train=True, ncalls=4)(lambda: LionStep())


class AdafactorStep(nn.Module):
    """Adafactor: factored second moments for matrices (row / column means of g^2 + eps), a full
    one for vectors, rsqrt'd estimate, update clipped by its RMS, relative step size from a
    Python step counter and the parameter RMS."""

    def __init__(self):
        super().__init__()
        self.net = _Net()
        self.state = {}
        self.step = 0

    def forward(self, x, y):
        self.net.zero_grad()
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        self.step += 1
        beta2 = 1.0 - self.step ** -0.8
        rho = min(1e-2, 1.0 / math.sqrt(self.step))
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                g2 = p.grad ** 2 + 1e-30
                st = self.state.setdefault(name, {})
                if p.dim() == 2:
                    r = st.setdefault("r", torch.zeros(p.shape[0]))
                    c = st.setdefault("c", torch.zeros(p.shape[1]))
                    r.mul_(beta2).add_(g2.mean(-1), alpha=1 - beta2)
                    c.mul_(beta2).add_(g2.mean(-2), alpha=1 - beta2)
                    rf = (r / r.mean(-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    u = p.grad * rf * c.rsqrt().unsqueeze(0)
                else:
                    v = st.setdefault("v", torch.zeros_like(p))
                    v.mul_(beta2).add_(g2, alpha=1 - beta2)
                    u = p.grad * v.rsqrt()
                u.div_((u.norm() / math.sqrt(u.numel()) / 1.0).clamp_(min=1.0))
                scale = max(1e-3, (p.norm() / math.sqrt(p.numel())).item()) * rho
                p.add_(u, alpha=-scale)
        return loss.detach(), self.step


case("adafactor_factored_moments_rms_clip", lambda: (R(6, 5), R(6, 2)), train=True, ncalls=4)(lambda: AdafactorStep())


class LambStep(nn.Module):
    """LAMB: Adam moments, the update's and the weight's norms, a trust ratio with torch.where for
    zero norms, the step scaled by it (a 0-d tensor alpha through mul)."""

    def __init__(self):
        super().__init__()
        self.net = _Net()
        self.m = [torch.zeros_like(p) for p in self.net.parameters()]
        self.v = [torch.zeros_like(p) for p in self.net.parameters()]
        self.t = 0

    def forward(self, x, y):
        self.net.zero_grad()
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        self.t += 1
        with torch.no_grad():
            for p, m, v in zip(self.net.parameters(), self.m, self.v):
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                mh = m / (1 - 0.9 ** self.t)
                vh = v / (1 - 0.999 ** self.t)
                upd = mh / (vh.sqrt() + 1e-6) + 0.01 * p
                wn, un = p.norm(), upd.norm()
                trust = torch.where((wn > 0) & (un > 0), wn / un, torch.ones_like(wn))
                p.sub_(1e-2 * trust * upd)
        return loss.detach()


case("lamb_trust_ratio_where", lambda: (R(6, 5), I(0, 2, 6)), train=True, ncalls=3)(lambda: LambStep())


class SAMStep(nn.Module):
    """Sharpness-aware minimisation: a first backward, the parameters perturbed by rho g / |g|
    (the norm over all gradients by stack of per-tensor norms), a second forward / backward at the
    perturbed point, the perturbation undone, an SGD step."""

    def __init__(self):
        super().__init__()
        self.net = _Net()

    def forward(self, x, y):
        params = list(self.net.parameters())
        for p in params:
            p.grad = None
        F.mse_loss(self.net(x), y).backward()
        with torch.no_grad():
            gn = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
            eps = [p.grad * (0.05 / (gn + 1e-12)) for p in params]
            for p, e in zip(params, eps):
                p.add_(e)
        for p in params:
            p.grad = None
        loss = F.mse_loss(self.net(x), y)
        loss.backward()
        with torch.no_grad():
            for p, e in zip(params, eps):
                p.sub_(e)
                p.add_(p.grad, alpha=-0.1)
        return loss.detach(), gn


case("sam_two_backward_perturb_restore", lambda: (R(6, 5), R(6, 2)), train=True)(lambda: SAMStep())


@fn_case("rmsprop_centered_addcdiv_inputs", lambda: (R(4, 3), R(4, 3), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3)))
def rmsprop_centered_addcdiv_inputs(p, g, sq, ga, buf):
    """Centered RMSprop with momentum on tensors passed in and written in place: square_avg by
    addcmul_, grad_avg by lerp_, avg = sqrt(sq - ga^2) with add_(eps), buf by addcdiv_."""
    alpha, eps, lr, mom = 0.99, 1e-8, 1e-2, 0.9
    for _ in range(2):
        sq.mul_(alpha).addcmul_(g, g, value=1 - alpha)
        ga.lerp_(g, 1 - alpha)
        avg = sq.addcmul(ga, ga, value=-1).sqrt_().add_(eps)
        buf.mul_(mom).addcdiv_(g, avg)
        p.add_(buf, alpha=-lr)
    return p


class CosineWarmupSGD(nn.Module):
    """A cosine schedule with linear warmup computed in Python from an int attribute incremented
    every call; the lr written into a param-group-like dict and used for the update."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.group = {"lr": 0.0}
        self.it, self.warm, self.total = 0, 2, 6

    def forward(self, x, y):
        if self.it < self.warm:
            lr = 0.1 * (self.it + 1) / self.warm
        else:
            prog = (self.it - self.warm) / max(1, self.total - self.warm)
            lr = 0.5 * 0.1 * (1 + math.cos(math.pi * prog))
        self.group["lr"] = lr
        self.it += 1
        self.net.zero_grad()
        loss = F.l1_loss(self.net(x), y)
        loss.backward()
        with torch.no_grad():
            for p in self.net.parameters():
                p -= self.group["lr"] * p.grad
        return loss.detach(), lr


case("cosine_warmup_python_step_lr_dict", lambda: (R(5, 4), R(5, 2)), train=True, ncalls=5)(lambda: CosineWarmupSGD())


class MAML(nn.Module):
    """MAML's inner loop: fast weights from torch.autograd.grad(create_graph=True), the query loss
    through torch.func.functional_call with the fast weights, the outer backward through both."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, xs, ys, xq, yq):
        params = dict(self.net.named_parameters())
        for _ in range(2):
            loss = F.mse_loss(torch.func.functional_call(self.net, params, (xs,)), ys)
            grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
            params = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads)}
        outer = F.mse_loss(torch.func.functional_call(self.net, params, (xq,)), yq)
        self.net.zero_grad()
        outer.backward()
        return outer.detach(), [p.grad for p in self.net.parameters()]


case("maml_inner_loop_create_graph_functional_call", lambda: (R(5, 3), R(5, 1), R(4, 3), R(4, 1)), train=True)(lambda: MAML())


# ========================================================================= custom autograd.Function
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


class ClampSTENet(nn.Module):
    """A leaky straight-through clamp as a torch.autograd.Function (save_for_backward, Python
    floats on ctx), used in a layer trained by backward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = ClampSTE.apply(self.lin(x) * 3, -1.0, 1.0)
        loss = (y * torch.arange(4.0)).sum()
        loss.backward()
        return y.detach(), self.lin.weight.grad


case("autograd_function_leaky_ste_clamp", lambda: (R(5, 4),), train=True)(lambda: ClampSTENet())


class SortWithIdx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        v, i = x.sort(-1, descending=True)
        ctx.mark_non_differentiable(i)
        ctx.save_for_backward(i)
        return v, i

    @staticmethod
    def backward(ctx, gv, gi):
        (i,) = ctx.saved_tensors
        return torch.zeros_like(gv).scatter_(-1, i, gv)


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


class CustomFunctions(nn.Module):
    """A sort with mark_non_differentiable indices and a memory-saving SiLU that recomputes the
    sigmoid in backward and checks ctx.needs_input_grad (the input does not need a gradient)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(5) + 0.5)

    def forward(self, x):
        v, i = SortWithIdx.apply(x * self.w)
        y = ScaledSiLU.apply(x, self.w)
        loss = (v[:, :2].sum() + (y ** 2).sum())
        loss.backward()
        return v.detach(), i, y.detach(), self.w.grad


case("autograd_function_non_differentiable_needs_input_grad", lambda: (R(4, 5),), train=True)(lambda: CustomFunctions())


class OnceDiffLogSumExp(torch.autograd.Function):
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


@fn_case("autograd_function_once_differentiable_grad", lambda: (R(3, 6).requires_grad_(),))
def autograd_function_once_differentiable_grad(x):
    """A logsumexp Function with a once_differentiable backward, its gradient by autograd.grad,
    -inf inputs in a row (amax of a row with -inf)."""
    xm = x.masked_fill(torch.tensor([True, False, False, True, False, False]), float("-inf"))
    y = OnceDiffLogSumExp.apply(xm)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


# ========================================================================= torch.func
class PerSampleGrads(nn.Module):
    """Per-sample gradients (Opacus-style) by torch.func.vmap(grad(loss)) over functional_call
    with parameters detached into a dict, then clipped per sample and averaged (DP-SGD)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))

    def forward(self, x, y):
        params = {k: v.detach() for k, v in self.net.named_parameters()}

        def loss_fn(p, xi, yi):
            out = torch.func.functional_call(self.net, p, (xi[None],))
            return F.cross_entropy(out, yi[None])

        g = torch.func.vmap(torch.func.grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.stack([v.flatten(1).norm(dim=1) for v in g.values()], 1).norm(dim=1)
        factor = (1.0 / (norms + 1e-6)).clamp(max=1.0)
        return {k: (v * factor.view(-1, *[1] * (v.dim() - 1))).mean(0) for k, v in g.items()}, norms


case("func_vmap_grad_per_sample_dp_clip", lambda: (R(5, 4), I(0, 3, 5)))(lambda: PerSampleGrads())


@fn_case("func_jacrev_hessian_small", lambda: (R(3), R(3, 3)))
def func_jacrev_hessian_small(x, a):
    """torch.func.jacrev of a vector function, hessian of a scalar one, and jacfwd for comparison."""
    def f(v):
        return torch.tanh(a @ v) * v

    def s(v):
        return (v ** 3).sum() + (a @ v).pow(2).sum()

    return torch.func.jacrev(f)(x), torch.func.hessian(s)(x), torch.func.jacfwd(f)(x)


@fn_case("func_jvp_vjp_linearize", lambda: (R(4), R(4), R(4)))
def func_jvp_vjp_linearize(x, t, c):
    """Forward- and reverse-mode products: torch.func.jvp with a tangent, torch.func.vjp with a
    cotangent, and torch.autograd.functional.jvp for comparison."""
    def f(v):
        return torch.sin(v) * v.exp().cumsum(0)

    out, jt = torch.func.jvp(f, (x,), (t,))
    _, pull = torch.func.vjp(f, x)
    (ct,) = pull(c)
    return out, jt, ct


@fn_case("func_nested_vmap_in_out_dims", lambda: (R(3, 4, 5), R(5, 4)))
def func_nested_vmap_in_out_dims(x, w):
    """Nested vmap: an inner vmap over rows of a matrix-vector function, an outer one over the
    batch with out_dims=1, a vmapped torch.dot with in_dims=(0, None)."""
    def mv(row, m):
        return torch.dot(row, m[:, 0]) + m.sum()

    inner = torch.func.vmap(mv, in_dims=(0, None))
    outer = torch.func.vmap(inner, in_dims=(0, None), out_dims=1)
    return outer(x, w), torch.func.vmap(torch.dot, in_dims=(0, None))(x[0], w[:, 1])


# ========================================================================= einsum-heavy layers
class TensorTrainLinear(nn.Module):
    """A tensor-train (TT) linear layer: input reshaped to (b, 4, 3), contracted with three cores
    by chained einsums with rank indices, then a bilinear multi-operand einsum head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Parameter(torch.randn(4, 2, 3) * 0.5)      # in1, out1, r1
        self.c2 = nn.Parameter(torch.randn(3, 3, 5, 1) * 0.5)   # r1, in2, out2, r2
        self.bil = nn.Parameter(torch.randn(2, 10, 10) * 0.1)

    def forward(self, x):
        xr = x.view(x.shape[0], 4, 3)
        t = torch.einsum("bij,iar->bjar", xr, self.c1)
        y = torch.einsum("bjar,rjcs->bacs", t, self.c2).reshape(x.shape[0], -1)
        head = torch.einsum("bi,kij,bj->bk", y, self.bil, y)
        return y, head


case("tensor_train_linear_chained_einsum", lambda i=0: (R(3 + i, 12),))(lambda: TensorTrainLinear())


@fn_case("einsum_multi_operand_attention_heads", lambda: (R(2, 5, 6), R(3, 6, 4), R(2, 7, 4), R(2, 7, 6)))
def einsum_multi_operand_attention_heads(q, wq, k, v):
    """Attention written as einsums with head projections inline ('bqd,hde,bke->bhqk'), a
    repeated-index batch diagonal, and an output projection summing over heads."""
    scores = torch.einsum("bqd,hde,bke->bhqk", q, wq, k) / 2.0
    p = scores.softmax(-1)
    ctx = torch.einsum("bhqk,bkd->bhqd", p, v)
    diag = torch.einsum("bhqq->bhq", scores[:, :, :5, :5]) if scores.shape[-1] >= 5 else scores
    return ctx.sum(1), diag, torch.einsum("...qd,...qd->...q", ctx, ctx)


class BilinearModule(nn.Module):
    """nn.Bilinear next to the same contraction by einsum and torch.bilinear, inputs of two widths."""

    def __init__(self):
        super().__init__()
        self.bl = nn.Bilinear(3, 4, 2)

    def forward(self, a, b):
        e = torch.einsum("bi,oij,bj->bo", a, self.bl.weight, b) + self.bl.bias
        return self.bl(a, b), e, F.bilinear(a, b, self.bl.weight)


case("bilinear_vs_einsum", lambda: (R(5, 3), R(5, 4)))(lambda: BilinearModule())


# ========================================================================= structured outputs
class Detections(NamedTuple):
    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    num: int


class NamedTupleHead(nn.Module):
    """A detection head returning a typing.NamedTuple (tensors and a Python int), and a
    collections.namedtuple of losses."""

    Losses = collections.namedtuple("Losses", ["cls", "reg"])

    def __init__(self):
        super().__init__()
        self.cls = nn.Linear(6, 3)
        self.reg = nn.Linear(6, 4)

    def forward(self, x):
        logits = self.cls(x)
        scores, labels = logits.softmax(-1).max(-1)
        boxes = self.reg(x).sigmoid() * 32
        det = Detections(boxes, scores, labels, int(x.shape[0]))
        return det, self.Losses(logits.logsumexp(-1).mean(), boxes.abs().mean())


case("namedtuple_outputs_int_field", lambda i=0: (R(4 + i, 6),))(lambda: NamedTupleHead())


@dataclasses.dataclass
class ModelOutput:
    logits: torch.Tensor
    hidden: torch.Tensor
    loss: Optional[torch.Tensor] = None
    attn: Optional[list] = None


class DataclassOutputModel(nn.Module):
    """A transformers-style ModelOutput dataclass: an Optional loss only when labels are passed
    (None on some calls), a list of attention maps."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.out = nn.Linear(6, 10)

    def forward(self, ids, labels=None):
        h = self.emb(ids)
        att = (h @ h.transpose(1, 2)).softmax(-1)
        h = att @ h
        logits = self.out(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return ModelOutput(logits=logits, hidden=h, loss=loss, attn=[att])


def _dc_inputs(i=0):
    ids = I(0, 10, 2, 5)
    if i == 1:
        return (ids,)
    lab = ids.clone()
    lab[:, -1] = -100
    return (ids, lab)


case("dataclass_model_output_optional_loss", _dc_inputs, ncalls=4)(lambda: DataclassOutputModel())


@fn_case("dict_of_lists_and_metrics_output", lambda: (R(6, 3), I(0, 3, 6)))
def dict_of_lists_and_metrics_output(logits, y):
    """A training-loop-style metrics dict: per-class lists of 0-d tensors, Python floats from
    item(), an int count, nested dicts, a tuple key order."""
    pred = logits.argmax(-1)
    per_class = [((pred == c) & (y == c)).sum() for c in range(3)]
    return {"loss": F.cross_entropy(logits, y), "acc": (pred == y).float().mean().item(),
            "per_class": per_class, "n": int(y.numel()), "nested": {"pred": pred, "probs": [logits.softmax(-1)]}}


# ========================================================================= attention masks
@fn_case("prefix_lm_mask_bidirectional_prefix", lambda i=0: (R(3, 6, 4), torch.tensor([2, 0, 6 - i]), torch.tensor([6, 4, 5])))
def prefix_lm_mask_bidirectional_prefix(x, prefix, lengths):
    """A prefix-LM mask: bidirectional over the prefix, causal after it, padded keys masked by
    lengths, -inf by masked_fill, NaN rows (none here) zeroed by nan_to_num."""
    T = x.shape[1]
    i = torch.arange(T)
    causal = i[None, :] <= i[:, None]
    in_prefix = i[None, None, :] < prefix[:, None, None]
    allowed = (causal[None] | in_prefix) & (i[None, None, :] < lengths[:, None, None])
    s = (x @ x.transpose(1, 2)).masked_fill(~allowed, float("-inf"))
    return torch.nan_to_num(s.softmax(-1) @ x), allowed


@fn_case("sliding_window_band_mask_triu_tril", lambda i=0: (R(2, 7, 7), 2 + i))
def sliding_window_band_mask_triu_tril(scores, window):
    """A sliding-window causal band from tril(diagonal=0) minus tril(diagonal=-window), masked
    with finfo.min, a second variant with -inf and torch.where(isnan)."""
    ones = torch.ones(scores.shape[-2:], dtype=torch.bool)
    band = torch.tril(ones) & ~torch.tril(ones, diagonal=-window)
    a = scores.masked_fill(~band, torch.finfo(scores.dtype).min).softmax(-1)
    b = torch.where(band, scores, torch.tensor(float("-inf"))).softmax(-1)
    return a, torch.where(torch.isnan(b), torch.zeros_like(b), b), band.sum()


@fn_case("segment_ids_document_mask_packed", lambda: (R(1, 8, 4), torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2]]), torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2]])))
def segment_ids_document_mask_packed(x, seg, pos):
    """Packed sequences: a block-diagonal mask from segment-id equality and causality by
    position ids, an additive float mask (0 / -inf) by torch.zeros().masked_fill_, sdpa with it."""
    same = seg[:, :, None] == seg[:, None, :]
    causal = pos[:, :, None] >= pos[:, None, :]
    add = torch.zeros(same.shape).masked_fill_(~(same & causal), float("-inf"))
    q = x[:, None]
    return F.scaled_dot_product_attention(q, q, q, attn_mask=add[:, None]), add


# ========================================================================= integer index arithmetic
@fn_case("searchsorted_sorter_right_int32", lambda i=0: (R(2, 6), R(2, 4) * 2, torch.tensor([0.5, -1.0, 2.0])))
def searchsorted_sorter_right_int32(seq, vals, flat):
    """searchsorted with an argsort sorter (unsorted boundaries), side='right', out_int32, and a
    1-d boundary against a 2-d input; values equal to boundaries."""
    sorter = seq.argsort(-1)
    v = torch.cat([vals, seq[:, :1]], 1)
    a = torch.searchsorted(seq, v, sorter=sorter)
    b = torch.searchsorted(seq.sort(-1).values, v, side="right", out_int32=True)
    c = torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5, 1.0]), flat)
    return a, b, c, torch.bucketize(v, torch.tensor([-1.0, 0.0, 1.0]), right=True)


@fn_case("histc_bincount_weights_quantile_bins", lambda i=0: (R(50 + 10 * i), I(0, 5, 50 + 10 * i), torch.rand(50 + 10 * i)))
def histc_bincount_weights_quantile_bins(x, cls, w):
    """Histograms: histc with explicit min / max (values outside dropped), bincount with float
    weights and minlength, quantile bin edges, bucketize into them, a cumulative int64 histogram."""
    h = torch.histc(x, bins=8, min=-2, max=2)
    bw = torch.bincount(cls, weights=w, minlength=7)
    edges = torch.quantile(x, torch.tensor([0.25, 0.5, 0.75]))
    b = torch.bucketize(x, edges)
    counts = torch.bincount(b, minlength=4)
    return h, bw, edges, counts, counts.cumsum(0), counts.cumsum(0).dtype == torch.int64


@fn_case("ragged_offsets_cumsum_repeat_interleave", lambda i=0: (torch.tensor([3, 1, 0, 2 + i]), R(6 + i, 2)))
def ragged_offsets_cumsum_repeat_interleave(lengths, flat):
    """Ragged to padded: offsets by cumsum - lengths, row ids by repeat_interleave, column ids by
    arange minus the repeated offsets, a padded tensor by index_put_, a segment max by
    scatter_reduce with include_self=False, an empty segment."""
    offsets = lengths.cumsum(0) - lengths
    rows = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    cols = torch.arange(flat.shape[0]) - offsets[rows]
    padded = torch.zeros(lengths.numel(), int(lengths.max()), 2)
    padded.index_put_((rows, cols), flat)
    seg_max = torch.zeros(lengths.numel(), 2).scatter_reduce(0, rows[:, None].expand(-1, 2), flat, "amax", include_self=False)
    return padded, seg_max, offsets, cols


@fn_case("flat_index_coords_floor_div_negative", lambda i=0: (I(-20, 40, 12), 7 - i))
def flat_index_coords_floor_div_negative(idx, w):
    """Flat indices to (row, col) by // and % with negative indices (floor semantics), by
    torch.div(rounding_mode='trunc') and fmod for comparison, and back; an unravel by hand."""
    r, c = idx // w, idx % w
    rt, ct = torch.div(idx, w, rounding_mode="trunc"), torch.fmod(idx, w)
    back = r * w + c
    ur = torch.stack([idx.abs() // (w * 3), (idx.abs() // w) % 3, idx.abs() % w], -1)
    return r, c, rt, ct, back, ur, torch.remainder(idx, -w)


@fn_case("int64_large_values_arithmetic", lambda: (torch.tensor([2 ** 40 + 3, -(2 ** 35), 7, 2 ** 52 + 1]), torch.tensor([3, 5, -2, 9])))
def int64_large_values_arithmetic(a, b):
    """int64 beyond 2^32 and 2^24 (float32-unsafe): floor division, remainder, multiplication,
    bit shifts, abs, sum and cumsum, max; conversions to float64 (exact) and float32."""
    return a // b, a % b, a * b, a >> 3, (a << 2), a.abs(), a.sum(), a.cumsum(0), a.max(), a.double(), a.float()


# ========================================================================= mixed dtypes
class Float64Accumulator(nn.Module):
    """float64 running sums and an int64 count updated from float32 activations in place (add_ of a
    float32 into a float64 buffer), the mean read back as float32; the count divides a float."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("s", torch.zeros(4, dtype=torch.float64))
        self.register_buffer("ss", torch.zeros(4, dtype=torch.float64))
        self.register_buffer("n", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        h = self.lin(x)
        with torch.no_grad():
            self.s.add_(h.sum(0))
            self.ss.add_((h.double() ** 2).sum(0))
            self.n += h.shape[0]
        mean = (self.s / self.n).float()
        var = self.ss / self.n - (self.s / self.n) ** 2
        return (h - mean) / var.float().sqrt().clamp_min(1e-3), self.n / 3, self.n // 3


case("float64_buffer_int64_count_from_float32", lambda: (R(5, 4) * 100 + 1e4,), ncalls=4)(lambda: Float64Accumulator())


class AutocastCPUBlock(nn.Module):
    """torch.autocast('cpu', bfloat16) inside forward: linear and matmul in bf16, softmax in float32
    (autocast's fp32 list), a float32 layer norm after the block, the output cast back."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q, k = self.q(x), self.k(x)
            s = q @ k.transpose(-1, -2)
            p = s.softmax(-1)
            o = p @ k
        return self.ln(o.float()), q.dtype, p.dtype, o.dtype


case("autocast_bf16_cpu_inside_forward", lambda: (R(2, 5, 8),))(lambda: AutocastCPUBlock())


@fn_case("bf16_input_fp32_reductions_cast_back", lambda i=0: (R(3, 16).to(torch.bfloat16) * (1 + 99 * i), torch.ones(16, dtype=torch.bfloat16)))
def bf16_input_fp32_reductions_cast_back(x, w):
    """RMSNorm as LLaMA writes it: the input upcast to float32, variance in float32, rsqrt, the
    result cast back to the input dtype before the bf16 weight multiply; sum in bf16 vs float."""
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    y = w * (h * torch.rsqrt(var + 1e-6)).to(x.dtype)
    return y, x.sum(-1), x.float().sum(-1), (x * 3).to(torch.float16)


@fn_case("int_tensor_true_divide_and_counters", lambda i=0: (I(0, 10, 6), I(1, 4, 6, dtype=torch.int32), 3 + i))
def int_tensor_true_divide_and_counters(a, b, k):
    """Integer tensors divided (true division gives float32), int32 with int64 promotion, integer
    mean by float(), clamp of ints with float bounds (promotes), pow of ints."""
    return a / b, a / k, a + b, (a * b).dtype, a.float().mean(), a.clamp(0.5, 7.5), b ** 2, a.pow(2) // 3


# ========================================================================= time series
class Chomp1d(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x[:, :, :-self.n].contiguous()


class TCNBlock(nn.Module):
    def __init__(self, cin, cout, d):
        super().__init__()
        self.conv1 = nn.utils.parametrizations.weight_norm(nn.Conv1d(cin, cout, 3, padding=2 * d, dilation=d))
        self.chomp = Chomp1d(2 * d)
        self.conv2 = nn.Conv1d(cout, cout, 3, padding=2 * d, dilation=d)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = F.relu(self.chomp(self.conv1(x)))
        h = F.dropout(F.relu(self.chomp(self.conv2(h))), 0.1, self.training)
        return F.relu(h + (x if self.down is None else self.down(x)))


class TCN(nn.Module):
    """locuslab's TCN: Chomp1d slicing the right padding, parametrizations.weight_norm, dilations
    1, 2, 4, a 1x1 downsample, dropout in train mode, a training step by backward + SGD."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(TCNBlock(2, 6, 1), TCNBlock(6, 6, 2), TCNBlock(6, 6, 4))
        self.head = nn.Linear(6, 1)

    def forward(self, x, y):
        self.zero_grad()
        out = self.head(self.blocks(x)[:, :, -1])
        loss = F.mse_loss(out, y)
        loss.backward()
        with torch.no_grad():
            for p in self.parameters():
                p.add_(p.grad, alpha=-0.01)
        return loss.detach(), out.detach()


case("tcn_chomp_weight_norm_dilations_train", lambda i=0: (R(3, 2, 16 + 4 * i), R(3, 1)), train=True)(lambda: TCN())


class RevIN(nn.Module):
    """RevIN: per-instance mean / stdev computed in 'norm' mode stored as attributes (detached),
    read in 'denorm' mode; affine weight / bias; a linear forecaster between."""

    def __init__(self, c=3, L=12, H=4):
        super().__init__()
        self.affine_weight = nn.Parameter(torch.ones(c))
        self.affine_bias = nn.Parameter(torch.zeros(c))
        self.proj = nn.Linear(L, H)

    def _norm(self, x, mode):
        if mode == "norm":
            self.mean = torch.mean(x, dim=1, keepdim=True).detach()
            self.stdev = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
            x = (x - self.mean) / self.stdev
            return x * self.affine_weight + self.affine_bias
        x = (x - self.affine_bias) / (self.affine_weight + 1e-10)
        return x * self.stdev + self.mean

    def forward(self, x):
        z = self._norm(x, "norm")
        y = self.proj(z.transpose(1, 2)).transpose(1, 2)
        return self._norm(y, "denorm")


case("revin_norm_denorm_attributes", lambda i=0: (R(2, 12, 3) * 10 + 50 * i,))(lambda: RevIN())


class NBeatsBlocks(nn.Module):
    """N-BEATS trend and seasonality blocks: polynomial and Fourier bases as buffers from
    linspace / arange, thetas by linear layers, backcast residuals subtracted in a loop."""

    def __init__(self, L=10, H=4):
        super().__init__()
        t = torch.arange(L + H, dtype=torch.float32) / (L + H)
        self.register_buffer("trend", torch.stack([t ** i for i in range(3)]))
        k = torch.arange(1, 3, dtype=torch.float32)
        self.register_buffer("season", torch.cat([torch.cos(2 * math.pi * k[:, None] * t), torch.sin(2 * math.pi * k[:, None] * t)]))
        self.L = L
        self.fc = nn.ModuleList([nn.Sequential(nn.Linear(L, 16), nn.ReLU(), nn.Linear(16, n)) for n in (3, 4)])

    def forward(self, x):
        forecast = 0
        for fc, basis in zip(self.fc, (self.trend, self.season)):
            theta = fc(x)
            full = theta @ basis
            x = x - full[:, :self.L]
            forecast = forecast + full[:, self.L:]
        return forecast, x


case("nbeats_trend_seasonality_bases", lambda: (R(4, 10),))(lambda: NBeatsBlocks())


@fn_case("series_decomp_moving_avg_repeat_pad", lambda i=0: (R(2, 11 + i, 3),))
def series_decomp_moving_avg_repeat_pad(x):
    """Autoformer's series decomposition: the ends repeated (x[:, 0:1].repeat) and concatenated,
    AvgPool1d over the permuted series, the seasonal part as the residual."""
    k = 5
    front = x[:, 0:1, :].repeat(1, (k - 1) // 2, 1)
    end = x[:, -1:, :].repeat(1, (k - 1) // 2, 1)
    xp = torch.cat([front, x, end], dim=1)
    trend = F.avg_pool1d(xp.permute(0, 2, 1), k, stride=1).permute(0, 2, 1)
    return x - trend, trend


class Seq2SeqTeacherForcing(nn.Module):
    """A GRU seq2seq decoder loop with teacher forcing decided per step by torch.rand(1).item()
    (a Python branch on a random value), argmax feedback otherwise."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(8, 6)
        self.cell = nn.GRUCell(6, 6)
        self.out = nn.Linear(6, 8)

    def forward(self, h, tgt):
        inp = tgt[:, 0]
        logits = []
        for t in range(1, tgt.shape[1]):
            h = self.cell(self.emb(inp), h)
            lg = self.out(h)
            logits.append(lg)
            inp = tgt[:, t] if torch.rand(1).item() < 0.5 else lg.argmax(-1)
        return torch.stack(logits, 1)


case("seq2seq_teacher_forcing_random_branch", lambda: (R(3, 6), I(0, 8, 3, 5)))(lambda: Seq2SeqTeacherForcing())


# ========================================================================= tabular
def sparsemax(z, dim=-1):
    zs, _ = torch.sort(z, dim=dim, descending=True)
    rng = torch.arange(1, z.shape[dim] + 1, dtype=z.dtype)
    view = [1] * z.dim()
    view[dim] = -1
    rng = rng.view(view)
    cs = zs.cumsum(dim) - 1
    support = rng * zs > cs
    k = support.sum(dim, keepdim=True)
    tau = cs.gather(dim, k - 1) / k.to(z.dtype)
    return torch.clamp(z - tau, min=0)


class TabNetAttentive(nn.Module):
    """TabNet's attentive transformer: ghost batch norm by chunks, a prior multiplied in, sparsemax
    by sort / cumsum / gather of the support size, the prior updated by (gamma - mask), the
    sparsity entropy term."""

    def __init__(self, d=6):
        super().__init__()
        self.fc = nn.Linear(d, d, bias=False)
        self.bn = nn.BatchNorm1d(d, momentum=0.02)

    def forward(self, a, x):
        prior = torch.ones_like(x)
        masks, ent = [], 0
        for _ in range(2):
            h = torch.cat([self.bn(c) for c in self.fc(a).chunk(2, 0)], 0)
            m = sparsemax(h * prior)
            prior = prior * (1.3 - m)
            ent = ent + (-m * torch.log(m + 1e-15)).sum(1).mean()
            masks.append(m)
            a = m * x
        return masks, ent, prior


case("tabnet_sparsemax_ghost_bn_prior", lambda: (R(8, 6), R(8, 6)), train=True)(lambda: TabNetAttentive())


@fn_case("entmax15_bisection_fixed_iters", lambda i=0: (R(3, 7) * (1 + 2 * i),))
def entmax15_bisection_fixed_iters(x):
    """1.5-entmax by bisection (entmax_bisect): tau bracketed by max - 1 and max - (1/d)^(1/2),
    25 halvings in a Python loop, p = clamp(x/2 - tau, 0)^2, renormalised."""
    alpha = 1.5
    X = x * (alpha - 1)
    mx = X.amax(-1, keepdim=True)
    lo = mx - 1
    hi = mx - (1.0 / x.shape[-1]) ** (alpha - 1)
    f_lo = (torch.clamp(X - lo, min=0) ** (1 / (alpha - 1))).sum(-1, keepdim=True) - 1
    dm = hi - lo
    for _ in range(25):
        dm = dm / 2
        tau = lo + dm
        p = torch.clamp(X - tau, min=0) ** (1 / (alpha - 1))
        f = p.sum(-1, keepdim=True) - 1
        lo = torch.where((f * f_lo) >= 0, tau, lo)
    return p / p.sum(-1, keepdim=True), tau


class FeatureTokenizer(nn.Module):
    """FT-Transformer's tokenizer: numerical features as x[..., None] * W + b, categorical ids
    shifted by a category-offsets buffer (cumsum of cardinalities) into one Embedding, a [CLS]
    token expanded and concatenated; a one_hot of a low-cardinality column."""

    def __init__(self, n_num=3, cards=(3, 5, 2), d=4):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n_num, d))
        self.b = nn.Parameter(torch.zeros(n_num, d))
        self.register_buffer("offsets", torch.tensor((0,) + cards[:-1]).cumsum(0))
        self.emb = nn.Embedding(sum(cards), d)
        self.cls = nn.Parameter(torch.randn(1, 1, d))

    def forward(self, xn, xc):
        num = xn[..., None] * self.w + self.b
        cat = self.emb(xc + self.offsets[None])
        tok = torch.cat([self.cls.expand(xn.shape[0], -1, -1), num, cat], 1)
        return tok, F.one_hot(xc[:, 2], 2), F.one_hot(xc[:, 0], num_classes=-1)


case("ft_transformer_tokenizer_category_offsets",
     lambda: (R(5, 3), torch.stack([I(0, 3, 5), I(0, 5, 5), I(0, 2, 5)], 1)))(lambda: FeatureTokenizer())


class WideDeepEmbeddingBag(nn.Module):
    """Wide & deep: multi-hot features through EmbeddingBag(mode='sum') from a padded 2-d input
    with padding_idx, a wide part by a sparse-like gather-sum of weights, sigmoid output, BCE."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(12, 4, mode="sum", padding_idx=0)
        self.wide = nn.Parameter(torch.randn(12) * 0.1)
        self.deep = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, ids, y):
        wide = self.wide[ids].masked_fill(ids == 0, 0).sum(1, keepdim=True)
        logit = wide + self.deep(self.bag(ids))
        return F.binary_cross_entropy_with_logits(logit.squeeze(1), y), torch.sigmoid(logit)


case("wide_deep_embedding_bag_padding_idx", lambda: (I(0, 12, 6, 4), torch.rand(6).round()))(lambda: WideDeepEmbeddingBag())


# ========================================================================= decoding loops
class GreedyDecoder(nn.Module):
    """Greedy decoding with a break once every sequence has emitted EOS (a data-dependent
    .all()), finished sequences padded, lengths counted, max_len as an attribute."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 8)
        self.cell = nn.GRUCell(8, 8)
        self.out = nn.Linear(8, 6)
        self.eos, self.pad, self.max_len = 1, 0, 8

    def forward(self, h):
        b = h.shape[0]
        tok = torch.full((b,), 2, dtype=torch.long)
        done = torch.zeros(b, dtype=torch.bool)
        out, lengths = [], torch.zeros(b, dtype=torch.long)
        for _ in range(self.max_len):
            h = self.cell(self.emb(tok), h)
            tok = self.out(h).argmax(-1)
            tok = tok.masked_fill(done, self.pad)
            out.append(tok)
            lengths += (~done).long()
            done = done | (tok == self.eos)
            if done.all():
                break
        return torch.stack(out, 1), lengths


case("greedy_decode_break_when_all_eos", lambda i=0: (R(3, 8) * (1 + i),))(lambda: GreedyDecoder())


@fn_case("multinomial_top_k_sampling_loop", lambda: (R(2, 9),))
def multinomial_top_k_sampling_loop(logits):
    """Sampling with torch.multinomial from top-k renormalised probabilities for three steps
    (torch's generator advanced each step), tokens mapped back through topk indices, a
    repetition penalty applied by scatter on the sampled ids."""
    toks = []
    for _ in range(3):
        v, ix = logits.topk(4, -1)
        p = F.softmax(v / 0.8, -1)
        s = torch.multinomial(p, 1)
        t = ix.gather(-1, s)
        toks.append(t)
        sc = logits.gather(-1, t)
        logits = logits.scatter(-1, t, torch.where(sc > 0, sc / 1.3, sc * 1.3))
    return torch.cat(toks, -1), logits


class RollingKVCache(nn.Module):
    """A sliding-window (Mistral-style rolling buffer) KV cache: writes at pos % window by
    slice assignment, the positions buffer updated, the mask from stored positions."""

    def __init__(self, d=4, w=4):
        super().__init__()
        self.w = w
        self.register_buffer("k", torch.zeros(w, d))
        self.register_buffer("pos", torch.full((w,), -1, dtype=torch.long))
        self.q = nn.Linear(d, d)
        self.t = 0

    def forward(self, x):
        slot = self.t % self.w
        self.k[slot] = x
        self.pos[slot] = self.t
        valid = (self.pos >= 0) & (self.pos > self.t - self.w)
        s = (self.q(x) @ self.k.T).masked_fill(~valid, float("-inf"))
        self.t += 1
        return s.softmax(-1) @ self.k, valid


case("rolling_buffer_kv_cache_modulo_slot", lambda i=0: (R(4) + i,), ncalls=6)(lambda: RollingKVCache())


# ========================================================================= in-place state
class PowerIterationSN(nn.Module):
    """Spectral normalisation by hand: u, v buffers refined by one power iteration under no_grad
    (F.normalize with out-of-place then copy_), sigma = u^T W v, the weight divided by it."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))
        self.register_buffer("u", F.normalize(torch.randn(5), dim=0))
        self.register_buffer("v", F.normalize(torch.randn(4), dim=0))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.v.copy_(F.normalize(self.weight.t() @ self.u, dim=0, eps=1e-12))
                self.u.copy_(F.normalize(self.weight @ self.v, dim=0, eps=1e-12))
        sigma = torch.dot(self.u, self.weight @ self.v)
        return x @ (self.weight / sigma).t(), sigma


case("power_iteration_spectral_norm_buffers", lambda: (R(3, 4),), train=True, ncalls=4)(lambda: PowerIterationSN())


class BatchRenorm(nn.Module):
    """Batch renormalisation: r and d from batch vs running statistics clamped to [1/rmax, rmax]
    and [-dmax, dmax] and detached, running buffers updated in place, an int64 step counter
    gating the clamp limits."""

    def __init__(self, c=4):
        super().__init__()
        self.register_buffer("rm", torch.zeros(c))
        self.register_buffer("rs", torch.ones(c))
        self.register_buffer("steps", torch.tensor(0))
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        if self.training:
            mu, sd = x.mean(0), x.std(0, unbiased=False) + 1e-5
            rmax = 1.0 + 2.0 * (self.steps.float() / 3).clamp(max=1)
            r = (sd / self.rs).clamp(1 / rmax, rmax).detach()
            d = ((mu - self.rm) / self.rs).clamp(-1, 1).detach()
            y = (x - mu) / sd * r + d
            with torch.no_grad():
                self.rm += 0.1 * (mu - self.rm)
                self.rs += 0.1 * (sd - self.rs)
                self.steps += 1
        else:
            y = (x - self.rm) / self.rs
        return y * self.weight + self.bias


case("batch_renorm_clamped_r_d_steps", lambda: (R(6, 4) * 3 + 1,), train=True, ncalls=5,
     between=lambda m, i: m.eval() if i == 4 else None)(lambda: BatchRenorm())


class FreezeSchedule(nn.Module):
    """Layer freezing by toggling requires_grad_ on a submodule inside forward from an int
    attribute (frozen on some calls), a backward, the grads of frozen parameters staying None."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.calls = 0

    def forward(self, x):
        freeze = self.calls % 2 == 0
        self.calls += 1
        self.enc.requires_grad_(not freeze)
        for p in self.parameters():
            p.grad = None
        loss = self.head(torch.relu(self.enc(x))).pow(2).mean()
        loss.backward()
        return loss.detach(), self.enc.weight.grad, self.head.weight.grad


case("requires_grad_toggle_freeze_inside_forward", lambda: (R(3, 4),), train=True, ncalls=4)(lambda: FreezeSchedule())


class HookedGrad(nn.Module):
    """Tensor hooks inside forward: register_hook scaling an intermediate's gradient, retain_grad
    on another intermediate whose .grad is returned, a backward with a gradient argument."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 5)
        self.b = nn.Linear(5, 2)

    def forward(self, x, gout):
        self.zero_grad()
        h = torch.tanh(self.a(x))
        h.register_hook(lambda g: g * 0.5)
        h.retain_grad()
        y = self.b(h)
        y.backward(gout)
        return y.detach(), h.grad, self.a.weight.grad


case("tensor_register_hook_retain_grad_backward_arg", lambda: (R(4, 3), R(4, 2)), train=True)(lambda: HookedGrad())


class SymmetricParam(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class ParametrizedSym(nn.Module):
    """A custom parametrization (symmetric matrices from the upper triangle) registered with
    torch.nn.utils.parametrize, with cached() around two uses, trained by backward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        torch.nn.utils.parametrize.register_parametrization(self.lin, "weight", SymmetricParam())

    def forward(self, x):
        with torch.nn.utils.parametrize.cached():
            y = self.lin(x) + self.lin(x.flip(0))
        loss = y.pow(2).sum()
        loss.backward()
        return y.detach(), self.lin.parametrizations.weight.original.grad, self.lin.weight


case("parametrize_symmetric_cached_backward", lambda: (R(3, 4),), train=True)(lambda: ParametrizedSym())


class NoGradDecorated(nn.Module):
    """Methods decorated by @torch.no_grad() and @torch.inference_mode(False)-free helpers: a
    target computed in a decorated method used in a loss, a grad-enabled part trained."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)
        self.target = nn.Linear(4, 4)

    @torch.no_grad()
    def targets(self, x):
        return self.target(x).softmax(-1)

    def forward(self, x):
        t = self.targets(x)
        loss = -(t * self.net(x).log_softmax(-1)).sum(-1).mean()
        g = torch.autograd.grad(loss, self.net.weight)[0]
        return loss, t.requires_grad, g


case("no_grad_decorated_method_target", lambda: (R(5, 4),))(lambda: NoGradDecorated())


# ========================================================================= stride tricks / layouts
@fn_case("as_strided_overlapping_windows", lambda i=0: (R(2, 12 + i),))
def as_strided_overlapping_windows(x):
    """Overlapping frames by as_strided (read-only, stride smaller than the frame), compared with
    unfold; an as_strided with storage_offset; means of the frames."""
    b, n = x.shape
    frame, hop = 4, 2
    nf = (n - frame) // hop + 1
    xc = x.contiguous()
    fr = xc.as_strided((b, nf, frame), (xc.stride(0), hop, 1))
    off = xc.as_strided((b, nf - 1, frame), (xc.stride(0), hop, 1), storage_offset=1)
    return fr.mean(-1), fr - x.unfold(1, frame, hop), off.sum(-1)


class Im2ColConv(nn.Module):
    """A convolution by im2col: F.unfold, a matmul with the flattened weight, fold back by view,
    compared with conv2d on a channels_last input; F.fold of the columns (overlap-add)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, stride=2)

    def forward(self, x):
        cols = F.unfold(x, 3, padding=1, stride=2)
        h = (x.shape[2] + 2 - 3) // 2 + 1
        w = (x.shape[3] + 2 - 3) // 2 + 1
        y = (self.conv.weight.view(4, -1) @ cols + self.conv.bias[:, None]).view(x.shape[0], 4, h, w)
        folded = F.fold(cols, x.shape[2:], 3, padding=1, stride=2)
        return y, self.conv(x), folded


case("im2col_unfold_matmul_vs_conv_channels_last",
     lambda i=0: (R(2, 3, 7 + i, 6).contiguous(memory_format=torch.channels_last),))(lambda: Im2ColConv())


class ZeroBatchModel(nn.Module):
    """A small MLP with batch norm in eval and a softmax head called with batch 4, then batch 0
    (empty), then 2; mean over an empty batch gives NaN, sum 0, amax raises (guarded)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 2))

    def forward(self, x):
        y = self.net(x).softmax(-1)
        mx = y.amax(0) if y.shape[0] > 0 else torch.zeros(2)
        return y, y.mean(0), y.sum(0), mx, y.shape[0]


case("zero_batch_between_calls_eval_bn", lambda i=0: (R([4, 0, 2][i], 3),))(lambda: ZeroBatchModel().eval())


@fn_case("transposed_expanded_inputs_matmul_norm", lambda i=0: (R(5, 3).t(), R(1, 5).expand(4, 5), R(4, 6, 5)[:, ::2]))
def transposed_expanded_inputs_matmul_norm(wt, bias, x):
    """A transposed weight (non-contiguous), an expanded bias (stride 0), a strided slice of the
    input: linear, layer_norm, a softmax over the non-contiguous dim, in-place add on a clone."""
    y = x @ wt.T
    y2 = F.layer_norm(x + bias[:, None], (5,))
    z = x.clone()
    z.add_(bias[:, None])
    return y, y2, x.softmax(1), z, (x.transpose(1, 2) @ x)


@fn_case("zero_dim_parameters_and_python_scalars", lambda i=0: (R(4), torch.tensor(2.0 + i), torch.tensor(3), 0.5 * (i + 1)))
def zero_dim_parameters_and_python_scalars(x, t, n, f):
    """0-d float and int tensors mixed with 1-d tensors and Python floats: division by a 0-d,
    0-d int to float promotion, .item() in arithmetic, x ** n with an int 0-d exponent."""
    return x / t, x * n, x ** n, x + n.item() * f, (t * n).dtype, torch.where(x > 0, t, n), t.expand(3)


# ========================================================================= numerically hard
@fn_case("log1mexp_logaddexp_stable", lambda i=0: (-torch.rand(8) * 10 ** (i - 1) - 1e-7, R(8) * 50, R(8) * 50))
def log1mexp_logaddexp_stable(a, x, y):
    """log(1 - exp(a)) for a < 0 the stable way (log(-expm1) near 0, log1p(-exp) far), logaddexp
    and logaddexp2 of large values, softplus by logaddexp(x, 0), log_sigmoid."""
    l1 = torch.where(a > -math.log(2), torch.log(-torch.expm1(a)), torch.log1p(-torch.exp(a)))
    return l1, torch.logaddexp(x, y), torch.logaddexp2(x, y), torch.logaddexp(x, torch.zeros(())), F.logsigmoid(x)


@fn_case("signed_zeros_atan2_copysign_reciprocal", lambda: (torch.tensor([0.0, -0.0, 1.0, -1.0, 0.0, -0.0]), torch.tensor([-0.0, 0.0, -0.0, 0.0, 0.0, -0.0])))
def signed_zeros_atan2_copysign_reciprocal(a, b):
    """-0.0 through atan2, copysign, sign / signbit, reciprocal (-inf), division, multiplication
    by a negative, abs, where(x == 0) (true for -0.0), clamp(min=0) of -0.0, neg, sqrt(-0.0)."""
    return torch.atan2(a, b), torch.copysign(torch.ones(6), b), torch.signbit(a), 1 / a, \
        a * -1, a.abs(), torch.where(a == 0, 5.0, a), a.clamp(min=0), torch.signbit(a.clamp(min=0)), \
        torch.sqrt(a), torch.signbit(-a), torch.signbit(a * b), torch.signbit(a + b)


@fn_case("norm_overflow_large_magnitudes", lambda i=0: (torch.tensor([3e19, 4e19, 1.0]) * (10.0 ** -i), torch.tensor([1e-30, 2e-30, 3e-25])))
def norm_overflow_large_magnitudes(big, tiny):
    """Norms of values whose squares overflow or underflow float32: the naive sqrt(sum x^2),
    torch.linalg.vector_norm, F.normalize, hypot, and the scaled norm (x / max).norm() * max."""
    naive = big.pow(2).sum().sqrt()
    m = big.abs().max()
    return naive, torch.linalg.vector_norm(big), F.normalize(big, dim=0), torch.hypot(big[0], big[1]), \
        (big / m).norm() * m, tiny.pow(2).sum().sqrt(), torch.linalg.vector_norm(tiny)


@fn_case("nan_aware_reductions_nanmean_nanmedian", lambda i=0: (torch.where(torch.rand(4, 6) < 0.3, torch.tensor(float("nan")), R(4, 6)),))
def nan_aware_reductions_nanmean_nanmedian(x):
    """NaN-aware reductions over rows with missing values: nansum, nanmean, nanmedian with
    indices, nanquantile, a manual nanmean by where / count, nan_to_num with posinf / neginf."""
    valid = ~x.isnan()
    manual = torch.where(valid, x, 0).sum(1) / valid.sum(1)
    med, idx = x.nanmedian(1)
    return x.nansum(1), x.nanmean(1), med, idx, torch.nanquantile(x, 0.5, dim=1), manual, \
        torch.nan_to_num(x / 0.0, nan=0.0, posinf=1e4, neginf=-1e4)


@fn_case("cross_entropy_inf_logits_label_smoothing", lambda i=0: (R(4, 5).index_fill(1, torch.tensor([0]), float("-inf")), torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, -100])))
def cross_entropy_inf_logits_label_smoothing(logits, y, y_ign):
    """Cross entropy with a column of -inf logits (a banned class): plain CE is finite, label
    smoothing makes it inf (or NaN) as eager does; ignore_index; NLL of log_softmax with -inf."""
    return F.cross_entropy(logits, y), F.cross_entropy(logits, y, label_smoothing=0.1), \
        F.cross_entropy(logits, y_ign, reduction="none"), F.nll_loss(logits.log_softmax(-1), y), \
        logits.softmax(-1)


@fn_case("exp_log_subnormal_and_huge_float64_mix", lambda i=0: (torch.tensor([-88.0, -100.0, -104.0, 88.7, 89.0, 0.0]), torch.tensor([1e-310, 1e308, -1e-320], dtype=torch.float64)))
def exp_log_subnormal_and_huge_float64_mix(x, d):
    """exp near float32's over / underflow (subnormal results, inf), log of subnormal float64,
    float64 * float32 promotion, float64 -> float32 casts that overflow to inf / flush."""
    return torch.exp(x), torch.log(d.abs()), d * x[:3], d.float(), (d * 10).float(), torch.exp(x).log()


@fn_case("rk4_neural_ode_fixed_steps", lambda i=0: (R(3, 2), R(2, 2) * 0.5, 0.1 * (i + 1)))
def rk4_neural_ode_fixed_steps(y0, A, dt):
    """A fixed-step RK4 integrator in a Python loop with a Python float step size, the vector
    field tanh(y A) + sin(t), the time as a Python float accumulated."""
    def f(t, y):
        return torch.tanh(y @ A) + math.sin(t)

    y, t = y0, 0.0
    traj = [y]
    for _ in range(5):
        k1 = f(t, y)
        k2 = f(t + dt / 2, y + dt / 2 * k1)
        k3 = f(t + dt / 2, y + dt / 2 * k2)
        k4 = f(t + dt, y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += dt
        traj.append(y)
    return torch.stack(traj), t


@fn_case("cox_partial_likelihood_reverse_cumsum", lambda: (R(10), torch.rand(10) * 5, torch.rand(10) < 0.7))
def cox_partial_likelihood_reverse_cumsum(risk, time, event):
    """Cox proportional hazards loss: samples sorted by time descending, the risk set's
    log-sum-exp by logcumsumexp, events masked, mean over events (float of a bool sum)."""
    order = torch.argsort(time, descending=True)
    r, e = risk[order], event[order].float()
    lse = torch.logcumsumexp(r, 0)
    return -((r - lse) * e).sum() / e.sum().clamp(min=1), lse


@fn_case("quantile_pinball_loss_multi_quantiles", lambda: (R(6, 3), R(6)))
def quantile_pinball_loss_multi_quantiles(pred, y):
    """Pinball loss for several quantiles: a quantile buffer broadcast, max(q e, (q - 1) e), crossing
    penalty by relu of sorted differences, torch.quantile of the residuals with interpolation modes."""
    q = torch.tensor([0.1, 0.5, 0.9])
    e = y[:, None] - pred
    loss = torch.max(q * e, (q - 1) * e).mean()
    cross = F.relu(pred[:, :-1] - pred[:, 1:]).mean()
    return loss, cross, torch.quantile(e, 0.3, dim=0, interpolation="nearest"), \
        torch.quantile(e, 0.3, dim=0, interpolation="midpoint"), torch.quantile(e, 0.3, dim=0, interpolation="lower")


class VerletParticles(nn.Module):
    """Velocity Verlet for a small particle system: pairwise forces from cdist with the diagonal
    masked (eye), positions and velocities updated in place in a loop, energy drift tracked."""

    def __init__(self):
        super().__init__()
        self.k = 0.5

    def forward(self, x, v):
        def force(p):
            d = p[:, None] - p[None]
            r = torch.cdist(p, p) + torch.eye(p.shape[0])
            return -(self.k * d / r[..., None] ** 3).sum(1)

        a = force(x)
        for _ in range(4):
            x.add_(v * 0.01 + 0.5 * a * 1e-4)
            a2 = force(x)
            v.add_(0.5 * (a + a2) * 0.01)
            a = a2
        return x, v, 0.5 * (v ** 2).sum()


case("verlet_cdist_forces_inplace_inputs", lambda: (R(5, 2) * 3, R(5, 2) * 0.1))(lambda: VerletParticles())


@fn_case("complex_free_fft_conv_and_irfft_lengths", lambda i=0: (R(2, 10 + i), R(2, 4)))
def complex_free_fft_conv_and_irfft_lengths(x, k):
    """Long convolution by rfft / irfft with an explicit n (odd lengths), compared with conv1d
    on a flipped kernel, and torch.fft.fftfreq / rfftfreq buffers."""
    n = x.shape[-1] + k.shape[-1] - 1
    y = torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(k, n=n), n=n)
    ref = F.conv1d(F.pad(x, (k.shape[-1] - 1, k.shape[-1] - 1))[:, None], k.flip(-1)[:, None], groups=1)
    return y, ref, torch.fft.rfftfreq(n), torch.fft.fftfreq(n, d=0.5)


@fn_case("gather_scatter_reduce_mean_prod_include_self", lambda i=0: (R(6, 3), I(0, 4, 6), R(4, 3)))
def gather_scatter_reduce_mean_prod_include_self(src, idx, base):
    """scatter_reduce with 'mean' and 'prod', include_self True and False, an index_reduce
    'amin', and scatter_add on a 1-d index expanded over columns."""
    ix = idx[:, None].expand(-1, 3)
    return base.scatter_reduce(0, ix, src, "mean"), base.scatter_reduce(0, ix, src, "mean", include_self=False), \
        base.scatter_reduce(0, ix, src, "prod", include_self=False), base.index_reduce(0, idx, src, "amin"), \
        torch.zeros(4, 3).scatter_add(0, ix, src)



# ========================================================================= process-wide modes
class InferenceSwitch(nn.Module):
    """A script-style forward that ends with torch.set_grad_enabled(False) called as a function
    (the mode stays off after the call, as eager leaves it), the loss computed before it
    requiring grad; the runner compares the process state each side leaves."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        loss = y.pow(2).mean()
        torch.set_grad_enabled(False)
        return loss, y * 2


case("set_grad_enabled_false_left_switched", lambda: (R(5, 4),))(lambda: InferenceSwitch())


class AutocastDataDependent(nn.Module):
    """An autocast(bf16) region holding data-dependent ops (nonzero of a threshold, bincount),
    the weights updated in place between calls under no_grad (a stale cast cache of a weight
    would show), the region's outputs bf16."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.lin(x)
            keep = (h.float() > 0).nonzero()
            cnt = torch.bincount(y, minlength=4)
            h2 = self.lin(h)
        with torch.no_grad():
            self.lin.weight.mul_(0.9)
        return h, h2, keep, cnt


case("autocast_region_data_dependent_weight_update", lambda i=0: (R(4, 6), I(0, 4, 5 + i)))(lambda: AutocastDataDependent())


class NoGradNonzeroTrainStep(nn.Module):
    """A training step whose no_grad block selects hard examples by nonzero (a data-dependent
    size), the loss on them backpropagated after the block, SGD in place."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(5, 3)

    def forward(self, x, y):
        self.net.zero_grad()
        with torch.no_grad():
            p = self.net(x).softmax(-1)
            hard = (p.gather(1, y[:, None]).squeeze(1) < 0.5).nonzero().squeeze(1)
            counts = torch.bincount(y[hard], minlength=3)
        loss = F.cross_entropy(self.net(x[hard]), y[hard]) if hard.numel() else self.net(x).sum() * 0
        loss.backward()
        with torch.no_grad():
            for q in self.net.parameters():
                q.sub_(0.1 * q.grad)
        return loss.detach(), hard, counts


case("no_grad_hard_example_nonzero_train_step", lambda: (R(8, 5), I(0, 3, 8)), train=True, ncalls=4)(lambda: NoGradNonzeroTrainStep())


# =============================================================================== runner
# bench/modules5.py's runner (the same case records, comparison and categories) over this corpus's CASES.
if __name__ == "__main__":
    import modules5
    modules5.main(CASES, __file__, __doc__)
