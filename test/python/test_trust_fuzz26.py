"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), session 26: seeds
3401:3700 (default, --grad), 3201:3400 (dtypes, tensorops, modules), edges 1300:1600 (and with
--grad 400:550), userops 1701:1800, and the low-precision forms left open in session 25: what
they found, minimized."""

import pytest
import torch

from compiled_check import check_compiled  # test/python/compiled_check.py


# ------------------------------ low-precision add / sub / rsub with alpha != 1, any operand layout
# 7cee35b made contiguous operands eager's (its vector loop fuses `self + alpha * other` in
# float32, its scalar loop rounds the product first, and takes the rest of each inner loop past
# the last full block); a transposed, strided or broadcast operand along the inner loop still
# differed from eager by one unit (eager runs every element through the scalar loop there, and
# the inner loop follows the operands' strides), as did a Python number operand in every layout
# (rsub(x, 2.3, alpha=0.7) was computed in float32 before that pass saw it). opmath.eager_loop
# follows TensorIterator's dim order, coalescing and thread chunks: 86 of 148 sampled forms
# (/tmp/h26/p1w/csweep.py) -> 0.
_LAYOUTS = {   # the operand as the kernel sees it, made inside the function from a contiguous tensor
    "contig": (lambda shape: shape, lambda t: t),
    "t": (lambda shape: shape[::-1], lambda t: t.permute(*range(t.dim() - 1, -1, -1))),
    "step": (lambda shape: (*shape[:-1], 2 * shape[-1]), lambda t: t[..., ::2]),
    "row": (lambda shape: shape[-1:], lambda t: t),
    "col": (lambda shape: (*shape[:-1], 1), lambda t: t),
    "expand": (lambda shape: (1, shape[-1]), lambda t: t.expand(5, -1)),
}


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(5, 40), (7, 9, 37), (70, 600)], ids=str)
@pytest.mark.parametrize("layouts", [("t", "contig"), ("contig", "t"), ("t", "t"), ("step", "contig"),
                                     ("contig", "step"), ("t", "row"), ("contig", "col"), ("t", "expand")], ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "rsub"])
def test_low_precision_alpha_layouts_as_eager(op, layouts, shape, low, fallback_log):
    if "expand" in layouts:
        shape = (5, shape[-1])
    g = torch.Generator().manual_seed(26)
    (sx, lx), (sy, ly) = (_LAYOUTS[k] for k in layouts)
    x = (torch.randn(*sx(shape), generator=g) * 100).to(low)
    y = (torch.randn(*sy(shape), generator=g) * 100).to(low)
    f = getattr(torch, op)
    check_compiled(lambda x, y: f(lx(x), ly(y), alpha=0.7), [x, y], fallback_log, calls=2)


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["contig", "t", "step"])
@pytest.mark.parametrize("op", ["add", "sub", "rsub"])
def test_low_precision_alpha_number_as_eager(op, layout, low, fallback_log):
    size, make = _LAYOUTS[layout]
    x = (torch.randn(*size((6, 45)), generator=torch.Generator().manual_seed(26)) * 100).to(low)
    f = getattr(torch, op)
    check_compiled(lambda x: f(make(x), 2.3, alpha=0.7), [x], fallback_log, calls=2)
