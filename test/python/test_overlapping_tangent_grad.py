"""A gradient of a graph output whose elements share memory reaches the compiled backward with
its values (lean_autograd._no_overlapping_tangents): bench/fuzz_graphs.py --grad seed 3374,
minimised. A graph returns an overlapping view of an intermediate (`(x * 1.5).unfold(0, 3, 1)`)
to a boolean-mask index that splits the graphs; aot_autograd lays the incoming gradient out as
the output was traced (empty_strided with the overlapping strides, then copy_), which kept one
value of each shared element: from the second call on (compiled), x.grad differed from eager's
in about half its values."""
import torch

import mlircap


def overlapping(x0):
    v5 = (x0 * 1.5).unfold(0, 3, 1)
    v7 = v5[v5 > 0]
    return (v7 * torch.arange(v7.numel())).sum()


def test_overlapping_view_output_before_a_mask():
    torch.manual_seed(0)
    x = torch.randn(24)
    fast = mlircap.compile(overlapping)
    for _ in range(3):
        a, b = x.detach().requires_grad_(), x.detach().clone().requires_grad_()
        fast(a).backward()
        overlapping(b).backward()
        torch.testing.assert_close(a.grad, b.grad)


def expanded(x0):
    v = (x0 * 2).unsqueeze(1).expand(4, 3)   # expand: stride 0, every row the same memory
    m = v[v > 0]
    return (m * torch.arange(m.numel())).sum()


def test_expanded_view_output_before_a_mask():
    torch.manual_seed(1)
    x = torch.randn(4)
    fast = mlircap.compile(expanded)
    for _ in range(3):
        a, b = x.detach().requires_grad_(), x.detach().clone().requires_grad_()
        fast(a).backward()
        expanded(b).backward()
        torch.testing.assert_close(a.grad, b.grad)
