"""torch.vmap(func, in_dims)(*args) in captured code: its ops run on batched tensors that no
torch function mode hands the recorder, so capture gave up on the whole function (bench/
capture2.py vmap_per_sample_param: 'tensor of unknown origin').  Where func is pure tensor
code of its arguments (torch's functions through a global module allowed, guarded) the call
is one node of the graph (as Dynamo's vmap op: vmap_per_sample_param 0 graphs -> 1); else a
step between graphs, replayed as vmap_impl(func, in_dims, ...) with func rebuilt at replay
(a module's bound method, a global function); autograd runs through both."""
import copy

import pytest
import torch
import torch.nn as nn
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mlircap
from harness import EAGER, run_program, same
from mlircap.capture import capture

SCALE = 1.0


class PerSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8, 4))

    def _one(self, x, w):
        return torch.tanh(x @ w).sum()

    def forward(self, x):
        h = torch.relu(self.pre(x))
        s = torch.vmap(self._one, in_dims=(0, None))(h, self.w)
        return s * 2 + h.mean(-1)


def test_vmap_of_a_bound_method_with_grads():
    torch.manual_seed(0)
    ref = PerSample()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(3):
        x = torch.randn(5, 8)
        oe, oc = ref(x), fast(x)
        same(oc, oe, f"call {i}")
        oe.sum().backward()
        oc.sum().backward()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p.grad, q.grad, f"call {i} grad {n}")
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    # pure tensor code: one node of the graph (special_calls._vmap_node), no step between graphs
    assert c.stats.replays == 2 and c.graph_count == 1, (c.stats.replays, c.graph_count)


def test_vmap_of_a_global_function_with_out_dims():
    run_program("""
def pairwise(a, b):
    return (a[:, None] - b[None, :]).abs().sum(-1)
def make():
    def f(x, y):
        d = torch.vmap(pairwise, in_dims=(0, 0), out_dims=1)(x * 2, y)
        return d.softmax(-1)
    return f
""", [(torch.randn(3, 4, 2), torch.randn(3, 5, 2)) for _ in range(3)])


class ReadsGlobal(PerSample):   # the mapped function reads a global number: a step between graphs
    def _one(self, x, w):
        return torch.tanh(x @ w).sum() * SCALE


def _aot(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward))


COMPILERS = {"eager": lambda m: capture(m, EAGER), "aot": lambda m: capture(m, _aot), "mlircap": mlircap.compile}


@pytest.mark.parametrize("how", COMPILERS)
@pytest.mark.parametrize("cls", [PerSample, ReadsGlobal])
def test_vmap_node_backends_and_impure_functions(cls, how):
    global SCALE
    torch.manual_seed(0)
    ref = cls()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    orig = torch.tanh
    try:
        for i in range(4):
            SCALE = 1.0 + i
            if i == 3:   # torch.tanh replaced: the node's guard on it fails, recorded again
                torch.tanh = lambda t: orig(t) * 3
            x = torch.randn(5, 8)
            oe, oc = ref(x), fast(x)
            assert torch.allclose(oc, oe, atol=1e-5), i
            oe.sum().backward()
            oc.sum().backward()
            for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
                assert torch.allclose(p.grad, q.grad, atol=1e-5), (i, n)
    finally:
        torch.tanh = orig
    c = fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture
    assert not any(v.eager for v in c.variants)
    if cls is PerSample:
        assert len(c.variants[0].graphs) == 1 and not c.variants[0].breaks
        # (the replacement is the test's own Python function, not torch's: a step between graphs)
        assert len(c.variants) == 2 and c.variants[1].breaks, c.stats.recompile_reasons
    else:
        assert all(any("torch.vmap" in b[0] for b in v.breaks) for v in c.variants)


NESTED = """
def mv(row, m):
    return torch.dot(row, m[:, 0]) + m.sum()
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 4))
    def forward(self, x):
        inner = torch.func.vmap(mv, in_dims=(0, None))
        outer = torch.func.vmap(inner, in_dims=(0, None), out_dims=1)
        return outer(x, self.w), torch.func.vmap(torch.dot, in_dims=(0, None))(x[0], self.w[:, 1])
def make():
    return Net()
"""


def test_nested_vmap_and_vmap_of_a_torch_function():
    """A vmap of a vmapped pure function (out_dims=1 outside) and a vmap of torch.dot: one
    graph.  Before: capture gave up on the function ('cannot reproduce value of type function':
    the inner vmapped function, made in the call, as the argument of a step between graphs)
    (bench/modules7.py func_nested_vmap_in_out_dims)."""
    c = run_program(NESTED, [(torch.randn(3, 4, 5),) for _ in range(3)])
    assert c.graph_count == 1 and all(not v.breaks for v in c.variants), [v.breaks for v in c.variants]


@pytest.mark.parametrize("how", ["aot", "mlircap"])
def test_nested_vmap_compiled(how):
    ns = {}
    exec("import torch\nimport torch.nn as nn\n" + NESTED, ns)
    torch.manual_seed(0)
    ref = ns["make"]()
    m = copy.deepcopy(ref)
    fast = capture(m, _aot) if how == "aot" else mlircap.compile(m)
    for i in range(3):
        x = torch.randn(3, 4, 5)
        oe, oc = ref(x), fast(x)
        for a, b in zip(oe, oc):
            assert torch.allclose(a, b, atol=1e-5), i
        sum(o.sum() for o in oe).backward()
        sum(o.sum() for o in oc).backward()
        assert torch.allclose(m.w.grad, ref.w.grad, atol=1e-5), i
    c = fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture
    assert c.graph_count == 1 and not any(v.eager or v.breaks for v in c.variants)
