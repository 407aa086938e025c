"""OpInfo sweep (bench/opinfo.py, issue 10 and issue 12 item 1), session 25 (held-out seeds
2211-2213): op forms that ran through torch (an eager island, a whole graph eagerly) or gave
another result than eager, and the warnings that name what runs eagerly."""
import inspect
import warnings

import torch

import mlircap
from mlircap import backend


# ------------------------------------------------------------- a failing CPU pass pipeline
# When a pass of the CPU pipeline failed ('pass pipeline failed': the fpowi rewrite of
# mlircap-simplify-math did, bb44b8b), the backend probed only the graph's non-pointwise
# ops to find the culprit: a failing pointwise op was never found, and the whole graph ran
# eagerly with a warning naming no op. Now the pointwise ops are probed too: the op that
# fails alone is an island through torch, named with the user's line; the rest compiles.
# (The failing codegen is simulated: the compile worker's CPU plan error, as the core
# gives it, for any graph holding aten.atan2.)

def _failing_atan2(monkeypatch, error):
    real = backend._lower

    def lower(raw_ir, device, options, check=False):
        out = real(raw_ir, device, options, check)
        if "torch.aten.atan2" in raw_ir:
            return {**out, "cpu_plan_error": error}
        return out

    monkeypatch.setattr(backend, "_lower", lower)
    monkeypatch.setattr(backend, "_PROBES", {})
    monkeypatch.setattr(backend, "_ACCEPTED_KINDS", set())


_PIPELINE_ERROR = ("pass pipeline failed\nloc(\"-\":3:10): error: failed to legalize operation "
                   "'math.atan2' that was explicitly marked illegal")


def _atan2_graph(x, y):
    a = x.sum(1, keepdim=True) * 2
    b = torch.atan2(a, y)   # the failing op
    return (b + 1).softmax(-1) @ x.t()


def test_cpu_pipeline_failure_on_a_pointwise_op_is_an_island_named_with_its_line(monkeypatch):
    _failing_atan2(monkeypatch, _PIPELINE_ERROR)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    fast = mlircap.compile(_atan2_graph)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [fast(x, y) for _ in range(2)]
    for out in outs:
        torch.testing.assert_close(out, _atan2_graph(x, y))
    text = "\n".join(str(w.message) for w in seen)
    line = inspect.getsourcelines(_atan2_graph)[1] + 2
    assert f"aten.atan2 at {__file__}:{line} (CPU codegen failed)" in text, text
    assert "eagerly" not in text, text   # no whole graph ran eagerly
    # the ops around it compiled: the graph before atan2 and the one after
    assert len(fast.graphs) >= 2 and all(g.fallback_reason is None and g.executable is not g.gm
                                         for g in fast.graphs), [g.fallback_reason for g in fast.graphs]


def test_codegen_failure_probe_names_the_cpu_or_gpu(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx

    _failing_atan2(monkeypatch, _PIPELINE_ERROR)
    gm = make_fx(_atan2_graph)(torch.randn(4, 5), torch.randn(4, 5))
    e = backend._PlanRejected("CPU", _PIPELINE_ERROR)
    assert backend._codegen_failed(e, "cpu") and "math.atan2" in str(e)
    found = backend._probe_rejected(gm, "cpu", backend.Options(), pointwise=backend._codegen_failed(e, "cpu"))
    assert [v.split(" at ")[0] for v in found.values()] == ["aten.atan2"], found
    # a plan builder's rejection (no kernel for an op) is not a pipeline failure: as before
    assert not backend._codegen_failed(backend._PlanRejected("CPU", "error: mlircap: unsupported op 'topk'"), "cpu")

