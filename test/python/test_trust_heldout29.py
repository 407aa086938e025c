"""Held-out set 13 (bench/heldout13.py): transformers architectures and torch.nn modules no earlier set
builds, compared with eager; fixes of what it found."""
import pytest
import torch

import mlircap
from mlircap import bounds, logs


def _reruns(monkeypatch):
    """the 'fallback' log's messages of calls rerun eagerly after a bounds check's flag (bounds.py)."""
    seen = []
    orig = logs.log

    def log(area, msg):
        if "rerun eagerly" in msg and "bounds check" in msg:
            seen.append(msg)
        return orig(area, msg)
    monkeypatch.setattr(logs, "log", log)
    return seen


def _route(x, w):
    # a MoE router as transformers writes it: bfloat16 logits (which tie), their top-k and softmax,
    # then the tokens' mixture of the chosen experts
    logits = (x @ w).float()
    top, idx = logits.topk(2, dim=-1)
    gates = top.softmax(-1)
    return (gates.unsqueeze(-1) * x[:, None, :].expand(-1, 2, -1)).sum(1) * idx.sum(-1, keepdim=True), idx, gates


def test_topk_ties_compile_without_the_check_after_reruns(monkeypatch):
    """granitemoe bf16 (bench/heldout13.py): the top-k of bfloat16 router logits ties on every call, so
    its tie flag (selection.py) reran the whole graph eagerly after the compiled call each time: 0.81x
    eager. After bounds.MAX_RERUNS such calls the graph compiles without the check (topk through torch):
    results still eager's, no more reruns."""
    seen = _reruns(monkeypatch)
    w = torch.randn(16, 4).to(torch.bfloat16)
    w[:, 2] = w[:, 0]   # two experts alike (as duplicated or untrained ones): their logits tie on every token
    fast = mlircap.compile(_route)
    for i in range(7):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(12, 16, generator=g).to(torch.bfloat16)
        want = _route(x, w)
        got = fast(x, w)
        assert torch.equal(want[1], got[1]), i            # the experts chosen: eager's, ties included
        for a, b in (want[0], got[0]), (want[2], got[2]):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert 1 <= len(seen) <= bounds.MAX_RERUNS


def test_index_out_of_range_still_raises_after_reruns(monkeypatch):
    """an index out of range is no tie: its graph keeps its checks (and reruns) whatever the number of
    calls, and raises IndexError on every call, as eager's."""
    seen = _reruns(monkeypatch)
    emb = torch.nn.Embedding(10, 4)

    def f(ids):
        return (emb(ids) * 2).sum(1)

    fast = mlircap.compile(f)
    good = torch.tensor([[1, 2], [3, 4]])
    assert torch.equal(fast(good), f(good))
    for _ in range(bounds.MAX_RERUNS + 2):
        with pytest.raises(IndexError):
            fast(torch.tensor([[1, 2], [3, 12]]))
    assert torch.equal(fast(good), f(good))
    assert len(seen) == bounds.MAX_RERUNS + 2
