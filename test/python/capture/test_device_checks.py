"""A graph that computes past a check on tensor data (asserts.py) holds back its device-side
asserts until the check has run (capture/device_checks.py): on the GPU, bounds.BoundsChecked
hands an index read's "all in range" flag to torch._assert_async, which leaves the CUDA
context unusable when it fails; where the program's own check fails, eager raises the
program's error before it ever indexes. The backend here stands in for a compiled CUDA graph
with a checked index read (its flag computed from the ids it is given), so the order of the
assert and the check can be seen on the CPU."""
import pytest
import torch

from mlircap.capture import capture
from mlircap.capture.device_checks import held_device_asserts, hold, release

ROWS = 10


def _gpu_like_backend(gm, example_inputs):
    # as bounds.BoundsChecked runs a compiled CUDA graph
    def run(*args):
        out = gm(*args)
        ids = [a for a in args if isinstance(a, torch.Tensor) and a.dtype == torch.int64]
        ok = torch.stack([((i >= 0) & (i < ROWS)).all() for i in ids]).all() if ids else torch.tensor(True)
        if not hold(ok):
            torch._assert_async(ok)
        return out
    return run


def checked_lookup(table, ids):
    if (ids >= table.shape[0]).any() or (ids < 0).any():
        raise ValueError("token id out of range")
    return table[ids.clamp(0, table.shape[0] - 1)] * 2


def test_failing_check_raises_the_programs_error_without_a_device_assert(monkeypatch):
    asserted = []   # torch._assert_async's conditions (a False one is fatal on CUDA)
    monkeypatch.setattr(torch, "_assert_async", lambda c, *a: asserted.append(bool(c)))
    fast = capture(checked_lookup, _gpu_like_backend)
    table = torch.randn(ROWS, 3)
    for _ in range(3):
        ids = torch.tensor([1, 4, 9])
        torch.testing.assert_close(fast(table, ids), checked_lookup(table, ids))
    assert asserted and all(asserted), asserted   # checks held: asserted after them
    asserted.clear()
    with pytest.raises(ValueError, match="token id out of range"):
        fast(table, torch.tensor([1, 12, 3]))
    assert False not in asserted, asserted   # no failing device assert before the ValueError
    ids = torch.tensor([0, 2])
    torch.testing.assert_close(fast(table, ids), checked_lookup(table, ids))


def test_held_flags_are_released_in_order_and_nesting_restores():
    assert not hold(torch.tensor(True))   # no replay holding: assert at once
    with held_device_asserts() as outer:
        assert hold(torch.tensor(True))
        with held_device_asserts() as inner:
            assert hold(torch.tensor(False))
        assert len(inner) == 1 and len(outer) == 1
        release(outer)
    with pytest.raises(RuntimeError):
        release(inner)   # on the CPU torch._assert_async raises at once
