"""The device whose rules a compile follows.

Many compile-time choices depend on where a graph runs: the partition's islands (an op kept
eager for numerics on one device only, the CPU's library calls, bounds-checked index ops on
the CPU), the decompositions that reproduce one device's eager kernels (search.py,
cumulative.py, histogram.py, ...), the GPU-only rewrites (split_reductions.py). They read
`device_type(t)` of a tensor of the graph (a fake tensor while tracing, a node's meta value
in the partition), which is the tensor's own device unless the compile names its target:
`mlircap.compile(fn, device="cuda")` of CPU tensors (test/python/simt.py runs that GPU path,
its launch plans interpreted, on a machine without a GPU) follows the CUDA rules, so that it
falls back where a GPU run falls back. Tensors on a GPU, or a compile without a named device
(device="auto"), see their own device.

What really runs (the runtime's executors, tensors made for a call, CUDA graph capture) reads
the tensors' own device, not this.
"""
from __future__ import annotations

import contextlib
import contextvars

import torch

_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("mlircap_target_device", default=None)


def device_type(x) -> str:
    """The device type the compile's rules see for tensor (or torch.device, or str) `x`: the
    compile's named target for a CPU tensor where one is set (`targeting`), else x's own."""
    own = x.device.type if isinstance(x, torch.Tensor) else torch.device(x).type
    target = _TARGET.get()
    return target if target is not None and own == "cpu" else own


def current() -> str | None:
    """The named target of the compile in progress (None: each tensor's own device)."""
    return _TARGET.get()


@contextlib.contextmanager
def targeting(device: str | None):
    """Within: the rules follow `device` ("cpu" / "cuda"; "auto" or None: the tensors' own)."""
    token = _TARGET.set(None if device in (None, "auto") else torch.device(device).type)
    try:
        yield
    finally:
        _TARGET.reset(token)
