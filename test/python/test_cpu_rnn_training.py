"""CPU nn.LSTM layers with gradients run as oneDNN's fused LSTM (aten.mkldnn_rnn_layer and
its backward), as eager runs them (frontend._lstm_layers_through_onednn_with_grad): the
values and gradients are eager's, and the compiled forward keeps the workspace the backward
reads (backend._EagerIsland runs such a layer under grad mode)."""
import copy
import warnings

import pytest
import torch

import mlircap


def _train_steps(ref, x_grad, calls=3, dtype=torch.float32, **kw):
    torch.manual_seed(0)
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    for i in range(calls):
        x = torch.randn(3, 7, ref.input_size, dtype=dtype)
        xe, xm = x.clone().requires_grad_(x_grad), x.clone().requires_grad_(x_grad)
        out_e, (h_e, c_e) = ref(xe, **kw)
        (out_e.square().mean() + h_e.sum() * 0.5 + c_e.mean()).backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no graph failing on its first run
            out_m, (h_m, c_m) = fast(xm, **kw)
            (out_m.square().mean() + h_m.sum() * 0.5 + c_m.mean()).backward()
        tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out_m, out_e, **tol)
        torch.testing.assert_close(h_m, h_e, **tol)
        torch.testing.assert_close(c_m, c_e, **tol)
        if x_grad:
            torch.testing.assert_close(xm.grad, xe.grad, **tol)
        for (n, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=n, **tol)
    return fast


@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_training_step_as_eager(fallback_log, x_grad, train, bidirectional):
    """A 2-layer LSTM trained through the compiled module: outputs, final states and every
    gradient as eager's; with only the parameters requiring grad the compiled forward used
    to return no workspace (the layer ran under no_grad) and the graph fell back on its
    first run."""
    torch.manual_seed(1)
    ref = torch.nn.LSTM(5, 6, num_layers=2, batch_first=True, bidirectional=bidirectional).train(train)
    fast = _train_steps(ref, x_grad)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)
    err = fallback_log.readouterr().err
    assert "mkldnn_rnn_layer" in err and "failed on its first run" not in err, err


def test_lstm_layers_with_grad_run_fused(fallback_log):
    """The layers run as oneDNN's fused layer and its fused backward, not unrolled into
    per-step products: the islands name them."""
    torch.manual_seed(2)
    _train_steps(torch.nn.LSTM(4, 8, num_layers=1), x_grad=True, calls=2)
    err = fallback_log.readouterr().err
    assert "mkldnn_rnn_layer_backward" in err, err


def test_lstm_with_initial_state_and_no_bias():
    torch.manual_seed(3)
    ref = torch.nn.LSTM(4, 5, num_layers=2, bias=False, batch_first=True)
    h0, c0 = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    _train_steps(ref, x_grad=True, hx=(h0, c0))


def test_lstm_with_projections_stays_decomposed():
    """proj_size: eager's oneDNN path does not take projections; the decomposition does."""
    torch.manual_seed(4)
    _train_steps(torch.nn.LSTM(4, 6, num_layers=2, proj_size=3, batch_first=True), x_grad=True, calls=2)


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no oneDNN bf16 kernels on this CPU")
def test_lstm_bf16_training_step():
    torch.manual_seed(5)
    ref = torch.nn.LSTM(4, 8, num_layers=2, batch_first=True).to(torch.bfloat16)
    _train_steps(ref, x_grad=False, calls=2, dtype=torch.bfloat16)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("proj_size", [0, 3])
def test_lstm_dropout_between_layers_as_eager(grad, proj_size):
    """A trained 3-layer LSTM with dropout draws eager's dropout masks between its layers
    (same seed, same values, generator advanced as eager's), with and without grad mode,
    through oneDNN's layers and through unrolled layers with projections (which were off
    from the second call: the decomposition dropped the dropout)."""
    torch.manual_seed(6)
    ref = torch.nn.LSTM(6, 8, num_layers=3, dropout=0.4, batch_first=True, proj_size=proj_size).train()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    for i in range(3):
        x = torch.randn(2, 5, 6)
        with torch.set_grad_enabled(grad):
            torch.manual_seed(10 + i)
            want = ref(x)[0]
            state = torch.get_rng_state()
            torch.manual_seed(10 + i)
            got = fast(x)[0]
        torch.testing.assert_close(got, want)
        assert torch.equal(torch.get_rng_state(), state)
        if grad:
            want.square().sum().backward()
            got.square().sum().backward()
            for (n, p), q in zip(ref.named_parameters(), mine.parameters()):
                torch.testing.assert_close(q.grad, p.grad, msg=n)
