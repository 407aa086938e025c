"""torch.vmap(func, in_dims)(*args) in captured code: its ops run on batched tensors that no
torch function mode hands the recorder, so capture gave up on the whole function (bench/
capture2.py vmap_per_sample_param: 'tensor of unknown origin').  The vmapped call is now a
step between graphs, replayed as vmap_impl(func, in_dims, ...) with func rebuilt at replay
(a module's bound method, a global function); autograd runs through it."""
import copy

import torch
import torch.nn as nn

from harness import EAGER, run_program, same
from mlircap.capture import capture


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
    assert c.stats.replays == 2 and c.graph_count == 2, (c.stats.replays, c.graph_count)


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
