"""frontend._lstm_final_state_shape: torch before 2.12 returned the LSTM decomposition's final
(h, c) as (layers, 1, batch, hidden) (one_layer_lstm's `hx.squeeze(1)`); the GPU path of
nn.LSTM runs through it (bench/modules.py --device cuda: nn_lstm, lstm_tagger_2layer).  The
installed torch has the fix, so the test installs torch 2.11's layer function and checks that
the shim repairs it (CPU training mode takes the same decomposition as the GPU)."""
import torch
import torch._decomp.decompositions as d
from torch import nn

import mlircap
from mlircap import frontend


def _one_layer_lstm_2_11(inp, hidden, params, has_biases, reverse=False):
    ih_weight, hh_weight = params[0], params[1]
    ih_bias = params[2] if has_biases else None
    hh_bias = params[3] if has_biases else None
    hr_weight = params[4] if len(params) == 5 else params[2] if len(params) == 3 else None
    hx = hidden[0].unsqueeze(0)
    cx = hidden[1].unsqueeze(0)
    pre = torch.nn.functional.linear(inp, ih_weight, ih_bias)
    pre = pre.flip(0) if reverse else pre
    steps = []
    for x in pre:
        hx, cx = d.lstm_cell(x, hx, cx, hh_weight, hh_bias, hr_weight, chunk_dim=2)
        steps.append(hx)
    if reverse:
        steps.reverse()
    return torch.cat(steps, 0), (hx.squeeze(1), cx.squeeze(1))


def test_lstm_shim_repairs_torch_2_11_final_state(monkeypatch):
    monkeypatch.setattr(d, "one_layer_lstm", _one_layer_lstm_2_11)
    frontend._lstm_final_state_shape()
    assert d.one_layer_lstm is not _one_layer_lstm_2_11 and d.one_layer_lstm._mlircap
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True).train()

    def f(x):
        out, (h, c) = lstm(x)
        return out[:, -1] + h[-1], h, c

    fast = mlircap.compile(f)
    for batch in (3, 3, 1):
        x = torch.randn(batch, 5, 6, requires_grad=True)
        got, want = fast(x), f(x)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b)


def test_lstm_shim_leaves_a_fixed_torch_alone():
    layer = d.one_layer_lstm
    frontend._lstm_final_state_shape()
    assert d.one_layer_lstm is layer
