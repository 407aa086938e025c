"""matmul of batched operands whose batch dims broadcast, without materializing the broadcast.

torch's matmul expands both operands to the broadcast batch shape and runs one bmm over it:
CapsNet's prediction vectors ``W[1, 576, 10, 16, 8] @ u[2, 576, 1, 8, 1]`` copied W into a
[2, 576, 10, 16, 8] buffer (1.47M elements, 5.9 MB) every call, for a product of 184K outputs.
A batch dim where only one operand has extent is a free dim of the product instead: where the
left operand is 1 it joins the right operand's columns, where the right operand is 1 it joins
the left operand's rows. ``W[576, (10 16), 8] @ u[576, 8, (2 1)]`` is one bmm over the 576
shared batch entries, with no expanded copy; the result is permuted back to the broadcast order.
Each output element is the same dot product over K.
"""
from __future__ import annotations

import math

import torch
from .target import device_type


def _plan(a: torch.Tensor, b: torch.Tensor):
    """(shared, only_b, only_a) batch dims of the broadcast, or None where nothing is saved."""
    if a.dim() < 3 or b.dim() < 3 or device_type(a) != "cpu" or not a.is_floating_point() or \
            a.dtype != b.dtype or a.is_complex():
        return None
    n = max(a.dim(), b.dim()) - 2
    sa = (1,) * (n - (a.dim() - 2)) + tuple(a.shape[:-2])
    sb = (1,) * (n - (b.dim() - 2)) + tuple(b.shape[:-2])
    shared, only_b, only_a = [], [], []   # only_b: a is 1 there, b is not; only_a: the other way
    for d, (x, y) in enumerate(zip(sa, sb)):
        if x == y:
            shared.append(d)
        elif x == 1:
            only_b.append(d)
        elif y == 1:
            only_a.append(d)
        else:
            return None   # (not broadcastable: matmul raises)
    if not only_b and not only_a:
        return None
    # worth it where torch's expanded copies are larger than the operands
    size = [max(x, y) for x, y in zip(sa, sb)]
    expanded = math.prod(size) * (a.shape[-2] * a.shape[-1] + b.shape[-2] * b.shape[-1])
    if expanded < 2 * (a.numel() + b.numel()) or expanded < 1 << 16:
        return None
    return n, sa, sb, shared, only_b, only_a, size


def broadcast_batched_matmul(fallback):
    """aten.matmul's Python kernel, with batch dims that only one operand has folded into the
    product's rows / columns (module docstring); other calls go to `fallback`."""

    def matmul(a, b):
        plan = _plan(a, b) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else None
        if plan is None:
            return fallback(a, b)
        n, sa, sb, shared, only_b, only_a, size = plan
        m, k, nn = a.shape[-2], a.shape[-1], b.shape[-1]
        a5 = a.reshape(sa + tuple(a.shape[-2:]))
        b5 = b.reshape(sb + tuple(b.shape[-2:]))
        # a: [shared..., only_a..., M, K] -> [shared, (only_a M), K]  (a is 1 on only_b)
        a5 = a5.permute(*shared, *only_a, *only_b, n, n + 1)
        a5 = a5.reshape([size[d] for d in shared] + [math.prod(size[d] for d in only_a) * m, k])
        # b: [shared..., K, only_b..., N] -> [shared, K, (only_b N)]  (b is 1 on only_a)
        b5 = b5.permute(*shared, *only_a, n, *only_b, n + 1)
        b5 = b5.reshape([size[d] for d in shared] + [k, math.prod(size[d] for d in only_b) * nn])
        c = fallback(a5, b5)   # [shared..., (only_a M), (only_b N)]
        c = c.reshape([size[d] for d in shared] + [size[d] for d in only_a] + [m]
                      + [size[d] for d in only_b] + [nn])
        # back to [batch..., M, N] in the broadcast order
        order = shared + only_a + only_b
        ns, na = len(shared), len(only_a)
        pos = {d: i for i, d in enumerate(shared)}
        pos.update({d: ns + i for i, d in enumerate(only_a)})
        pos.update({d: ns + na + 1 + i for i, d in enumerate(only_b)})
        perm = [pos[d] for d in range(n)] + [ns + na, ns + na + 1 + len(only_b)]
        assert sorted(order) == list(range(n))
        return c.permute(*perm).contiguous()

    return matmul
