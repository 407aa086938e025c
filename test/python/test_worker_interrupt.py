"""A compile interrupted while the parent waits on the compile worker (Ctrl-C during a long
compile, a signal handler raising, a timeout library's exception) left the worker's answer to that
request in the pipe: the next request read it as its own, and a graph was built from another
graph's lowered IR."""
import warnings

import torch

import mlircap
from mlircap import worker


def _a(x):
    return (x.sin() * 3 + x.cos()).sum(-1)


def _b(x):
    return (x * 2 + 1).relu().sum(-1)   # the signature of _a: run as _a, no error tells


def test_interrupted_request_does_not_answer_the_next(monkeypatch, tmp_path):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    worker._worker.stop()
    real_read = worker._read
    calls = []

    def read_then_interrupt(fd, deadline=None):
        msg = real_read(fd, deadline)
        calls.append(msg)
        if len(calls) == 1:   # the first stage message of the first request: the user presses Ctrl-C
            raise KeyboardInterrupt
        return msg
    monkeypatch.setattr(worker, "_read", read_then_interrupt)
    fa, fb = mlircap.compile(_a), mlircap.compile(_b)
    x = torch.randn(5, 6)
    try:
        fa(x)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt did not reach the caller")
    assert len(calls) == 1
    y = torch.randn(5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # compiled, not an eager fallback
        got = [fb(y) for _ in range(3)]   # (the first call returns the recording's own result)
        again = fa(x)
    for g in got:
        torch.testing.assert_close(g, _b(y))   # (was _a(y): _b compiled from _a's lowered IR)
    assert all("math.sin" not in g.linalg_ir for g in fb.graphs)
    torch.testing.assert_close(again, _a(x))
    assert all(not g.fallback_reason for g in fb.graphs + fa.graphs)
