"""Immutable option objects passed to torch functions (`F.linear_cross_entropy(...,
options=LinearCrossEntropyOptions(...))`, named tuples, enum members): constants of the
graph, guarded by type and value field by field, so an equal object made for every call is no
recompile and a different one is.  Outputs against eager on every call (run_program)."""
import dataclasses

import torch

from harness import run_program

X, W = torch.randn(6, 3), torch.randn(5, 3)
T = torch.randint(0, 5, (6,))


def test_frozen_dataclass_options_argument_equal_objects_no_recompile():
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions as O
    calls = [(X, W, T, O(batch_chunk_size=2)), (X * 2, W, T, O(batch_chunk_size=2)),
             (X, W, T, O(batch_chunk_size=3)), (X, W, T, O(batch_chunk_size=3))]
    run_program("""
def make():
    def f(x, w, t, opts):
        return F.linear_cross_entropy(x, w, t, reduction="none", options=opts) * 2
    return f
""", calls, graphs=2, recompiles=1, breaks=0)


def test_frozen_dataclass_options_global_reassigned():
    run_program("""
from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions as O
OPTS = O(batch_chunk_size=2)
def make():
    def f(x, w, t):
        return F.linear_cross_entropy(x, w, t, reduction="mean", options=OPTS) + 1
    return f
def mutate(i, f):
    global OPTS
    OPTS = O(batch_chunk_size=2) if i < 2 else O(batch_chunk_size=4, allow_retain_graph=True)
""", [(X, W, T)] * 4, graphs=2, recompiles=1)


def test_user_frozen_dataclass_to_a_torch_function_override():
    """A torch function (`__torch_function__` overridable) given a user's frozen dataclass."""
    run_program("""
from torch.overrides import has_torch_function, handle_torch_function
def scaled(x, cfg):
    if has_torch_function((x,)):
        return handle_torch_function(scaled, (x,), x, cfg)
    return x * cfg.k + cfg.shift[1]
def make():
    def f(x, cfg):
        return scaled(x.relu(), cfg) - 1
    return f
""", [(X, Scale(2.0)), (X * 3, Scale(2.0)), (X, Scale(-0.0)), (X, Scale(0.0))], recompiles=2, breaks=0)


@dataclasses.dataclass(frozen=True)
class Scale:
    k: float
    shift: tuple = (0.0, 1.0)


def test_named_tuple_arguments():
    run_program("""
import collections
Shape = collections.namedtuple("Shape", "a b")
def make():
    def f(x):
        y = x.reshape(Shape(3, 6))
        parts = torch.max(y, 1)
        return torch.stack(Shape(parts.values, parts.values * 2)), y.permute(Shape(1, 0))
    return f
""", [(torch.randn(6, 3),), (torch.randn(6, 3),)], graphs=1, recompiles=0, breaks=0)
