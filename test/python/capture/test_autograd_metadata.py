"""Autograd metadata of a tensor argument that the tensor guards (dtype, shape, strides,
requires_grad, dispatch keys) do not cover: `x.is_leaf`, `x.grad_fn is None`,
`x.retains_grad`, `x.output_nr`, `x._is_view()`.  `x.is_leaf` was returned unguarded, so a
non-leaf argument requiring grad replayed the variant of a leaf one (a silent wrong result);
`x.grad_fn is None` broke the graph (bench/modules.py requires_grad_input: 1 graph + a break).
Each is guarded by its value where read off an argument (tensor_meta._autograd_meta_guarded); of a
tensor the graph computed it follows from the graph.  Every call is compared with eager."""
import torch
import torch.nn as nn

from harness import EAGER, same
from mlircap.capture import capture


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x).tanh()
        scale = 2.0 if x.is_leaf else 3.0
        if x.grad_fn is None:
            y = y + 1
        return y * scale, y.requires_grad, x._is_view(), x.retains_grad


def test_leaf_grad_fn_and_view_of_an_argument_are_guarded():
    """(Arguments made here, not by the harness, which hands every call leaves.)"""
    torch.manual_seed(0)
    m = Net()
    fast = capture(m, EAGER)
    a = torch.randn(2, 3, requires_grad=True)
    r = torch.randn(2, 3, requires_grad=True) * 1
    r.retain_grad()
    calls = [a, a * 1, a.detach()[:1], torch.randn(2, 3), a, a * 2, r]
    for i, x in enumerate(calls):
        same(fast(x), m(x), f"call {i}")
    c = fast._mlircap_capture
    # a leaf requiring grad, a non-leaf, a view, a plain leaf, a non-leaf retaining its grad;
    # each one graph without a break (a non-leaf's `x.grad_fn is None` too, guarded: test_capture24)
    assert len(c.variants) == 5, [v.breaks for v in c.variants]
    assert sum(1 for v in c.variants if len(v.graphs) == 1 and not v.breaks) == 5, [v.breaks for v in c.variants]
    assert c.stats.replays >= 2


def test_is_leaf_alone():
    """`x.is_leaf` of a leaf argument replayed for a non-leaf one (before: one variant)."""
    def f(x):
        return x * (2 if x.is_leaf else 3)
    fast = capture(f, EAGER)
    a = torch.randn(3, requires_grad=True)
    for i, x in enumerate((a, a * 1, a, a * 2)):
        same(fast(x), f(x), f"call {i}")
    assert len(fast._mlircap_capture.variants) == 2
