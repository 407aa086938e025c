"""nn.MultiheadAttention and nn.TransformerEncoderLayer in eval under no_grad: without masks the
recording takes the slow path (capture/calls._slow_path_same_as_fast), which computes what the
fused fast-path kernel computes and compiles with the ops around it; with masks it keeps eager's
fast path, whose fully masked rows differ from the slow path's."""
import pytest
import torch
import torch.nn as nn

import mlircap


def _islands(log) -> str:
    return "\n".join(line for line in log.readouterr().err.splitlines() if "island" in line)


def _one_compiled_graph(fast) -> bool:
    return len(fast.graphs) == 1 and fast.graphs[0].fallback_reason is None


class PreNormBlock(nn.Module):
    def __init__(self, d=32, heads=4, need_weights=False):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.need_weights = need_weights

    def forward(self, x):
        h = self.ln(x)
        a, w = self.att(h, h, h, need_weights=self.need_weights)
        x = x + a
        out = x + self.ff(self.ln(x))
        return (out, w) if self.need_weights else out


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_without_masks_compiles_with_its_block(need_weights, fallback_log):
    torch.manual_seed(0)
    m = PreNormBlock(need_weights=need_weights).eval()
    fast = mlircap.compile(m)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 10, 32)
            torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
    assert _one_compiled_graph(fast)
    assert "_native_multi_head_attention" not in _islands(fallback_log)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_without_masks_compiles_whole(norm_first, activation, fallback_log):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, activation=activation, batch_first=True,
                                       norm_first=norm_first).eval()
    fast = mlircap.compile(lambda x: layer(x).relu())
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 7, 32)
            torch.testing.assert_close(fast(x), layer(x).relu(), rtol=1e-5, atol=1e-5)
    assert _one_compiled_graph(fast)
    assert "_transformer_encoder_layer_fwd" not in _islands(fallback_log)
    assert "_native_multi_head_attention" not in _islands(fallback_log)


def test_mask_after_no_mask_takes_eagers_fast_path():
    # The slow path was recorded for calls without a mask; a call with a key_padding_mask that
    # pads a whole sequence must get eager's fast-path result, not the recorded variant's:
    # the mask's None-ness is guarded.
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    fast = mlircap.compile(lambda x, p=None: mha(x, x, x, key_padding_mask=p, need_weights=False)[0] * 2)
    x = torch.randn(3, 6, 16)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0] = True
    pad[1, 4:] = True
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(x), mha(x, x, x, need_weights=False)[0] * 2)
        want = mha(x, x, x, key_padding_mask=pad, need_weights=False)[0] * 2
        for _ in range(2):
            torch.testing.assert_close(fast(x, pad), want, equal_nan=True)


def test_grad_enabled_training_path_unchanged():
    # With grad needed eager takes the slow path anyway: gradients as eager's.
    torch.manual_seed(0)
    m = PreNormBlock()
    ref = PreNormBlock()
    ref.load_state_dict(m.state_dict())
    fast = mlircap.compile(m)
    x = torch.randn(2, 5, 32)
    for _ in range(2):
        fast(x).sum().backward()
    for _ in range(2):
        ref(x).sum().backward()
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)
