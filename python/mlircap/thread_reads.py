"""Compile-time reads of torch's thread count.

Compiled CPU code runs on as many threads as torch.get_num_threads() says at each call
(runtime/cpu.py's sync_threads): a new count needs no new compile. A few compile-time
decisions do depend on the count (opmath: where eager's thread chunks cut an add's vector
loop, which changes its bf16 rounding); they read it through `compile_threads()`, which
tells the capture front (capture/guards.py's _GlobalState) that the code being compiled
is for this count only. The capture front collects the reads of the graphs it compiles
(`collecting`); a read outside that (a backward aot_autograd compiles at its first call,
a graph compiled per shape at a call) is attributed to no variant: from then on every
variant that ran at a count other than its recording's is made to miss (`crossed`), and
no variant accepts another count again.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import torch

_sink = threading.local()
_unattributed = [False]   # a compile-time read outside `collecting` happened in this process
_crossed: weakref.WeakSet = weakref.WeakSet()   # states that accepted a count other than their own


def compile_threads() -> int:
    """torch.get_num_threads(), for a compile-time decision: the code being compiled is for
    this thread count only."""
    n = torch.get_num_threads()
    reads = getattr(_sink, "reads", None)
    if reads is not None:
        reads.append(n)
    else:
        _unattributed[0] = True
        for s in list(_crossed):
            s.taint()
    return n


@contextlib.contextmanager
def collecting():
    """The compile-time thread reads of what runs inside (a list, filled on exit too)."""
    prev = getattr(_sink, "reads", None)
    reads: list[int] = []
    _sink.reads = reads
    try:
        yield reads
    finally:
        _sink.reads = prev
        if prev is not None:
            prev.extend(reads)


def any_unattributed() -> bool:
    return _unattributed[0]


def crossed(state) -> None:
    """`state` (with a taint() method) ran code at a thread count other than its own."""
    _crossed.add(state)
