"""A write in place through a view made by unfold (unfold_writes.py): the graph runs as
captured, so the elements no window covers keep their values (aot's inverse of unfold,
unfold_backward, zeroed them: bench/fuzz_graphs.py --grad seed 3931)."""
import warnings

import torch

import mlircap


def _gap(x):
    v = x * 2
    v.unfold(0, 1, 2)[0].bernoulli_(0.5)     # windows with a gap between them (fuzz seed 3931)
    return v


def _tail(x):
    v = x * 2
    v.unfold(0, 2, 2)[1:].mul_(5)            # 7 rows in windows of 2: the last row in none
    return v


def _setitem(x):
    v = x * 2
    w = v.unfold(0, 1, 3)
    w[1] = 3
    return v, w


def _read_only(x):
    return x.unfold(0, 2, 1).sum(-1) * 2      # no write: still compiled


def _same(a, b):
    if isinstance(a, tuple):
        return all(_same(p, q) for p, q in zip(a, b))
    return torch.equal(a, b)


def test_writes_through_unfold_keep_the_uncovered_elements():
    for fn in (_gap, _tail, _setitem):
        c = mlircap.compile(fn)
        for _ in range(3):
            x = torch.randn(7, 2)
            torch.manual_seed(0)
            want = fn(x)
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = c(x)
            assert _same(got, want), fn.__name__


def test_the_refusal_names_only_writes_through_unfold():
    from torch.fx import symbolic_trace

    from mlircap.unfold_writes import written_through_unfold

    assert written_through_unfold(symbolic_trace(_read_only)) is None
    assert written_through_unfold(symbolic_trace(_tail)).name == "mul_"
    c = mlircap.compile(_read_only)
    x = torch.randn(7, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")    # compiled: no fallback warning
        for _ in range(2):
            torch.testing.assert_close(c(x), _read_only(x))
