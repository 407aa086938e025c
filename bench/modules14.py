"""Fourteenth real-world-style corpus (issue 11 capture, guard soundness): detection, losses,
decoding, configuration and output idioms as public repositories write them.

Detection heads that build their grids lazily into a list cached by shape (YOLOv5's Detect),
CenterNet's max-pool NMS and top-k decoding, torchvision-style anchor caches keyed by sizes,
score-threshold masking, matrix NMS without a loop, FCOS point-in-box assignment; losses with
reductions over masks (sigmoid focal with ignore labels, generalized dice, CLIP's symmetric
InfoNCE with a clamped learnable logit scale, SupCon, CTC from padding masks, batch-hard triplet,
label-smoothed NLL over non-pad tokens); greedy decoding with an early stop on `finished.all()`,
beam search over Python lists of hypotheses, a KV cache grown across calls in a dict attribute,
top-k / top-p sampling from an explicit generator; NamedTuple / dataclass / dict-subclass outputs,
modules configured by Enum / IntEnum / frozen and mutable dataclasses / SimpleNamespace, and
those configurations changed between calls (bench/modules14_config.py, with the stateful and
decoding modules). bench/modules14_train.py adds custom
autograd.Functions, weight / spectral norm, EMA teachers, torch.distributions, hand-written
rearranges, ModuleDict routing by string keys and training steps with optimizer, scheduler and
gradient clipping inside the compiled function; bench/modules14_guards.py what fine-tuning scripts
change between calls (config dicts, class flags, buffers and embeddings resized, forwards
monkeypatched, hooks, layers replaced or frozen); bench/modules14_misc.py library idioms around
the model (timm's scripting checks, metric buffers across calls, generators, autocast inside) and values /
views (inputs written through views, integer semantics, ties, float64 mixes, left-padded position ids).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, registrars, run

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ detection
class YoloDetect(nn.Module):
    """YOLOv5's Detect head in inference: per level a 1x1 conv, the grid and anchor grid rebuilt
    into self.grid[i] only when the feature map's size changed, sigmoid decoding, concatenated."""

    def __init__(self, nc=3, ch=(8, 16)):
        super().__init__()
        self.no, self.na, self.nl = nc + 5, 2, len(ch)
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        self.register_buffer("anchors", torch.tensor([[[10., 13.], [16., 30.]], [[30., 61.], [62., 45.]]]))
        self.stride = torch.tensor([8., 16.])
        self.grid = [torch.empty(0) for _ in range(self.nl)]
        self.anchor_grid = [torch.empty(0) for _ in range(self.nl)]

    def _make_grid(self, nx, ny, i):
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(1, self.na, ny, nx, 2).float() - 0.5
        ag = (self.anchors[i] * self.stride[i]).view(1, self.na, 1, 1, 2).expand(1, self.na, ny, nx, 2)
        return grid, ag

    def forward(self, xs):
        z = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            if self.grid[i].shape[2:4] != x.shape[2:4]:
                self.grid[i], self.anchor_grid[i] = self._make_grid(nx, ny, i)
            xy, wh, conf = x.sigmoid().split((2, 2, self.no - 4), 4)
            xy = (xy * 2 + self.grid[i]) * self.stride[i]
            wh = (wh * 2) ** 2 * self.anchor_grid[i]
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


def _yolo_in(i=0):
    s = [8, 8, 12][i % 3]
    return ([R(1, 8, s, s), R(1, 16, s // 2, s // 2)],)


case("yolov5_detect_grid_cache_by_shape", _yolo_in, ncalls=4)(lambda: YoloDetect())


@fn_case("centernet_maxpool_nms_topk_decode", lambda: (R(2, 3, 8, 8), R(2, 2, 8, 8), R(2, 2, 8, 8)))
def centernet_decode(heat, wh, reg, k=10):
    heat = heat.sigmoid()
    hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
    heat = heat * (hmax == heat).float()
    b, c, h, w = heat.shape
    scores, inds = torch.topk(heat.view(b, -1), k)
    clses = torch.div(inds, h * w, rounding_mode="floor")
    inds = inds % (h * w)
    ys, xs = (inds // w).float(), (inds % w).float()

    def gather(feat):
        feat = feat.view(b, feat.shape[1], -1).permute(0, 2, 1)
        return feat.gather(1, inds.unsqueeze(2).expand(-1, -1, feat.shape[2]))

    r, s = gather(reg), gather(wh)
    xs, ys = xs + r[..., 0], ys + r[..., 1]
    boxes = torch.stack([xs - s[..., 0] / 2, ys - s[..., 1] / 2, xs + s[..., 0] / 2, ys + s[..., 1] / 2], -1)
    return {"boxes": boxes, "scores": scores, "classes": clses}


class AnchorDecode(nn.Module):
    """torchvision-style anchors cached in a dict keyed by (grid sizes, strides), box deltas decoded
    with dw / dh clamped at log(1000 / 16), and boxes above a score threshold kept (a data-dependent
    count)."""

    def __init__(self, thr=0.3):
        super().__init__()
        self.head = nn.Conv2d(4, 3 * 5, 3, padding=1)
        self.sizes, self.thr = (16., 32., 64.), thr
        self._cache = {}

    def anchors(self, gh, gw, stride):
        key = (gh, gw, stride)
        if key not in self._cache:
            base = torch.tensor([[-s / 2, -s / 2, s / 2, s / 2] for s in self.sizes])
            sy, sx = torch.meshgrid(torch.arange(gh) * stride, torch.arange(gw) * stride, indexing="ij")
            shifts = torch.stack([sx, sy, sx, sy], -1).reshape(-1, 1, 4).float()
            self._cache[key] = (shifts + base).reshape(-1, 4)
        return self._cache[key]

    def forward(self, x):
        out = self.head(x).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 5)
        a = self.anchors(x.shape[2], x.shape[3], 8)
        d, logit = out[..., :4], out[..., 4]
        wa, ha = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
        cx, cy = a[:, 0] + 0.5 * wa, a[:, 1] + 0.5 * ha
        dw = d[..., 2].clamp(max=math.log(1000. / 16))
        dh = d[..., 3].clamp(max=math.log(1000. / 16))
        pcx, pcy = d[..., 0] * wa + cx, d[..., 1] * ha + cy
        pw, ph = torch.exp(dw) * wa, torch.exp(dh) * ha
        boxes = torch.stack([pcx - pw / 2, pcy - ph / 2, pcx + pw / 2, pcy + ph / 2], -1)
        scores = logit.sigmoid()
        keep = scores > self.thr
        return boxes[keep], scores[keep], keep.nonzero()[:, 1]


case("anchor_cache_dict_decode_score_threshold", lambda i=0: (R(2, 4, 4 + 2 * (i // 2), 4),), ncalls=4)(
    lambda: AnchorDecode())


def _box_iou(a, b):
    area = lambda t: (t[:, 2] - t[:, 0]).clamp(min=0) * (t[:, 3] - t[:, 1]).clamp(min=0)  # noqa: E731
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    return inter / (area(a)[:, None] + area(b)[None] - inter + 1e-9)


def _boxes(n):
    xy = U(n, 2) * 20
    return torch.cat([xy, xy + 2 + U(n, 2) * 10], 1)


@fn_case("matrix_nms_triu_decay_no_loop", lambda: (_boxes(12), U(12), I(0, 3, 12)))
def matrix_nms(boxes, scores, labels, sigma=2.0):
    """SOLOv2's Matrix NMS: sorted, class-aware IoU upper triangle, gaussian decay by the most
    overlapping higher-scored box, scores decayed (no loop, static shape)."""
    order = scores.argsort(descending=True)
    boxes, scores, labels = boxes[order], scores[order], labels[order]
    iou = _box_iou(boxes, boxes).triu(1)
    same = (labels[:, None] == labels[None]).float().triu(1)
    decay_iou = iou * same
    comp = decay_iou.max(0).values.expand(len(scores), -1).t()
    decay = torch.exp(-(decay_iou ** 2 - comp ** 2) * sigma).min(0).values
    return order, scores * decay


@fn_case("greedy_nms_python_loop_keep_list", lambda i=0: (_boxes(10 + i), U(10 + i)), ncalls=3)
def greedy_nms(boxes, scores, thr=0.4):
    """The NMS every tutorial writes: a while loop over the remaining indices, .item() of the best,
    the rest filtered by IoU, the kept indices a Python list made a tensor."""
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0].item()
        keep.append(i)
        if order.numel() == 1:
            break
        iou = _box_iou(boxes[i:i + 1], boxes[order[1:]])[0]
        order = order[1:][iou <= thr]
    return torch.tensor(keep, dtype=torch.long), boxes[keep]


@fn_case("fcos_points_in_boxes_min_area_centerness", lambda: (U(20, 2) * 32, _boxes(4) * 1.5))
def fcos_assign(points, gt):
    l = points[:, None, 0] - gt[None, :, 0]  # noqa: E741
    t = points[:, None, 1] - gt[None, :, 1]
    r = gt[None, :, 2] - points[:, None, 0]
    b = gt[None, :, 3] - points[:, None, 1]
    ltrb = torch.stack([l, t, r, b], -1)
    inside = ltrb.min(-1).values > 0
    area = ((gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1]))[None].repeat(len(points), 1)
    area[~inside] = float("inf")
    min_area, idx = area.min(1)
    target = ltrb[torch.arange(len(points)), idx]
    pos = min_area != float("inf")
    lr, tb = target[:, [0, 2]], target[:, [1, 3]]
    ctr = torch.sqrt((lr.min(-1).values / lr.max(-1).values.clamp(min=1e-6)).clamp(min=0) *
                     (tb.min(-1).values / tb.max(-1).values.clamp(min=1e-6)).clamp(min=0))
    return torch.where(pos, idx, torch.full_like(idx, -1)), ctr * pos


# ============================================================================ losses over masks
@fn_case("sigmoid_focal_ignore_label_num_pos_norm", lambda: (R(3, 10, 4), I(-1, 4, 3, 10)))
def focal_loss(logits, labels, alpha=0.25, gamma=2.0):
    valid = labels >= 0
    onehot = torch.zeros_like(logits)
    onehot[valid] = F.one_hot(labels[valid].clamp(max=logits.shape[-1] - 1), logits.shape[-1]).float()
    onehot[labels == logits.shape[-1]] = 0   # background label
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, onehot, reduction="none")
    pt = p * onehot + (1 - p) * (1 - onehot)
    loss = ce * (1 - pt) ** gamma * (alpha * onehot + (1 - alpha) * (1 - onehot))
    num_pos = max(float((onehot.sum(-1) > 0).sum()), 1.0)
    return loss[valid].sum() / num_pos


@fn_case("generalized_dice_class_weights_onehot", lambda: (R(2, 4, 6, 6), I(0, 4, 2, 6, 6)))
def generalized_dice(logits, target, eps=1e-6):
    probs = logits.softmax(1)
    oh = F.one_hot(target, probs.shape[1]).permute(0, 3, 1, 2).float()
    dims = (0, 2, 3)
    w = 1.0 / (oh.sum(dims) ** 2).clamp(min=eps)
    w = torch.where(torch.isinf(w), torch.zeros_like(w), w)
    inter = (w * (probs * oh).sum(dims)).sum()
    union = (w * (probs + oh).sum(dims)).sum()
    return 1 - 2 * inter / union.clamp(min=eps)


class CLIPLoss(nn.Module):
    """CLIP: normalized embeddings, a learnable logit scale clamped at 100 after exp, symmetric
    cross entropy over in-batch negatives, the accuracy as a Python float."""

    def __init__(self):
        super().__init__()
        self.img, self.txt = nn.Linear(6, 4), nn.Linear(5, 4)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def forward(self, im, tx):
        a, b = F.normalize(self.img(im), dim=-1), F.normalize(self.txt(tx), dim=-1)
        scale = self.logit_scale.exp().clamp(max=100)
        logits = scale * a @ b.t()
        labels = torch.arange(len(a))
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        acc = (logits.argmax(-1) == labels).float().mean().item()
        return loss, acc


case("clip_symmetric_infonce_logit_scale_clamp", lambda: (R(6, 6), R(6, 5)))(lambda: CLIPLoss())


@fn_case("supcon_label_mask_logits_mask_scatter", lambda: (R(8, 5), I(0, 3, 8)))
def supcon(feat, labels, t=0.1):
    feat = F.normalize(feat, dim=1)
    mask = torch.eq(labels[:, None], labels[None]).float()
    logits = feat @ feat.t() / t
    logits = logits - logits.max(1, keepdim=True).values.detach()
    logits_mask = torch.scatter(torch.ones_like(mask), 1, torch.arange(len(feat)).view(-1, 1), 0)
    mask = mask * logits_mask
    exp_logits = torch.exp(logits) * logits_mask
    log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
    pos = mask.sum(1)
    mean_log_prob_pos = (mask * log_prob).sum(1) / torch.where(pos < 1e-6, torch.ones_like(pos), pos)
    return -mean_log_prob_pos.mean()


class CTCHead(nn.Module):
    """A CTC head: lengths from a padding mask's sum, log_softmax transposed to (T, N, C),
    zero_infinity, and a greedy decode by unique_consecutive per sequence into Python lists."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 5)
        self.ctc = nn.CTCLoss(blank=0, zero_infinity=True)

    def forward(self, x, mask, targets, target_lengths):
        lp = self.proj(x).log_softmax(-1)
        in_lens = mask.sum(1)
        loss = self.ctc(lp.transpose(0, 1), targets, in_lens, target_lengths)
        best = lp.argmax(-1)
        hyps = []
        for seq, n in zip(best, in_lens.tolist()):
            u = torch.unique_consecutive(seq[:n])
            hyps.append(u[u != 0].tolist())
        return loss, hyps


def _ctc_in():
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 7:] = 0
    return R(3, 12, 6), mask, I(1, 5, 3, 4), torch.tensor([4, 3, 2])


case("ctc_lengths_from_mask_greedy_unique_consecutive", _ctc_in)(lambda: CTCHead())


@fn_case("batch_hard_triplet_masked_argmax", lambda: (R(8, 4), torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])))
def batch_hard_triplet(emb, labels, margin=0.3):
    d = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None]
    eye = torch.eye(len(labels), dtype=torch.bool)
    hardest_pos = (d * (same & ~eye)).max(1).values
    d_neg = d + d.max() * same.float()
    hardest_neg = d_neg.min(1).values
    return F.relu(hardest_pos - hardest_neg + margin).mean(), d_neg.argmin(1)


@fn_case("label_smoothed_nll_ignore_pad_sum_over_tokens", lambda: (R(2, 7, 9), I(0, 9, 2, 7)))
def label_smoothed_nll(logits, target, eps=0.1, pad=0):
    lprobs = logits.log_softmax(-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.sum(-1)
    pad_mask = target.eq(pad)
    nll.masked_fill_(pad_mask, 0.0)
    smooth.masked_fill_(pad_mask, 0.0)
    eps_i = eps / (lprobs.size(-1) - 1)
    loss = (1.0 - eps - eps_i) * nll.sum() + eps_i * smooth.sum()
    ntokens = target.ne(pad).sum()
    return loss / ntokens, nll.sum() / ntokens


# ============================================================================ decoding
class GreedyDecoder(nn.Module):
    """Seq2seq greedy decoding with a GRUCell: argmax tokens appended to a list, `finished` OR-ed
    with token == eos, and the loop left early once `finished.all()`."""

    def __init__(self, v=7, h=8, eos=1, max_len=10):
        super().__init__()
        self.emb, self.cell, self.out = nn.Embedding(v, h), nn.GRUCell(h, h), nn.Linear(h, v)
        self.eos, self.max_len = eos, max_len

    def forward(self, h):
        tok = torch.zeros(h.shape[0], dtype=torch.long)
        finished = torch.zeros(h.shape[0], dtype=torch.bool)
        toks = []
        for _ in range(self.max_len):
            h = self.cell(self.emb(tok), h)
            tok = self.out(h).argmax(-1)
            tok = tok.masked_fill(finished, self.eos)
            toks.append(tok)
            finished |= tok == self.eos
            if finished.all():
                break
        return torch.stack(toks, 1)


case("greedy_decode_gru_early_stop_finished_all", lambda: (R(3, 8) * 2,))(lambda: GreedyDecoder())


class BeamSearch(nn.Module):
    """Beam search the textbook way: hypotheses as Python lists of (tokens, score), candidates from
    topk over the flattened beam x vocab scores split by // and %, finished ones moved out."""

    def __init__(self, v=6, h=8, beam=3, max_len=5, eos=1):
        super().__init__()
        self.emb, self.cell, self.out = nn.Embedding(v, h), nn.GRUCell(h, h), nn.Linear(h, v)
        self.v, self.beam, self.max_len, self.eos = v, beam, max_len, eos

    def forward(self, h0):
        hyps = [([0], 0.0)]
        hs = h0
        done = []
        for _ in range(self.max_len):
            last = torch.tensor([t[-1] for t, _ in hyps])
            hs = self.cell(self.emb(last), hs.expand(len(hyps), -1) if hs.shape[0] != len(hyps) else hs)
            lp = self.out(hs).log_softmax(-1) + torch.tensor([s for _, s in hyps])[:, None]
            top, idx = lp.view(-1).topk(self.beam)
            beams, toks = idx // self.v, idx % self.v
            new, keep = [], []
            for s, b, t in zip(top.tolist(), beams.tolist(), toks.tolist()):
                if t == self.eos:
                    done.append((hyps[b][0] + [t], s))
                else:
                    new.append((hyps[b][0] + [t], s))
                    keep.append(b)
            if not new:
                break
            hyps, hs = new, hs[keep]
        best = max(done + hyps, key=lambda p: p[1] / len(p[0]))
        return best[0], torch.tensor(best[1])


case("beam_search_python_hypothesis_lists", lambda: (R(1, 8),))(lambda: BeamSearch())


class KVCacheStep(nn.Module):
    """Incremental decoding across calls: one token per call, keys / values concatenated onto
    self.cache['k'] / ['v'] (a dict attribute), the position a Python int advanced per call."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.pos_emb = nn.Embedding(16, d)
        self.cache, self.pos = {}, 0

    def forward(self, x):
        x = x + self.pos_emb.weight[self.pos]
        q, k, v = self.qkv(x).chunk(3, -1)
        if "k" in self.cache:
            k = torch.cat([self.cache["k"], k], 1)
            v = torch.cat([self.cache["v"], v], 1)
        self.cache["k"], self.cache["v"] = k, v
        self.pos += x.shape[1]
        att = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
        return self.o(att @ v), k.shape[1]


case("kv_cache_dict_attribute_grows_across_calls", lambda: (R(2, 1, 8),), ncalls=5)(lambda: KVCacheStep())


@dataclass
class SampleCfg:
    temperature: float = 0.8
    top_k: int = 5
    top_p: float = 0.9


class Sampler(nn.Module):
    """top-k then top-p filtering (sorted cumsum, the first token always kept, scattered back),
    temperature from a dataclass config, multinomial draws from an explicit generator."""

    def __init__(self):
        super().__init__()
        self.cfg = SampleCfg()
        self.gen = torch.Generator().manual_seed(11)

    def forward(self, logits):
        logits = logits / self.cfg.temperature
        if self.cfg.top_k > 0:
            kth = torch.topk(logits, self.cfg.top_k).values[..., -1, None]
            logits = logits.masked_fill(logits < kth, -float("inf"))
        if self.cfg.top_p < 1.0:
            srt, idx = logits.sort(-1, descending=True)
            cum = srt.softmax(-1).cumsum(-1)
            remove = cum > self.cfg.top_p
            remove[..., 1:] = remove[..., :-1].clone()
            remove[..., 0] = False
            logits = logits.masked_fill(remove.scatter(-1, idx, remove), -float("inf"))
        probs = logits.softmax(-1)
        return torch.multinomial(probs, 2, generator=self.gen), probs


def _sampler_cfg(m, i):
    if i == 2:
        m.cfg.top_k = 0
    if i == 3:
        m.cfg.temperature, m.cfg.top_p = 1.5, 1.0


case("top_k_top_p_dataclass_cfg_changed_generator", lambda: (R(3, 12),), ncalls=4, between=_sampler_cfg)(
    lambda: Sampler())


# the autograd.Function, norm, EMA, distributions, rearrange, routing and training-step cases,
# the outputs / configuration / stateful cases, and the state changed between calls
import modules14_config  # noqa: E402
import modules14_guards  # noqa: E402
import modules14_misc  # noqa: E402
import modules14_train  # noqa: E402

CASES += modules14_train.CASES + modules14_config.CASES + modules14_guards.CASES + modules14_misc.CASES


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
