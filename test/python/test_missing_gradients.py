"""A compiled graph's node that gets no gradient at all passes none on, as eager's backward
functions do (lean_autograd._missing_gradients). bench/fuzz_graphs.py --grad --families edges
seed 340: `v1 = (x3 * 2)[x3 > 0]; v1.mul_(2); return x2.sum() * 0`. The graph after the boolean
mask writes v1 beside computing the loss, so its node passes v1 no gradient; the mask's backward
then passes the graph before it none, and that graph's autograd Function materialized zeros and
ran: x3.grad was a tensor of zeros from the second call on where eager leaves it None (an
optimizer with momentum or weight decay then steps x3)."""
import torch

import mlircap


def seed340(x2, x3):
    v1 = (x3 * 2.0)[x3 > 0]
    v1.mul_(2)
    return x2.sum() * 0


def test_a_node_without_gradients_passes_none_on():
    fast = mlircap.compile(seed340)
    for _ in range(4):
        x2, x3 = torch.randn(4, requires_grad=True), torch.randn(9, requires_grad=True)
        fast(x2, x3).backward()
        assert x3.grad is None
        torch.testing.assert_close(x2.grad, torch.zeros(4))


def heads(x, w):
    h = x @ w
    return h.relu(), h.sigmoid(), h.argmax(-1)


def test_some_gradients_missing_are_zeros_as_before():
    fast = mlircap.compile(heads)
    for _ in range(4):
        x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
        x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
        got, want = fast(x, w), heads(x2, w2)
        got[1].sum().backward(retain_graph=True)   # one head (the other's gradient missing)
        want[1].sum().backward(retain_graph=True)
        got[0].pow(2).sum().backward()
        want[0].pow(2).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
        torch.testing.assert_close(w.grad, w2.grad)
