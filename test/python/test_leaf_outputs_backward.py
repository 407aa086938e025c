"""A graph run under capture's higher-order path (_RecomputeForHigherOrder) whose output is one of
its inputs returned as it is: bench/fuzz_graphs.py --grad --families edges seed 385,
`v0 = x0 * 2; v0[-1, -1].item(); return v0.sum(), v0.detach()`. The .item() read splits the
graphs, the second takes v0 as a cut leaf and aot_autograd returns that leaf for v0.detach();
the backward's autograd.grad then got the leaf as an output and raised 'element 2 of tensors does
not require grad and does not have a grad_fn' from the second call on, where eager runs."""
import torch

import mlircap


def seed385(x0):
    v0 = x0 * 2
    v0[-1, -1].item()
    return v0.sum(), v0.detach()


def test_detached_input_returned_beside_a_loss():
    fast = mlircap.compile(seed385)
    for _ in range(4):
        x0 = torch.randn(7, 12, requires_grad=True)
        x1 = x0.detach().clone().requires_grad_()
        got, want = fast(x0), seed385(x1)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        got[0].backward()
        want[0].backward()
        torch.testing.assert_close(x0.grad, x1.grad)
