"""Held-out trust sweep, batch 8 (issue 10): regressions found by bench/modules7.py
(distributions, RL, flows, metric learning, hand-written optimizers, torch.func, masks, integer
index arithmetic, mixed dtypes, numerically hard inputs). Each test runs mlircap.compile against
eager over several calls and checks the program state a call leaves too.

PYTEST_DONT_REWRITE"""

import torch

import mlircap


def _graphs_compiled(fast):
    return [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]


# ------------------------------------------------------ grad mode after a split torch.no_grad()
class _CenterLoss(torch.nn.Module):
    """Center loss: the centers buffer updated under no_grad with per-class counts by bincount,
    an op whose output size depends on the data, so the graph is split inside the block."""

    def __init__(self):
        super().__init__()
        self.register_buffer("centers", torch.randn(4, 3))

    def forward(self, x, y):
        c = self.centers.index_select(0, y)
        loss = ((x - c) ** 2).sum(1).mean() / 2
        with torch.no_grad():
            delta = torch.zeros_like(self.centers).index_add_(0, y, c - x)
            cnt = torch.bincount(y, minlength=4).to(x.dtype)
            self.centers.sub_(0.5 * delta / (1 + cnt[:, None]))
        return loss


def test_no_grad_block_split_by_data_dependent_op_restores_grad_mode():
    """A torch.no_grad() block holding a data-dependent op (bincount) splits the captured graph
    inside the block. Tracing the part before the op (its grad-mode switch ran, the switch back
    is in the next part) left grad mode off, and compiled parts never switch the caller's mode:
    after the call grad mode stayed off for the rest of the process (every later backward in
    the program raised 'element 0 of tensors does not require grad')."""
    torch.manual_seed(0)
    ref = _CenterLoss()
    mine = _CenterLoss()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    try:
        for i in range(4):
            x, y = torch.randn(7, 3, requires_grad=True), torch.randint(0, 4, (7,))
            le = ref(x, y)
            assert torch.is_grad_enabled()
            lc = fast(x, y)
            assert torch.is_grad_enabled(), f"call {i} left grad mode off"
            torch.testing.assert_close(lc, le)
            torch.testing.assert_close(mine.centers, ref.centers)
            assert lc.requires_grad
            torch.testing.assert_close(torch.autograd.grad(lc, x)[0], torch.autograd.grad(le, x)[0])
        assert _graphs_compiled(fast)
    finally:
        torch.set_grad_enabled(True)


def test_no_grad_block_split_outputs_and_caller_mode():
    """Values made inside the split block do not require grad, values after it do; called
    under torch.no_grad() the call leaves grad off, as the caller had it."""
    def f(w, y):
        with torch.no_grad():
            cnt = torch.bincount(y, minlength=5).to(w.dtype)
            v = w[:5] * cnt
        return (w * 3).sum() + v.sum(), v

    fast = mlircap.compile(f)
    try:
        for i in range(3):
            w, y = torch.randn(6, requires_grad=True), torch.randint(0, 5, (8 + i,))
            e, c = f(w, y), fast(w, y)
            assert torch.is_grad_enabled()
            for a, b in zip(e, c):
                torch.testing.assert_close(b, a)
                assert a.requires_grad == b.requires_grad
            torch.testing.assert_close(torch.autograd.grad(c[0], w)[0], torch.autograd.grad(e[0], w)[0])
        with torch.no_grad():
            c = fast(w, y)
            assert not torch.is_grad_enabled()
        assert torch.is_grad_enabled()
        assert not c[0].requires_grad
    finally:
        torch.set_grad_enabled(True)


# ------------------------------------------------------ signed zeros through clamp / relu
def _clamps(a):
    import torch.nn.functional as F
    return (a.clamp(min=0), a.clamp(max=-0.0), a.clamp(-1, 1), F.relu(a), F.relu6(a), F.hardtanh(a),
            F.leaky_relu(a), torch.clamp_min(a, 0.0), 1 / F.relu(a), torch.atan2(a.clamp(min=0), a.new_tensor(-1.0)))


def test_clamp_and_relu_keep_negative_zero_and_nan_as_eager():
    """Eager's clamp / relu kernels compute `x < lo ? lo : x`: a -0.0 equal to the bound 0.0
    stays -0.0 (relu(-0.0) is -0.0, 1 / relu(-0.0) is -inf), NaN stays NaN. The compiled graph
    made NaN-propagating selects arith.maximumf, which orders -0 below +0: relu(-0.0) was +0.0
    (1 / relu(x) gave +inf, atan2 pi instead of -pi). Scalar bounds, relu6 / hardtanh's 0-d
    tensors, vectorized sizes and tails."""
    fast = mlircap.compile(_clamps)
    for n in (6, 37):
        a = torch.tensor([0.0, -0.0, 1.0, -1.0, float("nan"), 7.0, -0.0, 0.5] * 5)[:n]
        for _ in range(2):
            e, c = _clamps(a), fast(a)
            for i, (x, y) in enumerate(zip(e, c)):
                torch.testing.assert_close(y, x, equal_nan=True)
                num = ~x.isnan()   # (a NaN's sign is not specified)
                assert torch.equal(torch.signbit(y[num]), torch.signbit(x[num])), (i, x.tolist(), y.tolist())
    assert _graphs_compiled(fast)


def test_autocast_region_split_by_data_dependent_op_leaves_autocast_off():
    """An autocast region holding a data-dependent op: compiling the graph (tracing, fake
    propagation) ran its _enter_autocast node and stopped before the _exit_autocast one, so
    after the call autocast stayed on for the whole process (every later matmul in bf16) and
    its nesting count stayed up (the cast cache of weights never cleared again)."""
    def f(x, w, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x @ w
            cnt = torch.bincount(y, minlength=4)
            h2 = h @ w
        return h, h2, cnt, (h2.float() * 2).sum()

    fast = mlircap.compile(f)
    try:
        for i in range(3):
            x, w, y = torch.randn(4, 4), torch.randn(4, 4), torch.randint(0, 4, (6 + i,))
            e, c = f(x, w, y), fast(x, w, y)
            assert not torch.is_autocast_enabled("cpu"), f"call {i} left autocast on"
            assert torch.is_grad_enabled()
            for a, b in zip(e, c):
                assert a.dtype == b.dtype
                torch.testing.assert_close(b, a)
            assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.float32
        # the nesting count is back at 0: leaving a region clears the cast cache again
        assert torch.autocast_increment_nesting() == 1
        assert torch.autocast_decrement_nesting() == 0
    finally:
        torch.set_autocast_enabled("cpu", False)


# ------------------------------------------------------ torch.set_grad_enabled(flag) left switched
def _off_after(x):
    y = x * 2
    torch.set_grad_enabled(False)   # (a script's "inference from here on")
    return y, y * 3


def _on_after(x):
    y = x * 2
    torch.set_grad_enabled(True)
    return y, y * 3, x * 4


def _off_then_break(x):
    y = x * 2
    torch.set_grad_enabled(False)
    idx = (y > 0).nonzero()
    return y, y[idx[:, 0]] * 3, idx


def test_unrestored_set_grad_enabled_leaves_eagers_mode_and_requires_grad():
    """torch.set_grad_enabled(flag) called as a function (not a context) leaves the mode
    switched after the call in eager. The replay ended in the mode the call started in (graphs
    restore it), so from the second call on grad stayed on (or off) where eager switched it;
    and the graphs were compiled in the mode the recording ended in: y = x * 2 computed before
    the switch did not require grad."""
    x = torch.randn(6, requires_grad=True)
    try:
        for fn, mode in ((_off_after, True), (_on_after, False), (_off_then_break, True)):
            fast = mlircap.compile(fn)
            for i in range(3):
                torch.set_grad_enabled(mode)
                e = fn(x)
                ge = torch.is_grad_enabled()
                torch.set_grad_enabled(mode)
                c = fast(x)
                assert torch.is_grad_enabled() == ge, (fn.__name__, i)
                for a, b in zip(e, c):
                    torch.testing.assert_close(b, a)
                    assert a.requires_grad == b.requires_grad, (fn.__name__, i)
            assert _graphs_compiled(fast), fn.__name__
    finally:
        torch.set_grad_enabled(True)


def _autocast_left_on(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
    torch.set_autocast_enabled("cpu", True)   # (left on, as torch.set_grad_enabled above)
    return y, x @ x


def test_unrestored_set_autocast_enabled_leaves_eagers_state():
    """torch.set_autocast_enabled('cpu', True) called as a function stays on after the call in
    eager; the replay ended with autocast off from the second call on."""
    fast = mlircap.compile(_autocast_left_on)
    try:
        for i in range(3):
            x = torch.randn(3, 3)
            torch.set_autocast_enabled("cpu", False)
            e = _autocast_left_on(x)
            se = torch.is_autocast_enabled("cpu")
            torch.set_autocast_enabled("cpu", False)
            c = fast(x)
            assert torch.is_autocast_enabled("cpu") == se, i
            for a, b in zip(e, c):
                assert a.dtype == b.dtype
                torch.testing.assert_close(b, a)
        assert _graphs_compiled(fast)
    finally:
        torch.set_autocast_enabled("cpu", False)


# ------------------------------------------------------ retain_grad of a tensor with a graph hook
def _hooked_retained(x, w, gout):
    h = torch.tanh(x @ w)
    h.register_hook(lambda g: g * 0.5)
    h.retain_grad()
    y = h * 3
    y.backward(gout)
    return y.detach(), h.grad


def test_retain_grad_after_register_hook_holds_the_hooked_gradient():
    """h.register_hook(fn) held by the graph runs fn inside the graph's backward, after the
    tensor the graph returns; h.retain_grad() on that tensor retained the gradient before the
    hook (twice eager's, whose retains_grad hook runs after the tensor's hooks). The hook
    still scales what flows on (w.grad matched)."""
    fast = mlircap.compile(_hooked_retained)
    for i in range(3):
        x, go = torch.randn(4, 3), torch.randn(4, 3)
        w1 = torch.randn(3, 3, requires_grad=True)
        w2 = w1.detach().clone().requires_grad_()
        e, c = _hooked_retained(x, w1, go), fast(x, w2, go)
        for a, b in zip(e, c):
            torch.testing.assert_close(b, a)
        torch.testing.assert_close(w2.grad, w1.grad)
