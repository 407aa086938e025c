"""Held-out trust sweep, batch 9 (issue 10): regressions found by bench/modules8.py (image
restoration, geometry, attention variants, generative samplers, RL, LLM quantization, scientific
code, tensor semantics and autograd machinery). Each test runs mlircap.compile against eager over
several calls and compares outputs and the gradients a call leaves.

PYTEST_DONT_REWRITE"""

import torch

import mlircap


def _graphs_compiled(fast):
    return [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]


# ----------------------------------------------- two backward passes through one compiled graph
class _TwoBackward(torch.nn.Module):
    """A loss backpropagated twice (GAN / multi-loss code): backward(retain_graph=True), the
    gradient cloned, then a multiple of the same loss backpropagated again. The second loss is
    its own captured graph whose inputs are the loss and the weight (read for its .grad)."""

    def __init__(self, retain_second):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.retain_second = retain_second

    def forward(self, x):
        y = torch.tanh(self.lin(x)).sum()
        y.backward(retain_graph=True)
        g1 = self.lin.weight.grad.clone()
        (y * 2).backward(retain_graph=self.retain_second)
        return g1, self.lin.weight.grad.clone(), self.lin.bias.grad.clone(), y.detach()


def _run_two_backward(retain_second):
    torch.manual_seed(0)
    ref = _TwoBackward(retain_second)
    mine = _TwoBackward(retain_second)
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    for i in range(4):
        x = torch.randn(4, 3)
        for m in (ref, mine):
            m.zero_grad(set_to_none=False)
        want = ref(x)
        got = fast(x)
        for j, (w, g) in enumerate(zip(want, got)):
            torch.testing.assert_close(g, w, msg=lambda m: f"call {i}, output {j}: {m}")
    assert _graphs_compiled(fast)


def test_second_backward_through_retained_graph():
    """The second backward (no retain_graph) raised 'Trying to backward through the graph a
    second time' on the first compiled call: the graph of `y * 2` takes y and the weight, and
    its backward's autograd.grad with respect to the weight went on through y's own graph,
    freeing its saved tensors before the engine reached it."""
    _run_two_backward(retain_second=False)


def test_retained_graphs_gradient_not_counted_twice():
    """With retain_graph on both passes nothing raised, but the weight's gradient through y was
    returned twice (by the `y * 2` graph's backward and through the engine): a wrong .grad."""
    _run_two_backward(retain_second=True)
