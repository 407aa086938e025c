"""OpInfo sweep (bench/opinfo.py, bench/opinfo_grad.py; issue 10), held-out seeds 503, 511
and 509 on 2026-12-04: what they found, fixed. Each case compares compiled calls with eager
bit for bit and checks that the first call's recording is replayed by the next ones with
every graph compiled (no eager island, no 'runs through torch' warning)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import mlircap
from mlircap import logs


@pytest.fixture
def fallback_log(capsys):
    logs.set_logs("fallback")
    yield capsys
    logs.set_logs()


def _same(g, w):
    assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
    torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


def _check(fn, args, log, calls=3):
    """fn compiled: eager's values bit for bit, every graph compiled, no eager island."""
    want = fn(*[a.clone() for a in args])
    fast = mlircap.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no 'runs through torch' / 'eagerly' warning
        for _ in range(calls):
            got = fast(*[a.clone() for a in args])
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                _same(g, w)
    err = log.readouterr().err
    assert "eager islands" not in err, err
    cap = fast._compiled._mlircap_capture
    assert cap.stats.records == 1 and cap.stats.replays >= 1, cap.stats
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]
    return fast


# ------------------------------------------------- fallback: uint8 reflection / replication pads
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 5), (1, 2)), ((2, 3, 4, 5), (1, 2, 2, 1)),
                                       ((1, 2, 3, 4, 5), (1, 2, 2, 1, 0, 1))])
def test_uint8_reflection_and_replication_pads_compile(fallback_log, mode, shape, pad):
    # they only copy elements: computed in int32 like uint8's other movements (widen.py);
    # they ran through torch (OpInfo nn.functional.pad.reflect uint8)
    x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    _check(lambda x: F.pad(x, pad, mode=mode) + 7, [x], fallback_log)

