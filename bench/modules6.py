"""Sixth real-world-style corpus (issue 10 trust): domains the earlier corpora touch lightly.

Written the way public repositories write them: object detection post-processing (box encode /
decode with clamped log-ratios, IoU / GIoU matrices, anchor grids, score thresholds through masks,
batched top-k, focal loss, FCOS-style targets), audio front ends (DFT-as-conv1d STFT, mel
filterbanks by matmul, log-mel with clamp_min and top_db, pre-emphasis, framing with unfold,
mu-law, SpecAugment masks, delta features, CTC loss), graph neural networks (degree normalisation
with scatter_add_, index_add_ message passing, edge softmax with scatter_reduce amax, segment
pooling, dense adjacency by index_put_ accumulate), recommenders (EmbeddingBag with offsets and
per_sample_weights, max bags, DLRM interactions, hashing with remainder / fmod of negative ids,
FM / DCN crosses), diffusion (sinusoidal timestep embeddings, schedules indexed by timestep
tensors, classifier-free guidance with chunk / cat, DDIM and Karras steps), point clouds (cdist,
kNN by topk, neighbour gathers, farthest-point sampling loops, ball query, chamfer), NLP utilities
(masks from lengths, fairseq positions, label smoothing, cu_seqlens packing, bucketize, shifted
labels), metrics (top-k accuracy, confusion matrix by bincount, AUC by sort, per-class IoU),
quantisation-aware training (fake_quantize per tensor / channel, STE rounding, LSQ, int8 / uint8
tensors), uint8 image preprocessing (normalisation, flips, crops, resize, grayscale / HSV,
integer division rounding modes, overflow), signal processing (cumsum / cumprod / diff / flip /
roll, reflect / replicate / circular padding), numerically sensitive code (logsumexp of -inf rows,
log1p / expm1, softplus thresholds, eps in norms, float64, fp16 / bf16 mixing, inf / NaN inputs),
and dtype / layout edges (non-contiguous, channels_last, expanded, 0-d, empty, int32 indices,
bool arithmetic). Shapes and dtypes vary between calls, attributes change between calls, inputs
and buffers are updated in place.

    python bench/modules6.py [--filter NAME] [--jobs 2] [--timeout 240] [-v]
    python bench/modules6.py --case NAME      # one case in this process, with a traceback

Each case runs eager and mlircap.compile side by side on the same inputs (deep copies of one
model), for `ncalls` calls (default 3: calls 0 and 1 on the same values, later calls on new
values, or on other shapes / dtypes where the case's inputs take the call index), in a child
process per worker (a signal is a crash, not the end of the run). Categories: ok (compiled,
one graph, matches eager), breaks (compiled in several graphs, matches), fallback (matches, but
some part ran eagerly), wrong, error (mlircap raised where eager did not), crash, timeout.
The runner is bench/modules5.py's.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, registrars


CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


def U8(*s):
    return torch.randint(0, 256, s, dtype=torch.uint8)


def boxes(n, size=64.0):
    xy = torch.rand(n, 2) * size
    wh = torch.rand(n, 2) * size / 2 + 1
    return torch.cat([xy, xy + wh], 1)


# ========================================================================= object detection
class BoxCoder(nn.Module):
    """torchvision's BoxCoder: encode gt against proposals, decode with dw / dh clamped at
    log(1000 / 16), boxes clipped to the image, the weights an attribute changed between calls."""

    def __init__(self):
        super().__init__()
        self.weights = (10.0, 10.0, 5.0, 5.0)
        self.clip = math.log(1000.0 / 16)

    def encode(self, gt, prop):
        wx, wy, ww, wh = self.weights
        pw, ph = prop[:, 2] - prop[:, 0], prop[:, 3] - prop[:, 1]
        px, py = prop[:, 0] + 0.5 * pw, prop[:, 1] + 0.5 * ph
        gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
        gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
        return torch.stack((wx * (gx - px) / pw, wy * (gy - py) / ph, ww * torch.log(gw / pw),
                            wh * torch.log(gh / ph)), dim=1)

    def decode(self, codes, prop, size):
        wx, wy, ww, wh = self.weights
        w, h = prop[:, 2] - prop[:, 0], prop[:, 3] - prop[:, 1]
        cx, cy = prop[:, 0] + 0.5 * w, prop[:, 1] + 0.5 * h
        dx, dy = codes[:, 0::4] / wx, codes[:, 1::4] / wy
        dw = torch.clamp(codes[:, 2::4] / ww, max=self.clip)
        dh = torch.clamp(codes[:, 3::4] / wh, max=self.clip)
        pcx, pcy = dx * w[:, None] + cx[:, None], dy * h[:, None] + cy[:, None]
        pw, ph = torch.exp(dw) * w[:, None], torch.exp(dh) * h[:, None]
        out = torch.stack((pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw, pcy + 0.5 * ph), dim=2).flatten(1)
        out[:, 0::2] = out[:, 0::2].clamp(min=0, max=size[1])
        out[:, 1::2] = out[:, 1::2].clamp(min=0, max=size[0])
        return out

    def forward(self, gt, prop, codes):
        return self.encode(gt, prop), self.decode(codes, prop, (48, 60))


def _coder_w(m, i):
    if i == 2:
        m.weights = (1.0, 1.0, 1.0, 1.0)


case("box_coder_encode_decode_clip", lambda i=0: (boxes(7 + i), boxes(7 + i), R(7 + i, 8) * (3 if i == 2 else 1)),
     between=_coder_w)(lambda: BoxCoder())


@fn_case("iou_giou_matrices_shapes_vary", lambda i=0: (boxes(5 + 2 * i), boxes(3 + i)))
def iou_giou_matrices_shapes_vary(a, b):
    """torchvision box_iou / generalized_box_iou: areas, lt/rb by broadcasting max/min, clamp(min=0)."""
    area1 = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area2 = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    iou = inter / union
    lti = torch.min(a[:, None, :2], b[:, :2])
    rbi = torch.max(a[:, None, 2:], b[:, 2:])
    whi = (rbi - lti).clamp(min=0)
    areai = whi[:, :, 0] * whi[:, :, 1]
    giou = iou - (areai - union) / areai
    best, idx = iou.max(dim=1)
    return iou, giou, best, idx


class AnchorGenerator(nn.Module):
    """Anchors for every feature map position: base anchors from sizes x aspect ratios rounded,
    shifts by torch.arange * stride and meshgrid(indexing='ij'), the grid taken from the input's shape."""

    def __init__(self, sizes=(32, 64), ratios=(0.5, 1.0, 2.0)):
        super().__init__()
        scales = torch.as_tensor(sizes, dtype=torch.float32)
        ar = torch.as_tensor(ratios, dtype=torch.float32)
        hr = torch.sqrt(ar)
        wr = 1 / hr
        ws = (wr[:, None] * scales[None, :]).view(-1)
        hs = (hr[:, None] * scales[None, :]).view(-1)
        self.register_buffer("base", (torch.stack([-ws, -hs, ws, hs], dim=1) / 2).round())

    def forward(self, feat, image):
        gh, gw = feat.shape[-2:]
        sh, sw = image.shape[-2] // gh, image.shape[-1] // gw
        sx = torch.arange(0, gw, dtype=torch.int32).float() * sw
        sy = torch.arange(0, gh, dtype=torch.int32).float() * sh
        yy, xx = torch.meshgrid(sy, sx, indexing="ij")
        shifts = torch.stack((xx.reshape(-1), yy.reshape(-1), xx.reshape(-1), yy.reshape(-1)), dim=1)
        return (shifts.view(-1, 1, 4) + self.base.view(1, -1, 4)).reshape(-1, 4)


case("anchor_generator_grid_from_shapes", lambda i=0: (R(1, 4, 5 + i, 7), R(1, 3, 8 * (5 + i), 56)))(
    lambda: AnchorGenerator())


class ScoreThresholdTopk(nn.Module):
    """RetinaNet post-processing without NMS: sigmoid scores, a threshold applied as a mask
    (scores * keep), batched top-k over flattened anchors x classes with k = min(k, n), labels by
    remainder, anchor index by floor division, boxes gathered by the index."""

    def __init__(self):
        super().__init__()
        self.thr, self.k = 0.05, 10

    def forward(self, logits, bx):
        b, n, c = logits.shape
        scores = logits.sigmoid().flatten(1)
        keep = scores > self.thr
        scores = scores * keep
        k = min(self.k, scores.shape[1])
        top, idx = scores.topk(k, dim=1)
        labels = idx % c
        anchor = torch.div(idx, c, rounding_mode="floor")
        sel = torch.gather(bx, 1, anchor[..., None].expand(-1, -1, 4))
        return top, labels, sel, keep.sum(1)


def _thr(m, i):
    if i == 2:
        m.thr, m.k = 0.6, 50


case("score_threshold_batched_topk", lambda i=0: (R(2, 6 + i, 3) * 2, R(2, 6 + i, 4)), between=_thr)(
    lambda: ScoreThresholdTopk())


@fn_case("sigmoid_focal_loss_onehot_scatter", lambda i=0: (R(12, 5), I(0, 6, 12)))
def sigmoid_focal_loss_onehot_scatter(logits, labels):
    """torchvision sigmoid_focal_loss on one-hot targets made by scatter_ (label 5 = background:
    an extra column sliced off), alpha=0.25 gamma=2, normalised by the number of positives (clamped)."""
    t = torch.zeros(logits.shape[0], logits.shape[1] + 1).scatter_(1, labels[:, None], 1.0)[:, :-1]
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, t, reduction="none")
    p_t = p * t + (1 - p) * (1 - t)
    loss = ce * ((1 - p_t) ** 2)
    loss = (0.25 * t + 0.75 * (1 - t)) * loss
    return loss.sum() / t.sum().clamp(min=1.0)


class YoloHead(nn.Module):
    """YOLOv5 Detect: conv head, view/permute to (b, a, h, w, 5+c), sigmoid, grid offsets from
    meshgrid, anchors * (2 * wh) ** 2, the grid cached on the module and rebuilt when the map size changes."""

    def __init__(self):
        super().__init__()
        self.na, self.no = 3, 7
        self.conv = nn.Conv2d(8, self.na * self.no, 1)
        self.register_buffer("anchors", torch.tensor([[10., 13.], [16., 30.], [33., 23.]]))
        self.grid = torch.zeros(1)
        self.stride = 8.0

    def forward(self, x):
        b, _, ny, nx = x.shape
        y = self.conv(x).view(b, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        if self.grid.shape[2:4] != y.shape[2:4]:
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            self.grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
        y = y.sigmoid()
        xy = (y[..., :2] * 2 - 0.5 + self.grid) * self.stride
        wh = (y[..., 2:4] * 2) ** 2 * self.anchors.view(1, self.na, 1, 1, 2)
        return torch.cat((xy, wh, y[..., 4:]), -1).view(b, -1, self.no)


case("yolo_head_grid_cached_attribute", lambda i=0: (R(2, 8, 4 + (i // 2), 5),))(lambda: YoloHead())


@fn_case("batched_nms_coordinate_offsets", lambda i=0: (boxes(9), torch.rand(9), I(0, 3, 9)))
def batched_nms_coordinate_offsets(bx, scores, idxs):
    """torchvision's batched_nms trick (boxes offset by class * (max coordinate + 1)) followed by the
    sort NMS would start from; the offsets' dtype follows the boxes."""
    max_coordinate = bx.max()
    offsets = idxs.to(bx) * (max_coordinate + torch.tensor(1).to(bx))
    b = bx + offsets[:, None]
    order = scores.argsort(descending=True)
    return b[order], scores[order], idxs[order]


@fn_case("fcos_targets_argmin_inf_area", lambda i=0: (torch.rand(20, 2) * 64, boxes(4 + i)))
def fcos_targets_argmin_inf_area(points, gt):
    """FCOS target assignment: l/t/r/b distances of every point to every box, inside = min > 0,
    area set to inf where not inside, argmin over boxes, centerness with sqrt of min/max ratios."""
    l = points[:, None, 0] - gt[None, :, 0]  # noqa: E741
    t = points[:, None, 1] - gt[None, :, 1]
    r = gt[None, :, 2] - points[:, None, 0]
    b = gt[None, :, 3] - points[:, None, 1]
    ltrb = torch.stack([l, t, r, b], dim=2)
    inside = ltrb.min(dim=2).values > 0
    area = ((gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1]))[None].repeat(len(points), 1)
    area[~inside] = float("inf")
    min_area, inds = area.min(dim=1)
    tgt = ltrb[range(len(points)), inds]
    lr, tb = tgt[:, [0, 2]], tgt[:, [1, 3]]
    ctr = torch.sqrt((lr.min(-1).values / lr.max(-1).values).clamp(min=0) * (tb.min(-1).values / tb.max(-1).values).clamp(min=0))
    pos = min_area != float("inf")
    return inds, torch.where(pos, ctr, torch.zeros_like(ctr)), pos


class SmoothL1Giou(nn.Module):
    """Box regression losses: smooth_l1 with beta (an attribute changed between calls, 0 = L1),
    plus GIoU loss written out, summed and divided by the number of boxes."""

    def __init__(self):
        super().__init__()
        self.beta = 1.0 / 9

    def forward(self, pred, tgt):
        l1 = F.smooth_l1_loss(pred, tgt, beta=self.beta, reduction="sum")
        x1 = torch.max(pred[:, 0], tgt[:, 0])
        y1 = torch.max(pred[:, 1], tgt[:, 1])
        x2 = torch.min(pred[:, 2], tgt[:, 2])
        y2 = torch.min(pred[:, 3], tgt[:, 3])
        inter = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
        a1 = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
        a2 = (tgt[:, 2] - tgt[:, 0]) * (tgt[:, 3] - tgt[:, 1])
        union = a1 + a2 - inter
        iou = inter / (union + 1e-7)
        cw = torch.max(pred[:, 2], tgt[:, 2]) - torch.min(pred[:, 0], tgt[:, 0])
        ch = torch.max(pred[:, 3], tgt[:, 3]) - torch.min(pred[:, 1], tgt[:, 1])
        c = cw * ch + 1e-7
        giou = 1 - (iou - (c - union) / c)
        return (l1 + giou.sum()) / max(1, pred.shape[0])


def _beta(m, i):
    if i == 2:
        m.beta = 0.0


case("smooth_l1_beta_zero_giou_loss", lambda i=0: (boxes(6), boxes(6)), between=_beta)(lambda: SmoothL1Giou())


@fn_case("roi_crop_affine_grid_sample", lambda i=0: (R(2, 3, 16, 16), torch.tensor([[2., 3., 10., 12.], [0., 0., 15., 15.]])))
def roi_crop_affine_grid_sample(img, rois):
    """Crop-and-resize by affine_grid + grid_sample (bilinear, align_corners=False): the theta
    built from box coordinates normalised to [-1, 1]."""
    h, w = img.shape[-2:]
    x1, y1, x2, y2 = rois.unbind(1)
    theta = torch.zeros(rois.shape[0], 2, 3)
    theta[:, 0, 0] = (x2 - x1) / (w - 1)
    theta[:, 0, 2] = (x1 + x2 - w + 1) / (w - 1)
    theta[:, 1, 1] = (y2 - y1) / (h - 1)
    theta[:, 1, 2] = (y1 + y2 - h + 1) / (h - 1)
    grid = F.affine_grid(theta, (rois.shape[0], img.shape[1], 7, 7), align_corners=False)
    return F.grid_sample(img, grid, mode="bilinear", align_corners=False)


# ===================================================================================== audio
class ConvSTFTLogMel(nn.Module):
    """An STFT as conv1d with a windowed DFT basis (stride = hop), magnitude with an eps under the
    sqrt, a mel filterbank applied by matmul, 10*log10(clamp_min(1e-10)) and top_db clamping
    against the per-example max (torchaudio's AmplitudeToDB)."""

    def __init__(self, n_fft=32, hop=8, n_mels=6):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        n = torch.arange(n_fft, dtype=torch.float32)
        k = torch.arange(n_fft // 2 + 1, dtype=torch.float32)
        win = torch.hann_window(n_fft, periodic=True)
        ang = 2 * math.pi * k[:, None] * n[None, :] / n_fft
        self.register_buffer("basis", torch.cat([torch.cos(ang) * win, -torch.sin(ang) * win])[:, None, :])
        fb = torch.rand(n_fft // 2 + 1, n_mels)
        self.register_buffer("fb", fb / fb.sum(0, keepdim=True))
        self.top_db = 80.0

    def forward(self, wav):
        x = F.pad(wav[:, None, :], (self.n_fft // 2, self.n_fft // 2), mode="reflect")
        spec = F.conv1d(x, self.basis, stride=self.hop)
        re, im = spec.chunk(2, dim=1)
        mag = torch.sqrt(re ** 2 + im ** 2 + 1e-9)
        mel = torch.matmul(mag.pow(2).transpose(1, 2), self.fb).transpose(1, 2)
        db = 10.0 * torch.log10(torch.clamp(mel, min=1e-10))
        db = torch.max(db, db.amax(dim=(-2, -1), keepdim=True) - self.top_db)
        return db


case("conv_stft_logmel_top_db", lambda i=0: (R(2, 200 + 16 * i),))(lambda: ConvSTFTLogMel())


@fn_case("pre_emphasis_and_dc_removal", lambda i=0: (R(3, 100 + i),))
def pre_emphasis_and_dc_removal(x):
    """Pre-emphasis y[t] = x[t] - 0.97 x[t-1] (first sample kept by cat), DC removed by mean,
    peak-normalised with an eps."""
    y = torch.cat([x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]], dim=1)
    y = y - y.mean(dim=1, keepdim=True)
    return y / (y.abs().max(dim=1, keepdim=True).values + 1e-8)


class FramedRfft(nn.Module):
    """Framing with Tensor.unfold(-1, frame, hop), a Hamming window buffer, torch.fft.rfft magnitude,
    log1p compression."""

    def __init__(self):
        super().__init__()
        self.register_buffer("win", torch.hamming_window(16))

    def forward(self, x):
        frames = x.unfold(-1, 16, 4) * self.win
        spec = torch.fft.rfft(frames, dim=-1)
        return torch.log1p(spec.abs())


case("framing_unfold_window_rfft", lambda i=0: (R(2, 64 + 4 * i),))(lambda: FramedRfft())


class GLUConv1dStack(nn.Module):
    """A wav2letter / ConvTasNet-ish block: dilated Conv1d with padding='same', GLU over channels,
    weight-normed pointwise conv, residual, GroupNorm(1) (cLN), PReLU."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(8, 16, 3, dilation=2, padding="same")
        self.pw = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 8, 1))
        self.norm = nn.GroupNorm(1, 8)
        self.act = nn.PReLU()

    def forward(self, x):
        y = F.glu(self.c1(x), dim=1)
        y = self.pw(y)
        return self.act(self.norm(x + y))


case("glu_dilated_conv1d_weight_norm", lambda i=0: (R(2, 8, 30 + 5 * i),))(lambda: GLUConv1dStack())


@fn_case("mu_law_encode_decode_int64", lambda i=0: (torch.rand(2, 50) * 2 - 1,))
def mu_law_encode_decode_int64(x):
    """torchaudio mu_law_encoding / decoding: sign * log1p(mu |x|) / log1p(mu), quantised with
    ((y + 1) / 2 * mu + 0.5).to(int64), decoded with expm1-style math."""
    mu = 255.0
    y = torch.sign(x) * torch.log1p(mu * torch.abs(x)) / math.log1p(mu)
    q = ((y + 1) / 2 * mu + 0.5).to(torch.int64)
    z = q.to(torch.float32) / mu * 2 - 1.0
    d = torch.sign(z) * (torch.exp(torch.abs(z) * math.log1p(mu)) - 1.0) / mu
    return q, d


class SpecAugment(nn.Module):
    """SpecAugment masks from start / width tensors: arange compared against per-example bounds,
    the masked positions filled with the mean (masked_fill with a 0-d tensor), applied in place to
    the input spectrogram."""

    def forward(self, spec, f0, fw, t0, tw):
        F_, T = spec.shape[-2:]
        fr = torch.arange(F_)[None, :, None]
        tr = torch.arange(T)[None, None, :]
        fmask = (fr >= f0[:, None, None]) & (fr < (f0 + fw)[:, None, None])
        tmask = (tr >= t0[:, None, None]) & (tr < (t0 + tw)[:, None, None])
        spec.masked_fill_(fmask | tmask, spec.mean())
        return spec


case("specaugment_masks_inplace_input", lambda i=0: (R(3, 12, 20), I(0, 8, 3), I(0, 5, 3), I(0, 15, 3), I(0, 6, 3)))(
    lambda: SpecAugment())


@fn_case("compute_deltas_replicate_pad", lambda i=0: (R(2, 5, 17 + i),))
def compute_deltas_replicate_pad(x):
    """torchaudio compute_deltas: replicate padding then conv1d with an arange kernel per channel
    (groups = channels), divided by 2 * sum(n^2)."""
    win = 5
    n = (win - 1) // 2
    denom = n * (n + 1) * (2 * n + 1) / 3
    shape = x.shape
    x = x.reshape(1, -1, shape[-1])
    x = F.pad(x, (n, n), mode="replicate")
    kernel = torch.arange(-n, n + 1, 1, dtype=x.dtype).repeat(x.shape[1], 1, 1)
    out = F.conv1d(x, kernel, groups=x.shape[1]) / denom
    return out.reshape(shape)


class CTCHead(nn.Module):
    """A CTC head: Linear, log_softmax over vocab, (T, N, C) transpose, F.ctc_loss with int32
    lengths and zero_infinity, plus a greedy decode (argmax, consecutive-duplicate removal mask)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 6)

    def forward(self, feats, targets, in_lens, tgt_lens):
        lp = self.lin(feats).log_softmax(-1)
        loss = F.ctc_loss(lp.transpose(0, 1), targets, in_lens, tgt_lens, blank=0, zero_infinity=True)
        best = lp.argmax(-1)
        keep = torch.ones_like(best, dtype=torch.bool)
        keep[:, 1:] = best[:, 1:] != best[:, :-1]
        keep &= best != 0
        return loss, best, keep


case("ctc_loss_int32_lengths_greedy_mask",
     lambda i=0: (R(2, 12, 8), I(1, 6, 2, 4), torch.tensor([12, 10], dtype=torch.int32),
                  torch.tensor([4, 3], dtype=torch.int32)))(lambda: CTCHead())


# ======================================================================= graph neural nets
def _graph(i=0, n=6, e=14):
    n = n + i
    ei = torch.randint(0, n, (2, e + 2 * i))
    return R(n, 5), ei


class GCNConv(nn.Module):
    """PyG GCNConv written out: self loops appended, degree by scatter_add_ of ones over the target
    index, deg^-1/2 with inf masked to 0, norm per edge, messages aggregated with index_add_."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 4, bias=False)
        self.bias = nn.Parameter(torch.randn(4) * 0.1)

    def forward(self, x, edge_index):
        n = x.size(0)
        loop = torch.arange(n, device=x.device)
        ei = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
        row, col = ei[0], ei[1]
        deg = torch.zeros(n, dtype=x.dtype).scatter_add_(0, col, torch.ones(col.size(0), dtype=x.dtype))
        dis = deg.pow(-0.5)
        dis.masked_fill_(dis == float("inf"), 0)
        norm = dis[row] * dis[col]
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, norm.view(-1, 1) * h[row])
        return out + self.bias


case("gcn_conv_scatter_add_degree_index_add", _graph)(lambda: GCNConv())


@fn_case("edge_softmax_scatter_reduce_amax", lambda i=0: (R(14 + i), I(0, 5, 14 + i), 5))
def edge_softmax_scatter_reduce_amax(score, dst, n):
    """PyG softmax(src, index): per-node max by scatter_reduce('amax', include_self=False), exp of the
    shifted scores, per-node sums by scatter_add, a 1e-16 in the denominator. Nodes without edges keep 0."""
    mx = torch.zeros(n).scatter_reduce(0, dst, score, reduce="amax", include_self=False)
    e = (score - mx[dst]).exp()
    s = torch.zeros(n).scatter_add(0, dst, e)
    return e / (s[dst] + 1e-16), mx


class GATLayer(nn.Module):
    """A GAT layer with 2 heads: per-edge attention logits from source / target halves, leaky_relu,
    edge softmax via index_reduce_ amax and index_add_, dropout off in eval, heads concatenated."""

    def __init__(self):
        super().__init__()
        self.h, self.c = 2, 3
        self.lin = nn.Linear(5, 6, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, 2, 3))
        self.att_dst = nn.Parameter(torch.randn(1, 2, 3))

    def forward(self, x, edge_index):
        n = x.shape[0]
        src, dst = edge_index
        h = self.lin(x).view(-1, self.h, self.c)
        a_s = (h * self.att_src).sum(-1)
        a_d = (h * self.att_dst).sum(-1)
        alpha = F.leaky_relu(a_s[src] + a_d[dst], 0.2)
        amax = torch.full((n, self.h), float("-inf")).index_reduce_(0, dst, alpha, "amax")
        alpha = (alpha - amax[dst]).exp()
        den = torch.zeros(n, self.h).index_add_(0, dst, alpha)
        alpha = alpha / (den[dst] + 1e-16)
        out = torch.zeros(n, self.h, self.c).index_add_(0, dst, h[src] * alpha[..., None])
        return out.flatten(1)


case("gat_layer_index_reduce_amax", _graph)(lambda: GATLayer())


@fn_case("global_pools_by_batch_vector", lambda i=0: (R(10 + i, 4), torch.sort(I(0, 3, 10 + i)).values, 3))
def global_pools_by_batch_vector(x, batch, num_graphs):
    """global_mean_pool / global_max_pool / global_add_pool by a sorted batch vector: sums with
    index_add, counts by bincount(minlength) clamped to 1, maxima by scatter_reduce amax."""
    add = torch.zeros(num_graphs, x.shape[1]).index_add(0, batch, x)
    cnt = torch.bincount(batch, minlength=num_graphs).clamp(min=1).to(x.dtype)
    mean = add / cnt[:, None]
    mx = torch.full((num_graphs, x.shape[1]), float("-inf")).scatter_reduce(
        0, batch[:, None].expand_as(x), x, reduce="amax", include_self=True)
    return add, mean, mx


@fn_case("dense_adjacency_index_put_accumulate", lambda i=0: (I(0, 5, 2, 12), R(12)))
def dense_adjacency_index_put_accumulate(edge_index, w):
    """to_dense_adj with edge weights: index_put_ with accumulate=True (duplicate edges sum),
    symmetric normalisation D^-1/2 A D^-1/2 with the degree's zeros guarded."""
    n = 5
    adj = torch.zeros(n, n)
    adj.index_put_((edge_index[0], edge_index[1]), w.abs(), accumulate=True)
    deg = adj.sum(1)
    dinv = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    return dinv[:, None] * adj * dinv[None, :]


class SAGEInt32Index(nn.Module):
    """GraphSAGE mean aggregation with int32 edge indices (index_select accepts int32; the scatter
    needs int64 and the code converts), a root weight and L2 normalisation."""

    def __init__(self):
        super().__init__()
        self.lin_l = nn.Linear(5, 4)
        self.lin_r = nn.Linear(5, 4, bias=False)

    def forward(self, x, ei):
        src, dst = ei[0], ei[1]
        msg = x.index_select(0, src)
        agg = torch.zeros_like(x).index_add_(0, dst.long(), msg)
        cnt = torch.zeros(x.shape[0]).index_add_(0, dst.long(), torch.ones(dst.shape[0])).clamp_(min=1)
        out = self.lin_l(agg / cnt[:, None]) + self.lin_r(x)
        return F.normalize(out, p=2.0, dim=-1)


case("sage_mean_int32_edge_index", lambda i=0: (R(6 + i, 5), I(0, 6 + i, 2, 15, dtype=torch.int32)))(
    lambda: SAGEInt32Index())


# ============================================================================= recommenders
class EmbBagOffsets(nn.Module):
    """EmbeddingBag(mode='sum') with a flat index tensor, offsets and per_sample_weights (the
    DLRM / TorchRec input layout), plus a 'mean' bag with padding_idx and include_last_offset."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(20, 4, mode="sum")
        self.bag2 = nn.EmbeddingBag(20, 4, mode="mean", padding_idx=0, include_last_offset=True)

    def forward(self, idx, offsets, w):
        a = self.bag(idx, offsets, per_sample_weights=w)
        last = torch.cat([offsets, torch.tensor([idx.numel()])])
        b = self.bag2(idx, last)
        return a, b


case("embedding_bag_offsets_per_sample_weights",
     lambda i=0: (I(0, 20, 11 + i), torch.tensor([0, 3, 3, 7]), torch.rand(11 + i)))(lambda: EmbBagOffsets())


class EmbBagMax2D(nn.Module):
    """EmbeddingBag(mode='max') over a 2-D (fixed-length bags) input, and F.embedding_bag functional
    with a weight from a Parameter scaled in place between calls."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(15, 3, mode="max")
        self.w = nn.Parameter(torch.randn(15, 3))

    def forward(self, ids):
        return self.bag(ids), F.embedding_bag(ids, self.w, mode="sum")


def _scale_w(m, i):
    if i == 2:
        with torch.no_grad():
            m.w.mul_(3)


case("embedding_bag_max_2d_and_functional", lambda i=0: (I(0, 15, 4 + i, 3),), between=_scale_w)(lambda: EmbBagMax2D())


class DLRMInteraction(nn.Module):
    """DLRM dot interaction: the dense feature and sparse embeddings stacked, bmm with its transpose,
    the strictly lower triangle taken by precomputed li / lj index buffers, concatenated with dense."""

    def __init__(self):
        super().__init__()
        self.emb = nn.ModuleList([nn.Embedding(10, 4) for _ in range(3)])
        self.bot = nn.Linear(5, 4)
        n = 4
        li = torch.tensor([i for i in range(n) for j in range(i)])
        lj = torch.tensor([j for i in range(n) for j in range(i)])
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = nn.Linear(4 + 6, 1)

    def forward(self, dense, sparse):
        x = torch.relu(self.bot(dense))
        ly = [e(sparse[:, k]) for k, e in enumerate(self.emb)]
        T = torch.cat([x] + ly, dim=1).view(x.shape[0], -1, 4)
        Z = torch.bmm(T, T.transpose(1, 2))
        Zflat = Z[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, Zflat], dim=1)))


case("dlrm_dot_interaction_tril_index", lambda i=0: (R(3 + i, 5), I(0, 10, 3 + i, 3)))(lambda: DLRMInteraction())


@fn_case("feature_hashing_remainder_negative_ids", lambda i=0: (I(-10 ** 12, 10 ** 12, 16), I(-50, 50, 16, dtype=torch.int32)))
def feature_hashing_remainder_negative_ids(ids, ids32):
    """Hashing trick on int64 ids that can be negative: torch.remainder / % (sign of the divisor)
    against torch.fmod (sign of the dividend), a multiplicative hash that wraps in int64, and int32
    ids with an int32 bucket count."""
    nb = 97
    h1 = ids % nb
    h2 = torch.fmod(ids, nb)
    h3 = (ids * 2654435761) % 1000003
    h4 = torch.remainder(ids32, 13)
    h5 = ids32 // 7
    return h1, h2, h3, h4, h5


class FMDCN(nn.Module):
    """Factorization machine second-order term 0.5 * ((sum v)^2 - sum v^2) and a DCN-v2 cross
    layer x0 * (W x + b) + x stacked twice, over embedded fields."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 4)
        self.cross = nn.ModuleList([nn.Linear(12, 12) for _ in range(2)])

    def forward(self, fields):
        v = self.emb(fields)                    # b, 3, 4
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1, keepdim=True)
        x0 = v.flatten(1)
        x = x0
        for lin in self.cross:
            x = x0 * lin(x) + x
        return fm, x


case("fm_second_order_dcn_cross", lambda i=0: (I(0, 30, 5, 3),))(lambda: FMDCN())


class DINAttention(nn.Module):
    """DIN local activation unit: the query repeated over the behaviour sequence, [q, k, q-k, q*k]
    through an MLP, padded positions masked by arange < lengths, weights not normalised (sum pooling)."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(16, 8), nn.Sigmoid(), nn.Linear(8, 1))

    def forward(self, q, keys, lengths):
        b, t, d = keys.shape
        qq = q[:, None, :].expand(-1, t, -1)
        w = self.mlp(torch.cat([qq, keys, qq - keys, qq * keys], dim=-1)).squeeze(-1)
        mask = torch.arange(t)[None, :] < lengths[:, None]
        w = w.masked_fill(~mask, 0.0)
        return torch.bmm(w.unsqueeze(1), keys).squeeze(1)


case("din_attention_length_mask", lambda i=0: (R(3, 4), R(3, 6 + i, 4), I(0, 7, 3)))(lambda: DINAttention())


# ================================================================================= diffusion
@fn_case("sinusoidal_timestep_embedding_odd_dim", lambda i=0: (torch.randint(0, 1000, (4 + i,)), 7 if i < 2 else 8))
def sinusoidal_timestep_embedding_odd_dim(t, dim):
    """guided-diffusion timestep_embedding: exp(-log(max_period) * arange(half) / half) against the
    integer timesteps cast to float, cat(cos, sin), a zero column appended for odd dims."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(0, half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class QSample(nn.Module):
    """DDPM q_sample and training target: a linear beta schedule in float64 buffers, alphas_cumprod
    gathered by a timestep tensor, cast to float32, reshaped to broadcast over (b, c, h, w)."""

    def __init__(self):
        super().__init__()
        betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
        ac = torch.cumprod(1 - betas, 0)
        self.register_buffer("sqrt_ac", ac.sqrt())
        self.register_buffer("sqrt_1mac", (1 - ac).sqrt())

    @staticmethod
    def extract(a, t, shape):
        out = a.gather(-1, t).float()
        return out.reshape(t.shape[0], *((1,) * (len(shape) - 1)))

    def forward(self, x0, t, noise):
        xt = self.extract(self.sqrt_ac, t, x0.shape) * x0 + self.extract(self.sqrt_1mac, t, x0.shape) * noise
        return xt, F.mse_loss(xt, noise)


case("ddpm_q_sample_float64_schedule_gather", lambda i=0: (R(3, 2, 4, 4), I(0, 1000, 3), R(3, 2, 4, 4)))(lambda: QSample())


class CFGDenoiser(nn.Module):
    """Classifier-free guidance: latents duplicated with cat, one UNet-ish pass with the uncond and
    cond embeddings cat'ed, output chunk(2), uncond + scale * (cond - uncond); the scale an attribute
    changed between calls (1.0 = no guidance in diffusers: the uncond half still computed)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.proj = nn.Linear(6, 4)
        self.guidance_scale = 7.5

    def forward(self, lat, cond, uncond):
        x = torch.cat([lat] * 2)
        emb = torch.cat([uncond, cond])
        out = self.conv(x) + self.proj(emb)[:, :, None, None]
        u, c = out.chunk(2)
        return u + self.guidance_scale * (c - u)


def _gs(m, i):
    if i == 2:
        m.guidance_scale = 1.0


case("cfg_chunk_cat_guidance_scale_attr", lambda i=0: (R(2, 4, 6, 6), R(2, 6), R(2, 6)), between=_gs)(lambda: CFGDenoiser())


class DDIMStep(nn.Module):
    """A DDIM step (eta = 0, then eta = 1 with a generator's noise): alphas_cumprod indexed by the
    current and previous timestep tensors, pred x0 clamped to [-1, 1], the direction term, sqrt of
    clamped differences."""

    def __init__(self):
        super().__init__()
        betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000) ** 2
        self.register_buffer("ac", torch.cumprod(1.0 - betas, dim=0))
        self.register_buffer("final", torch.tensor(1.0))
        self.eta = 0.0

    def forward(self, eps, t, prev_t, x, noise):
        a_t = self.ac[t]
        a_prev = torch.where(prev_t >= 0, self.ac[prev_t.clamp(min=0)], self.final)
        x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        x0 = x0.clamp(-1, 1)
        var = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)
        std = self.eta * var.clamp(min=0).sqrt()
        dirn = (1 - a_prev - std ** 2).clamp(min=0).sqrt() * eps
        return a_prev.sqrt() * x0 + dirn + std * noise


def _eta(m, i):
    if i == 2:
        m.eta = 1.0


case("ddim_step_timestep_tensors_eta_attr",
     lambda i=0: (R(1, 4, 5, 5), torch.tensor(981 - 20 * i), torch.tensor(961 - 20 * i if i < 2 else -1), R(1, 4, 5, 5), R(1, 4, 5, 5)),
     between=_eta)(lambda: DDIMStep())


@fn_case("cosine_schedule_karras_sigmas", lambda i=0: (10 + i,))
def cosine_schedule_karras_sigmas(n):
    """improved-DDPM cosine betas (cos^2 of shifted steps, clipped at 0.999, cumprod) and Karras
    sigmas (sigma_max^(1/rho) + ramp (sigma_min^(1/rho) - sigma_max^(1/rho)))^rho with a zero appended."""
    s = 0.008
    steps = torch.arange(n + 1, dtype=torch.float64) / n
    ac = torch.cos((steps + s) / (1 + s) * math.pi * 0.5) ** 2
    ac = ac / ac[0]
    betas = torch.clip(1 - ac[1:] / ac[:-1], 0, 0.999)
    rho, smin, smax = 7.0, 0.002, 80.0
    ramp = torch.linspace(0, 1, n)
    sig = (smax ** (1 / rho) + ramp * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    return betas, torch.cumprod(1 - betas, 0), torch.cat([sig, sig.new_zeros([1])])


@fn_case("v_prediction_snr_weighting", lambda i=0: (R(2, 3, 4, 4), R(2, 3, 4, 4), torch.rand(2) * 0.98 + 0.01))
def v_prediction_snr_weighting(x0, noise, ac):
    """v-prediction target, x0 and eps recovered from v, min-SNR-5 loss weights (snr.clamp(max=5) / snr)."""
    a = ac.sqrt()[:, None, None, None]
    s = (1 - ac).sqrt()[:, None, None, None]
    xt = a * x0 + s * noise
    v = a * noise - s * x0
    x0_hat = a * xt - s * v
    eps_hat = s * xt + a * v
    snr = ac / (1 - ac)
    w = torch.stack([snr, 5 * torch.ones_like(snr)], dim=1).min(dim=1)[0] / snr
    return v, x0_hat, eps_hat, w


# ============================================================================== point clouds
@fn_case("knn_topk_gather_neighbours", lambda i=0: (R(2, 20 + 4 * i, 3), R(2, 20 + 4 * i, 5)))
def knn_topk_gather_neighbours(xyz, feat):
    """kNN by cdist + topk(largest=False), neighbour features gathered with index expanded over
    channels, relative coordinates, max-pooled."""
    k = 4
    d = torch.cdist(xyz, xyz)
    dist, idx = d.topk(k, dim=-1, largest=False)
    b, n, _ = xyz.shape
    nb = torch.gather(feat[:, None].expand(b, n, n, feat.shape[-1]), 2, idx[..., None].expand(-1, -1, -1, feat.shape[-1]))
    rel = torch.gather(xyz[:, None].expand(b, n, n, 3), 2, idx[..., None].expand(-1, -1, -1, 3)) - xyz[:, :, None]
    return torch.cat([nb, rel], -1).max(dim=2).values, dist


@fn_case("farthest_point_sampling_loop_argmax", lambda i=0: (torch.rand(2, 32, 3),))
def farthest_point_sampling_loop_argmax(xyz):
    """PointNet++ farthest_point_sample: a Python loop of npoint steps, centroid gathered with
    batch-arange advanced indexing, distance kept as a running minimum, next index by argmax.
    The first index fixed to 0 (the reference uses randint)."""
    b, n, _ = xyz.shape
    npoint = 6
    centroids = torch.zeros(b, npoint, dtype=torch.long)
    distance = torch.ones(b, n) * 1e10
    farthest = torch.zeros(b, dtype=torch.long)
    bi = torch.arange(b, dtype=torch.long)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[bi, farthest, :].view(b, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids, distance


@fn_case("square_distance_ball_query_sort", lambda i=0: (torch.rand(2, 24, 3), torch.rand(2, 5, 3)))
def square_distance_ball_query_sort(xyz, new_xyz):
    """PointNet++ square_distance (-2 x y^T + |x|^2 + |y|^2) and query_ball_point: indices past the
    radius set to N, sorted, the first nsample kept, N replaced by the group's first index."""
    B, N, _ = xyz.shape
    S = new_xyz.shape[1]
    ns, r = 8, 0.4
    d = -2 * torch.matmul(new_xyz, xyz.permute(0, 2, 1))
    d += torch.sum(new_xyz ** 2, -1).view(B, S, 1)
    d += torch.sum(xyz ** 2, -1).view(B, 1, N)
    gi = torch.arange(N, dtype=torch.long).view(1, 1, N).repeat([B, S, 1])
    gi[d > r ** 2] = N
    gi = gi.sort(dim=-1)[0][:, :, :ns]
    first = gi[:, :, 0].view(B, S, 1).repeat([1, 1, ns])
    mask = gi == N
    gi[mask] = first[mask]
    return gi


@fn_case("chamfer_distance_both_directions", lambda i=0: (R(2, 16 + i, 3), R(2, 11, 3)))
def chamfer_distance_both_directions(a, b):
    """Chamfer distance: squared cdist, min over each side, means added; the nearest indices returned."""
    d = torch.cdist(a, b) ** 2
    d1, i1 = d.min(dim=2)
    d2, i2 = d.min(dim=1)
    return d1.mean(1) + d2.mean(1), i1, i2


class PointNetEncoder(nn.Module):
    """PointNet: Conv1d(k=1) + BatchNorm1d + ReLU over (b, c, n) (the input given as (b, n, c) and
    transposed, non-contiguous), max over points with the argmax returned (critical points), in train
    mode so the running statistics update."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16)
        self.c2, self.b2 = nn.Conv1d(16, 32, 1), nn.BatchNorm1d(32)

    def forward(self, pts):
        x = pts.transpose(2, 1)
        x = F.relu(self.b1(self.c1(x)))
        x = self.b2(self.c2(x))
        return torch.max(x, 2, keepdim=False)


case("pointnet_conv1d_bn_train_max_argmax", lambda i=0: (R(4, 30 + 5 * i, 3),), train=True)(lambda: PointNetEncoder())


@fn_case("dgcnn_graph_feature_idx_base", lambda i=0: (R(2, 4, 12 + 2 * i),))
def dgcnn_graph_feature_idx_base(x):
    """DGCNN get_graph_feature: knn by -|xi - xj|^2 topk, idx + arange(b) * n flattened, rows picked
    from x viewed (b * n, c), [feature - x, x] edge features."""
    k = 3
    b, c, n = x.shape
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x ** 2, dim=1, keepdim=True)
    pd = -xx - inner - xx.transpose(2, 1)
    idx = pd.topk(k=k, dim=-1)[1]
    idx = (idx + torch.arange(0, b).view(-1, 1, 1) * n).view(-1)
    xt = x.transpose(2, 1).contiguous()
    feat = xt.view(b * n, -1)[idx, :].view(b, n, k, c)
    xt = xt.view(b, n, 1, c).repeat(1, 1, k, 1)
    return torch.cat((feat - xt, xt), dim=3).permute(0, 3, 1, 2).contiguous()


# ============================================================================ NLP utilities
@fn_case("masked_mean_pool_from_lengths", lambda i=0: (R(3, 7 + i, 4), torch.tensor([7 + i, 2, 0])))
def masked_mean_pool_from_lengths(h, lengths):
    """Sentence embeddings: mask = arange(T) < lengths[:, None], sum of masked states over
    mask.sum clamped to 1e-9 (the empty sequence gives 0), and a max pool with -1e9 fill."""
    mask = (torch.arange(h.shape[1])[None, :] < lengths[:, None]).unsqueeze(-1).float()
    mean = (h * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
    mx = h.masked_fill(mask == 0, -1e9).max(1).values
    return mean, mx


@fn_case("fairseq_make_positions_cumsum", lambda i=0: (torch.tensor([[5, 6, 7, 1, 1], [8, 1, 1, 1, 1], [4, 4, 4, 4, 4]])[:, :5 - i % 2],))
def fairseq_make_positions_cumsum(tokens):
    """fairseq make_positions: mask = tokens.ne(padding_idx).int(), (cumsum(mask).type_as(mask) * mask)
    .long() + padding_idx, and the HF RoBERTa variant with past_key_values_length."""
    pad = 1
    mask = tokens.ne(pad).int()
    pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + pad
    inc = (torch.cumsum(mask, dim=1).type_as(mask) + 2) * mask
    return pos, inc.long() + pad


class LabelSmoothingLoss(nn.Module):
    """Two label-smoothing losses: F.cross_entropy(label_smoothing, ignore_index=-100) and the
    hand-written one (fill eps / (C - 1), scatter_ confidence, KL against log_softmax, padding rows
    zeroed via masked_fill); smoothing an attribute changed between calls."""

    def __init__(self):
        super().__init__()
        self.smoothing = 0.1

    def forward(self, logits, target):
        a = F.cross_entropy(logits, target, label_smoothing=self.smoothing, ignore_index=-100)
        c = logits.size(-1)
        lp = logits.log_softmax(-1)
        pad = target == -100
        t = target.masked_fill(pad, 0)
        true = torch.full_like(lp, self.smoothing / (c - 1))
        true.scatter_(1, t.unsqueeze(1), 1.0 - self.smoothing)
        loss = (-true * lp).sum(-1).masked_fill(pad, 0.0)
        return a, loss.sum() / (~pad).sum()


def _smooth(m, i):
    if i == 2:
        m.smoothing = 0.0


case("label_smoothing_ignore_index_two_ways", lambda i=0: (R(8, 5), torch.tensor([0, 4, -100, 2, 2, -100, 1, 3])),
     between=_smooth)(lambda: LabelSmoothingLoss())


@fn_case("varlen_packing_cu_seqlens_int32", lambda i=0: (R(3, 6, 4), torch.tensor([6, 2, 4 - i])))
def varlen_packing_cu_seqlens_int32(h, lengths):
    """flash-attn unpad_input: indices of valid tokens from a lengths mask (nonzero of the flattened
    mask), cu_seqlens = F.pad(cumsum(lengths, dtype=int32), (1, 0)), max_seqlen_in_batch as an int,
    the packed tokens by index_select, then scattered back (pad_input)."""
    b, t, d = h.shape
    mask = torch.arange(t)[None] < lengths[:, None]
    seqlens = mask.sum(dim=-1, dtype=torch.int32)
    idx = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    maxlen = seqlens.max().item()
    cu = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    packed = h.reshape(b * t, d).index_select(0, idx)
    out = torch.zeros(b * t, d)
    out[idx] = packed * 2
    return packed, cu, maxlen, out.view(b, t, d)


class LengthBuckets(nn.Module):
    """Length bucketing: torch.bucketize against a boundaries buffer (right=False / right=True),
    searchsorted of float lengths with side='right', bucket ids one-hot via F.one_hot(num_classes)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bounds", torch.tensor([8, 16, 32, 64]))

    def forward(self, lengths, flen):
        b1 = torch.bucketize(lengths, self.bounds)
        b2 = torch.bucketize(lengths, self.bounds, right=True)
        b3 = torch.searchsorted(self.bounds.float(), flen, side="right")
        return b1, b2, b3, F.one_hot(b1, num_classes=5)


case("bucketize_lengths_right_one_hot", lambda i=0: (torch.tensor([1, 8, 9, 16, 64, 65, 32 - i]), torch.tensor([7.5, 8.0, 100.0])))(
    lambda: LengthBuckets())


@fn_case("shift_tokens_right_masked_fill_inplace", lambda i=0: (torch.tensor([[5, 6, -100, -100], [7, 8, 9, -100]]),))
def shift_tokens_right_masked_fill_inplace(labels):
    """HF shift_tokens_right: new_zeros, slice assignment of a clone, the start token, masked_fill_
    of -100 with the pad id; then the decoder attention mask and a causal mask with a sliding window
    from triu / tril with diagonals."""
    start, pad = 2, 0
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = start
    shifted.masked_fill_(shifted == -100, pad)
    t = labels.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    window = torch.ones(t, t, dtype=torch.bool).triu(diagonal=-1)
    return shifted, shifted.ne(pad).long(), causal & window


# ================================================================================== metrics
@fn_case("topk_accuracy_eq_expand", lambda i=0: (R(16, 10), I(0, 10, 16)))
def topk_accuracy_eq_expand(output, target):
    """The ImageNet example's accuracy(): topk(maxk).t(), eq(target.view(1, -1).expand_as(pred)),
    correct[:k].reshape(-1).float().sum(0, keepdim=True) * 100 / batch; plus argmax == target mean."""
    maxk = 5
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    res = [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0)) for k in (1, 5)]
    acc = (output.argmax(dim=1) == target).float().mean()
    return res, acc


@fn_case("confusion_matrix_bincount_minlength", lambda i=0: (I(0, 4, 30), I(0, 4, 30)))
def confusion_matrix_bincount_minlength(pred, target):
    """Confusion matrix via bincount(n * target + pred, minlength=n * n).reshape(n, n); per-class
    recall and precision with 0/0 turned into 0 by nan_to_num; balanced accuracy."""
    n = 4
    cm = torch.bincount(n * target + pred, minlength=n * n).reshape(n, n)
    tp = cm.diag().float()
    recall = (tp / cm.sum(1)).nan_to_num(0.0)
    precision = (tp / cm.sum(0)).nan_to_num(0.0)
    return cm, recall, precision, recall.mean()


@fn_case("binary_auc_by_sort_cumsum_trapz", lambda i=0: (torch.rand(40), (torch.rand(40) > 0.5).long()))
def binary_auc_by_sort_cumsum_trapz(scores, labels):
    """ROC AUC from a sort: labels ordered by descending score, tps / fps by cumsum, rates prepended
    with 0, torch.trapz; the average precision from the same cumsums."""
    order = torch.argsort(scores, descending=True)
    y = labels[order].float()
    tps = torch.cumsum(y, 0)
    fps = torch.cumsum(1 - y, 0)
    tpr = torch.cat([torch.zeros(1), tps / tps[-1]])
    fpr = torch.cat([torch.zeros(1), fps / fps[-1]])
    auc = torch.trapz(tpr, fpr)
    precision = tps / torch.arange(1, len(y) + 1)
    ap = (precision * y).sum() / y.sum()
    return auc, ap


@fn_case("segmentation_miou_ignore_index", lambda i=0: (R(2, 3, 8, 8 + i), I(0, 4, 2, 8, 8 + i)))
def segmentation_miou_ignore_index(logits, target):
    """Semantic-segmentation mIoU: argmax over classes, target 3 = ignore (masked out with a boolean
    index), intersection / union per class by bincount(minlength), nanmean over present classes."""
    n, ignore = 3, 3
    pred = logits.argmax(1)
    keep = target != ignore
    p, t = pred[keep], target[keep]
    inter = torch.bincount(t[p == t], minlength=n).float()
    area_p = torch.bincount(p, minlength=n).float()
    area_t = torch.bincount(t, minlength=n).float()
    iou = inter / (area_p + area_t - inter)
    return iou, torch.nanmean(iou)


@fn_case("f1_from_thresholded_probs", lambda i=0: (torch.rand(6, 4), (torch.rand(6, 4) > 0.6).float()))
def f1_from_thresholded_probs(probs, y):
    """Multi-label F1: (probs > 0.5) as float, tp / fp / fn sums per label, f1 with eps, micro and macro."""
    p = (probs > 0.5).float()
    tp = (p * y).sum(0)
    fp = (p * (1 - y)).sum(0)
    fn = ((1 - p) * y).sum(0)
    f1 = 2 * tp / (2 * tp + fp + fn + 1e-8)
    micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum() + 1e-8)
    return f1, f1.mean(), micro


# ============================================================== quantisation-aware training
class FakeQuantPerTensor(nn.Module):
    """torch.fake_quantize_per_tensor_affine with float scale / int zero_point attributes changed
    between calls (uint8 range, then int8 range), and the per-channel variant with tensor scales."""

    def __init__(self):
        super().__init__()
        self.scale, self.zp, self.qmin, self.qmax = 0.05, 128, 0, 255
        self.register_buffer("ch_scale", torch.tensor([0.1, 0.02, 0.05]))
        self.register_buffer("ch_zp", torch.tensor([0, 3, -2], dtype=torch.int32))

    def forward(self, x):
        a = torch.fake_quantize_per_tensor_affine(x, self.scale, self.zp, self.qmin, self.qmax)
        b = torch.fake_quantize_per_channel_affine(x, self.ch_scale, self.ch_zp, 1, -128, 127)
        return a, b


def _fq(m, i):
    if i == 2:
        m.scale, m.zp, m.qmin, m.qmax = 0.1, 0, -128, 127


case("fake_quantize_tensor_and_channel_attrs", lambda i=0: (R(2, 3, 5) * 4,), between=_fq)(lambda: FakeQuantPerTensor())


class STEQuantLinear(nn.Module):
    """A QAT linear with straight-through rounding: w + (round(w / s).clamp(-8, 7) * s - w).detach(),
    the scale from max |w| / 7, activations fake-quantised the same way; trained (backward in the
    compiled function), gradients returned."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)

    @staticmethod
    def q(x, bits):
        qmax = 2 ** (bits - 1) - 1
        s = x.detach().abs().max().clamp(min=1e-8) / qmax
        return x + (torch.clamp(torch.round(x / s), -qmax - 1, qmax) * s - x).detach()

    def forward(self, x):
        w = self.q(self.lin.weight, 4)
        y = F.linear(self.q(x, 8), w, self.lin.bias)
        loss = y.pow(2).mean()
        gw, gb = torch.autograd.grad(loss, [self.lin.weight, self.lin.bias])
        return y, gw, gb


case("ste_round_quant_linear_autograd_grad", lambda i=0: (R(5, 6),), train=True)(lambda: STEQuantLinear())


class LSQQuantizer(nn.Module):
    """Learned step size quantisation: grad_scale (y - y_grad).detach() + y_grad and round_pass
    tricks, a learnable step initialised from the data on the first call (a Python flag flipped
    inside forward, a buffer written in place)."""

    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
        self.Qn, self.Qp = -128, 127

    def forward(self, x):
        if self.initialized == 0:
            with torch.no_grad():
                self.s.copy_(2 * x.abs().mean() / math.sqrt(self.Qp))
                self.initialized.fill_(1)
        g = 1.0 / math.sqrt(x.numel() * self.Qp)
        s = (self.s - self.s * g).detach() + self.s * g
        v = torch.clamp(x / s, self.Qn, self.Qp)
        v = (v.round() - v).detach() + v
        return v * s


case("lsq_grad_scale_round_pass_init_flag", lambda i=0: (R(4, 8),))(lambda: LSQQuantizer())


@fn_case("int8_symmetric_quant_dequant_tensors", lambda i=0: (R(4, 6) * 3,))
def int8_symmetric_quant_dequant_tensors(x):
    """Per-row symmetric int8 quantisation to an int8 tensor (round, clamp, .to(int8)), dequantised,
    the error; uint8 asymmetric with zero point from min/max, round half to even of .5 cases."""
    s = x.abs().amax(dim=1, keepdim=True) / 127
    q = torch.clamp(torch.round(x / s), -128, 127).to(torch.int8)
    dq = q.float() * s
    lo, hi = x.min(), x.max()
    su = (hi - lo) / 255
    zp = torch.round(-lo / su).clamp(0, 255)
    qu = torch.clamp(torch.round(x / su) + zp, 0, 255).to(torch.uint8)
    half = torch.round(torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5]))
    return q, dq, (x - dq).abs().max(), qu, (qu.float() - zp) * su, half


@fn_case("int_matmul_zero_points_requant", lambda i=0: (I(0, 256, 4, 8, dtype=torch.uint8), I(-128, 128, 8, 3, dtype=torch.int8)))
def int_matmul_zero_points_requant(a, b):
    """Integer GEMM emulation: uint8 activations and int8 weights widened to int32, zero points
    subtracted, int32 matmul, requantised with a float multiplier, rounded, clamped, to uint8."""
    acc = (a.to(torch.int32) - 128) @ b.to(torch.int32)
    y = torch.round(acc.float() * 0.0123) + 7
    return acc, y.clamp(0, 255).to(torch.uint8)


# ====================================================================== image preprocessing
class Uint8Normalize(nn.Module):
    """uint8 HWC batch to normalised NCHW float: permute, .float() / 255, (x - mean) / std with
    (1, 3, 1, 1) buffers; channels_last input on the last call; the std attribute replaced."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, img):
        x = img.permute(0, 3, 1, 2).float().div(255)
        return (x - self.mean) / self.std


case("uint8_hwc_normalize_buffers", lambda i=0: (U8(2, 6 + i, 5, 3),))(lambda: Uint8Normalize())


@fn_case("uint8_flips_crops_channels_last", lambda i=0: (U8(2, 3, 9, 10).contiguous(memory_format=torch.channels_last) if i == 2 else U8(2, 3, 9, 10),))
def uint8_flips_crops_channels_last(img):
    """torchvision.transforms.v2 functional on uint8: hflip (flip(-1)), vflip, center crop by slicing,
    a 90-degree rotation (rot90), padding with fill by F.pad constant 114, all staying uint8."""
    h = img.flip(-1)
    v = img.flip(-2)
    th, tw = 5, 6
    top, left = (img.shape[-2] - th) // 2, (img.shape[-1] - tw) // 2
    crop = img[..., top:top + th, left:left + tw]
    r = torch.rot90(crop, 1, dims=(-2, -1))
    p = F.pad(crop, (1, 2, 0, 1), value=114)
    return h, v, crop.contiguous(), r, p


@fn_case("resize_uint8_via_float_round_clamp", lambda i=0: (U8(1, 3, 12, 10),))
def resize_uint8_via_float_round_clamp(img):
    """Resizing uint8 through float: bilinear (align_corners=False, antialias=False), nearest,
    nearest-exact, bicubic whose overshoot is clamped, rounded back to uint8."""
    x = img.float()
    a = F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False)
    b = F.interpolate(img, scale_factor=1.5, mode="nearest")
    c = F.interpolate(x, size=(5, 4), mode="nearest-exact")
    d = F.interpolate(x, size=(16, 14), mode="bicubic", align_corners=True)
    back = a.round().clamp(0, 255).to(torch.uint8)
    return back, b, c, d.clamp(0, 255).round().to(torch.uint8)


@fn_case("rgb_to_grayscale_uint8_truncation", lambda i=0: (U8(2, 3, 4, 5),))
def rgb_to_grayscale_uint8_truncation(img):
    """torchvision rgb_to_grayscale on uint8: r, g, b by unbind(-3), 0.2989 r + 0.587 g + 0.114 b
    .to(uint8) (truncation), unsqueeze and expand to 3 channels; adjust_brightness through _blend
    (clamp 0..255 then to uint8)."""
    r, g, b = img.unbind(dim=-3)
    l_img = (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype).unsqueeze(dim=-3)
    gray3 = l_img.expand(img.shape)
    ratio = 1.3
    bright = (ratio * img.float() + (1.0 - ratio) * 0).clamp(0, 255).to(img.dtype)
    return l_img, gray3, bright


@fn_case("rgb_to_hsv_torchvision_fmod", lambda i=0: (torch.rand(2, 3, 4, 4),))
def rgb_to_hsv_torchvision_fmod(img):
    """torchvision _rgb2hsv: max / min over channels, eqc = maxc == minc, cr with ones_like where
    eqc, hr/hg/hb via (maxc == r) masks and logical_and, torch.fmod((h / 6.0 + 1.0), 1.0)."""
    r, g, _ = img.unbind(dim=-3)
    maxc = torch.max(img, dim=-3).values
    minc = torch.min(img, dim=-3).values
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    cr_divisor = torch.where(eqc, ones, cr)
    rc = (maxc - r) / cr_divisor
    gc = (maxc - g) / cr_divisor
    bc = (maxc - img[..., 2, :, :]) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = hr + hg + hb
    h = torch.fmod((h / 6.0 + 1.0), 1.0)
    return torch.stack((h, s, maxc), dim=-3)


@fn_case("integer_division_rounding_modes_negative", lambda i=0: (I(-50, 50, 20), I(-5, 6, 20).masked_fill(I(-5, 6, 20) == 0, 3), U8(20)))
def integer_division_rounding_modes_negative(a, b, u):
    """Integer division of negatives: // (floor), torch.div(rounding_mode='trunc'/'floor'), true
    division to float, % of negatives, uint8 + uint8 wrapping, uint8 // 3, uint8 - 200 wrapping."""
    b = torch.where(b == 0, torch.ones_like(b), b)
    return (a // b, torch.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor"), a / b, a % b,
            u + u, u // 3, u - 200, (u.to(torch.int16) * 300))


@fn_case("gaussian_blur_separable_reflect", lambda i=0: (torch.rand(2, 3, 10 + i, 9),))
def gaussian_blur_separable_reflect(img):
    """torchvision gaussian_blur: a 1-D kernel from exp(-0.5 (x / sigma)^2) normalised, its outer
    product as a depthwise conv2d weight expanded over channels, reflect padding."""
    ks, sigma = 5, 1.2
    half = (ks - 1) * 0.5
    x = torch.linspace(-half, half, steps=ks)
    pdf = torch.exp(-0.5 * (x / sigma).pow(2))
    k1 = pdf / pdf.sum()
    k2 = torch.mm(k1[:, None], k1[None, :])
    w = k2.expand(img.shape[-3], 1, ks, ks)
    p = F.pad(img, [ks // 2] * 4, mode="reflect")
    return F.conv2d(p, w, groups=img.shape[-3])


# ======================================================================== signal processing
@fn_case("cumsum_cumprod_diff_prepend_flip_roll", lambda i=0: (R(3, 10 + i), I(-3, 4, 3, 10 + i)))
def cumsum_cumprod_diff_prepend_flip_roll(x, n):
    """Running statistics: cumsum, cumprod of (1 + small returns), diff with prepend / append and n=2,
    reverse cumsum by flip, roll with tuple shifts, cummax / cummin values and indices, int cumsum."""
    cs = x.cumsum(-1)
    cp = torch.cumprod(1 + 0.01 * x, dim=1)
    d1 = torch.diff(x, dim=1, prepend=x[:, :1])
    d2 = torch.diff(x, n=2, dim=-1, append=torch.zeros(3, 1))
    rev = x.flip(-1).cumsum(-1).flip(-1)
    rl = torch.roll(x, shifts=(1, -2), dims=(0, 1))
    cmx = torch.cummax(x, dim=1)
    cmn = torch.cummin(n, dim=1)
    return cs, cp, d1, d2, rev, rl, cmx.values, cmx.indices, cmn.values, cmn.indices, n.cumsum(1)


@fn_case("pad_modes_reflect_replicate_circular", lambda i=0: (R(2, 3, 6 + i), R(1, 2, 5, 6 + i), R(1, 1, 3, 4, 5)))
def pad_modes_reflect_replicate_circular(a, b, c):
    """F.pad 1-D / 2-D / 3-D with reflect, replicate, circular and constant (negative pads crop)."""
    return (F.pad(a, (2, 3), mode="reflect"), F.pad(a, (4, 1), mode="replicate"), F.pad(a, (3, 2), mode="circular"),
            F.pad(b, (1, 2, 3, 1), mode="reflect"), F.pad(b, (2, 2, 1, 0), mode="circular"),
            F.pad(b, (-1, 2, 1, -2), value=-7.0), F.pad(c, (1, 1, 1, 1, 1, 1), mode="replicate"))


class EMAFilterLoop(nn.Module):
    """An exponential moving average over time written as a Python loop over the sequence
    (y_t = a y_{t-1} + (1 - a) x_t, stacked), the state kept in a buffer updated in place across
    calls, alpha an attribute changed between calls."""

    def __init__(self):
        super().__init__()
        self.alpha = 0.9
        self.register_buffer("state", torch.zeros(3))

    def forward(self, x):
        y = self.state.clone()
        outs = []
        for t in range(x.shape[1]):
            y = self.alpha * y + (1 - self.alpha) * x[:, t]
            outs.append(y)
        self.state.copy_(y)
        return torch.stack(outs, 1)


def _alpha(m, i):
    if i == 2:
        m.alpha = 0.5


case("ema_filter_loop_state_buffer", lambda i=0: (R(3, 6),), between=_alpha)(lambda: EMAFilterLoop())


@fn_case("moving_average_cumsum_and_avg_pool", lambda i=0: (R(2, 20 + i),))
def moving_average_cumsum_and_avg_pool(x):
    """Moving average two ways: the cumsum trick (c[w:] - c[:-w]) / w over a zero-prepended cumsum,
    and avg_pool1d(count_include_pad=False) with padding; a median filter by unfold + median."""
    w = 4
    c = torch.cumsum(F.pad(x, (1, 0)), dim=-1)
    ma = (c[:, w:] - c[:, :-w]) / w
    ap = F.avg_pool1d(x[:, None], 3, stride=1, padding=1, count_include_pad=False)[:, 0]
    med = F.pad(x, (1, 1), mode="replicate").unfold(-1, 3, 1).median(dim=-1).values
    return ma, ap, med


@fn_case("autocorrelation_grouped_conv1d", lambda i=0: (R(3, 32),))
def autocorrelation_grouped_conv1d(x):
    """Autocorrelation of each row via conv1d with the row itself as the kernel (batch moved into
    groups), normalised by lag 0, and zero-crossing rate from sign changes."""
    b, n = x.shape
    x = x - x.mean(-1, keepdim=True)
    ac = F.conv1d(F.pad(x, (n - 1, 0))[None], x[:, None, :], groups=b)[0]
    ac = ac.flip(-1) / ac[:, -1:].clamp(min=1e-8)
    zcr = (torch.sign(x[:, 1:]) != torch.sign(x[:, :-1])).float().mean(-1)
    return ac, zcr


# =================================================================== numerically sensitive
@fn_case("logsumexp_fully_masked_rows_inf", lambda i=0: (R(4, 6), torch.tensor([[1, 1, 0, 0, 1, 1], [0] * 6, [1] * 6, [0, 0, 0, 0, 0, 1]], dtype=torch.bool)))
def logsumexp_fully_masked_rows_inf(x, keep):
    """logsumexp over rows where some rows are all -inf (result -inf), the log-domain normaliser
    subtracted (NaN in those rows, as eager), nan_to_num with neginf, logaddexp of -inf pairs."""
    m = x.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(m, dim=-1)
    norm = m - lse[:, None]
    lae = torch.logaddexp(m, torch.full_like(m, float("-inf")))
    return lse, norm, torch.nan_to_num(norm, nan=0.0, neginf=-1e4), lae


@fn_case("log1p_expm1_softplus_thresholds", lambda i=0: (torch.tensor([-1e-8, 1e-7, 1e-3, -0.5, 5.0, 19.0, 21.0, 40.0, -40.0, 80.0, 100.0]) * (1 + i),))
def log1p_expm1_softplus_thresholds(x):
    """Small and large arguments: log1p / expm1 near 0 (vs the naive log(1 + x) / exp(x) - 1),
    softplus with beta=2 threshold=10 and the default 20, log_sigmoid, -softplus(-x), sigmoid at +-40."""
    return (torch.log1p(x), torch.expm1(x), F.softplus(x, beta=2.0, threshold=10.0), F.softplus(x),
            F.logsigmoid(x), -F.softplus(-x), torch.sigmoid(x), torch.special.log1p(x.abs()))


@fn_case("norms_with_eps_zero_vectors", lambda i=0: (torch.cat([R(3, 4), torch.zeros(1, 4)]),))
def norms_with_eps_zero_vectors(x):
    """Zero rows through norms: F.normalize (eps clamp), x / x.norm().clamp_min, rsqrt(var + eps)
    (RMSNorm), cosine_similarity with a zero vector, torch.linalg.vector_norm ord inf / 0 / 3."""
    a = F.normalize(x, dim=-1)
    b = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    c = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    d = F.cosine_similarity(x, x.flip(0), dim=-1)
    e = torch.linalg.vector_norm(x, ord=float("inf"), dim=-1)
    f = torch.linalg.vector_norm(x, ord=0, dim=-1)
    g = torch.linalg.vector_norm(x, ord=3, dim=-1)
    return a, b, c, d, e, f, g


class Float64Head(nn.Module):
    """A float32 module fed float64 inputs on a later call (the Linear follows its weight's dtype,
    so the code casts), float64 math inside with .double() and back, torch.get_default_dtype used."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x.to(self.lin.weight.dtype))
        z = (y.double() * 1e-3).exp().log1p()
        return z, z.to(torch.get_default_dtype()), x * 2


case("float64_inputs_cast_inside", lambda i=0: (R(2, 4, dtype=torch.float64 if i == 2 else torch.float32),))(lambda: Float64Head())


@fn_case("fp16_bf16_mixing_promotion", lambda i=0: (R(3, 4, dtype=torch.float16), R(3, 4, dtype=torch.bfloat16), R(4, 2)))
def fp16_bf16_mixing_promotion(h, b, f):
    """Mixed half types: fp16 + bf16 promotes to float32, fp16 * python float stays fp16, fp16 @
    fp16 on the CPU, bf16 sum with dtype=float32, fp16 softmax with dtype=float32, fp16 max of
    large values, fp16 overflow to inf."""
    mix = h + b
    s = h * 3.5
    mm = h @ f.half()
    bs = b.sum(-1, dtype=torch.float32)
    sm = F.softmax(h, dim=-1, dtype=torch.float32)
    big = (h * 30000).float()
    return mix, s, mm, bs, sm, big, (h * 30000)


@fn_case("inf_nan_inputs_clamp_fmax_nan_to_num", lambda i=0: (torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -2.0, 0.0, -0.0]),
                                                              torch.tensor([0.5, 1.0, float("nan"), 3.0, float("nan"), -0.0, 0.0])))
def inf_nan_inputs_clamp_fmax_nan_to_num(a, b):
    """NaN and inf through common ops: clamp propagates NaN, maximum propagates / fmax ignores, relu of
    NaN, where(isfinite), nan_to_num default posinf, sign / signbit of -0.0, atan2 of zeros, copysign."""
    return (a.clamp(-1, 1), torch.maximum(a, b), torch.fmax(a, b), torch.fmin(a, b), F.relu(a),
            torch.where(torch.isfinite(a), a, torch.zeros_like(a)), torch.nan_to_num(a), torch.sign(a),
            torch.signbit(a), torch.atan2(a, b), torch.copysign(torch.ones_like(a), b), torch.hypot(a, b),
            a.isnan().sum(), torch.isinf(a) | torch.isnan(b))


@fn_case("exp_overflow_log_softmax_large_logits", lambda i=0: (R(3, 5) * 100 + 50,))
def exp_overflow_log_softmax_large_logits(x):
    """Large logits: softmax / log_softmax stable, the naive exp / sum overflowing to inf / NaN (as in
    eager), tanh / sigmoid saturated, torch.special.entr / xlogy with zeros."""
    naive = x.exp() / x.exp().sum(-1, keepdim=True)
    p = F.softmax(x, -1)
    return (F.log_softmax(x, -1), p, naive, torch.tanh(x), torch.special.entr(p), torch.xlogy(p, p),
            torch.special.xlog1py(p, -p))


@fn_case("integer_overflow_and_promotion", lambda i=0: (I(2 ** 30, 2 ** 31 - 1, 6, dtype=torch.int32), I(-128, 128, 6, dtype=torch.int8)))
def integer_overflow_and_promotion(a, b):
    """Integer width semantics: int32 sum() promotes to int64 (no overflow), int32 + int32 wraps,
    int8 * int8 wraps, int8 abs(-128), int32 * 2.5 promotes to float, int32 mean needs dtype, prod
    of int8 as int64, bitwise shifts and xor."""
    return (a.sum(), a + a, b * b, b.abs(), a * 2.5, a.float().mean(), b.prod(), b.sum(dtype=torch.int8),
            a >> 3, b << 1, a ^ 12345, a.to(torch.int16), (b > 0).sum(), torch.true_divide(a, 7))


# ================================================================== dtype / layout edges
@fn_case("noncontiguous_expanded_inputs_inplace_slice", lambda i=0: (R(4, 5).t(), R(4, 1).expand(4, 6), R(3, 8)[:, ::2]))
def noncontiguous_expanded_inputs_inplace_slice(a, e, s):
    """A transposed input, an expanded input (stride 0) read and copied, a strided slice written in
    place (its storage shared with the caller's view), results viewed and made contiguous."""
    y = a @ e
    s.mul_(2).add_(1)
    z = e.contiguous() + 1
    return y, s, z, a.reshape(-1)


@fn_case("zero_dim_and_empty_tensors_vary", lambda i=0: (torch.tensor(3.5), R(0, 4) if i != 2 else R(2, 4), torch.tensor(2)))
def zero_dim_and_empty_tensors_vary(s, x, k):
    """0-d tensors combined with others (a 0-d float times a tensor keeps its dtype, a 0-d int index),
    an empty batch on the first calls and a non-empty one later, sum / mean / max of empty (mean NaN)."""
    y = x * s + k
    total = y.sum()
    mean = y.mean()
    amax = y.amax(dim=-1) if y.numel() or y.shape[-1] else y.sum(-1)
    first = torch.arange(10)[k]
    return y, total, mean, amax, first, s * k, (s > 3) & (k == 2)


class IndexDtypes(nn.Module):
    """Embedding with int32 indices, index_select / gather with int32 and int64, x[int32 tensor]
    advanced indexing, torch.take, and int32 arithmetic on the indices before use."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 3)

    def forward(self, x, i32, i64):
        a = self.emb(i32)
        b = x.index_select(0, i32)
        c = torch.gather(x, 1, i64[:, None].expand(-1, 2))
        d = x[i32]
        e = torch.take(x, (i32 * 2 + 1).long())
        f = x[(i32 + 1) % x.shape[0]]
        return a, b, c, d, e, f


case("int32_vs_int64_indices", lambda i=0: (R(8, 4), I(0, 8, 5, dtype=torch.int32), I(0, 4, 8)))(lambda: IndexDtypes())


@fn_case("bool_arithmetic_and_reductions", lambda i=0: (torch.rand(4, 5) > 0.5, torch.rand(4, 5) > 0.3, R(4, 5)))
def bool_arithmetic_and_reductions(m, n, x):
    """Bool tensors in arithmetic: m + n stays bool (logical or), m * n bool, m.sum() int64, m.float()
    mean, ~m, m ^ n, m.int() - n.int(), torch.where(m, x, 0), x * m, m.any / all over dims, cumsum of bool."""
    return (m + n, m * n, m.sum(), m.sum(1), m.float().mean(), ~m, m ^ n, m.int() - n.int(), torch.where(m, x, 0.0),
            x * m, m.any(1), m.all(0), m.cumsum(1), m.long().prod(1), m.to(torch.uint8) * 255, m.to(torch.uint8).argmax(1))


class ChannelsLastConvInplace(nn.Module):
    """Conv2d over a channels_last input (on a later call a contiguous one), inplace ReLU_,
    BatchNorm2d in train mode updating running stats, an in-place residual add_, the output's
    memory format returned implicitly through the comparison of values."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.proj = nn.Conv2d(3, 6, 1)

    def forward(self, x):
        y = self.bn(self.conv(x))
        y.relu_()
        y.add_(self.proj(x))
        return y, y.is_contiguous(memory_format=torch.channels_last)


case("channels_last_conv_bn_train_inplace", lambda i=0: (R(2, 3, 6, 6).contiguous(memory_format=torch.channels_last) if i != 2 else R(2, 3, 6, 6),),
     train=True)(lambda: ChannelsLastConvInplace())


class BufferCounterInplace(nn.Module):
    """Buffers updated in place on every call (a step counter incremented with add_, a histogram by
    index_add_ of ones, a running max by torch.maximum into copy_), the counter read to weight the result."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("hist", torch.zeros(5))
        self.register_buffer("runmax", torch.full((4,), float("-inf")))

    def forward(self, x, bins):
        self.steps.add_(1)
        self.hist.index_add_(0, bins, torch.ones(bins.shape[0]))
        self.runmax.copy_(torch.maximum(self.runmax, x.amax(0)))
        return x / self.steps, self.hist / self.hist.sum()


case("buffer_counter_histogram_runmax_inplace", lambda i=0: (R(3, 4), I(0, 5, 7)))(lambda: BufferCounterInplace())


# ============================================================== round 2: state, ties, casts
class EMAObserverInt8(nn.Module):
    """A QAT observer whose scale is an EMA of abs-max (a buffer updated in place): the
    activation quantised with (x / scale).round().to(torch.int8) WITHOUT a clamp, so values past
    the stale scale wrap in int8 as in eager; dequantised with the same scale."""

    def __init__(self):
        super().__init__()
        self.register_buffer("absmax", torch.tensor(1.0))
        self.momentum = 0.1

    def forward(self, x):
        with torch.no_grad():
            self.absmax.mul_(1 - self.momentum).add_(x.abs().max() * self.momentum)
        scale = self.absmax / 127
        q = (x / scale).round().to(torch.int8)
        return q, q.float() * scale, (x / scale).to(torch.int16)


case("ema_observer_int8_no_clamp_wraps", lambda i=0: (R(4, 6) * (3 + 2 * i),))(lambda: EMAObserverInt8())


class MoCoQueue(nn.Module):
    """MoCo's key queue: a buffer written through a slice at a pointer read with int(self.ptr),
    the pointer buffer advanced in place, logits against a clone of the queue."""

    def __init__(self):
        super().__init__()
        self.register_buffer("queue", F.normalize(torch.randn(4, 10), dim=0))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))

    def forward(self, q, k):
        k = F.normalize(k, dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / 0.07
        b, p = k.shape[0], int(self.ptr)
        self.queue[:, p:p + b] = k.T
        self.ptr[0] = (p + b) % 10
        return logits, torch.zeros(logits.shape[0], dtype=torch.long)


case("moco_queue_slice_write_pointer_buffer", lambda i=0: (R(2, 4), R(2, 4)), ncalls=5)(lambda: MoCoQueue())


class DINOCenter(nn.Module):
    """DINO's teacher centering: softmax((t - center) / temp), the center updated in place
    under no_grad as an EMA of the batch mean; the momentum an attribute changed between calls."""

    def __init__(self):
        super().__init__()
        self.register_buffer("center", torch.zeros(1, 5))
        self.m, self.temp = 0.9, 0.04

    def forward(self, t, s):
        tp = F.softmax((t - self.center) / self.temp, -1)
        loss = torch.sum(-tp * F.log_softmax(s / 0.1, -1), -1).mean()
        with torch.no_grad():
            self.center.mul_(self.m).add_(t.mean(0, keepdim=True), alpha=1 - self.m)
        return loss, tp


def _center_m(m, i):
    if i == 2:
        m.m, m.temp = 0.5, 0.07


case("dino_center_ema_attr_changed", lambda i=0: (R(3, 5), R(3, 5)), between=_center_m)(lambda: DINOCenter())


class LUTInplace(nn.Module):
    """A uint8 lookup table (gamma curve) buffer indexed by the image, the first column of the
    input overwritten in place with the result, the image mean as float."""

    def __init__(self):
        super().__init__()
        lut = (torch.linspace(0, 1, 256) ** 0.5 * 255).round().to(torch.uint8)
        self.register_buffer("lut", lut)

    def forward(self, img):
        out = self.lut[img.long()]
        img[..., 0] = out[..., 0]
        return out, img.float().mean()


case("uint8_lut_index_inplace_input", lambda i=0: (U8(2, 4, 5),))(lambda: LUTInplace())


class MemoryBank(nn.Module):
    """An instance-discrimination memory bank: rows written with index_copy_ at the batch's
    indices, then scaled through advanced-index in-place multiply, a Python call counter."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mem", torch.zeros(6, 3))
        self.count = 0

    def forward(self, x, idx):
        self.mem.index_copy_(0, idx, x.detach())
        self.mem[idx] *= 0.5
        self.count += 1
        return self.mem.sum(0) * self.count


case("memory_bank_index_copy_advanced_inplace", lambda i=0: (R(2, 3), torch.tensor([i % 6, (i + 3) % 6])))(lambda: MemoryBank())


@fn_case("ranking_with_tied_scores_stable_sort", lambda i=0: (torch.randint(0, 4, (6, 8)).float(), I(0, 2, 6, 8)))
def ranking_with_tied_scores_stable_sort(scores, rel):
    """Ranking metrics on integer-valued (tied) scores: stable descending sort, argmax / max
    indices of ties (first occurrence), topk of ties, DCG with log2 discounts, MRR by argmax of
    the relevance sorted by score."""
    order = scores.sort(dim=1, descending=True, stable=True).indices
    r = torch.gather(rel, 1, order).float()
    disc = 1.0 / torch.log2(torch.arange(2, scores.shape[1] + 2).float())
    dcg = (r * disc).sum(1)
    first = r.argmax(1)
    mrr = torch.where(r.sum(1) > 0, 1.0 / (first + 1).float(), torch.zeros(()))
    return order, dcg, mrr, scores.argmax(1), scores.max(0).indices, scores.topk(3, 1).indices


@fn_case("argmax_with_nan_scores", lambda i=0: (R(4, 6),))
def argmax_with_nan_scores(x):
    """Scores with NaN (a 0/0 upstream): argmax / max / topk / sort propagate NaN as the largest,
    nanmean / nansum skip it, nan_to_num before argmax."""
    x = x.clone()
    x[0, 2] = float("nan")
    x[3, 0] = float("nan")
    return (x.argmax(1), x.max(1), x.topk(2, 1), x.sort(1).indices, x.amax(1), x.nanmean(1), x.nansum(0),
            x.nan_to_num(-1.0).argmax(1))


@fn_case("kd_manual_kl_softmax_then_log_confident", lambda i=0: (R(4, 10) * (30 + 5 * i), R(4, 10) * 20))
def kd_manual_kl_softmax_then_log_confident(s_logits, t_logits):
    """Knowledge distillation written by hand: probabilities by softmax, then .log() of them
    (not log_softmax), KL = sum p (log p - log q) with a confident teacher (logit gaps near 100:
    probabilities in the subnormal range, whose log is about -100 in eager, not -inf)."""
    p = F.softmax(t_logits, dim=-1)
    q = F.softmax(s_logits, dim=-1)
    kl = (p * (p.log() - q.log())).sum(-1)
    ent = -(p * torch.log(p + 1e-45)).sum(-1)
    return kl, ent, torch.exp(s_logits - s_logits.amax(-1, keepdim=True)).log()


# =============================================================================== runner
# bench/modules5.py's runner (the same case records, comparison and categories) over this corpus's CASES.
if __name__ == "__main__":
    import modules5
    modules5.main(CASES, __file__, __doc__)
