"""Held-out set 12 (bench/heldout12.py): transformers architectures and torch.nn modules no earlier set
builds, compared with eager; fixes of what it found."""
import warnings

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import mlircap
from mlircap import ddsplit


def _count_tensor_signatures(monkeypatch):
    calls = []
    orig = ddsplit._signature

    def counting(v):
        if isinstance(v, torch.Tensor):
            calls.append(1)
        return orig(v)
    monkeypatch.setattr(ddsplit, "_signature", counting)
    return calls


def _part():
    """a _Specialized part of (a, b, k) whose compiled variants say which one ran."""
    def f(a, b, k):
        return a * k + b

    compiled = []

    def compile_fn(gm, examples):
        tag = len(compiled)
        compiled.append([(tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad) for t in examples])
        return lambda *xs: (tag, gm.forward(*xs))
    return ddsplit._Specialized(fx.symbolic_trace(f), compile_fn, strict=True), compiled


def test_specialized_part_checks_its_last_signature_in_one_call(monkeypatch):
    """The part after a data-dependent op took _signature of every input on every call (~2.6 us a tensor):
    bench/heldout12.py packed_lstm_gru passes 73 tensors to such parts (both RNN stacks' weights), 0.19 ms
    a call against eager's 1.4 ms (0.71x eager). The signature last hit is now checked by one TensorMetas /
    TensorGuards call, storage offsets and non-tensor inputs compared on their own."""
    part, compiled = _part()
    calls = _count_tensor_signatures(monkeypatch)
    w = [torch.randn(4, 3) for _ in range(2)]
    assert part(w[0], w[1], 2)[0] == 0
    first = len(calls)
    for _ in range(5):
        tag, out = part(w[0], w[1], 2)
        assert tag == 0
        torch.testing.assert_close(out, w[0] * 2 + w[1], rtol=0, atol=0)
    assert len(calls) == first, "repeated calls of one signature took _signature of their tensors"
    assert len(compiled) == 1


def test_specialized_part_fast_check_never_takes_another_signatures_variant():
    """What the one-call check leaves out (the storage offset, the non-tensor inputs) and what it states
    (sizes, strides, dtype, requires_grad) each pick their own variant, as the signature did."""
    part, compiled = _part()
    base = torch.randn(5, 3)
    a, b = base[:4], torch.randn(4, 3)
    shifted = base[1:]                         # same sizes and strides, storage offset 3
    cases = [((a, b, 2), 0), ((shifted, b, 2), 1), ((a, b, 3), 2), ((a.t().contiguous().t(), b, 2), 3),
             ((a.double(), b, 2), 4), ((a.clone().requires_grad_(), b, 2), 5), ((a[:2], b[:2], 2), 6)]
    for args, tag in cases + cases[::-1] + cases:
        got_tag, out = part(*args)
        assert got_tag == tag, (tag, compiled[got_tag])
        torch.testing.assert_close(out, args[0] * args[2] + args[1], rtol=0, atol=0)
    assert len(compiled) == len(cases)


@pytest.mark.parametrize("ext", [True, False])
def test_fast_key_turns_nested_tensors_down(monkeypatch, ext):
    """nn.TransformerEncoder's fast path hands a split part nested tensors (_split_nested takes them):
    the one-call check says no to one, by TensorMetas, or without the extension by a scan before
    TensorGuards (whose check aborts the process reading a nested tensor's strides)."""
    from mlircap.capture import _tensor_ext

    if not ext:
        monkeypatch.setattr(_tensor_ext, "load", lambda block=False: None)
    elif _tensor_ext.load(block=True) is None:
        pytest.skip(f"no tensor-meta extension here: {_tensor_ext.error()}")
    x = torch.randn(2, 3)
    key = ddsplit._FastKey((x, 4), (None, [0]))
    assert key.match((torch.randn(2, 3), 4))
    assert not key.match((torch.randn(2, 3), 5))
    assert not key.match((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.randn(3), torch.randn(2)])
    assert not key.match((nested, 4))


def _packed_program():
    torch.manual_seed(0)
    emb = nn.Embedding(50, 8, padding_idx=0)
    lstm = nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True)
    gru = nn.GRU(24, 8, batch_first=True)
    head = nn.Linear(8, 3)

    def classify(ids, lengths):
        with torch.no_grad():
            packed = pack_padded_sequence(emb(ids), lengths, batch_first=True, enforce_sorted=False)
            out, (h, c) = lstm(packed)
            out2, hg = gru(out)
            seq, lens = pad_packed_sequence(out2, batch_first=True, total_length=ids.shape[1])
        return head(hg[-1]).softmax(-1), seq, lens, h, c
    return classify


def test_packed_rnn_stacks_steady_calls_take_no_signatures(monkeypatch):
    """bench/heldout12.py packed_lstm_gru: results as eager's over changing lengths, and a repeated call
    takes no per-tensor signature in the split parts."""
    f = _packed_program()
    fast = mlircap.compile(f)
    g = torch.Generator().manual_seed(3)
    batches = []
    for i in range(3):
        lengths = torch.tensor([7, 3 + i, 5, 2])
        ids = torch.randint(1, 50, (4, 7), generator=g) * (torch.arange(7) < lengths[:, None])
        batches.append((ids, lengths))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in batches + batches:
            for r, c in zip(f(*args), fast(*args)):
                torch.testing.assert_close(c, r, rtol=1e-5, atol=1e-6)
        calls = _count_tensor_signatures(monkeypatch)
        for r, c in zip(f(*batches[-1]), fast(*batches[-1])):
            torch.testing.assert_close(c, r, rtol=1e-5, atol=1e-6)
    assert not calls, len(calls)


class _Act(nn.Module):
    """transformers.activations' classes: a module with no state made by ACT2FN[name] at each use."""

    def forward(self, x):
        return torch.nn.functional.silu(x)


class _AttnThenMadeModule(nn.Module):
    def __init__(self, kind, p):
        super().__init__()
        self.qkv, self.o = nn.Linear(16, 48), nn.Linear(16, 16)
        self.kind, self.p = kind, p

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
        if self.kind == "sdpa":
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
        else:
            a = torch.nn.functional.dropout(q @ k.transpose(-1, -2), self.p, training=self.training) @ v
        h = self.o(a.transpose(1, 2).reshape(2, 5, 16))
        if self.training:   # a module made by the call that draws (its init) after the graph's dropout
            return nn.Linear(16, 16)(h)
        return self.o(_Act()(h))


@pytest.mark.parametrize("kind", ["sdpa", "dropout"])
def test_inference_attention_or_dropout_is_no_draw_and_a_made_module_keeps_the_graph_whole(kind):
    """bench/heldout12.py falcon_h1_mamba2: transformers' ACT2FN[name](x) makes an activation module in
    the call after the layer's attention; a module made by the call runs before the open graph unless
    that graph draws from torch's RNG, and scaled_dot_product_attention (aten tags it
    nondeterministic_seeded) counted as a draw with dropout_p=0, as F.dropout(training=False) did: the
    graph split there (2 graphs, 1 break). Now they are no draws: one graph, results as eager's."""
    m = _AttnThenMadeModule(kind, 0.0 if kind == "sdpa" else 0.3).eval()
    fast = mlircap.compile(m)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-6)
    ex = fast.explain()
    assert ex.break_count == 0 and len(fast.graphs) == 1, [r for r, _ in ex.breaks]


@pytest.mark.parametrize("kind", ["sdpa", "dropout"])
def test_training_dropout_still_draws_before_a_made_module_that_draws(kind):
    """The other side: with dropout in training the graph draws, so a module made after it (nn.Linear's
    init draws too) is not moved before it: values and the RNG's state after each call as eager's."""
    torch.manual_seed(0)
    m = _AttnThenMadeModule(kind, 0.4).train()
    fast = mlircap.compile(m)
    x = torch.randn(2, 5, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            torch.manual_seed(10 + i)
            ref = m(x)
            ref_state = torch.get_rng_state()
            torch.manual_seed(10 + i)
            got = fast(x)
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
            assert torch.equal(torch.get_rng_state(), ref_state), i


def test_module_made_after_a_checked_tensor_branch_is_traced_not_split():
    """bench/heldout12.py fsmt_translate: with eval attention no longer a draw, the open graph before
    FSMT's `CrossEntropyLoss()(logits, labels)` counted as one a constructor could run before, but a
    data check of that graph (asserts.py's spec_checks: here `if torch.isnan(x).any(): raise`) keeps
    graph_steps from moving calls before it, and the replayed constructor split the graph (a break
    'module CrossEntropyLoss made by the call'). module_factories._hoistable now states all of
    _hoisted_step's conditions: the module, which holds no tensors, is traced: no break."""
    lin = nn.Linear(8, 5)

    def loss_of(x, y):
        h = torch.nn.functional.scaled_dot_product_attention(x, x, x)
        if torch.isnan(h).any():
            raise FloatingPointError("nan")
        return nn.CrossEntropyLoss()(lin(h).flatten(0, 1), y)

    fast = mlircap.compile(loss_of)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(3):
            x, y = torch.randn(2, 4, 8, generator=g), torch.randint(0, 5, (8,), generator=g)
            torch.testing.assert_close(fast(x, y), loss_of(x, y), rtol=1e-5, atol=1e-6)
    ex = fast.explain()
    assert ex.break_count == 0, [r for r, _ in ex.breaks]
