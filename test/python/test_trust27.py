"""Session 27 regressions (lead): the error a bounds-checked graph raises is eager's."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import mlircap


def test_an_op_run_through_torch_raising_before_the_flag_is_read_gives_eagers_error():
    """An unused nll_loss with a target out of range, then an embedding_bag (run through
    torch) with a bad index: eager raises the loss's IndexError first; the compiled graph ran
    the bag before its bounds flag was read and raised the bag's RuntimeError (fuzz modules
    seed 97, test_fuzz_graphs' v2 seeds). The graph now reruns eagerly on any exception."""
    torch.manual_seed(0)
    pool = torch.nn.AdaptiveAvgPool1d(2)
    bag = torch.nn.EmbeddingBag(11, 3, mode="sum")

    def f(x, t, idx):
        v0 = pool(x)
        F.nll_loss(F.log_softmax(v0, 1), t, ignore_index=4)   # unused
        return bag(idx), v0

    c = mlircap.compile(f)
    x, t, idx = torch.randn(1, 5, 5), torch.tensor([[1, 2]]), torch.tensor([[1, 2, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            for _ in range(2):
                got, want = c(x, t, idx), f(x, t, idx)
                torch.testing.assert_close(got, want)
            bad_t, bad_idx = torch.tensor([[1, -100]]), torch.tensor([[1, -100, 3]])
            with pytest.raises(IndexError, match="Target -100 is out of bounds"):
                f(x, bad_t, bad_idx)
            with pytest.raises(IndexError, match="Target -100 is out of bounds"):
                c(x, bad_t, bad_idx)
            # a bad index alone: the bag's own error, as eager's
            with pytest.raises(RuntimeError, match="not in the valid range"):
                f(x, t, bad_idx)
            with pytest.raises(RuntimeError, match="not in the valid range"):
                c(x, t, bad_idx)
            torch.testing.assert_close(c(x, t, idx), f(x, t, idx))     # and correct again after
