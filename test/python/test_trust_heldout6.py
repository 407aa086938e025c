"""Held-out trust sweep, batch 6 (issues 10 and 11): regressions found by bench/modules5.py,
a new user's programs. Each test runs mlircap.compile against eager over several calls and
compares results, whether outputs are inference tensors, the state the call writes, gradients,
and the exception eager raises.

PYTEST_DONT_REWRITE"""

import warnings

import pytest
import torch
import torch.nn as nn

import mlircap


def _same(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        assert got.is_inference() == want.is_inference(), "is_inference differs"
        assert got.requires_grad == want.requires_grad, "requires_grad differs"
        torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-5, atol=1e-6, equal_nan=True)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want, (got, want)


def _no_eager_fallback(caught):
    msgs = [str(w.message) for w in caught if "mlircap" in str(w.message)]
    assert not any("gave up" in m or "eagerly" in m for m in msgs), msgs


@torch.inference_mode()
def _predict(x, w):
    return (x @ w).softmax(-1)


class _UsesDecoratedHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        h = x * 2           # outside the helper: normal tensors
        p = _predict(h, self.w)
        return h, p, p.argmax(-1)


def test_inference_mode_decorated_helper_inside_compiled_module():
    """A helper decorated with @torch.inference_mode() called from a compiled forward: capture gave
    up on the whole function ("inference_mode changed inside the captured code"); now the helper's
    ops are a graph run in inference mode, its results inference tensors as eager's."""
    torch.manual_seed(0)
    m = _UsesDecoratedHelper()
    fast = mlircap.compile(m)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            x = torch.randn(3, 4)
            _same(fast(x), m(x))
    _no_eager_fallback(caught)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


class _InferenceBlockCache(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("cache", torch.zeros(3, 4))

    def forward(self, x, pos):
        y = self.proj(x)
        with torch.inference_mode():
            z = self.proj(x).tanh()
            self.cache.index_copy_(0, pos, z)
            s = self.cache.sum(0)
        return y * 2, z + 1, s, (y * s.clone()).sum()


def test_inference_mode_block_writes_buffer_and_feeds_grad_graph():
    """A `with torch.inference_mode():` block writing a normal buffer in place, its inference-tensor
    result cloned into a graph that requires grad (which ran under a custom autograd Function saving
    its inputs: "Inference tensors cannot be saved for backward" on the second call)."""
    torch.manual_seed(0)
    ref = _InferenceBlockCache()
    mine = _InferenceBlockCache()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(5):
            x, pos = torch.randn(1, 4), torch.tensor([i % 3])
            want, got = ref(x, pos), fast(x, pos)
            _same(got, want)
            torch.testing.assert_close(mine.cache, ref.cache)
            want[-1].backward()
            got[-1].backward()
            torch.testing.assert_close(mine.proj.weight.grad, ref.proj.weight.grad)
    _no_eager_fallback(caught)


def test_inference_mode_false_block_in_inference_call():
    """Called under inference_mode, a `torch.inference_mode(False)` block inside makes normal tensors."""
    def f(x):
        a = x * 2
        with torch.inference_mode(False):
            b = torch.ones(3, 4) * 3
            b.add_(1)
        return a, b, a.sum()

    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            with torch.inference_mode():
                x = torch.randn(3, 4)
                want, got = f(x), fast(x)
            _same(got, want)
            assert not got[1].is_inference() and got[0].is_inference()
    _no_eager_fallback(caught)


def test_inference_tensor_written_outside_block_raises_as_eager():
    def f(x, write):
        with torch.inference_mode():
            t = x * 2
        if write:
            t.add_(1)
        return t + x

    fast = mlircap.compile(f)
    x = torch.randn(3, 4)
    _same(fast(x, False), f(x, False))
    _same(fast(x, False), f(x, False))
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        f(x, True)
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        fast(x, True)


class _AddParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return (x + self.w).tanh().sum()


def test_inference_tensor_argument_with_trainable_parameter():
    """Data made under inference_mode (a preprocessing step) fed to a training-mode forward whose
    gradient does not need it (x + w): eager works; the compiled call raised "Inference tensors
    cannot be saved for backward" from the second call on (the higher-order-grad wrapper saved
    every input)."""
    torch.manual_seed(0)
    ref = _AddParam()
    mine = _AddParam()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            with torch.inference_mode():
                x = torch.randn(3, 4)
            want, got = ref(x), fast(x)
            _same(got, want)
            want.backward()
            got.backward()
            torch.testing.assert_close(mine.w.grad, ref.w.grad)
    _no_eager_fallback(caught)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


def test_set_on_tensor_made_inside_is_not_dropped():
    """`b = torch.empty(0); b.set_(src)`: Tensor.set_ does not call __torch_function__, so the
    recording never saw it and the graph read b as the empty tensor it was: from the second call
    the result had shape (0,) instead of eager's (3, 4). Now a step between graphs."""
    def f(x):
        b = torch.empty(0)
        b.set_(x.clone())
        b.mul_(2)
        return b * 3, b.shape

    fast = mlircap.compile(f)
    for i in range(3):
        x = torch.randn(3, 4)
        _same(fast(x), f(x))


def test_set_on_argument_changes_callers_tensor():
    """set_ on an argument: the caller's tensor takes the source's storage and shape, as eager's."""
    def f(t, x):
        t.set_(x * 2)
        return t + 1

    fast = mlircap.compile(f)
    for i in range(3):
        x = torch.randn(2, 3)
        te, tc = torch.zeros(5), torch.zeros(5)
        _same(fast(tc, x), f(te, x))
        _same(tc, te)


def test_swap_tensors_inside_is_not_dropped():
    """torch.utils.swap_tensors swaps two tensors in C, unseen by the recording: from the second
    call the graphs read the tensors unswapped (wrong results, and the caller's arguments left
    unswapped). Now a step between graphs, run eagerly."""
    def f(x):
        a = x * 2
        b = torch.zeros(3, 4)
        torch.utils.swap_tensors(a, b)
        return a + 1, b + 1

    def g(x, y):
        torch.utils.swap_tensors(x, y)
        return x * 2

    ff, fg = mlircap.compile(f), mlircap.compile(g)
    for i in range(3):
        x = torch.randn(3, 4)
        _same(ff(x), f(x))
        x, y = torch.randn(2, 2), torch.randn(3)
        x2, y2 = x.clone(), y.clone()
        _same(fg(x, y), g(x2, y2))
        _same((x, y), (x2, y2))


class _Tagged(torch.Tensor):
    def describe(self):
        return "tagged"


def test_tensor_subclass_argument_keeps_its_type():
    """A torch.Tensor subclass argument: eager's results of ops on it are of the subclass (a user's
    methods on it keep working); compiled calls returned plain tensors from the second call on.
    Such calls now run as eager's (the subclass decides what its ops do)."""
    def f(s, x):
        return s + x, (s * 2).sum(), x + 1

    fast = mlircap.compile(f)
    for i in range(3):
        s, x = torch.randn(3, 4).as_subclass(_Tagged), torch.randn(3, 4)
        want, got = f(s, x), fast(s, x)
        assert [type(t) for t in got] == [type(t) for t in want] == [_Tagged, _Tagged, torch.Tensor]
        _same([t.as_subclass(torch.Tensor) for t in got], [t.as_subclass(torch.Tensor) for t in want])
        assert got[0].describe() == "tagged"


def test_parameter_argument_still_compiles():
    """nn.Parameter arguments (their ops give plain tensors) are not such subclasses: still compiled."""
    def f(p, x):
        return p * x + 1

    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            p, x = nn.Parameter(torch.randn(3)), torch.randn(3)
            _same(fast(p, x), f(p, x))
    _no_eager_fallback(caught)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


def test_caught_value_dependent_error_is_checked_on_replay():
    """`try: L = cholesky(K) except RuntimeError: L = cholesky(K + jitter)`: the first call recorded
    the except path (K not positive definite) and every later call replayed it, also for positive
    definite K (a different, wrong L). The op that raised now runs again on replay, and a call on
    which it does not raise records the other path."""
    def f(K):
        try:
            L = torch.linalg.cholesky(K)
            jit = 0.0
        except RuntimeError:
            L = torch.linalg.cholesky(K + 10.0 * torch.eye(K.shape[0]))
            jit = 10.0
        return L, jit

    def mk(pd):
        a = torch.randn(4, 4)
        k = a @ a.T + 0.1 * torch.eye(4)
        if not pd:
            k[0, 0] = -0.5
        return k

    fast = mlircap.compile(f)
    for pd in (False, False, True, True, False, True):
        k = mk(pd)
        _same(fast(k), f(k))


def test_caught_layout_error_still_right():
    """`try: x.view(-1) except RuntimeError: x.reshape(-1)` on contiguous and transposed inputs."""
    def f(x):
        try:
            y = x.view(-1)
        except RuntimeError:
            y = x.reshape(-1) * 2
        return y + 1

    fast = mlircap.compile(f)
    for i in range(6):
        x = torch.randn(3, 4) if i % 3 else torch.randn(4, 3).t()
        _same(fast(x), f(x))


def test_caught_index_error_on_later_call():
    def f(x, i):
        try:
            v = x[i]
        except IndexError:
            v = torch.zeros(x.shape[1:])
        return v * 2

    fast = mlircap.compile(f)
    x = torch.randn(4, 3)
    for i in (torch.tensor(9), torch.tensor(9), torch.tensor(1), torch.tensor(2), torch.tensor(7)):
        try:
            want = f(x, i)
        except Exception as e:  # noqa: BLE001 - whatever eager raises, compiled must raise too
            with pytest.raises(type(e)):
                fast(x, i)
            continue
        _same(fast(x, i), want)
