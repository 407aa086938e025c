"""Inputs mlircap does not compile say so plainly: a sparse input reached the CPU plan builder and
the warning read "unsupported op 'tensor.cast' (no GPU kernel or library call for it)"; a meta
input read "graph output add is on meta, the graph is compiled for cpu". Both run as eager runs them."""
import warnings

import pytest
import torch

import mlircap
from mlircap.backend import MlircapCompileError


def _f(a, b):
    return (a + b) * 2


def _messages(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, " ".join(str(w.message) for w in caught)


def test_sparse_input_named_as_such():
    a, b = torch.randn(4, 4).to_sparse(), torch.randn(4, 4).to_sparse()
    out, msg = _messages(mlircap.compile(_f), a, b)
    torch.testing.assert_close(out.to_dense(), _f(a, b).to_dense())
    assert "sparse_coo tensor" in msg and "tensor.cast" not in msg, msg
    with pytest.raises(MlircapCompileError, match="sparse_coo"):
        mlircap.compile(_f, strict=True)(a, b)


def test_meta_input_named_as_such():
    m = torch.randn(4, 3, device="meta")
    out, msg = _messages(mlircap.compile(_f), m, m)
    assert out.device.type == "meta" and out.shape == (4, 3)
    assert "meta device" in msg and "graph output" not in msg, msg
