"""bench/modules15.py's fifth part (same runner, its CASES appended there): Kaggle and paper
code for losses, heads and small generative / physical models: fastai's tabular model, ArcFace's
margin with its easy_margin / th / mm branches, hand-written label smoothing through scatter_
under no_grad, CutMix inside a training step (a box from Python ints), SimCLR's NT-Xent with a
filled diagonal, BERT's 80 / 10 / 10 MLM masking, WaveNet's gated dilated causal stack, EfficientNet's
MBConv with lukemelas' memory-efficient Swish Function and drop connect, the Lovasz hinge per
image, the Temporal Shift Module, a Set Transformer's PMA with a key mask, a fixed-step RK4
neural ODE counting evaluations, a hypernetwork's per-sample weights by bmm, FiLM, SwAV's
Sinkhorn-Knopp, a RealNVP coupling forward and inverse, a batched Kalman filter step, and an EMA
kept as a dict of shadow tensors read by torch.func.functional_call.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def _mlp(i=6, h=12, o=3):
    return nn.Sequential(nn.Linear(i, h), nn.LayerNorm(h), nn.GELU(), nn.Linear(h, o))


class TabularModel(nn.Module):
    """fastai's TabularModel: one embedding per categorical column (sizes by fastai's rule of
    thumb), concatenated by a list comprehension over columns, embedding dropout, the continuous
    columns through BatchNorm1d, a Linear / ReLU / BN / Dropout stack."""

    def __init__(self, cards=(5, 9, 3), n_cont=4):
        super().__init__()
        szs = [min(600, round(1.6 * c ** 0.56)) for c in cards]
        self.embeds = nn.ModuleList(nn.Embedding(c, s) for c, s in zip(cards, szs))
        self.emb_drop = nn.Dropout(0.1)
        self.bn_cont = nn.BatchNorm1d(n_cont)
        n = sum(szs) + n_cont
        self.layers = nn.Sequential(nn.Linear(n, 8), nn.ReLU(inplace=True), nn.BatchNorm1d(8), nn.Dropout(0.2),
                                    nn.Linear(8, 1))

    def forward(self, x_cat, x_cont):
        x = torch.cat([e(x_cat[:, i]) for i, e in enumerate(self.embeds)], 1)
        x = torch.cat([self.emb_drop(x), self.bn_cont(x_cont)], 1)
        return self.layers(x).squeeze(-1)


case("fastai_tabular_embeddings_per_column_bn_cont",
     lambda: (torch.stack([I(0, 5, 6), I(0, 9, 6), I(0, 3, 6)], 1), R(6, 4)), train=True, ncalls=4,
     between=lambda m, i: m.eval() if i == 3 else None)(lambda: TabularModel())


class ArcMargin(nn.Module):
    """ArcFace (the widely copied ArcMarginProduct): cos(theta + m) from sin by sqrt((1 - cos^2)
    .clamp), the th / mm fallback where theta + m > pi or easy_margin's where, a one-hot by
    scatter_, the scaled logits and CE."""

    def __init__(self, d=6, c=5, s=16.0, m=0.5, easy_margin=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c, d) * 0.1)
        self.s, self.easy_margin = s, easy_margin
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th, self.mm = math.cos(math.pi - m), math.sin(math.pi - m) * m

    def forward(self, x, label):
        cosine = F.linear(F.normalize(x), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        if self.easy_margin:
            phi = torch.where(cosine > 0, phi, cosine)
        else:
            phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size()).scatter_(1, label.view(-1, 1).long(), 1)
        out = (one_hot * phi + (1.0 - one_hot) * cosine) * self.s
        return out, F.cross_entropy(out, label)


case("arcface_margin_th_mm_easy_margin_flag", lambda: (R(7, 6), I(0, 5, 7)), train=True, ncalls=4,
     between=lambda m, i: setattr(m, "easy_margin", i >= 2))(lambda: ArcMargin())


class LabelSmoothingLoss(nn.Module):
    """The label smoothing loss of many repositories: true_dist built under no_grad by fill_ and
    scatter_ of the confidence, the padding column and padded rows zeroed by index_fill_."""

    def __init__(self, classes=6, smoothing=0.1, pad=0):
        super().__init__()
        self.conf, self.smooth, self.cls, self.pad = 1.0 - smoothing, smoothing, classes, pad

    def forward(self, pred, target):
        pred = pred.log_softmax(-1)
        with torch.no_grad():
            true = torch.zeros_like(pred)
            true.fill_(self.smooth / (self.cls - 2))
            true.scatter_(1, target.data.unsqueeze(1), self.conf)
            true[:, self.pad] = 0
            rows = torch.nonzero(target.data == self.pad)
            if rows.dim() > 0 and rows.numel() > 0:
                true.index_fill_(0, rows.squeeze(1), 0.0)
        return torch.sum(-true * pred, -1).mean(), true


case("label_smoothing_true_dist_scatter_index_fill_pad", lambda i=0: (R(8, 6), I(0 if i != 2 else 1, 6, 8)),
     ncalls=3)(lambda: LabelSmoothingLoss())


class CutMixStep(nn.Module):
    """CutMix in a training step: lam from a Beta draw (torch.distributions, global RNG), a box from
    Python ints of sqrt(1 - lam), the images written in place by a permuted batch's slice, lam
    corrected by the box area, the mixed loss, an SGD step."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(4, 3))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def forward(self, x, y):
        lam = float(torch.distributions.Beta(1.0, 1.0).sample())
        idx = torch.randperm(x.shape[0])
        h, w = x.shape[2:]
        cut = math.sqrt(1.0 - lam)
        ch, cw = int(h * cut), int(w * cut)
        cy, cx = int(torch.randint(h, (1,))), int(torch.randint(w, (1,)))
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
        x = x.clone()
        x[:, :, y0:y1, x0:x1] = x[idx, :, y0:y1, x0:x1]
        lam = 1 - (y1 - y0) * (x1 - x0) / (h * w)
        out = self.net(x)
        loss = lam * F.cross_entropy(out, y) + (1 - lam) * F.cross_entropy(out, y[idx])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), lam


case("cutmix_beta_box_python_ints_sgd_step", lambda: (R(4, 3, 8, 8), I(0, 3, 4)), train=True, ncalls=4,
     context=grad_ctx)(lambda: CutMixStep())


@fn_case("simclr_nt_xent_fill_diagonal_labels", lambda: (R(4, 8), R(4, 8)))
def nt_xent(z1, z2, t=0.5):
    """SimCLR's NT-Xent: both views normalised and concatenated, similarities / t, the diagonal
    filled with -inf (fill_diagonal_ on the similarity matrix), labels by arange shifted by n."""
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.t() / t
    sim.fill_diagonal_(float("-inf"))
    labels = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    acc = (sim.argmax(1) == labels).float().mean()
    return F.cross_entropy(sim, labels), acc


@fn_case("bert_mlm_masking_80_10_10", lambda: (I(5, 30, 3, 10), torch.tensor([10, 7, 4])))
def mlm_mask(ids, lengths, vocab=30, mask_id=4, special=(0, 1, 2, 3)):
    """BERT's DataCollatorForLanguageModeling: a probability matrix of 0.15, special tokens and
    padding (by lengths) excluded, bernoulli, labels -100 where not masked, 80% replaced by [MASK],
    half of the rest by random words (torch.randint), the others kept."""
    ids = ids.clone()
    ids[:, 0] = 1
    pad = torch.arange(ids.shape[1])[None] >= lengths[:, None]
    ids[pad] = 0
    labels = ids.clone()
    prob = torch.full(labels.shape, 0.15)
    special_mask = torch.isin(ids, torch.tensor(special))
    prob.masked_fill_(special_mask, 0.0)
    masked = torch.bernoulli(prob).bool()
    labels[~masked] = -100
    replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked
    ids[replaced] = mask_id
    rand = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked & ~replaced
    ids[rand] = torch.randint(vocab, labels.shape, dtype=torch.long)[rand]
    return ids, labels


class WaveNet(nn.Module):
    """WaveNet's residual stack: causal dilated convs by left padding with F.pad, gated tanh *
    sigmoid, 1x1 residual and skip convs, skips summed by a Python sum over a list, the receptive
    field computed from the dilations."""

    def __init__(self, c=4, dilations=(1, 2, 4, 8)):
        super().__init__()
        self.dil = dilations
        self.filt = nn.ModuleList(nn.Conv1d(c, c, 2, dilation=d) for d in dilations)
        self.gate = nn.ModuleList(nn.Conv1d(c, c, 2, dilation=d) for d in dilations)
        self.res = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in dilations)
        self.skip = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in dilations)
        self.rf = sum(dilations) + 1

    def forward(self, x):
        skips = []
        for d, f, g, r, s in zip(self.dil, self.filt, self.gate, self.res, self.skip):
            xp = F.pad(x, (d, 0))
            z = torch.tanh(f(xp)) * torch.sigmoid(g(xp))
            skips.append(s(z))
            x = x + r(z)
        out = F.relu(sum(skips))
        return out[..., self.rf - 1:], out.shape[-1] - self.rf + 1


case("wavenet_gated_dilated_causal_pad_skips", lambda i=0: (R(2, 4, 20 + 5 * i),))(lambda: WaveNet())


class SwishImplementation(torch.autograd.Function):
    """lukemelas' EfficientNet MemoryEfficientSwish."""

    @staticmethod
    def forward(ctx, i):
        result = i * torch.sigmoid(i)
        ctx.save_for_backward(i)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        i = ctx.saved_tensors[0]
        s = torch.sigmoid(i)
        return grad_output * (s * (1 + i * (1 - s)))


def drop_connect(inputs, p, training):
    if not training:
        return inputs
    keep = 1 - p
    random_tensor = keep + torch.rand([inputs.shape[0], 1, 1, 1], dtype=inputs.dtype)
    return inputs / keep * torch.floor(random_tensor)


class MBConv(nn.Module):
    """EfficientNet's MBConv: expand, depthwise with 'same' padding computed from the input size
    (Conv2dDynamicSamePadding), squeeze-excite, project, drop connect with the residual only when
    strides are 1 and channels match; the memory-efficient Swish Function; a loss's grads."""

    def __init__(self, c=4, e=2, k=3, stride=1):
        super().__init__()
        self.expand = nn.Conv2d(c, c * e, 1, bias=False)
        self.bn0 = nn.BatchNorm2d(c * e, momentum=0.01, eps=1e-3)
        self.dw = nn.Conv2d(c * e, c * e, k, stride=stride, groups=c * e, bias=False)
        self.bn1 = nn.BatchNorm2d(c * e, momentum=0.01, eps=1e-3)
        self.se_r, self.se_e = nn.Conv2d(c * e, 2, 1), nn.Conv2d(2, c * e, 1)
        self.project = nn.Conv2d(c * e, c, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c, momentum=0.01, eps=1e-3)
        self.k, self.stride = k, stride

    def same_pad(self, x):
        ih, iw = x.size()[-2:]
        oh, ow = math.ceil(ih / self.stride), math.ceil(iw / self.stride)
        ph = max((oh - 1) * self.stride + self.k - ih, 0)
        pw = max((ow - 1) * self.stride + self.k - iw, 0)
        return F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])

    def forward(self, inputs):
        x = SwishImplementation.apply(self.bn0(self.expand(inputs)))
        x = SwishImplementation.apply(self.bn1(self.dw(self.same_pad(x))))
        s = self.se_e(SwishImplementation.apply(self.se_r(F.adaptive_avg_pool2d(x, 1))))
        x = self.bn2(self.project(torch.sigmoid(s) * x))
        if self.stride == 1 and x.shape == inputs.shape:
            x = drop_connect(x, 0.2, self.training) + inputs
        grads = torch.autograd.grad(x.square().mean(), [self.expand.weight, self.dw.weight])
        return x.detach(), grads


case("efficientnet_mbconv_same_pad_swish_function_drop_connect", lambda i=0: (R(3, 4, 7 + i, 6),), train=True,
     ncalls=4, context=grad_ctx)(lambda: MBConv())


@fn_case("lovasz_hinge_per_image_sorted_errors", lambda: (R(2, 5, 5), (U(2, 5, 5) > 0.5).float()))
def lovasz_hinge(logits, labels):
    """Berman et al.'s Lovasz hinge per image: errors 1 - logits * signs, sorted descending, the
    Jaccard gradient from cumsums of the sorted labels, dot with relu(errors), averaged."""
    losses = []
    for lg, lb in zip(logits, labels):
        lg, lb = lg.view(-1), lb.view(-1)
        signs = 2.0 * lb - 1.0
        errors = 1.0 - lg * signs
        errors_sorted, perm = torch.sort(errors, dim=0, descending=True)
        gt = lb[perm]
        gts = gt.sum()
        inter = gts - gt.cumsum(0)
        union = gts + (1 - gt).cumsum(0)
        jac = 1.0 - inter / union
        if len(gt) > 1:
            jac[1:] = jac[1:] - jac[:-1]
        losses.append(torch.dot(F.relu(errors_sorted), jac))
    return torch.stack(losses).mean()


class TemporalShift(nn.Module):
    """TSM's shift: (n*t, c, h, w) viewed as (n, t, c, h, w), a fold of channels shifted left in
    time, one right, the rest kept, written into zeros by slices; then a 2-d conv."""

    def __init__(self, t=4, div=4):
        super().__init__()
        self.t, self.div = t, div
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        nt, c, h, w = x.size()
        n = nt // self.t
        x5 = x.view(n, self.t, c, h, w)
        fold = c // self.div
        out = torch.zeros_like(x5)
        out[:, :-1, :fold] = x5[:, 1:, :fold]
        out[:, 1:, fold:2 * fold] = x5[:, :-1, fold:2 * fold]
        out[:, :, 2 * fold:] = x5[:, :, 2 * fold:]
        return self.conv(out.view(nt, c, h, w))


case("temporal_shift_module_slices_into_zeros", lambda: (R(8, 8, 4, 4),))(lambda: TemporalShift())


class PMA(nn.Module):
    """Set Transformer's pooling by multihead attention: learned seeds expanded over the batch,
    nn.MultiheadAttention with a key_padding_mask for the set sizes, a row-wise FF residual."""

    def __init__(self, d=8, k=2):
        super().__init__()
        self.S = nn.Parameter(torch.randn(1, k, d) * 0.1)
        self.mab = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ff = nn.Linear(d, d)

    def forward(self, x, sizes):
        mask = torch.arange(x.shape[1])[None] >= sizes[:, None]
        s = self.S.expand(x.size(0), -1, -1)
        h, w = self.mab(s, x, x, key_padding_mask=mask)
        h = h + s
        return h + F.relu(self.ff(h)), w


case("set_transformer_pma_seeds_key_padding_mask", lambda: (R(3, 5, 8), torch.tensor([5, 2, 3])))(lambda: PMA())


class ODEFunc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
        self.nfe = 0

    def forward(self, t, y):
        self.nfe += 1
        return self.net(torch.cat([y, t.expand(y.shape[0], 1)], 1))


class NeuralODE(nn.Module):
    """A fixed-step RK4 solver (torchdiffeq's rk4 method written out) over a linspace of times,
    the function's evaluation counter read after; the trajectory stacked."""

    def __init__(self):
        super().__init__()
        self.func = ODEFunc()

    def forward(self, y0, steps):
        ts = torch.linspace(0, 1, steps + 1)
        ys, y = [y0], y0
        for t0, t1 in zip(ts[:-1], ts[1:]):
            dt = t1 - t0
            k1 = self.func(t0, y)
            k2 = self.func(t0 + dt / 2, y + dt * k1 / 2)
            k3 = self.func(t0 + dt / 2, y + dt * k2 / 2)
            k4 = self.func(t1, y + dt * k3)
            y = y + dt * (k1 + 2 * k2 + 2 * k3 + k4) / 6
            ys.append(y)
        return torch.stack(ys), self.func.nfe


case("neural_ode_rk4_linspace_nfe_counter", lambda i=0: (R(4, 2), 3 + (i >= 2)))(lambda: NeuralODE())


class HyperNet(nn.Module):
    """A hypernetwork: per-sample weights and biases of a target layer generated from a task
    embedding, applied by bmm; FiLM's gamma / beta chunked from a conditioning embedding."""

    def __init__(self, d=4, o=3, tasks=5):
        super().__init__()
        self.d, self.o = d, o
        self.task = nn.Embedding(tasks, 6)
        self.gen_w, self.gen_b = nn.Linear(6, d * o), nn.Linear(6, o)
        self.film = nn.Linear(6, 2 * o)

    def forward(self, x, task):
        e = self.task(task)
        w = self.gen_w(e).view(-1, self.o, self.d)
        h = torch.bmm(w, x[..., None]).squeeze(-1) + self.gen_b(e)
        gamma, beta = self.film(e).chunk(2, -1)
        return (1 + gamma) * h + beta, w.norm(dim=(1, 2))


case("hypernetwork_per_sample_bmm_film_chunk", lambda: (R(6, 4), I(0, 5, 6)), train=True)(lambda: HyperNet())


@fn_case("swav_sinkhorn_knopp_no_grad_loop", lambda: (R(6, 4) * 3, R(6, 4) * 3))
def swav(scores1, scores2, eps=0.05, iters=3):
    """SwAV's distributed_sinkhorn on one process: Q = exp(scores / eps).t(), normalised by its sum,
    rows and columns alternately normalised in a Python loop under no_grad, the swapped prediction
    loss with temperature 0.1."""
    def sinkhorn(out):
        with torch.no_grad():
            Q = torch.exp(out / eps).t()
            B, K = Q.shape[1], Q.shape[0]
            Q /= torch.sum(Q)
            for _ in range(iters):
                Q /= torch.sum(Q, dim=1, keepdim=True)
                Q /= K
                Q /= torch.sum(Q, dim=0, keepdim=True)
                Q /= B
            Q *= B
            return Q.t()
    q1, q2 = sinkhorn(scores1), sinkhorn(scores2)
    p1, p2 = F.log_softmax(scores1 / 0.1, 1), F.log_softmax(scores2 / 0.1, 1)
    return -0.5 * ((q1 * p2).sum(1).mean() + (q2 * p1).sum(1).mean()), q1


class Coupling(nn.Module):
    """RealNVP's affine coupling with a checkerboard mask buffer: s by tanh-scaled net, forward
    y = x_m + (1 - m)(x exp(s) + t), the log-determinant summed, the inverse in the same call
    recovering x."""

    def __init__(self, d=6):
        super().__init__()
        self.register_buffer("mask", (torch.arange(d) % 2).float())
        self.s = nn.Sequential(nn.Linear(d, 8), nn.ReLU(), nn.Linear(8, d), nn.Tanh())
        self.t = nn.Sequential(nn.Linear(d, 8), nn.ReLU(), nn.Linear(8, d))
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x):
        m = self.mask
        xm = x * m
        s = self.s(xm) * self.scale * (1 - m)
        t = self.t(xm) * (1 - m)
        y = xm + (1 - m) * (x * torch.exp(s) + t)
        logdet = s.sum(-1)
        ym = y * m
        s2, t2 = self.s(ym) * self.scale * (1 - m), self.t(ym) * (1 - m)
        x_rec = ym + (1 - m) * (y - t2) * torch.exp(-s2)
        prior = -0.5 * (y ** 2 + math.log(2 * math.pi)).sum(-1)
        return y, logdet, x_rec, -(prior + logdet).mean()


case("realnvp_coupling_checkerboard_forward_inverse", lambda: (R(5, 6),), train=True)(lambda: Coupling())


@fn_case("batched_kalman_filter_step_linalg_solve", lambda: (R(3, 2), torch.eye(2).expand(3, 2, 2) * 0.5, R(3, 1)))
def kalman(x, P, z):
    """A constant-velocity Kalman filter step for a batch of tracks (SORT-style): predict with F,
    the innovation covariance S, the gain by linalg.solve on the transposed system (not inv),
    the Joseph-form covariance update, the Mahalanobis gating distance."""
    dt = 1.0
    Fm = torch.tensor([[1.0, dt], [0.0, 1.0]])
    H = torch.tensor([[1.0, 0.0]])
    Q, Rn = torch.eye(2) * 0.01, torch.eye(1) * 0.1
    x = x @ Fm.t()
    P = Fm @ P @ Fm.t() + Q
    S = H @ P @ H.t() + Rn
    K = torch.linalg.solve(S.transpose(-1, -2), (P @ H.t()).transpose(-1, -2)).transpose(-1, -2)
    y = z - x @ H.t()
    x = x + (K @ y[..., None]).squeeze(-1)
    IKH = torch.eye(2) - K @ H
    P = IKH @ P @ IKH.transpose(-1, -2) + K @ Rn @ K.transpose(-1, -2)
    maha = (y[..., None].transpose(-1, -2) @ torch.linalg.solve(S, y[..., None])).squeeze()
    return x, P, maha
class EMAModel(nn.Module):
    """An EMA copy kept by a dict of shadow tensors (the timm ModelEmaV2 idiom without deepcopy):
    decay warmed up by min(decay, (1 + n) / (10 + n)), the shadow used in eval."""

    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 6, 2)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.2)
        self.shadow = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
        self.n = 0

    def forward(self, x, y):
        loss = F.cross_entropy(self.net(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.n += 1
        d = min(0.99, (1 + self.n) / (10 + self.n))
        with torch.no_grad():
            for k, v in self.net.state_dict().items():
                if v.dtype.is_floating_point:
                    self.shadow[k].mul_(d).add_(v, alpha=1 - d)
        return loss.detach(), torch.func.functional_call(self.net, self.shadow, (x,))


case("ema_shadow_dict_functional_call_eval", lambda: (R(5, 4), I(0, 2, 5)), train=True, ncalls=4,
     context=grad_ctx)(lambda: EMAModel())
