"""In-place view ops on an argument (`x.transpose_(0, 1)`, `x.unsqueeze_(0)`, `x.t_()`):
the graph records them out of place and the replay restrides the caller's tensor as its last
write (restrides.py), as Dynamo captures them.  Before, capture gave up and the function ran
eagerly (bench/capture2.py input_metadata_inplace: 0 graphs, eager).  Recorded in place, the
mlircap compiler's runtime rewrote the input's data (wrong values from the second call).
A graph break after the op (a step that would see the tensor as it was) still gives up."""
import copy

import pytest
import torch
import torch.nn as nn
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mlircap
from harness import EAGER, same
from mlircap.capture import capture


def _aot(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward))


class Restrided(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x.transpose_(0, 1)
        x.unsqueeze_(0)
        return self.fc(x), x


class WrittenThrough(nn.Module):   # data written through the restrided argument
    def forward(self, x, y):
        x.t_()
        x.mul_(2)
        return x + y, x


class BreakAfter(nn.Module):   # a data-dependent branch after the restride
    def forward(self, x):
        x.t_()
        if x.sum() > 0:
            return x * 2
        return x - 1


class PrintAfter(nn.Module):   # an uncapturable step after the restride sees the argument
    def forward(self, x):
        x.t_()
        print(x.shape)
        return x * 2


def _check(cls, make_args, compile_fn, calls=4):
    torch.manual_seed(0)
    ref = cls()
    m = copy.deepcopy(ref)
    fast = compile_fn(m)
    for i in range(calls):
        args = make_args(i)
        ea = [a.clone() for a in args]
        ca = [a.clone() for a in args]
        re, rc = ref(*ea), fast(*ca)
        if compile_fn is mlircap.compile:   # (compiled kernels: not bit-equal)
            for a, b in zip(rc, re):
                assert a.shape == b.shape and a.stride() == b.stride() and torch.allclose(a, b, atol=1e-5), i
        else:
            same(rc, re, f"call {i}")
        for a, b in zip(ca, ea):   # the arguments leave with eager's metadata and values
            assert (a.shape, a.stride(), a.storage_offset()) == (b.shape, b.stride(), b.storage_offset())
            same(a, b, f"call {i} argument")
        if isinstance(re, tuple) and any(r is ea[0] for r in re):
            assert any(r is ca[0] for r in rc), "the argument itself is returned"
    return fast


COMPILERS = {"eager": lambda m: capture(m, EAGER), "aot": lambda m: capture(m, _aot), "mlircap": mlircap.compile}


@pytest.mark.parametrize("how", COMPILERS)
def test_transpose_unsqueeze_argument_one_graph(how):
    fast = _check(Restrided, lambda i: (torch.randn(4, 3) if i < 3 else torch.randn(4, 5),), COMPILERS[how])
    c = fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert len(c.variants[0].graphs) == 1 and c.variants[0].breaks == []
    assert len(c.variants) == 2   # (the last call's other shape)


@pytest.mark.parametrize("how", ["eager", "aot"])
def test_data_written_through_restrided_argument(how):
    fast = _check(WrittenThrough, lambda i: (torch.randn(3, 5), torch.randn(5, 3)), COMPILERS[how])
    assert not any(v.eager for v in fast._mlircap_capture.variants)


@pytest.mark.parametrize("cls", [BreakAfter, PrintAfter])
def test_step_after_restride_gives_up(cls, capsys):
    fast = _check(cls, lambda i: (torch.randn(3, 5) * (1 if i % 2 else -1),), COMPILERS["eager"])
    assert all(v.eager for v in fast._mlircap_capture.variants)
