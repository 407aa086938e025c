"""The check the test_trust_* files make of a function compiled by mlircap: eager's values
(bit for bit unless `exact=False`), every graph compiled (no eager island, no fallback), and
no 'runs through torch' / 'runs eagerly' warning. A module beside the tests (pytest puts
test/python on sys.path), as simt.py is."""
import re
import warnings

import torch

import mlircap


def same(g, w, exact=True, signs=False):
    """`g` is eager's `w`: dtype, shape and values (NaN where NaN; `signs`: -0.0 is not 0.0)."""
    if isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
    tol = {"rtol": 0, "atol": 0} if exact else {}
    torch.testing.assert_close(g, w, equal_nan=True, **tol)
    if signs and isinstance(g, torch.Tensor) and g.is_floating_point():   # (a NaN's sign is not compared)
        num = ~w.isnan()
        assert torch.equal(g.signbit()[num], w.signbit()[num]), (g, w)


def all_compiled(fast):
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]


def check_compiled(fn, args, log, exact=True, calls=3, signs=False, one_record=False, warnings_error=True):
    """fn compiled, called `calls` times on copies of `args`: `same` as eager each time, no
    eager island in the fallback log (`log`: the fallback_log fixture), every graph compiled;
    `one_record`: the first call's recording replayed by the others. Returns the compiled fn."""
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        if warnings_error:
            warnings.simplefilter("error")   # no 'runs through torch' / 'eagerly' warning
        for _ in range(calls):
            got = fast(*[a.clone() for a in args])
            gs = got if isinstance(got, tuple) else (got,)
            ws = want if isinstance(want, tuple) else (want,)
            assert len(gs) == len(ws), (got, want)
            for g, w in zip(gs, ws):
                same(g, w, exact, signs)
    err = log.readouterr().err
    assert not re.search(r"eager islands: \S", err), err
    if one_record:
        cap = fast._compiled._mlircap_capture
        assert cap.stats.records == 1 and cap.stats.replays >= 1, cap.stats
    all_compiled(fast)
    return fast
