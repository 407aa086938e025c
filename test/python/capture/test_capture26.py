"""Capture rate against Dynamo (issue 11 item 4): `with torch.inference_mode():` blocks inside a
call entered outside inference mode.  Each block was a graph of its own, run in inference mode
(a graph before it, one for it, one after it: three graphs, as many compiled units); Dynamo holds
such a block in its one graph.  The block's ops now join the open graph with grad off
(graph_steps._merge_inference), and the graph outputs that eager made as inference tensors are
made inference tensors after the graph runs (replay.mode_copies).  Each test compares
results, is_inference, requires_grad, gradients and module state with eager after every call, and
changes the state the block reads between calls (guards and inputs still right)."""
import warnings

import torch
import torch.nn as nn

import mlircap
from harness import EAGER, run_program, same, state_of
from mlircap.capture import capture


def _inference_same(got, want, exact=True):
    if exact:
        same(want, got)
    for i, (w, g) in enumerate(zip(want, got)):
        if isinstance(w, torch.Tensor):
            if not exact:   # (the compiled graph's kernels round otherwise: tanh)
                assert g.requires_grad == w.requires_grad, f"output {i}: requires_grad differs"
                torch.testing.assert_close(g, w)
            assert g.is_inference() == w.is_inference(), f"output {i}: is_inference differs"


class _BlockWritesCache(nn.Module):
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


class _BlockFirstThenNoGrad(nn.Module):
    """The block opens the graph (a graph made in inference mode that the ops after it join)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.register_buffer("mean", torch.zeros(6))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        with torch.inference_mode():
            m = x.mean(0)
            n = x.shape[0]
        with torch.no_grad():
            self.mean.mul_(self.count / (self.count + n)).add_(m.clone() * n / (self.count + n))
            self.count.add_(n)
        return self.fc(x - self.mean), m


def _run(make, calls, mutate=None, backward=True, backend=EAGER):
    torch.manual_seed(0)
    ref = make()
    mine = make()
    mine.load_state_dict(ref.state_dict())
    fast = capture(mine, backend) if backend is not None else mlircap.compile(mine)
    for i, args in enumerate(calls):
        if mutate is not None:
            mutate(ref, i)
            mutate(mine, i)
        want, got = ref(*args), fast(*args)
        _inference_same(got, want, exact=backend is not None)
        if backend is not None:
            same(state_of(ref), state_of(mine), f"call {i} state")
        else:
            for (k, a), b in zip(ref.state_dict().items(), mine.state_dict().values()):
                torch.testing.assert_close(b, a, msg=k)
        if backward:
            want[-1 if want[-1].requires_grad else 0].sum().backward()
            got[-1 if got[-1].requires_grad else 0].sum().backward()
            for (k, p), q in zip(ref.named_parameters(), mine.parameters()):
                torch.testing.assert_close(q.grad, p.grad, msg=k)
    return fast


def _graphs_and_breaks(fast):
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    return c.graph_count, sum(len(v.breaks) for v in c.variants)


def test_block_inside_forward_is_one_graph():
    calls = [(torch.randn(1, 4), torch.tensor([i % 3])) for i in range(5)]
    fast = _run(_BlockWritesCache, calls)
    assert _graphs_and_breaks(fast) == (1, 0)   # (3 graphs before)


def test_block_reads_state_changed_between_calls():
    # the buffer the block writes and reads is changed from outside between calls, the weight too
    def mutate(m, i):
        with torch.no_grad():
            m.cache.fill_(float(i))
            m.proj.weight.mul_(0.5)

    calls = [(torch.randn(1, 4), torch.tensor([(2 * i) % 3])) for i in range(4)]
    fast = _run(_BlockWritesCache, calls, mutate=mutate)
    assert _graphs_and_breaks(fast) == (1, 0)


def test_block_opening_the_graph_then_no_grad_update():
    def mutate(m, i):
        if i == 2:
            m.count.fill_(10.0)

    calls = [(torch.randn(4 + i % 2, 6),) for i in range(5)]
    fast = _run(_BlockFirstThenNoGrad, calls, mutate=mutate)
    graphs, breaks = _graphs_and_breaks(fast)
    assert breaks == 0 and graphs == len(fast._mlircap_capture.variants), graphs   # (one graph per shape)


def test_compiled_block_results_are_inference_tensors():
    # the mlircap backend compiles the merged graph: same results, no eager fallback
    calls = [(torch.randn(1, 4), torch.tensor([i % 3])) for i in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(_BlockWritesCache, calls, backend=None)
        _run(_BlockFirstThenNoGrad, [(torch.randn(4, 6),) for _ in range(3)], backend=None)
    bad = [str(w.message) for w in caught if "mlircap" in str(w.message) and "eager" in str(w.message)]
    assert not bad, bad


def test_views_made_in_the_block_stay_views_of_one_another():
    # two outputs of the block, one a view of the other: the inference copies share memory, so a
    # write through one (in a later inference block of the user's) is seen through the other
    def f(x):
        y = x * 3
        with torch.inference_mode():
            a = y * 2
            b = a[1:]
        return y + 1, a, b

    fast = capture(f, EAGER)
    for i in range(3):
        x = torch.randn(3, 4)
        want, got = f(x), fast(x)
        _inference_same(got, want)
        with torch.inference_mode():
            got[1][2].fill_(7.0)
            want[1][2].fill_(7.0)
        torch.testing.assert_close(got[2], want[2])
    assert _graphs_and_breaks(fast) == (1, 0)


def test_enable_grad_inside_the_block_keeps_its_own_graph():
    # grad enabled inside the block: not merged (the graph of its own as before), still eager's
    src = '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        h = self.fc(x)
        with torch.inference_mode():
            with torch.enable_grad():
                k = x * 2
        return h, k + 1
def make():
    return M()
'''
    run_program(src, [(torch.randn(2, 4),) for _ in range(3)])


def test_flag_read_in_the_block_is_guarded():
    # a Python flag read inside the block decides its ops: flipping it between calls records again
    src = '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.square = False
    def forward(self, x):
        h = self.fc(x)
        with torch.inference_mode():
            s = x.abs().mean() if not self.square else (x * x).mean()
        return h * 2, s
def make():
    return M()
def mutate(i, m):
    m.square = i % 2 == 1
'''
    c = run_program(src, [(torch.randn(2, 4),) for _ in range(4)], graphs=2, breaks=0)
    assert c.stats.records == 2, c.stats.recompile_reasons


# ---------------------------------------------------------------- plain torch.Tensor subclasses
# An argument of a Python subclass of torch.Tensor that keeps torch's default __torch_function__
# (no __torch_dispatch__): capture gave up on the whole function ("a tensor of the torch.Tensor
# subclass ..."), where Dynamo makes one graph.  Its ops now record as a plain tensor's (the graph
# takes it as a plain tensor viewing it) and the graph outputs eager made as instances of the
# subclass are made so after the graph (sources.plain_subclass, replay.py).
class _Tagged(torch.Tensor):
    def describe(self):
        return "tagged"

    def scaled(self, k):
        return self * k


def _subclass_fn(s, x):
    y = s.mul_(2)
    return s + x, (s * 2).sum(), x + 1, y, s, s.describe(), torch.split(s.scaled(3.0), 2), s.T


def _check_subclass_calls(fast, backend_exact):
    for i in range(5):
        base = torch.randn(4, 3)
        plain = i == 2   # a plain tensor in the same place: a variant of its own (the type is guarded)
        s1 = base.clone() if plain else base.clone().as_subclass(_Tagged)
        s2 = base.clone() if plain else base.clone().as_subclass(_Tagged)
        x = torch.randn(4, 3)
        if plain:
            want, got = (s1 + x, x * 3), fast(s2, x)
            continue
        want, got = _subclass_fn(s1, x), fast(s2, x)
        flat_w = list(want[:5]) + list(want[6]) + [want[7]]
        flat_g = list(got[:5]) + list(got[6]) + [got[7]]
        assert [type(t) for t in flat_g] == [type(t) for t in flat_w]
        assert got[3] is s2 and got[4] is s2 and got[5] == want[5]
        for a, b in zip(flat_w, flat_g):
            a, b = a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor)
            if backend_exact:
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(b, a)
        assert torch.equal(s1.as_subclass(torch.Tensor), s2.as_subclass(torch.Tensor))   # (the in-place write)


def test_plain_subclass_argument_is_one_graph():
    def f(s, x):
        if type(s) is torch.Tensor:
            return s + x, x * 3
        return _subclass_fn(s, x)

    fast = capture(f, EAGER)
    _check_subclass_calls(fast, True)
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert c.graph_count == 2 and all(not v.breaks for v in c.variants)   # (the subclass's, the plain one's)


def test_plain_subclass_argument_compiled():
    def f(s, x):
        if type(s) is torch.Tensor:
            return s + x, x * 3
        return _subclass_fn(s, x)

    fast = mlircap.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_subclass_calls(fast, False)
    bad = [str(w.message) for w in caught if "mlircap" in str(w.message)]
    assert not bad, bad


def test_plain_subclass_argument_requiring_grad():
    def f(s, w):
        return (s @ w).tanh(), (s * s).sum()

    fast = capture(f, EAGER)
    for i in range(3):
        base, w = torch.randn(3, 4), torch.randn(4, 2)
        s1 = base.clone().as_subclass(_Tagged).requires_grad_()
        s2 = base.clone().as_subclass(_Tagged).requires_grad_()
        want, got = f(s1, w), fast(s2, w)
        assert [type(t) for t in got] == [type(t) for t in want] == [_Tagged, _Tagged]
        (want[0].sum() + want[1]).backward()
        (got[0].sum() + got[1]).backward()
        assert type(s2.grad) is type(s1.grad)
        torch.testing.assert_close(s2.grad.as_subclass(torch.Tensor), s1.grad.as_subclass(torch.Tensor))
    assert fast._mlircap_capture.graph_count == 1


def test_subclass_with_its_own_torch_function_still_runs_eagerly():
    # a subclass overriding __torch_function__ decides what its ops do: not a plain subclass
    class Logged(torch.Tensor):
        calls = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(getattr(func, "__name__", "?"))
            return super().__torch_function__(func, types, args, kwargs or {})

    def f(s, x):
        return s + x

    fast = capture(f, EAGER)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for _ in range(2):
            s = torch.randn(3).as_subclass(Logged)
            n0 = len(Logged.calls)
            got = fast(s, torch.randn(3))
            assert type(got) is Logged and len(Logged.calls) > n0   # (its __torch_function__ ran)
    assert all(v.eager for v in fast._mlircap_capture.variants)


def test_block_view_of_an_inference_argument_stays_its_view():
    # a view made in the block of an inference-tensor argument is that argument's view in eager
    # (an inference tensor already: not copied), so later writes to the argument show through it
    def f(a, x):
        y = x * 2
        with torch.inference_mode():
            v = a[0]
            w = v * 3
        n = float(y.sum())
        return v, w + n, y

    for fast in (capture(f, EAGER), mlircap.compile(f)):
        for i in range(3):
            with torch.inference_mode():
                a1 = torch.randn(3, 4)
                a2 = a1.clone()
            x = torch.randn(3, 4)
            want, got = f(a1, x), fast(a2, x)
            _inference_same(got, want, exact=False)
            with torch.inference_mode():
                a1.fill_(float(i))
                a2.fill_(float(i))
            torch.testing.assert_close(got[0], want[0])


def test_normal_block_in_an_inference_call_is_one_graph():
    # called under inference_mode, a `torch.inference_mode(False)` block makes normal tensors (a
    # buffer to write in place): its ops join the call's graph, its results made normal after it
    def f(x):
        a = x * 2
        with torch.inference_mode(False):
            b = torch.ones(3, 4) * 3
            b.add_(1)
            c = b[1:]
        return a, b, c, a.sum() + b.sum()

    for fast in (capture(f, EAGER), mlircap.compile(f)):
        for i in range(3):
            with torch.inference_mode():
                x = torch.randn(3, 4)
                want, got = f(x), fast(x)
            _inference_same(got, want, exact=False)
            got[1].mul_(2)   # (normal tensors: writable outside inference mode)
            want[1].mul_(2)
            if type(fast) is not mlircap.Compiled:   # (c still b's view; the mlircap backend's
                torch.testing.assert_close(got[2], want[2])   # outputs do not alias one another)
    assert _graphs_and_breaks(capture_and_call(f)) == (1, 0)


def capture_and_call(f):
    fast = capture(f, EAGER)
    with torch.inference_mode():
        fast(torch.randn(3, 4))
    return fast


def test_normal_block_with_a_parameter_requiring_grad_keeps_its_own_graph():
    # the block's op reads a parameter that requires grad: its result requires grad in eager, so
    # the block is a graph of its own (not run in inference mode), as before
    lin = nn.Linear(4, 4)

    def f(x):
        a = x * 2
        with torch.inference_mode(False):
            h = lin(torch.ones(3, 4))
        return a, h

    fast = capture(f, EAGER)
    for i in range(3):
        with torch.inference_mode():
            x = torch.randn(3, 4)
            want, got = f(x), fast(x)
        _inference_same(got, want)
        got[1].sum().backward()
        g = lin.weight.grad.clone()
        lin.weight.grad = None
        want[1].sum().backward()
        torch.testing.assert_close(g, lin.weight.grad)
        lin.weight.grad = None
