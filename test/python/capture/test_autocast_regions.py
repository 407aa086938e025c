"""Autocast regions inside the captured function (`with torch.autocast("cpu", dtype=bf16):`
around part of a forward, a disabled region nested in it for a precision-sensitive part, an
@autocast-decorated method).  The recording gave up at the first op in a region (the whole
function ran eagerly).  The graph now holds the regions as Dynamo's graphs do:
_enter_autocast / _exit_autocast nodes around the ops recorded under them (autocast.py),
traced through by aot_autograd.  Results equal eager's bit for bit, with both backends."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

from harness import EAGER, same
from mlircap.capture import capture


def _aot(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward))


class Regions(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.g = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.fc(x)
            with torch.autocast("cpu", enabled=False):
                z = self.g(y.float())
            w = y @ z.t()
        return y.float() + 1, z, w


class DecoratedAndItem(nn.Module):
    """An @autocast method, and a data-dependent .item() inside a region (a step between
    graphs that needs no autocast: the next graph enters the region again)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def _half(self, x):
        return self.fc(x)

    def forward(self, x):
        h = self._half(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            s = h.abs().max().item()
            out = self.fc(h.float() / s)
        return out, h


@pytest.mark.parametrize("backend", ["eager", "aot"])
@pytest.mark.parametrize("cls", [Regions, DecoratedAndItem])
def test_autocast_regions_match_eager(cls, backend):
    torch.manual_seed(0)
    ref = cls()
    fast = capture(copy.deepcopy(ref), EAGER if backend == "eager" else _aot)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="mlircap.capture")   # capture giving up warns
        for i in range(3):
            x = torch.randn(4, 8)
            same(fast(x), ref(x), f"call {i}")
    c = fast._mlircap_capture
    assert not any(v.eager for v in c.variants) and c.stats.replays == 2, [v.reason for v in c.variants]
    code = c.variants[0].graphs[0].code
    assert "_enter_autocast" in code and "_exit_autocast" in code, code


def test_training_under_a_region_gives_eager_gradients():
    torch.manual_seed(0)
    ref = Regions()
    m = copy.deepcopy(ref)
    fast = capture(m, _aot)
    for i in range(3):
        x = torch.randn(4, 8)
        oe, oc = ref(x), fast(x)
        sum(o.float().sum() for o in oe).backward()
        sum(o.float().sum() for o in oc).backward()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p.grad, q.grad, f"call {i} grad {n}")


def _dtype_switch(x, w):
    y = x @ w
    with torch.autocast("cpu", dtype=torch.float16):
        z = x @ w
    return y, z


def test_region_changing_only_the_dtype_under_an_outer_region():
    """Called under autocast(bf16), the function opens an autocast(float16) region: the
    enabled flags do not change, the dtype does (the graph enters a float16 region)."""
    fast = capture(_dtype_switch, EAGER)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for i in range(3):
            x, w = torch.randn(4, 8), torch.randn(8, 8)
            out = fast(x, w)
            same(out, _dtype_switch(x, w), f"call {i}")
            assert [t.dtype for t in out] == [torch.bfloat16, torch.float16]
    assert fast._mlircap_capture.stats.replays == 2
