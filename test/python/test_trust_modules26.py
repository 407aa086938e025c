"""Defects bench/modules11.py found (session 26), each minimised: the program compiled and compared
with eager (outputs, gradients, state), and what used to run eagerly checked to compile."""
import warnings

import torch

import mlircap


class _ClampWithArgmax(torch.autograd.Function):
    """Two outputs, the second marked non-differentiable; needs_input_grad branches; a
    once_differentiable backward; a non-tensor argument kept on ctx."""

    @staticmethod
    def forward(ctx, x, w, k):
        y = x * w
        idx = y.argmax(-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, w)
        ctx.k = k
        return y.clamp(-k, k), idx

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gidx):
        x, w = ctx.saved_tensors
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = gy * w
        if ctx.needs_input_grad[1]:
            gw = (gy * x * 3).sum(0)
        return gx, gw, None


def _two_outputs(x, w):
    y, idx = _ClampWithArgmax.apply(x, w, 0.7)
    return (y * 2).sum(), idx + 1


def test_autograd_function_returning_a_tuple_of_tensors_is_one_graph_node():
    """bench/modules11.py autograd_fn_mark_non_differentiable_once_differentiable: a custom
    Function returning (values, indices) made capture give up on the whole forward ('apply
    returned no tensor'): only single-tensor results were held as a node. Now the tuple is the
    node's result (each element a getitem), one graph; outputs and both gradients as eager's."""
    for x_grad in (False, True):
        torch.manual_seed(0)
        x = torch.randn(4, 5, requires_grad=x_grad)
        w = torch.randn(5, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(x_grad), w.detach().clone().requires_grad_()
        fast = mlircap.compile(_two_outputs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(3):
                ref, got = _two_outputs(x, w), fast(x2, w2)
                ref[0].backward()
                got[0].backward()
                torch.testing.assert_close(got[0], ref[0])
                assert torch.equal(got[1], ref[1])
                torch.testing.assert_close(w2.grad, w.grad)
                if x_grad:
                    torch.testing.assert_close(x2.grad, x.grad)
        info = fast.explain()
        assert info.graph_count == 1 and info.break_count == 0, info

