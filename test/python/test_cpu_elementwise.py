"""CPU codegen of elementwise loops (mlircap-reduction-loops): N-D elementwise
generics collapse to fewer dims (operands' unit dims read at index 0 dropped
first), and an input that the innermost dim does not index (a row's max or
sum, a per-channel bias) is loaded once per row. softmax and group_norm
compile on the CPU (not library islands). Values against eager."""
import pytest
import torch

import mlircap
from mlircap import partition


def _check(fn, *args, rtol=1e-5, atol=1e-5, equal_nan=False):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        want = fn(*args)
        for _ in range(2):   # recording call, then the compiled code
            got = fast(*args)
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return fast


def _compiled(fast):
    return [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]


@pytest.mark.parametrize("shape,dim", [((2, 32, 32, 32), -1), ((64, 32, 32), -1), ((2, 1024, 32), -1),
                                       ((2, 32, 32, 32), 1), ((512, 256), 0), ((8, 16, 16), -1),
                                       ((3, 5, 7), -1), ((4, 1, 9), -1), ((1, 1, 33), -1)])
def test_softmax_compiles_and_matches_eager(shape, dim):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g) * 3
    fast = _check(lambda x: torch.softmax(x, dim), x)
    assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    assert not partition.cpu_library("aten::_softmax", "cpu")


def test_softmax_rows_with_inf_and_nan_match_eager():
    x = torch.randn(4, 3, 8)
    x[0, 0, 3] = float("nan")
    x[1, 2, :] = float("-inf")
    x[2, 1, 5] = float("inf")
    fast = _check(lambda x: torch.softmax(x, -1), x, equal_nan=True)
    got = fast(x)
    assert got[0, 0].isnan().all() and got[1, 2].isnan().all() and got[2, 1].isnan().all()
    assert not got[3].isnan().any()


@pytest.mark.parametrize("shape", [(2, 8, 32), (2, 3, 5, 7), (1, 4, 1, 16)])
def test_row_broadcasts_match_eager(shape):
    # a row statistic (keepdim: a unit dim) broadcast back over the row, into
    # several outputs, next to an elementwise input
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)

    def f(x, y):
        m = x.amax(-1, keepdim=True)
        s = (x * y).sum(-1, keepdim=True)
        return (x - m).exp() * y + s, (y / (s.abs() + 1)).tanh()

    _check(f, x, y)


def test_bias_over_nchw_and_middle_broadcasts_match_eager():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, 5, 7, generator=g)
    b = torch.randn(6, 1, 1, generator=g)
    w = torch.randn(1, 6, 5, 1, generator=g)
    v = torch.randn(7, generator=g)
    _check(lambda x, b, w, v: torch.relu(x * w + b) - v, x, b, w, v)
    # the innermost dim broadcast from a size-1 dim of the input itself
    _check(lambda x: x + x[..., :1] * 2, x)


def test_elementwise_with_index_math_matches_eager():
    # iota-based ops (linalg.index on collapsed or hoisted loops)
    def f(x):
        return x + torch.arange(x.shape[-1]) * torch.arange(x.shape[1]).view(1, -1, 1)

    _check(f, torch.randn(3, 4, 5))
    _check(lambda x: torch.tril(x) + torch.triu(x, 1) * 2, torch.randn(2, 6, 6))


@pytest.mark.parametrize("shape,groups", [((2, 32, 32, 32), 4), ((8, 32, 8, 8), 4), ((2, 6, 5, 7), 3),
                                          ((1, 4, 1, 1), 2)])
def test_group_norm_compiles_and_matches_eager(shape, groups):
    m = torch.nn.Sequential(torch.nn.GroupNorm(groups, shape[1]), torch.nn.SiLU()).eval()
    with torch.no_grad():
        m[0].weight.uniform_(0.5, 1.5)
        m[0].bias.uniform_(-0.5, 0.5)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    fast = _check(m, x, rtol=1e-4, atol=1e-5)
    assert _compiled(fast)


def test_attention_softmax_is_one_graph():
    # hand-written attention below the CPU fusion floor: bmm, scaled softmax, bmm in
    # one compiled plan (softmax was a library island splitting it in two)
    def attn(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * 0.125 + 1.0, -1) @ v

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 16, 32, generator=g) for _ in range(3))
    fast = _check(attn, q, k, v)
    assert len(fast.graphs) == 1 and _compiled(fast)


def test_erf_is_accurate_over_its_range_and_keeps_special_values():
    # mlircap-math-approx's erf: one rational function of |x| clamped to 4
    x = torch.cat([torch.linspace(-5, 5, 400001), torch.logspace(-30, 0, 3001),
                   torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 4.0, 1e30, -1e30])])
    fast = mlircap.compile(lambda t: torch.erf(t), strict=True)
    fast(x)
    got = fast(x)
    exact = torch.erf(x.double())
    finite = x.isfinite()
    err = (got.double() - exact)[finite].abs()
    assert err.max().item() <= 4e-7, err.max().item()
    # relative error near 0 (erf(x) ~ 1.128 x): a few ulp
    small = finite & (x.abs() < 1e-3) & (x != 0)
    assert ((got.double() - exact)[small].abs() / exact[small].abs()).max().item() <= 4e-7
    assert got[finite].abs().max().item() <= 1.0
    assert got[-8].isnan()
    assert got[-7].item() == 1.0 and got[-6].item() == -1.0
    assert got[-5].item() == 0.0 and torch.signbit(got[-5]) and not torch.signbit(got[-4])
    assert got[-2].item() == 1.0 and got[-1].item() == -1.0


def test_bias_gelu_is_as_accurate_as_eager_with_one_division():
    """erf GELU's x / sqrt(2) is a multiply (mlircap-simplify-math, as eager's
    kernel computes it): the fused kernel's only division is the erf's."""
    g = torch.Generator().manual_seed(0)
    x, b = torch.randn(256, 512, generator=g) * 3, torch.randn(512, generator=g)

    def f(x, b):
        return torch.nn.functional.gelu(x + b)

    fast = mlircap.compile(f, strict=True)
    fast(x, b)
    got = fast(x, b)
    h = (x + b).double()
    exact = h * 0.5 * (1 + torch.erf(h / 2 ** 0.5))
    ours, eagers = (got.double() - exact).abs().max().item(), (f(x, b).double() - exact).abs().max().item()
    assert ours <= max(eagers, 1e-6), (ours, eagers)
    llvm = fast.ir("llvm")
    assert llvm.count("llvm.fdiv") == 1 and "llvm.intr.fma" in llvm
