"""The captured graphs must be runnable by real backends: make_fx re-tracing and
aot_autograd (what the mlircap compiler backend runs on the gm)."""
import pytest
import torch
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified
from torch.fx.experimental.proxy_tensor import make_fx

import harness
from programs import P


TRACED = []


def make_fx_backend(gm, example_inputs):
    # make_fx executes the ops while tracing, so trace on clones with a forked RNG and
    # check that the traced graph computes the same values; then run the gm itself.
    clones = [t.detach().clone().requires_grad_(t.requires_grad) for t in example_inputs]
    with torch.random.fork_rng():
        traced = make_fx(gm)(*clones)
    assert any(n.op == "call_function" for n in traced.graph.nodes) or not any(
        n.op == "call_function" for n in gm.graph.nodes)
    TRACED.append(traced)
    return gm.forward


def aot_backend(gm, example_inputs):
    return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, ex: make_boxed_func(g.forward))


BACKENDS = {"make_fx": make_fx_backend, "aot_autograd": aot_backend}
# F.one_hot reads tensor data inside its kernel, which real-mode make_fx cannot trace
# (capture then correctly falls back to eager for that graph; aot_autograd handles it).
EXCLUDE = {("make_fx", "dtype_conversion_and_factories")}
CASES = [(p, b) for b in BACKENDS for p in P if (b, p["name"]) not in EXCLUDE]


@pytest.mark.parametrize("p,backend", CASES, ids=[f"{p['name']}-{b}" for p, b in CASES])
def test_program_with_backend(p, backend, monkeypatch):
    monkeypatch.setattr(harness, "EAGER", BACKENDS[backend])
    kw = {k: v for k, v in p.items() if k not in ("name", "src", "calls")}
    harness.run_program(p["src"], p["calls"], name=p["name"], **kw)
