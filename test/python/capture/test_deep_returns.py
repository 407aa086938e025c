"""Values a compiled function returns are rebuilt by replay code up to capture/values._MAX_DEPTH
levels (an object and its __dict__ count two). transformers' encoder-decoder models return their
cache four objects down (Seq2SeqModelOutput -> EncoderDecoderCache -> DynamicCache -> layers ->
DynamicLayer -> tensors): at a limit of 8 levels, calling BartModel / T5Model directly ran the
whole forward eagerly ('value too deep')."""
import warnings

import pytest
import torch

import mlircap


class Node:
    def __init__(self, t, child=None):
        self.t, self.child = t, child


def chain(x):
    n = None
    for i in range(6):   # six objects deep: 12 levels with their __dict__s
        n = Node(x * (i + 1), n)
    return {"out": [n]}


def _walk(n):
    vals = []
    while n is not None:
        vals.append(n.t)
        n = n.child
    return vals


def test_object_chain_six_deep_is_compiled():
    fast = mlircap.compile(chain)
    for _ in range(3):
        x = torch.randn(4)
        got, want = fast(x), chain(x)
        assert [type(n) for n in got["out"]] == [Node]
        for a, b in zip(_walk(got["out"][0]), _walk(want["out"][0]), strict=True):
            torch.testing.assert_close(a, b)
    ex = fast.explain()
    assert ex.graph_count == 1 and not ex.eager_reasons, str(ex)[:500]


def cyclic(x):
    n = Node(x + 1)
    n.child = n   # a cycle: rebuilt up to the limit, then the call runs eagerly, as eager returns it
    return n


def test_cyclic_return_stays_correct():
    fast = mlircap.compile(cyclic)
    for _ in range(3):
        x = torch.randn(3)
        got = fast(x)
        assert got.child is got
        torch.testing.assert_close(got.t, x + 1)


def test_encoder_decoder_model_called_directly_is_compiled():
    transformers = pytest.importorskip("transformers")
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    cfg = transformers.BartConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100)
    m = transformers.BartModel(cfg).eval()
    fast = mlircap.compile(m)
    ids = torch.randint(0, 100, (2, 6))
    with torch.no_grad():
        for _ in range(3):
            got, want = fast(input_ids=ids), m(input_ids=ids)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
            a, b = got.past_key_values.self_attention_cache, want.past_key_values.self_attention_cache
            assert type(a) is type(b) and len(a.layers) == len(b.layers)
            for la, lb in zip(a.layers, b.layers):
                torch.testing.assert_close(la.keys, lb.keys)
                torch.testing.assert_close(la.values, lb.values)
        # the returned cache works: one more decoder step with it, as eager's
        nxt = torch.randint(0, 100, (2, 1))
        step = dict(input_ids=ids, decoder_input_ids=nxt)
        got = fast(**step, past_key_values=got.past_key_values, encoder_outputs=(got.encoder_last_hidden_state,))
        want = m(**step, past_key_values=want.past_key_values, encoder_outputs=(want.encoder_last_hidden_state,))
        torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
    ex = fast.explain()
    assert ex.graph_count >= 1 and not ex.eager_reasons, [str(r)[:120] for r in ex.eager_reasons]
