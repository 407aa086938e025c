"""Held-out trust sweep, batch 10 (issue 10): regressions found by bench/modules9.py (detection
post-processing, segmentation, diffusion, RL, GNNs, point clouds, hand-written optimizers,
quantisation, audio, metrics, ragged batches, in-place views, dtypes and layouts). Each test runs
mlircap.compile against eager over several calls with changing inputs.

PYTEST_DONT_REWRITE"""

import torch

import mlircap


def _compare(fn, calls):
    fast = mlircap.compile(fn)
    for i, args in enumerate(calls):
        want = fn(*[a.clone() for a in args])
        got = fast(*[a.clone() for a in args])
        torch.testing.assert_close(got, want, msg=lambda m: f"call {i}: {m}")
    return fast


# ------------------------------------------------------------- tensor bounds of slices
def _slice_stop(x, offsets):
    n = offsets[-1]
    return x[:n] * 2


def _slice_step_and_start(x, offsets):
    return x[offsets[0]::offsets[1]] + 1


def _setitem_tensor_bounds(x, offsets):
    y = x.clone()
    y[1:offsets[-1], offsets[0]:] = 0
    return y


def _offset_calls():
    x = torch.randn(10, 3)
    return [(x, torch.tensor([0, 3, 7, 9])), (x, torch.tensor([0, 3, 7, 9])),
            (x, torch.tensor([1, 2, 7, 6])), (x, torch.tensor([2, 4, 5, 3]))]


def test_slice_with_tensor_stop():
    """x[:offsets[-1]] (segment_csr-style code): the 0-d tensor bound stayed inside the FX
    graph as a constant that its generated code wrote as `torch.Tensor(size=[], dtype=int64)`,
    so the second call raised NameError: name 'int64' is not defined (and a new bound could
    only have kept the recorded one). Now its value is read by a step before the op."""
    _compare(_slice_stop, _offset_calls())


def test_slice_with_tensor_start_and_step():
    _compare(_slice_step_and_start, _offset_calls())


def test_setitem_slice_with_tensor_bounds():
    _compare(_setitem_tensor_bounds, _offset_calls())
