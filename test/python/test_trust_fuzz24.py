"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), session 24: seeds
2801:3000 of each mode, edges 500:800 (and with --grad 0:200), userops 1401:1550, and the
items left open in session 23: what they found, minimized."""
import pytest
import torch

import mlircap
from compiled_check import all_compiled, check_compiled  # test/python/compiled_check.py


# -------------------------------------------------------- strides of outputs of no elements
# `x.reshape(0, 5) * 2` came back compiled with strides (0, 0), eager's (5, 1): every layout of
# no elements counts as contiguous, so backend._output_layouts (outputs copied into eager's
# strides) skipped it, and the plan's value had the strides of a splat constant. Such an
# output, or a view of an intermediate no other output returns, now takes eager's strides.
_EMPTY = {
    "reshape_mul": (lambda x: x.reshape(0, 5) * 2, torch.randn(0)),
    "sum_over_dim": (lambda x: x.sum(0), torch.randn(3, 0, 4)),
    "cat": (lambda x: torch.cat([x, x], 1), torch.randn(0, 3)),
    "permuted_exp": (lambda x: x.permute(2, 0, 1).exp(), torch.randn(2, 0, 3)),
    "new_zeros_plus": (lambda x: x.new_zeros(0, 4) + x.sum(), torch.randn(3)),
    "transposed_zeros": (lambda x: x.new_zeros(4, 0, 2).transpose(0, 2), torch.randn(3)),
    "zeros_t": (lambda x: (torch.zeros(0, 3).t(), x + 1), torch.randn(3)),
    "two_outputs": (lambda x: (x.reshape(0, 5) + 1, x.reshape(5, 0) * 3), torch.randn(0)),
    "expanded": (lambda x: x.expand(2, 0, 3) * 2, torch.randn(0, 3)),
    "int_slice": (lambda x: (x[:, :0] + 1, x.sum()), torch.arange(12).view(3, 4)),
}


@pytest.mark.parametrize("name", list(_EMPTY))
def test_output_of_no_elements_has_eagers_strides(name, fallback_log):
    fn, x = _EMPTY[name]
    fast = check_compiled(fn, [x], fallback_log)
    want = fn(x.clone())
    for _ in range(2):
        got = fast(x.clone())
        gs = got if isinstance(got, tuple) else (got,)
        ws = want if isinstance(want, tuple) else (want,)
        for g, w in zip(gs, ws):
            assert g.stride() == w.stride(), (name, g.stride(), w.stride())


def test_output_of_no_elements_in_training_has_eagers_strides(fallback_log):
    def f(x, w):
        return (x * w).reshape(0, 5), (x * w).sum()

    x, w = torch.randn(0), torch.randn(0, requires_grad=True)
    fast = mlircap.compile(f)
    for _ in range(2):
        y, s = fast(x, w)
        assert y.stride() == (5, 1) and y.requires_grad
        s.backward()
        assert w.grad is not None and w.grad.shape == (0,)
    all_compiled(fast)
