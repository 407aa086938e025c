"""Whole functions that ran eagerly (nothing compiled) where capture can keep graphs, session 27.

A tensor an op saved for backward, written in place later in the same graph: a detection head
clipping its decoded boxes in place (`boxes[..., 0::2] = boxes[..., 0::2].clamp(0, w)`, bench/
modules11.py det_retina_head_anchor_decode_clip: clamp saved a view of `boxes`), a VQ-VAE's EMA
update writing the codebook a matmul saved (vq_ema_codebook_straight_through_perplexity).
Eager's backward through such an op raises; aot_autograd raised the same while tracing the
graph, which then ran as captured, no part compiled. saved_writes.split_saved_writes runs the
saving ops, the views they save and the writes through torch and compiles the rest.

Each test checks outputs, gradients (and eager's error where eager raises), module state and
the inputs against eager over several calls with new values, and that a graph compiled."""
import copy

import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap import saved_writes


class _ClipBoxes(nn.Module):
    """Boxes decoded, clipped in place through strided views (clamp saves its input view)."""

    def __init__(self):
        super().__init__()
        self.box = nn.Linear(6, 4)
        self.cls = nn.Linear(6, 3)

    def forward(self, x):
        w = x.shape[0] * 0.5   # (a number of the shape, as an image's width: a constant of the graph)
        d = self.box(x)
        boxes = torch.stack([d[:, 0] - d[:, 2].exp(), d[:, 1] - d[:, 3].exp(),
                             d[:, 0] + d[:, 2].exp(), d[:, 1] + d[:, 3].exp()], -1)
        boxes[..., 0::2] = boxes[..., 0::2].clamp(0, w)
        boxes[..., 1::2] = boxes[..., 1::2].clamp(0, w / 2)
        return boxes, self.cls(x).sigmoid() * 2


class _EmaCodebook(nn.Module):
    """Nearest code by a matmul with the codebook (mm saves codebook.t()), then an EMA update
    of the codebook under no_grad in the same forward."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 4)
        self.register_buffer("embed", torch.randn(6, 4))
        self.register_buffer("size", torch.ones(6))

    def forward(self, x):
        z = self.proj(x)
        dist = z.pow(2).sum(1, keepdim=True) - 2 * z @ self.embed.t() + self.embed.pow(2).sum(1)[None]
        ind = dist.argmin(1)
        zq = torch.nn.functional.embedding(ind, self.embed)
        if self.training:
            onehot = torch.nn.functional.one_hot(ind, 6).to(z.dtype)
            with torch.no_grad():
                self.size.mul_(0.9).add_(onehot.sum(0), alpha=0.1)
                self.embed.mul_(0.9).add_(onehot.t() @ z / self.size[:, None], alpha=0.1)
        commit = (zq - z).pow(2).mean()
        return z + (zq - z).detach(), commit, dist


def _grads(m):
    return [None if p.grad is None else p.grad.clone() for p in m.parameters()]


def _run(model, calls, losses):
    """Outputs, then for each loss (a function of the outputs) the gradients or the error."""
    out = []
    for args in calls:
        res = model(*args)
        got = [res]
        for loss in losses:
            model.zero_grad(set_to_none=True)
            res = model(*args)
            try:
                loss(res).backward()
                got.append(_grads(model))
            except RuntimeError as e:
                assert "modified by an inplace operation" in str(e), e
                got.append("inplace error")
        got.append({k: v.clone() for k, v in model.state_dict().items()})
        got.append([a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        out.append(got)
    return out


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b, (a, b)


def _check(make, calls, losses):
    torch.manual_seed(0)
    m = make()
    ref = copy.deepcopy(m)
    want = _run(ref, calls, losses)
    fast = mlircap.compile(m)
    got = _run(fast, calls, losses)
    _same(want, got)
    return fast


def _compiled(fast):
    return [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]


_BOX_CALLS = [(torch.randn(5, 6),), (torch.randn(5, 6),), (torch.randn(7, 6) * 2,)]
_BOX_LOSSES = [lambda r: r[1].sum(), lambda r: r[0].sum() + r[1].sum()]   # the second raises, as eager


def test_boxes_clipped_in_place_compile_around_the_clip():
    fast = _check(_ClipBoxes, _BOX_CALLS, _BOX_LOSSES)
    assert _compiled(fast), "no graph compiled"


def test_boxes_clipped_in_place_no_grad():
    with torch.no_grad():
        fast = _check(_ClipBoxes, _BOX_CALLS, [])
    assert _compiled(fast)


_EMA_CALLS = [(torch.randn(8, 5),), (torch.randn(8, 5),), (torch.randn(8, 5) + 1,), (torch.randn(8, 5),)]
# commit's and z's gradients do not go through the saved codebook; dist's does (eager raises)
_EMA_LOSSES = [lambda r: r[0].sum() + r[1], lambda r: r[2].sum()]


def test_ema_codebook_update_compile_around_the_write():
    fast = _check(_EmaCodebook, _EMA_CALLS, _EMA_LOSSES)
    assert _compiled(fast), "no graph compiled"


def test_ema_codebook_eval_unchanged():
    def make():
        return _EmaCodebook().eval()
    fast = _check(make, _EMA_CALLS, _EMA_LOSSES[:1])
    assert _compiled(fast)


class _ClippedReused(nn.Module):
    """The clipped values used again after the write, beside an output that does not depend on
    them: a backward from that output alone must not reach the clamp (eager's does not)."""

    def __init__(self):
        super().__init__()
        self.box = nn.Linear(6, 4)
        self.cls = nn.Linear(6, 3)

    def forward(self, x):
        b = torch.stack([self.box(x)[:, 0], self.box(x)[:, 1]], -1) * 2
        c = b[..., 0::2].clamp(0, 1)
        b[..., 0::2] = c
        return b, c * 3 + 1, self.cls(x).sigmoid(), b.sum(1)


def test_clipped_values_used_again_backward_from_another_output():
    losses = [lambda r: r[2].sum(), lambda r: r[1].sum(), lambda r: r[3].sum() + r[2].sum()]
    fast = _check(_ClippedReused, _BOX_CALLS, losses)
    assert _compiled(fast)


class _ClipToArgument(nn.Module):
    """Clipped to a float argument (a graph input: clamp to a tensor bound is data-dependent for
    aot_autograd, so ddsplit ran each clamp through torch and compiled the rest): the second write
    landed in the compiled part that also computed the class scores, one autograd node, and a
    backward from the scores alone called the second clamp's node, which raised (its saved view
    written) where eager's backward never reaches the clamp."""

    def __init__(self):
        super().__init__()
        self.box = nn.Linear(6, 4)
        self.cls = nn.Linear(6, 3)

    def forward(self, x, w: float):
        b = torch.stack([self.box(x)[:, 0], self.box(x)[:, 1]], -1) * 2
        b[..., 0::2] = b[..., 0::2].clamp(0, w)
        b[..., 1::2] = b[..., 1::2].clamp(0, w / 2)
        return b, self.cls(x).sigmoid()


_ARG_CALLS = [(torch.randn(5, 6), 3.0), (torch.randn(5, 6), 3.0), (torch.randn(5, 6), 2.0)]


def test_clip_to_argument_backward_from_scores_as_eager():
    _check(_ClipToArgument, _ARG_CALLS, [lambda r: r[1].sum(), lambda r: r[0].sum()])


def test_clip_to_argument_wrong_without_the_check(monkeypatch):
    """The test above sees ddsplit's check: without it the scores' backward raised."""
    monkeypatch.setattr(saved_writes, "island_input_written", lambda *a: None)
    with pytest.raises(AssertionError):
        _check(_ClipToArgument, _ARG_CALLS, [lambda r: r[1].sum()])


def test_without_the_split_nothing_compiles(monkeypatch):
    """The tests above see the split: without it the whole graph runs as captured."""
    monkeypatch.setattr(saved_writes, "split_saved_writes", lambda *a: None)
    with pytest.warns(RuntimeWarning, match="backend failed to compile"):
        fast = _check(_ClipBoxes, _BOX_CALLS[:2], _BOX_LOSSES)
    assert not _compiled(fast)


def test_stale_saves_finds_saver_view_and_writer():
    """The nodes run through torch: the clamp, the view it saved, the write; not the rest."""
    def f(x):
        b = torch.stack([x * 2, x + 1], -1)
        b[..., 0].copy_(b[..., 0].clamp(0, 1))
        return b, x.sin()
    gm = torch.fx.symbolic_trace(f)
    nodes = saved_writes.stale_saves(gm, [torch.randn(3, requires_grad=True)])
    names = sorted(str(n.target) if n.op == "call_method" else getattr(n.target, "__name__", "") for n in nodes)
    assert names == ["clamp", "copy_", "getitem", "getitem"], names
    assert saved_writes.stale_saves(gm, [torch.randn(3)]) == set()   # nothing saved without grad
