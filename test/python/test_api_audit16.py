"""API-level audit (issues 10/11): mlircap used as a user with production code would use it (the
compiled module wrapper, composition with torch's stack, unusual inputs, errors, threads), each
defect found compared with eager."""
import threading
import warnings

import torch
from torch import nn

import mlircap


def test_threads_missing_at_once_record_one_variant():
    """Threads serving one compiled model (a server's workers on their first request) all miss the
    empty cache at once. Each recorded and compiled the same variant after waiting for the recording
    lock: 4 threads left 4 identical variants, and 8 filled cache_limit, after which every call of
    the model ran eagerly. A thread that missed now waits for the other threads' recordings of the
    function and replays the variant they stored."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    fast = mlircap.compile(model)
    x = torch.randn(4, 16)
    want = model(x)
    n = 6
    start = threading.Barrier(n)
    results, errors = [], []

    def worker():
        try:
            start.wait()
            for _ in range(3):
                results.append(fast(x))
        except BaseException as e:   # noqa: BLE001 (reported below)
            errors.append(e)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=worker) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert len(results) == 3 * n
    for r in results:
        torch.testing.assert_close(r, want, rtol=1e-5, atol=1e-5)
    assert len(fast.graphs) == 1, f"{len(fast.graphs)} graphs recorded for one variant"
    assert not [w for w in caught if "cache_limit" in str(w.message)]
    # the threads' later variants (grad mode off) are recorded once each too
    with torch.no_grad():
        fast(x)
    assert len(fast.graphs) == 2


def _sin_poly(a):
    return a.sin() * a + a.cos()


def test_torch_func_transforms_over_a_compiled_function_run_it_eagerly():
    """torch.func.vmap of a compiled function raised out of the user's call ('Batching rule not
    implemented for aten::_debug_has_internal_overlap': the recording read the batched argument's
    storage), where eager computes it; torch.func.grad / jacrev warned that capture gave up ('Cannot
    access storage of TensorWrapper') and kept a variant that runs eagerly. A call under a torch.func
    transform that matches no variant now runs eagerly, with one warning naming the transform, and
    records nothing: calls outside the transform still replay the compiled graph."""
    fast = mlircap.compile(_sin_poly)
    x = torch.randn(5)
    fast(x)
    batch = torch.randn(3, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(torch.func.vmap(fast)(batch), torch.func.vmap(_sin_poly)(batch))
        torch.testing.assert_close(torch.func.jacrev(fast)(x), torch.func.jacrev(_sin_poly)(x))
        loss = mlircap.compile(lambda a: _sin_poly(a).sum())
        torch.testing.assert_close(torch.func.grad(loss)(x), torch.func.grad(lambda a: _sin_poly(a).sum())(x))
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "gave up" in m], messages
    assert [m for m in messages if "torch.func transform" in m], messages
    torch.testing.assert_close(fast(x), _sin_poly(x))
    assert len(fast.graphs) == 1 and fast._call.stats.replays == 1


def test_torch_func_vmap_over_a_compiled_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    fast = mlircap.compile(model)
    batch = torch.randn(3, 5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.func.vmap(fast)(batch)
    torch.testing.assert_close(got, torch.func.vmap(model)(batch))


def _counts(i):
    return torch.bincount(i, minlength=4) + 1   # the line the error names


def test_an_error_raised_in_a_compiled_call_names_the_users_line_and_prints_nothing(capfd):
    """An op of a compiled graph that raises eager's error at run time (torch.bincount of a negative
    index, run through torch between compiled parts) went through torch.fx's GraphModule.__call__,
    which printed a 'Call using an FX-traced Module' report with the generated code on stderr (eager
    prints nothing: a loop that catches the error printed it every time) and re-raised the error
    without its traceback, so nothing named the user's line. The parts' generated forwards are called
    directly now, and the error gets a note naming the op and the user's file:line."""
    fast = mlircap.compile(_counts)
    good = torch.tensor([0, 1, 3])
    for _ in range(2):
        torch.testing.assert_close(fast(good), _counts(good))
    capfd.readouterr()
    bad = torch.tensor([0, -1, 3])
    for _ in range(2):
        try:
            fast(bad)
        except RuntimeError as e:
            err = e
        else:
            raise AssertionError("no error")
    try:
        _counts(bad)
    except RuntimeError as e:
        assert str(err) == str(e)
    assert "FX-traced" not in capfd.readouterr().err
    line = _counts.__code__.co_firstlineno + 1
    assert [n for n in getattr(err, "__notes__", ()) if f"test_api_audit16.py:{line}" in n and "bincount" in n], \
        getattr(err, "__notes__", None)
    torch.testing.assert_close(fast(good), _counts(good))


class _Wrapped(torch.Tensor):
    """A wrapper tensor subclass as users write them (a logging or quantized tensor): no storage of
    its own, each aten op run on the tensor it wraps by __torch_dispatch__."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        def unwrap(t):
            return t.elem if isinstance(t, _Wrapped) else t
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: _Wrapped(t) if isinstance(t, torch.Tensor) else t, out)


def test_a_wrapper_tensor_subclass_argument_runs_the_function_eagerly():
    """A tensor subclass with its own __torch_dispatch__ and torch function handling disabled (as
    DTensor's, float8 tensors' and TwoTensor's): capture recorded the ops it dispatched as a graph of
    plain tensors, and the second call handed the subclass (no storage of its own) to the compiled
    code, which read its data pointer: a segfault. Such an argument now runs the function eagerly, as
    other tensor subclasses do (its results keep their type and values)."""
    fast = mlircap.compile(_sin_poly)
    t = _Wrapped(torch.randn(4))
    want = _sin_poly(t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            got = fast(t)
            assert type(got) is _Wrapped
            torch.testing.assert_close(got.elem, want.elem)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    fast_model = mlircap.compile(model)
    x = _Wrapped(torch.randn(2, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            got = fast_model(x)
            assert type(got) is _Wrapped
            torch.testing.assert_close(got.elem, model(x).elem)
