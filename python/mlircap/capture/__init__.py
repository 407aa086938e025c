"""mlircap.capture: bytecode-level capture of PyTorch programs into FX graphs.

    from mlircap.capture import capture, explain
    fast = capture(model_or_fn, backend)          # backend(gm, example_inputs) -> callable
    y = fast(x)                                   # behaves exactly like model_or_fn(x)
    print(explain(model_or_fn)(x))                # graphs, breaks (file:line), guards
    print(fast.explain())                         # same for an existing capture

How it works (see the package modules; core.py lists them): a PEP 523 frame hook (C++ extension `_evalframe.cpp`,
built on first import or by CMake) intercepts the captured code object's frames.  The
first call of each variant runs for real under an opcode tracer that reads the value
stack (CPython 3.11: live stack pointer; 3.12: statically computed depths), turning every
external read into a guard and every external write into a deferred replay step, while a
TorchFunctionMode records tensor ops into torch.fx graphs.  Later calls check the guards
(generated Python, ~1-2 us for typical modules) and run the compiled graphs plus eager
"break" operations (`.item()`, `print`, uncapturable calls) and the recorded side effects.

Environment: MLIRCAP_CACHE_DIR (extension build cache), MLIRCAP_CAPTURE_NO_EXT=1
(force the pure-Python fallback, which runs eagerly), MLIRCAP_CAPTURE_STATIC_DEPTH=check
(3.11: cross-check static stack depths against the live stack pointer).
"""
from __future__ import annotations

from .core import HOOK, ExplainOutput, capture, explain  # noqa: F401

__all__ = ["capture", "explain", "ExplainOutput", "HOOK"]
