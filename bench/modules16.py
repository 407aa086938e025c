"""Sixteenth real-world-style corpus (issue 10 trust): held-out programs in styles the earlier
corpora do not build, each a whole program rather than one op.

This part: inference utilities and diffusion samplers (greedy decoding with a tuple KV cache grown
by cat and an early stop on all-EOS, top-p sampling with a torch.Generator made from a seed
attribute, beam search reordering its cache by index_select, repetition penalty by gather /
scatter with n-gram blocking in Python sets, min-p sampling, hand-written NMS in a while loop over
the remaining order, greedy bipartite matching on a cost matrix with inf masking, CTC greedy decode
over .tolist() with pad_sequence, YOLO grid decode with a confidence filter, sub-pixel soft
keypoints, DDPM / DDIM / DPM-Solver++(2M) / Karras-Euler schedulers as plain Python
classes holding tensors).
bench/modules16_train.py: hand-written losses, training loops, quantization, EMA copies;
bench/modules16_graph.py: graph nets, RL utilities, metrics; bench/modules16_misc.py: augmentation
with generators, int / bool / bf16 mixes, non-contiguous inputs, 0-size batches;
bench/modules16_extra.py: CTC prefix beam search, PER sum tree, classifier guidance, early stopping,
hooks for distillation, co-teaching, Barlow Twins, n-step deques, a preallocated KV cache.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
from corpus_cases import I, R, U, registrars, run
from torch.nn.utils.rnn import pad_sequence

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ decoding loops
class TinyDecoder(nn.Module):
    """One attention layer over a KV cache held as a tuple (k, v) grown by torch.cat per step."""

    def __init__(self, vocab=11, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, vocab)

    def step(self, tok, past):
        h = self.emb(tok)[:, None]                       # b, 1, d
        q, k, v = self.qkv(h).chunk(3, -1)
        if past is not None:
            k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)
        att = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
        return self.out((att @ v)[:, 0] + h[:, 0]), (k, v)


class GreedyKV(nn.Module):
    """HF-style greedy generation: the cache a tuple, finished sequences padded with pad id, the
    loop broken when every sequence has produced EOS (a data-dependent break)."""

    def __init__(self, eos=3, pad=0, max_new=6):
        super().__init__()
        self.dec, self.eos, self.pad, self.max_new = TinyDecoder(), eos, pad, max_new

    def forward(self, start):
        tok, past = start, None
        unfinished = torch.ones_like(start, dtype=torch.bool)
        out = [start]
        for _ in range(self.max_new):
            logits, past = self.dec.step(tok, past)
            nxt = logits.argmax(-1)
            nxt = torch.where(unfinished, nxt, torch.full_like(nxt, self.pad))
            out.append(nxt)
            unfinished = unfinished & (nxt != self.eos)
            if not unfinished.any():
                break
            tok = nxt
        return torch.stack(out, 1), past[0].shape[1]


case("greedy_tuple_kv_cache_cat_all_eos_break", lambda: (I(0, 11, 3),))(lambda: GreedyKV())


class TopP(nn.Module):
    """Nucleus sampling with a torch.Generator seeded from an attribute per call (reproducible
    sampling), the sorted mask shifted right so the first token stays, scatter back by the sort
    indices, multinomial(generator=g), temperature from an attribute."""

    def __init__(self):
        super().__init__()
        self.dec = TinyDecoder()
        self.seed, self.top_p, self.temperature = 1234, 0.8, 0.7

    def forward(self, start, steps: int = 4):
        g = torch.Generator().manual_seed(self.seed)
        tok, past, toks = start, None, []
        for _ in range(steps):
            logits, past = self.dec.step(tok, past)
            logits = logits / self.temperature
            sl, si = torch.sort(logits, descending=True)
            cum = sl.softmax(-1).cumsum(-1)
            remove = cum > self.top_p
            remove[..., 1:] = remove[..., :-1].clone()
            remove[..., 0] = False
            mask = remove.scatter(1, si, remove)
            logits = logits.masked_fill(mask, float("-inf"))
            tok = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
            toks.append(tok)
        return torch.stack(toks, 1)


case("top_p_sampling_generator_from_seed_attr_scatter_back", lambda: (I(0, 11, 4),), ncalls=3,
     between=lambda m, i: setattr(m, "seed", 1234 + i))(lambda: TopP())


class BeamKV(nn.Module):
    """Beam search over a flat (batch * beams) cache reordered by index_select with the chosen
    beams, finished beams frozen by a bool tensor (their score kept, their token set to EOS)."""

    def __init__(self, beams=3, steps=4, eos=3):
        super().__init__()
        self.dec, self.k, self.steps, self.eos = TinyDecoder(), beams, steps, eos

    def forward(self, start):
        b, k = start.shape[0], self.k
        tok = start.repeat_interleave(k)
        scores = torch.zeros(b, k)
        scores[:, 1:] = -1e9
        done = torch.zeros(b * k, dtype=torch.bool)
        past, seqs = None, tok[:, None]
        for _ in range(self.steps):
            logits, past = self.dec.step(tok, past)
            lp = logits.log_softmax(-1)
            lp = torch.where(done[:, None], torch.full_like(lp, -1e9).index_fill(1, torch.tensor([self.eos]), 0.0), lp)
            cand = (scores.view(-1, 1) + lp).view(b, -1)
            scores, idx = cand.topk(k, -1)
            beam, tok = idx // lp.shape[-1], idx % lp.shape[-1]
            flat = (beam + torch.arange(b)[:, None] * k).view(-1)
            past = tuple(p.index_select(0, flat) for p in past)
            tok = tok.view(-1)
            seqs = torch.cat([seqs.index_select(0, flat), tok[:, None]], 1)
            done = done.index_select(0, flat) | (tok == self.eos)
        return seqs.view(b, k, -1), scores


case("beam_search_flat_cache_index_select_done_mask", lambda: (I(0, 11, 2),))(lambda: BeamKV())


class RepPenalty(nn.Module):
    """CTRL's repetition penalty (gather the logits of generated ids, divide positives, multiply
    negatives, scatter back) and no-repeat-2-gram blocking from a Python set of tuples built from
    .tolist() of the history."""

    def __init__(self, penalty=1.3):
        super().__init__()
        self.dec, self.penalty = TinyDecoder(), penalty

    def forward(self, start, steps: int = 5):
        hist, tok, past = start[:, None], start, None
        for _ in range(steps):
            logits, past = self.dec.step(tok, past)
            sc = logits.gather(1, hist)
            sc = torch.where(sc < 0, sc * self.penalty, sc / self.penalty)
            logits = logits.scatter(1, hist, sc)
            for bi, row in enumerate(hist.tolist()):
                seen = {tuple(row[j:j + 2]) for j in range(len(row) - 1)}
                banned = [b for (a, b) in seen if a == row[-1]]
                if banned:
                    logits[bi, banned] = float("-inf")
            tok = logits.argmax(-1)
            hist = torch.cat([hist, tok[:, None]], 1)
        return hist


case("repetition_penalty_gather_scatter_ngram_block_tolist_sets", lambda: (I(0, 11, 3),))(lambda: RepPenalty())


@fn_case("min_p_sampling_temperature_generator_arg", lambda i=0: (R(4, 9), torch.Generator().manual_seed(7 + i)))
def min_p(logits, g):
    """min-p sampling: tokens with probability below min_p * the top probability dropped, a
    generator passed in as an argument, the sample's probability returned."""
    probs = (logits / 0.8).softmax(-1)
    keep = probs >= 0.2 * probs.max(-1, keepdim=True).values
    probs = torch.where(keep, probs, 0.0)
    probs = probs / probs.sum(-1, keepdim=True)
    s = torch.multinomial(probs, 2, replacement=True, generator=g)
    return s, probs.gather(1, s), keep.sum(-1)


# ============================================================================ boxes
def box_area(b):
    return (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)


def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    return inter / (box_area(a)[:, None] + box_area(b)[None] - inter + 1e-9)


def _boxes(n, i=0):
    xy = U(n, 2) * 10
    wh = U(n, 2) * 5 + 0.5
    return torch.cat([xy, xy + wh], 1), U(n)


@fn_case("nms_while_order_numel_keep_item_list", lambda i=0: (*_boxes(12 + 3 * i),))
def nms_while(boxes, scores):
    """The py-faster-rcnn nms: order by score, while order.numel() > 0 keep order[0], IoU with the
    rest by hand, order = order[1:][iou <= thresh]; the kept ids as Python ints turned back into a
    tensor; the boxes above a score threshold first (may leave none)."""
    m = scores > 0.15
    boxes, scores = boxes[m], scores[m]
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0].item()
        keep.append(i)
        xx1 = torch.maximum(x1[i], x1[order[1:]])
        yy1 = torch.maximum(y1[i], y1[order[1:]])
        xx2 = torch.minimum(x2[i], x2[order[1:]])
        yy2 = torch.minimum(y2[i], y2[order[1:]])
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[1:][iou <= 0.4]
    keep = torch.tensor(keep, dtype=torch.long)
    return boxes[keep], scores[keep], len(keep)


@fn_case("greedy_bipartite_matching_cost_inf_masking_loop", lambda i=0: (U(5, 4), R(5, 3).softmax(-1), I(0, 3, 4),
                                                                         *_boxes(5)[:1], _boxes(4)[0]))
def greedy_match(pred_boxes_cxcy, logits, tgt_cls, pb, tb):
    """DETR-like matching without scipy: cost = -prob[tgt class] + L1 + (1 - IoU), matched greedily
    by the global argmin, the row and the column set to inf after each pick; indices from
    divmod of the flat argmin as Python ints."""
    cost = -logits[:, tgt_cls] + torch.cdist(pb, tb, p=1) * 0.2 + (1 - box_iou(pb, tb))
    cost = cost.clone()
    rows, cols = [], []
    for _ in range(min(cost.shape)):
        flat = int(cost.argmin())
        r, c = divmod(flat, cost.shape[1])
        rows.append(r)
        cols.append(c)
        cost[r, :] = float("inf")
        cost[:, c] = float("inf")
    r, c = torch.as_tensor(rows), torch.as_tensor(cols)
    order = c.argsort()
    return r[order], c[order], (pb[r] - tb[c]).abs().sum()


@fn_case("ctc_greedy_decode_tolist_python_collapse_pad_sequence",
         lambda i=0: (R(3, 10 + i, 6).log_softmax(-1), torch.tensor([10 + i, 7, 4])))
def ctc_decode(log_probs, lengths):
    """CTC greedy decoding as ASR repos write it: argmax, per utterance a Python loop over
    .tolist() up to its length collapsing repeats and dropping blanks, the hypotheses padded by
    pad_sequence (an empty one possible), the per-frame max summed as the score."""
    best = log_probs.argmax(-1)
    hyps = []
    for seq, n in zip(best.tolist(), lengths.tolist()):
        out, prev = [], None
        for t in seq[:n]:
            if t != prev and t != 0:
                out.append(t)
            prev = t
        hyps.append(torch.tensor(out, dtype=torch.long))
    padded = pad_sequence(hyps, batch_first=True, padding_value=-1)
    score = log_probs.max(-1).values.masked_fill(torch.arange(log_probs.shape[1])[None] >= lengths[:, None], 0)
    return padded, torch.tensor([len(h) for h in hyps]), score.sum(1)


class YoloDecode(nn.Module):
    """YOLOv3's head decode: sigmoid xy + the grid from meshgrid, exp(wh) * anchors, objectness *
    class scores, a confidence filter per image in a Python loop (0 boxes possible), xywh -> xyxy."""

    def __init__(self, na=2, nc=3):
        super().__init__()
        self.na, self.nc = na, nc
        self.conv = nn.Conv2d(4, na * (5 + nc), 1)
        self.register_buffer("anchors", torch.tensor([[1.0, 1.5], [2.0, 1.0]]))

    def forward(self, x, stride: int = 8):
        b, _, h, w = x.shape
        p = self.conv(x).view(b, self.na, 5 + self.nc, h, w).permute(0, 1, 3, 4, 2).contiguous()
        gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((gx, gy), -1).view(1, 1, h, w, 2).float()
        xy = (p[..., :2].sigmoid() + grid) * stride
        wh = p[..., 2:4].exp() * self.anchors.view(1, self.na, 1, 1, 2) * stride
        conf = p[..., 4:5].sigmoid() * p[..., 5:].sigmoid()
        out = torch.cat([xy - wh / 2, xy + wh / 2, conf], -1).view(b, -1, 4 + self.nc)
        dets = []
        for img in out:
            score, cls = img[:, 4:].max(1)
            k = score > 0.3
            dets.append(torch.cat([img[k, :4], score[k, None], cls[k, None].float()], 1))
        return dets


case("yolo_grid_decode_meshgrid_anchors_conf_filter_per_image", lambda i=0: (R(2, 4, 3, 4 + i),))(lambda: YoloDecode())


@fn_case("soft_argmax_keypoints_subpixel_quarter_offset", lambda: (R(2, 3, 8, 7),))
def kp_decode(hm):
    """Keypoint decoding from heatmaps: argmax over the flattened map, y / x by floor division,
    the quarter-pixel shift toward the higher neighbour (clamped at the border), plus a
    soft-argmax over the same map as the alternative estimate."""
    b, k, h, w = hm.shape
    flat = hm.view(b, k, -1)
    maxv, idx = flat.max(-1)
    y, x = torch.div(idx, w, rounding_mode="floor"), idx % w
    xl, xr = (x - 1).clamp(0, w - 1), (x + 1).clamp(0, w - 1)
    yu, yd = (y - 1).clamp(0, h - 1), (y + 1).clamp(0, h - 1)
    g = lambda yy, xx: flat.gather(-1, (yy * w + xx)[..., None])[..., 0]  # noqa: E731
    dx = torch.sign(g(y, xr) - g(y, xl)) * 0.25
    dy = torch.sign(g(yd, x) - g(yu, x)) * 0.25
    coords = torch.stack([x.float() + dx, y.float() + dy], -1)
    p = (flat * 10).softmax(-1).view(b, k, h, w)
    soft = torch.stack([(p.sum(2) * torch.arange(w)).sum(-1), (p.sum(3) * torch.arange(h)).sum(-1)], -1)
    return coords, soft, maxv > 0


# ============================================================================ diffusion schedulers
class DDPMScheduler:
    """A diffusers-like scheduler: a plain Python class holding tensors (betas, alphas_cumprod),
    step(model_output, t, sample, generator) with t a Python int, the variance noise drawn only
    for t > 0 from the given generator."""

    def __init__(self, T=20):
        self.betas = torch.linspace(1e-4, 0.2, T)
        self.alphas = 1 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, 0)
        self.T = T

    def step(self, eps, t, x, generator):
        ac = self.alphas_cumprod[t]
        ac_prev = self.alphas_cumprod[t - 1] if t > 0 else torch.tensor(1.0)
        x0 = ((x - (1 - ac).sqrt() * eps) / ac.sqrt()).clamp(-1, 1)
        mean = (ac_prev.sqrt() * self.betas[t] / (1 - ac)) * x0 + (self.alphas[t].sqrt() * (1 - ac_prev) / (1 - ac)) * x
        if t > 0:
            var = (1 - ac_prev) / (1 - ac) * self.betas[t]
            mean = mean + var.clamp(min=1e-20).sqrt() * torch.randn(x.shape, generator=generator)
        return mean


class Denoiser(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 1, 16), nn.SiLU(), nn.Linear(16, d))

    def forward(self, x, t):
        tt = torch.full((x.shape[0], 1), float(t) / 20)
        return self.net(torch.cat([x, tt], 1))


class DDPMSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.unet, self.sched = Denoiser(), DDPMScheduler()

    def forward(self, x, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        for t in reversed(range(0, self.sched.T, 4)):
            x = self.sched.step(self.unet(x, t), t, x, g)
        return x


case("ddpm_scheduler_python_class_generator_reversed_range", lambda i=0: (R(3, 4), i))(lambda: DDPMSample())


class DDIMScheduler:
    """set_timesteps(n) rebuilds self.timesteps (a tensor) on every call, as diffusers does; the
    step reads prev_t = t - T // n with a final alpha of 1 below 0."""

    def __init__(self, T=40):
        self.T = T
        self.alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.05, T), 0)
        self.timesteps = None

    def set_timesteps(self, n):
        self.num = n
        self.timesteps = (torch.arange(0, n) * (self.T // n)).flip(0)

    def step(self, eps, t, x, eta=0.0):
        prev = t - self.T // self.num
        a = self.alphas_cumprod[t]
        ap = self.alphas_cumprod[prev] if prev >= 0 else torch.tensor(1.0)
        x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
        return ap.sqrt() * x0 + (1 - ap).sqrt() * eps, x0


class DDIMSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.unet, self.sched = Denoiser(), DDIMScheduler()

    def forward(self, x, steps: int):
        self.sched.set_timesteps(steps)
        x0s = []
        for t in self.sched.timesteps:
            x, x0 = self.sched.step(self.unet(x, int(t)), int(t), x)
            x0s.append(x0.abs().mean())
        return x, torch.stack(x0s)


case("ddim_scheduler_set_timesteps_in_forward_steps_arg_changes", lambda i=0: (R(2, 4), 4 if i < 2 else 5))(
    lambda: DDIMSample())


class DPMSolver2M(nn.Module):
    """DPM-Solver++(2M): lambdas from log alpha / sigma in float64, the previous x0 prediction
    kept in a Python list (model_outputs[-1]) to build the second-order update after the first
    step; the list reset per call."""

    def __init__(self, T=30):
        super().__init__()
        self.unet = Denoiser()
        ac = torch.cumprod(1 - torch.linspace(1e-4, 0.1, T, dtype=torch.float64), 0)
        self.register_buffer("alpha_t", ac.sqrt())
        self.register_buffer("sigma_t", (1 - ac).sqrt())
        self.T = T
        self.model_outputs = []

    def forward(self, x, steps: int = 4):
        self.model_outputs = []
        ts = torch.linspace(self.T - 1, 0, steps + 1).round().long().tolist()
        lam = torch.log(self.alpha_t) - torch.log(self.sigma_t)
        for i in range(steps):
            t, s = ts[i], ts[i + 1]
            eps = self.unet(x, t)
            x0 = ((x - self.sigma_t[t].float() * eps) / self.alpha_t[t].float())
            h = (lam[s] - lam[t]).float()
            if self.model_outputs:
                h0 = (lam[t] - lam[ts[i - 1]]).float()
                r = h0 / h
                d = (1 + 1 / (2 * r)) * x0 - 1 / (2 * r) * self.model_outputs[-1]
            else:
                d = x0
            x = (self.sigma_t[s] / self.sigma_t[t]).float() * x - self.alpha_t[s].float() * torch.expm1(-h) * d
            self.model_outputs.append(x0)
        return x, len(self.model_outputs)


case("dpm_solver_2m_history_list_float64_lambdas", lambda: (R(2, 4),))(lambda: DPMSolver2M())


class KarrasEuler(nn.Module):
    """k-diffusion's Euler sampler on Karras sigmas (rho = 7, computed in float64 then cast, a
    zero appended), s_churn adding generator noise when gamma > 0, c_skip / c_out preconditioning."""

    def __init__(self, n=5, smin=0.02, smax=10.0, churn=2.0):
        super().__init__()
        self.unet = Denoiser()
        ramp = torch.linspace(0, 1, n, dtype=torch.float64)
        mi, ma = smin ** (1 / 7), smax ** (1 / 7)
        sig = (ma + ramp * (mi - ma)) ** 7
        self.sigmas = torch.cat([sig.float(), torch.zeros(1)])
        self.churn, self.n = churn, n

    def forward(self, noise, seed: int = 3):
        g = torch.Generator().manual_seed(seed)
        x = noise * self.sigmas[0]
        for i in range(self.n):
            s = self.sigmas[i]
            gamma = min(self.churn / self.n, 2 ** 0.5 - 1) if 0.05 <= s.item() <= 5.0 else 0.0
            s_hat = s * (gamma + 1)
            if gamma > 0:
                x = x + torch.randn(x.shape, generator=g) * (s_hat ** 2 - s ** 2).sqrt()
            c_skip, c_out = 1 / (s_hat ** 2 + 1), s_hat / (s_hat ** 2 + 1).sqrt()
            denoised = c_skip * x + c_out * self.unet(x / (s_hat ** 2 + 1).sqrt(), i)
            d = (x - denoised) / s_hat
            x = x + d * (self.sigmas[i + 1] - s_hat)
        return x


case("karras_sigmas_euler_churn_generator_item_branch", lambda i=0: (R(2, 4), 3 + i))(lambda: KarrasEuler())


# the training, graph / RL / metric and miscellaneous parts
import modules16_extra  # noqa: E402
import modules16_graph  # noqa: E402
import modules16_misc  # noqa: E402
import modules16_train  # noqa: E402

CASES += modules16_train.CASES + modules16_graph.CASES + modules16_misc.CASES + \
    modules16_extra.CASES


if __name__ == "__main__":
    run(CASES, __file__, __doc__)
