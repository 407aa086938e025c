"""Per-call host overhead of compiled calls (bench/overhead.py measures it): a call whose
arguments bind in Python is dispatched without the frame hook, an inference graph is
called without aot_autograd's runtime wrapper, a CPU plan runs as generated
straight-line code.  Every test checks values (and aliasing, mutations, gradients)
against eager."""
import sys
import threading

import pytest
import torch
import torch.nn as nn

import mlircap
from mlircap.backend import CompiledGraph
from mlircap.capture import cache as capture_cache
from mlircap.capture.cache import _bind_args
from mlircap.runtime.plan import PlanError


def _frame_args(a, b=2, /, c=3, *rest, d, e=5, **kw):
    """Its frame's arguments in the frame's order (positional, keyword-only, *args, **kwargs)."""
    return (a, b, c, d, e, rest, kw)


_CALLS = [
    ((1,), {"d": 4}), ((1, 2, 3, 4, 5), {"d": 6}), ((1,), {"c": 7, "d": 8, "z": 9}),
    ((1, 2), {"d": 1, "e": 2}), ((1,), {"b": 2, "d": 3}),      # b is positional-only: goes to **kw
    ((), {"d": 1}), ((1,), {}), ((1, 2, 3), {"c": 4, "d": 5}),  # TypeErrors: missing a, missing d, c twice
    ((1, 2, 3, 4), {"d": 5, "e": 6, "f": 7}),
]


@pytest.mark.parametrize("args,kwargs", _CALLS)
def test_bind_args_binds_as_cpython(args, kwargs):
    code = _frame_args.__code__
    try:
        expected = _frame_args(*args, **kwargs)
    except TypeError:
        expected = None
    assert _bind_args(code, _frame_args, args, kwargs) == expected


def test_bind_args_without_keywords():
    def f(x, y, z=1, *, k=2):
        return x, y, z, k
    c = f.__code__
    assert _bind_args(c, f, (1, 2), {}) == (1, 2, 1, 2)
    assert _bind_args(c, f, (1, 2, 3), {"k": 4}) == (1, 2, 3, 4)
    assert _bind_args(c, f, (1, 2, 3, 4), {}) is None        # too many positional arguments
    assert _bind_args(c, f, (1,), {"y": 5, "q": 0}) is None  # unknown keyword, no **kwargs


def _signatures():
    def plain(x, s):
        return x * s + 1

    def defaults(x, s=2.0, *, shift=1.0):
        return x * s + shift

    def varargs(x, *ys, **opts):
        for y in ys:
            x = x + y
        return x * opts.get("scale", 1.0)

    def posonly(x, s=3.0, /, t=1.0):
        return x * s - t

    x, y = torch.randn(5), torch.randn(5)
    return [
        (plain, [((x, 2.0), {}), ((x,), {"s": 2.0}), ((), {"x": x, "s": 3.0})]),
        (defaults, [((x,), {}), ((x, 4.0), {}), ((x,), {"shift": 2.0}), ((x,), {"s": 2.0, "shift": 0.5})]),
        (varargs, [((x,), {}), ((x, y), {}), ((x, y, y), {"scale": 2.0}), ((x,), {"scale": 3.0})]),
        (posonly, [((x,), {}), ((x, 2.0), {"t": 0.0}), ((x,), {"t": 2.0})]),
    ]


@pytest.mark.parametrize("fn,calls", _signatures(), ids=lambda v: getattr(v, "__name__", ""))
def test_direct_dispatch_keeps_results_and_replays(fn, calls):
    """Every way of passing the arguments gives eager's result; repeated calls replay."""
    fast = mlircap.compile(fn)
    c = fast._call
    for _ in range(3):
        for args, kwargs in calls:
            torch.testing.assert_close(fast(*args, **kwargs), fn(*args, **kwargs))
    assert c.stats.replays >= 2 * len(calls)
    assert c.stats.eager_calls == 0


def test_changed_default_is_seen():
    def f(x, s=2.0):
        return x * s
    fast = mlircap.compile(f)
    x = torch.randn(4)
    for _ in range(2):
        torch.testing.assert_close(fast(x), x * 2.0)
    f.__defaults__ = (5.0,)
    for _ in range(2):
        torch.testing.assert_close(fast(x), x * 5.0)


def test_bad_call_raises_as_eager():
    def f(x, s):
        return x * s
    fast = mlircap.compile(f)
    x = torch.randn(3)
    fast(x, 2.0)
    for args, kwargs in [((x,), {}), ((x, 1.0, 2.0), {}), ((x, 1.0), {"s": 2.0}), ((x,), {"q": 1})]:
        with pytest.raises(TypeError) as eager_err:
            f(*args, **kwargs)
        with pytest.raises(TypeError) as err:
            fast(*args, **kwargs)
        assert str(err.value) == str(eager_err.value)


def _python_calls(fn, *args):
    """The Python functions one call of fn runs (sys.setprofile 'call' events)."""
    names = []

    def prof(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)
    sys.setprofile(prof)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return names


@pytest.mark.parametrize("grad", [False, True])
def test_hit_call_layers(grad):
    """A replayed call of an inference graph runs the guard, the replay, the compiled
    graph and its plan: no frame hook callback, no aot_autograd runtime wrapper, no
    first-run check, no torch.no_grad() context manager."""
    def f(x):
        return x + 1
    fast = mlircap.compile(f)
    x = torch.randn(8)
    with torch.set_grad_enabled(grad):
        for _ in range(3):
            torch.testing.assert_close(fast(x), x + 1)
        names = _python_calls(fast, x)
    for layer in ("_hook_cb", "runtime_wrapper", "_runtime_wrapper", "__enter__"):
        assert layer not in names, names
    assert "__guard" in names and "__replay" in names and "_plan_call" in names
    assert len(names) <= 12, names
    (v,) = [v for v in fast._call.variants if v.hits]
    compiled = dict(zip(v.replay.__code__.co_freevars, (c.cell_contents for c in v.replay.__closure__)))["B"]
    assert [type(g) for g in compiled] == [CompiledGraph]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)

    def forward(self, x, scale=1.0):
        return torch.relu(self.lin(x)) * scale


def _module_variants():
    """(name, make(module) -> the module changed) for the ways Module.__call__ leaves
    its plain path."""
    def pre_hook(m):
        m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,) + args[1:])
        return m

    def post_hook(m):
        m.register_forward_hook(lambda mod, args, out: out - 1)
        return m

    def instance_forward(m):
        m.forward = lambda x, scale=1.0: x.sum(-1, keepdim=True) * scale
        return m

    def kwargs_hook(m):
        m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": kwargs.get("scale", 1.0) * 3})
                                    if len(args) == 1 else None, with_kwargs=True)
        return m

    return [("plain", lambda m: m), ("pre_hook", pre_hook), ("post_hook", post_hook),
            ("instance_forward", instance_forward), ("kwargs_hook", kwargs_hook)]


@pytest.mark.parametrize("name,change", _module_variants(), ids=[n for n, _ in _module_variants()])
def test_module_calls_follow_module_call(name, change):
    torch.manual_seed(0)
    ref, mod = _Net(), _Net()
    mod.load_state_dict(ref.state_dict())
    change(ref)
    change(mod)
    fast = mlircap.compile(mod)
    x = torch.randn(3, 6)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x), ref(x))
            torch.testing.assert_close(fast(x, scale=2.0), ref(x, scale=2.0))
            torch.testing.assert_close(fast(x, 0.5), ref(x, 0.5))


def test_module_global_hook_and_hook_added_later():
    torch.manual_seed(0)
    mod = _Net()
    fast = mlircap.compile(mod)
    x = torch.randn(3, 6)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fast(x), mod(x))
        handle = nn.modules.module.register_module_forward_hook(lambda m, a, out: out * 10)
        try:
            torch.testing.assert_close(fast(x), mod(x))   # the hook runs once, as in eager
        finally:
            handle.remove()
        handle = mod.register_forward_hook(lambda m, a, out: out + 100)
        torch.testing.assert_close(fast(x), mod(x))
        handle.remove()
        torch.testing.assert_close(fast(x), mod(x))
        assert torch.all(fast(x) < 50)


def test_nested_compiled_call_inside_replayed_call():
    inner = mlircap.compile(lambda t: t.relu() * 2)
    calls = []

    def outer(t, k):
        calls.append(k)
        return inner(t) + k
    fast = mlircap.compile(outer)
    t = torch.randn(4)
    for k in (1, 2, 1, 2):
        torch.testing.assert_close(fast(t, k), t.relu() * 2 + k)
    assert calls == [1, 2, 1, 2]


def test_threads_calling_one_compiled_function():
    def f(x, y):
        return (x * y).sin() + x
    fast = mlircap.compile(f)
    torch.manual_seed(0)
    inputs = [(torch.randn(16), torch.randn(16)) for _ in range(8)]
    fast(*inputs[0])
    errors = []

    def work(k):
        try:
            for i in range(100):
                a, b = inputs[(k + i) % len(inputs)]
                torch.testing.assert_close(fast(a, b), f(a, b))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("body", ["x.t()", "x[1]", "x", "(x.exp(), x.t())", "(x.sin(), x[1])", "(x * 2, x.view(-1))"])
def test_outputs_aliasing_inputs_stay_aliases(body):
    """aot_autograd regenerates an output that aliases an input as a view of the
    caller's tensor: such graphs keep its wrapper, and writes through the output reach
    the input as in eager."""
    f = eval(f"lambda x: {body}")   # noqa: S307 - test programs
    fast = mlircap.compile(f)
    for _ in range(3):
        xe, xc = torch.randn(3, 3), None
        xc = xe.clone()
        out_e, out_c = f(xe), fast(xc)
        out_e = out_e if isinstance(out_e, tuple) else (out_e,)
        out_c = out_c if isinstance(out_c, tuple) else (out_c,)
        for oe, oc in zip(out_e, out_c):
            torch.testing.assert_close(oc, oe)
            oe.add_(1)
            oc.add_(1)
        torch.testing.assert_close(xc, xe)


def test_input_mutation_and_training_calls():
    def f(x, w, buf):
        buf.add_(1)
        return (x @ w).relu() + buf.sum()
    fast = mlircap.compile(f)
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    for _ in range(3):
        we, be = torch.randn(5, 3, requires_grad=True), torch.zeros(3)
        wc, bc = we.detach().clone().requires_grad_(), be.clone()
        ye, yc = f(x, we, be), fast(x, wc, bc)
        torch.testing.assert_close(yc, ye)
        torch.testing.assert_close(bc, be)
        assert yc.requires_grad
        ye.sum().backward()
        yc.sum().backward()
        torch.testing.assert_close(wc.grad, we.grad)
    with torch.no_grad():
        be, bc = torch.zeros(3), torch.zeros(3)
        for _ in range(2):
            torch.testing.assert_close(fast(x, wc, bc), f(x, we, be))
            torch.testing.assert_close(bc, be)


def _plans():
    def mlp(x, w1, b1, w2):
        return torch.relu(x @ w1 + b1) @ w2

    def kernels(x):
        return (x.sum(0) + 1).exp().sum() * x

    def with_const(x):
        return x * torch.tensor([1.0, 2.0, 3.0]) + torch.arange(3.0)

    def bmm(a, b):
        return torch.bmm(a, b).tanh()

    torch.manual_seed(0)
    return [(mlp, (torch.randn(2, 8), torch.randn(8, 16), torch.randn(16), torch.randn(16, 4))),
            (kernels, (torch.randn(4, 8),)),
            (with_const, (torch.randn(5, 3),)),
            (bmm, (torch.randn(2, 3, 4), torch.randn(2, 4, 5)))]


@pytest.mark.parametrize("fn,args", _plans(), ids=lambda v: getattr(v, "__name__", ""))
def test_generated_plan_call_matches_the_plan_interpreter(fn, args):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        fast(*args)
        out = fast(*args)
    torch.testing.assert_close(out, fn(*args), rtol=1e-5, atol=1e-5)
    (graph,) = fast.graphs
    exe = graph.executable
    ins = graph.last_inputs()
    assert ins is not None
    with torch.no_grad():
        a, b = exe(*ins), exe._call_generic(*ins)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert torch.equal(x, y) and x.stride() == y.stride()
        # a non-contiguous input is made contiguous by both
        nc = [t.t().contiguous().t() if t.dim() == 2 else t for t in ins]
        for x, y in zip(exe(*nc), exe._call_generic(*nc)):
            assert torch.equal(x, y)
        # a wrong dtype is rejected by both
        bad = [ins[0].double()] + list(ins[1:])
        with pytest.raises(PlanError):
            exe(*bad)
        with pytest.raises(PlanError):
            exe._call_generic(*bad)


def test_nested_call_during_recording_runs_as_it_is():
    """A compiled function called while another one's call is being dispatched runs
    its function as it is (as under the frame hook's callback)."""
    seen = []
    inner = mlircap.compile(lambda t: t * 3)
    ic = inner._call

    def outer(t):
        seen.append(len(capture_cache._active()))
        return inner(t) + 1
    fast = mlircap.compile(outer)
    t = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(fast(t), t * 3 + 1)
    assert ic.stats.calls == 0 and ic.stats.records == 0
