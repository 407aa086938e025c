"""bench/modules16.py's extra part (same runner, its CASES appended there): CTC prefix beam search
over Python dicts with log-sum-exp in math, per-image box clipping and small-box removal,
classifier guidance by autograd.grad inside a no_grad sampler, a radius graph made undirected and
coalesced by unique(dim=1), prioritized replay in a Python sum tree, an early-stopping helper
holding deepcopied state dicts, feature distillation through forward hooks writing a dict,
co-teaching's small-loss exchange with a forget-rate schedule, Barlow Twins' off-diagonal by the
flatten / view trick, n-step returns from a deque window, top-k sampling over a preallocated KV
cache with an attention mask grown from Python positions.
"""
from __future__ import annotations

import collections
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _lse(*xs):
    m = max(xs)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in xs))


@fn_case("ctc_prefix_beam_search_python_dicts_math_logsumexp", lambda i=0: (R(7 + i, 4).log_softmax(-1),))
def prefix_beam(lp):
    """CTC prefix beam search as ASR tutorials write it: the per-frame log-probs as nested Python
    lists (.tolist()), beams a dict prefix -> (p_blank, p_nonblank), merged with math log-sum-exp,
    pruned to 3 by sorted(); the best prefix and its score returned as a tensor."""
    beams = {(): (0.0, -math.inf)}
    for frame in lp.tolist():
        nxt = collections.defaultdict(lambda: (-math.inf, -math.inf))
        for prefix, (pb, pnb) in beams.items():
            for c, p in enumerate(frame):
                if c == 0:
                    b, nb = nxt[prefix]
                    nxt[prefix] = (_lse(b, pb + p, pnb + p), nb)
                    continue
                new = prefix + (c,)
                b, nb = nxt[new]
                if prefix and prefix[-1] == c:
                    nxt[new] = (b, _lse(nb, pb + p))
                    b2, nb2 = nxt[prefix]
                    nxt[prefix] = (b2, _lse(nb2, pnb + p))
                else:
                    nxt[new] = (b, _lse(nb, pb + p, pnb + p))
        beams = dict(sorted(nxt.items(), key=lambda kv: -_lse(*kv[1]))[:3])
    best, (pb, pnb) = next(iter(beams.items()))
    return torch.tensor(best, dtype=torch.long), torch.tensor(_lse(pb, pnb))


@fn_case("clip_boxes_per_image_sizes_remove_small_split_by_counts",
         lambda i=0: (R(7, 4) * 6 + 3, torch.tensor([[8, 10], [6, 5]]), [4, 3]))
def clip_boxes(boxes, sizes, counts):
    """Boxes of a batch concatenated with per-image counts (a Python list): split by the counts,
    each image's boxes sorted to (x1 <= x2), clamped to its own (h, w) from a size tensor, boxes
    smaller than 1 pixel removed; the kept counts as a tensor."""
    outs = []
    for b, (h, w) in zip(boxes.split(counts), sizes.tolist()):
        x1, x2 = torch.minimum(b[:, 0], b[:, 2]), torch.maximum(b[:, 0], b[:, 2])
        y1, y2 = torch.minimum(b[:, 1], b[:, 3]), torch.maximum(b[:, 1], b[:, 3])
        b = torch.stack([x1.clamp(0, w), y1.clamp(0, h), x2.clamp(0, w), y2.clamp(0, h)], 1)
        keep = ((b[:, 2] - b[:, 0]) >= 1) & ((b[:, 3] - b[:, 1]) >= 1)
        outs.append(b[keep])
    return outs, torch.tensor([len(o) for o in outs])


class GuidedSampler(nn.Module):
    """Classifier guidance (Dhariwal & Nichol): the sampler loop under torch.no_grad(), the
    classifier's log p(y | x_t) gradient taken inside torch.enable_grad() on a detached leaf copy
    by autograd.grad, the mean shifted by scale * variance * grad."""

    def __init__(self):
        super().__init__()
        self.eps = nn.Sequential(nn.Linear(5, 12), nn.SiLU(), nn.Linear(12, 4))
        self.clf = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        self.register_buffer("betas", torch.linspace(0.01, 0.2, 5))

    def forward(self, x, y, scale: float = 2.0):
        ac = torch.cumprod(1 - self.betas, 0)
        with torch.no_grad():
            for t in reversed(range(5)):
                tt = torch.full((x.shape[0], 1), t / 5)
                eps = self.eps(torch.cat([x, tt], 1))
                mean = (x - self.betas[t] / (1 - ac[t]).sqrt() * eps) / (1 - self.betas[t]).sqrt()
                with torch.enable_grad():
                    xin = x.detach().requires_grad_(True)
                    logp = self.clf(torch.cat([xin, tt], 1)).log_softmax(-1)
                    (g,) = torch.autograd.grad(logp.gather(1, y[:, None]).sum(), xin)
                x = mean + scale * self.betas[t] * g
        return x, x.requires_grad


case("classifier_guidance_autograd_grad_in_enable_grad_inside_no_grad", lambda: (R(3, 4), I(0, 3, 3)))(
    lambda: GuidedSampler())


@fn_case("radius_graph_cdist_nonzero_to_undirected_unique_dim1", lambda i=0: (U(7 + i, 2) * 3,))
def radius_graph(pos):
    """A radius graph: pairs within r by cdist <= r without self loops, edge_index from nonzero().t(),
    made undirected by cat with the flipped pairs and coalesced by unique(dim=1) (sorted), the
    degree by bincount, edge lengths."""
    d = torch.cdist(pos, pos)
    adj = (d <= 1.2) & ~torch.eye(pos.shape[0], dtype=torch.bool)
    ei = adj.triu(1).nonzero().t()
    ei = torch.cat([ei, ei.flip(0)], 1)
    ei = torch.unique(ei, dim=1)
    deg = torch.bincount(ei[0], minlength=pos.shape[0])
    return ei, deg, (pos[ei[0]] - pos[ei[1]]).norm(dim=1)


class SumTree:
    """The prioritized-replay sum tree in a Python list of floats (capacity a power of two):
    update walks to the root, find descends by a sampled mass."""

    def __init__(self, cap=8):
        self.cap, self.tree, self.ptr, self.n = cap, [0.0] * (2 * cap), 0, 0

    def update(self, i, p):
        j = i + self.cap
        self.tree[j] = p
        while j > 1:
            j //= 2
            self.tree[j] = self.tree[2 * j] + self.tree[2 * j + 1]

    def add(self, p):
        self.update(self.ptr, p)
        self.ptr, self.n = (self.ptr + 1) % self.cap, min(self.n + 1, self.cap)

    def find(self, mass):
        j = 1
        while j < self.cap:
            j = 2 * j if mass <= self.tree[2 * j] else (mass := mass - self.tree[2 * j], 2 * j + 1)[1]
        return j - self.cap


class PERLearner(nn.Module):
    """A learner with prioritized replay: transitions stored in a tensor buffer attribute, the
    priorities in a SumTree, 3 samples by stratified masses from torch.rand, importance weights,
    the TD errors written back as priorities via .tolist()."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(3, 2)
        self.tree = SumTree()
        self.data = torch.zeros(8, 5)
        self.opt = torch.optim.SGD(self.q.parameters(), lr=0.1)

    def forward(self, s, a, r):
        for k in range(s.shape[0]):
            self.data[self.tree.ptr] = torch.cat([s[k], a[k:k + 1].float(), r[k:k + 1]])
            self.tree.add(max(self.tree.tree[self.tree.cap:] + [1.0]))
        total = self.tree.tree[1]
        seg = total / 3
        idx = [self.tree.find(seg * (j + u)) for j, u in enumerate(torch.rand(3).tolist())]
        idx = [min(j, self.tree.n - 1) for j in idx]
        batch = self.data[idx]
        pr = torch.tensor([self.tree.tree[j + self.tree.cap] for j in idx]) / total
        w = (self.tree.n * pr) ** -0.4
        w = w / w.max()
        q = self.q(batch[:, :3]).gather(1, batch[:, 3:4].long())[:, 0]
        td = batch[:, 4] - q
        loss = (w * td ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        for j, e in zip(idx, td.detach().abs().tolist()):
            self.tree.update(j, e + 1e-3)
        return loss.detach(), idx, self.data.clone()


case("prioritized_replay_python_sum_tree_tolist_priorities",
     lambda: (R(3, 3), I(0, 2, 3), R(3)), train=True, ncalls=4, context=grad_ctx)(lambda: PERLearner())


class EarlyStopping:
    def __init__(self, patience=1):
        self.best, self.bad, self.patience, self.state = float("inf"), 0, patience, None

    def __call__(self, val, model):
        if val < self.best - 1e-4:
            self.best, self.bad = val, 0
            self.state = copy.deepcopy(model.state_dict())
            return False
        self.bad += 1
        return self.bad > self.patience


class TrainWithES(nn.Module):
    """A train / validate loop of 4 epochs in one call with an early-stopping helper (a plain
    class) deepcopying the best state_dict, a `break` when patience runs out, the best weights
    loaded back with load_state_dict."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.5)

    def forward(self, x, y, xv, yv):
        es = EarlyStopping()
        hist = []
        for _ in range(4):
            loss = F.mse_loss(self.net(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            with torch.no_grad():
                v = F.mse_loss(self.net(xv), yv).item()
            hist.append(v)
            if es(v, self.net):
                break
        self.net.load_state_dict(es.state)
        return hist, es.best


case("early_stopping_class_deepcopy_best_state_break_reload", lambda: (R(6, 4), R(6, 1), R(4, 4), R(4, 1)),
     train=True, context=grad_ctx)(lambda: TrainWithES())


class HintDistill(nn.Module):
    """Feature distillation (FitNets): forward hooks (bound methods, so a deepcopy rebinds them)
    registered in __init__ on a teacher and a student layer write their outputs into a dict; the hint loss through a 1x1 regressor, the KD
    loss with temperature; the student stepped, the teacher frozen in eval."""

    def __init__(self):
        super().__init__()
        self.teacher = nn.Sequential(nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, 3)).eval().requires_grad_(False)
        self.student = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))
        self.reg = nn.Linear(6, 12)
        self.feats = {}
        self.teacher[1].register_forward_hook(self._save_t)
        self.student[1].register_forward_hook(self._save_s)
        self.opt = torch.optim.Adam(list(self.student.parameters()) + list(self.reg.parameters()), lr=1e-2)

    def _save_t(self, m, i, o):
        self.feats["t"] = o

    def _save_s(self, m, i, o):
        self.feats["s"] = o

    def forward(self, x, T: float = 3.0):
        with torch.no_grad():
            tl = self.teacher(x)
        sl = self.student(x)
        hint = F.mse_loss(self.reg(self.feats["s"]), self.feats["t"])
        kd = F.kl_div((sl / T).log_softmax(-1), (tl / T).softmax(-1), reduction="batchmean") * T * T
        loss = hint + kd
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), sorted(self.feats)


case("fitnets_hint_forward_hooks_write_dict_kd_temperature", lambda: (R(6, 5),), train=True, ncalls=3,
     context=grad_ctx)(lambda: HintDistill())


class CoTeaching(nn.Module):
    """Co-teaching for noisy labels: two nets, per-sample losses, each net keeps the small-loss
    fraction (1 - forget rate from a schedule by a Python epoch counter) ranked by argsort, and is
    updated on the samples its peer selected."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)
        self.opt = torch.optim.SGD(list(self.a.parameters()) + list(self.b.parameters()), lr=0.1)
        self.epoch = 0

    def forward(self, x, y):
        rate = min(0.4, 0.4 * self.epoch / 2)
        la = F.cross_entropy(self.a(x), y, reduction="none")
        lb = F.cross_entropy(self.b(x), y, reduction="none")
        n_keep = int(round((1 - rate) * len(y)))
        ia, ib = la.argsort()[:n_keep], lb.argsort()[:n_keep]
        loss = F.cross_entropy(self.a(x[ib]), y[ib]) + F.cross_entropy(self.b(x[ia]), y[ia])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.epoch += 1
        return loss.detach(), n_keep, ia


case("co_teaching_small_loss_argsort_exchange_forget_schedule", lambda: (R(8, 4), I(0, 3, 8)), train=True, ncalls=4,
     context=grad_ctx)(lambda: CoTeaching())


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class BarlowTwins(nn.Module):
    """Barlow Twins: two views through a projector with BatchNorm1d(affine=False) on the outputs,
    the cross-correlation matrix divided by the batch, on-diagonal (1 - c)^2 and the off-diagonal
    by the reference code's flatten()[:-1].view(n - 1, n + 1)[:, 1:] trick; a LARS-free SGD step."""

    def __init__(self, d=6):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, d))
        self.bn = nn.BatchNorm1d(d, affine=False)
        self.opt = torch.optim.SGD(self.proj.parameters(), lr=0.05)

    def forward(self, y1, y2):
        z1, z2 = self.proj(y1), self.proj(y2)
        c = self.bn(z1).T @ self.bn(z2) / y1.shape[0]
        on = torch.diagonal(c).add_(-1).pow_(2).sum()
        off = off_diagonal(c).pow_(2).sum()
        loss = on + 0.005 * off
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), c.detach()


case("barlow_twins_off_diagonal_flatten_view_trick_inplace_pow", lambda: (R(6, 5), R(6, 5)), train=True,
     context=grad_ctx)(lambda: BarlowTwins())


class NStepDeque(nn.Module):
    """n-step returns from a sliding deque(maxlen=n) of (reward, done) pairs kept across calls:
    once full, R = sum gamma^k r_k cut at the first done, the bootstrap value from the critic
    multiplied by gamma^n unless a done was seen."""

    def __init__(self, n=3):
        super().__init__()
        self.v = nn.Linear(2, 1)
        self.win = collections.deque(maxlen=n)
        self.n = n

    def forward(self, r, done: bool, s_next):
        self.win.append((r, done))
        if len(self.win) < self.n:
            return None
        R, g, ended = torch.zeros(()), 1.0, False
        for rk, dk in self.win:
            R = R + g * rk
            g *= 0.9
            if dk:
                ended = True
                break
        if not ended:
            R = R + g * self.v(s_next)[0]
        return R


case("n_step_returns_deque_window_across_calls_done_cut", lambda i=0: (R(()), i == 3, R(2)), ncalls=6)(
    lambda: NStepDeque())


class PreallocKV(nn.Module):
    """gpt-fast-like decoding over a preallocated cache: k / v buffers of max length written at
    Python positions by slice assignment, the attention mask built from arange(max) < pos + 1,
    top-k sampling (kth value threshold) with the default generator; the cache reset per call."""

    def __init__(self, vocab=13, d=8, max_len=10):
        super().__init__()
        self.emb, self.qkv, self.out = nn.Embedding(vocab, d), nn.Linear(d, 3 * d), nn.Linear(d, vocab)
        self.register_buffer("k", torch.zeros(1, max_len, d))
        self.register_buffer("v", torch.zeros(1, max_len, d))
        self.max_len = max_len

    def forward(self, prompt, steps: int = 4):
        b = prompt.shape[0]
        self.k = torch.zeros(b, self.max_len, self.k.shape[-1])
        self.v = torch.zeros(b, self.max_len, self.v.shape[-1])
        toks = prompt
        pos = 0
        out = []
        for t in range(prompt.shape[1] + steps - 1):
            cur = toks[:, t] if t < prompt.shape[1] else out[-1]
            q, k, v = self.qkv(self.emb(cur)).chunk(3, -1)
            self.k[:, pos], self.v[:, pos] = k, v
            mask = torch.arange(self.max_len) < pos + 1
            att = (q[:, None] @ self.k.transpose(1, 2))[:, 0].masked_fill(~mask, float("-inf")).softmax(-1)
            logits = self.out((att[:, None] @ self.v)[:, 0])
            pos += 1
            if t >= prompt.shape[1] - 1:
                kth = logits.topk(3).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
                out.append(torch.multinomial(logits.softmax(-1), 1)[:, 0])
        return torch.stack(out, 1), pos


case("preallocated_kv_buffers_python_pos_mask_arange_topk_sampling", lambda: (I(0, 13, 2, 3),))(
    lambda: PreallocKV())
