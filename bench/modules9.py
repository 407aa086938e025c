"""Ninth real-world-style corpus (issue 10 trust): domains and idioms modules.py .. modules8.py leave out.

Written the way public repositories write them: detection post-processing (Gaussian soft-NMS and
DIoU-NMS loops, SOLOv2 matrix NMS, weighted box fusion, ATSS / SimOTA / TOOD assigners, CIoU,
YOLOX decoding, RoI Align by hand, rotated-box shoelace areas, mask IoU by matmul), segmentation
(Lovasz-softmax per class, clDice soft skeletons, generalized Dice, discriminative instance
embeddings, mean-field CRF steps, panoptic merging, boundary IoU, masked Hausdorff), diffusion
(Imagen dynamic thresholding, zero-terminal-SNR betas, PLMS history, DDIM inversion, classifier
guidance by autograd.grad, rectified flow with a shifted schedule, consistency scalings, offset
noise, self-conditioning, logSNR schedules), RL (QR-DQN / IQN, TD3 smoothing, SAC temperature,
advantage normalisation of one sample, TD(lambda) traces, noisy nets, CQL, Retrace, action
masks), GNNs (PNA, GATv2, APPNP with sparse.mm, TopK pooling, DiffPool, Laplacian PE,
components by scatter amin, PageRank, triangles, Bellman-Ford), point clouds (3-NN
interpolation, PCA normals, voxel downsampling, vector attention, augmentation, sliced
Wasserstein), optimizers by hand (RAdam, Adagrad / Adadelta, NAdam, Yogi, LARS, Lookahead,
Sophia, Shampoo, gradient centralisation with _foreach ops, SGD flags changed between calls),
quantisation (PACT, DoReFa, XNOR, stochastic rounding, MX shared exponents, log2, GPTQ's column
loop, AWQ's grid search), audio (mel banks and DCT by hand, SI-SDR, biquads, multi-resolution
spectral losses, loudness), metrics (AP, NDCG, Spearman, ECE, kappa / MCC, MRR), ragged batches
(HF last-token pooling, flash-attn unpadding, segment max, lists of variable tensors), in-place
writes on views, mixed dtypes, layouts, 0-size / 1-element tensors, Python outputs, and calls
repeated with new shapes, dtypes and Python values.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, grad_ctx, registrars, run


CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def boxes(n, size=32.0):
    xy = torch.rand(n, 2) * size
    wh = torch.rand(n, 2) * size / 2 + 1
    return torch.cat([xy, xy + wh], -1)


def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None] - inter)


# ============================================================ detection post-processing
@fn_case("soft_nms_gaussian_decay_loop", lambda i=0: (boxes(10 + i), U(10 + i)))
def soft_nms_gaussian_decay_loop(b, s, sigma=0.5, steps=6):
    """Gaussian soft-NMS written as a loop: pick the argmax score, decay the others by
    exp(-iou^2 / sigma), mark the picked one with -1 through a 0-d tensor index."""
    s = s.clone()
    keep, kept_scores = [], []
    for _ in range(steps):
        i = torch.argmax(s)
        keep.append(i)
        kept_scores.append(s[i])
        iou = box_iou(b[i].unsqueeze(0), b)[0]
        s = s * torch.exp(-(iou * iou) / sigma)
        s[i] = -1.0
    return torch.stack(keep), torch.stack(kept_scores), s


@fn_case("matrix_nms_solov2_decay_min", lambda i=0: ((U(6, 8, 8) > 0.5 - 0.1 * i).float(), U(6).sort(descending=True)[0]))
def matrix_nms_solov2_decay_min(masks, scores, sigma=2.0):
    """SOLOv2 matrix NMS: mask IoU by a matmul of flattened masks, the upper triangle, the
    per-column compensation max, a Gaussian decay minimum over rows; empty masks (area 0)."""
    n = masks.shape[0]
    m = masks.reshape(n, -1)
    inter = m @ m.t()
    area = m.sum(1).expand(n, n)
    iou = (inter / (area + area.t() - inter).clamp(min=1e-6)).triu(diagonal=1)
    comp = iou.max(0)[0].expand(n, n).t()
    decay = torch.exp(-sigma * (iou ** 2 - comp ** 2)).min(0)[0]
    return scores * decay, iou


@fn_case("diou_nms_keep_mask_loop", lambda i=0: (boxes(9), U(9) + i))
def diou_nms_keep_mask_loop(b, s, thr=0.3):
    """DIoU-NMS with a boolean keep mask updated in place row by row over score order: the
    DIoU penalty from centre distances over the enclosing box's diagonal."""
    order = s.argsort(descending=True)
    b = b[order]
    iou = box_iou(b, b)
    c = (b[:, :2] + b[:, 2:]) / 2
    d2 = ((c[:, None] - c[None]) ** 2).sum(-1)
    lt = torch.min(b[:, None, :2], b[None, :, :2])
    rb = torch.max(b[:, None, 2:], b[None, :, 2:])
    diag = ((rb - lt) ** 2).sum(-1)
    diou = iou - d2 / diag
    keep = torch.ones(len(b), dtype=torch.bool)
    for i in range(len(b)):
        sup = (diou[i] > thr) & keep[i]
        sup[: i + 1] = False
        keep &= ~sup
    return order, keep, keep.long().cumsum(0)


@fn_case("weighted_box_fusion_cluster_index_add", lambda: (boxes(12), U(12)))
def weighted_box_fusion_cluster_index_add(b, s, thr=0.2):
    """Weighted box fusion: sort by score, each box joins the first higher-scored box it overlaps
    (argmax of an IoU mask over a triangular order), clusters fused by score-weighted index_add."""
    order = s.argsort(descending=True)
    b, s = b[order], s[order]
    iou = box_iou(b, b)
    n = len(b)
    tri = torch.ones(n, n).tril().bool()
    overl = (iou > thr) & tri
    owner = overl.float().argmax(1)
    num = torch.zeros(n, 4).index_add_(0, owner, b * s[:, None])
    den = torch.zeros(n).index_add_(0, owner, s)
    cnt = torch.bincount(owner, minlength=n)
    fused = num / den.clamp(min=1e-9)[:, None]
    conf = den / cnt.clamp(min=1) * cnt.clamp(max=3) / 3
    return fused, conf, cnt


@fn_case("atss_assigner_mean_std_iou_threshold", lambda i=0: (boxes(40), boxes(3 + i)))
def atss_assigner_mean_std_iou_threshold(anchors, gts, k=9):
    """ATSS: top-k anchors by centre distance per gt, IoU threshold mean + std of the candidates,
    anchor centres inside the gt, the max-IoU gt wins, -inf elsewhere; unmatched -> 0."""
    ac = (anchors[:, :2] + anchors[:, 2:]) / 2
    gc = (gts[:, :2] + gts[:, 2:]) / 2
    dist = torch.cdist(gc, ac)
    _, cand = dist.topk(k, dim=1, largest=False)
    iou = box_iou(gts, anchors)
    ciou = iou.gather(1, cand)
    thr = ciou.mean(1) + ciou.std(1)
    is_pos = ciou >= thr[:, None]
    cx = ac[cand][..., 0]
    cy = ac[cand][..., 1]
    inside = (cx > gts[:, None, 0]) & (cx < gts[:, None, 2]) & (cy > gts[:, None, 1]) & (cy < gts[:, None, 3])
    is_pos = is_pos & inside
    full = torch.full_like(iou, -math.inf)
    full.scatter_(1, cand, torch.where(is_pos, ciou, torch.full_like(ciou, -math.inf)))
    best, gi = full.max(0)
    assigned = torch.where(best == -math.inf, torch.zeros_like(gi), gi + 1)
    return assigned, thr


@fn_case("simota_dynamic_k_topk_item_loop", lambda i=0: (U(4, 30), U(4, 30)))
def simota_dynamic_k_topk_item_loop(iou, cls_cost):
    """YOLOX SimOTA: dynamic_k from the sum of each gt's top-10 IoUs (clamped >= 1), a matching
    matrix filled per gt by topk of the cost with k = that count's .item(), anchors claimed twice
    go to the cheapest gt."""
    cost = cls_cost + 3.0 * -torch.log(iou + 1e-8)
    topk_ious, _ = torch.topk(iou, 10, dim=1)
    dynamic_ks = torch.clamp(topk_ious.sum(1).int(), min=1)
    matching = torch.zeros_like(cost)
    for g in range(cost.shape[0]):
        _, pos = torch.topk(cost[g], k=dynamic_ks[g].item(), largest=False)
        matching[g][pos] = 1.0
    multi = matching.sum(0) > 1
    if multi.sum() > 0:
        _, cmin = torch.min(cost[:, multi], dim=0)
        matching[:, multi] *= 0.0
        matching[cmin, multi] = 1.0
    return matching, dynamic_ks


class CIoULoss(nn.Module):
    """CIoU loss: IoU, centre distance over the enclosing diagonal, the aspect term v from atan(w/h)
    and alpha computed under no_grad as the reference code does; backward into the predictions."""

    def forward(self, pred, target):
        pred = pred.detach().requires_grad_(True)
        w1, h1 = pred[:, 2] - pred[:, 0], pred[:, 3] - pred[:, 1]
        w2, h2 = target[:, 2] - target[:, 0], target[:, 3] - target[:, 1]
        lt = torch.max(pred[:, :2], target[:, :2])
        rb = torch.min(pred[:, 2:], target[:, 2:])
        inter = (rb - lt).clamp(min=0).prod(1)
        union = w1 * h1 + w2 * h2 - inter + 1e-7
        iou = inter / union
        elt = torch.min(pred[:, :2], target[:, :2])
        erb = torch.max(pred[:, 2:], target[:, 2:])
        c2 = ((erb - elt) ** 2).sum(1) + 1e-7
        rho2 = (((pred[:, :2] + pred[:, 2:]) - (target[:, :2] + target[:, 2:])) ** 2).sum(1) / 4
        v = (4 / math.pi ** 2) * torch.pow(torch.atan(w2 / h2) - torch.atan(w1 / h1), 2)
        with torch.no_grad():
            alpha = v / (1 - iou + v + 1e-7)
        loss = (1 - iou + rho2 / c2 + alpha * v).mean()
        g, = torch.autograd.grad(loss, pred)
        return loss.detach(), g


case("ciou_loss_atan_alpha_no_grad_autograd", lambda: (boxes(8), boxes(8)), context=grad_ctx)(lambda: CIoULoss())


class YOLOXDecode(nn.Module):
    """YOLOX decoding: per-level grids from the feature sizes (meshgrid cached per shape in a dict
    attribute), xy + grid times stride, exp(wh) times stride, concatenated over levels."""

    def __init__(self, strides=(8, 16)):
        super().__init__()
        self.strides = strides
        self.grids = {}

    def forward(self, p3, p4):
        outs = []
        for p, s in zip((p3, p4), self.strides):
            b, c, h, w = p.shape
            key = (h, w)
            if key not in self.grids:
                yv, xv = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
                self.grids[key] = torch.stack((xv, yv), 2).view(1, h * w, 2).float()
            o = p.flatten(2).permute(0, 2, 1)
            xy = (o[..., :2] + self.grids[key]) * s
            wh = torch.exp(o[..., 2:4]) * s
            outs.append(torch.cat([xy, wh, o[..., 4:].sigmoid()], -1))
        return torch.cat(outs, 1)


case("yolox_decode_grid_cache_dict_exp_strides", lambda i=0: (R(2, 7, 4 + i, 4), R(2, 7, 2 + i, 2)))(lambda: YOLOXDecode())


@fn_case("roi_align_bilinear_by_hand_gather", lambda i=0: (R(2, 3, 10, 12), torch.tensor([[0, 1.2, 0.5, 7.9, 6.3], [1, 3.0, 2.0, 11.5, 9.7], [0, -1.0, -2.0, 4.0, 3.0]])))
def roi_align_bilinear_by_hand_gather(feat, rois, out=3, sr=2):
    """RoI Align without torchvision: sampling points in each bin, bilinear weights from floor /
    frac with clamped neighbours, points outside [-1, H] zeroed, gathered from the flattened map."""
    b, c, h, w = feat.shape
    n = rois.shape[0]
    bi = rois[:, 0].long()
    x1, y1, x2, y2 = rois[:, 1], rois[:, 2], rois[:, 3], rois[:, 4]
    bw = (x2 - x1).clamp(min=1) / out
    bh = (y2 - y1).clamp(min=1) / out
    grid = (torch.arange(out * sr).float() + 0.5) / sr
    xs = x1[:, None] + grid[None] * bw[:, None]
    ys = y1[:, None] + grid[None] * bh[:, None]
    Y = ys[:, :, None].expand(n, out * sr, out * sr)
    X = xs[:, None, :].expand(n, out * sr, out * sr)
    valid = (Y >= -1) & (Y <= h) & (X >= -1) & (X <= w)
    Y = Y.clamp(min=0)
    X = X.clamp(min=0)
    y0 = Y.floor().long().clamp(max=h - 1)
    x0 = X.floor().long().clamp(max=w - 1)
    y1i = (y0 + 1).clamp(max=h - 1)
    x1i = (x0 + 1).clamp(max=w - 1)
    Y = torch.where(y0 >= h - 1, y0.float(), Y)
    X = torch.where(x0 >= w - 1, x0.float(), X)
    ly, lx = Y - y0, X - x0
    hy, hx = 1 - ly, 1 - lx
    f = feat[bi].flatten(2)

    def g(yy, xx):
        idx = (yy * w + xx).view(n, 1, -1).expand(n, c, -1)
        return f.gather(2, idx).view(n, c, out * sr, out * sr)

    v = (hy * hx)[:, None] * g(y0, x0) + (hy * lx)[:, None] * g(y0, x1i) + (ly * hx)[:, None] * g(y1i, x0) + \
        (ly * lx)[:, None] * g(y1i, x1i)
    v = v * valid[:, None]
    return F.avg_pool2d(v, sr)


@fn_case("rotated_box_corners_shoelace_area", lambda i=0: (torch.cat([U(7, 2) * 10, U(7, 2) * 4 + 0.5, (U(7, 1) - 0.5) * math.pi], 1),))
def rotated_box_corners_shoelace_area(rb):
    """Rotated boxes (cx, cy, w, h, theta) to corners by cos / sin, the shoelace area through
    roll, the axis-aligned hull, and the corners' order kept by stacking."""
    cx, cy, w, h, t = rb.unbind(-1)
    c, s = torch.cos(t), torch.sin(t)
    dx = torch.stack([-w, w, w, -w], -1) / 2
    dy = torch.stack([-h, -h, h, h], -1) / 2
    x = cx[:, None] + dx * c[:, None] - dy * s[:, None]
    y = cy[:, None] + dx * s[:, None] + dy * c[:, None]
    area = 0.5 * (x * y.roll(-1, 1) - x.roll(-1, 1) * y).sum(1).abs()
    hull = torch.stack([x.min(1)[0], y.min(1)[0], x.max(1)[0], y.max(1)[0]], 1)
    return torch.stack([x, y], -1), area, area - w * h, hull


@fn_case("task_aligned_assigner_metric_topk_in_gt", lambda: (U(2, 3, 20), U(2, 3, 20), (U(2, 3, 20) > 0.4)))
def task_aligned_assigner_metric_topk_in_gt(scores, ious, in_gt, alpha=1.0, beta=6.0, k=5):
    """TOOD's task-aligned assigner: t = s^alpha * u^beta inside gts, top-k per gt as a one-hot
    sum, anchors claimed by several gts go to the max IoU one, normalised by the per-gt max."""
    t = scores.pow(alpha) * ious.pow(beta) * in_gt
    _, idx = t.topk(k, dim=-1)
    onehot = F.one_hot(idx, t.shape[-1]).sum(-2)
    pos = onehot * in_gt
    multi = pos.sum(-2, keepdim=True) > 1
    best = F.one_hot(ious.argmax(-2), t.shape[-2]).permute(0, 2, 1)
    pos = torch.where(multi, best, pos).float()
    t = t * pos
    norm = (t / (t.amax(-1, keepdim=True) + 1e-9)) * (ious * pos).amax(-1, keepdim=True)
    return pos, norm.amax(-2)


# ================================================================================ segmentation
def _lovasz_grad(gt_sorted):
    gts = gt_sorted.sum()
    inter = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    j = 1.0 - inter / union
    if gt_sorted.numel() > 1:
        j[1:] = j[1:] - j[:-1].clone()
    return j


@fn_case("lovasz_softmax_classes_present_loop", lambda i=0: (R(2, 4, 6, 6), I(0, 3 + (i > 1), 2, 6, 6)))
def lovasz_softmax_classes_present_loop(logits, labels):
    """Lovasz-softmax: per class, errors |fg - p| sorted descending, dot with the Lovasz gradient;
    'present' classes only (a Python branch on fg.sum() == 0), mean over the list."""
    probs = logits.softmax(1).permute(0, 2, 3, 1).reshape(-1, logits.shape[1])
    labels = labels.view(-1)
    losses = []
    for c in range(probs.shape[1]):
        fg = (labels == c).float()
        if fg.sum() == 0:
            continue
        errors = (fg - probs[:, c]).abs()
        errs, perm = torch.sort(errors, 0, descending=True)
        losses.append(torch.dot(errs, _lovasz_grad(fg[perm])))
    return sum(losses) / len(losses)


def _soft_erode(x):
    p1 = -F.max_pool2d(-x, (3, 1), (1, 1), (1, 0))
    p2 = -F.max_pool2d(-x, (1, 3), (1, 1), (0, 1))
    return torch.min(p1, p2)


def _soft_skel(x, iters=3):
    dil = lambda t: F.max_pool2d(t, 3, 1, 1)  # noqa: E731
    skel = F.relu(x - dil(_soft_erode(x)))
    for _ in range(iters):
        x = _soft_erode(x)
        delta = F.relu(x - dil(_soft_erode(x)))
        skel = skel + F.relu(delta - skel * delta)
    return skel


@fn_case("cldice_soft_skeleton_minmax_pool", lambda: (U(2, 1, 12, 12), (U(2, 1, 12, 12) > 0.6).float()))
def cldice_soft_skeleton_minmax_pool(pred, target):
    """clDice: soft skeletons by iterated min-pool (negated max_pool2d) erosions and max-pool
    dilations, topology precision / sensitivity and their harmonic mean, plus soft Dice."""
    sp, st = _soft_skel(pred), _soft_skel(target)
    tprec = ((sp * target).sum() + 1) / (sp.sum() + 1)
    tsens = ((st * pred).sum() + 1) / (st.sum() + 1)
    cl = 1 - 2 * tprec * tsens / (tprec + tsens)
    dice = 1 - (2 * (pred * target).sum() + 1) / (pred.sum() + target.sum() + 1)
    return cl, dice, sp


@fn_case("generalized_dice_inverse_square_weights_inf", lambda: (R(2, 4, 5, 5), I(0, 3, 2, 5, 5)))
def generalized_dice_inverse_square_weights_inf(logits, target):
    """Generalized Dice: class weights 1 / volume^2, an absent class's inf weight replaced by the
    largest finite one (torch.where on isinf, then a max of the masked weights)."""
    p = logits.softmax(1)
    oh = F.one_hot(target, 4).permute(0, 3, 1, 2).float()
    vol = oh.sum((0, 2, 3))
    w = 1.0 / (vol * vol)
    inf = torch.isinf(w)
    w = torch.where(inf, torch.zeros_like(w), w)
    w = torch.where(inf, torch.ones_like(w) * w.max(), w)
    inter = (w * (p * oh).sum((0, 2, 3))).sum()
    union = (w * (p + oh).sum((0, 2, 3))).sum()
    return 1 - 2 * inter / union, w


@fn_case("discriminative_embedding_loss_bincount_means", lambda i=0: (R(2, 4, 6, 6), I(0, 3 + i, 2, 6, 6)))
def discriminative_embedding_loss_bincount_means(emb, inst, dv=0.5, dd=1.5, k=5):
    """De Brabandere's discriminative loss: cluster means by index_add over instance ids (k ids,
    some absent: count 0), hinged variance pull, pairwise push between present clusters only."""
    b, d = emb.shape[:2]
    e = emb.permute(0, 2, 3, 1).reshape(b, -1, d)
    total = []
    for j in range(b):
        ids = inst[j].reshape(-1)
        cnt = torch.bincount(ids, minlength=k).float()
        mu = torch.zeros(k, d).index_add_(0, ids, e[j]) / cnt.clamp(min=1)[:, None]
        present = (cnt > 0).float()
        var = (F.relu((e[j] - mu[ids]).norm(dim=1) - dv) ** 2)
        lvar = (torch.zeros(k).index_add_(0, ids, var) / cnt.clamp(min=1)).sum() / present.sum()
        pair = present[:, None] * present[None] * (1 - torch.eye(k))
        dist = torch.cdist(mu, mu)
        ldist = (F.relu(2 * dd - dist) ** 2 * pair).sum() / pair.sum().clamp(min=1)
        total.append(lvar + ldist + 0.001 * (mu.norm(dim=1) * present).sum() / present.sum())
    return torch.stack(total)


class MeanFieldCRF(nn.Module):
    """Dense-CRF-as-RNN light: a fixed Gaussian spatial filter by depthwise conv2d, a learned label
    compatibility 1x1 conv, unary minus the message, softmax, a few iterations."""

    def __init__(self, c=4, iters=3):
        super().__init__()
        self.iters = iters
        g = torch.exp(-torch.arange(-2, 3.0) ** 2 / 2)
        k = g[:, None] * g[None]
        k[2, 2] = 0
        self.register_buffer("k", (k / k.sum()).expand(c, 1, 5, 5).clone())
        self.compat = nn.Conv2d(c, c, 1, bias=False)
        self.c = c

    def forward(self, unary):
        q = unary.softmax(1)
        for _ in range(self.iters):
            msg = F.conv2d(q, self.k, padding=2, groups=self.c)
            q = (unary - self.compat(msg)).softmax(1)
        return q


case("mean_field_crf_depthwise_gaussian_iters", lambda i=0: (R(2, 4, 8 + i, 8),))(lambda: MeanFieldCRF())


@fn_case("panoptic_merge_argmax_bincount_small_stuff", lambda: (R(2, 5, 8, 8), I(0, 4, 2, 8, 8)))
def panoptic_merge_argmax_bincount_small_stuff(sem_logits, inst):
    """Panoptic merging: semantic argmax, thing classes (>= 3) take instance ids offset by
    class * 1000, stuff regions under an area threshold (bincount looked up per pixel) set void."""
    sem = sem_logits.argmax(1)
    thing = sem >= 3
    pan = torch.where(thing, sem * 1000 + inst, sem * 1000)
    flat = sem.view(sem.shape[0], -1)
    areas = torch.stack([torch.bincount(f, minlength=5) for f in flat])
    area_px = areas.gather(1, flat).view_as(sem)
    pan = torch.where(~thing & (area_px < 8), torch.full_like(pan, -1), pan)
    return pan, areas


@fn_case("boundary_iou_erosion_by_maxpool", lambda i=0: ((U(2, 1, 10, 10) > 0.5).float(), (U(2, 1, 10, 10) > 0.5 - 0.5 * (i > 1)).float()))
def boundary_iou_erosion_by_maxpool(a, b, d=1):
    """Boundary IoU: boundaries as mask minus its erosion (1 - maxpool(1 - m)), intersection over
    union per image; both boundaries empty -> NaN replaced by 1 via nan_to_num."""
    def boundary(m):
        er = 1 - F.max_pool2d(1 - m, 2 * d + 1, 1, d)
        return m - er
    ba, bb = boundary(a), boundary(b)
    inter = (ba * bb).sum((1, 2, 3))
    union = ((ba + bb) > 0).float().sum((1, 2, 3))
    return torch.nan_to_num(inter / union, nan=1.0), ba


@fn_case("hausdorff_cdist_masked_inf_points", lambda i=0: (R(2, 10, 3), R(2, 12, 3), U(2, 10) > 0.3, U(2, 12) > 0.2 * i))
def hausdorff_cdist_masked_inf_points(p, q, pm, qm):
    """Hausdorff distance between padded point sets: cdist, padded rows / columns filled with
    inf (masked_fill), min then max; a set with no valid points gives inf / NaN as eager does."""
    d = torch.cdist(p, q)
    d1 = d.masked_fill(~qm[:, None, :], math.inf).min(2)[0].masked_fill(~pm, -math.inf).max(1)[0]
    d2 = d.masked_fill(~pm[:, :, None], math.inf).min(1)[0].masked_fill(~qm, -math.inf).max(1)[0]
    return torch.max(d1, d2), d1, d2


# =================================================================================== diffusion
@fn_case("imagen_dynamic_thresholding_quantile_clamp", lambda i=0: (R(3, 2, 4, 4) * (1 + 2 * i),))
def imagen_dynamic_thresholding_quantile_clamp(x0, p=0.9):
    """Imagen's dynamic thresholding: s = quantile of |x0| per sample, clamped to >= 1, x0
    clamped to [-s, s] with tensor bounds, divided by s."""
    s = torch.quantile(x0.reshape(x0.shape[0], -1).abs(), p, dim=1)
    s = torch.clamp(s, min=1.0).view(-1, 1, 1, 1)
    return torch.clamp(x0, -s, s) / s, s.flatten()


class ZeroTerminalSNR(nn.Module):
    """'Common diffusion noise schedules are flawed': sqrt(alphas_cumprod) shifted so the last is 0
    and scaled so the first is kept, back to betas; q_sample at timesteps gathered per sample."""

    def __init__(self, T=50):
        super().__init__()
        betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, T, dtype=torch.float64) ** 2
        ac = torch.cumprod(1 - betas, 0)
        s = ac.sqrt()
        s0, sT = s[0].clone(), s[-1].clone()
        s = (s - sT) * s0 / (s0 - sT)
        a = s ** 2
        a = torch.cat([a[0:1], a[1:] / a[:-1]])
        self.register_buffer("betas", 1 - a)
        self.register_buffer("ac", torch.cumprod(a, 0).float())

    def forward(self, x0, noise, t):
        a = self.ac[t].view(-1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        v = a.sqrt() * noise - (1 - a).sqrt() * x0
        return xt, v, self.betas[-1]


case("zero_terminal_snr_rescaled_betas_float64", lambda i=0: (R(3, 4, 4), R(3, 4, 4), torch.tensor([0, 25, 49 - i])))(
    lambda: ZeroTerminalSNR())


class PLMS(nn.Module):
    """PNDM / PLMS: a Python list of past eps predictions kept on the module across calls,
    coefficients by its length (1, 2, 3, then the 4-term Adams-Bashforth), oldest dropped."""

    def __init__(self):
        super().__init__()
        self.eps = nn.Conv2d(2, 2, 3, padding=1)
        self.hist = []

    def forward(self, x, a_t, a_prev):
        e = self.eps(x)
        self.hist.append(e.detach())
        h = self.hist[-4:]
        if len(h) == 1:
            ep = h[-1]
        elif len(h) == 2:
            ep = (3 * h[-1] - h[-2]) / 2
        elif len(h) == 3:
            ep = (23 * h[-1] - 16 * h[-2] + 5 * h[-3]) / 12
        else:
            ep = (55 * h[-1] - 59 * h[-2] + 37 * h[-3] - 9 * h[-4]) / 24
        if len(self.hist) > 4:
            self.hist.pop(0)
        x0 = (x - (1 - a_t) ** 0.5 * ep) / a_t ** 0.5
        return a_prev ** 0.5 * x0 + (1 - a_prev) ** 0.5 * ep


case("plms_history_list_grows_across_calls", lambda i=0: (R(1, 2, 5, 5), 0.5 + 0.05 * i, 0.6 + 0.05 * i), ncalls=6)(lambda: PLMS())


class DDIMInversion(nn.Module):
    """DDIM inversion: timesteps walked forwards, alphas gathered by a Python int index from a
    buffer, x_{t+1} = sqrt(a_next) * x0_pred + sqrt(1 - a_next) * eps."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 3, 3, padding=1))
        self.register_buffer("ac", torch.cumprod(1 - torch.linspace(1e-4, 0.02, 100), 0))

    def forward(self, x, steps: int = 4):
        ts = list(range(0, 100, 100 // steps))
        for t, tn in zip(ts[:-1], ts[1:]):
            e = self.net(x)
            a, an = self.ac[t], self.ac[tn]
            x0 = (x - (1 - a).sqrt() * e) / a.sqrt()
            x = an.sqrt() * x0 + (1 - an).sqrt() * e
        return x


case("ddim_inversion_int_steps_change", lambda i=0: (R(1, 3, 6, 6), 4 + (i > 1)))(lambda: DDIMInversion())


class ClassifierGuidance(nn.Module):
    """Guided diffusion's cond_fn: x detached with requires_grad under enable_grad, the classifier's
    log-softmax at the target labels summed, autograd.grad, mean + scale * variance * grad."""

    def __init__(self):
        super().__init__()
        self.cls = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.SiLU(), nn.Flatten(), nn.Linear(4 * 16, 5))

    def forward(self, x, y, mean, var, scale: float = 3.0):
        with torch.enable_grad():
            xi = x.detach().requires_grad_(True)
            lp = F.log_softmax(self.cls(xi), -1)
            sel = lp[range(len(y)), y.view(-1)]
            g = torch.autograd.grad(sel.sum(), xi)[0] * scale
        return mean + var * g, sel.detach()


case("classifier_guidance_enable_grad_autograd_grad", lambda: (R(2, 3, 8, 8), I(0, 5, 2), R(2, 3, 8, 8), U(2, 3, 8, 8)),
     context=grad_ctx)(lambda: ClassifierGuidance())


class RectifiedFlow(nn.Module):
    """Rectified-flow / SD3 Euler sampling: timesteps shifted t' = s t / (1 + (s - 1) t), a
    velocity MLP conditioned on t by a sinusoidal embedding, x += (t_next - t) * v."""

    def __init__(self, d=6):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 8, 32), nn.GELU(), nn.Linear(32, d))

    def forward(self, x, steps: int = 4, shift: float = 3.0):
        ts = torch.linspace(1, 0, steps + 1)
        ts = shift * ts / (1 + (shift - 1) * ts)
        freqs = torch.exp(-math.log(1000) * torch.arange(4) / 4)
        for i in range(steps):
            t = ts[i]
            emb = torch.cat([torch.sin(t * freqs * 1000), torch.cos(t * freqs * 1000)]).expand(x.shape[0], 8)
            v = self.net(torch.cat([x, emb], -1))
            x = x + (ts[i + 1] - t) * v
        return x


case("rectified_flow_shifted_schedule_euler", lambda i=0: (R(3, 6), 4, 3.0 - i))(lambda: RectifiedFlow())


@fn_case("consistency_skip_out_scalings_sigma_tensor", lambda i=0: (R(3, 2, 4, 4), U(3) * 80 + 0.002, R(3, 2, 4, 4)))
def consistency_skip_out_scalings_sigma_tensor(x, sigma, fx, sigma_data=0.5, sigma_min=0.002):
    """Consistency models' boundary scalings: c_skip = sd^2 / ((s - smin)^2 + sd^2), c_out =
    (s - smin) sd / sqrt(s^2 + sd^2), c_in and the log-sigma time input; sigma == sigma_min."""
    sigma = sigma.clone()
    sigma[0] = sigma_min
    c_skip = sigma_data ** 2 / ((sigma - sigma_min) ** 2 + sigma_data ** 2)
    c_out = (sigma - sigma_min) * sigma_data / (sigma ** 2 + sigma_data ** 2) ** 0.5
    c_in = 1 / (sigma ** 2 + sigma_data ** 2) ** 0.5
    rs = lambda t: t.view(-1, 1, 1, 1)  # noqa: E731
    return rs(c_skip) * x + rs(c_out) * fx, rs(c_in) * x, 1000 * 0.25 * torch.log(sigma + 1e-44)


@fn_case("offset_noise_img2img_strength_python_timesteps", lambda i=0: (R(2, 4, 6, 6), 0.3 + 0.3 * i))
def offset_noise_img2img_strength_python_timesteps(latents, strength, steps=10):
    """img2img: the start step int(steps * strength) in Python, timesteps sliced from a tensor by
    it, offset noise (randn + 0.1 * randn(b, c, 1, 1)), the latent scaled by 0.18215."""
    timesteps = torch.linspace(999, 0, steps).long()
    init = min(int(steps * strength), steps)
    t_start = max(steps - init, 0)
    ts = timesteps[t_start:]
    noise = torch.randn_like(latents) + 0.1 * torch.randn(latents.shape[0], latents.shape[1], 1, 1)
    ac = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)
    a = ac[ts[:1]].view(-1, 1, 1, 1)
    return (a.sqrt() * latents * 0.18215 + (1 - a).sqrt() * noise), ts


class SelfCond(nn.Module):
    """Self-conditioning (Analog Bits): with Python random() < 0.5, a first pass under no_grad
    gives x0, detached and concatenated as the second input; else zeros."""

    def __init__(self):
        super().__init__()
        self.net = nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        cond = torch.zeros_like(x)
        if random.random() < 0.5:
            with torch.no_grad():
                cond = self.net(torch.cat([x, cond], 1)).detach()
        out = self.net(torch.cat([x, cond], 1))
        return out, F.mse_loss(out, x)


case("self_conditioning_python_random_branch", lambda: (R(2, 2, 5, 5),), ncalls=5)(lambda: SelfCond())


@fn_case("cosine_logsnr_schedule_sigmoid_alpha_sigma", lambda i=0: (U(6), R(6, 3)))
def cosine_logsnr_schedule_sigmoid_alpha_sigma(t, x, lmin=-15.0, lmax=15.0):
    """simple diffusion's shifted cosine logSNR: -2 log tan(a t + b) with t's endpoints exactly
    0 and 1, alpha^2 = sigmoid(logsnr), sigma^2 = sigmoid(-logsnr), eps-to-v conversion."""
    t = t.clone()
    t[0], t[-1] = 0.0, 1.0
    b = math.atan(math.exp(-0.5 * lmax))
    a = math.atan(math.exp(-0.5 * lmin)) - b
    logsnr = -2.0 * torch.log(torch.tan(a * t + b))
    alpha = torch.sigmoid(logsnr).sqrt()[:, None]
    sigma = torch.sigmoid(-logsnr).sqrt()[:, None]
    return logsnr, alpha * x, sigma * x - alpha


# ========================================================================================== RL
@fn_case("qr_dqn_quantile_huber_pairwise", lambda i=0: (R(4, 8), R(4, 8), 1.0 - 0.5 * i))
def qr_dqn_quantile_huber_pairwise(theta, target, kappa=1.0):
    """QR-DQN's quantile Huber loss: pairwise TD errors (B, N, N), Huber with kappa (a Python
    float changing per call), weighted by |tau - 1{u < 0}| with tau the quantile midpoints."""
    n = theta.shape[1]
    tau = (torch.arange(n, dtype=torch.float32) + 0.5) / n
    u = target.detach()[:, None, :] - theta[:, :, None]
    huber = torch.where(u.abs() <= kappa, 0.5 * u.pow(2), kappa * (u.abs() - 0.5 * kappa))
    loss = (tau.view(1, -1, 1) - (u.detach() < 0).float()).abs() * huber / kappa
    return loss.sum(1).mean(1).mean(), u


class IQN(nn.Module):
    """IQN: quantile fractions drawn with an explicit torch.Generator seeded per call, cos(pi i tau)
    embedding, ReLU, Hadamard product with the state features, quantile values."""

    def __init__(self, d=8, n_cos=16, a=3):
        super().__init__()
        self.n_cos = n_cos
        self.phi = nn.Linear(n_cos, d)
        self.f = nn.Linear(4, d)
        self.out = nn.Linear(d, a)

    def forward(self, s, n: int = 5, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        tau = torch.rand(s.shape[0], n, 1, generator=g)
        cos = torch.cos(torch.arange(1, self.n_cos + 1).float() * math.pi * tau)
        emb = F.relu(self.phi(cos))
        h = F.relu(self.f(s))[:, None]
        return self.out(h * emb), tau


case("iqn_cosine_tau_generator_seed_arg", lambda i=0: (R(3, 4), 5 + i, 7 * i))(lambda: IQN())


class TD3Target(nn.Module):
    """TD3's target: target policy smoothing noise (randn_like * 0.2).clamp(-0.5, 0.5), the action
    clamped to bounds, min of twin critics, (1 - done) masking, float done from bool."""

    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2), nn.Tanh())
        self.q1 = nn.Linear(7, 1)
        self.q2 = nn.Linear(7, 1)

    def forward(self, s2, r, done):
        with torch.no_grad():
            noise = (torch.randn(s2.shape[0], 2) * 0.2).clamp(-0.5, 0.5)
            a2 = (self.actor(s2) + noise).clamp(-1.0, 1.0)
            sa = torch.cat([s2, a2], 1)
            tq = torch.min(self.q1(sa), self.q2(sa))
            return r + 0.99 * (1 - done.float()) * tq, a2


case("td3_target_policy_smoothing_clamped_noise", lambda: (R(6, 5), R(6, 1), U(6, 1) > 0.7))(lambda: TD3Target())


class SACAlpha(nn.Module):
    """SAC's automatic temperature: log_alpha parameter, loss -(log_alpha * (logp + target).detach())
    .mean(), backward, manual SGD under no_grad, alpha = log_alpha.exp() returned as a float."""

    def __init__(self):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.zeros(1))
        self.target = -2.0

    def forward(self, logp):
        loss = -(self.log_alpha * (logp + self.target).detach()).mean()
        loss.backward()
        with torch.no_grad():
            self.log_alpha -= 0.1 * self.log_alpha.grad
            self.log_alpha.grad = None
        return loss.detach(), self.log_alpha.exp().item()


case("sac_log_alpha_temperature_manual_step", lambda i=0: (R(8) - i,), train=True, ncalls=4)(lambda: SACAlpha())


@fn_case("advantage_normalize_single_sample_nan", lambda i=0: (R(5 if i < 2 else 1), R(5 if i < 2 else 1)))
def advantage_normalize_single_sample_nan(adv, ret):
    """PPO's advantage normalisation (adv - mean) / (std + 1e-8) on a batch of 5, then of 1
    (unbiased std of one sample: NaN), explained variance with var == 0."""
    a = (adv - adv.mean()) / (adv.std() + 1e-8)
    var_y = ret.var(unbiased=False)
    ev = torch.where(var_y == 0, torch.full_like(var_y, float("nan")), 1 - (ret - adv).var(unbiased=False) / var_y)
    return a, ev


class TDLambda(nn.Module):
    """Linear TD(lambda) with accumulating eligibility traces: a trace and weight buffers updated
    in place in a Python loop over the episode under no_grad."""

    def __init__(self, d=6):
        super().__init__()
        self.register_buffer("w", torch.zeros(d))
        self.register_buffer("e", torch.zeros(d))

    @torch.no_grad()
    def forward(self, feats, rewards, gamma: float = 0.9, lam: float = 0.8, alpha: float = 0.1):
        self.e.zero_()
        deltas = []
        for t in range(feats.shape[0] - 1):
            v, v2 = self.w @ feats[t], self.w @ feats[t + 1]
            delta = rewards[t] + gamma * v2 - v
            self.e.mul_(gamma * lam).add_(feats[t])
            self.w.add_(alpha * delta * self.e)
            deltas.append(delta)
        return torch.stack(deltas)


case("td_lambda_eligibility_trace_buffers_inplace", lambda: (U(6, 6), R(6)))(lambda: TDLambda())


class NoisyLinear(nn.Module):
    """NoisyNet's factorised Gaussian noise: f(x) = sign(x) sqrt|x| of randn, outer product into an
    epsilon buffer with copy_ at each forward in training, mu only in eval."""

    def __init__(self, i=6, o=4, s0=0.5):
        super().__init__()
        self.i, self.o = i, o
        r = 1 / math.sqrt(i)
        self.mu_w = nn.Parameter(torch.empty(o, i).uniform_(-r, r))
        self.sig_w = nn.Parameter(torch.full((o, i), s0 / math.sqrt(i)))
        self.mu_b = nn.Parameter(torch.empty(o).uniform_(-r, r))
        self.sig_b = nn.Parameter(torch.full((o,), s0 / math.sqrt(o)))
        self.register_buffer("eps_w", torch.zeros(o, i))
        self.register_buffer("eps_b", torch.zeros(o))

    @staticmethod
    def f(x):
        return x.sign().mul_(x.abs().sqrt_())

    def forward(self, x):
        if self.training:
            ei, eo = self.f(torch.randn(self.i)), self.f(torch.randn(self.o))
            self.eps_w.copy_(eo.outer(ei))
            self.eps_b.copy_(eo)
            return F.linear(x, self.mu_w + self.sig_w * self.eps_w, self.mu_b + self.sig_b * self.eps_b)
        return F.linear(x, self.mu_w, self.mu_b)


case("noisy_net_factorised_sign_sqrt_inplace", lambda: (R(3, 6),), train=True)(lambda: NoisyLinear())


class CQL(nn.Module):
    """CQL(H)'s conservative penalty: Q at uniformly random actions and the policy's actions,
    logsumexp over the concatenation minus Q at the data actions."""

    def __init__(self):
        super().__init__()
        self.q = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, s, a, pi_a, n: int = 4):
        b = s.shape[0]
        rand_a = torch.empty(b * n, 2).uniform_(-1, 1)
        s_rep = s.repeat_interleave(n, 0)
        q_rand = self.q(torch.cat([s_rep, rand_a], 1)).view(b, n) - math.log(0.5 ** 2)
        q_pi = self.q(torch.cat([s_rep, pi_a.repeat_interleave(n, 0)], 1)).view(b, n)
        cat = torch.cat([q_rand, q_pi], 1)
        return (torch.logsumexp(cat, 1) - self.q(torch.cat([s, a], 1)).squeeze(1)).mean()


case("cql_logsumexp_random_actions_repeat_interleave", lambda: (R(3, 4), R(3, 2), R(3, 2)))(lambda: CQL())


@fn_case("retrace_truncated_importance_reverse_loop", lambda: (R(6, 3), R(6, 3), U(6, 3).log_softmax(1), U(6, 3).log_softmax(1), I(0, 3, 6), R(6), U(6) > 0.8))
def retrace_truncated_importance_reverse_loop(q, tq, logp, logmu, a, r, done, gamma=0.99, lam=1.0):
    """Retrace(lambda): c = lam * min(1, pi/mu) at the taken actions (gather), expected target Q
    under pi, the reverse recursion over time with dones cutting the trace."""
    pi = logp.exp()
    c = lam * torch.clamp((logp - logmu).gather(1, a[:, None]).squeeze(1).exp(), max=1.0)
    ev = (pi * tq).sum(1)
    qa = q.gather(1, a[:, None]).squeeze(1)
    tqa = tq.gather(1, a[:, None]).squeeze(1)
    T = q.shape[0]
    ret = torch.zeros(T)
    g = ev[-1]
    for t in reversed(range(T)):
        g = r[t] + gamma * (~done[t]).float() * g
        ret[t] = g
        g = c[t] * (g - tqa[t]) + ev[t]
    return ret, F.mse_loss(qa, ret)


class DuelingMasked(nn.Module):
    """A dueling head: V + A - A.mean over the legal actions only (masked mean by sums), illegal
    actions filled with finfo.min, greedy argmax; a row with only one legal action."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(5, 16)
        self.v = nn.Linear(16, 1)
        self.a = nn.Linear(16, 4)

    def forward(self, s, legal):
        legal = legal.clone()
        legal[0] = torch.tensor([False, False, True, False])
        h = F.relu(self.body(s))
        adv = self.a(h)
        mean = (adv * legal).sum(1, keepdim=True) / legal.sum(1, keepdim=True).clamp(min=1)
        q = self.v(h) + adv - mean
        q = q.masked_fill(~legal, torch.finfo(q.dtype).min)
        return q, q.argmax(1)


case("dueling_head_legal_action_mask_finfo_min", lambda: (R(4, 5), U(4, 4) > 0.4))(lambda: DuelingMasked())


# ================================================================================ graph nets
def _graph(n=7, e=16, i=0):
    src = torch.randint(0, n, (e,))
    dst = torch.randint(0, n - 1, (e,))   # node n - 1 has no in-edges
    return torch.stack([src, dst]), R(n, 4)


class PNA(nn.Module):
    """PNA: mean / min / max / std aggregators by scatter_reduce (include_self=False: nodes
    without in-edges get the fill), degree scalers log(d + 1) / avg_log, a linear tower."""

    def __init__(self, d=4):
        super().__init__()
        self.pre = nn.Linear(2 * d, d)
        self.post = nn.Linear(12 * d, d)
        self.avg_log = 1.2

    def forward(self, ei, x):
        src, dst = ei
        n = x.shape[0]
        m = self.pre(torch.cat([x[src], x[dst]], 1))
        idx = dst[:, None].expand_as(m)
        z = torch.zeros(n, m.shape[1])
        mean = z.scatter_reduce(0, idx, m, "mean", include_self=False)
        mn = z.scatter_reduce(0, idx, m, "amin", include_self=False)
        mx = z.scatter_reduce(0, idx, m, "amax", include_self=False)
        sq = z.scatter_reduce(0, idx, m * m, "mean", include_self=False)
        std = (sq - mean * mean).clamp(min=0).add(1e-5).sqrt()
        agg = torch.cat([mean, mn, mx, std], 1)
        deg = torch.bincount(dst, minlength=n).float().clamp(min=1)
        s = torch.log(deg + 1)[:, None] / self.avg_log
        return self.post(torch.cat([agg, agg * s, agg / s], 1))


case("pna_scatter_reduce_aggregators_degree_scalers", lambda i=0: _graph(7, 16 + 3 * i))(lambda: PNA())


class GATv2(nn.Module):
    """GATv2: leaky_relu before the attention vector, an edge softmax by scatter_reduce amax,
    exp, index_add sums (a node without in-edges keeps zeros), heads concatenated."""

    def __init__(self, d=4, h=2, o=3):
        super().__init__()
        self.h, self.o = h, o
        self.W = nn.Linear(d, h * o * 2)
        self.att = nn.Parameter(torch.randn(h, o))

    def forward(self, ei, x):
        src, dst = ei
        n = x.shape[0]
        xl, xr = self.W(x).view(n, 2, self.h, self.o).unbind(1)
        e = (F.leaky_relu(xl[src] + xr[dst], 0.2) * self.att).sum(-1)
        mx = torch.full((n, self.h), -math.inf).scatter_reduce(0, dst[:, None].expand_as(e), e, "amax")
        ex = (e - mx[dst]).exp()
        den = torch.zeros(n, self.h).index_add_(0, dst, ex)
        a = ex / den[dst]
        out = torch.zeros(n, self.h, self.o).index_add_(0, dst, a[..., None] * xl[src])
        return out.reshape(n, -1), a


case("gatv2_edge_softmax_scatter_amax_index_add", lambda i=0: _graph(6, 12 + 2 * i))(lambda: GATv2())


class APPNP(nn.Module):
    """APPNP: a symmetric-normalised sparse COO adjacency with self loops, K steps of
    (1 - alpha) A h + alpha h0 through torch.sparse.mm."""

    def __init__(self, d=4, k=4, alpha=0.1):
        super().__init__()
        self.lin = nn.Linear(d, 3)
        self.k, self.alpha = k, alpha

    def forward(self, ei, x):
        n = x.shape[0]
        loops = torch.arange(n)
        src = torch.cat([ei[0], loops])
        dst = torch.cat([ei[1], loops])
        deg = torch.zeros(n).index_add_(0, dst, torch.ones(dst.shape[0]))
        w = deg[src].rsqrt() * deg[dst].rsqrt()
        A = torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n, n)).coalesce()
        h0 = h = self.lin(x)
        for _ in range(self.k):
            h = (1 - self.alpha) * torch.sparse.mm(A, h) + self.alpha * h0
        return h


case("appnp_sparse_coo_mm_propagation", lambda: _graph(6, 10))(lambda: APPNP())


@fn_case("topk_pooling_per_graph_sort_by_batch_key", lambda i=0: (R(9, 3), torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2]), U(3)))
def topk_pooling_per_graph_sort_by_batch_key(x, batch, p, ratio=0.5):
    """TopKPooling without torch_scatter: scores tanh(x p / |p|), a per-graph descending order by
    sorting batch * 10 - score (stable), ranks within each graph from the cumsum of counts,
    ceil(ratio * n_g) kept per graph, features gated by the score."""
    score = torch.tanh((x * p).sum(-1) / p.norm())
    key = batch.float() * 10 - score
    perm = torch.sort(key, stable=True)[1]
    counts = torch.bincount(batch)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(batch)) - starts[batch[perm]]
    k = torch.ceil(ratio * counts.float()).long()
    keep = rank < k[batch[perm]]
    sel = perm * keep + (-1) * (~keep)
    return sel, x[perm] * score[perm, None] * keep[:, None]


class DiffPool(nn.Module):
    """DiffPool (dense): assignments S = softmax(GNN(x)), X' = S^T Z, A' = S^T A S, the link
    prediction loss ||A - S S^T||_F / numel and the assignment entropy."""

    def __init__(self, d=4, c=3):
        super().__init__()
        self.emb = nn.Linear(d, 5)
        self.ass = nn.Linear(d, c)

    def forward(self, x, adj):
        adj = ((adj + adj.transpose(1, 2)) > 1).float()
        z = F.relu(adj @ self.emb(x))
        s = torch.softmax(adj @ self.ass(x), -1)
        xp = s.transpose(1, 2) @ z
        ap = s.transpose(1, 2) @ adj @ s
        link = torch.norm(adj - s @ s.transpose(1, 2), p=2) / adj.numel()
        ent = (-s * torch.log(s + 1e-15)).sum(-1).mean()
        return xp, ap, link, ent


case("diffpool_dense_softmax_assignment_link_entropy", lambda: (R(2, 6, 4), U(2, 6, 6) * 2))(lambda: DiffPool())


@fn_case("laplacian_pe_eigh_normalised_isolated_node", lambda i=0: (U(6, 6) > 0.5,))
def laplacian_pe_eigh_normalised_isolated_node(a):
    """Laplacian positional encodings: a symmetric adjacency with node 0 isolated, D^-1/2 with
    degree 0 -> 0 (pow(-0.5) gives inf, masked), L = I - D^-1/2 A D^-1/2, eigh, k smallest
    non-trivial eigenvectors' absolute values (sign-invariant)."""
    a = (a | a.t()).float()
    a.fill_diagonal_(0)
    a[0] = 0
    a[:, 0] = 0
    deg = a.sum(1)
    dinv = deg.pow(-0.5)
    dinv[torch.isinf(dinv)] = 0
    lap = torch.eye(a.shape[0]) - dinv[:, None] * a * dinv[None]
    vals, vecs = torch.linalg.eigh(lap)
    return vals, vecs[:, 1:4].abs().sum(0)


@fn_case("connected_components_scatter_amin_iterations", lambda i=0: (torch.randint(0, 10, (2, 8 + 2 * i)),))
def connected_components_scatter_amin_iterations(ei, n=10, iters=10):
    """Connected components by label propagation: labels start as arange, each iteration takes
    the min over both edge directions with scatter_reduce amin (include_self), a fixed count."""
    src = torch.cat([ei[0], ei[1]])
    dst = torch.cat([ei[1], ei[0]])
    lab = torch.arange(n)
    for _ in range(iters):
        lab = lab.scatter_reduce(0, dst, lab[src], "amin")
    uniq = torch.zeros(n, dtype=torch.bool).index_fill_(0, lab, True)
    return lab, uniq.sum()


@fn_case("pagerank_power_iteration_dangling_nodes", lambda i=0: ((U(7, 7) > 0.6 + 0.1 * i).float(),))
def pagerank_power_iteration_dangling_nodes(adj, d=0.85, iters=20):
    """PageRank: a column-stochastic matrix from out-degrees with dangling nodes (out-degree 0)
    spreading uniformly, teleportation, a fixed number of power iterations, L1 change."""
    n = adj.shape[0]
    adj = adj.clone()
    adj[2] = 0
    out = adj.sum(1)
    dangling = out == 0
    P = adj / torch.where(dangling, torch.ones_like(out), out)[:, None]
    r = torch.full((n,), 1.0 / n)
    for _ in range(iters):
        new = d * (r @ P + r[dangling].sum() / n) + (1 - d) / n
        delta = (new - r).abs().sum()
        r = new
    return r, delta


@fn_case("triangle_count_matrix_power_clustering_coeff", lambda i=0: (U(8, 8) > 0.5 + 0.2 * i,))
def triangle_count_matrix_power_clustering_coeff(a):
    """Triangles per node from diag(A^3) / 2 (matrix_power on float), local clustering
    coefficients with degree < 2 -> 0 via where, global transitivity; an int64 adjacency too."""
    a = (a | a.t())
    a.fill_diagonal_(False)
    af = a.float()
    tri = torch.linalg.matrix_power(af, 3).diagonal() / 2
    deg = af.sum(1)
    possible = deg * (deg - 1) / 2
    cc = torch.where(deg < 2, torch.zeros_like(tri), tri / possible)
    ai = a.long()
    return tri, cc, (ai @ ai * ai).sum() // 6


@fn_case("bellman_ford_min_plus_inf_weights", lambda i=0: (torch.where(U(6, 6) > 0.5, U(6, 6) * 10, torch.full((6, 6), math.inf)),))
def bellman_ford_min_plus_inf_weights(w, src=0):
    """Bellman-Ford as min-plus products: dist starts inf except the source, n - 1 relaxations
    dist = min(dist, (dist[:, None] + W).min(0)); unreachable nodes stay inf."""
    n = w.shape[0]
    dist = torch.full((n,), math.inf)
    dist[src] = 0
    for _ in range(n - 1):
        dist = torch.minimum(dist, (dist[:, None] + w).min(0).values)
    return dist, torch.isinf(dist).sum()


# ============================================================================= point clouds
@fn_case("three_nn_inverse_distance_interpolation", lambda i=0: (R(2, 10, 3), R(2, 4, 3), R(2, 4, 5)))
def three_nn_inverse_distance_interpolation(xyz1, xyz2, feat2):
    """PointNet++ feature propagation: squared distances, the 3 nearest by sort, weights 1 / (d +
    1e-8) normalised, features gathered by batched index and summed; an exact duplicate point."""
    xyz1 = xyz1.clone()
    xyz1[:, 0] = xyz2[:, 0]
    d = (xyz1[:, :, None] - xyz2[:, None]).pow(2).sum(-1)
    d, idx = d.sort(dim=-1)
    d, idx = d[:, :, :3], idx[:, :, :3]
    w = 1.0 / (d + 1e-8)
    w = w / w.sum(2, keepdim=True)
    b = torch.arange(xyz1.shape[0]).view(-1, 1, 1)
    return (feat2[b, idx] * w[..., None]).sum(2)


@fn_case("pca_normals_knn_covariance_eigh_orient", lambda: (R(1, 12, 3) * torch.tensor([1.0, 1.0, 0.1]),))
def pca_normals_knn_covariance_eigh_orient(pts, k=5):
    """Normal estimation: k nearest neighbours by topk of negative cdist, centred covariance
    (b, n, 3, 3) by einsum, eigh's smallest eigenvector, flipped towards a viewpoint by sign."""
    d = torch.cdist(pts, pts)
    idx = (-d).topk(k, dim=-1).indices
    nb = pts[0][idx[0]][None]
    c = nb - nb.mean(2, keepdim=True)
    cov = torch.einsum("bnki,bnkj->bnij", c, c) / k
    vals, vecs = torch.linalg.eigh(cov)
    nrm = vecs[..., 0]
    view = torch.tensor([0.0, 0.0, 10.0])
    flip = ((view - pts) * nrm).sum(-1, keepdim=True) < 0
    nrm = torch.where(flip, -nrm, nrm)
    return nrm.abs(), vals[..., 0]


@fn_case("voxel_downsample_floor_unique_inverse_scatter_mean", lambda i=0: (U(40, 3) * 2, 0.5 + 0.25 * i))
def voxel_downsample_floor_unique_inverse_scatter_mean(pts, size):
    """Voxel-grid downsampling: integer voxel coordinates by floor division, unique rows with
    return_inverse and counts, points averaged per voxel by index_add (a Python float size)."""
    vox = torch.floor(pts / size).long()
    uniq, inv, cnt = torch.unique(vox, dim=0, return_inverse=True, return_counts=True)
    s = torch.zeros(uniq.shape[0], 3).index_add_(0, inv, pts)
    return s / cnt[:, None], uniq


class PointTransformerLayer(nn.Module):
    """Point Transformer's vector attention: kNN by topk on cdist, gathered keys / values, a
    relative-position MLP, the subtraction relation through an MLP, softmax over the neighbours."""

    def __init__(self, d=8, k=4):
        super().__init__()
        self.k = k
        self.q, self.kk, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.pos = nn.Sequential(nn.Linear(3, d), nn.ReLU(), nn.Linear(d, d))
        self.attn = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))

    def forward(self, p, x):
        b, n, _ = p.shape
        idx = torch.cdist(p, p).topk(self.k, largest=False).indices
        bi = torch.arange(b)[:, None, None]
        rel = self.pos(p[:, :, None] - p[bi, idx])
        w = self.attn(self.q(x)[:, :, None] - self.kk(x)[bi, idx] + rel).softmax(2)
        return (w * (self.v(x)[bi, idx] + rel)).sum(2)


case("point_transformer_vector_attention_knn_gather", lambda i=0: (R(2, 9 + i, 3), R(2, 9 + i, 8)))(lambda: PointTransformerLayer())


@fn_case("point_augment_rotation_z_jitter_generator", lambda i=0: (R(2, 10, 3), i))
def point_augment_rotation_z_jitter_generator(pts, seed):
    """Point-cloud augmentation with a generator seeded from the call: a random z rotation
    matrix built by stack, anisotropic scaling, clipped Gaussian jitter, random point dropout."""
    g = torch.Generator().manual_seed(1000 + seed)
    b = pts.shape[0]
    th = torch.rand(b, generator=g) * 2 * math.pi
    c, s = th.cos(), th.sin()
    z, o = torch.zeros_like(c), torch.ones_like(c)
    rot = torch.stack([c, -s, z, s, c, z, z, z, o], 1).view(b, 3, 3)
    scale = torch.empty(b, 1, 3).uniform_(0.8, 1.25, generator=g)
    jit = torch.clamp(0.01 * torch.randn(pts.shape, generator=g), -0.05, 0.05)
    out = pts @ rot.transpose(1, 2) * scale + jit
    drop = torch.rand(b, pts.shape[1], generator=g) < 0.2
    out[drop] = out[:, :1].expand_as(out)[drop]
    return out


@fn_case("sliced_wasserstein_random_projections_sort", lambda i=0: (R(32, 3), R(32, 3) + 0.5))
def sliced_wasserstein_random_projections_sort(x, y, n=8):
    """Sliced Wasserstein distance: random directions normalised, both clouds projected, sorted
    along the sample dimension, squared differences averaged, square root."""
    th = torch.randn(3, n)
    th = th / th.norm(dim=0, keepdim=True)
    px, _ = torch.sort(x @ th, dim=0)
    py, _ = torch.sort(y @ th, dim=0)
    return ((px - py) ** 2).mean().sqrt()


# ========================================================================= optimizers by hand
class HandOpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))

    def loss(self, x, y):
        return F.mse_loss(self.net(x), y)


class RAdam(HandOpt):
    """RAdam: the SMA length rho_t from a Python step counter, a Python branch on rho_t > 5
    (rectified adaptive step vs un-adapted momentum), state as buffers updated in place."""

    def __init__(self):
        super().__init__()
        for i, p in enumerate(self.net.parameters()):
            self.register_buffer(f"m{i}", torch.zeros_like(p))
            self.register_buffer(f"v{i}", torch.zeros_like(p))
        self.t = 0

    def forward(self, x, y, lr=1e-2, b1=0.9, b2=0.999):
        loss = self.loss(x, y)
        loss.backward()
        self.t += 1
        rho_inf = 2 / (1 - b2) - 1
        rho = rho_inf - 2 * self.t * b2 ** self.t / (1 - b2 ** self.t)
        with torch.no_grad():
            for i, p in enumerate(self.net.parameters()):
                m, v = getattr(self, f"m{i}"), getattr(self, f"v{i}")
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                mh = m / (1 - b1 ** self.t)
                if rho > 5:
                    r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
                    p.sub_(lr * r * mh / ((v / (1 - b2 ** self.t)).sqrt() + 1e-8))
                else:
                    p.sub_(lr * mh)
                p.grad = None
        return loss.detach()


case("radam_python_step_rho_branch_buffers", lambda: (R(4, 5), R(4, 2)), train=True, ncalls=7)(lambda: RAdam())


class AdagradAdadelta(HandOpt):
    """Adagrad and Adadelta side by side on two parameter groups: sum_sq.addcmul_, addcdiv_ with a
    sqrt().add_(eps) denominator, Adadelta's running delta accumulators."""

    def __init__(self):
        super().__init__()
        ps = list(self.net.parameters())
        self.st = [torch.zeros_like(p) for p in ps]
        self.acc_delta = [torch.zeros_like(p) for p in ps]

    def forward(self, x, y):
        loss = self.loss(x, y)
        loss.backward()
        with torch.no_grad():
            for i, p in enumerate(self.net.parameters()):
                g = p.grad
                if i < 2:
                    self.st[i].addcmul_(g, g, value=1)
                    p.addcdiv_(g, self.st[i].sqrt().add_(1e-10), value=-0.1)
                else:
                    self.st[i].mul_(0.9).addcmul_(g, g, value=0.1)
                    std = self.st[i].add(1e-6).sqrt_()
                    delta = self.acc_delta[i].add(1e-6).sqrt_().div_(std).mul_(g)
                    self.acc_delta[i].mul_(0.9).addcmul_(delta, delta, value=0.1)
                    p.add_(delta, alpha=-1.0)
            self.net.zero_grad(set_to_none=True)
        return loss.detach(), [s.clone() for s in self.st]


case("adagrad_adadelta_state_lists_addcdiv_inplace", lambda: (R(4, 5), R(4, 2)), train=True)(lambda: AdagradAdadelta())


class NAdamYogi(HandOpt):
    """NAdam's momentum-decay schedule (mu_t from a Python float product kept on the module) with
    Yogi's sign-based second moment v -= (1 - b2) sign(v - g^2) g^2."""

    def __init__(self):
        super().__init__()
        self.mu_prod = 1.0
        self.t = 0
        self.state_ = {n: (torch.zeros_like(p), torch.full_like(p, 1e-6)) for n, p in self.net.named_parameters()}

    def forward(self, x, y, lr=1e-2, b1=0.9, b2=0.999):
        loss = self.loss(x, y)
        loss.backward()
        self.t += 1
        mu = b1 * (1 - 0.5 * 0.96 ** (self.t * 0.004))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((self.t + 1) * 0.004))
        self.mu_prod *= mu
        with torch.no_grad():
            for n, p in self.net.named_parameters():
                m, v = self.state_[n]
                g = p.grad
                m.lerp_(g, 1 - b1)
                g2 = g * g
                v.sub_((1 - b2) * torch.sign(v - g2) * g2)
                upd = (1 - mu) * g / (1 - self.mu_prod) + mu_next * m / (1 - self.mu_prod * mu_next)
                p.addcdiv_(upd, v.sqrt() + 1e-3, value=-lr)
                p.grad = None
        return loss.detach()


case("nadam_yogi_python_float_mu_product_sign", lambda: (R(4, 5), R(4, 2)), train=True, ncalls=4)(lambda: NAdamYogi())


class LARS(HandOpt):
    """LARS: trust ratio eta * |w| / (|g| + wd |w|) with where(|w| > 0 and |g| > 0), 1-d
    parameters (biases) excluded by p.ndim, momentum buffers in a dict keyed by name."""

    def __init__(self):
        super().__init__()
        self.buf = {}

    def forward(self, x, y, lr=0.1, wd=1e-4, eta=1e-3):
        loss = self.loss(x, y)
        loss.backward()
        with torch.no_grad():
            for n, p in self.net.named_parameters():
                g = p.grad
                if p.ndim > 1:
                    g = g.add(p, alpha=wd)
                    wn, gn = torch.norm(p), torch.norm(g)
                    q = torch.where(wn > 0, torch.where(gn > 0, eta * wn / gn, torch.ones_like(wn)), torch.ones_like(wn))
                    g = g.mul(q)
                if n not in self.buf:
                    self.buf[n] = torch.clone(g).detach()
                else:
                    self.buf[n].mul_(0.9).add_(g)
                p.add_(self.buf[n], alpha=-lr)
                p.grad = None
        return loss.detach()


case("lars_trust_ratio_ndim_exclusion_dict_buffers", lambda: (R(4, 5), R(4, 2)), train=True)(lambda: LARS())


class Lookahead(HandOpt):
    """Lookahead over SGD: slow weights cloned on the first call (a None check), every k-th step
    (a Python counter modulo) slow += alpha (fast - slow) and fast.copy_(slow)."""

    def __init__(self, k=2):
        super().__init__()
        self.k, self.steps, self.slow = k, 0, None

    def forward(self, x, y):
        if self.slow is None:
            self.slow = [p.detach().clone() for p in self.net.parameters()]
        loss = self.loss(x, y)
        loss.backward()
        self.steps += 1
        with torch.no_grad():
            for p in self.net.parameters():
                p.sub_(0.1 * p.grad)
                p.grad = None
            if self.steps % self.k == 0:
                for p, q in zip(self.net.parameters(), self.slow):
                    q.add_(p - q, alpha=0.5)
                    p.copy_(q)
        return loss.detach()


case("lookahead_slow_weights_counter_modulo_copy", lambda: (R(4, 5), R(4, 2)), train=True, ncalls=5)(lambda: Lookahead())


class Sophia(HandOpt):
    """Sophia-G: EMA of gradients, a Hessian EMA from squared gradients every other step (Python
    parity), update clamp(m / max(rho h, eps), -1, 1), decoupled weight decay."""

    def __init__(self):
        super().__init__()
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.net.parameters()]
        self.h = [torch.zeros_like(p) for p in self.net.parameters()]

    def forward(self, x, y, lr=0.01, rho=0.05):
        loss = self.loss(x, y)
        loss.backward()
        self.t += 1
        with torch.no_grad():
            for p, m, h in zip(self.net.parameters(), self.m, self.h):
                m.mul_(0.96).add_(p.grad, alpha=0.04)
                if self.t % 2 == 1:
                    h.mul_(0.99).addcmul_(p.grad, p.grad, value=0.01 * x.shape[0])
                p.mul_(1 - lr * 0.1)
                ratio = (m.abs() / (rho * h).clamp(min=1e-15)).clamp(max=1)
                p.addcmul_(m.sign(), ratio, value=-lr)
                p.grad = None
        return loss.detach()


case("sophia_hessian_ema_parity_clamped_ratio", lambda: (R(4, 5), R(4, 2)), train=True, ncalls=4)(lambda: Sophia())


@fn_case("shampoo_preconditioner_eigh_inverse_root", lambda i=0: (R(5, 4), R(5, 5) * 0.1, R(4, 4) * 0.1))
def shampoo_preconditioner_eigh_inverse_root(g, L0, R0, eps=1e-4):
    """Shampoo: L += G G^T, R += G^T G, inverse 4th roots through eigh with eigenvalues clamped,
    the preconditioned gradient L^-1/4 G R^-1/4, grafted to the gradient's norm."""
    L = L0 @ L0.t() + g @ g.t()
    Rm = R0 @ R0.t() + g.t() @ g

    def inv_root(m, p=4):
        vals, vecs = torch.linalg.eigh(m + eps * torch.eye(m.shape[0]))
        vals = vals.clamp(min=eps).pow(-1.0 / p)
        return vecs @ torch.diag(vals) @ vecs.t()

    pg = inv_root(L) @ g @ inv_root(Rm)
    return pg * (g.norm() / pg.norm().clamp(min=1e-16)), inv_root(L)


class GradCentralization(HandOpt):
    """Gradient centralisation then SGD with torch._foreach ops: grads of ndim > 1 minus their mean
    over all but dim 0 (in place), _foreach_mul_ momentum, _foreach_add_ into the parameters."""

    def __init__(self):
        super().__init__()
        self.mom = [torch.zeros_like(p) for p in self.net.parameters()]

    def forward(self, x, y):
        loss = self.loss(x, y)
        loss.backward()
        with torch.no_grad():
            ps = list(self.net.parameters())
            gs = [p.grad for p in ps]
            for g in gs:
                if g.dim() > 1:
                    g.add_(-g.mean(dim=tuple(range(1, g.dim())), keepdim=True))
            torch._foreach_mul_(self.mom, 0.9)
            torch._foreach_add_(self.mom, gs)
            torch._foreach_add_(ps, self.mom, alpha=-0.05)
            for p in ps:
                p.grad = None
        return loss.detach()


case("gradient_centralization_foreach_mul_add", lambda: (R(4, 5), R(4, 2)), train=True)(lambda: GradCentralization())


def _flip_sgd_flags(m, i):
    m.nesterov = i % 2 == 1
    m.maximize = i == 2
    m.wd = 0.0 if i == 3 else 1e-2


class SGDFlags(HandOpt):
    """torch.optim.SGD's single-tensor step by hand, its flags (nesterov, maximize, weight decay)
    flipped between calls as module attributes: every call takes another branch."""

    def __init__(self):
        super().__init__()
        self.nesterov, self.maximize, self.wd = False, False, 1e-2
        self.buf = [None] * len(list(self.net.parameters()))

    def forward(self, x, y):
        loss = self.loss(x, y)
        loss.backward()
        with torch.no_grad():
            for i, p in enumerate(self.net.parameters()):
                g = p.grad if not self.maximize else -p.grad
                if self.wd != 0:
                    g = g.add(p, alpha=self.wd)
                if self.buf[i] is None:
                    self.buf[i] = torch.clone(g).detach()
                else:
                    self.buf[i].mul_(0.9).add_(g, alpha=0.9)
                g = g.add(self.buf[i], alpha=0.9) if self.nesterov else self.buf[i]
                p.add_(g, alpha=-0.05)
                p.grad = None
        return loss.detach()


case("sgd_flags_nesterov_maximize_flipped_between_calls", lambda: (R(4, 5), R(4, 2)), train=True, ncalls=4,
     between=_flip_sgd_flags)(lambda: SGDFlags())


# ============================================================================== quantisation
class PACT(nn.Module):
    """PACT: a learnable clipping level alpha, y = 0.5 (|x| - |x - alpha| + alpha), k-bit uniform
    quantisation with a straight-through round (x + (round(x) - x).detach()), backward."""

    def __init__(self, bits=4):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(2.0))
        self.lin = nn.Linear(6, 6)
        self.levels = 2 ** bits - 1

    def forward(self, x):
        h = self.lin(x)
        y = 0.5 * (h.abs() - (h - self.alpha).abs() + self.alpha)
        s = self.levels / self.alpha
        q = y * s
        q = q + (torch.round(q) - q).detach()
        out = q / s
        out.sum().backward()
        return out.detach(), self.alpha.grad.clone()


case("pact_learnable_alpha_ste_round_backward", lambda: (R(4, 6) * 2,), train=True)(lambda: PACT())


@fn_case("dorefa_tanh_weight_quant_k_bits_change", lambda i=0: (R(6, 5), 2 + i))
def dorefa_tanh_weight_quant_k_bits_change(w, k):
    """DoReFa weights: tanh normalised by 2 max|tanh w| to [0, 1], k-bit rounding (k a Python int
    that changes per call), back to [-1, 1]; k == 32 passes through."""
    if k == 32:
        return w
    n = float(2 ** k - 1)
    t = torch.tanh(w)
    t = t / (2 * t.abs().max()) + 0.5
    return 2 * (torch.round(t * n) / n) - 1


@fn_case("xnor_binary_weights_mean_abs_sign_zero", lambda i=0: (R(4, 3, 3, 3), R(2, 3, 6, 6)))
def xnor_binary_weights_mean_abs_sign_zero(w, x):
    """XNOR-Net: per-output-channel alpha = mean |w|, binarised by where(w >= 0, 1, -1) (sign(0)
    would be 0: a zeroed weight row), the input's K = mean |x| over channels box-filtered."""
    w = w.clone()
    w[0, 0] = 0
    alpha = w.abs().mean(dim=(1, 2, 3), keepdim=True)
    wb = torch.where(w >= 0, torch.ones_like(w), -torch.ones_like(w)) * alpha
    xb = torch.sign(x)
    K = F.avg_pool2d(x.abs().mean(1, keepdim=True), 3, 1, 1)
    return F.conv2d(xb, wb, padding=1) * K, torch.sign(w).sum()


@fn_case("stochastic_rounding_generator_floor_rand", lambda i=0: (R(5, 7) * 3, 17 + i))
def stochastic_rounding_generator_floor_rand(x, seed):
    """Stochastic rounding: floor(x / s + U[0, 1)) with a seeded generator, to int8 with clamping,
    the expected value check against x, float16 storage of the dequantised values."""
    g = torch.Generator().manual_seed(seed)
    s = x.abs().amax() / 127
    q = torch.floor(x / s + torch.rand(x.shape, generator=g)).clamp(-128, 127).to(torch.int8)
    dq = q.float() * s
    return q, dq.half(), (dq - x).abs().max() <= s


@fn_case("mx_block_shared_exponent_frexp_int8", lambda i=0: (R(4, 64) * 10 ** (i - 1),))
def mx_block_shared_exponent_frexp_int8(x, block=32):
    """MX-style microscaling: blocks of 32, the shared exponent floor(log2(amax)) via frexp, a
    power-of-two scale 2^(e - 6) by ldexp, int8 mantissas with round and clamp; zero blocks."""
    x = x.clone()
    x[0, :32] = 0
    xb = x.view(x.shape[0], -1, block)
    amax = xb.abs().amax(-1, keepdim=True)
    _, e = torch.frexp(amax)
    e = torch.where(amax == 0, torch.zeros_like(e), e - 1)
    scale = torch.ldexp(torch.ones_like(amax), e - 6)
    q = torch.round(xb / scale).clamp(-127, 127).to(torch.int8)
    return (q.float() * scale).view_as(x), e.squeeze(-1)


@fn_case("log2_power_of_two_quant_sign_zeros", lambda: (R(6, 6),))
def log2_power_of_two_quant_sign_zeros(x):
    """Logarithmic (power-of-two) quantisation: sign * 2^round(log2|x|) clamped to [-8, 0] in the
    exponent, exact zeros kept zero (log2(0) = -inf guarded by where)."""
    x = x.clone()
    x[::2, 0] = 0
    e = torch.round(torch.log2(x.abs())).clamp(-8, 0)
    q = torch.where(x == 0, torch.zeros_like(x), torch.sign(x) * torch.pow(2.0, e))
    return q, e.nan_to_num(neginf=-99)


@fn_case("gptq_column_loop_cholesky_inverse_error_feedback", lambda: (R(4, 6), R(16, 6)))
def gptq_column_loop_cholesky_inverse_error_feedback(w, x, bits=3):
    """GPTQ's inner loop: H = 2 X^T X + damp I, H^-1 by cholesky_inverse and its upper Cholesky
    factor, columns quantised one at a time, the error fed into the remaining columns in place."""
    w = w.clone()
    H = 2 * x.t() @ x
    H += 0.01 * torch.mean(torch.diag(H)) * torch.eye(H.shape[0])
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    maxq = 2 ** bits - 1
    scale = (w.amax(1) - w.amin(1)).clamp(min=1e-8) / maxq
    zero = torch.round(-w.amin(1) / scale)
    q = torch.zeros_like(w)
    for i in range(w.shape[1]):
        col = w[:, i]
        qq = (torch.clamp(torch.round(col / scale) + zero, 0, maxq) - zero) * scale
        q[:, i] = qq
        err = (col - qq) / Hinv[i, i]
        w[:, i:] -= err[:, None] * Hinv[i, i:][None]
    return q, w


@fn_case("awq_scale_grid_search_python_best_ratio", lambda: (R(8, 6), R(6, 4) * torch.tensor([1.0, 5.0, 0.2, 1.0]), R(6)))
def awq_scale_grid_search_python_best_ratio(x, w, act_mag):
    """AWQ's scale search: for ratios in a Python grid, s = act_mag^r, weights scaled and 4-bit
    fake-quantised per output column, the output error's .item() compared in Python, the best
    scales returned (a data-dependent choice)."""
    act_mag = act_mag.abs() + 1e-4
    ref = x @ w
    best, best_s, errs = float("inf"), None, []
    for r in [0.0, 0.25, 0.5, 0.75]:
        s = act_mag.pow(r).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        ws = w * s[:, None]
        mx = ws.abs().amax(0, keepdim=True) / 7
        wq = torch.round(ws / mx).clamp(-8, 7) * mx / s[:, None]
        err = (x @ wq - ref).pow(2).mean().item()
        errs.append(err)
        if err < best:
            best, best_s = err, s
    return best_s, errs


# ===================================================================================== audio
def _hz_to_mel(f):
    return 2595.0 * torch.log10(1.0 + f / 700.0)


def _mel_to_hz(m):
    return 700.0 * (10 ** (m / 2595.0) - 1.0)


@fn_case("mel_filterbank_by_hand_triangles_slaney_norm", lambda i=0: (U(2, 33, 5 + i),))
def mel_filterbank_by_hand_triangles_slaney_norm(spec, sr=16000, n_mels=8):
    """A mel filterbank built in forward (torchaudio.functional.melscale_fbanks by hand): mel
    points by linspace, triangles from slopes, max(0, min(down, up)), Slaney area normalisation,
    applied to a power spectrogram, then log(clamp(min=1e-10))."""
    n_freqs = spec.shape[1]
    all_freqs = torch.linspace(0, sr // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel(torch.tensor(0.0)), _hz_to_mel(torch.tensor(sr / 2.0)), n_mels + 2)
    f_pts = _mel_to_hz(m_pts)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = torch.max(torch.zeros(1), torch.min(down, up))
    enorm = 2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])
    fb = fb * enorm.unsqueeze(0)
    mel = torch.matmul(spec.transpose(1, 2), fb).transpose(1, 2)
    return torch.log(mel.clamp(min=1e-10)), fb


@fn_case("mfcc_dct_ortho_matrix_lifter", lambda: (R(2, 10, 7),))
def mfcc_dct_ortho_matrix_lifter(logmel, n_mfcc=6, lifter=22):
    """MFCCs: a DCT-II matrix with ortho normalisation (the first row scaled by 1/sqrt(2)) built by
    outer products and cos, applied over mel bins, sinusoidal liftering, CMN over time."""
    n = logmel.shape[1]
    k = torch.arange(n, dtype=torch.float32)
    dct = torch.cos(math.pi / n * (k + 0.5).unsqueeze(1) * torch.arange(n_mfcc).float())
    dct[:, 0] *= 1.0 / math.sqrt(2.0)
    dct *= math.sqrt(2.0 / n)
    mf = torch.matmul(logmel.transpose(1, 2), dct).transpose(1, 2)
    lift = 1 + (lifter / 2) * torch.sin(math.pi * torch.arange(n_mfcc).float() / lifter)
    mf = mf * lift[:, None]
    return mf - mf.mean(-1, keepdim=True)


@fn_case("si_sdr_zero_mean_projection_silent_target", lambda: (R(3, 64), R(3, 64)))
def si_sdr_zero_mean_projection_silent_target(est, ref, eps=1e-8):
    """Scale-invariant SDR: zero-mean signals, the projection alpha = <est, ref> / |ref|^2 (+eps),
    10 log10 of the energies' ratio; one silent reference (alpha 0, -inf avoided by eps)."""
    ref = ref.clone()
    ref[1] = 0
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    alpha = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + eps)
    proj = alpha * ref
    noise = est - proj
    return 10 * torch.log10((proj.pow(2).sum(-1) + eps) / (noise.pow(2).sum(-1) + eps))


class Biquad(nn.Module):
    """A biquad low-pass (RBJ cookbook coefficients from a Python cutoff) run by a Python loop over
    time, direct form I with y written into a preallocated tensor by column."""

    def __init__(self, sr=16000.0, fc=2000.0, q=0.707):
        super().__init__()
        w0 = 2 * math.pi * fc / sr
        al = math.sin(w0) / (2 * q)
        b = [(1 - math.cos(w0)) / 2, 1 - math.cos(w0), (1 - math.cos(w0)) / 2]
        a = [1 + al, -2 * math.cos(w0), 1 - al]
        self.b = [v / a[0] for v in b]
        self.a = [v / a[0] for v in a]

    def forward(self, x):
        y = torch.zeros_like(x)
        for t in range(x.shape[1]):
            acc = self.b[0] * x[:, t]
            if t >= 1:
                acc = acc + self.b[1] * x[:, t - 1] - self.a[1] * y[:, t - 1]
            if t >= 2:
                acc = acc + self.b[2] * x[:, t - 2] - self.a[2] * y[:, t - 2]
            y[:, t] = acc
        return y


case("biquad_lowpass_python_time_loop_column_writes", lambda i=0: (R(2, 12 + 2 * i),))(lambda: Biquad())


@fn_case("multi_resolution_spectral_loss_unfold_rfft", lambda i=0: (R(2, 128), R(2, 128)))
def multi_resolution_spectral_loss_unfold_rfft(x, y):
    """A multi-resolution STFT loss without torch.stft: frames by unfold with a hann window per
    resolution, rfft magnitudes clamped, spectral convergence (Frobenius ratio) + log-magnitude L1."""
    total = 0
    for n_fft, hop in [(32, 8), (16, 4)]:
        win = torch.hann_window(n_fft)
        fx = torch.fft.rfft(x.unfold(-1, n_fft, hop) * win).abs().clamp(min=1e-7)
        fy = torch.fft.rfft(y.unfold(-1, n_fft, hop) * win).abs().clamp(min=1e-7)
        sc = torch.norm(fy - fx, p="fro") / torch.norm(fy, p="fro")
        mag = F.l1_loss(torch.log(fy), torch.log(fx))
        total = total + sc + mag
    return total


@fn_case("loudness_rms_db_gain_clamp_silent_rows", lambda i=0: (R(3, 50) * 0.1, -20.0 - 3 * i))
def loudness_rms_db_gain_clamp_silent_rows(x, target_db):
    """Loudness normalisation: RMS per clip, dBFS = 20 log10(rms + eps), a gain towards the Python
    target clamped to +-24 dB, a silent row (gain capped), peak limiting by clamp(-1, 1)."""
    x = x.clone()
    x[2] = 0
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    db = 20 * torch.log10(rms + 1e-9)
    gain = torch.clamp(target_db - db, -24, 24)
    y = x * torch.pow(10.0, gain / 20)
    return y.clamp(-1, 1), db.squeeze(-1)


# ================================================================================== metrics
@fn_case("average_precision_sort_cumsum_no_positive_class", lambda i=0: (U(3, 20), (U(3, 20) > 0.6)))
def average_precision_sort_cumsum_no_positive_class(scores, labels):
    """Per-class average precision: sort descending, TP / FP cumsums, precision at each positive,
    AP = sum(precision * is_tp) / n_pos; a class with no positives gives NaN (0 / 0), mAP by
    nanmean."""
    labels = labels.clone()
    labels[1] = False
    order = scores.argsort(1, descending=True)
    tp = labels.gather(1, order).float()
    ctp = tp.cumsum(1)
    prec = ctp / torch.arange(1, scores.shape[1] + 1).float()
    ap = (prec * tp).sum(1) / tp.sum(1)
    return ap, torch.nanmean(ap)


@fn_case("ndcg_at_k_log2_discount_zero_idcg", lambda i=0: (R(3, 10), I(0, 4, 3, 10), 5 - i))
def ndcg_at_k_log2_discount_zero_idcg(scores, rel, k):
    """NDCG@k: gains 2^rel - 1 at the top-k predicted positions, log2(rank + 1) discounts, IDCG from
    the sorted relevances; a query with no relevant items -> 0 by where; k changes per call."""
    rel = rel.clone()
    rel[2] = 0
    _, idx = scores.topk(k, dim=1)
    disc = 1.0 / torch.log2(torch.arange(2, k + 2).float())
    dcg = ((2 ** rel.gather(1, idx) - 1).float() * disc).sum(1)
    ideal = rel.sort(1, descending=True)[0][:, :k]
    idcg = ((2 ** ideal - 1).float() * disc).sum(1)
    return torch.where(idcg > 0, dcg / idcg, torch.zeros_like(dcg))


@fn_case("spearman_double_argsort_ranks_pearson", lambda: (R(4, 12), R(4, 12)))
def spearman_double_argsort_ranks_pearson(a, b):
    """Spearman correlation as Pearson of ranks from a double argsort (ties broken by order),
    Pearson by centred cosine, a constant row (zero variance: NaN)."""
    b = b.clone()
    b[3] = 1.0
    ra = a.argsort(1).argsort(1).float()
    rb = b.argsort(dim=1, stable=True).argsort(1).float()

    def pearson(x, y):
        x = x - x.mean(1, keepdim=True)
        y = y - y.mean(1, keepdim=True)
        return (x * y).sum(1) / (x.norm(dim=1) * y.norm(dim=1))
    return pearson(ra, rb), pearson(a, b)


@fn_case("expected_calibration_error_bucketize_bins", lambda i=0: (R(64, 5) * (1 + i), I(0, 5, 64)))
def expected_calibration_error_bucketize_bins(logits, labels, n_bins=10):
    """ECE: confidences and correctness, bins by bucketize on linspace boundaries (right=True),
    per-bin counts / accuracy / confidence sums by bincount with weights, empty bins skipped."""
    p = logits.softmax(1)
    conf, pred = p.max(1)
    acc = (pred == labels).float()
    bnd = torch.linspace(0, 1, n_bins + 1)
    b = torch.bucketize(conf, bnd[1:-1], right=True)
    cnt = torch.bincount(b, minlength=n_bins).float()
    sa = torch.bincount(b, weights=acc, minlength=n_bins)
    sc = torch.bincount(b, weights=conf, minlength=n_bins)
    gap = torch.where(cnt > 0, (sa - sc).abs() / cnt.clamp(min=1), torch.zeros_like(cnt))
    return (gap * cnt).sum() / cnt.sum(), cnt


@fn_case("cohen_kappa_mcc_from_bincount_confusion", lambda i=0: (I(0, 3, 40), I(0, 3, 40)))
def cohen_kappa_mcc_from_bincount_confusion(pred, target, k=3):
    """Cohen's kappa and the multiclass Matthews correlation from a confusion matrix made by
    bincount(target * k + pred); a perfect agreement call (p_e = 1 would divide 0 / 0)."""
    cm = torch.bincount(target * k + pred, minlength=k * k).view(k, k).double()
    n = cm.sum()
    po = cm.diag().sum() / n
    pe = (cm.sum(0) * cm.sum(1)).sum() / n ** 2
    kappa = (po - pe) / (1 - pe)
    t, p = cm.sum(1), cm.sum(0)
    c = cm.diag().sum()
    mcc = (c * n - (t * p).sum()) / torch.sqrt((n ** 2 - (p * p).sum()) * (n ** 2 - (t * t).sum()))
    return cm.long(), kappa, mcc


@fn_case("mrr_recall_at_k_rank_by_comparison_ties", lambda i=0: (torch.round(R(6, 15) * 2) / 2, I(0, 15, 6)))
def mrr_recall_at_k_rank_by_comparison_ties(scores, target, ks=(1, 5)):
    """Retrieval metrics from the target's rank: (scores > target score).sum + 1 (optimistic on
    ties) and >= (pessimistic), MRR and recall@k as a dict of floats by .item()."""
    ts = scores.gather(1, target[:, None])
    rank_opt = (scores > ts).sum(1) + 1
    rank_pes = (scores >= ts).sum(1)
    out = {"mrr": (1.0 / rank_opt.float()).mean().item()}
    for k in ks:
        out[f"r@{k}"] = (rank_pes <= k).float().mean().item()
    return out, rank_opt


# ============================================================================ ragged batches
class LastTokenPool(nn.Module):
    """HF sequence classification's pooling: sequence_lengths = eq(ids, pad).int().argmax(-1) - 1,
    modulo the length (no padding -> argmax 0 -> -1 -> last), logits[arange(b), lengths]."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.head = nn.Linear(6, 3)
        self.pad = 0

    def forward(self, ids):
        logits = self.head(torch.tanh(self.emb(ids).cumsum(1)))
        seq = torch.eq(ids, self.pad).int().argmax(-1) - 1
        seq = seq % ids.shape[-1]
        return logits[torch.arange(ids.shape[0]), seq], seq


def _ids_pad(i=0):
    ids = I(1, 10, 3, 7 + i)
    ids[0, 4:] = 0
    ids[2, 1:] = 0
    return (ids,)


case("hf_last_token_pool_pad_argmax_modulo", _ids_pad)(lambda: LastTokenPool())


@fn_case("flash_attn_unpad_nonzero_cu_seqlens_repad", lambda i=0: (R(3, 6, 4), torch.arange(6)[None] < torch.tensor([[6], [2 + i], [1]])))
def flash_attn_unpad_nonzero_cu_seqlens_repad(h, mask):
    """flash_attn.bert_padding: seqlens by sum(int32), indices = nonzero(mask.flatten()), cu_seqlens
    = F.pad(cumsum(int32), (1, 0)), max_seqlen .item(), tokens gathered, a per-token op, then
    scattered back into zeros by index_put."""
    seqlens = mask.sum(-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    max_len = seqlens.max().item()
    cu = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    tok = h.reshape(-1, h.shape[-1])[indices]
    tok = tok * torch.sigmoid(tok)
    out = torch.zeros(h.shape[0] * h.shape[1], h.shape[-1])
    out[indices] = tok
    return out.view_as(h), cu, max_len


@fn_case("segment_max_sorted_offsets_empty_segments", lambda i=0: (R(10, 3), torch.tensor([0, 3, 3, 7, 10 - i])))
def segment_max_sorted_offsets_empty_segments(x, offsets):
    """segment_csr-style max / sum over offsets: segment ids by repeat_interleave of the offsets'
    diffs (an empty segment), scatter_reduce amax with include_self=False (empty -> 0), a
    trailing part past the last offset dropped."""
    n = offsets[-1]
    lengths = offsets.diff()
    seg = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    xs = x[:n]
    mx = torch.zeros(len(lengths), 3).scatter_reduce(0, seg[:, None].expand(-1, 3), xs, "amax", include_self=False)
    sm = torch.zeros(len(lengths), 3).index_add_(0, seg, xs)
    return mx, sm, lengths


@fn_case("list_of_variable_tensors_pad_sequence_lengths", lambda i=0: ([R(3 + i, 4), R(5, 4), R(1 + 2 * i, 4)],))
def list_of_variable_tensors_pad_sequence_lengths(seqs):
    """A list of variable-length tensors (lengths change per call): pad_sequence batch_first with a
    padding value, lengths as a tensor from a Python list, a mask by arange < lengths, masked mean."""
    lengths = torch.tensor([s.shape[0] for s in seqs])
    x = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=-1.0)
    mask = torch.arange(x.shape[1])[None] < lengths[:, None]
    mean = (x * mask[..., None]).sum(1) / lengths[:, None]
    return x, mask, mean


# =========================================================================== in-place on views
@fn_case("barlow_twins_off_diagonal_flatten_view_trick", lambda i=0: (R(8, 5), R(8, 5)))
def barlow_twins_off_diagonal_flatten_view_trick(z1, z2, lambd=5e-3):
    """Barlow Twins: the cross-correlation of batch-normalised embeddings, on-diagonal
    c.diagonal().add_(-1).pow_(2).sum() written in place on the view, off-diagonal elements by
    c.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()."""
    bn = lambda z: (z - z.mean(0)) / z.std(0, unbiased=False)  # noqa: E731
    c = bn(z1).T @ bn(z2) / z1.shape[0]
    n = c.shape[0]
    off = c.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten().pow(2).sum()
    on = torch.diagonal(c).add_(-1).pow_(2).sum()
    return on + lambd * off, c


@fn_case("diagonal_transpose_strided_inplace_writes_chain", lambda i=0: (R(5, 5),))
def diagonal_transpose_strided_inplace_writes_chain(x):
    """In-place writes through views: diagonal add_, a row of the transpose mul_, every other
    column zero_, a narrow().select() fill_, unsqueeze_ on a clone, t_(); the base read back."""
    y = x.clone()
    y.diagonal().add_(1.0)
    y.T[0].mul_(2.0)
    y[:, ::2].zero_()
    y.narrow(0, 1, 3).select(1, 1).fill_(-3.0)
    z = y.clone()
    z.unsqueeze_(0)
    w = y.clone().t_()
    w[1:3, 1:3] += 10
    return y, z, w


@fn_case("out_arguments_into_slices_of_buffer", lambda: (R(3, 4), R(3, 4)))
def out_arguments_into_slices_of_buffer(a, b):
    """out= into slices of a preallocated buffer: torch.add(out=buf[0]) (contiguous), torch.mul
    (out=buf[1, :, 1:]) a non-contiguous slice, torch.sum(out=) of a 1-element view."""
    buf = torch.zeros(3, 3, 5)
    torch.add(a, b, out=buf[0, :, :4])
    torch.mul(a, b, out=buf[1, :, 1:])
    torch.sum(a, dim=1, out=buf[2, :, 0])
    torch.clamp(b, -0.5, 0.5, out=buf[2, :, 1:])
    return buf


@fn_case("input_view_mutation_narrow_select_index_copy", lambda i=0: (R(4, 6), torch.tensor([0, 2])))
def input_view_mutation_narrow_select_index_copy(x, idx):
    """The function writes into its argument through views: narrow + select fill_, an index_copy_
    into a transposed view, masked_fill_ on a strided slice; returns a view of the argument."""
    x.narrow(1, 1, 2).select(0, 0).fill_(0.0)
    x.t().index_copy_(1, idx, torch.ones(6, 2))
    x[:, ::3].masked_fill_(x[:, ::3] > 0.5, 0.5)
    return x[1:, 2:]


@fn_case("expanded_clone_index_put_accumulate_bool_mask", lambda i=0: (R(1, 6), I(0, 6, 8), R(8), U(4, 6) > 0.5))
def expanded_clone_index_put_accumulate_bool_mask(row, idx, vals, mask):
    """An expanded row cloned (contiguous), index_put_ accumulate with duplicate indices into one
    row, a boolean-mask assignment from a tensor, add_ of a broadcast view into a slice."""
    t = row.expand(4, 6).clone()
    t[1].index_put_((idx,), vals, accumulate=True)
    t[mask] = -t[mask]
    t[2:].add_(row)
    return t


# ============================================================================== mixed dtypes
@fn_case("mixed_int64_bool_f16_bf16_f64_arithmetic", lambda i=0: (I(-5, 5, 6), U(6) > 0.5, R(6).half(), R(6).bfloat16(), R(6).double()))
def mixed_int64_bool_f16_bf16_f64_arithmetic(i64, b, h, bf, d):
    """Promotion across dtypes in one function: int64 + bool, int64 * f16 (-> f16), f16 + bf16
    (-> f32), bf16 * f64 0-d (stays bf16), f64 accumulations, bool sums, int true division."""
    a = i64 + b
    c = i64 * h
    e = h + bf
    f = bf * d[0]
    g = (d * h).sum()
    return a, c, e, f, g, b.sum(), i64 / 3, (i64 // 2).to(torch.int32) * 3


class HalfWeightsFloatInput(nn.Module):
    """A model whose weights are float16 (module.half()) called with float32 inputs cast at the
    start, a float32 LayerNorm in between by .float(), the result cast back to the input dtype."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).half()
        self.ln = nn.LayerNorm(8)
        self.b = nn.Linear(8, 4).half()

    def forward(self, x):
        h = self.a(x.half())
        h = self.ln(h.float()).half()
        return self.b(F.gelu(h)).to(x.dtype)


case("half_weights_float_input_cast_layernorm_fp32", lambda i=0: (R(3, 8),))(lambda: HalfWeightsFloatInput())


@fn_case("int32_index_arithmetic_promotion_overflow", lambda i=0: (I(0, 1000, 6, dtype=torch.int32), I(0, 100000, 6, dtype=torch.int32)))
def int32_index_arithmetic_promotion_overflow(a, b):
    """int32 index arithmetic: a * 100000 + b wraps in int32 (like the C kernels), the same in
    int64 by .long() first, Python int promotion (int32 stays int32), % and // of negatives."""
    w32 = a * 100000 + b
    w64 = a.long() * 100000 + b
    neg = (a - 500)
    return w32, w64, neg % 7, neg // 7, (a * 3).dtype == torch.int32, torch.remainder(neg, -7)


# ================================================================================== layouts
class ChannelsLastDepthwise(nn.Module):
    """A channels_last input through a depthwise conv, permute + reshape to tokens (view would fail
    on channels_last), the memory format of the output kept as eager's."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.pw = nn.Linear(6, 4)

    def forward(self, x):
        h = self.dw(x)
        tok = h.permute(0, 2, 3, 1).reshape(x.shape[0], -1, 6)
        return self.pw(tok), h, h.is_contiguous(memory_format=torch.channels_last)


case("channels_last_depthwise_tokens_reshape", lambda i=0: (R(2, 6, 5, 4 + i).to(memory_format=torch.channels_last),))(
    lambda: ChannelsLastDepthwise())


@fn_case("transposed_input_layernorm_cumsum_inplace", lambda i=0: (R(6, 4).t() if i < 2 else R(4, 6),))
def transposed_input_layernorm_cumsum_inplace(x):
    """A transposed (non-contiguous) input on the first calls, a contiguous one later: layer_norm
    over the last dim, cumsum written back in place into a clone's slice, stride-dependent
    .view via reshape."""
    y = F.layer_norm(x, (x.shape[-1],))
    z = x.clone()
    z[:, 1:] = z[:, 1:].cumsum(1)
    return y, z, x.reshape(-1)[::2]


@fn_case("sliced_step_inputs_conv1d_and_bmm", lambda i=0: (R(2, 4, 20)[:, :, ::2], R(3, 8, 5)[:, ::2].transpose(1, 2)))
def sliced_step_inputs_conv1d_and_bmm(x, m):
    """Inputs that are strided slices (step 2) and transposes: conv1d with a constant kernel, bmm
    with its transpose, an elementwise op keeping the strides."""
    k = torch.ones(4, 4, 3) / 12
    return F.conv1d(x, k, padding=1), torch.bmm(m, m.transpose(1, 2)), (x * 2).stride()


# ============================================================================ 0-size, 1-element
class ZeroBatch(nn.Module):
    """A batch of 0 then 1 then 3 rows: layer_norm, softmax, cat with an empty tensor, topk with
    k = 0, mean over an empty dim (NaN), max over a non-empty dim."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)
        self.ln = nn.LayerNorm(5)

    def forward(self, x):
        h = self.ln(self.lin(x)).softmax(-1)
        e = torch.cat([h, torch.empty(0, 5)], 0)
        tk = torch.topk(h, 0, dim=-1).values
        return e, tk, h.mean(0), h.amax(-1), h.sum(0)


case("zero_one_three_row_batches_norm_topk0_mean", lambda i=0: (R([0, 1, 3, 0][i], 4),), ncalls=4)(lambda: ZeroBatch())


@fn_case("one_element_std_var_nan_argmax_max_empty_raises", lambda i=0: (R(1 if i != 2 else 0),))
def one_element_std_var_nan_argmax_max_empty_raises(x):
    """One-element tensors: unbiased std / var NaN, argmax 0, a 0-d squeeze; on the third call an
    empty tensor: max() of it raises (both eager and compiled must)."""
    return x.std(), x.var(unbiased=False), x.argmax(), x.max(), x.squeeze() * 2


# ============================================================================ Python outputs
@fn_case("returns_item_tolist_dict_floats_torch_size", lambda i=0: (R(3 + i, 4),))
def returns_item_tolist_dict_floats_torch_size(x):
    """Python values as outputs: a float by .item(), a nested list by .tolist(), torch.Size, a
    dict of floats and ints, a str made from a tensor value, a bool from torch.equal."""
    s = x.sum().item()
    rows = x.argmax(1).tolist()
    return {"sum": s, "rows": rows, "shape": x.shape, "n": x.numel(), "tag": f"{x.max().item():.3f}",
            "same": torch.equal(x, x.clone()), "close": torch.allclose(x, x + 1e-9)}


@fn_case("returns_shape_tuple_none_and_nested_list", lambda i=0: (R(2, 3 + i), None if i % 2 else R(2, 1)))
def returns_shape_tuple_none_and_nested_list(x, bias):
    """Outputs mixing tensors, None, shape tuples and a list of tensors of varying length; an
    optional tensor argument alternating with None between calls."""
    h = x if bias is None else x + bias
    parts = list(h.split(2, dim=1))
    return h, None, tuple(h.shape), parts, len(parts), bias is None


# ========================================================================= guards and values
@fn_case("python_float_temperature_int_k_change", lambda i=0: (R(3, 10), 0.5 + i * 0.7, 2 + i))
def python_float_temperature_int_k_change(logits, temperature, k):
    """A sampler's Python arguments changing every call: temperature (float), top-k (int): topk
    with k, a -inf scatter of the rest, softmax of logits / temperature."""
    v, idx = torch.topk(logits, k)
    out = torch.full_like(logits, -math.inf).scatter(1, idx, v)
    return torch.softmax(out / temperature, -1)


@fn_case("str_reduction_mode_changes_between_calls", lambda i=0: (R(4, 3), R(4, 3), ["mean", "sum", "none", "mean"][i]), ncalls=4)
def str_reduction_mode_changes_between_calls(a, b, reduction):
    """A loss whose reduction string changes per call ('mean', 'sum', 'none'): F.smooth_l1_loss and
    a hand-written branch on the string."""
    l1 = F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5)
    e = (a - b).abs()
    l2 = e.mean() if reduction == "mean" else e.sum() if reduction == "sum" else e
    return l1, l2


@fn_case("optional_mask_none_tensor_none", lambda i=0: (R(2, 5, 5), None if i != 1 else U(2, 5, 5) > 0.3), ncalls=4)
def optional_mask_none_tensor_none(scores, mask):
    """An attention mask that is None, then a tensor, then None again: masked_fill with -inf,
    softmax; a fully masked row would be NaN (kept as eager)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1)


@fn_case("dtype_changes_f32_f64_int_between_calls", lambda i=0: ((R(5) * 4).to([torch.float32, torch.float64, torch.int64, torch.float32][i]),), ncalls=4)
def dtype_changes_f32_f64_int_between_calls(x):
    """The same function on float32, float64 then int64 inputs: true division, floor, a
    dtype-dependent branch (is_floating_point), abs and a sum with dtype default."""
    y = x / 3
    z = torch.floor(y) if x.is_floating_point() else x // 3
    return y, z, x.abs().sum(), x.sum().dtype


class TrainEvalToggle(nn.Module):
    """Dropout + BatchNorm, train() / eval() flipped between calls by the caller: the recorded
    branches and buffers must follow."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.3)
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(self.drop(self.bn(x))), self.training


case("train_eval_toggled_between_calls_bn_dropout", lambda: (R(6, 4),), ncalls=5,
     between=lambda m, i: m.train(i % 2 == 0))(lambda: TrainEvalToggle())


# ======================================================================== LLM inference bits
@fn_case("speculative_decoding_rejection_residual_generator", lambda i=0: (R(2, 5, 12), R(2, 5, 12), I(0, 12, 2, 5), 3 + i))
def speculative_decoding_rejection_residual_generator(target_logits, draft_logits, draft_tokens, seed):
    """Speculative sampling: p / q at the draft tokens, accept where U < min(1, p / q) with a
    seeded generator, the first rejection by cumprod of accepts, the residual max(p - q, 0)
    renormalised (a zero residual row falls back to p), a multinomial draw from it."""
    g = torch.Generator().manual_seed(seed)
    p = target_logits.softmax(-1)
    q = draft_logits.softmax(-1)
    pt = p.gather(-1, draft_tokens[..., None]).squeeze(-1)
    qt = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
    u = torch.rand(pt.shape, generator=g)
    acc = u < torch.clamp(pt / qt, max=1.0)
    n_acc = acc.int().cumprod(-1).sum(-1)
    resid = (p - q).clamp(min=0)
    z = resid.sum(-1, keepdim=True)
    resid = torch.where(z > 0, resid / z.clamp(min=1e-20), p)
    row = resid[torch.arange(p.shape[0]), n_acc.clamp(max=p.shape[1] - 1)]
    return n_acc, torch.multinomial(row, 1, generator=g)


class YaRNRope(nn.Module):
    """Dynamic NTK RoPE scaling: when the sequence is longer than the trained length (a Python
    branch on x.shape), base *= (scale * len / max - (scale - 1))^(d / (d - 2)); inv_freq
    recomputed and cached as an attribute with the length it was made for."""

    def __init__(self, d=8, max_pos=8, base=10000.0, scale=2.0):
        super().__init__()
        self.d, self.max_pos, self.base, self.scale = d, max_pos, base, scale
        self.cached_len = 0
        self.inv = 1.0 / base ** (torch.arange(0, d, 2).float() / d)

    def forward(self, x):
        n = x.shape[1]
        if n > self.max_pos and n != self.cached_len:
            base = self.base * ((self.scale * n / self.max_pos) - (self.scale - 1)) ** (self.d / (self.d - 2))
            self.inv = 1.0 / base ** (torch.arange(0, self.d, 2).float() / self.d)
            self.cached_len = n
        f = torch.outer(torch.arange(n).float(), self.inv)
        emb = torch.cat([f, f], -1)
        x1, x2 = x.chunk(2, -1)
        return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


case("dynamic_ntk_rope_python_length_branch_cache", lambda i=0: (R(2, [6, 6, 12, 16][i], 8),), ncalls=4)(lambda: YaRNRope())


class SwitchRouter(nn.Module):
    """Switch Transformer routing losses: router logits in float32 (input bf16), z-loss =
    mean(logsumexp^2), load balancing E * sum(f_i * P_i) with f from an argmax one-hot, capacity
    by cumsum position < capacity."""

    def __init__(self, d=8, e=4):
        super().__init__()
        self.router = nn.Linear(d, e)
        self.e = e

    def forward(self, x, cap: int = 3):
        logits = self.router(x.float())
        z = torch.logsumexp(logits, -1).pow(2).mean()
        p = logits.softmax(-1)
        onehot = F.one_hot(p.argmax(-1), self.e).float()
        lb = self.e * (onehot.mean(0) * p.mean(0)).sum()
        pos = onehot.cumsum(0) * onehot
        kept = (pos <= cap) & (onehot > 0)
        return z, lb, kept.sum(0), (p * kept).sum(-1).to(x.dtype)


case("switch_router_z_loss_load_balance_capacity_bf16", lambda i=0: (R(10, 8).bfloat16(), 3 - i))(lambda: SwitchRouter())


@fn_case("min_p_repetition_penalty_logits_processors", lambda i=0: (R(2, 16) * 3, I(0, 16, 2, 5), 0.05 + 0.1 * i))
def min_p_repetition_penalty_logits_processors(logits, prev, min_p):
    """A logits-processor chain: repetition penalty by gather / where / scatter_ on previous
    tokens (duplicates), temperature, min-p (tokens under min_p * max prob to -inf)."""
    logits = logits.clone()
    sc = torch.gather(logits, 1, prev)
    sc = torch.where(sc < 0, sc * 1.3, sc / 1.3)
    logits.scatter_(1, prev, sc)
    logits = logits / 0.7
    probs = logits.softmax(-1)
    top = probs.max(-1, keepdim=True).values
    return logits.masked_fill(probs < min_p * top, -float("inf"))


# ==================================================================== image processing bits
@fn_case("histogram_equalization_uint8_bincount_cumsum_lut", lambda i=0: ((torch.rand(2, 12, 12) * (120 + 60 * i)).to(torch.uint8),))
def histogram_equalization_uint8_bincount_cumsum_lut(img):
    """torchvision's equalize on uint8: a histogram by bincount, the cdf, a step from the last
    non-zero bin, a lookup table clamped to 255 in uint8, applied by indexing with .long()."""
    out = []
    for im in img:
        hist = torch.bincount(im.flatten().long(), minlength=256)
        nz = hist[hist != 0]
        step = torch.div(nz[:-1].sum(), 255, rounding_mode="floor")
        lut = torch.div(torch.cumsum(hist, 0) + torch.div(step, 2, rounding_mode="floor"), step.clamp(min=1),
                        rounding_mode="floor")
        lut = F.pad(lut, [1, 0])[:-1].clamp(0, 255).to(torch.uint8)
        out.append(torch.where(step == 0, im, lut[im.long()]))
    return torch.stack(out)


class DropBlock(nn.Module):
    """DropBlock: gamma from the block size and feature size, a Bernoulli seed mask, max_pool2d
    to grow blocks, 1 - mask, output rescaled by numel / sum (sum 0 guarded)."""

    def __init__(self, p=0.2, bs=3):
        super().__init__()
        self.p, self.bs = p, bs

    def forward(self, x):
        if not self.training:
            return x
        h, w = x.shape[-2:]
        gamma = self.p / self.bs ** 2 * (h * w) / ((h - self.bs + 1) * (w - self.bs + 1))
        m = (torch.rand(x.shape[0], 1, h, w) < gamma).float()
        block = 1 - F.max_pool2d(m, self.bs, 1, self.bs // 2)
        return x * block * block.numel() / block.sum().clamp(min=1.0)


case("dropblock_bernoulli_seeds_maxpool_rescale_train", lambda: (R(2, 3, 8, 8),), train=True)(lambda: DropBlock())


@fn_case("randaugment_uint8_posterize_solarize_brightness", lambda i=0: ((torch.rand(2, 3, 6, 6) * 255).to(torch.uint8), 3 + i, 1.3))
def randaugment_uint8_posterize_solarize_brightness(img, bits, factor):
    """RandAugment ops on uint8 images: posterize by & with a mask made from a Python int, solarize
    by where(x >= 128, 255 - x, x), brightness blend in float clamped back to uint8, autocontrast
    with a constant channel guarded."""
    mask = -int(2 ** (8 - bits))
    post = img & mask
    sol = torch.where(img >= 128, 255 - img, img)
    bright = (img.float() * factor).clamp(0, 255).to(torch.uint8)
    lo = img.amin((-2, -1), keepdim=True).float()
    hi = img.amax((-2, -1), keepdim=True).float()
    scale = torch.where(hi > lo, 255.0 / (hi - lo), torch.ones_like(hi))
    lo = torch.where(hi > lo, lo, torch.zeros_like(lo))
    ac = ((img.float() - lo) * scale).clamp(0, 255).to(torch.uint8)
    return post, sol, bright, ac


@fn_case("integral_image_box_filter_cumsum_pad", lambda i=0: (U(2, 1, 9 + i, 8),))
def integral_image_box_filter_cumsum_pad(x, r=2):
    """Box filtering by an integral image: cumsum over H and W in float64, zero-padded on top /
    left, window sums from four corner lookups with clamped index tensors, divided by counts."""
    ii = F.pad(x.double().cumsum(-2).cumsum(-1), (1, 0, 1, 0))
    h, w = x.shape[-2:]
    ys, xs = torch.arange(h), torch.arange(w)
    y0, y1 = (ys - r).clamp(min=0), (ys + r + 1).clamp(max=h)
    x0, x1 = (xs - r).clamp(min=0), (xs + r + 1).clamp(max=w)
    s = ii[..., y1[:, None], x1[None]] - ii[..., y0[:, None], x1[None]] - ii[..., y1[:, None], x0[None]] + \
        ii[..., y0[:, None], x0[None]]
    cnt = (y1 - y0)[:, None] * (x1 - x0)[None]
    return (s / cnt).float()


@fn_case("canny_sobel_atan2_direction_quantised_nms", lambda: (U(1, 1, 10, 10),))
def canny_sobel_atan2_direction_quantised_nms(img):
    """Canny's first steps: Sobel gradients by conv2d, magnitude and atan2 angle quantised to four
    directions, non-maximum suppression against the two neighbours along the direction (shifted
    by padding and slicing), hysteresis-free thresholds."""
    kx = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]]).view(1, 1, 3, 3)
    gx = F.conv2d(img, kx, padding=1)
    gy = F.conv2d(img, kx.transpose(-1, -2), padding=1)
    mag = torch.hypot(gx, gy)
    ang = torch.rad2deg(torch.atan2(gy, gx)) % 180
    d = (torch.round(ang / 45) % 4).long()
    p = F.pad(mag, (1, 1, 1, 1))
    h, w = img.shape[-2:]
    sh = lambda dy, dx: p[..., 1 + dy:1 + dy + h, 1 + dx:1 + dx + w]  # noqa: E731
    n1 = torch.stack([sh(0, 1), sh(1, 1), sh(1, 0), sh(1, -1)])
    n2 = torch.stack([sh(0, -1), sh(-1, -1), sh(-1, 0), sh(-1, 1)])
    a = n1.gather(0, d[None]).squeeze(0)
    b = n2.gather(0, d[None]).squeeze(0)
    keep = (mag >= a) & (mag >= b)
    nms = mag * keep
    return nms, (nms > 0.5).sum(), d


# ========================================================================== scientific bits
class GPRegression(nn.Module):
    """Exact GP regression: an RBF kernel with a learned log lengthscale, K + noise I, Cholesky,
    cholesky_solve for alpha, predictive mean / variance with solve_triangular, the log marginal
    likelihood from the Cholesky diagonal, backward into the hyperparameters."""

    def __init__(self):
        super().__init__()
        self.log_ls = nn.Parameter(torch.tensor(0.0))
        self.log_noise = nn.Parameter(torch.tensor(-2.0))

    def k(self, a, b):
        return torch.exp(-0.5 * torch.cdist(a, b).pow(2) / self.log_ls.exp() ** 2)

    def forward(self, x, y, xs):
        K = self.k(x, x) + self.log_noise.exp() * torch.eye(x.shape[0])
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve(y[:, None], L)
        ks = self.k(x, xs)
        mean = ks.t() @ alpha
        v = torch.linalg.solve_triangular(L, ks, upper=False)
        var = 1.0 - (v * v).sum(0)
        nll = 0.5 * (y[:, None] * alpha).sum() + L.diagonal().log().sum() + 0.5 * len(x) * math.log(2 * math.pi)
        nll.backward()
        return mean.squeeze(1), var, nll.detach(), self.log_ls.grad.clone()


case("gp_rbf_cholesky_solve_triangular_mll_backward", lambda: (R(8, 2), R(8), R(3, 2)), train=True)(lambda: GPRegression())


@fn_case("mmd_multi_bandwidth_rbf_unbiased", lambda i=0: (R(10, 3), R(12, 3) + 0.3 * i))
def mmd_multi_bandwidth_rbf_unbiased(x, y):
    """MMD^2 with a sum of RBF kernels over bandwidths, the unbiased estimate (diagonals removed by
    fill_diagonal_ on clones and divided by n(n - 1))."""
    bws = [0.5, 1.0, 2.0, 4.0]
    z = torch.cat([x, y])
    d2 = torch.cdist(z, z).pow(2)
    k = sum(torch.exp(-d2 / (2 * b * b)) for b in bws)
    n, m = len(x), len(y)
    kxx = k[:n, :n].clone().fill_diagonal_(0)
    kyy = k[n:, n:].clone().fill_diagonal_(0)
    kxy = k[:n, n:]
    return kxx.sum() / (n * (n - 1)) + kyy.sum() / (m * (m - 1)) - 2 * kxy.mean()


@fn_case("wasserstein_1d_histogram_cdf_difference", lambda i=0: (U(4, 16), U(4, 16)))
def wasserstein_1d_histogram_cdf_difference(p, q):
    """1-D earth mover's distance between histograms: both normalised by their sums (an all-zero
    row NaN), the CDF difference by cumsum, L1 summed times the bin width; Cramer's L2 too."""
    p = p.clone()
    p[3] = 0
    p = p / p.sum(-1, keepdim=True)
    q = q / q.sum(-1, keepdim=True)
    d = torch.cumsum(p, -1) - torch.cumsum(q, -1)
    return d.abs().sum(-1) / p.shape[-1], d.pow(2).sum(-1).sqrt()


@fn_case("monte_carlo_option_antithetic_float64_generator", lambda i=0: (torch.tensor([100.0, 95.0], dtype=torch.float64), 100.0 + 5 * i))
def monte_carlo_option_antithetic_float64_generator(s0, strike, r=0.05, sigma=0.2, t=1.0, n=4096):
    """A Monte Carlo European call in float64: antithetic normal draws from a seeded generator,
    terminal prices by exp, discounted payoffs, the standard error; strike a Python float."""
    g = torch.Generator().manual_seed(7)
    z = torch.randn(n // 2, dtype=torch.float64, generator=g)
    z = torch.cat([z, -z])
    st = s0[:, None] * torch.exp((r - 0.5 * sigma ** 2) * t + sigma * math.sqrt(t) * z)
    pay = torch.clamp(st - strike, min=0) * math.exp(-r * t)
    return pay.mean(1), pay.std(1) / math.sqrt(n)


@fn_case("ising_metropolis_checkerboard_roll_generator", lambda i=0: (torch.where(U(8, 8) > 0.5, 1.0, -1.0), 0.4 + 0.2 * i))
def ising_metropolis_checkerboard_roll_generator(spins, beta, sweeps=3):
    """Checkerboard Metropolis for the 2-D Ising model: neighbour sums by roll (periodic), dE,
    acceptance exp(-beta dE) against uniforms from a seeded generator, black then white sites."""
    g = torch.Generator().manual_seed(11)
    s = spins.clone()
    ii, jj = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    colors = [((ii + jj) % 2 == c) for c in (0, 1)]
    for _ in range(sweeps):
        for c in colors:
            nb = s.roll(1, 0) + s.roll(-1, 0) + s.roll(1, 1) + s.roll(-1, 1)
            dE = 2 * s * nb
            flip = (torch.rand(8, 8, generator=g) < torch.exp(-beta * dE)) & c
            s = torch.where(flip, -s, s)
    return s, s.mean(), -(s * (s.roll(1, 0) + s.roll(1, 1))).mean()


@fn_case("ray_sphere_intersection_discriminant_double_where", lambda i=0: (R(16, 3), R(16, 3), 1.0 + i))
def ray_sphere_intersection_discriminant_double_where(o, d, radius):
    """Ray / sphere intersection: the discriminant, sqrt made safe by the double-where trick
    (negative discriminants replaced before sqrt), the nearest positive t, miss -> inf, hit
    normals; radius a Python float."""
    d = d / d.norm(dim=-1, keepdim=True)
    b = (o * d).sum(-1)
    c = (o * o).sum(-1) - radius ** 2
    disc = b * b - c
    hit = disc >= 0
    sq = torch.sqrt(torch.where(hit, disc, torch.ones_like(disc)))
    t0, t1 = -b - sq, -b + sq
    t = torch.where(t0 > 0, t0, t1)
    t = torch.where(hit & (t > 0), t, torch.full_like(t, math.inf))
    p = o + d * torch.where(torch.isinf(t), torch.zeros_like(t), t)[:, None]
    return t, p / radius


@fn_case("spherical_harmonics_deg2_view_dependent_color", lambda: (R(20, 3), R(20, 9, 3)))
def spherical_harmonics_deg2_view_dependent_color(dirs, sh):
    """Plenoxels / 3DGS spherical harmonics up to degree 2: normalised directions, the nine basis
    functions with their constants, colors = sum(basis * coeffs) + 0.5 clamped at 0."""
    d = dirs / dirs.norm(dim=-1, keepdim=True)
    x, y, z = d.unbind(-1)
    C0, C1 = 0.28209479177387814, 0.4886025119029199
    C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396]
    basis = torch.stack([torch.full_like(x, C0), -C1 * y, C1 * z, -C1 * x, C2[0] * x * y, C2[1] * y * z,
                         C2[2] * (2 * z * z - x * x - y * y), C2[3] * x * z, C2[4] * (x * x - y * y)], -1)
    return torch.clamp((basis[..., None] * sh).sum(-2) + 0.5, min=0.0)


# ============================================================================== time series
class TimesNetPeriod(nn.Module):
    """TimesNet's FFT period discovery: rfft amplitudes averaged, the DC term zeroed, top-k
    frequencies, periods = T // f as Python ints by .tolist(), each period's 2-D reshape (padded
    to a multiple), a conv2d, back to 1-D, weighted by softmaxed amplitudes."""

    def __init__(self, c=3, k=2):
        super().__init__()
        self.k = k
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        b, t, c = x.shape
        amp = torch.fft.rfft(x, dim=1).abs()
        fl = amp.mean(0).mean(-1)
        fl[0] = 0
        top = torch.topk(fl, self.k).indices.tolist()
        w = amp.mean(-1)[:, top]
        outs = []
        for f in top:
            p = t // max(f, 1)
            length = ((t + p - 1) // p) * p
            xx = F.pad(x.transpose(1, 2), (0, length - t))
            o = self.conv(xx.reshape(b, c, length // p, p)).reshape(b, c, -1)[..., :t]
            outs.append(o.transpose(1, 2))
        res = torch.stack(outs, -1)
        return (res * w.softmax(1)[:, None, None]).sum(-1) + x


case("timesnet_fft_topk_periods_tolist_reshape", lambda i=0: (R(2, 24 + 4 * i, 3),))(lambda: TimesNetPeriod())


class PatchTST(nn.Module):
    """PatchTST: RevIN-free instance normalisation with the statistics kept, channel independence by
    reshape, patches by replication padding + unfold, a linear patch embedding, a flatten head,
    de-normalised."""

    def __init__(self, pl=4, st=2, d=8, horizon=5, t=16):
        super().__init__()
        self.pl, self.st = pl, st
        n = (t + st - pl) // st + 1
        self.emb = nn.Linear(pl, d)
        self.head = nn.Linear(n * d, horizon)

    def forward(self, x):
        b, t, c = x.shape
        mu = x.mean(1, keepdim=True).detach()
        sd = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5).detach()
        z = ((x - mu) / sd).permute(0, 2, 1).reshape(b * c, 1, t)
        z = F.pad(z, (0, self.st), mode="replicate").squeeze(1)
        p = z.unfold(-1, self.pl, self.st)
        h = self.head(self.emb(p).flatten(1)).view(b, c, -1).permute(0, 2, 1)
        return h * sd + mu


case("patchtst_instance_norm_replicate_pad_unfold", lambda: (R(3, 16, 2) * 5 + 3,))(lambda: PatchTST())


@fn_case("holt_winters_additive_smoothing_python_loop", lambda i=0: (R(2, 14) + torch.arange(14.0) * 0.3, 0.5, 0.3 - 0.1 * i))
def holt_winters_additive_smoothing_python_loop(y, alpha, beta, m=4, gamma=0.2):
    """Additive Holt-Winters: level / trend / season tensors updated in a Python loop over time,
    seasonal indices t % m, forecasts for the next m steps; alpha / beta Python floats."""
    level = y[:, 0]
    trend = y[:, 1] - y[:, 0]
    season = [y[:, j] - y[:, :m].mean(1) for j in range(m)]
    fit = []
    for t in range(y.shape[1]):
        s = season[t % m]
        pl = level
        fit.append(level + trend + s)
        level = alpha * (y[:, t] - s) + (1 - alpha) * (level + trend)
        trend = beta * (level - pl) + (1 - beta) * trend
        season[t % m] = gamma * (y[:, t] - level) + (1 - gamma) * s
    fc = torch.stack([level + (h + 1) * trend + season[(y.shape[1] + h) % m] for h in range(m)], 1)
    return torch.stack(fit, 1), fc


# ============================================================================= losses, SSL
@fn_case("asymmetric_loss_multilabel_clip_shift_focusing", lambda i=0: (R(4, 6) * 2, (U(4, 6) > 0.7).float()))
def asymmetric_loss_multilabel_clip_shift_focusing(logits, y, gp=0.0, gn=4.0, clip=0.05, eps=1e-8):
    """ASL (Ridnik et al.): negative probabilities shifted by clip ((xs_neg + clip).clamp(max=1)),
    log of clamp(min=eps), asymmetric focusing weight pow(1 - pt, gamma) computed under
    torch.no_grad as in the reference (disable_torch_grad_focal_loss)."""
    xs_pos = torch.sigmoid(logits)
    xs_neg = (1 - xs_pos + clip).clamp(max=1)
    los = y * torch.log(xs_pos.clamp(min=eps)) + (1 - y) * torch.log(xs_neg.clamp(min=eps))
    with torch.no_grad():
        pt = xs_pos * y + xs_neg * (1 - y)
        w = torch.pow(1 - pt, gp * y + gn * (1 - y))
    return -(los * w).sum()


@fn_case("poly1_focal_cross_entropy_pt_gather", lambda i=0: (R(6, 5), I(0, 5, 6), 1.0 + i))
def poly1_focal_cross_entropy_pt_gather(logits, target, epsilon):
    """PolyLoss: CE + epsilon (1 - pt) with pt from softmax gathered at the target, and the
    Poly-1 focal variant (sigmoid focal on a one-hot + epsilon (1 - pt)^(gamma + 1))."""
    ce = F.cross_entropy(logits, target, reduction="none")
    pt = logits.softmax(-1).gather(1, target[:, None]).squeeze(1)
    poly = ce + epsilon * (1 - pt)
    oh = F.one_hot(target, logits.shape[1]).float()
    p = logits.sigmoid()
    fl = torchvision_sigmoid_focal(logits, oh)
    ptf = oh * p + (1 - oh) * (1 - p)
    return poly.mean(), (fl + epsilon * torch.pow(1 - ptf, 3)).mean()


def torchvision_sigmoid_focal(inputs, targets, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    return alpha * targets * loss + (1 - alpha) * (1 - targets) * loss


@fn_case("vicreg_variance_covariance_off_diagonal_mask", lambda i=0: (R(8, 6), R(8, 6) * (1 - 0.5 * i)))
def vicreg_variance_covariance_off_diagonal_mask(x, y):
    """VICReg: invariance MSE, variance hinge relu(1 - sqrt(var + 1e-4)), covariance of centred
    embeddings with the off-diagonal taken by a ~eye bool mask, scaled by the dimension."""
    repr_loss = F.mse_loss(x, y)
    x = x - x.mean(0)
    y = y - y.mean(0)
    std_x = torch.sqrt(x.var(0) + 1e-4)
    std_y = torch.sqrt(y.var(0) + 1e-4)
    std_loss = F.relu(1 - std_x).mean() / 2 + F.relu(1 - std_y).mean() / 2
    n, d = x.shape
    cx = (x.T @ x) / (n - 1)
    cy = (y.T @ y) / (n - 1)
    off = ~torch.eye(d, dtype=torch.bool)
    cov = cx[off].pow(2).sum() / d + cy[off].pow(2).sum() / d
    return 25 * repr_loss + 25 * std_loss + cov


@fn_case("swav_sinkhorn_inplace_division_no_grad", lambda: (R(12, 4) * 5,))
@torch.no_grad()
def swav_sinkhorn_inplace_division_no_grad(scores, eps=0.05, iters=3):
    """SwAV's distributed_sinkhorn on one process: Q = exp(scores / eps).t(), Q /= sum, then
    rows and columns normalised in place with /= in a loop, Q *= B at the end, transposed."""
    Q = torch.exp(scores / eps).t()
    B, K = Q.shape[1], Q.shape[0]
    Q /= torch.sum(Q)
    for _ in range(iters):
        Q /= torch.sum(Q, dim=1, keepdim=True)
        Q /= K
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= B
    Q *= B
    return Q.t()


class MMoE(nn.Module):
    """MMoE: shared experts stacked by torch.stack, one softmax gate per task, mixtures by einsum,
    task towers, outputs as a dict keyed by task name."""

    def __init__(self, d=6, e=3, tasks=("ctr", "cvr")):
        super().__init__()
        self.tasks = tasks
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, 8), nn.ReLU()) for _ in range(e)])
        self.gates = nn.ModuleDict({t: nn.Linear(d, e) for t in tasks})
        self.towers = nn.ModuleDict({t: nn.Linear(8, 1) for t in tasks})

    def forward(self, x):
        ex = torch.stack([m(x) for m in self.experts], 1)
        out = {}
        for t in self.tasks:
            g = self.gates[t](x).softmax(-1)
            out[t] = torch.sigmoid(self.towers[t](torch.einsum("be,bed->bd", g, ex))).squeeze(-1)
        return out


case("mmoe_gates_einsum_dict_outputs", lambda i=0: (R(4 + i, 6),))(lambda: MMoE())


# ============================================================ tensors as sizes, counts, bounds
@fn_case("chunked_processing_count_from_lengths_max", lambda i=0: (R(2, 12, 4), torch.tensor([7 + 2 * i, 3])))
def chunked_processing_count_from_lengths_max(x, lengths, w=4):
    """Memory-saving chunked processing: the number of chunks from the longest sequence as a
    tensor ((max + w - 1) // w), x[:, :max] sliced by a tensor bound, chunk(n) along time,
    a running state carried over the chunks."""
    T = lengths.max()
    n = (T + w - 1) // w
    xs = x[:, :T]
    state = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for c in xs.chunk(n, dim=1):
        state = torch.tanh(state + c.mean(1))
        outs.append(state)
    return torch.stack(outs, 1), len(outs)


@fn_case("rnn_time_loop_over_arange_of_max_length", lambda i=0: (R(3, 8, 4), torch.tensor([5, 2 + i, 3 + 2 * i])))
def rnn_time_loop_over_arange_of_max_length(x, lengths):
    """A hand-written RNN loop over the padded maximum length: steps = torch.arange(lengths.max()),
    the loop bound read from its shape, a validity mask per step by comparison with lengths."""
    steps = torch.arange(lengths.max())
    h = torch.zeros(x.shape[0], x.shape[2])
    for t in range(steps.shape[0]):
        valid = (steps[t] < lengths)[:, None]
        h = torch.where(valid, torch.tanh(h * 0.5 + x[:, t]), h)
    return h, steps.shape[0]


@fn_case("pad_to_multiple_tensor_amount_then_shape", lambda i=0: (R(2, 10, 3), torch.tensor([9 - 3 * i, 4])))
def pad_to_multiple_tensor_amount_then_shape(x, lengths, m=4):
    """Padding the time axis to a multiple of m (windowed attention, patching): the amount from
    the tensor max ((-max) % m), F.pad with it, the padded length read from .shape to reshape
    into windows."""
    T = lengths.max()
    y = x[:, :T]
    pad = (-T) % m
    y = F.pad(y.transpose(1, 2), (0, pad)).transpose(1, 2)
    b, t, c = y.shape
    return y.reshape(b, t // m, m, c).mean(2), t


@fn_case("topk_ratio_k_tensor_iterated_scores", lambda i=0: (R(12) * 2, 0.25 + 0.2 * i))
def topk_ratio_k_tensor_iterated_scores(scores, ratio):
    """A keep-ratio pooling step: k = ceil(ratio * n) computed as a tensor, topk(k), the kept
    scores iterated in Python (a list of gated values) and counted."""
    k = torch.ceil(torch.tensor(ratio) * scores.numel()).long().clamp(min=1)
    v, idx = scores.topk(k)
    gated = [s.sigmoid() * 2 for s in v]
    return gated, idx, len(gated)


@fn_case("label_smoothing_one_hot_inferred_classes", lambda i=0: (R(5, 6), torch.tensor([0, 2, 1 + i, 3 + i // 2, 1])))
def label_smoothing_one_hot_inferred_classes(logits, y, eps=0.1):
    """Label smoothing written with F.one_hot(y) and no num_classes: the class count read from
    the one-hot's .size(1) (labels.max() + 1, which grows on later calls), the logits sliced to it."""
    oh = F.one_hot(y).float()
    n = oh.size(1)
    soft = oh * (1 - eps) + eps / n
    return -(soft * logits[:, :n].log_softmax(-1)).sum(-1).mean(), n


class PackedGRUTokenMean(nn.Module):
    """A GRU over pack_padded_sequence with per-token normalisation by the packed data's row
    count (sum of lengths, read from .data.shape[0]), lengths changing per call."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4, batch_first=True)

    def forward(self, x, lengths):
        p = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = self.gru(p)
        n_tokens = out.data.shape[0]
        return out.data.sum(0) / n_tokens, h, n_tokens


case("packed_gru_token_count_from_packed_data_shape", lambda i=0: (R(3, 6, 3), torch.tensor([6, 2 + i, 4 - i])))(
    lambda: PackedGRUTokenMean())


@fn_case("segments_by_tensor_split_at_boundary_tensor", lambda i=0: (R(10, 3), torch.tensor([2 + i, 7 - i])))
def segments_by_tensor_split_at_boundary_tensor(x, bounds):
    """Document segments split at boundary indices held in a tensor (tensor_split), each
    segment's mean and length read from its shape, lengths returned as Python ints."""
    segs = torch.tensor_split(x, bounds)
    lens = [s.shape[0] for s in segs]
    return torch.stack([s.mean(0) for s in segs]), lens


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
