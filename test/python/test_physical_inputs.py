"""Graph inputs that are permutations of a contiguous tensor are compiled in their
memory order (python/mlircap/layouts.py): no copy into a contiguous buffer, and the
transposes of the graph compose with the input's. On by default on CUDA; here on the
CPU with MLIRCAP_PHYSICAL_INPUTS=force, which takes the same path up to the plan."""
import pytest
import torch

import mlircap
from mlircap import layouts


@pytest.fixture
def force(monkeypatch):
    monkeypatch.setenv("MLIRCAP_PHYSICAL_INPUTS", "force")


def heads_merged(a, w):
    # a: (B, H, T, D) stored as (B, T, H, D), as fused attention returns it
    y = a.transpose(1, 2).reshape(a.shape[0], a.shape[2], -1)
    return torch.relu(y @ w) + 1


def run(fn, *args, calls=3):
    fast = mlircap.compile(fn)
    for _ in range(calls):
        out = fast(*args)
    return fast, out


@pytest.mark.parametrize("perm,shape", [((0, 2, 1, 3), (2, 8, 4, 16)), ((0, 3, 1, 2), (2, 5, 6, 3)),
                                        ((1, 0), (7, 9)), ((2, 0, 1), (3, 4, 5))], ids=str)
def test_physical_perm(perm, shape):
    x = torch.randn(shape).permute(perm)
    p = layouts.physical_perm(x)
    assert p is not None and x.permute(p).is_contiguous()
    assert layouts.physical_perm(x.contiguous()) is None
    assert layouts.physical_perm(torch.randn(4, 1).expand(4, 3)) is None      # broadcast
    assert layouts.physical_perm(torch.randn(8, 8)[:, ::2]) is None           # gaps


def test_attention_output_read_in_place(force):
    a = torch.randn(2, 8, 4, 16).transpose(1, 2)
    w = torch.randn(64, 32)
    fast, out = run(heads_merged, a, w)
    torch.testing.assert_close(out, heads_merged(a, w))
    (g,) = fast.graphs
    assert g._permuted == ((0, (0, 2, 1, 3)),)
    # the transpose back is the identity: only the matmul's epilogue is left
    assert g.executable.n_kernels == 1, g.executable.n_kernels
    # called with another layout (a contiguous tensor) the graph is still right: the plan
    # copies what is not contiguous after the permutation
    c = a.contiguous()
    (res,) = g(c, w)
    torch.testing.assert_close(res, heads_merged(c, w))


def test_off_by_default_on_cpu(monkeypatch):
    monkeypatch.delenv("MLIRCAP_PHYSICAL_INPUTS", raising=False)
    a = torch.randn(2, 8, 4, 16).transpose(1, 2)
    fast, out = run(heads_merged, a, torch.randn(64, 32))
    assert fast.graphs[0]._permuted == ()


def test_channels_last_image(force):
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    b = torch.randn(3, 1, 1)

    def fn(x, b):
        return torch.sigmoid(x * 2 + b).mean((2, 3)), x.sum(1)

    fast, out = run(fn, x, b)
    for o, w in zip(out, fn(x, b)):
        torch.testing.assert_close(o, w)
    assert fast.graphs[0]._permuted == ((0, (0, 2, 3, 1)),)


def test_input_returned_and_written(force):
    """An input that is also an output, or written in place, keeps eager's semantics."""
    def fn(x):
        y = x.t()
        x.mul_(2)
        return y, x + 1

    x = torch.randn(5, 7).t()
    want_x = x.clone()
    want = fn(want_x)
    got_x = x.clone()
    fast = mlircap.compile(fn)
    for i in range(3):
        gx = got_x.clone() if i < 2 else got_x
        res = fast(gx)
    for o, w in zip(res, want):
        torch.testing.assert_close(o, w)
    torch.testing.assert_close(got_x, want_x)
