"""copysign compiled (torch-mlir can lower neither copysign nor signbit, nor a view of a
float tensor as integers: they ran through torch).

copysign(a, b) is |a| with b's sign bit, in a's and b's promoted type (integers and bool:
the default float dtype). For an integer or bool b the sign is b < 0; for a float b it is
b < 0, or b == 0 with 1 / b == -inf (-0.0). A NaN b has a sign bit no comparison reads:
such an element sets the error flag (bounds.py), and the call reruns eagerly. A Python
number b (copysign.Scalar) has its sign known at trace time (math.copysign).
"""
from __future__ import annotations

import math

import torch
import torch.fx as fx

from .fxutil import op_name
from .target import device_type

OPS = ("aten::copysign",)


def _result_dtype(a, b) -> torch.dtype:
    dt = torch.result_type(a, b)
    return dt if dt.is_floating_point else torch.get_default_dtype()


def copysign_scalar(a, b):
    """aten.copysign.Scalar: the sign of the number `b` is known here."""
    if not isinstance(a, torch.Tensor) or a.is_complex() or not isinstance(b, (int, float, bool)):
        return NotImplemented
    x = torch.abs(a.to(_result_dtype(a, b)))
    return torch.neg(x) if math.copysign(1.0, float(b)) < 0 else x


def _copysign(dtype: torch.dtype):
    def fn(a, b):
        x = torch.abs(a.to(dtype))
        if b.is_floating_point():
            negative = (b < 0) | ((b == 0) & (torch.reciprocal(b) < 0))
            flag = torch.isnan(b).any()
        else:
            negative = b < 0
            flag = torch.zeros((), dtype=torch.bool)
        return torch.where(negative, torch.neg(x), x), flag

    return fn


def rewrite(graph: fx.Graph, node: fx.Node) -> list[fx.Node] | None:
    """aten.copysign.Tensor of real CPU tensors replaced by its compiled form: its error
    flag, or None (left as it is)."""
    from .polynomials import inline

    if op_name(node.target) != "aten::copysign" or len(node.args) != 2 or node.kwargs or \
            not all(isinstance(a, fx.Node) for a in node.args):
        return None
    vals = [a.meta.get("val") for a in node.args]
    want = node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) and not v.is_complex() and device_type(v) == "cpu" for v in vals) or \
            not isinstance(want, torch.Tensor) or not want.is_floating_point():
        return None
    flag = inline(graph, node, _copysign(want.dtype), list(node.args))
    return None if flag is None else [flag]
