"""bench/modules15.py's miscellaneous part (same runner, its CASES appended there): what Kaggle
notebooks and utility modules do around the model: integer / bool / bf16 / float16 tensors
(hash embeddings by modular arithmetic, bit-packed masks, bf16 weights with fp32 master copies,
int8 symmetric quantization with per-channel scales), in-place ops on views (diagonal, unfold
windows, transposed slices, index_put_ through a view of a buffer), masks and gathers with
computed indices (mask-RCNN-style RoI crops, scatter_reduce segment max, sparse CSR-free
neighbourhood aggregation), einsum programs (tensor-train layers, bilinear pooling, attention
with a 5-d einsum), control flow on shapes (batch-size-one special cases, even / odd lengths,
recursion on the size), 0-size dims (empty batches, no boxes, no kept tokens), non-contiguous
inputs (transposed, stepped, expanded), and ParameterList / ParameterDict / nested ModuleDict
modules.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from corpus_cases import I, R, U, registrars

CASES = []   # (name, factory, inputs, train, extra)
case, fn_case = registrars(CASES)


# ============================================================================ integers / bools / low precision
class HashEmbedding(nn.Module):
    """The hashing trick of CTR models: ids hashed by two multiply-mod hashes in int64 (products
    past 2**31), embeddings summed, a field-aware cross term by einsum, a bool mask of missing ids."""

    def __init__(self, buckets=17, d=4):
        super().__init__()
        self.buckets = buckets
        self.e1, self.e2 = nn.Embedding(buckets, d), nn.Embedding(buckets, d)

    def forward(self, ids):
        missing = ids < 0
        ids = ids.clamp(min=0)
        h1 = (ids * 2654435761) % self.buckets
        h2 = ((ids ^ 0x5BD1E995) * 40503 + 7) % self.buckets
        e = (self.e1(h1) + self.e2(h2)) * (~missing)[..., None]
        cross = torch.einsum("bfd,bgd->bfg", e, e).triu(1).sum((1, 2))
        return e.sum(1), cross, missing.sum(1)


case("hash_embedding_int64_mod_xor_missing_mask", lambda: (torch.tensor([[5, 2 ** 40, -1], [7, 123456789, 3]]),))(
    lambda: HashEmbedding())


@fn_case("bit_packed_bool_masks_uint8", lambda: (U(3, 16) > 0.5, I(0, 256, 3, 2, dtype=torch.uint8)))
def bitpack(mask, packed):
    """Bool masks packed into uint8 by weighted sums of bits and unpacked by shifts, popcount by a
    loop over bits, bitwise ops between the two."""
    weights = 2 ** torch.arange(8, dtype=torch.uint8)
    p = (mask.view(3, 2, 8).to(torch.uint8) * weights).sum(-1, dtype=torch.uint8)
    unpacked = ((packed[..., None] >> torch.arange(8, dtype=torch.uint8)) & 1).bool().flatten(1)
    both = p & packed
    pop = sum(((both >> k) & 1).to(torch.int32) for k in range(8))
    return p, unpacked, unpacked ^ mask, pop, (~packed).to(torch.int16) - 128


class MasterWeights(nn.Module):
    """bf16 model weights with fp32 master copies (the mixed-precision recipe before AMP): the
    forward in bf16, loss in fp32, gradients copied into the masters' .grad, an SGD step on the
    masters, the bf16 weights copied back."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)).to(torch.bfloat16)
        self.master = [p.detach().float().clone().requires_grad_() for p in self.net.parameters()]
        self.opt = torch.optim.SGD(self.master, lr=0.1, momentum=0.5)

    def forward(self, x, y):
        out = self.net(x.to(torch.bfloat16))
        loss = F.cross_entropy(out.float(), y)
        self.net.zero_grad()
        loss.backward()
        for m, p in zip(self.master, self.net.parameters()):
            m.grad = p.grad.float()
        self.opt.step()
        with torch.no_grad():
            for m, p in zip(self.master, self.net.parameters()):
                p.copy_(m)
        return loss.detach(), out


case("bf16_weights_fp32_master_copies_sgd", lambda: (R(5, 6), I(0, 2, 5)), train=True, ncalls=4)(
    lambda: MasterWeights())


class Int8Linear(nn.Module):
    """Per-output-channel symmetric int8 weight quantization done once (lazily on the first call,
    kept in buffers), activations quantized per token, int32 accumulation by matmul of int
    tensors cast to int32, dequantized with the outer product of scales."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 5)
        self.register_buffer("qw", torch.empty(0, dtype=torch.int8))
        self.register_buffer("sw", torch.empty(0))

    def forward(self, x):
        if self.qw.numel() == 0:
            self.sw = self.fc.weight.abs().amax(1) / 127
            self.qw = torch.round(self.fc.weight / self.sw[:, None]).clamp(-127, 127).to(torch.int8)
        sx = x.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 127
        qx = torch.round(x / sx).clamp(-127, 127).to(torch.int8)
        acc = qx.to(torch.int32) @ self.qw.to(torch.int32).t()
        return acc.float() * sx * self.sw + self.fc.bias, acc.dtype


case("int8_per_channel_lazy_buffers_int32_matmul", lambda: (R(3, 8),), ncalls=4)(lambda: Int8Linear())


@fn_case("float16_half_arith_overflow_and_nan_to_num", lambda: (R(4, 5, dtype=torch.float16) * 300,))
def half_overflow(x):
    """float16 values near the range: squares overflow to inf, nan_to_num with finfo bounds, a
    sum with dtype=torch.float32, softmax in half, isfinite masks."""
    sq = x * x
    fixed = torch.nan_to_num(sq, posinf=torch.finfo(torch.float16).max)
    s32 = sq.sum(-1, dtype=torch.float32)
    return sq.isinf().sum(), fixed, s32, (x / 300).softmax(-1), torch.isfinite(sq).all(-1)


# ============================================================================ in-place on views
@fn_case("inplace_diagonal_triu_view_writes", lambda: (R(4, 4), R(2, 5, 5)))
def diag_writes(a, b):
    """Writes through views: diagonal().add_, a transposed slice's mul_, triu of a batched matrix
    zeroed through masked_fill_ on a view, fill_diagonal_; the inputs written in place too."""
    a.diagonal().add_(10.0)
    a.t()[1:3].mul_(-1)
    c = b.clone()
    v = c[:, 1:, 1:]
    v.masked_fill_(torch.ones(4, 4, dtype=torch.bool).triu(1), 0.0)
    c[0].fill_diagonal_(7.0)
    b[:, ::2].sub_(1)
    return a, c, b.sum()


class RingBuffer(nn.Module):
    """A replay / memory bank buffer written through a view: index_put_ of a batch at a pointer
    that wraps (two slices when it wraps), the pointer a Python int attribute."""

    def __init__(self, n=7, d=3):
        super().__init__()
        self.register_buffer("bank", torch.zeros(n, d))
        self.ptr = 0

    def forward(self, x):
        n, b = self.bank.shape[0], x.shape[0]
        end = self.ptr + b
        if end <= n:
            self.bank[self.ptr:end] = x
        else:
            first = n - self.ptr
            self.bank[self.ptr:] = x[:first]
            self.bank[:end - n] = x[first:]
        self.ptr = end % n
        view = self.bank.view(-1)
        view[::5] += 0.5
        return self.bank.clone(), self.ptr


case("ring_buffer_wraps_two_slices_python_pointer", lambda: (R(3, 3),), ncalls=5)(lambda: RingBuffer())


@fn_case("unfold_windows_written_through_as_strided", lambda: (R(2, 10),))
def unfold_writes(x):
    """Overlap-add written by hand: frames by unfold, windowed, summed back with index_add_ on
    computed positions; an as_strided view of a clone written by add_."""
    frames = x.unfold(1, 4, 2) * torch.hann_window(4)
    idx = (torch.arange(frames.shape[1])[:, None] * 2 + torch.arange(4)[None]).flatten()
    out = torch.zeros(2, x.shape[1]).index_add_(1, idx, frames.flatten(1))
    y = x.clone()
    s = y.as_strided((2, 3), (10, 3), 1)
    s.add_(100.0)
    return out, y


# ============================================================================ masks / gathers
@fn_case("roi_crop_by_computed_indices_and_masks",
         lambda: (R(2, 3, 8, 8), torch.tensor([[0, 1, 1, 5, 6], [1, 2, 0, 7, 3], [0, 0, 0, 2, 2]], dtype=torch.float)))
def roi_crop(feat, rois):
    """Mask R-CNN's crop of per-RoI targets without roi_align: integer box corners from float
    rois, a loop over RoIs slicing the feature map by .int() Python values, resized to 4x4 by
    interpolate, stacked; an area mask."""
    crops = []
    for r in rois:
        b, x0, y0, x1, y1 = [int(v) for v in r]
        crop = feat[b, :, y0:y1 + 1, x0:x1 + 1]
        crops.append(F.interpolate(crop[None], size=(4, 4), mode="bilinear", align_corners=False)[0])
    areas = (rois[:, 3] - rois[:, 1] + 1) * (rois[:, 4] - rois[:, 2] + 1)
    return torch.stack(crops), areas > 4


@fn_case("scatter_reduce_segment_max_graph_pool", lambda: (R(9, 4), torch.tensor([0, 0, 1, 2, 2, 2, 1, 3, 3])))
def segment_pool(x, batch):
    """torch_geometric's global max / mean / add pools by scatter_reduce with include_self False,
    the number of graphs from batch.max().item() + 1, counts by bincount."""
    n = int(batch.max().item()) + 1
    idx = batch[:, None].expand_as(x)
    mx = torch.zeros(n, x.shape[1]).scatter_reduce(0, idx, x, "amax", include_self=False)
    sm = torch.zeros(n, x.shape[1]).index_add_(0, batch, x)
    cnt = torch.bincount(batch, minlength=n).clamp(min=1)
    return mx, sm / cnt[:, None], torch.zeros(n, x.shape[1]).scatter_reduce(0, idx, x, "prod")


class GraphSAGE(nn.Module):
    """A GraphSAGE layer from an edge_index: messages gathered by source, mean-aggregated at the
    target with index_add_ and degree clamp, concatenated with self features, L2-normalised;
    two layers with dropout in train mode; a 0-edge graph on call 3."""

    def __init__(self, d=4):
        super().__init__()
        self.l1, self.l2 = nn.Linear(2 * d, 8), nn.Linear(16, 3)

    @staticmethod
    def agg(x, ei):
        out = torch.zeros_like(x).index_add_(0, ei[1], x[ei[0]])
        deg = torch.zeros(x.shape[0]).index_add_(0, ei[1], torch.ones(ei.shape[1])).clamp(min=1)
        return out / deg[:, None]

    def forward(self, x, ei):
        h = F.normalize(self.l1(torch.cat([x, self.agg(x, ei)], 1)), dim=-1)
        h = F.dropout(F.relu(h), 0.3, self.training)
        return self.l2(torch.cat([h, self.agg(h, ei)], 1)).log_softmax(-1)


def _graph(i=0):
    e = 0 if i == 3 else 10
    return R(6, 4), I(0, 6, 2, e)


case("graphsage_edge_index_mean_agg_zero_edges", _graph, train=True, ncalls=4)(lambda: GraphSAGE())


# ============================================================================ einsum programs
class TTLinear(nn.Module):
    """A tensor-train linear layer: the input reshaped to (b, 2, 3, 2), contracted with three
    cores by successive einsums, the output flattened."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Parameter(torch.randn(1, 2, 2, 3) * 0.5)
        self.c2 = nn.Parameter(torch.randn(3, 3, 2, 3) * 0.5)
        self.c3 = nn.Parameter(torch.randn(3, 2, 3, 1) * 0.5)

    def forward(self, x):
        t = x.reshape(-1, 2, 3, 2)
        t = torch.einsum("bijk,riaq->bjkaq", t, self.c1)
        t = torch.einsum("bjkaq,qjcs->bkacs", t, self.c2)
        t = torch.einsum("bkacs,skdr->bacdr", t, self.c3)
        return t.flatten(1)


case("tensor_train_layer_chained_einsums", lambda: (R(3, 12),), train=True)(lambda: TTLinear())


@fn_case("bilinear_pooling_signed_sqrt_einsum", lambda: (R(2, 4, 3, 3), R(2, 5, 3, 3)))
def bilinear_pool(a, b):
    """Bilinear CNN pooling: outer products of two feature maps summed over positions by einsum,
    signed square root, L2 normalisation; a 5-index attention einsum beside."""
    n = a.shape[2] * a.shape[3]
    phi = torch.einsum("bihw,bjhw->bij", a, b) / n
    z = torch.sign(phi) * torch.sqrt(phi.abs() + 1e-10)
    z = F.normalize(z.flatten(1), dim=1)
    att = torch.einsum("bchw,bcxy->bhwxy", a, a).flatten(3).softmax(-1)
    return z, torch.einsum("bhwn,bcn->bchw", att, a.flatten(2))


# ============================================================================ control flow on shapes
class ShapeBranches(nn.Module):
    """Branches on shapes as library code writes them: batch size one squeezed and special-cased
    (BatchNorm cannot train on one sample), an odd length padded to even before a stride-2 conv,
    a sequence longer than the max split into chunks processed in a loop and concatenated."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.conv = nn.Conv1d(4, 4, 2, stride=2)
        self.max_len = 6

    def forward(self, x):
        if x.shape[0] == 1:
            h = F.layer_norm(x, x.shape[1:])
        else:
            h = self.bn(x)
        if h.shape[-1] % 2:
            h = F.pad(h, (0, 1))
        if h.shape[-1] > self.max_len:
            h = torch.cat([self.conv(c) for c in h.split(self.max_len, -1)], -1)
        else:
            h = self.conv(h)
        return h, tuple(h.shape)


case("shape_branches_batch_one_odd_length_chunks",
     lambda i=0: (R(*[(3, 4, 5), (3, 4, 5), (1, 4, 9), (2, 4, 14)][i]),), train=True, ncalls=4)(
    lambda: ShapeBranches())


class SizeRecursion(nn.Module):
    """A multi-scale pyramid by recursion on the spatial size: pool by 2 until the side is below 4,
    each level convolved with the same conv, upsampled back and summed."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def pyramid(self, x):
        y = torch.relu(self.conv(x))
        if min(x.shape[-2:]) < 4:
            return y
        low = self.pyramid(F.avg_pool2d(x, 2))
        return y + F.interpolate(low, size=x.shape[-2:], mode="nearest")

    def forward(self, x):
        return self.pyramid(x)


case("pyramid_recursion_on_spatial_size", lambda i=0: (R(1, 2, 8 + 4 * i, 10),))(lambda: SizeRecursion())


# ============================================================================ 0-size dims
class Detections(NamedTuple):
    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor


class PostProcess(nn.Module):
    """A detector's postprocess: scores above a threshold (none on some calls), boxes clipped to
    the image, per-class offsets for batched NMS by a max coordinate, a NamedTuple of possibly
    empty tensors, the top-k capped by min(k, n)."""

    def __init__(self, thr=0.5):
        super().__init__()
        self.thr = thr

    def forward(self, boxes, logits, size):
        scores, labels = logits.sigmoid().max(-1)
        keep = scores > self.thr
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        boxes = torch.stack([boxes[:, 0].clamp(0, size[1]), boxes[:, 1].clamp(0, size[0]),
                             boxes[:, 2].clamp(0, size[1]), boxes[:, 3].clamp(0, size[0])], -1)
        offs = labels.to(boxes) * (boxes.max() + 1 if boxes.numel() else 0)
        k = min(3, scores.numel())
        top = scores.topk(k).indices
        return Detections(boxes[top] + offs[top, None], scores[top], labels[top])


def _post_in(i=0):
    logits = R(6, 3) + (2.0 if i != 2 else -20.0)
    return U(6, 4) * 20, logits, (12, 16)


case("detector_postprocess_empty_after_threshold_namedtuple", _post_in, ncalls=4)(lambda: PostProcess())


@fn_case("zero_size_batch_and_feature_dims",
         lambda i=0: (R(0 if i == 1 else 3, 4), R(2, 0), I(0, 4, 0), R(3, 4)))
def zero_sizes(x, empty_feat, empty_idx, y):
    """Empty batches through linear / softmax / mean (NaN), an empty feature dim through cat and
    norm, an empty index through index_select and bincount, max over an empty dim avoided by a
    numel check."""
    w = torch.ones(4, 2)
    h = (x @ w).softmax(-1)
    m = x.mean(0) if x.shape[0] else torch.zeros(4)
    cat = torch.cat([empty_feat, torch.ones(2, 1)], 1)
    sel = y.index_select(0, empty_idx)
    return h, m, cat, empty_feat.norm(dim=1), sel.shape, torch.bincount(empty_idx, minlength=3), x.sum(0)


# ============================================================================ non-contiguous inputs
class StridedInputs(nn.Module):
    """A model fed non-contiguous inputs: a transposed (channels, time) audio batch, a stepped slice
    of a larger tensor, an expanded bias; .view where legal, .reshape where not, an in-place add on
    a contiguous() copy."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)
        self.conv = nn.Conv1d(5, 3, 3)

    def forward(self, audio_tc, stepped, bias):
        a = self.conv(audio_tc.transpose(0, 1)[None]).squeeze(0)
        s = self.fc(stepped).reshape(-1)
        c = stepped.contiguous()
        c.add_(bias)
        return a, s, c.view(-1), bias.stride()


case("noncontiguous_transposed_stepped_expanded_inputs",
     lambda: (R(7, 5), R(6, 10)[:, ::2], R(5).expand(6, 5))
     )(lambda: StridedInputs())


# ============================================================================ containers
class ParamContainers(nn.Module):
    """ParameterList of per-layer scales appended in __init__, a ParameterDict of per-task biases
    selected by a string argument, a ModuleDict of ModuleDicts (task -> head kind), a Python loop
    zipping ParameterList with a ModuleList."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.scales = nn.ParameterList()
        for i in range(3):
            self.scales.append(nn.Parameter(torch.full((4,), 1.0 / (i + 1))))
        self.task_bias = nn.ParameterDict({"cls": nn.Parameter(torch.zeros(4)), "reg": nn.Parameter(torch.ones(4))})
        self.heads = nn.ModuleDict({t: nn.ModuleDict({"lin": nn.Linear(4, 2), "act": nn.Tanh()}) for t in ("cls", "reg")})

    def forward(self, x, task: str):
        for layer, s in zip(self.layers, self.scales):
            x = x + s * F.silu(layer(x))
        x = x + self.task_bias[task]
        head = self.heads[task]
        return head["act"](head["lin"](x)), len(self.scales)


case("parameterlist_parameterdict_nested_moduledict_task_arg",
     lambda i=0: (R(3, 4), ["cls", "cls", "reg", "cls"][i]), train=True, ncalls=4)(lambda: ParamContainers())
