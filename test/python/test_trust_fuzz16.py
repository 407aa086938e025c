"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), seeds 600:900 of each
mode and the cases left open from 0:600: the wrong results and errors it found, minimized.
Each case compares compiled calls (the recording call and the replayed compiled variant)
with eager."""
import pytest
import torch

import mlircap


def _transposed(rows, cols, low=-3, high=4):
    """A (cols, rows) transposed view of integer-valued floats (zeros and ties included)."""
    g = torch.Generator().manual_seed(rows * 31 + cols)
    return torch.randint(low, high, (rows, cols), generator=g).float().t()


# ---------------------------------- ops rewritten by a traced form, read through a view of theirs
# --grad seed 537: v0 = torch.copysign(x1, x1) of a transposed x1: copysign is replaced by
# its traced form (signs.py) whose meta value was contiguous while eager's result (and the
# alias of it that aot_autograd saves for the backward) is transposed as x1; the alias was
# remade as an as_strided of the contiguous buffer with the transposed strides: x1.grad off
_REWRITTEN = {
    "copysign": lambda x: torch.copysign(x, x),
    "copysign_other": lambda x: torch.copysign(x.abs() + 1, x),
    "gammainc": lambda x: torch.special.gammainc(x.abs() + 0.5, x.abs() + 1),
    "zeta": lambda x: torch.special.zeta(x.abs() + 2, x.abs() + 1),
    # scatter.py's unrolled writes: the same through their own traced copy
    "index_put": lambda x: x.index_put((torch.tensor([2, 0]),), torch.tensor(9.0)),
}


@pytest.mark.parametrize("op", sorted(_REWRITTEN))
def test_view_of_a_rewritten_op_of_a_transposed_input(op):
    fn = _REWRITTEN[op]

    def f(x):
        y = fn(x)
        return y, y[0], y[:, 1]
    x = _transposed(4, 3)
    fast = mlircap.compile(f)
    for _ in range(3):
        for w, g in zip(f(x), fast(x)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_copysign_gradient_through_a_transposed_input():
    # seed 537 minimized: the forward saves copysign's result (through an alias) for the
    # backward's result / self
    def f(x, w):
        return ((torch.copysign(x, x) * w).sum(),)
    x, w = _transposed(3, 2), torch.randn(2, 3)

    def grads(fn):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        fn(xs, ws)[0].backward()
        return xs.grad, ws.grad
    want = grads(f)
    fast = mlircap.compile(f)
    for _ in range(3):
        for g, e in zip(grads(fast), want):
            torch.testing.assert_close(g, e)

