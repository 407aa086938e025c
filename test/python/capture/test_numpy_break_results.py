"""A NumPy array returned by an uncapturable call (a RandomState permutation) is guarded
by contents; arrays and scalars indexed statically from it are reproducible by the same
expression (`b0[:4]`), so NumPy calls on them replay, and indexing a tensor with such an
array puts it into the graph as a tensor input instead of giving up."""
import pytest
import torch

from harness import run_program

pytest.importorskip("numpy")


def test_random_feature_subset_from_a_randomstate_permutation():
    run_program("""
import numpy as np
RS = np.random.RandomState(1)
def make():
    fc = nn.Linear(8, 8)
    def f(x):
        perm = RS.permutation(x.shape[1])
        keep = np.sort(perm[: x.shape[1] // 2])
        first = perm[0]
        return fc(x[:, keep].repeat(1, 2)) + x[:, int(first)].unsqueeze(1), keep
    return f
def state(f):
    return RS.get_state()[1]
""", [(torch.randn(4, 8),) for _ in range(5)])


def test_fixed_index_array_from_an_argument():
    """The same array every call: one variant, replayed."""
    import numpy as np
    idx = np.array([3, 0, 2])
    c = run_program("""
def make():
    def f(x, idx):
        return x[idx[:2]] * 2 + x[idx].sum(0)
    return f
""", [(torch.randn(5, 3), idx) for _ in range(4)])
    assert c.recompiles == 0
