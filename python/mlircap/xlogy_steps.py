"""CPU bfloat16 / float16 xlogy and xlog1py in the steps of eager's kernel.

Eager's CPU kernels (BinaryOpsKernel.cpp: xlogy_kernel, xlog1py_kernel) are scalar loops over
the dtype itself: `if isnan(y) return NaN; if x == 0 return 0; return x * std::log(y)`, where
std::log of a c10::BFloat16 / c10::Half returns that type, so log(y) is rounded to the dtype
before the product, which is rounded again. torch's decomposition computes x * log(y) in float32
and rounds once: a quarter of the elements one ulp apart (uniform x, y: 26,000 of 100,000), and
F.kl_div (xlogy(t, t) - t * input, the two nearly equal) of a distillation loss 0.85x of eager's
value apart (bench/heldout3.py kd_loss bf16). A Python number operand is converted to the dtype
first, as eager wraps it in a tensor of the result's dtype.
"""
from __future__ import annotations

import torch
from .target import device_type

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def rounded_like_eager(log_fn, fallback):
    """The decomposition of xlogy (log_fn=torch.log) or xlog1py (torch.log1p), any overload:
    eager's steps for a CPU bfloat16/float16 result, `fallback` (or NotImplemented) otherwise."""

    def decomposition(x, y):
        tensors = [v for v in (x, y) if isinstance(v, torch.Tensor)]
        dt = torch.result_type(x, y)
        if dt not in _LOW_PRECISION or not tensors or any(device_type(t) != "cpu" for t in tensors) or \
                any(not isinstance(v, (torch.Tensor, int, float)) or isinstance(v, bool) for v in (x, y)):
            return NotImplemented if fallback is None else fallback(x, y)
        dev = tensors[0].device
        xf, yf = (v.to(dt).float() if isinstance(v, torch.Tensor) else
                  torch.full((), v, dtype=dt, device=dev).float() for v in (x, y))
        out = torch.where(xf == 0, torch.zeros((), device=dev), xf * log_fn(yf).to(dt).float())
        out = torch.where(torch.isnan(yf), torch.full((), float("nan"), device=dev), out)
        return out.to(dt)

    return decomposition


def decompositions(table: dict) -> dict:
    """{overload: decomposition} for xlogy's and special_xlog1py's overloads, each falling back
    to `table`'s decomposition of it."""
    aten = torch.ops.aten
    out = {}
    for packet, log_fn in ((aten.xlogy, torch.log), (aten.special_xlog1py, torch.log1p)):
        for name in packet.overloads():
            if "out" in name.lower():
                continue
            op = getattr(packet, name)
            out[op] = rounded_like_eager(log_fn, table.get(op))
    return out
