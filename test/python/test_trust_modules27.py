"""Defects bench/modules12.py found (session 27), each minimised: the program compiled and compared
with eager (outputs, gradients, state), and what used to run eagerly checked to compile."""
import warnings

import torch

import mlircap


def _mlircap_warnings(caught):
    return [str(w.message) for w in caught if "mlircap" in str(w.message)]


def _cross_correlation_top_lags(q, k):
    corr = torch.fft.irfft(torch.fft.rfft(q, dim=1) * torch.conj(torch.fft.rfft(k, dim=1)), n=q.size(1), dim=1)
    mean_value = corr.mean(-1)
    vals, lags = torch.topk(mean_value.mean(0), 3)
    return corr, vals, lags, mean_value[:, lags]


def test_topk_in_a_graph_with_complex_values_compiles():
    """bench/modules12.py ts_autoformer_autocorrelation_rfft_topk_roll: topk's ranked form
    (selection.py) is traced apart with make_fx, whose meta values belong to a fake mode of
    its own; copied into a graph that also holds complex values (rfft * conj), the complex
    lowering's detect_fake_mode met two modes (AssertionError 'fake mode ... doesn't match
    mode') and the whole graph ran uncompiled. The copied values are now the graph's mode
    (fxutil.adopt_fake_vals, as polynomials.py / scatter.py do): one compiled graph, eager's
    values and indices."""
    fast = mlircap.compile(_cross_correlation_top_lags)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 0, 1):
            torch.manual_seed(seed)
            q, k = torch.randn(2, 16, 4), torch.randn(2, 16, 4)
            ref, got = _cross_correlation_top_lags(q, k), fast(q, k)
            for r, g in zip(ref, got):
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            assert torch.equal(got[2], ref[2])
    assert not _mlircap_warnings(caught)
    info = fast.explain()
    assert info.graph_count == 1 and info.break_count == 0, info


def _nt_xent_with_gradient(z1, z2, tau=0.5):
    n = z1.size(0)
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    sim = (z @ z.t() / tau).masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    loss = torch.nn.functional.cross_entropy(sim, (torch.arange(2 * n) + n) % (2 * n))
    return loss, torch.autograd.grad(loss, z1)[0]


def test_returned_value_that_autograd_grad_differentiated_compiles():
    """bench/modules12.py cl_nt_xent_2n_diag_masked_roll_labels: `return loss,
    torch.autograd.grad(loss, z1)[0]`. Eager frees the call's graph and returns loss with its
    history; aot_autograd's joint trace differentiated loss again through the freed graph
    ('Trying to backward through the graph a second time') and the graph ran uncompiled. The
    traced call now keeps its graph (inner_grads.py): one compiled graph, loss and the gradient
    as eager's, loss still requiring grad."""
    fast = mlircap.compile(_nt_xent_with_gradient)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 0, 1):
            torch.manual_seed(seed)
            z1, z2 = torch.randn(4, 6, requires_grad=True), torch.randn(4, 6)
            ref, got = _nt_xent_with_gradient(z1, z2), fast(z1, z2)
            for r, g in zip(ref, got):
                torch.testing.assert_close(g, r)
                assert g.requires_grad == r.requires_grad
    assert not _mlircap_warnings(caught)
    info = fast.explain()
    assert info.graph_count == 1 and info.break_count == 0, info
