"""A compiled call made under a profiler: the first call records with sys.settrace / sys.setprofile
of its own and puts the user's back after. cProfile (on 3.11 a C profile function, which
sys.getprofile() returns as the Profile object) and torch.profiler with stacks (a TraceContext) are
not callables sys.setprofile takes: putting them back raised TypeError into the user's program."""
import cProfile
import pstats
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import mlircap


def _fn(x):
    return (x.sin() + 1).relu() * 2


def _after(x):
    return x - 1


def test_compiled_call_under_cprofile():
    f = mlircap.compile(_fn)
    x = torch.randn(8)
    pr = cProfile.Profile()
    pr.enable()
    try:
        first, second = f(x), f(x)
        _after(x)
    finally:
        pr.disable()
    want = _fn(x)
    torch.testing.assert_close(first, want)   # (compiled sin: within an ulp of eager's)
    torch.testing.assert_close(second, want)
    assert f.graphs, "nothing compiled"
    names = {k[2] for k in pstats.Stats(pr).stats}
    assert "_after" in names, "cProfile stopped profiling after the compiled call"


def test_compiled_call_under_torch_profiler_with_stack():
    f = mlircap.compile(_fn)
    x = torch.randn(8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as p:
        first, second = f(x), f(x)
    want = _fn(x)
    torch.testing.assert_close(first, want)   # (compiled sin: within an ulp of eager's)
    torch.testing.assert_close(second, want)
    assert f.graphs, "nothing compiled"
    assert len(p.key_averages()) > 0
    assert sys.getprofile() is None


def test_python_profile_function_kept():
    calls = []

    def prof(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)
    f = mlircap.compile(_fn)
    x = torch.randn(8)
    sys.setprofile(prof)
    try:
        f(x)
        assert sys.getprofile() is prof
        _after(x)
    finally:
        sys.setprofile(None)
    assert "_after" in calls
