"""partition.py: a view that only eager islands read runs in the island (a view
there, computing nothing) instead of being copied by a compiled part and copied
back to eager's strides by the island."""
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import mlircap
from mlircap.frontend import decomposition_table
from mlircap.partition import partition


def _parts(f, *args):
    gm = make_fx(f, decomposition_table=decomposition_table())(*args)
    return [(p.eager, [str(n.target) for n in p.nodes], dict(p.reasons)) for p in partition(gm)]


def softmaxes(x, w):
    # log_softmax is a CPU library island (partition.CPU_LIBRARY_OPS)
    y = torch.log_softmax((x * 2).permute(0, 2, 1), -1)
    z = torch.log_softmax(w.t(), -1)
    return y + 1, z * 3


def test_views_read_only_by_islands_join_them():
    parts = _parts(softmaxes, torch.randn(4, 64, 32), torch.randn(32, 16))
    eager = [ops for is_eager, ops, _ in parts if is_eager]
    compiled = [ops for is_eager, ops, _ in parts if not is_eager]
    assert any("aten.permute.default" in ops for ops in eager), parts
    assert not any("aten.permute.default" in ops for ops in compiled), parts
    # the moved views are not reported as islands of their own
    assert all(set(r.values()) == {"library"} for is_eager, _, r in parts if is_eager and r), parts


def test_view_with_a_compiled_user_stays_compiled():
    def f(x):
        p = x.permute(1, 0)
        return torch.log_softmax(p, -1), p + 1

    parts = _parts(f, torch.randn(16, 8))
    compiled = [ops for is_eager, ops, _ in parts if not is_eager]
    assert any("aten.permute.default" in ops for ops in compiled), parts


def test_values_match_eager():
    fast = mlircap.compile(softmaxes)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x, w = torch.randn(4, 64, 32, generator=g), torch.randn(32, 16, generator=g)
        for a, b in zip(fast(x, w), softmaxes(x, w)):
            torch.testing.assert_close(a, b)


def test_random_island_on_a_view_draws_eagers_mask():
    # dropout fills its mask in the memory order of its input: on the view (as in
    # eager) the same seed drops the same elements
    def f(x):
        return F.dropout((x + 1).transpose(0, 1), 0.5, training=True) * 2

    fast = mlircap.compile(f)
    x = torch.randn(64, 48)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        want = f(x)
        torch.manual_seed(seed)
        torch.testing.assert_close(fast(x), want)
