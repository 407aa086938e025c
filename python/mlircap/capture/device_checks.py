"""Device-side asserts held back until a graph's checks on tensor data have run.

A graph that computes past a check on tensor data (asserts.py: `if (ids >= n).any():
raise ValueError(...)`, then `emb(ids)`) runs on the GPU what eager runs only when the
check holds. Its index reads are clamped into range (bounds.py), so no memory outside a
tensor is read, but their "all indices in range" flag goes to `torch._assert_async`,
eager's own device-side assert, and a failed one leaves the CUDA context unusable for the
rest of the process. Where the check fails eager raises the program's error before it
ever indexes. So while such a graph runs its flags are held (`held_device_asserts`), and
the replay asserts them (`release`) only once every check of the graph held; when one
fails the replay misses and the call runs as eager does.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_held = threading.local()


@contextlib.contextmanager
def held_device_asserts() -> Iterator[list]:
    """Collects the flags `hold` is given inside (this thread), instead of asserting them."""
    prev = getattr(_held, "flags", None)
    flags: list = []
    _held.flags = flags
    try:
        yield flags
    finally:
        _held.flags = prev


def hold(flag: torch.Tensor) -> bool:
    """Holds a device assert's condition if a replay is holding them; False: assert it now."""
    flags = getattr(_held, "flags", None)
    if flags is None:
        return False
    flags.append(flag)
    return True


def release(flags: list) -> None:
    """The held conditions asserted as they would have been (torch's device-side assert)."""
    for f in flags:
        torch._assert_async(f)
