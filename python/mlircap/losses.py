"""Loss decompositions whose torch form does not compute what eager's kernel does.

* multilabel_margin_loss: a sample's targets are the labels before its first -1.
  torch's decomposition (torch/_decomp/decompositions.py) gathers the input at
  label 0 for the positions from the first -1 on and keeps their hinge terms:
  a target row [1, -1, 2, 2] summed terms for "targets" 0, 0 and 0 besides 1
  (the loss 1.5-2x eager's). Here those positions contribute nothing, as in
  eager's loop, which stops at the -1. torch registers its decomposition as the
  op's Python kernel at the Autograd key too, which tracing runs before a
  decomposition table is consulted: that kernel is replaced while aot_autograd
  traces (python_kernel_fixes), as well as the table's entry (install).
* binary_cross_entropy: eager's CPU kernel raises for an input outside [0, 1] (NaN
  included); torch's decomposition computes on (binary_cross_entropy_checked).
"""
from __future__ import annotations

import torch
from .target import device_type


def multilabel_margin_loss_forward(input, target, reduction):
    x, t = torch.atleast_2d(input), torch.atleast_2d(target)
    n_cls = x.shape[1]
    idx = torch.arange(n_cls, device=t.device)
    end = torch.where(t == -1, idx, n_cls).amin(-1, keepdim=True)
    used = idx < end                                       # (N, J): target positions before the first -1
    is_target = (idx == torch.where(used, t, -1).unsqueeze(-1)).any(1)          # (N, C)
    u = x.gather(-1, torch.where(used, t, 0))                                   # (N, J)
    z = (1.0 - u.unsqueeze(-1) + x.unsqueeze(1)).clamp_min(0) / n_cls           # (N, J, C)
    z = torch.where(used.unsqueeze(-1) & ~is_target.unsqueeze(1), z, 0)
    loss = z.sum((1, 2))
    if reduction == 1:      # torch's Reduction enum: 0 none, 1 mean, 2 sum
        loss = loss.mean()
    elif reduction == 2:
        loss = loss.sum()
    else:
        loss = loss.reshape(input.shape[:-1])
    return loss, is_target.to(x.dtype).reshape(target.shape)



def binary_cross_entropy_checked(fallback):
    """binary_cross_entropy as torch's decomposition computes it, after eager's CPU kernel's
    check of the input (`(input_val >= 0) && (input_val <= 1)`, per element: a NaN fails it):
    an _assert_async of it, which the bounds checks (bounds.py) turn into an error flag that
    reruns the graph eagerly, so eager's RuntimeError is raised. The decomposition alone
    returned NaN or a loss of log(<0) (bench/fuzz_graphs.py seed 295 --families modules:
    the binary_cross_entropy of sigmoid(cos(x)) with an inf in x)."""

    def decomposition(input, target, weight=None, reduction=1):
        if isinstance(input, torch.Tensor) and device_type(input) == "cpu" and input.numel():
            ok = torch.ops.aten.logical_and.default(torch.ops.aten.ge.Scalar(input, 0), torch.ops.aten.le.Scalar(input, 1))
            torch.ops.aten._assert_async.msg(torch.ops.aten.all.default(ok),
                                             "all elements of input should be between 0 and 1")
        if fallback is None:
            return NotImplemented
        return fallback(input, target, weight, reduction)

    return decomposition


def install(table: dict) -> None:
    """Puts the decompositions of this module in `table`."""
    table[torch.ops.aten.multilabel_margin_loss_forward.default] = multilabel_margin_loss_forward
    bce = torch.ops.aten.binary_cross_entropy.default
    table[bce] = binary_cross_entropy_checked(table.get(bce))
    mm = torch.ops.aten.multi_margin_loss.default
    if table.get(mm) is not None:
        table[mm] = multi_margin_loss_shaped(table[mm])


def multi_margin_loss_shaped(fn):
    """torch's multi_margin_loss decomposition `fn`, with eager's shape: reduction='none'
    of a 0-dim target is 0-dim (eager resizes its output to (nframe,) only for a target
    with dims); the decomposition returned shape (1,) (OpInfo multi_margin_loss float32,
    reference inputs #83: a wrong result)."""
    def decomposition(input, target, p=1, margin=1, weight=None, reduction=1):
        out = fn(input, target, p, margin, weight, reduction)
        if reduction == 0 and isinstance(target, torch.Tensor) and target.dim() == 0:
            out = out.reshape(())
        return out

    return decomposition


_KERNEL_FIXES: dict | None = None


def python_kernel_fixes() -> dict:
    """{(op, DispatchKey): kernel} for the Python kernels torch registers that
    compute something else than eager (frontend.eager_kernels_for_islands puts
    these in their place while aot_autograd traces): torch's kernel is checked
    on a case it gets wrong, so a fixed torch keeps its own."""
    global _KERNEL_FIXES
    if _KERNEL_FIXES is None:
        from torch._C import DispatchKey

        import torch._decomp  # noqa: F401 - registers them
        op = torch.ops.aten.multilabel_margin_loss_forward.default
        theirs = op.py_kernels.get(DispatchKey.Autograd)
        x, t = torch.tensor([[0.3, -0.2, 0.5]]), torch.tensor([[1, -1, 2]])
        _KERNEL_FIXES = {}
        if theirs is not None:
            with torch.no_grad():
                if not torch.equal(theirs(x, t, 0)[0], op(x, t, 0)[0]):   # a target row ending in -1
                    _KERNEL_FIXES[(op, DispatchKey.Autograd)] = multilabel_margin_loss_forward
        op = torch.ops.aten.multi_margin_loss.default
        theirs = op.py_kernels.get(DispatchKey.Autograd)
        x, t = torch.tensor([0.3, -0.2, 0.5]), torch.tensor(1)
        if theirs is not None:
            with torch.no_grad():
                if theirs(x, t, 1, 1, None, 0).shape != op(x, t, 1, 1, None, 0).shape:   # a 0-dim target
                    _KERNEL_FIXES[(op, DispatchKey.Autograd)] = multi_margin_loss_shaped(theirs)
    return _KERNEL_FIXES
