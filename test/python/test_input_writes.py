"""Graphs that write their inputs (BatchNorm's running statistics and batch count in train
mode, an in-place op on an argument): aot_autograd keeps the writes in the graph as trailing
copy_ nodes (keep_inference_input_mutations), backend._hoist_input_copies turns them into
extra outputs and the compiled call writes them back with one foreach copy per dtype, instead
of aot_autograd's wrapper copying each one (on CUDA after a clone out of the CUDA graph).
Results and the written inputs against eager, with and without grad mode."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import mlircap
from mlircap.backend import _hoist_input_copies


def _ops(fn, *args):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
    return [e.name for e in p.events()]


@pytest.mark.parametrize("grad", [False, True])
def test_batchnorm_running_stats_written_back_once(grad):
    torch.manual_seed(0)
    mine = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8)).train()
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8)).train()
    ref.load_state_dict(mine.state_dict())
    fast = mlircap.compile(mine)
    with torch.set_grad_enabled(grad):
        for i in range(4):
            x = torch.randn(4, 3, 10, 10)
            got = fast(x) if i < 3 else None
            if i == 3:
                names = _ops(fast, x)
                want = ref(x)
                continue
            want = ref(x)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            if grad:
                got.square().mean().backward()
                want.square().mean().backward()
    for (k, a), b in zip(mine.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=k)
    if grad:
        for (k, a), b in zip(mine.named_parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-4, msg=k)
    ex = fast.explain()
    assert ex.graph_count == 1 and not ex.eager_reasons, str(ex)
    # six written buffers (2 x running_mean, running_var, num_batches_tracked): one foreach
    # copy per dtype (float32, int64) instead of a copy_ per buffer from aot_autograd's wrapper
    assert names.count("aten::_foreach_copy_") == 2, sorted(set(names))


def test_inplace_ops_on_arguments():
    def f(x, y, n):
        x.add_(1)
        y.mul_(2)
        n += 1
        return x * y

    fast = mlircap.compile(f)
    a, b, c = torch.randn(5), torch.randn(5), torch.zeros((), dtype=torch.int64)
    a2, b2, c2 = a.clone(), b.clone(), c.clone()
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(a, b, c), f(a2, b2, c2))
            assert torch.equal(a, a2) and torch.equal(b, b2) and torch.equal(c, c2)
    assert fast.explain().graph_count == 1


def test_hoisting_moves_only_final_writes():
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(torch.ops.aten.add.Tensor, (x, 1))
    g.call_function(torch.ops.aten.copy_.default, (x, a))        # overwritten below: dropped
    b = g.call_function(torch.ops.aten.mul.Tensor, (a, 2))
    g.call_function(torch.ops.aten.copy_.default, (x, b))
    c = g.call_function(torch.ops.aten.copy_.default, (y, a))    # its result is used: kept
    g.output((b, c))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert _hoist_input_copies(gm) == (2, [0])
    copies = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    assert len(copies) == 1 and copies[0].args[0].name == "y"
    outs = gm.graph.output_node().args[0]
    assert len(outs) == 3 and outs[2] is outs[0]
