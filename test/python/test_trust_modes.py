"""A compiled function called while the user's TorchFunctionMode is active (`with
torch.device(...)`, a mode overriding torch functions) runs eagerly: the mode changes what
torch calls compute and no variant's graph or guards know it.  Found by bench/modules5.py
--device cuda, whose cases may run under `with torch.device("cuda")`."""
import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode

import mlircap


class _MulPlusOne(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func in (torch.mul, torch.Tensor.mul) else out


def _f(x):
    return x * 2 + torch.arange(3, dtype=torch.float32)


def test_a_user_function_mode_active_at_call_time_is_honoured():
    fast = mlircap.compile(_f)
    x = torch.ones(3)
    torch.testing.assert_close(fast(x), _f(x))   # compiled first, without the mode
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with _MulPlusOne():
            got, want = fast(x), _f(x)
    torch.testing.assert_close(got, want)
    assert torch.equal(want, torch.tensor([3.0, 4.0, 5.0]))
    assert any("TorchFunctionMode (_MulPlusOne) is active" in str(m.message) for m in w)
    torch.testing.assert_close(fast(x), _f(x))   # and compiled again after it
    stats = fast._compiled._mlircap_capture.stats
    assert stats.records == 1 and stats.replays == 1 and stats.eager_calls == 1, stats


def test_a_mode_active_at_the_first_call_is_honoured_and_nothing_is_recorded_under_it():
    fast = mlircap.compile(_f)
    x = torch.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _MulPlusOne():
            torch.testing.assert_close(fast(x), _f(x))
    torch.testing.assert_close(fast(x), _f(x))


def test_default_device_context_runs_the_factories_on_its_device():
    def g(x):
        return torch.ones(2) + x.sum()

    fast = mlircap.compile(g)
    x = torch.ones(3)
    fast(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            out = fast(x)
    assert out.device.type == "meta"


def test_strict_raises_under_a_mode():
    fast = mlircap.compile(_f, strict=True)
    with _MulPlusOne(), pytest.raises(mlircap.MlircapCompileError, match="TorchFunctionMode"):
        fast(torch.ones(3))
