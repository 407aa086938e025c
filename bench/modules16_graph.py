"""bench/modules16.py's graph / RL / metrics part (same runner, its CASES appended there): a
PyG-like MessagePassing base class (propagate dispatching on an aggr string, self loops added by
cat, degree by bincount, inf masked after pow(-0.5)), scatter_add_ on an expanded index with edge
features, a Batch.from_data_list written by hand (offsets by cumsum, batch vector by
repeat_interleave), global attention pooling, edge dropout by a generator; REINFORCE with
returns.insert(0, R) and torch.tensor of Python floats, TD(lambda) over Python lists, a replay
buffer in a collections.deque sampled by a generator, PPO epochs over randperm minibatches, an
Ornstein-Uhlenbeck noise state; confusion-matrix mIoU accumulated in a dict across calls, an
AverageMeter class, ROC-AUC by sort / cumsum / trapezoid, VOC 11-point AP, calibration error
bins with .item() branches, SSIM with a Gaussian window, multilabel micro / macro F1.
"""
from __future__ import annotations

import collections

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ graph nets
def _graph(n=6, e=10, i=0):
    ei = torch.randint(0, n, (2, e))
    return R(n, 4), ei


class MessagePassing(nn.Module):
    """A PyG-like base class: propagate() calls self.message on gathered x_j / x_i and aggregates
    by the aggr string ('add', 'mean', 'max') with scatter_reduce / index_add."""

    def __init__(self, aggr="add"):
        super().__init__()
        self.aggr = aggr

    def propagate(self, edge_index, x, **kw):
        src, dst = edge_index
        msg = self.message(x[src], x[dst], **kw)
        out = torch.zeros(x.shape[0], msg.shape[1], dtype=msg.dtype)
        if self.aggr == "add":
            return out.index_add(0, dst, msg)
        if self.aggr == "mean":
            s = out.index_add(0, dst, msg)
            cnt = torch.bincount(dst, minlength=x.shape[0]).clamp(min=1)
            return s / cnt[:, None]
        return out.scatter_reduce(0, dst[:, None].expand_as(msg), msg, "amax", include_self=False)


class GCNConv(MessagePassing):
    def __init__(self, cin, cout):
        super().__init__("add")
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def message(self, x_j, x_i, norm):
        return norm[:, None] * x_j

    def forward(self, x, edge_index):
        n = x.shape[0]
        loops = torch.arange(n).repeat(2, 1)
        edge_index = torch.cat([edge_index, loops], 1)
        deg = torch.bincount(edge_index[1], minlength=n).float()
        dis = deg.pow(-0.5)
        dis.masked_fill_(dis == float("inf"), 0)
        norm = dis[edge_index[0]] * dis[edge_index[1]]
        return self.propagate(edge_index, self.lin(x), norm=norm) + self.bias


class SAGEConv(MessagePassing):
    def __init__(self, cin, cout, aggr):
        super().__init__(aggr)
        self.l, self.r = nn.Linear(cin, cout), nn.Linear(cin, cout, bias=False)

    def message(self, x_j, x_i):
        return x_j

    def forward(self, x, edge_index):
        return self.l(self.propagate(edge_index, x)) + self.r(x)


class PygNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = GCNConv(4, 8), SAGEConv(8, 3, "max")
        self.c3 = SAGEConv(3, 3, "mean")
        self.opt = torch.optim.Adam(self.parameters(), lr=1e-2)

    def forward(self, x, edge_index, y):
        h = F.relu(self.c1(x, edge_index))
        out = self.c3(self.c2(h, edge_index), edge_index)
        loss = F.cross_entropy(out, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return out.detach(), loss.detach()


case("pyg_message_passing_base_aggr_string_gcn_sage_adam",
     lambda i=0: (*_graph(6 + i, 10 + 2 * i), I(0, 3, 6 + i)), train=True, context=grad_ctx)(lambda: PygNet())


class EdgeFeatConv(nn.Module):
    """GINE-like conv: messages relu(x_j + edge_attr projected), summed by scatter_add_ on the index
    expanded to the message shape (the torch_scatter idiom), (1 + eps) * x added."""

    def __init__(self):
        super().__init__()
        self.edge = nn.Linear(2, 4)
        self.mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        self.eps = nn.Parameter(torch.tensor(0.1))

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index
        msg = F.relu(x[src] + self.edge(edge_attr))
        agg = torch.zeros_like(x).scatter_add_(0, dst.unsqueeze(-1).expand_as(msg), msg)
        return self.mlp((1 + self.eps) * x + agg)


case("gine_edge_attr_scatter_add_expanded_index", lambda i=0: (*_graph(5, 9 + i), R(9 + i, 2)), train=True)(
    lambda: EdgeFeatConv())


class BatchFromList(nn.Module):
    """torch_geometric's Batch.from_data_list written by hand inside forward: node offsets by a
    cumsum of the sizes, edge indices shifted, the batch vector by repeat_interleave, then a GCN
    layer and global attention pooling (a softmax per graph via scatter amax / index_add)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)
        self.gate = nn.Linear(6, 1)

    def forward(self, graphs):
        sizes = torch.tensor([g[0].shape[0] for g in graphs])
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
        x = torch.cat([g[0] for g in graphs])
        ei = torch.cat([g[1] + off for g, off in zip(graphs, offsets)], 1)
        batch = torch.repeat_interleave(torch.arange(len(graphs)), sizes)
        h = F.relu(self.lin(x))
        h = h + torch.zeros_like(h).index_add(0, ei[1], h[ei[0]])
        gate = self.gate(h)[:, 0]
        gmax = torch.full((len(graphs),), float("-inf")).scatter_reduce(0, batch, gate, "amax")
        e = (gate - gmax[batch]).exp()
        den = torch.zeros(len(graphs)).index_add(0, batch, e)
        a = e / den[batch]
        return torch.zeros(len(graphs), h.shape[1]).index_add(0, batch, a[:, None] * h), batch


case("batch_from_data_list_offsets_cumsum_global_attention_pool",
     lambda i=0: ([_graph(3, 4), _graph(5, 6), _graph(2 + i, 1)],))(lambda: BatchFromList())


class EdgeDrop(nn.Module):
    """DropEdge with a generator held by the module (advanced across calls): a bool keep mask
    over the edges, edge_index[:, mask], mean aggregation with isolated nodes kept at zero."""

    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(5)
        self.lin = nn.Linear(4, 4)

    def forward(self, x, edge_index):
        keep = torch.rand(edge_index.shape[1], generator=self.g) >= 0.4
        ei = edge_index[:, keep]
        s = torch.zeros_like(x).index_add_(0, ei[1], x[ei[0]])
        cnt = torch.zeros(x.shape[0]).index_add_(0, ei[1], torch.ones(ei.shape[1]))
        return self.lin(s / cnt.clamp(min=1)[:, None]), keep.sum()


case("drop_edge_module_generator_bool_mask_columns", lambda: _graph(6, 12), ncalls=4)(lambda: EdgeDrop())


# ============================================================================ RL utilities
class Reinforce(nn.Module):
    """The PyTorch REINFORCE example: returns by R = r + gamma * R over reversed Python floats,
    returns.insert(0, R), torch.tensor(returns) normalized by std + eps, log-probs of sampled
    actions kept in a list, the policy loss by torch.cat(...).sum()."""

    def __init__(self):
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.opt = torch.optim.Adam(self.pi.parameters(), lr=1e-2)

    def forward(self, states, rewards):
        logps = []
        for s in states:
            d = torch.distributions.Categorical(logits=self.pi(s))
            a = d.sample()
            logps.append(d.log_prob(a)[None])
        R, returns = 0.0, []
        for r in rewards.tolist()[::-1]:
            R = r + 0.99 * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        loss = (-torch.cat(logps) * returns).sum()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), returns


case("reinforce_returns_insert0_python_floats_categorical_sample", lambda: (R(5, 4), R(5)), train=True,
     context=grad_ctx)(lambda: Reinforce())


@fn_case("td_lambda_returns_python_lists_bootstrap_done_flags", lambda i=0: (R(6).tolist(), R(7), [0, 0, 1, 0, 0, i % 2]))
def td_lambda(rewards, values, dones):
    """TD(lambda) returns over Python lists of rewards and done flags and a value tensor with a
    bootstrap entry: G = r + gamma * ((1 - lam) * V(s') + lam * G) reset at dones, stacked."""
    gamma, lam = 0.97, 0.8
    G = values[-1]
    out = []
    for t in reversed(range(len(rewards))):
        nonterminal = 1.0 - dones[t]
        G = rewards[t] + gamma * nonterminal * ((1 - lam) * values[t + 1] + lam * G)
        out.append(G)
    ret = torch.stack(out[::-1])
    return ret, ret - values[:-1]


class ReplayDQN(nn.Module):
    """A replay buffer in a collections.deque(maxlen=...) attribute: transitions appended as tuples
    of tensors, sampled by indices from torch.randint with a module generator once enough are
    stored, the batch stacked by zip(*), a double-DQN loss and an Adam step."""

    def __init__(self):
        super().__init__()
        self.q, self.tq = nn.Linear(3, 2), nn.Linear(3, 2)
        self.tq.load_state_dict(self.q.state_dict())
        self.buf = collections.deque(maxlen=8)
        self.g = torch.Generator().manual_seed(11)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-2)

    def forward(self, s, a, r, s2):
        for i in range(s.shape[0]):
            self.buf.append((s[i], a[i], r[i], s2[i]))
        if len(self.buf) < 6:
            return None, len(self.buf)
        idx = torch.randint(0, len(self.buf), (4,), generator=self.g).tolist()
        bs, ba, br, bs2 = (torch.stack(t) for t in zip(*[self.buf[j] for j in idx]))
        q = self.q(bs).gather(1, ba[:, None])[:, 0]
        with torch.no_grad():
            a2 = self.q(bs2).argmax(1, keepdim=True)
            tgt = br + 0.9 * self.tq(bs2).gather(1, a2)[:, 0]
        loss = F.mse_loss(q, tgt)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), len(self.buf)


case("replay_buffer_deque_maxlen_generator_sample_double_dqn",
     lambda: (R(3, 3), I(0, 2, 3), R(3), R(3, 3)), train=True, ncalls=4, context=grad_ctx)(lambda: ReplayDQN())


class PPOEpochs(nn.Module):
    """PPO's update: advantages normalized, 2 epochs over minibatches from torch.randperm split by
    Python slicing, the clipped surrogate + value loss - entropy, an approximate-KL early stop
    checked by .item(), clip_grad_norm_ per minibatch."""

    def __init__(self):
        super().__init__()
        self.pi, self.v = nn.Linear(4, 3), nn.Linear(4, 1)
        self.opt = torch.optim.Adam(self.parameters(), lr=3e-2)

    def forward(self, obs, act, old_logp, adv, ret):
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        n, mb, stats = obs.shape[0], 4, []
        for epoch in range(2):
            perm = torch.randperm(n)
            for st in range(0, n, mb):
                j = perm[st:st + mb]
                d = torch.distributions.Categorical(logits=self.pi(obs[j]))
                logp = d.log_prob(act[j])
                ratio = (logp - old_logp[j]).exp()
                pg = -torch.min(ratio * adv[j], ratio.clamp(0.8, 1.2) * adv[j]).mean()
                vl = F.mse_loss(self.v(obs[j])[:, 0], ret[j])
                loss = pg + 0.5 * vl - 0.01 * d.entropy().mean()
                self.opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.parameters(), 0.5)
                self.opt.step()
                kl = (old_logp[j] - logp).mean().item()
                stats.append(kl)
            if abs(stats[-1]) > 0.5:
                break
        return stats


case("ppo_epochs_randperm_minibatches_kl_early_stop_item",
     lambda: (R(10, 4), I(0, 3, 10), -U(10) - 0.5, R(10), R(10)), train=True, context=grad_ctx)(lambda: PPOEpochs())


class OUNoise(nn.Module):
    """DDPG's Ornstein-Uhlenbeck exploration noise: a state tensor attribute updated each call by
    theta * (mu - x) + sigma * randn, reset when an episode-done flag (a Python bool) is passed."""

    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 2), nn.Tanh())
        self.state = torch.zeros(2)
        self.theta, self.sigma = 0.15, 0.2

    def forward(self, obs, done: bool = False):
        if done:
            self.state = torch.zeros(2)
        self.state = self.state + self.theta * (0.0 - self.state) + self.sigma * torch.randn(2)
        return (self.actor(obs) + self.state).clamp(-1, 1), self.state.clone()


case("ou_noise_state_attribute_reset_on_done_flag", lambda i=0: (R(4, 3), i == 2), ncalls=4)(lambda: OUNoise())


# ============================================================================ metrics
class MIoUMeter(nn.Module):
    """Segmentation metrics across calls: a confusion matrix by bincount(n * gt + pred) with the
    ignore label removed, kept in a Python dict attribute and added to per call; per-class IoU
    with nanmean over classes never seen; pixel accuracy as a Python float."""

    def __init__(self, n=4):
        super().__init__()
        self.n = n
        self.conv = nn.Conv2d(3, n, 1)
        self.meters = {"hist": torch.zeros(n, n, dtype=torch.long), "pixels": 0}

    def forward(self, x, gt):
        pred = self.conv(x).argmax(1)
        k = gt != 255
        h = torch.bincount(self.n * gt[k] + pred[k], minlength=self.n ** 2).view(self.n, self.n)
        self.meters["hist"] = self.meters["hist"] + h
        self.meters["pixels"] += int(k.sum())
        hist = self.meters["hist"].float()
        iou = hist.diag() / (hist.sum(0) + hist.sum(1) - hist.diag())
        return iou.nanmean(), hist.diag().sum().item() / max(self.meters["pixels"], 1), iou


def _seg(i=0):
    gt = I(0, 3, 2, 5, 5)
    gt[0, 0] = 255
    return R(2, 3, 5, 5), gt


case("miou_confusion_bincount_dict_attr_across_calls_nanmean", _seg, ncalls=4)(lambda: MIoUMeter())


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class EvalLoop(nn.Module):
    """An eval loop over mini-batches of the input: AverageMeter objects (plain Python) updated by
    loss.item() and top-1 / top-3 accuracy, kept across calls, returned as a dict of floats."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(5, 6)
        self.meters = {"loss": AverageMeter(), "top1": AverageMeter(), "top3": AverageMeter()}

    def forward(self, x, y):
        for xb, yb in zip(x.split(3), y.split(3)):
            out = self.net(xb)
            self.meters["loss"].update(F.cross_entropy(out, yb).item(), xb.shape[0])
            _, pred = out.topk(3, 1)
            correct = pred.t().eq(yb[None].expand(3, -1))
            for k in (1, 3):
                self.meters[f"top{k}"].update(correct[:k].reshape(-1).float().sum().item() * 100.0 / xb.shape[0],
                                              xb.shape[0])
        return {k: (m.avg, m.count) for k, m in self.meters.items()}


case("average_meter_python_objects_topk_accuracy_split_batches", lambda i=0: (R(7 + i, 5), I(0, 6, 7 + i)), ncalls=3)(
    lambda: EvalLoop())


@fn_case("roc_auc_sort_cumsum_trapezoid_ties_distinct", lambda i=0: (torch.cat([U(9), U(3).round()]), I(0, 2, 12)))
def roc_auc(scores, labels):
    """ROC-AUC as sklearn computes it: scores sorted descending (stable), distinct thresholds by
    diff != 0 with the last index appended, tps / fps by cumsum, rates with a (0, 0) prepended,
    area by torch.trapezoid; nan when one class is missing."""
    s, order = scores.sort(descending=True, stable=True)
    y = labels[order].float()
    distinct = torch.nonzero(s.diff() != 0)[:, 0]
    idx = torch.cat([distinct, torch.tensor([y.numel() - 1])])
    tps = y.cumsum(0)[idx]
    fps = 1 + idx - tps
    tpr = torch.cat([torch.zeros(1), tps]) / tps[-1]
    fpr = torch.cat([torch.zeros(1), fps]) / fps[-1]
    return torch.trapezoid(tpr, fpr), tpr, fpr


@fn_case("voc_11_point_average_precision_python_thresholds", lambda i=0: (U(10), U(10) > 0.4, 6 + i))
def voc_ap(scores, is_tp, n_gt: int):
    """VOC2007 11-point AP: detections sorted by score, cumulative tp / fp, recall over the number
    of ground truths, precision; for t in 0, 0.1, ..., 1 the max precision at recall >= t (0 when
    the mask is empty, checked by .sum() == 0)."""
    order = scores.argsort(descending=True)
    tp = is_tp[order].float().cumsum(0)
    fp = (~is_tp[order]).float().cumsum(0)
    rec = tp / max(n_gt, 1)
    prec = tp / (tp + fp).clamp(min=1e-9)
    ap = 0.0
    for t in torch.arange(0.0, 1.1, 0.1):
        m = rec >= t
        p = 0.0 if m.sum() == 0 else prec[m].max()
        ap = ap + p / 11.0
    return ap, rec[-1]


@fn_case("expected_calibration_error_bins_item_branch", lambda: (R(20, 4).softmax(-1), I(0, 4, 20)))
def ece(probs, labels):
    """ECE with 10 bins: confidences and correctness, per bin the in-bin mask, `if prop > 0`
    on a .item(), |avg confidence - accuracy| * proportion summed; the bin accuracies kept."""
    conf, pred = probs.max(1)
    acc = pred.eq(labels)
    bounds = torch.linspace(0, 1, 11)
    e = torch.zeros(1)
    accs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        inb = conf.gt(lo.item()) * conf.le(hi.item())
        prop = inb.float().mean()
        if prop.item() > 0:
            a = acc[inb].float().mean()
            e += torch.abs(conf[inb].mean() - a) * prop
            accs.append(a)
    return e, torch.stack(accs)


@fn_case("ssim_gaussian_window_grouped_conv_psnr", lambda: (U(2, 3, 11, 11), U(2, 3, 11, 11)))
def ssim(a, b):
    """pytorch-ssim: a Gaussian window built in the call (outer product of a 1-d Gaussian),
    expanded per channel, grouped conv2d for the local means / variances, the SSIM map's mean;
    PSNR from the MSE."""
    ws, sigma, c = 7, 1.5, a.shape[1]
    g = torch.exp(-((torch.arange(ws) - ws // 2).float() ** 2) / (2 * sigma ** 2))
    g = g / g.sum()
    w = (g[:, None] @ g[None])[None, None].expand(c, 1, ws, ws).contiguous()
    mu1, mu2 = F.conv2d(a, w, padding=ws // 2, groups=c), F.conv2d(b, w, padding=ws // 2, groups=c)
    s11 = F.conv2d(a * a, w, padding=ws // 2, groups=c) - mu1 ** 2
    s22 = F.conv2d(b * b, w, padding=ws // 2, groups=c) - mu2 ** 2
    s12 = F.conv2d(a * b, w, padding=ws // 2, groups=c) - mu1 * mu2
    C1, C2 = 0.01 ** 2, 0.03 ** 2
    m = ((2 * mu1 * mu2 + C1) * (2 * s12 + C2)) / ((mu1 ** 2 + mu2 ** 2 + C1) * (s11 + s22 + C2))
    return m.mean(), 10 * torch.log10(1 / F.mse_loss(a, b))


@fn_case("multilabel_f1_micro_macro_threshold_zero_division", lambda: (R(6, 5), U(6, 5) > 0.6))
def f1(logits, target):
    """Multilabel precision / recall / F1 at a 0.5 sigmoid threshold: micro from summed counts,
    macro per class with zero_division -> 0 by where on the denominators; hamming loss."""
    pred = logits.sigmoid() > 0.5
    tp = (pred & target).sum(0).float()
    fp = (pred & ~target).sum(0).float()
    fn = (~pred & target).sum(0).float()
    prec = torch.where(tp + fp > 0, tp / (tp + fp), torch.zeros_like(tp))
    rec = torch.where(tp + fn > 0, tp / (tp + fn), torch.zeros_like(tp))
    f1c = torch.where(prec + rec > 0, 2 * prec * rec / (prec + rec), torch.zeros_like(tp))
    micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()).clamp(min=1)
    return micro, f1c.mean(), (pred != target).float().mean()
