"""A differentiated graph that computes one small op (a graph break's remainder: logits and a
loss concatenated) runs as captured (backend._one_small_op): compiled it fuses nothing, and its
call pays aot_autograd's Function and wrappers for eager's one kernel. Values and gradients are
eager's; a graph of two ops, or of one large op, still compiles."""
import pytest
import torch

import mlircap
from mlircap import backend, logs

_MESSAGE = "graph of one small op with gradients"


@pytest.fixture
def log(capsys):
    logs.set_logs("fallback")
    yield capsys
    logs.set_logs()


def _step(fn, *args):
    ins = [a.detach().clone().requires_grad_() for a in args]
    out = fn(*ins)
    (out * torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
    return out.detach(), [x.grad for x in ins]


def _matches_eager(fn, args, calls=3):
    fast = mlircap.compile(fn)
    for _ in range(calls):
        got, got_grads = _step(fast, *args)
        want, want_grads = _step(fn, *args)
        torch.testing.assert_close(got, want)   # (compiled sin: within an ulp of eager's)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)
    return fast


def test_concatenation_of_logits_and_loss_runs_as_captured(log):
    def f(logits, loss):
        return torch.cat([logits.flatten(1), loss.expand(logits.shape[0], 1)], dim=1)

    _matches_eager(f, (torch.randn(2, 5, 3), torch.randn(())))
    assert _MESSAGE in log.readouterr().err


@pytest.mark.parametrize("case", ["two_ops", "large"])
def test_more_work_still_compiles(log, case):
    if case == "two_ops":
        def f(x):
            return (x * 2).sin()
        args = (torch.randn(8, 4),)
    else:
        def f(x):
            return x.sin()
        args = (torch.randn(backend.TRIVIAL_GRAPH_ELEMENTS + 1),)
    fast = _matches_eager(f, args)
    assert _MESSAGE not in log.readouterr().err
    assert fast.graphs and all(g.executable is not g.gm for g in fast.graphs)


def test_inference_graph_of_one_op_still_compiles(log):
    def f(x):
        return x.sin()

    fast = mlircap.compile(f)
    x = torch.randn(8)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x), f(x))
    assert _MESSAGE not in log.readouterr().err
