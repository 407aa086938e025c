"""partition._host_outputs: in a graph that runs on an accelerator, the ops making a CPU output
(and the CPU tensors it is made from) run through torch as 'host' islands; the rest stays in the
compiled part. Before, one CPU output made the whole graph run eagerly (BEiT's relative position
index built with torch.arange on the CPU: 'graph output view_22 is on cpu, the graph is compiled
for cuda', its training step 0.48x eager on an H100). The accelerator here is the meta device
(this host has no GPU); test/python/gpu/test_host_outputs_gpu.py runs it on CUDA."""
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mlircap.partition import BY_DESIGN, partition


def _trace(f, *shapes, device="meta"):
    with FakeTensorMode(allow_non_fake_inputs=True):
        args = [torch.empty(s, device=device) for s in shapes]
        return make_fx(f, tracing_mode="fake")(*args)


def _rel_index(table, x):
    idx = torch.arange(4).view(2, 2) * 2          # made on the CPU and returned (saved for a backward)
    scale = torch.tensor(0.5)                     # a CPU scalar that only feeds accelerator ops
    return table[idx.view(-1)] * scale + x.sum(), idx


def test_cpu_outputs_of_an_accelerator_graph_are_host_islands():
    parts = partition(_trace(_rel_index, (8,), (3,)))
    eager = {n: r for p in parts if p.eager for n, r in p.reasons.items()}
    assert eager == {"arange": "host", "view": "host", "mul": "host"}
    compiled = [n.name for p in parts if not p.eager for n in p.nodes]
    # the CPU scalar stays compiled (a constant there), and so does everything on the accelerator
    assert {"lift_fresh_copy", "index", "mul_1", "sum_1", "add"} <= set(compiled)
    assert "host" in BY_DESIGN   # run through torch by design: no 'unsupported' warning, strict holds


def test_cpu_graphs_have_no_host_islands():
    parts = partition(_trace(_rel_index, (8,), (3,), device="cpu"))
    assert not any(r == "host" for p in parts for r in p.reasons.values())
