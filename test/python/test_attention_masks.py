"""Constant attention masks (attention_masks.py): a mask built from constants that
masks nothing is dropped, the square causal mask becomes is_causal=True, and
everything else (masks read from inputs, masks changed in place, masks that
broadcast the result up, random masks) stays as it is. Results against eager."""
import operator
import warnings

import torch
import torch.fx as fx
import torch.nn.functional as F

import mlircap
from mlircap.attention_masks import simplify_attention_masks

L = 16


def _qkv(b=2, h=4, lq=L, lk=L, e=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, lq, e, generator=g), torch.randn(b, h, lk, e, generator=g),
            torch.randn(b, h, lk, e, generator=g))


def _sdpa_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "scaled_dot_product" in str(n.target)]


class _G:
    """Builds a graph as the capture layer records one: the mask's ops are nodes on
    constants (fx.symbolic_trace would fold them into one tensor attribute)."""

    def __init__(self):
        self.g = fx.Graph()
        self.q, self.k, self.v = (self.g.placeholder(n) for n in "qkv")

    def f(self, fn, *args, **kwargs):
        return self.g.call_function(fn, args, kwargs)

    def m(self, name, *args, **kwargs):
        return self.g.call_method(name, args, kwargs)

    def sdpa(self, mask, q=None, **kwargs):
        out = self.f(F.scaled_dot_product_attention, q or self.q, self.k, self.v, attn_mask=mask, **kwargs)
        self.g.output(out)
        return fx.GraphModule(torch.nn.Module(), self.g)


def _run_pass(gm, args):
    ref = gm(*args)
    n = simplify_attention_masks(gm, list(args))
    torch.testing.assert_close(gm(*args), ref, rtol=1e-5, atol=1e-5)
    (node,) = _sdpa_nodes(gm)
    a = dict(zip(("query", "key", "value", "attn_mask", "dropout_p", "is_causal"), node.args))
    a.update(node.kwargs)
    return n, a


def _idx(b, n=L):
    idx = b.f(torch.arange, n)
    return idx, b.f(operator.getitem, idx, (slice(None), None)), b.f(operator.getitem, idx, (None, slice(None)))


def all_true():
    b = _G()
    _, col, row = _idx(b)
    mask = b.f(operator.and_, b.f(operator.ge, col, 0), b.f(operator.lt, row, L))
    mask = b.m("expand", b.f(operator.getitem, mask, (None, None)), 2, 1, L, L)
    return b.sdpa(mask)


def causal_bool():
    b = _G()
    _, col, row = _idx(b)
    return b.sdpa(b.f(operator.le, row, col))


def causal_float():
    b = _G()
    return b.sdpa(b.m("triu", b.f(torch.full, (L, L), float("-inf")), 1))


def causal_finfo_min():   # transformers' float masks: finfo.min, not -inf
    b = _G()
    return b.sdpa(b.m("triu", b.f(torch.full, (L, L), torch.finfo(torch.float32).min), 1))


def zeros_float():
    b = _G()
    return b.sdpa(b.f(torch.zeros, 1, 1, L, L))


def test_all_true_mask_is_dropped():
    n, a = _run_pass(all_true(), _qkv())
    assert n == 1 and a.get("attn_mask") is None and not a.get("is_causal", False)


def test_zero_float_mask_is_dropped():
    n, a = _run_pass(zeros_float(), _qkv())
    assert n == 1 and a.get("attn_mask") is None


def test_causal_masks_become_is_causal():
    for build in (causal_bool, causal_float, causal_finfo_min):
        n, a = _run_pass(build(), _qkv())
        assert n == 1 and a.get("attn_mask") is None and a.get("is_causal") is True, build.__name__


def test_other_masks_stay():
    def padding():   # a constant mask that masks something and is not causal
        b = _G()
        idx, _, _ = _idx(b)
        return b.sdpa(b.m("expand", b.f(operator.getitem, b.f(operator.lt, idx, 12), (None, slice(None))), L, L))

    def band():      # causal minus a band: not the causal mask
        b = _G()
        _, col, row = _idx(b)
        near = b.f(operator.lt, b.f(operator.sub, col, row), 4)
        return b.sdpa(b.f(operator.and_, b.f(operator.le, row, col), near))

    def from_input():
        b = _G()
        return b.sdpa(b.f(operator.gt, b.f(operator.getitem, b.q, (Ellipsis, slice(None, 1))), -100))

    def random():
        b = _G()
        return b.sdpa(b.f(operator.ge, b.f(torch.rand, L, L), 0))

    def small_fill():   # -100 does not mask: exp(s - 100) is not 0
        b = _G()
        return b.sdpa(b.m("triu", b.f(torch.full, (L, L), -100.0), 1))

    for build in (padding, band, from_input, random, small_fill):
        n, a = _run_pass(build(), _qkv())
        assert n == 0 and a.get("attn_mask") is not None, build.__name__


def test_mask_changed_in_place_elsewhere_stays():
    b = _G()
    m = b.f(torch.ones, L, L, dtype=torch.bool)
    b.m("fill_diagonal_", m, False)       # result unused: changes m in place
    n, a = _run_pass(b.sdpa(m), _qkv())
    assert n == 0 and a.get("attn_mask") is not None


def test_mask_changed_through_a_view_stays():
    b = _G()
    m = b.f(torch.ones, L, L, dtype=torch.bool)
    row = b.f(operator.getitem, m, 0)
    b.f(operator.setitem, row, 3, False)   # m[0][3] = False, through the view
    n, a = _run_pass(b.sdpa(m), _qkv())
    assert n == 0 and a.get("attn_mask") is not None


def test_masks_sharing_constants_both_simplify():
    # Dynamo's graphs share one arange between a padding-free and a causal mask
    b = _G()
    _, col, row = _idx(b)
    causal = b.f(operator.le, row, col)
    first = b.f(F.scaled_dot_product_attention, b.q, b.k, b.v, attn_mask=causal)
    full = b.f(operator.and_, b.f(operator.ge, col, 0), b.f(operator.lt, row, L))
    second = b.f(F.scaled_dot_product_attention, b.q, b.k, b.v, attn_mask=full)
    b.g.output(b.f(operator.add, first, second))
    gm = fx.GraphModule(torch.nn.Module(), b.g)
    args = _qkv()
    ref = gm(*args)
    assert simplify_attention_masks(gm, list(args)) == 2
    torch.testing.assert_close(gm(*args), ref, rtol=1e-5, atol=1e-5)
    assert [n.kwargs.get("is_causal", False) for n in _sdpa_nodes(gm)] == [True, False]
    assert all(n.kwargs.get("attn_mask") is None for n in _sdpa_nodes(gm))


def test_mask_that_broadcasts_the_result_stays():
    # q, k, v of batch 1, the mask of batch 3: the math kernel's result would have
    # batch 3 (the CPU kernels reject it), so dropping the mask changes the shape
    b = _G()
    gm = b.sdpa(b.f(torch.ones, 3, 1, L, L, dtype=torch.bool))
    assert simplify_attention_masks(gm, list(_qkv(b=1))) == 0
    assert _sdpa_nodes(gm)[0].kwargs["attn_mask"] is not None


def test_causal_needs_square_scores():
    b = _G()
    n, a = _run_pass(b.sdpa(b.m("tril", b.f(torch.ones, L, L, dtype=torch.bool))), _qkv())
    assert n == 1 and a.get("is_causal") is True
    # the causal pattern of an 8x16 corner is not what is_causal means there
    b = _G()
    n, a = _run_pass(b.sdpa(b.m("tril", b.f(torch.ones, 8, L, dtype=torch.bool))), _qkv(lq=8))
    assert n == 0


def test_compiled_models_with_constant_masks_match_eager():
    """Through mlircap.compile (the capture layer's graph), over two calls with new inputs."""
    def model(x, w):
        q = k = v = (x @ w).view(2, L, 4, 8).transpose(1, 2)
        idx = torch.arange(x.shape[1], device=x.device)
        full = ((idx[:, None] >= 0) & (idx[None, :] < x.shape[1]))[None, None].expand(2, 1, L, L)
        causal = idx[None, :] <= idx[:, None]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return a + b

    fast = mlircap.compile(model)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(32, 32, generator=g)
    for _ in range(3):
        x = torch.randn(2, L, 32, generator=g)
        torch.testing.assert_close(fast(x, w), model(x, w), rtol=1e-4, atol=1e-4)


def test_dynamo_graphs_too():
    """torch.compile(backend="mlircap"): Dynamo's graph of the same model."""
    def model(q):
        idx = torch.arange(q.shape[-2])
        full = ((idx[:, None] >= 0) & (idx[None, :] < q.shape[-2]))[None, None].expand(q.shape[0], 1, L, L)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=full) + \
            F.scaled_dot_product_attention(q, q, q, attn_mask=idx[None, :] <= idx[:, None])

    torch._dynamo.reset()
    fast = torch.compile(model, backend="mlircap")
    for seed in range(2):
        q = _qkv(seed=seed)[0]
        torch.testing.assert_close(fast(q), model(q), rtol=1e-4, atol=1e-4)


def _hand_written(mask_kind):
    def model(x, w):
        q, k, v = (x @ w).view(2, L, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        s = q @ k.transpose(-2, -1) * 0.35
        idx = torch.arange(L)
        # BERT-style extended mask of no padding: (1 - ones) * finfo.min, all (-)0
        s = s + (1.0 - torch.ones(2, 1, 1, L, dtype=x.dtype)) * torch.finfo(x.dtype).min
        if mask_kind == "causal":
            s = s.masked_fill(~(idx[None, :] <= idx[:, None]), float("-inf"))
        elif mask_kind == "band":                             # not causal: stays a mask
            s = s.masked_fill((idx[:, None] - idx[None, :]).abs() > 3, float("-inf"))
        elif mask_kind == "gpt2":     # transformers' eager attention: + where(causal, 0, finfo.min)
            zero = torch.tensor(0.0, dtype=x.dtype)
            s = s + torch.where(idx[None, :] <= idx[:, None], zero, torch.finfo(x.dtype).min)
        elif mask_kind == "additive":  # a float causal mask tensor, -1e9 above the diagonal
            s = s + torch.full((L, L), -1e9, dtype=x.dtype).triu(1)
        elif mask_kind == "scaled":   # a fill scaled after it to -1e-2: masks nothing
            s = (s + torch.where(idx[None, :] <= idx[:, None], 0.0, -1e4).to(x.dtype)) * 1e-6
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(2, L, 32)
    return model


def test_hand_written_attention_constant_masks_fold(capfd, monkeypatch):
    """After aot_autograd (attention.fuse_attention): a constant all-zero additive mask
    is dropped and a constant causal masked_fill becomes is_causal; a constant band
    mask stays (only the zero mask beside it goes). Fused at any size
    (MLIRCAP_FUSE_ATTENTION=force; by default bf16 on the CPU only from 4M scores)."""
    from mlircap import logs

    monkeypatch.setenv("MLIRCAP_FUSE_ATTENTION", "force")

    g = torch.Generator().manual_seed(3)
    w = (torch.randn(32, 96, generator=g) / 6).bfloat16()
    logs.set_logs("passes")
    try:
        for kind, want in (("causal", "2 step(s), is_causal)"), ("none", "1 step(s))"), ("band", "1 step(s))"),
                           ("gpt2", "2 step(s), is_causal)"), ("additive", "2 step(s), is_causal)"),
                           ("scaled", "1 step(s))")):
            model = _hand_written(kind)
            fast = mlircap.compile(model)
            for _ in range(3):
                x = torch.randn(2, L, 32, generator=g).bfloat16()
                torch.testing.assert_close(fast(x, w), model(x, w), rtol=2e-2, atol=2e-2)
            err = capfd.readouterr().err
            assert "attention(s) fused" in err, (kind, err[-2000:])
            assert f"constant masks folded ({want}" in err, (kind, err[-2000:])
    finally:
        logs.set_logs()


def test_mask_shared_by_two_layers_is_erased_once():
    # one constant causal mask read by two layers' SDPA (transformers' Llama): its nodes,
    # reached once per layer, were erased twice, and torch's 'erase_node on an already
    # erased node' UserWarning made a program run under warnings-as-errors lose the
    # compiled graph (the backend failed; the graph ran without mlircap)
    b = _G()
    _, col, row = _idx(b)
    mask = b.m("expand", b.f(operator.getitem, b.f(operator.le, row, col), (None, None)), 2, 1, L, L)
    first = b.f(F.scaled_dot_product_attention, b.q, b.k, b.v, attn_mask=mask)
    b.g.output(b.f(F.scaled_dot_product_attention, first, b.k, b.v, attn_mask=mask))
    gm = fx.GraphModule(torch.nn.Module(), b.g)
    args = _qkv()
    ref = gm(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert simplify_attention_masks(gm, list(args)) == 2
    torch.testing.assert_close(gm(*args), ref, rtol=1e-5, atol=1e-5)
    assert all(n.kwargs.get("is_causal") and n.kwargs.get("attn_mask") is None for n in _sdpa_nodes(gm))
