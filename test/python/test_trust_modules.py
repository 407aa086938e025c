"""Trust regressions found by bench/modules2.py (real-world-style modules nobody
here wrote): compiled code returns eager's result with eager's aliasing, and
strict=True raises for whatever does not run compiled."""
import warnings

import pytest
import torch

import mlircap


def _storage(t):
    return t.untyped_storage().data_ptr()


def _calls(fn, make, n=3):
    """(eager result, compiled result) per call, on fresh copies of new inputs."""
    fast = mlircap.compile(fn)
    out = []
    for i in range(n):
        torch.manual_seed(i)
        args = make()
        want = fn(*[a.clone() for a in args])
        got = fast(*[a.clone() for a in args])
        out.append((want, got, fast))
    return out


# ------------------------------------------------------------------ output aliasing
def test_clone_of_input_is_not_the_input():
    """`x.clone()` (and `x * 1`) returned the caller's input itself after the first
    call: the plan returned the input value the clone folded to."""
    def fn(x):
        return x.clone(), x * 1

    fast = mlircap.compile(fn)
    for _ in range(3):
        x = torch.randn(3, 4)
        a, b = fast(x)
        assert _storage(a) != _storage(x) and _storage(b) != _storage(x) and _storage(a) != _storage(b)
        a.add_(1)
        b.add_(2)
        torch.testing.assert_close(a - 1, x)
        torch.testing.assert_close(b - 2, x)


def test_output_and_its_clone_are_distinct():
    """`y, y.clone()` came back as one buffer twice: an in-place op on the clone
    changed y (bench/modules2.py bool_mask_index_put: `u = t.clone(); u[m] += 1`
    changed t)."""
    def fn(x):
        y = x * 2
        return y, y.clone(), y.view(-1), y + 0

    fast = mlircap.compile(fn)
    for _ in range(3):
        x = torch.randn(3, 4)
        y, c, v, z = fast(x)
        assert _storage(y) == _storage(v), "a view of y must stay a view of y, as in eager"
        assert len({_storage(y), _storage(c), _storage(z)}) == 3
        c.zero_()
        torch.testing.assert_close(y, x * 2)


def test_split_outputs_stay_views_of_one_tensor():
    """q, k, v = qkv.split(...) returned as outputs: views of one tensor in eager,
    so no copies (each layer of GPT-2 on the GPU copied k and v: 48 extra kernels
    a call); a clone among them is still a copy of its own."""
    def fn(x, w):
        qkv = x @ w
        q, k, v = qkv.split(4, dim=-1)
        return q, k, v, v.clone(), qkv.unbind(0)[1]

    fast = mlircap.compile(fn)
    for _ in range(3):
        x, w = torch.randn(2, 3, 5), torch.randn(5, 12)
        want = fn(x, w)
        got = fast(x, w)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
        q, k, v, c, u = got
        assert len({_storage(q), _storage(k), _storage(v), _storage(u)}) == 1
        assert _storage(c) != _storage(v)
        c.zero_()
        torch.testing.assert_close(v, want[2])


def _transposed_part_and_whole(x):
    y = x * 2
    a, _ = y.split(2)
    return a.t(), y


def _part_and_flat_whole(x):
    y = x.clone()
    a, b = y.split(2)
    return a, b.clone(), y.view(-1)


def _transposed_and_whole(x):
    y = torch.relu(x)
    return y[:2].t(), y


def _row_and_diagonal(x):
    y = x * 2
    return y[0], y.diagonal(), y[:, 1:].t()


def _split_parts_and_transposed_whole(x):
    y = torch.relu(x)
    a, b = y.split([1, 2], 1)
    return b, a, y.T


@pytest.mark.parametrize("fn", [_transposed_part_and_whole, _part_and_flat_whole, _transposed_and_whole,
                                _row_and_diagonal, _split_parts_and_transposed_whole])
@pytest.mark.parametrize("grad", [False, True])
def test_output_view_of_another_output_sees_its_writes(fn, grad):
    """An output that is a view of another output's memory in eager (a.t() beside y, y
    returned or seen whole as y.view(-1)) is such a view compiled too: the plan computed
    the transpose into a buffer of its own, so writing one output in place left the other
    unchanged where eager's changes (a.t() beside y: wrong since split outputs were
    followed to their root in 2a8cddb, y[:2].t() beside y before that). Overlapping views
    of an intermediate not returned (y[0] and y.diagonal()) are rebuilt over one buffer."""
    fast = mlircap.compile(fn)
    for i in range(3):
        torch.manual_seed(i)
        x = torch.randn(4, 3)
        want = fn(x.clone().requires_grad_(grad))
        got = fast(x.clone().requires_grad_(grad))
        assert len({_storage(t) for t in got}) == len({_storage(t) for t in want})
        with torch.no_grad():
            for k, (a, b) in enumerate(zip(want, got)):
                a.add_(k + 1.5)
                b.add_(k + 1.5)
                for u, v in zip(want, got):
                    torch.testing.assert_close(v, u)


def test_disjoint_split_outputs_are_not_rebuilt():
    """q, k, v of one split (no element shared) and an expand of one of them: returned as
    the plan makes them, no buffer rebuilt per call (no write to one reaches another)."""
    def fn(x, w):
        q, k, v = (x @ w).split(4, dim=-1)
        return q, k, v, q.expand(2, 2, 3, 4)

    fast = mlircap.compile(fn)
    for _ in range(3):
        x, w = torch.randn(2, 3, 5), torch.randn(5, 12)
        for a, b in zip(fast(x, w), fn(x, w)):
            torch.testing.assert_close(a, b)
    assert [g._shared for g in fast.graphs] == [()]


def test_inplace_on_clone_after_mask_index():
    def fn(t, m):
        t = t * 2
        u = t.clone()
        u[m] += 1
        return t, u

    for want, got, _ in _calls(fn, lambda: (torch.randn(3, 4), torch.rand(3, 4) > 0.5)):
        torch.testing.assert_close(got, want)


# ------------------------------------------------- data-dependent shapes across a break
def _where_then_add(flat, m):
    out = torch.zeros_like(flat)
    (tok,) = torch.where(m)
    if tok.numel() == 0:   # a graph break: tok's size reaches the next graph as an input
        return out
    out.index_add_(0, tok, flat[tok] * 2)
    return out


def test_graph_after_break_gets_other_sizes():
    """The graph after `tok.numel()` was compiled for the first call's size of tok, and a
    call with another size ran it with the old sizes (bench/modules2.py
    moe_sparse_where_index_add: wrong rows). Now compiled per size (_PerShape)."""
    fast = mlircap.compile(_where_then_add)
    for n in (2, 4, 3, 4, 0, 6):
        flat = torch.randn(6, 4)
        m = torch.zeros(6, dtype=torch.bool)
        m[torch.randperm(6)[:n]] = True
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # no eager fallback either
            got = fast(flat, m)
        torch.testing.assert_close(got, _where_then_add(flat, m))


def test_plan_rejects_another_input_shape():
    """A compiled plan given an input of another shape than its static one raises
    PlanError (the graph then runs eagerly) instead of running its kernels past it."""
    from mlircap.runtime.plan import PlanError

    fast = mlircap.compile(lambda x: x * 2 + 1)
    x = torch.randn(5)
    for _ in range(3):
        fast(x)
    graph = fast.graphs[0]
    with pytest.raises(PlanError, match="shape"):
        graph.executable(torch.randn(7))
    with pytest.raises(PlanError, match="shape"):
        graph.executable(torch.randn(3))


# ------------------------------------------------------------- custom autograd Functions
class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


def test_custom_function_backward_reaches_inputs():
    """A gradient reversal layer (custom autograd.Function): its forward's ops were
    recorded under the no_grad autograd runs forward in, so the compiled call's
    output had no gradient path and the layer below got no gradient (None)
    (bench/modules2.py grad_reverse_dann_backward)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)

    def fn(x):
        h = torch.relu(lin(x))
        return (_GradReverse.apply(h, 0.5) ** 2).sum()

    fast = mlircap.compile(fn)
    for _ in range(3):
        x = torch.randn(5, 4)
        lin.zero_grad()
        fn(x).backward()
        want = lin.weight.grad.clone()
        lin.zero_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast(x).backward()
        assert lin.weight.grad is not None
        torch.testing.assert_close(lin.weight.grad, want)


# ----------------------------------------------------------------- boolean mask writes
def _mask_fill(t, m, v):
    t = t.clone()
    t[m] = v
    t[t < -1] = 0.0
    return t


def _mask_rows_add(t, m, row):
    t = t.clone()
    t[m] = row      # (B, N) mask over a (B, N, D) tensor: one row written to every selected element
    return t.index_put((m,), row * 3, accumulate=True)


@pytest.mark.parametrize("strict", [False, True])
def test_mask_put_of_broadcast_values_compiles(strict):
    """`t[mask] = v` with values shared by every selected element compiles as
    where(mask, v, t) (it was an eager island that strict=True let through)."""
    for fn, make in ((_mask_fill, lambda: (torch.randn(3, 4), torch.rand(3, 4) > 0.5, torch.tensor(7.0))),
                     (_mask_rows_add, lambda: (torch.randn(2, 5, 3), torch.rand(2, 5) > 0.5, torch.randn(3)))):
        fast = mlircap.compile(fn, strict=strict)
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # no island warning, no fallback
            for i in range(3):
                torch.manual_seed(i)
                args = make()
                torch.testing.assert_close(fast(*args), fn(*args), rtol=0, atol=0)
        assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


def _mask_put_per_element(t, m, w):
    t = t.clone()
    t[m] = w        # one value per selected element: their count is tensor data
    return t * 2


def test_mask_put_island_raises_under_strict():
    """An index_put with a boolean mask that stays an eager island is reported, and
    strict=True raises (it ran eagerly without a word)."""
    t = torch.randn(3, 4)
    m = torch.zeros(3, 4, dtype=torch.bool)
    m[0, :3] = True
    w = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(mlircap.MlircapCompileError, match="boolean mask index"):
        fast = mlircap.compile(_mask_put_per_element, strict=True)
        for _ in range(2):
            fast(t, m, w)
    fast = mlircap.compile(_mask_put_per_element)
    with pytest.warns(UserWarning, match="boolean mask index"):
        for _ in range(3):
            got = fast(t, m, w)
    torch.testing.assert_close(got, _mask_put_per_element(t, m, w))


# ----------------------------------------------------------------------- random draws
class _TwoDropouts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 2)
        self.alpha, self.drop2d = torch.nn.AlphaDropout(0.2), torch.nn.Dropout2d(0.5)

    def forward(self, x, img):   # img needs no gradient: its dropout mask is not saved for backward
        return self.l2(self.alpha(self.l1(x))) + self.drop2d(img).mean((1, 2, 3))[:, None]


def test_backward_draws_no_random_numbers():
    """The partitioner left the Dropout2d mask's bernoulli in the backward graph with no
    user; every compiled backward drew from torch's generator, so what was drawn after
    it differed from eager's (bench/modules2.py dropout_train_backward_sgd)."""
    import copy

    torch.manual_seed(0)
    ref = _TwoDropouts().train()
    fast = mlircap.compile(copy.deepcopy(ref))
    for i in range(3):
        x, img = torch.randn(4, 6), torch.randn(4, 3, 2, 2)
        states, outs = [], []
        for f in (ref, fast):
            torch.manual_seed(10 + i)
            out = f(x, img)
            out.sum().backward()
            states.append(torch.get_rng_state())
            outs.append(out.detach())
        torch.testing.assert_close(outs[1], outs[0])
        assert torch.equal(states[0], states[1])


# ------------------------------------------------------------ .grad read in a graph
def test_graph_reading_grad_after_backward_compiles():
    """`p.grad` read by the graph after an in-function backward (an optimizer step,
    gradients returned): aot traced the inputs with tensors whose .grad is None and the
    graph ran uncompiled. The grads are now inputs passed per call (new grad tensors
    after zero_grad(set_to_none=True) included), written in place as eager writes them."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)

    def fn(x):
        loss = (lin(x) ** 2).sum()
        loss.backward()
        g = lin.weight.grad.clone() * 2
        lin.bias.grad.mul_(0.5)      # an in-place write to a grad
        with torch.no_grad():
            lin.weight -= 0.1 * lin.weight.grad
        return loss.detach(), g

    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(lin.state_dict())
    fast = mlircap.compile(fn)
    state = {k: v.clone() for k, v in lin.state_dict().items()}
    for i in range(3):
        x = torch.randn(4, 3)
        lin.load_state_dict(state)
        lin.zero_grad(set_to_none=True)
        want = fn(x)
        want_grads = (lin.weight.grad.clone(), lin.bias.grad.clone(), lin.weight.detach().clone())
        lin.load_state_dict(state)
        lin.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no "backend failed to compile"
            got = fast(x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close((lin.weight.grad, lin.bias.grad, lin.weight.detach()), want_grads)
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


def test_grad_read_after_an_in_place_step_compiles():
    """`p.addcdiv_(m, d)` then `p.grad.zero_()` (a hand-written Adam step): capture records the
    second p.grad on the in-place op's result, which backend._hoist_grad_reads did not follow
    back to the input, so the graph failed to compile (zero_ of None) and ran uncompiled
    (bench/modules3.py adam_manual_step_python_t)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(lin.state_dict())

    def step(m):
        def fn(x):
            loss = (m(x) ** 2).sum()
            loss.backward()
            with torch.no_grad():
                for p in m.parameters():
                    p.addcdiv_(p.grad, p.grad.abs() + 1.0, value=-0.1)
                    p.grad.zero_()
            return loss.detach()
        return fn

    fast = mlircap.compile(step(lin))
    for i in range(3):
        x = torch.randn(4, 3)
        want = step(ref)(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no "backend failed to compile"
            got = fast(x)
        torch.testing.assert_close(got, want)
        for p, q in zip(ref.parameters(), lin.parameters()):
            torch.testing.assert_close(q, p)
            torch.testing.assert_close(q.grad, p.grad)
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


@pytest.mark.parametrize("kind", ["GRU", "LSTM", "RNN"])
def test_rnn_dropout_between_layers_in_training(kind):
    """A trained nn.GRU/LSTM/RNN(num_layers=2, dropout=p) applies dropout between its
    layers compiled as in eager (same draws): torch's RNN decomposition dropped it."""
    import copy

    torch.manual_seed(0)
    ref = getattr(torch.nn, kind)(6, 8, num_layers=2, dropout=0.4, bidirectional=True, batch_first=True).train()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    for i in range(3):
        x = torch.randn(2, 5, 6)
        torch.manual_seed(10 + i)
        want = ref(x)[0]
        want.square().sum().backward()
        state_e = torch.get_rng_state()
        torch.manual_seed(10 + i)
        got = fast(x)[0]
        got.square().sum().backward()
        torch.testing.assert_close(got, want)
        assert torch.equal(torch.get_rng_state(), state_e)
        for (n, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=n)
