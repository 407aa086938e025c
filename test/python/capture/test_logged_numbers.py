"""Numbers a compiled function logs into the program's state: `losses.append(loss.item())`,
`stats["ms"] = (time.perf_counter() - t0) * 1e3`, `times.append(time.perf_counter() - t0)`.
The number logged was guarded by value, so each call missed and recorded again (a recompile per
call until cache_limit, then eager); the write is now replayed as the number's expression, of
this call's values. Each case is compared with eager for the values logged, call by call."""
import time
import types

import torch

import mlircap


def _run(fn, reset, state, calls=6, seed=0):
    """Runs fn eagerly, then compiled, on the same inputs from the same state; returns both
    states' snapshots after each call and the compiled function."""
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(4, 8, generator=gen) for _ in range(calls)]
    reset()
    eager = []
    for x in xs:
        fn(x)
        eager.append(state())
    reset()
    f = mlircap.compile(fn)
    comp = []
    for x in xs:
        f(x)
        comp.append(state())
    return eager, comp, f


torch.manual_seed(0)
_lin = torch.nn.Linear(8, 1)
_hist: list = []
_stats: dict = {}


def _reset():
    _hist.clear()
    _stats.clear()


def _item_append(x):
    loss = _lin(x).pow(2).mean()
    _hist.append(loss.item())
    return loss


def _float_expr_append(x):
    loss = _lin(x).pow(2).mean()
    _hist.append(float(loss) * 2 + 1)
    return loss


def _two_appends(x):
    y = _lin(x)
    _hist.append(y.max().item())
    _hist.append(y.min().item())
    return y


def _append_then_read_back(x):
    loss = _lin(x).pow(2).mean()
    _hist.append(loss.item())
    return x * _hist[-1]


def _append_then_len(x):
    loss = _lin(x).pow(2).mean()
    _hist.append(loss.item())
    return x * len(_hist)


def _close(a, b):
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(p, q) for p, q in zip(a, b))
    return abs(a - b) <= 1e-5 * max(1.0, abs(a))


def test_item_appended_to_a_list_compiles_once():
    for fn in (_item_append, _float_expr_append, _two_appends):
        eager, comp, f = _run(fn, _reset, lambda: list(_hist))
        assert all(_close(e, c) for e, c in zip(eager, comp)), (fn.__name__, eager[-1], comp[-1])
        assert len(f.graphs) == 1, f"{fn.__name__}: {len(f.graphs)} graphs for 6 calls"


def test_appended_number_read_back_and_len_stay_eager_equal():
    for fn in (_append_then_read_back, _append_then_len):
        gen = torch.Generator().manual_seed(1)
        xs = [torch.randn(4, 8, generator=gen) for _ in range(5)]
        _reset()
        want = [fn(x) for x in xs]
        want_hist = list(_hist)
        _reset()
        f = mlircap.compile(fn)
        got = [f(x) for x in xs]
        assert _close(want_hist, list(_hist)), fn.__name__
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w)


class _Timed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.times: list = []
        self.stats = {"ms": 0.0}
        self.ns = types.SimpleNamespace(last=0.0)

    def forward(self, x):
        t0 = time.perf_counter()
        y = self.lin(x).relu()
        dt = time.perf_counter() - t0
        self.times.append(dt)
        self.stats["ms"] = dt * 1e3
        self.ns.last = time.perf_counter()
        return y


def test_timing_code_in_forward_compiles_once():
    m = _Timed()
    f = mlircap.compile(m)
    x = torch.randn(4, 8)
    lasts, mss = [], []
    for _ in range(6):
        torch.testing.assert_close(f(x), m.lin(x).relu())
        lasts.append(m.ns.last)
        mss.append(m.stats["ms"])
    assert len(m.times) == 6 and all(0 <= t < 60 for t in m.times)
    assert len(set(lasts)) == 6 and lasts == sorted(lasts), "the clock was not read at each call"
    assert all(abs(ms - t * 1e3) < 1e-9 for ms, t in zip(mss, m.times))
    assert len(f.graphs) == 1, f"{len(f.graphs)} graphs for 6 calls"
