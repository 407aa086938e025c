"""`x.bernoulli_(p)` of a number p draws in the memory order of `x`, as eager does.

Eager's in-place kernel fills `x` through a TensorIterator, which walks its elements in memory
order (the dims sorted by stride); aot_autograd functionalizes the call to `bernoulli.p(x, p)`
and a copy back into `x`, and `bernoulli.p` fills a new contiguous tensor (LEGACY_CONTIGUOUS),
in `x`'s logical order: for a transposed or otherwise permuted `x` the same seed set other
elements (bench/fuzz_graphs.py seed 1565, 1284 of 2880 values). The captured graph's
`Tensor.bernoulli_` calls run `bernoulli_in_memory_order_` instead, which draws into `x`
permuted to its memory order and copies the draws back through the inverse permutation."""
from __future__ import annotations

import torch


def bernoulli_in_memory_order_(x, p=0.5, *, generator=None):
    if isinstance(p, torch.Tensor) or x.dim() < 2:
        return x.bernoulli_(p, generator=generator)
    # TensorIterator's order: the outermost dim has the largest stride (dims of size 1, which
    # do not change the order, keep their place)
    perm = sorted(range(x.dim()), key=lambda d: -x.stride(d) if x.shape[d] != 1 else 0)
    moved = [d for d in perm if x.shape[d] != 1]
    if moved == sorted(moved):
        return x.bernoulli_(p, generator=generator)
    inverse = sorted(range(x.dim()), key=perm.__getitem__)
    draws = torch.bernoulli(x.permute(perm), p, generator=generator)
    return x.copy_(draws.permute(inverse))


def rewrite(gm: torch.fx.GraphModule) -> None:
    """The graph's `Tensor.bernoulli_` calls as `bernoulli_in_memory_order_` (in place)."""
    changed = False
    for n in gm.graph.nodes:
        if (n.op == "call_function" and n.target is torch.Tensor.bernoulli_) or \
                (n.op == "call_method" and n.target == "bernoulli_"):
            n.op, n.target = "call_function", bernoulli_in_memory_order_
            changed = True
    if changed:
        gm.recompile()
