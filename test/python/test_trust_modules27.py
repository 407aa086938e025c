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


class _TrainWithAveraged(torch.nn.Module):
    def __init__(self, ema):
        super().__init__()
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        self.avg = AveragedModel(self.net, multi_avg_fn=get_ema_multi_avg_fn(0.9) if ema else None)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=0.01)

    def forward(self, x, y):
        self.opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.avg.update_parameters(self.net)
        return loss.detach(), self.avg(x), self.avg.n_averaged.clone()


def test_averaged_model_update_parameters_runs_between_graphs():
    """bench/modules12.py opt_swa_utils_averaged_model_ema: torch.optim.swa_utils.AveragedModel's
    update_parameters walks both modules' parameters in torch code and compares / increments its
    n_averaged buffer there: capture gave up on the whole training step ('tensor of unknown
    origin'). It now runs at replay as it is, as an optimizer's step does, the two module trees
    sourced before it: the step compiles around it; outputs, the averaged parameters and the
    counter as eager's on every call (EMA and the default running mean)."""
    import copy

    for ema in (True, False):
        torch.manual_seed(0)
        ref = _TrainWithAveraged(ema)
        mine = copy.deepcopy(ref)
        fast = mlircap.compile(mine)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for seed in (0, 0, 1, 2):
                torch.manual_seed(seed)
                x, y = torch.randn(5, 3), torch.randn(5, 2)
                for r, g in zip(ref(x, y), fast(x, y)):
                    torch.testing.assert_close(g, r)
        assert not _mlircap_warnings(caught)
        for (name, r), (_, g) in zip(ref.state_dict().items(), mine.state_dict().items()):
            torch.testing.assert_close(g, r, msg=name)
        assert fast.explain().graph_count >= 1


class _GreedyReorder(torch.nn.Module):
    """A decoding loop whose last reorder of the hidden state by beam indices is never read."""

    def __init__(self, v=7, d=6, beams=3):
        super().__init__()
        self.emb = torch.nn.Embedding(v, d)
        self.rnn = torch.nn.GRUCell(d, d)
        self.out = torch.nn.Linear(d, v)
        self.k, self.v = beams, v

    def forward(self, h0, steps=3):
        h = h0.expand(self.k, -1).contiguous()
        scores = torch.tensor([0.0] + [float("-inf")] * (self.k - 1))
        tokens = torch.zeros(self.k, 1, dtype=torch.long)
        for _ in range(steps):
            h = self.rnn(self.emb(tokens[:, -1]), h)
            cand = (scores[:, None] + self.out(h).log_softmax(-1)).view(-1)
            scores, idx = cand.topk(self.k)
            beam = torch.div(idx, self.v, rounding_mode="floor")
            tokens = torch.cat([tokens.index_select(0, beam), (idx % self.v)[:, None]], 1)
            h = h.index_select(0, beam)      # unused after the last step
        return tokens, scores


def test_unused_index_op_in_a_differentiated_graph_keeps_the_graph_compiled():
    """bench/modules12.py block_beam_search_flat_topk_floor_div_reorder: the last step's
    `h.index_select(0, beam)` is read by nothing; eager still checks its indices, so the
    backend keeps it (_keep_dead_raising_ops). In a graph with parameters requiring grad the
    kept op ran as an eager graph of its own, possible only where everything on its way is a
    pure tensor function; here a GRUCell, an embedding and a topk lead to it, so the whole
    graph ran eagerly ('no graph compiled'). It now stays in the compiled graph as an extra,
    detached output (as without gradients): one compiled graph, eager's tokens and scores,
    and the loss's parameter gradients as eager's."""
    import copy

    torch.manual_seed(0)
    ref = _GreedyReorder()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 0, 1):
            torch.manual_seed(seed)
            h0 = torch.randn(1, 6)
            (tr, sr), (tg, sg) = ref(h0), fast(h0)
            assert torch.equal(tg, tr)
            torch.testing.assert_close(sg, sr)
            sr.sum().backward()
            sg.sum().backward()
            for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
                torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert not _mlircap_warnings(caught)
    assert len(fast.graphs) >= 1 and all(g.fallback_reason is None for g in fast.graphs)


def test_unused_index_op_in_a_differentiated_graph_still_raises_like_eager():
    """The same kept op with an index out of range raises eager's IndexError, before anything
    is returned, where a GRUCell's output leads to it (the extra output's bounds check)."""
    def f(x, w, cell_w):
        h = torch.tanh(x @ cell_w)
        idx = (h.argmax(-1) + 10)                 # out of range of h's 4 rows
        h.index_select(0, idx)                    # unused: eager raises
        return (h * w).sum()

    fast = mlircap.compile(f)
    torch.manual_seed(0)
    x, w, cw = torch.randn(4, 3), torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    for _ in range(3):
        try:
            f(x, w, cw)
        except IndexError:
            pass
        else:
            raise AssertionError("eager did not raise")
        try:
            fast(x, w, cw)
        except IndexError:
            pass
        else:
            raise AssertionError("compiled did not raise IndexError")


class _BetaPolicy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 4)

    def forward(self, obs):
        a, b = (torch.nn.functional.softplus(self.net(obs)) + 1.0).chunk(2, -1)
        dist = torch.distributions.Beta(a, b)
        torch.manual_seed(5)
        u = dist.rsample()
        loss = (-2.0 + 4.0 * u).pow(2).sum() - dist.log_prob(u.clamp(1e-6, 1 - 1e-6)).sum()
        return loss, dist.entropy().sum(-1)


def test_custom_function_inside_untraced_torch_code_breaks_around_it():
    """bench/modules12.py dist_beta_policy_rsample_scaled_actions: Beta.rsample (Dirichlet's)
    applies torch's custom autograd Function _Dirichlet in untraced library code called straight
    from the captured frame; its forward's ops were recorded under no_grad and capture gave up
    on the whole forward ('a custom torch.autograd.Function with inputs that require grad').
    failing_callee found no traced callee to learn. It now names the library function the frame
    called (rsample): the next recording breaks the graph around that call, which runs eagerly,
    so its backward is autograd's. Samples, losses and the parameters' gradients as eager's."""
    import copy

    torch.manual_seed(0)
    ref = _BetaPolicy()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 0, 1, 2):
            torch.manual_seed(seed)
            obs = torch.randn(5, 4)
            r, g = ref(obs), fast(obs)
            for a, b in zip(r, g):
                torch.testing.assert_close(b, a)
            r[0].backward()
            g[0].backward()
            for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
                torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert not _mlircap_warnings(caught)
    info = fast.explain()
    assert info.graph_count >= 2 and len(fast.graphs) >= 1, info


def _top2_columns(x):
    index = torch.topk(x.mean(0), 2)[1]
    return torch.stack([x[:, index[i]] for i in range(2)], -1), index


def test_speculated_graph_with_a_tie_flag_reruns_eagerly_instead_of_raising():
    """Found minimising bench/modules12.py ts_autoformer_autocorrelation_rfft_topk_roll: a graph
    compiled by speculation (x[:, index[0]] reads a value topk computed) whose topk ranked form
    sets its flag at a later call (a tie among the top k: the indices depend on eager's
    algorithm) raised mlircap.bounds.IndexOutOfRange into the program; backend_inner's graphs
    rerun the captured graph eagerly there, the speculated ones did not. Now they do: the tie's
    values and indices are eager's, and the calls before and after compile."""
    fast = mlircap.compile(_top2_columns)
    torch.manual_seed(0)
    a = torch.randn(2, 16)
    tie = a.clone()
    tie[:, 3] = tie[:, 5] = 10.0
    tie[0, 9] = 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in (a, a, a, tie, a, tie):
            ref, got = _top2_columns(x), fast(x)
            torch.testing.assert_close(got[0], ref[0])
            assert torch.equal(got[1], ref[1])
    assert len(fast.graphs) >= 1


def _masked_and_full_gradient(pred, target):
    mask = ~torch.isnan(target)
    h = torch.nn.functional.huber_loss(pred[mask], target[mask], reduction="sum") / mask.sum().clamp(min=1)
    return torch.autograd.grad(h + pred.pow(2).mean(), pred)[0], pred[mask].sum().detach()


def test_autograd_grad_after_a_data_dependent_split_is_eager_gradient():
    """bench/modules12.py nan_robust_huber_targets_missing_mask (WRONG once its graph compiled):
    autograd.grad of a loss over pred[mask] plus one over pred. The graph was split at the
    boolean-mask index (ddsplit.py), and the part after it took the index's result as an input
    of its own: the autograd.grad traced in that part differentiated through the part alone,
    and the masked term's gradient was lost (x[mask].sum() + x.sum(): 1 where eager gives 2).
    A graph differentiating after its data-dependent op is no longer split: its gradient is
    eager's."""
    fast = mlircap.compile(_masked_and_full_gradient)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (0, 0, 1):
            torch.manual_seed(seed)
            pred = torch.randn(6, 3, requires_grad=True)
            target = torch.where(torch.randn(6, 3) > 0.5, torch.tensor(float("nan")), torch.randn(6, 3) * 3)
            ref, got = _masked_and_full_gradient(pred, target), fast(pred, target)
            for r, g in zip(ref, got):
                torch.testing.assert_close(g, r)
