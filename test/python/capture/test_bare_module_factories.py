"""A module class whose constructor is nn.Module's own, made by the call with no arguments
(transformers' `ACT2FN["silu"](out)`: ClassInstantier makes a SiLUActivation each call, inside
Jamba's mamba mixer): it makes an empty module and reads or writes nothing of the program, as
torch.nn's own classes do, so it is traced as a plain object of the call (module_factories.
_bare_module_class).  Before, a class of another library was a replayed constructor: a graph
break where the open graph could not run it first (bench/modules12.py's Jamba: 1 -> 2 graphs)."""
import copy
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap
from harness import EAGER
from mlircap.capture import capture

COMPILERS = {"eager": lambda m: capture(m, EAGER), "mlircap": mlircap.compile}


class SiLUAct(nn.Module):
    def forward(self, x):
        return F.silu(x)


class ScaledAct(nn.Module):   # a constructor of its own: still a replayed call
    def __init__(self, scale=2.0):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


class Instantier(OrderedDict):
    def __getitem__(self, key):
        return super().__getitem__(key)()


ACTS = Instantier(silu=SiLUAct, scaled=ScaledAct)


class Mixer(nn.Module):
    def __init__(self, act="silu"):
        super().__init__()
        self.proj, self.act = nn.Linear(6, 6), act

    def forward(self, x):
        h = F.dropout(self.proj(x), 0.2, training=True)   # (a draw: the open graph runs nothing before it)
        h = ACTS[self.act](h)
        return self.proj(h).sum(-1)


@pytest.mark.parametrize("how", COMPILERS)
def test_bare_module_class_made_each_call_is_one_graph(how):
    torch.manual_seed(0)
    ref = Mixer()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        x = torch.randn(3 if i < 2 else 5, 6)
        torch.manual_seed(i)
        want = ref(x)
        torch.manual_seed(i)
        got = fast(x)
        assert torch.allclose(want, got, atol=1e-6), i
    c = fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture
    assert c.variants and all(len(v.graphs) == 1 and not v.breaks and not v.eager for v in c.variants), \
        [(len(v.graphs), v.breaks, v.reason) for v in c.variants]


def test_module_class_with_its_own_constructor_runs_as_eager():
    torch.manual_seed(0)
    ref = Mixer("scaled")
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(3):
        x = torch.randn(4, 6)
        torch.manual_seed(i)
        want = ref(x)
        torch.manual_seed(i)
        assert torch.allclose(want, fast(x), atol=1e-6), i
