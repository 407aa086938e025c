"""softshrink / hardshrink gradients at NaN inputs as eager's kernels give them.

torch registers Python kernels of aten.softshrink and aten.hardshrink at the Autograd key
(torch/_refs/nn/functional: one `torch.where` each, "for better code in the backward"), which
aot_autograd's trace runs: the backward is then the `where`'s, whose value at a NaN input is
`grad * 0` (softshrink: NaN where the incoming gradient is NaN or inf, else 0) or the gradient
passed through (hardshrink). Eager's own backward kernels (softshrink_backward,
hardshrink_backward) give a NaN input 0 in their CPU vector loop and the gradient in their
scalar loop (the tail of each inner loop: `x >= -lambd && x <= lambd ? 0 : grad`), and the
gradient on CUDA. --families modules --grad fuzz seed 7124 (softshrink, nearest upsampling,
amax over channels of an input with NaN / inf): 2 NaN gradients where eager has none.

While aot_autograd traces, `kernel_fixes` sends these ops to the C++ dispatcher (recorded
whole: their derivative is eager's, the *_backward op), and `decompositions` computes the
backward ops as eager's kernels do: the scalar loop's rule, and 0 at the NaNs eager's CPU
vector loop meets (frontend._zero_at_vector_loop_nans: opmath.vector_loop_positions, the block
measured on eager's kernel)."""
from __future__ import annotations

import torch

aten = torch.ops.aten

_FORWARD = (aten.softshrink.default, aten.hardshrink.default)


def kernel_fixes() -> dict:
    """{(op, DispatchKey.Autograd): kernel}: the shrink ops recorded whole (frontend.eager_kernels_for_islands)."""
    from torch._C import DispatchKey

    import torch._decomp  # noqa: F401 - registers torch's Python kernels

    fixes = {}
    for op in _FORWARD:
        if DispatchKey.Autograd in op.py_kernels:
            fixes[(op, DispatchKey.Autograd)] = _whole(op)
    return fixes


def _whole(op):
    def kernel(*args, **kwargs):
        with torch._C._DisablePythonDispatcher():
            return op(*args, **kwargs)

    return kernel


def decompositions(zero_at_vector_loop_nans) -> dict:
    """{backward op: decomposition}; `zero_at_vector_loop_nans(ref, grad, x, kernel)` is
    frontend._zero_at_vector_loop_nans (hardtanh_backward's rule too)."""
    def backward(kernel):
        def decomposition(grad_output, self, lambd):
            ref = torch.where((self >= -lambd) & (self <= lambd), torch.zeros((), dtype=grad_output.dtype,
                                                                             device=grad_output.device), grad_output)
            return zero_at_vector_loop_nans(ref, grad_output, self, kernel)
        return decomposition

    return {aten.softshrink_backward.default: backward("softshrink_backward"),
            aten.hardshrink_backward.default: backward("hardshrink_backward")}
