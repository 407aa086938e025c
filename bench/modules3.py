"""Third real-world-style corpus for bench/modules.py (source "new3").

Patterns from public repositories that the first two corpora do not cover: YOLO/SSD box
decoding and anchor generation (arange/meshgrid), CenterNet peak picking, top-k/top-p
sampling heads and repetition penalties, label smoothing / focal / triplet / contrastive
losses, manual CTC alpha recursion, sinusoidal / ALiBi (non power-of-2 heads) / DeBERTa
log-bucket positions, GPT-J interleaved rotary, integer semantics (floor division and
remainder with negatives, hashing with masks and shifts), bool reductions, arg-reductions
with ties, cumulative ops, where/clamp with tensors, fully masked softmax rows, overlap-add
fold, 3-D affine grids, antialiased / nearest-exact interpolation, pooling corner cases,
embedding bags with weights, norms without affine, orthogonal parametrization, dtype
promotion, empty reductions, expanded / offset / channels-last inputs, in-place ops on
views of inputs, outputs that are inputs, dataclass / namedtuple outputs, .item()/.tolist()
control flow, buffers updated in train mode, and backward through the compiled function.

    python bench/modules.py --source new3 --jobs 2 --timeout 240
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CASES = []


def case(name, inputs, train=False):
    def deco(factory):
        CASES.append((name, factory, inputs, train))
        return factory
    return deco


def R(*s):
    return torch.randn(*s)


# ============================================================================= detection
class YoloV5Detect(nn.Module):
    """YOLOv5 Detect head (inference): grid from meshgrid, sigmoid, xy/wh decoding, cat."""

    def __init__(self, nc=3, anchors=((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119)), ch=(4, 6)):
        super().__init__()
        self.nc, self.no, self.nl = nc, nc + 5, len(anchors)
        self.na = len(anchors[0]) // 2
        self.register_buffer("anchors", torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.stride = torch.tensor([8.0, 16.0])
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)

    def _make_grid(self, nx, ny, i):
        d = self.anchors[i].device
        shape = 1, self.na, ny, nx, 2
        y, x = torch.arange(ny, device=d, dtype=torch.float32), torch.arange(nx, device=d, dtype=torch.float32)
        yv, xv = torch.meshgrid(y, x, indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(shape) - 0.5
        anchor_grid = (self.anchors[i] * self.stride[i]).view((1, self.na, 1, 1, 2)).expand(shape)
        return grid, anchor_grid

    def forward(self, xs):
        z = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            grid, anchor_grid = self._make_grid(nx, ny, i)
            xy, wh, conf = x.sigmoid().split((2, 2, self.nc + 1), 4)
            xy = (xy * 2 + grid) * self.stride[i]
            wh = (wh * 2) ** 2 * anchor_grid
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class SSDPriorsDecode(nn.Module):
    """SSD: prior boxes from itertools.product over feature maps, center-form decoding with variances."""

    def __init__(self, fmaps=(4, 2), img=32, steps=(8, 16), min_sizes=(6, 14), max_sizes=(14, 24)):
        super().__init__()
        mean = []
        for k, f in enumerate(fmaps):
            for i, j in itertools.product(range(f), repeat=2):
                f_k = img / steps[k]
                cx, cy = (j + 0.5) / f_k, (i + 0.5) / f_k
                s_k = min_sizes[k] / img
                mean += [cx, cy, s_k, s_k]
                s_k_prime = math.sqrt(s_k * (max_sizes[k] / img))
                mean += [cx, cy, s_k_prime, s_k_prime]
                for ar in (2,):
                    mean += [cx, cy, s_k * math.sqrt(ar), s_k / math.sqrt(ar)]
                    mean += [cx, cy, s_k / math.sqrt(ar), s_k * math.sqrt(ar)]
        self.register_buffer("priors", torch.tensor(mean).view(-1, 4).clamp_(max=1, min=0))
        self.variances = (0.1, 0.2)

    def forward(self, loc, conf):
        p = self.priors
        boxes = torch.cat((p[:, :2] + loc[..., :2] * self.variances[0] * p[:, 2:],
                           p[:, 2:] * torch.exp(loc[..., 2:] * self.variances[1])), -1)
        boxes = torch.cat([boxes[..., :2] - boxes[..., 2:] / 2, boxes[..., :2] + boxes[..., 2:] / 2], -1)
        scores = F.softmax(conf, dim=-1)
        best, label = scores[..., 1:].max(-1)
        return boxes.clamp(0, 1), best, label + 1


class RetinaTopKPerLevel(nn.Module):
    """Per-level candidate selection (torchvision RetinaNet postprocess, no NMS): sigmoid scores,
    threshold, topk over flattened anchors x classes, idx // num_classes and idx % num_classes."""

    def __init__(self, nc=4, topk=7):
        super().__init__()
        self.nc, self.k = nc, topk

    def forward(self, logits, deltas, anchors):
        scores = torch.sigmoid(logits).flatten()
        keep = scores > 0.05
        scores = torch.where(keep, scores, torch.zeros_like(scores))
        top, idx = scores.topk(self.k)
        anchor_idx = torch.div(idx, self.nc, rounding_mode="floor")
        labels = idx % self.nc
        a = anchors[anchor_idx]
        d = deltas[anchor_idx]
        wa, ha = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
        cx, cy = a[:, 0] + 0.5 * wa + d[:, 0] * wa, a[:, 1] + 0.5 * ha + d[:, 1] * ha
        w = wa * torch.exp(d[:, 2].clamp(max=math.log(1000.0 / 16)))
        h = ha * torch.exp(d[:, 3].clamp(max=math.log(1000.0 / 16)))
        boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
        return boxes, top, labels, anchor_idx


class CenterNetPeaks(nn.Module):
    """CenterNet decoding: 3x3 max-pool NMS on the heatmap, topk over C*H*W, integer index math."""

    def __init__(self, k=6):
        super().__init__()
        self.k = k

    def forward(self, heat, wh, reg):
        heat = heat.sigmoid()
        hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
        keep = (hmax == heat).float()
        heat = heat * keep
        b, c, h, w = heat.shape
        scores, inds = torch.topk(heat.view(b, -1), self.k)
        clses = torch.div(inds, h * w, rounding_mode="floor").int()
        inds = inds % (h * w)
        ys = torch.div(inds, w, rounding_mode="floor").float()
        xs = (inds % w).float()
        wh = wh.view(b, 2, -1).gather(2, inds.unsqueeze(1).expand(b, 2, self.k))
        reg = reg.view(b, 2, -1).gather(2, inds.unsqueeze(1).expand(b, 2, self.k))
        xs, ys = xs + reg[:, 0], ys + reg[:, 1]
        boxes = torch.stack([xs - wh[:, 0] / 2, ys - wh[:, 1] / 2, xs + wh[:, 0] / 2, ys + wh[:, 1] / 2], -1)
        return boxes, scores, clses


class FCOSPointsLTRB(nn.Module):
    """FCOS locations with arange*stride + stride//2 (int), meshgrid indexing='xy', ltrb decoding."""

    def __init__(self, strides=(8, 16)):
        super().__init__()
        self.strides = strides

    def forward(self, f1, f2):
        outs = []
        for feat, s in zip((f1, f2), self.strides):
            h, w = feat.shape[-2:]
            sx = torch.arange(0, w * s, step=s, dtype=torch.int64)
            sy = torch.arange(0, h * s, step=s, dtype=torch.int64)
            xx, yy = torch.meshgrid(sx, sy, indexing="xy")
            loc = torch.stack((xx.reshape(-1), yy.reshape(-1)), 1) + s // 2
            ltrb = F.relu(feat.flatten(2).transpose(1, 2)) * s
            boxes = torch.cat([loc - ltrb[..., :2], loc + ltrb[..., 2:]], -1)
            outs.append(boxes)
        return torch.cat(outs, 1), loc


def _box_pairs(n, m):
    a = torch.rand(n, 2) * 10
    b = torch.rand(m, 2) * 10
    return torch.cat([a, a + torch.rand(n, 2) * 5], 1), torch.cat([b, b + torch.rand(m, 2) * 5], 1)


class GIoUMatcher(nn.Module):
    """Pairwise IoU / GIoU matrix, ATSS-style matching with argmax ties and a low-quality pass."""

    def forward(self, boxes, gts):
        area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        area2 = (gts[:, 2] - gts[:, 0]) * (gts[:, 3] - gts[:, 1])
        lt = torch.max(boxes[:, None, :2], gts[:, :2])
        rb = torch.min(boxes[:, None, 2:], gts[:, 2:])
        wh = (rb - lt).clamp(min=0)
        inter = wh[..., 0] * wh[..., 1]
        union = area1[:, None] + area2 - inter
        iou = inter / union
        lti = torch.min(boxes[:, None, :2], gts[:, :2])
        rbi = torch.max(boxes[:, None, 2:], gts[:, 2:])
        whi = (rbi - lti).clamp(min=0)
        giou = iou - (whi[..., 0] * whi[..., 1] - union) / (whi[..., 0] * whi[..., 1])
        q = (iou * 4).round() / 4                       # quantized: many ties
        matched_vals, matches = q.max(dim=1)
        below = matched_vals < 0.25
        matches = matches.masked_fill(below, -1)
        best_per_gt = q.max(dim=0).values
        low_quality = (q == best_per_gt[None]).nonzero()
        return giou, matches, q.argmax(0), q.argmin(1), low_quality


case("yolov5_detect_grid_decode", lambda: ([R(2, 4, 4, 4), R(2, 6, 2, 2)],))(lambda: YoloV5Detect())
case("ssd_priors_decode", lambda: (R(2, 80, 4) * 0.5, R(2, 80, 3)))(lambda: SSDPriorsDecode())
case("retina_topk_per_level", lambda: (R(12, 4), R(12, 4) * 0.2, _box_pairs(12, 1)[0]))(
    lambda: RetinaTopKPerLevel())
case("centernet_maxpool_peaks", lambda: (R(2, 3, 6, 5), torch.rand(2, 2, 6, 5) * 4, torch.rand(2, 2, 6, 5)))(
    lambda: CenterNetPeaks())
case("fcos_points_ltrb_int", lambda: (R(2, 4, 4, 5), R(2, 4, 2, 3)))(lambda: FCOSPointsLTRB())
case("giou_matcher_ties", lambda: _box_pairs(9, 4))(lambda: GIoUMatcher())


# ============================================================================== sampling
class TopKTopPFilter(nn.Module):
    """HF top_k_top_p_filtering + temperature: sort, cumsum of softmax, shift right, scatter back."""

    def __init__(self, top_k=5, top_p=0.8, min_tokens=1):
        super().__init__()
        self.top_k, self.top_p, self.min_tokens = top_k, top_p, min_tokens

    def forward(self, logits, temperature):
        logits = logits / temperature
        filter_value = -float("inf")
        top_k = min(max(self.top_k, self.min_tokens), logits.size(-1))
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits = logits.masked_fill(indices_to_remove, filter_value)
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > self.top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, filter_value)
        return logits, F.softmax(logits, -1)


class RepetitionPenaltyGreedy(nn.Module):
    """CTRL repetition penalty (gather, where <0 multiply else divide, scatter), min-length EOS ban,
    no-repeat bigram ban from Python lists, greedy argmax."""

    def __init__(self, penalty=1.3, eos=0, min_len=6):
        super().__init__()
        self.penalty, self.eos, self.min_len = penalty, eos, min_len

    def forward(self, scores, input_ids):
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        scores = scores.scatter(1, input_ids, score)
        cur_len = input_ids.shape[-1]
        if cur_len < self.min_len:
            scores[:, self.eos] = -float("inf")
        banned = []
        for row in input_ids.tolist():
            prev = tuple(row[-1:])
            banned.append([b for a, b in zip(row[:-1], row[1:]) if (a,) == prev])
        for i, b in enumerate(banned):
            scores[i, b] = -float("inf")
        return scores.argmax(-1), scores


class TypicalSampling(nn.Module):
    """Locally typical sampling warper: entropy, |−logp − H|, sort, cumsum, last index via sum."""

    def __init__(self, mass=0.9):
        super().__init__()
        self.mass = mass

    def forward(self, scores):
        normalized = F.log_softmax(scores, dim=-1)
        p = torch.exp(normalized)
        ent = -(normalized * p).nansum(-1, keepdim=True)
        shifted = torch.abs((-normalized) - ent)
        sorted_scores, sorted_indices = torch.sort(shifted, descending=False)
        sorted_logits = scores.gather(-1, sorted_indices)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        last_ind = (cumulative < self.mass).sum(dim=1)
        last_ind.clamp_(max=sorted_scores.shape[-1] - 1)
        remove = sorted_scores > sorted_scores.gather(1, last_ind.view(-1, 1))
        remove[..., :1] = 0
        idx_remove = remove.scatter(1, sorted_indices, remove)
        return scores.masked_fill(idx_remove, -float("inf")), last_ind


class BeamLengthPenalty(nn.Module):
    """Beam bookkeeping: log_softmax + running scores, topk over beams*vocab, beam = idx // V,
    token = idx % V (floor_divide), length-normalized scores with a Python float exponent."""

    def __init__(self, alpha=0.7):
        super().__init__()
        self.alpha = alpha

    def forward(self, logits, beam_scores, lengths):
        b, k, v = logits.shape
        lp = F.log_softmax(logits, -1) + beam_scores.unsqueeze(-1)
        top, idx = lp.view(b, -1).topk(2 * k, dim=1)
        beam = torch.floor_divide(idx, v)
        token = torch.remainder(idx, v)
        new_len = lengths.gather(1, beam) + 1
        norm = top / (((5 + new_len) / 6.0) ** self.alpha)
        return norm, beam, token, new_len


case("top_k_top_p_filtering_temp", lambda: (R(3, 12), torch.tensor(0.7)))(lambda: TopKTopPFilter())
case("repetition_penalty_no_repeat_ngram", lambda: (R(2, 10), torch.tensor([[1, 4, 2, 4], [3, 3, 5, 3]])))(
    lambda: RepetitionPenaltyGreedy())
case("typical_sampling_warper", lambda: (R(3, 9) * 2,))(lambda: TypicalSampling())
case("beam_length_penalty_floor_divide", lambda: (R(2, 3, 7), R(2, 3), torch.randint(1, 5, (2, 3))))(
    lambda: BeamLengthPenalty())


# ================================================================================ losses
class LabelSmoothingCE(nn.Module):
    """Fairseq label_smoothed_nll_loss with ignore_index, plus nn.CrossEntropyLoss(label_smoothing) with weights."""

    def __init__(self, eps=0.1, ignore=-100):
        super().__init__()
        self.eps, self.ignore = eps, ignore
        self.ce = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.0, 1.5]), label_smoothing=0.2,
                                      ignore_index=ignore)

    def forward(self, logits, target):
        lprobs = F.log_softmax(logits, dim=-1)
        t = target.unsqueeze(-1)
        pad = t.eq(self.ignore)
        nll = -lprobs.gather(dim=-1, index=t.clamp(min=0))
        smooth = -lprobs.sum(dim=-1, keepdim=True)
        nll = nll.masked_fill(pad, 0.0)
        smooth = smooth.masked_fill(pad, 0.0)
        eps_i = self.eps / (lprobs.size(-1) - 1)
        loss = (1.0 - self.eps - eps_i) * nll.sum() + eps_i * smooth.sum()
        return loss, nll.sum(), self.ce(logits, target)


class FocalLossMulticlass(nn.Module):
    """Multi-class focal loss with per-class alpha gathered by target, gamma=2, mean over valid."""

    def __init__(self, gamma=2.0):
        super().__init__()
        self.gamma = gamma
        self.register_buffer("alpha", torch.tensor([0.25, 0.5, 0.75, 1.0]))

    def forward(self, logits, target):
        logpt = F.log_softmax(logits, dim=1).gather(1, target.unsqueeze(1)).squeeze(1)
        pt = logpt.exp()
        at = self.alpha.gather(0, target)
        loss = -at * (1 - pt) ** self.gamma * logpt
        return loss.mean(), loss


class TripletCdistBatchAll(nn.Module):
    """Batch-all triplet loss with cdist (p=2), 3-D mask from label equality, fraction positive."""

    def __init__(self, margin=0.3):
        super().__init__()
        self.margin = margin

    def forward(self, emb, labels):
        d = torch.cdist(emb, emb, p=2)
        tl = d.unsqueeze(2) - d.unsqueeze(1) + self.margin
        eye = torch.eye(labels.size(0), dtype=torch.bool)
        not_eye = ~eye
        distinct = not_eye.unsqueeze(2) & not_eye.unsqueeze(1) & not_eye.unsqueeze(0)
        eq = labels.unsqueeze(0) == labels.unsqueeze(1)
        valid = eq.unsqueeze(2) & ~eq.unsqueeze(1)
        mask = distinct & valid
        tl = F.relu(tl * mask.float())
        pos = (tl > 1e-16).float()
        n_pos = pos.sum()
        frac = n_pos / (mask.sum().float() + 1e-16)
        return tl.sum() / (n_pos + 1e-16), frac


class ContrastiveCdistL1(nn.Module):
    """Siamese contrastive loss with cdist p=1 and p=2 (pairwise distance), clamp(margin - d)."""

    def forward(self, a, b, same):
        d1 = torch.cdist(a.unsqueeze(0), b.unsqueeze(0), p=1).squeeze(0).diagonal()
        d2 = F.pairwise_distance(a, b, p=2.0, eps=1e-6)
        loss = same * d2.pow(2) + (1 - same) * torch.clamp(2.0 - d2, min=0.0).pow(2)
        return loss.mean(), d1, torch.cdist(a, b, p=0.5 + 1.5)


class CTCAlphaManual(nn.Module):
    """CTC forward (alpha) recursion in log space over a Python loop, blank-extended labels,
    logaddexp of shifted alphas, -inf where the skip transition is not allowed."""

    def forward(self, logits, labels):      # (T, N, C), (N, L)
        lp = logits.log_softmax(-1)
        t_len, n, _ = lp.shape
        ext = torch.zeros(n, 2 * labels.size(1) + 1, dtype=torch.long)
        ext[:, 1::2] = labels
        s = ext.size(1)
        lpe = lp.gather(2, ext.unsqueeze(0).expand(t_len, n, s))
        neg_inf = torch.tensor(float("-inf"))
        alpha = torch.full((n, s), float("-inf"))
        alpha[:, :2] = lpe[0, :, :2]
        same = torch.cat([torch.ones(n, 2, dtype=torch.bool), ext[:, 2:] == ext[:, :-2]], 1)
        for t in range(1, t_len):
            a1 = F.pad(alpha[:, :-1], (1, 0), value=float("-inf"))
            a2 = F.pad(alpha[:, :-2], (2, 0), value=float("-inf"))
            a2 = torch.where(same, neg_inf, a2)
            alpha = torch.logsumexp(torch.stack([alpha, a1, a2]), 0) + lpe[t]
        ll = torch.logaddexp(alpha[:, -1], alpha[:, -2])
        ref = F.ctc_loss(lp, labels, torch.full((n,), t_len), torch.full((n,), labels.size(1)), reduction="none")
        return -ll, ref


class LossZoo3(nn.Module):
    """Less common torch.nn.functional losses with their reduction variants."""

    def forward(self, x, y, t, cls):
        return (F.poisson_nll_loss(x, y.abs(), log_input=True, full=True),
                F.poisson_nll_loss(x.exp(), y.abs(), log_input=False, reduction="sum"),
                F.kl_div(x.log_softmax(-1), y.log_softmax(-1), reduction="batchmean", log_target=True),
                F.multi_margin_loss(x, cls, p=2, margin=0.5, weight=torch.tensor([1.0, 2.0, 1.0, 0.5, 1.0])),
                F.multilabel_soft_margin_loss(x, t),
                F.soft_margin_loss(x, torch.where(t > 0, 1.0, -1.0), reduction="none"),
                F.hinge_embedding_loss(x, torch.where(t > 0, 1.0, -1.0), margin=0.7),
                F.triplet_margin_with_distance_loss(x, y, x.flip(0), distance_function=lambda a, b: 1 - F.cosine_similarity(a, b),
                                                    margin=0.4, swap=True))


case("label_smoothed_nll_ignore", lambda: (R(6, 5), torch.tensor([0, 4, -100, 2, 1, -100])))(lambda: LabelSmoothingCE())
case("focal_loss_alpha_gather", lambda: (R(7, 4), torch.randint(0, 4, (7,))))(lambda: FocalLossMulticlass())
case("triplet_batch_all_cdist", lambda: (R(6, 4), torch.tensor([0, 1, 0, 2, 1, 0])))(lambda: TripletCdistBatchAll())
case("contrastive_cdist_p1", lambda: (R(5, 3), R(5, 3), torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])))(
    lambda: ContrastiveCdistL1())
case("ctc_alpha_recursion_manual", lambda: (R(6, 2, 5), torch.tensor([[1, 1, 2], [3, 4, 3]])))(lambda: CTCAlphaManual())
case("loss_zoo_poisson_multimargin", lambda: (R(4, 5), R(4, 5), (torch.rand(4, 5) > 0.5).float(),
                                              torch.tensor([0, 3, 4, 1])))(lambda: LossZoo3())


# ===================================================================== positional codes
class SinusoidalPEBuffer(nn.Module):
    """Annotated-transformer PositionalEncoding: div_term with exp(arange*-log(1e4)/d), 0::2/1::2 writes,
    buffer sliced by the input length, plus the fairseq variant built per call (half sin, half cos)."""

    def __init__(self, d=8, max_len=32):
        super().__init__()
        pe = torch.zeros(max_len, d)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.d = d

    def forward(self, x, padding_mask):
        x = x * math.sqrt(self.d) + self.pe[:, : x.size(1)]
        half = self.d // 2
        emb = math.log(10000) / (half - 1)
        emb = torch.exp(torch.arange(half, dtype=torch.float) * -emb)
        pos = torch.cumsum(~padding_mask, dim=1) * (~padding_mask) + 1       # fairseq make_positions
        e = pos.unsqueeze(-1).float() * emb
        e = torch.cat([torch.sin(e), torch.cos(e)], dim=-1)
        return x + e, pos


class ALiBiNonPow2(nn.Module):
    """ALiBi slopes for a head count that is not a power of two (BLOOM's closest power + extra),
    bias from cumsum of the attention mask, softmax in float32 from a bf16-free path."""

    def __init__(self, heads=6):
        super().__init__()
        self.heads = heads

    def forward(self, scores, attention_mask):
        b, seq = attention_mask.shape
        n = self.heads
        closest = 2 ** math.floor(math.log2(n))
        base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
        powers = torch.arange(1, 1 + closest, dtype=torch.int32)
        slopes = torch.pow(base, powers)
        if closest != n:
            extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32)
            num_rem = min(closest, n - closest)
            extra_powers = torch.arange(1, 1 + 2 * num_rem, 2, dtype=torch.int32)
            slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
        arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
        alibi = slopes[..., None] * arange_tensor
        s = scores + alibi.view(b, n, 1, seq)
        s = s.masked_fill(attention_mask[:, None, None, :] == 0, torch.finfo(s.dtype).min)
        return F.softmax(s, -1, dtype=torch.float32), slopes


class DebertaLogBuckets(nn.Module):
    """DeBERTa make_log_bucket_position: sign, abs with where, log ratio, ceil, long casts."""

    def __init__(self, bucket_size=8, max_position=32):
        super().__init__()
        self.bs, self.mp = bucket_size, max_position
        self.emb = nn.Embedding(2 * bucket_size, 4)

    def forward(self, q_len_ref):
        q = q_len_ref.size(1)
        q_ids = torch.arange(0, q)
        k_ids = torch.arange(0, q + 3)
        rel = q_ids[:, None] - k_ids[None, :]
        sign = torch.sign(rel)
        mid = self.bs // 2
        abs_pos = torch.where((rel < mid) & (rel > -mid), torch.tensor(mid - 1).type_as(rel), torch.abs(rel))
        log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((self.mp - 1) / mid)) * (mid - 1)) + mid
        bucket = torch.where(abs_pos <= mid, rel.type_as(log_pos), log_pos * sign)
        idx = (bucket.long() + self.bs).clamp(0, 2 * self.bs - 1)
        return bucket, self.emb(idx).sum(-1) + q_len_ref.mean()


class GPTJRotaryInterleaved(nn.Module):
    """GPT-J rotate_every_two: x[..., ::2] / x[..., 1::2], stack(-1).flatten(-2), repeat_interleave(2)
    of sin/cos, partial rotary dims (first 4 of 8), cat of the pass-through part."""

    def __init__(self, rot=4):
        super().__init__()
        self.rot = rot
        inv_freq = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, position_ids):
        sinusoid = torch.einsum("bi,j->bij", position_ids.float(), self.inv_freq)
        sin = torch.repeat_interleave(sinusoid.sin()[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(sinusoid.cos()[:, :, None, :], 2, 3)
        q_rot, q_pass = q[..., : self.rot], q[..., self.rot:]
        x1, x2 = q_rot[..., ::2], q_rot[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return torch.cat([q_rot * cos + rotated * sin, q_pass], dim=-1)


def _pad_mask():
    m = torch.zeros(2, 5, dtype=torch.bool)
    m[1, 3:] = True
    return R(2, 5, 8), m


case("sinusoidal_pe_fairseq_positions", _pad_mask)(lambda: SinusoidalPEBuffer())
case("alibi_non_pow2_heads_bloom", lambda: (R(2, 6, 4, 5), torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])))(
    lambda: ALiBiNonPow2())
case("deberta_log_bucket_position", lambda: (R(2, 12),))(lambda: DebertaLogBuckets())
case("gptj_rotary_interleaved_partial", lambda: (R(2, 5, 3, 8), torch.arange(5).repeat(2, 1) + torch.tensor([[0], [3]])))(
    lambda: GPTJRotaryInterleaved())


# ============================================================================== integers
class FloorDivRemainderNeg(nn.Module):
    """Python-semantics integer division: floor_divide / remainder / fmod / trunc div with negative
    operands on int64 and int32, tensor and Python-int divisors, and true division int/int."""

    def forward(self, a, b, c32):
        return (torch.floor_divide(a, b), torch.remainder(a, b), torch.fmod(a, b), a // -3, a % -3, -7 // b,
                torch.remainder(-7, b), torch.div(a, b), a / 4, torch.true_divide(c32, 3), c32 // 2, c32 % -5,
                (c32 // b).dtype == torch.int64, torch.div(c32, -2, rounding_mode="trunc"),
                torch.div(c32, -2, rounding_mode="floor"))


class BitHashing(nn.Module):
    """Feature hashing: multiply-shift hashes with int64 masks, xor/and/or, shifts, popcount by loop,
    modulo into buckets, and a bool packing into bytes (shift + sum)."""

    def __init__(self, buckets=97):
        super().__init__()
        self.buckets = buckets
        self.emb = nn.Embedding(buckets, 3)

    def forward(self, ids, bits):
        h = (ids * 2654435761) & 0xFFFFFFFF
        h = h ^ (h >> 16)
        h = (h * 0x45D9F3B) & 0xFFFFFFFF
        h = h ^ (h >> 13)
        bucket = h % self.buckets
        pop = torch.zeros_like(ids)
        v = ids.clone()
        for _ in range(8):
            pop += v & 1
            v = v >> 1
        packed = (bits.to(torch.uint8).view(-1, 8) << torch.arange(8, dtype=torch.uint8)).sum(-1, dtype=torch.uint8)
        return self.emb(bucket).sum(1), pop, packed, (ids | 0x100) ^ (ids & 0xF), ~ids, ids << 33


class BoolReductions(nn.Module):
    """any/all over dims (bool, float, int), keepdim, empty dims, logical ops, count_nonzero."""

    def forward(self, x, m, i):
        e = x[:, :0]
        return ((x > 0).any(1), (x > -2).all(0), x.any(), m.all(1, keepdim=True), i.any(0), i.all(),
                torch.logical_xor(m, x > 0).sum(1), torch.count_nonzero(x > 0.5, dim=0), e.any(1), e.all(1),
                torch.logical_and(m, i).any(-1), m.sum(), (~m).float().mean(1), torch.any(m, dim=(0, 1)))


class ArgTies(nn.Module):
    """argmax/argmin/max(dim)/min(dim) on inputs with many ties (first index wins), NaN in a row,
    int and bool tensors, keepdim, flattened argmax."""

    def forward(self, q, qi, b):
        qn = q.clone()
        qn[1, 2] = float("nan")
        return (q.argmax(1), q.argmin(0), q.max(1), q.min(0, keepdim=True), q.argmax(), qn.argmax(1), qn.max(1),
                qn.argmin(1), qi.argmax(0), qi.max(1), b.int().argmax(1), torch.amax(qi, 1), q.argmax(1, keepdim=True))


class CumOps(nn.Module):
    """cummax/cummin (ties: last index), cumsum of bool (int64), cumprod with zeros, logcumsumexp with -inf,
    reverse cumsum via flip."""

    def forward(self, x, q):
        xi = x.clone()
        xi[0, 2] = float("-inf")
        xi[1, :] = float("-inf")
        return (torch.cummax(q, 1), torch.cummin(q, 0), (x > 0).cumsum(1), torch.cumprod(torch.where(x.abs() < 0.3, 0.0, x), 1),
                torch.logcumsumexp(xi, 1), x.flip(1).cumsum(1).flip(1), torch.cumsum(q.long(), 0),
                torch.cumsum(x, 1, dtype=torch.float64))


class WhereChains(nn.Module):
    """torch.where with Python scalars (int/float/bool dtypes of the result), nested, int tensors with
    float scalars, and where(cond) chains for piecewise functions."""

    def forward(self, x, i):
        a = torch.where(x > 0, x, 0.0)
        b = torch.where(x > 1, 1, -1)
        c = torch.where(i > 2, i, 2.5)
        d = torch.where(x > 0.5, torch.where(x > 1.5, 3.0, 2.0), torch.where(x < -1, -1.0, x))
        e = torch.where(i % 2 == 0, i // 2, 3 * i + 1)
        f = torch.where(x.abs() < 1, 0.5 * x ** 2, x.abs() - 0.5)
        g = torch.where(x > 0, True, False)
        return a, b, c, d, e, f, g, x.where(x < 0, torch.tensor(7.0))


class ClampTensorBounds(nn.Module):
    """clamp with tensor min/max broadcast (min > max in places: max wins), clamp of int tensors with
    float scalars (promotes), clamp_min_/clamp_max_ in place, hardtanh of a slice."""

    def forward(self, x, lo, hi, i):
        y = x.clone()
        y[:, :2].clamp_min_(-0.1)
        return (torch.clamp(x, lo, hi), torch.clamp(x, min=lo), torch.clamp(x, max=hi.unsqueeze(0)),
                torch.clamp(i, min=0.5), torch.clamp(i, -2, 2), i.clamp(max=torch.tensor(1)), y,
                x.clamp(min=float("nan")).isnan().sum(), torch.clamp(x, min=hi, max=lo))


class IntEdgeCases(nn.Module):
    """Integer edge cases of hashing/bit-packing code: shifts by the width or more (a Python
    int: 0 or the sign fill in eager), INT_MIN // -1 and % -1 on int32 (eager: INT_MIN, 0)."""

    def forward(self, h32, d32, h64):
        return (h64 >> 64, h64 << 70, h32 >> 40, (h32 << 33) + 1, h32.to(torch.int8) << 9, h32 // d32, h32 % d32,
                torch.fmod(h32, d32), h64 % d32.long())


def _int_edges():
    h = torch.randint(-2 ** 31, 2 ** 31 - 1, (6,), dtype=torch.int32)
    h[0] = -2 ** 31
    d = torch.tensor([-1, 3, -1, 7, -5, 2], dtype=torch.int32)
    h64 = h.long() * 2 ** 31
    h64[1] = -2 ** 63
    return h, d, h64


case("int_shift_width_min_div_edges", _int_edges)(lambda: IntEdgeCases())
case("floor_div_remainder_negative", lambda: (torch.randint(-20, 20, (3, 5)), torch.tensor([3, -3, 4, -5, 7]),
                                              torch.randint(-50, 50, (5,), dtype=torch.int32)))(
    lambda: FloorDivRemainderNeg())
case("bit_hashing_shifts_masks", lambda: (torch.randint(0, 10 ** 6, (4, 3)), torch.rand(3, 16) > 0.5))(
    lambda: BitHashing())
case("bool_any_all_reductions", lambda: (R(3, 4), torch.rand(3, 4) > 0.3, torch.randint(0, 2, (3, 4))))(
    lambda: BoolReductions())
case("argmax_argmin_ties", lambda: (torch.randint(0, 3, (4, 6)).float(), torch.randint(0, 3, (4, 6)),
                                    torch.rand(4, 6) > 0.5))(lambda: ArgTies())
case("cummax_logcumsumexp_cumprod", lambda: (R(3, 6), torch.randint(0, 3, (3, 6)).float()))(lambda: CumOps())
case("where_scalar_chains", lambda: (R(3, 5) * 2, torch.randint(-3, 6, (3, 5))))(lambda: WhereChains())
case("clamp_tensor_bounds", lambda: (R(3, 4), R(3, 4) * 0.5 - 0.5, R(4) * 0.5 + 0.3, torch.randint(-4, 4, (3, 4))))(
    lambda: ClampTensorBounds())


# ======================================================================== masks and NaN
class FullyMaskedAttention(nn.Module):
    """Padding-masked attention where one batch element is fully padded: softmax over -inf rows gives NaN
    (kept in one output), nan_to_num'd in the other, log_softmax of the same rows, masked mean pooling
    with a zero count."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, pad):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        s = s.masked_fill(pad[:, None, :], float("-inf"))
        p = s.softmax(-1)
        out = p.nan_to_num(0.0) @ v
        keep = (~pad).float().unsqueeze(-1)
        pooled = (out * keep).sum(1) / keep.sum(1)
        return p, out, s.log_softmax(-1), pooled, torch.nan_to_num(pooled, nan=-1.0)


def _full_pad():
    pad = torch.zeros(3, 4, dtype=torch.bool)
    pad[1] = True
    pad[2, 2:] = True
    return R(3, 4, 8), pad


class NaNPropagation(nn.Module):
    """NaN through max/min/maximum/fmax/clamp/relu/sort/topk/amax/median/nanmean/nansum/sign."""

    def forward(self, x):
        x = x.clone()
        x[0, 1] = float("nan")
        x[2] = float("nan")
        return (torch.maximum(x, torch.zeros_like(x)), torch.fmax(x, torch.zeros_like(x)), x.relu(), x.clamp(-0.5, 0.5),
                x.sort(1).values, x.amax(1), x.nanmean(1), x.nansum(0), x.sign(), torch.nan_to_num(x, nan=2.0, posinf=9.0),
                torch.min(x, 1).values, torch.median(x, 1).values, x.nanmedian(1).values, F.hardtanh(x), x.sigmoid())


case("fully_masked_attention_rows", _full_pad)(lambda: FullyMaskedAttention())
case("nan_propagation_reductions", lambda: (R(3, 5),))(lambda: NaNPropagation())


# ================================================================================ vision
class OverlapAddFold(nn.Module):
    """Patch-based denoiser: unfold with stride < kernel and padding/dilation, per-patch MLP,
    fold back and normalize by the fold of ones (overlap count)."""

    def __init__(self, k=3):
        super().__init__()
        self.k = k
        self.mlp = nn.Linear(2 * k * k, 2 * k * k)

    def forward(self, x):
        b, c, h, w = x.shape
        cols = F.unfold(x, self.k, dilation=1, padding=1, stride=2)
        cols = self.mlp(cols.transpose(1, 2)).transpose(1, 2)
        out = F.fold(cols, (h, w), self.k, padding=1, stride=2)
        norm = F.fold(torch.ones_like(cols), (h, w), self.k, padding=1, stride=2)
        d = F.unfold(x, 2, dilation=2)
        return out / norm.clamp(min=1), d, nn.Unfold(kernel_size=(2, 3), stride=(1, 2))(x)


class AffineGrid3D(nn.Module):
    """Volumetric spatial transformer: affine_grid for 5-D, grid_sample trilinear / nearest with border
    and zeros padding, both align_corners."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Linear(2 * 4 * 4 * 4, 12)
        nn.init.zeros_(self.loc.weight)
        with torch.no_grad():
            self.loc.bias.copy_(torch.tensor([1.0, 0.1, 0, 0.05, 0, 0.9, 0, 0, 0.1, 0, 1.1, -0.1]))

    def forward(self, vol):
        theta = self.loc(vol.flatten(1)).view(-1, 3, 4) + 0.05 * vol.mean()
        g1 = F.affine_grid(theta, list(vol.shape), align_corners=False)
        g2 = F.affine_grid(theta, [vol.size(0), 2, 3, 5, 4], align_corners=True)
        return (F.grid_sample(vol, g1, mode="bilinear", padding_mode="border", align_corners=False),
                F.grid_sample(vol, g2, mode="nearest", padding_mode="zeros", align_corners=True), g2)


class InterpZoo3(nn.Module):
    """interpolate: nearest-exact, area, bilinear antialias downsampling, bicubic align_corners True with
    a non-integer scale, trilinear size, linear 1-D align_corners, nearest with size on channels_last."""

    def forward(self, x, v, s):
        return (F.interpolate(x, scale_factor=0.6, mode="nearest-exact"),
                F.interpolate(x, size=(3, 4), mode="area"),
                F.interpolate(x, size=(4, 3), mode="bilinear", antialias=True, align_corners=False),
                F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True),
                F.interpolate(x, scale_factor=(2.0, 0.5), mode="bicubic", align_corners=False),
                F.interpolate(v, size=(3, 5, 2), mode="trilinear", align_corners=False),
                F.interpolate(s, scale_factor=2.5, mode="linear", align_corners=True),
                F.interpolate(x.to(memory_format=torch.channels_last), size=(9, 11), mode="nearest"))


class PoolCorners(nn.Module):
    """avg_pool ceil_mode with count_include_pad False and divisor_override, 1-D/3-D, LP pooling,
    max_pool ceil_mode with dilation and indices, fractional-free adaptive 3-D/1-D non-divisible."""

    def forward(self, x, v, s):
        return (F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True),
                F.avg_pool2d(x, 2, 3, 0, ceil_mode=True, divisor_override=3),
                F.avg_pool1d(s, 4, 3, 2, ceil_mode=True, count_include_pad=False),
                F.avg_pool3d(v, 2, 2, ceil_mode=True),
                F.lp_pool2d(x.abs(), 2.0, 2, ceil_mode=False),
                F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True, return_indices=True),
                F.adaptive_avg_pool3d(v, (2, 3, 2)), F.adaptive_avg_pool1d(s, 3), F.adaptive_max_pool1d(s, 4))


class EmbeddingBagWeights(nn.Module):
    """EmbeddingBag sum with per_sample_weights and include_last_offset, max mode with padding_idx,
    an empty bag, functional embedding_bag on 2-D input with mean."""

    def __init__(self):
        super().__init__()
        self.bag_sum = nn.EmbeddingBag(12, 4, mode="sum", include_last_offset=True)
        self.bag_max = nn.EmbeddingBag(12, 4, mode="max", padding_idx=0)
        self.w = nn.Parameter(torch.randn(12, 4))

    def forward(self, ids, offsets, weights, ids2d):
        return (self.bag_sum(ids, offsets, per_sample_weights=weights),
                self.bag_max(ids, offsets[:-1]),
                F.embedding_bag(ids2d, self.w, mode="mean", padding_idx=3))


class NormsNoAffine(nn.Module):
    """InstanceNorm without affine on 1-D/2-D/3-D inputs, GroupNorm(affine=False) with groups == channels
    and with one group, F.group_norm / F.instance_norm / F.layer_norm without weights, LocalResponseNorm."""

    def __init__(self):
        super().__init__()
        self.in2 = nn.InstanceNorm2d(4)
        self.gn_c = nn.GroupNorm(4, 4, affine=False)
        self.gn_1 = nn.GroupNorm(1, 4, affine=False, eps=1e-3)
        self.lrn = nn.LocalResponseNorm(3)

    def forward(self, x, s, v):
        return (self.in2(x), self.gn_c(x), self.gn_1(x), F.instance_norm(s), F.instance_norm(v, eps=1e-2),
                F.group_norm(s, 2), F.layer_norm(x, x.shape[-2:]), self.lrn(x), F.rms_norm(x, (x.size(-1),)))


class PixelShuffleOdd(nn.Module):
    """Sub-pixel conv with ICNR-initialized weights (pixel_shuffle 3x), pixel_unshuffle on a
    channels_last input, and a depth-to-space written with view/permute (DCR order)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2 * 9, 3, padding=1)
        w = torch.randn(2, 2, 3, 3)
        with torch.no_grad():
            self.conv.weight.copy_(w.repeat_interleave(9, 0))

    def forward(self, x):
        y = F.pixel_shuffle(self.conv(x), 3)
        u = F.pixel_unshuffle(x.contiguous(memory_format=torch.channels_last), 2)
        b, c, h, w = u.shape
        d2s = u.view(b, 2, 2, c // 4, h, w).permute(0, 3, 4, 1, 5, 2).reshape(b, c // 4, h * 2, w * 2)
        return y, u, d2s


case("overlap_add_fold_normalized", lambda: (R(2, 2, 6, 7),))(lambda: OverlapAddFold())
case("affine_grid_3d_volume", lambda: (R(2, 2, 4, 4, 4),))(lambda: AffineGrid3D())
case("interpolate_antialias_nearest_exact", lambda: (R(2, 2, 6, 7), R(1, 2, 4, 4, 3), R(2, 3, 5)))(
    lambda: InterpZoo3())
case("pool_ceil_divisor_override", lambda: (R(2, 2, 7, 6), R(1, 2, 5, 5, 3), R(2, 3, 11)))(lambda: PoolCorners())
case("embedding_bag_per_sample_weights", lambda: (torch.tensor([1, 2, 0, 5, 5, 11, 3, 0]), torch.tensor([0, 3, 3, 6, 8]),
                                                  torch.rand(8), torch.tensor([[1, 3, 4], [3, 3, 3]])))(
    lambda: EmbeddingBagWeights())
case("norms_without_affine", lambda: (R(2, 4, 5, 6), R(2, 4, 7), R(1, 2, 3, 4, 5)))(lambda: NormsNoAffine())
case("pixel_shuffle_icnr_d2s", lambda: (R(2, 2, 4, 6),))(lambda: PixelShuffleOdd())


# ====================================================================== parametrizations
class OrthogonalParam(nn.Module):
    """torch.nn.utils.parametrizations.orthogonal (matrix_exp / householder / cayley) on Linear."""

    def __init__(self):
        super().__init__()
        P = torch.nn.utils.parametrizations
        self.a = P.orthogonal(nn.Linear(4, 4), orthogonal_map="matrix_exp")
        self.b = P.orthogonal(nn.Linear(5, 3), orthogonal_map="householder")
        self.c = P.orthogonal(nn.Linear(4, 4, bias=False), orthogonal_map="cayley")

    def forward(self, x):
        h = self.c(self.a(x))
        return h, self.b(torch.cat([h, x[:, :1]], 1)), self.a.weight @ self.a.weight.T


class SpectralNormConvTrain(nn.Module):
    """parametrizations.spectral_norm on Conv2d and Linear in train mode: power iteration updates u/v
    buffers every call, backward through the normalized weight."""

    def __init__(self):
        super().__init__()
        P = torch.nn.utils.parametrizations
        self.conv = P.spectral_norm(nn.Conv2d(2, 3, 3), n_power_iterations=2)
        self.fc = P.spectral_norm(nn.Linear(3 * 3 * 3, 1))

    def forward(self, x):
        h = F.leaky_relu(self.conv(x), 0.1)
        out = self.fc(h.flatten(1))
        out.mean().backward()
        return out.detach()


class WeightNormDimNone(nn.Module):
    """Old-style torch.nn.utils.weight_norm with dim=None (scalar g) and dim=1, in a residual MLP."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.utils.weight_norm(nn.Linear(5, 5), dim=None)
        self.b = torch.nn.utils.weight_norm(nn.Linear(5, 5), dim=1)
        # the computed weights are non-leaf tensors deepcopy refuses (pytorch#103001): dropped,
        # the forward pre-hooks compute them again on every call
        del self.a.weight, self.b.weight

    def forward(self, x):
        return x + self.b(F.gelu(self.a(x), approximate="tanh")), self.a.weight_g


case("orthogonal_parametrization_maps", lambda: (R(3, 4),))(lambda: OrthogonalParam())
case("spectral_norm_param_conv_train", lambda: (R(2, 2, 5, 5),), train=True)(lambda: SpectralNormConvTrain())
case("weight_norm_dim_none", lambda: (R(3, 5),))(lambda: WeightNormDimNone())


# ========================================================================== dtype semantics
class PromotionZoo(nn.Module):
    """Type promotion: int tensor + float scalar, bool * float, int / int (true division), 0-d float
    tensor with int tensor, int32 + int64, uint8 + int8 (int16), float16 tensor + float32 0-d tensor
    (stays float16), bool + bool (bool), int ** float, float64 scalar tensor * float32."""

    def forward(self, i, b, f, h, u, s8, i32, zf, zd):
        return (i + 2.5, b * f, i / i.clamp(min=1), i * zf, i32 + i, u + s8, h + zf, b + b, i ** 0.5,
                f * zd, torch.add(i, b), (u * 2).dtype == torch.uint8, u * 2, i.float() // 2, i % 2.5,
                torch.true_divide(b, 2), h.sum(), h.mean(), u.sum(), b.sum(), s8.prod(), torch.mul(i32, 1.5))


class HalfBF16Math(nn.Module):
    """float16 / bfloat16 inputs on the CPU: softmax, layer_norm, cumsum, logsumexp, var, matmul,
    conversions back to float32 and mixed-dtype where."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, h, bf):
        hf = h.float()
        return (h.softmax(-1), F.layer_norm(h, (8,)), h.cumsum(-1), torch.logsumexp(bf, -1), bf.var(-1),
                bf @ bf.transpose(-1, -2), self.ln(bf.float()).bfloat16(), torch.where(h > 0, h, hf),
                (h * 1000).exp(), bf.to(torch.float16), (h + bf).dtype == torch.float32, h.mean(), bf.sum(-1))


class Float64Physics(nn.Module):
    """float64 simulation step: leapfrog with sin/cos/exp, pairwise distances, softening, energy sum;
    result compared at float64 tolerance."""

    def forward(self, pos, vel, mass):
        dt = 1e-3
        for _ in range(3):
            d = pos.unsqueeze(0) - pos.unsqueeze(1)
            r2 = (d ** 2).sum(-1) + 1e-4
            inv = r2.pow(-1.5) * (1 - torch.eye(pos.size(0), dtype=pos.dtype))
            acc = (d * (inv * mass.unsqueeze(0)).unsqueeze(-1)).sum(1)
            vel = vel + dt * acc
            pos = pos + dt * vel
        ke = 0.5 * (mass * (vel ** 2).sum(-1)).sum()
        pe = -(mass[:, None] * mass[None] / r2.sqrt() * (1 - torch.eye(pos.size(0), dtype=pos.dtype))).sum() / 2
        return pos, vel, ke + pe, torch.exp(-pos.norm(dim=-1)) * torch.cos(pos[:, 0])


case("dtype_promotion_zoo", lambda: (torch.randint(-5, 9, (3, 4)), torch.rand(3, 4) > 0.5, R(3, 4), R(3, 4).half(),
                                     torch.randint(0, 255, (3, 4), dtype=torch.uint8),
                                     torch.randint(-100, 100, (3, 4), dtype=torch.int8),
                                     torch.randint(-9, 9, (3, 4), dtype=torch.int32), torch.tensor(1.75),
                                     torch.tensor(0.3, dtype=torch.float64)))(lambda: PromotionZoo())
case("half_bf16_math_cpu", lambda: (R(2, 3, 8).half(), R(2, 3, 8).bfloat16()))(lambda: HalfBF16Math())
case("float64_nbody_leapfrog", lambda: (R(5, 3).double(), R(5, 3).double() * 0.1, torch.rand(5).double() + 0.5))(
    lambda: Float64Physics())


# ====================================================================== shapes and layouts
class EmptyReductions(nn.Module):
    """Reductions over empty dims: sum 0, prod 1, mean NaN, logsumexp -inf, any False, all True,
    cat with empty, matmul with an inner dim of 0, max over a non-empty dim of an empty tensor."""

    def forward(self, x, e):
        z = x[:, :0]
        return (z.sum(1), z.prod(1), z.mean(1), torch.logsumexp(z, 1), z.any(1), z.all(1), torch.cat([z, x], 1),
                z @ z.transpose(0, 1), e.amax(1), e.sum(), e.softmax(-1), torch.cat([e, e]).shape[0], z.std(1),
                x.new_empty(0).norm())


class ZeroDimOps(nn.Module):
    """0-d tensors: arithmetic with 1-D, item() in Python math, 0-d index, unsqueeze/expand,
    0-d int as a dim size, where with 0-d cond, stacking 0-d tensors."""

    def forward(self, x, s, k):
        n = int(k)
        y = x * s + s ** 2
        idx = torch.tensor(1)
        return (y, x[idx], s.unsqueeze(0).expand(3), torch.stack([s, s * 2, x.sum()]), x.topk(n).values,
                torch.where(s > 0, x, -x), s.reshape(1, 1), (s > 0).float(), x.new_full((n,), float(s)),
                math.exp(float(s)) * x)


class StridedInputs(nn.Module):
    """Inputs that are views: expanded (stride 0), transposed, sliced with an offset and a step,
    channels_last 4-D, negative-stride-free flips; reductions, matmuls and pointwise ops on them."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, e, t, s, cl):
        return (e * 2 + 1, e.sum(0), self.fc(t), t.softmax(0), s.cumsum(1), s @ t.T, cl.mean((2, 3)), cl * cl.amax(1, keepdim=True),
                F.layer_norm(t, (5,)), (e + t[:, :1].T.expand(3, 4)).sum(), s.flip(0), cl.permute(0, 2, 3, 1).flatten(1))


def _strided_inputs():
    base = R(8, 9)
    return (R(1, 4).expand(3, 4), R(5, 4).t(), base[2:6:2, 1:6], R(2, 3, 4, 5).to(memory_format=torch.channels_last))


class InPlaceViewsOfInputs(nn.Module):
    """In-place ops on slices/views of inputs: returned view, unreturned write through a transpose,
    a diagonal fill, index_add_ into a column view, masked_fill_ of a row, a chain of views."""

    def forward(self, x, y, z):
        v = x[1:, ::2]
        v.mul_(2.0)
        y.t()[0].add_(10.0)
        z.diagonal().fill_(-1.0)
        col = x[:, 1]
        col.index_add_(0, torch.tensor([0, 0, 2]), torch.ones(3))
        y[1].masked_fill_(y[1] > 10.5, 0.0)
        w = z.view(-1)[2:8].view(2, 3)
        w.sub_(w.mean())
        return v, col.sum(), w


class OutputsAreInputs(nn.Module):
    """Outputs that are the inputs themselves, views of inputs (slice, transpose, view), a detached
    alias, and one input returned twice."""

    def forward(self, x, y):
        s = (x * y).sum()
        return x, x[1:], y.t(), x.view(-1), y.detach(), s, x, {"y": y, "x0": x[0]}


Pred = collections.namedtuple("Pred", ["boxes", "scores", "n"])


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: list
    extra: dict
    loss: torch.Tensor | None = None


class StructuredOutputs3(nn.Module):
    """Returns a dataclass holding a list and a dict, a namedtuple with a Python int, a list of tuples."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = self.fc(x)
        out = Output(logits=h, hidden=[x, h.relu()], extra={"mean": h.mean(0), "shape": tuple(h.shape)})
        return out, Pred(boxes=h[:, :2], scores=h[:, 2].sigmoid(), n=h.size(0)), [(h.max(), h.argmax())]


class ItemControlFlow(nn.Module):
    """Python scalars from .item()/.tolist() in control flow: branches on a max, loop over a list of
    lengths, int(x.sum()) as a slice bound, a float threshold into an arithmetic expression."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, lengths):
        h = self.fc(x)
        if h.max().item() > 0.5:
            h = h - h.max().item()
        else:
            h = h * 2
        rows = []
        for i, n in enumerate(lengths.tolist()):
            rows.append(h[i, :n].sum())
        k = int((h > h.mean()).sum())
        top = h.flatten()[: max(k, 1)]
        thr = float(h.std())
        return torch.stack(rows), top, h.clamp(min=-thr), k


case("empty_reductions_identities", lambda: (R(3, 4), R(0, 5)))(lambda: EmptyReductions())
case("zero_dim_tensor_ops", lambda: (R(4), torch.tensor(0.7), torch.tensor(2)))(lambda: ZeroDimOps())
case("strided_expanded_channels_last_inputs", _strided_inputs)(lambda: StridedInputs())
case("inplace_views_of_inputs", lambda: (R(3, 5), R(4, 2), R(4, 4)))(lambda: InPlaceViewsOfInputs())
case("outputs_are_inputs", lambda: (R(3, 4), R(3, 4)))(lambda: OutputsAreInputs())
case("dataclass_namedtuple_outputs", lambda: (R(5, 4),))(lambda: StructuredOutputs3())
case("item_tolist_control_flow", lambda: (R(3, 4), torch.tensor([2, 4, 1])))(lambda: ItemControlFlow())


# ================================================================== training-mode state
class RunningQuantileTrain(nn.Module):
    """Custom normalizer updating buffers in train mode: step counter (int64 buffer), EMA of a
    kthvalue-based robust scale, running min/max, bias-corrected by 1 - m**step."""

    def __init__(self, d=4, m=0.9):
        super().__init__()
        self.m = m
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.register_buffer("scale", torch.zeros(d))
        self.register_buffer("lo", torch.full((d,), float("inf")))
        self.register_buffer("hi", torch.full((d,), float("-inf")))
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        if self.training:
            with torch.no_grad():
                self.step += 1
                q = h.abs().kthvalue(max(1, int(0.75 * h.size(0))), dim=0).values
                self.scale.mul_(self.m).add_(q, alpha=1 - self.m)
                torch.minimum(self.lo, h.amin(0), out=self.lo)
                torch.maximum(self.hi, h.amax(0), out=self.hi)
        corr = 1 - self.m ** self.step.float()
        return h / (self.scale / corr + 1e-5)


class BNVariantsTrain(nn.Module):
    """BatchNorm2d track_running_stats=False in train, BatchNorm1d on (N, C, L), SyncBatchNorm-free
    momentum 0.3, a frozen BN (eval submodule inside a training model) and backward."""

    def __init__(self):
        super().__init__()
        self.bn_nostats = nn.BatchNorm2d(3, track_running_stats=False)
        self.bn1d = nn.BatchNorm1d(3, momentum=0.3)
        self.frozen = nn.BatchNorm2d(3)
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        self.frozen.eval()
        h = self.frozen(self.bn_nostats(self.conv(x)))
        s = self.bn1d(h.flatten(2))
        loss = s.pow(2).mean()
        loss.backward()
        return loss.detach(), s.detach()


case("running_quantile_buffers_train", lambda: (R(6, 4),), train=True)(lambda: RunningQuantileTrain())
case("bn_variants_frozen_train_backward", lambda: (R(4, 3, 3, 3),), train=True)(lambda: BNVariantsTrain())


# ============================================================================ backward
class GradFocalCdist(nn.Module):
    """Backward through sigmoid focal loss and a cdist-based prototype loss (grads of params compared)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.protos = nn.Parameter(torch.randn(3, 3))

    def forward(self, x, t):
        logits = self.fc(x)
        p = logits.sigmoid()
        ce = F.binary_cross_entropy_with_logits(logits, t, reduction="none")
        p_t = p * t + (1 - p) * (1 - t)
        focal = (ce * (1 - p_t) ** 2 * (0.25 * t + 0.75 * (1 - t))).mean()
        d = torch.cdist(logits, self.protos)
        proto = (-d).log_softmax(-1)[:, 0].mean()
        loss = focal - proto
        loss.backward()
        return loss.detach()


class GradSafeOps(nn.Module):
    """Backward through gradient-sensitive ops: where(x>0, sqrt(x), 0) (NaN-free masked version),
    norm at zero rows, cumprod with zeros, logcumsumexp, clamp at bounds, abs at 0, max with ties."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[0.0, 1.0, -2.0, 0.5], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 3.0, 3.0]]))

    def forward(self, x):
        w = self.w * x
        safe = torch.where(w > 0, w, torch.ones_like(w))
        a = torch.where(w > 0, safe.sqrt(), torch.zeros_like(w)).sum()
        b = w.norm(dim=1).sum()
        c = torch.cumprod(w, 1).sum()
        d = torch.logcumsumexp(w, 1).sum()
        e = w.clamp(0.0, 1.0).sum() + w.abs().sum() + w.max(1).values.sum() + w.amax(1).sum()
        loss = a + b + c + d + e
        loss.backward()
        return loss.detach()


class GradSampling(nn.Module):
    """Backward through grid_sample (bilinear, border), bicubic interpolate and adaptive_avg_pool into a conv."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.grid = nn.Parameter(torch.rand(1, 4, 4, 2) * 2 - 1)

    def forward(self, x):
        h = self.conv(x)
        g = F.grid_sample(h, self.grid.expand(x.size(0), -1, -1, -1), padding_mode="border", align_corners=False)
        u = F.interpolate(h, scale_factor=1.5, mode="bicubic", align_corners=False)
        p = F.adaptive_avg_pool2d(u, (3, 3))
        loss = g.pow(2).mean() + p.mean()
        loss.backward()
        return loss.detach(), self.grid.grad.clone()


class GradInputReturned(nn.Module):
    """Compiled function returns a tensor requiring grad; the harness compares it, grads computed
    with torch.autograd.grad w.r.t. an input inside (create_graph=False)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x):
        x = x.detach().requires_grad_(True)
        y = self.fc(torch.tanh(x)).sum()
        (gx,) = torch.autograd.grad(y, x)
        return gx, y.detach(), self.fc.weight * 2


class AdamManualStep(nn.Module):
    """Hand-written Adam step (repo style): backward, then under no_grad exp_avg.lerp_, exp_avg_sq
    addcmul_, bias corrections with a Python int step attribute, addcdiv_ on params, zero_ grads."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.t = 0
        for n, p in self.fc.named_parameters():
            self.register_buffer(f"m_{n}", torch.zeros_like(p))
            self.register_buffer(f"v_{n}", torch.zeros_like(p))

    def forward(self, x, y):
        loss = F.smooth_l1_loss(self.fc(x), y, beta=0.5)
        loss.backward()
        self.t += 1
        b1, b2, lr = 0.9, 0.999, 1e-2
        with torch.no_grad():
            for n, p in self.fc.named_parameters():
                m, v = getattr(self, f"m_{n}"), getattr(self, f"v_{n}")
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (v / (1 - b2 ** self.t)).sqrt().add_(1e-8)
                p.addcdiv_(m, denom, value=-lr / (1 - b1 ** self.t))
                p.grad.zero_()
        return loss.detach()


case("backward_focal_cdist_protos", lambda: (R(5, 4), (torch.rand(5, 3) > 0.5).float()), train=True)(
    lambda: GradFocalCdist())
case("backward_grad_sensitive_ops", lambda: (torch.tensor([[1.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0],
                                                           [1.0, -1.0, 1.0, 1.0]]),), train=True)(lambda: GradSafeOps())
case("backward_grid_sample_bicubic", lambda: (R(2, 2, 4, 4),), train=True)(lambda: GradSampling())
case("autograd_grad_input_inside", lambda: (R(4, 3),), train=True)(lambda: GradInputReturned())
case("adam_manual_step_python_t", lambda: (R(6, 4), R(6, 2)), train=True)(lambda: AdamManualStep())


# ================================================================================ misc ops
class OrderStats(nn.Module):
    """median (lower of two for even counts), kthvalue, mode with ties, quantile interpolation modes,
    nanquantile, msort, topk largest=False with ties, sort stable descending."""

    def forward(self, x, q):
        return (x.median(1), x.median(), torch.kthvalue(x, 2, 1), torch.mode(q, 1), torch.quantile(x, 0.3, dim=1),
                torch.quantile(x, torch.tensor([0.25, 0.5]), dim=0, interpolation="nearest"),
                torch.quantile(x, 0.5, dim=1, interpolation="midpoint"), torch.quantile(x, 0.4, interpolation="lower"),
                torch.sort(q, dim=1, descending=True, stable=True), torch.msort(x), torch.topk(q, 2, largest=False, sorted=True))


class SearchBucket(nn.Module):
    """searchsorted left/right with a sorter, out_int32, 2-D boundaries, bucketize right, histc with
    explicit range, bincount with weights and minlength (data-dependent length)."""

    def forward(self, x, bounds, unsorted, ids, w):
        sorter = torch.argsort(unsorted)
        return (torch.searchsorted(bounds, x, right=True), torch.searchsorted(bounds, x, out_int32=True),
                torch.searchsorted(unsorted, x, sorter=sorter), torch.searchsorted(bounds.expand(3, -1), x[:3].reshape(3, -1)),
                torch.bucketize(x, bounds, right=True), torch.histc(x, bins=5, min=-2, max=2),
                torch.bincount(ids, weights=w, minlength=6))


class NumericalCalculus(nn.Module):
    """torch.diff with prepend/append and n=2, torch.gradient with spacing and edge_order 2,
    trapezoid / cumulative_trapezoid with dx and x."""

    def forward(self, y, xs):
        return (torch.diff(y, dim=1, prepend=y[:, :1]), torch.diff(y, n=2, dim=1), torch.diff(y, dim=0, append=y[-1:]),
                torch.gradient(y, spacing=0.5, dim=1), torch.gradient(y, dim=1, edge_order=2),
                torch.trapezoid(y, dx=0.1, dim=1), torch.trapezoid(y, x=xs, dim=1), torch.cumulative_trapezoid(y, dim=1))


class TriangularIndexing(nn.Module):
    """triu/tril with negative/positive diagonals, diag_embed with offset, diagonal with dims,
    tril_indices / triu_indices gathering a packed lower triangle, combinations of a vector."""

    def forward(self, x, b):
        n = x.size(-1)
        ti = torch.tril_indices(n, n, offset=-1)
        packed = x[..., ti[0], ti[1]]
        return (x.triu(-1), x.tril(1), torch.diag_embed(b, offset=1), torch.diagonal(x, offset=-1, dim1=-2, dim2=-1),
                packed, torch.triu_indices(3, 4, 1), torch.combinations(b[0], r=2), torch.diag(b[0], -2),
                x.diagonal(0, 0, 2).sum(-1))


class RollFlipRot(nn.Module):
    """roll with multiple negative shifts, flip, rot90 k=3/-1, fliplr/flipud, and circular shift via cat."""

    def forward(self, x):
        return (torch.roll(x, shifts=(-1, 2), dims=(1, 2)), torch.roll(x, 3), x.flip(0, 2), torch.rot90(x, 3, (1, 2)),
                torch.rot90(x, -1, (2, 1)), torch.fliplr(x[0]), torch.flipud(x[0]), torch.cat([x[..., 2:], x[..., :2]], -1))


class SpecialFns(nn.Module):
    """torch.special at edge points: logit with eps, xlogy/xlog1py at 0, entr, erfinv at ±1, i0/i0e/i1,
    sinc at 0, log_ndtr, ndtr, ndtri at 0/1, digamma at 0, lgamma of negatives, multigammaln, expit."""

    def forward(self, x, p):
        S = torch.special
        z = torch.zeros_like(p)
        return (torch.logit(p, eps=1e-3), S.xlogy(z, p), S.xlogy(p, z), S.xlog1py(p, -p), S.entr(p - 0.5),
                S.erfinv(torch.tensor([-1.0, 1.0, 0.5])), S.i0(x), S.i0e(x), S.i1(x), S.sinc(torch.cat([z, x], -1)),
                S.log_ndtr(x * 5), S.ndtr(x), S.ndtri(torch.tensor([0.0, 1.0, 0.3])), torch.digamma(torch.tensor([0.0, -1.0, 2.5])),
                torch.lgamma(torch.tensor([-0.5, -2.5, 3.0])), S.multigammaln(p + 2, 2), S.expit(x), S.log1p(x.abs()),
                S.round(x * 3), S.exp2(x), torch.frexp(x)[1], torch.ldexp(x, torch.tensor([2, -1, 0, 3])))


class FloatModCopysign(nn.Module):
    """Float fmod/remainder with negative operands and -0.0, floor_divide of floats, copysign,
    nextafter, signbit, heaviside, fmod by zero (NaN), remainder by inf."""

    def forward(self, x, y):
        nz = torch.tensor([-0.0, 0.0, -1.5, 2.0])
        return (torch.fmod(x, y), torch.remainder(x, y), torch.floor_divide(x, y), torch.copysign(x, nz[:1]),
                torch.copysign(nz, -1.0), torch.nextafter(x, torch.zeros_like(x)), torch.signbit(nz),
                torch.heaviside(nz, torch.tensor(0.5)), torch.fmod(x, 0.0), torch.remainder(x, float("inf")),
                x % -2.5, -x // 0.7, torch.fmod(nz, -1.0))


class IndexFillCopyTake(nn.Module):
    """index_fill / index_copy / masked_scatter / put_ / take / take_along_dim, negative tensor indices,
    x[..., -1], index_select with repeats."""

    def forward(self, x, idx, m):
        y = x.clone()
        y.put_(torch.tensor([0, 5, -1]), torch.tensor([9.0, 8.0, 7.0]))
        return (x.index_fill(1, idx, -2.0), x.index_copy(0, torch.tensor([2, 0]), x[:2] * 10),
                x.masked_scatter(m, torch.arange(x.numel(), dtype=x.dtype)), y, torch.take(x, torch.tensor([[0, -1], [3, 4]])),
                torch.take_along_dim(x, x.argsort(1), 1), x[torch.tensor([-1, 0])], x[..., -1], x.index_select(1, idx.repeat(2)),
                torch.take_along_dim(x, torch.tensor([[1]]), None))


class RepeatInterleaveTensor(nn.Module):
    """repeat_interleave with tensor repeats (lengths -> segment ids), with output_size, scalar
    repeats on a dim, and segment sums via index_add_ over the ids."""

    def forward(self, x, lengths):
        seg = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        seg2 = torch.repeat_interleave(torch.arange(lengths.numel()), lengths, output_size=int(lengths.sum()))
        sums = torch.zeros(lengths.numel(), x.size(1)).index_add_(0, seg, x[: seg.numel()])
        return seg, seg2, sums, x.repeat_interleave(2, dim=0), torch.repeat_interleave(x[:2], torch.tensor([1, 3]), dim=0)


class ScatterDuplicates(nn.Module):
    """scatter_add with duplicate indices, scatter reduce='multiply'/'add' (deprecated form), scatter with
    a scalar value, index_put_ accumulate=True with duplicates, and index_reduce prod/mean."""

    def forward(self, x, idx):
        return (torch.zeros(4, 3).scatter_add(0, idx, x), torch.ones(4, 3).scatter(0, idx, x, reduce="multiply"),
                torch.zeros(4, 3).scatter(0, idx, 1.5), torch.zeros(4, 3).index_put_((idx[:, 0],), x, accumulate=True),
                torch.ones(4, 3).index_reduce(0, idx[:, 0], x, "prod"),
                torch.ones(4, 3).index_reduce(0, idx[:, 0], x, "mean", include_self=False))


class IntMatmul(nn.Module):
    """int64 matmul/bmm/einsum (CPU supports integer matmul), int sums of products, dot of ints."""

    def forward(self, a, b, c):
        return a @ b, torch.bmm(c, c.transpose(1, 2)), torch.einsum("ij,jk->ik", a, b), (a * a).sum(1), torch.dot(a[0], a[1]), a.mT @ a


class SimilarityEdges(nn.Module):
    """cosine_similarity with zero vectors (eps), normalize of zero rows, pairwise_distance keepdim,
    pdist, cosine similarity matrix by normalize + mm with a temperature."""

    def forward(self, a, b):
        a = a.clone()
        a[1] = 0.0
        return (F.cosine_similarity(a, b, dim=1, eps=1e-8), F.normalize(a, dim=1), F.pairwise_distance(a, b, keepdim=True),
                F.pdist(b), F.pdist(b, p=1), (F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T) / 0.07,
                F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1))


class EinopsStyle(nn.Module):
    """einops-style rearranges written with torch: window partition/reverse (Swin), patch merging via
    strided slices cat, movedim/swapaxes/unflatten, space-to-depth with unfold."""

    def forward(self, x):       # (B, H, W, C)
        b, h, w, c = x.shape
        ws = 2
        win = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        back = win.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        merged = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        m2 = x.movedim(-1, 1).swapaxes(2, 3).unflatten(1, (c // 2, 2)).flatten(0, 1)
        s2d = x.permute(0, 3, 1, 2).unfold(2, 2, 2).unfold(3, 2, 2)
        return win, back, merged.view(b, -1, 4 * c), m2, s2d.reshape(b, c, h // 2, w // 2, 4).sum(-1)


case("order_stats_median_mode_quantile", lambda: (R(4, 6), torch.randint(0, 3, (4, 6)).float()))(lambda: OrderStats())
case("searchsorted_sorter_histc_bincount", lambda: (R(6, 2), torch.tensor([-1.0, -0.2, 0.0, 0.5, 1.2]),
                                                    torch.tensor([0.5, -1.0, 1.2, 0.0, -0.2]),
                                                    torch.randint(0, 5, (9,)), torch.rand(9)))(lambda: SearchBucket())
case("diff_gradient_trapezoid", lambda: (R(3, 6), torch.sort(torch.rand(6)).values))(lambda: NumericalCalculus())
case("triangular_indices_diag_embed", lambda: (R(2, 4, 4), R(2, 3)))(lambda: TriangularIndexing())
case("roll_flip_rot90", lambda: (R(2, 3, 4),))(lambda: RollFlipRot())
case("special_functions_edges", lambda: (R(3, 4), torch.rand(3, 4)))(lambda: SpecialFns())
case("float_mod_copysign_signed_zero", lambda: (R(3, 4) * 3, torch.tensor([1.5, -2.0, 0.7, -0.3])))(
    lambda: FloatModCopysign())
case("index_fill_copy_take_negative", lambda: (R(3, 5), torch.tensor([0, 3]), torch.rand(3, 5) > 0.5))(
    lambda: IndexFillCopyTake())
case("repeat_interleave_tensor_segments", lambda: (R(10, 3), torch.tensor([2, 0, 3, 1])))(
    lambda: RepeatInterleaveTensor())
case("scatter_duplicates_reduce", lambda: (R(5, 3), torch.randint(0, 4, (5, 3))))(lambda: ScatterDuplicates())
case("int64_matmul_einsum", lambda: (torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (4, 2)),
                                     torch.randint(-3, 3, (2, 3, 4))))(lambda: IntMatmul())
case("cosine_zero_vectors_pdist", lambda: (R(4, 5), R(4, 5)))(lambda: SimilarityEdges())
case("einops_window_partition_merge", lambda: (R(2, 4, 6, 4),))(lambda: EinopsStyle())
