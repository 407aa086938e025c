"""Attention on CUDA as one op of the compiled graph: `mlircap::sdpa`.

torch's scaled_dot_product_attention picks its kernel (flash, memory-efficient,
cuDNN or math) from the inputs' shapes, dtypes, mask and the GPU. Decomposing it
while aot_autograd traces fixes a choice made on fake tensors (torch-mlir's
table: matmul + softmax + matmul, which materializes the [batch, heads, seq,
seq] scores; without the table, a ViT in bf16 still traced to the math variant
where eager runs cuDNN attention). Instead an inference graph records this op,
which partition.py runs as a library step: at run time it calls
scaled_dot_product_attention on the real tensors, so the kernel is the one eager
uses and the result is eager's, bit for bit.

Graphs that need gradients, or dropout (random), keep torch's own
decomposition: the fused kernels it traces to are library steps too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.library.custom_op("mlircap::sdpa", mutates_args=())
def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
         is_causal: bool, scale: float | None, enable_gqa: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=0.0,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@sdpa.register_fake
def _(query, key, value, attn_mask, is_causal, scale, enable_gqa):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def as_library_op(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                  enable_gqa=False):
    """`mlircap::sdpa` for a call of scaled_dot_product_attention on CUDA tensors
    without dropout in a graph that needs no gradient, else None."""
    tensors = [t for t in (query, key, value, attn_mask) if isinstance(t, torch.Tensor)]
    if query.device.type != "cuda" or dropout_p != 0 or (
            torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return None
    return torch.ops.mlircap.sdpa(query, key, value, attn_mask, is_causal, scale, enable_gqa)
