"""Mutable default arguments of traced helpers: a dict used as a cache across calls
(`def positions(n, _cache={})`), a list accumulating history, a tensor keyword default
updated in place.  They live on the function (`__defaults__` / `__kwdefaults__`), outside
the call; the recording read them as locals, so a tensor the cache held from before the call
was 'of unknown origin' and capture gave up (bench/capture2.py mutable_default_arg_cache),
and writes to them were not replayed.  They are read through that location now."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(4)]


def test_dict_default_cache_filled_before_the_call():
    run_program("""
def positions(n, _cache={}):
    if n not in _cache:
        _cache[n] = torch.arange(n, dtype=torch.float32)
    return _cache[n]
def make():
    positions(8), positions(3)   # filled outside the captured call
    def f(x):
        return x + positions(x.shape[-1]) + positions(3).sum()
    return f
def state(f):
    return sorted(positions.__defaults__[0])
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_list_default_accumulates_across_calls():
    """The notorious `_hist=[]` default: every call appends; its length is returned."""
    run_program("""
def record(t, _hist=[]):
    _hist.append(t.sum())
    return len(_hist)
def make():
    def f(x):
        n = record(x)
        return x * 2, n
    return f
def state(f):
    return list(record.__defaults__[0])
""", [(x,) for x in X])


def test_tensor_keyword_default_updated_in_place():
    run_program("""
def ema(x, *, buf=torch.zeros(8)):
    buf.mul_(0.5).add_(x.mean(0), alpha=0.5)
    return x - buf
def make():
    def f(x):
        return ema(x) * 2
    return f
def state(f):
    return ema.__kwdefaults__["buf"]
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)
