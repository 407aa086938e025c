"""Logging by area, in the spirit of TORCH_LOGS.

    MLIRCAP_LOGS=progress,graph_breaks,guards,recompiles,kernels,passes,fallback
    MLIRCAP_LOGS=all

Warnings about eager fallbacks are always shown (once per graph) through the
``warnings`` module; the areas above add detail on stderr. They are information, never
a change of the program's behaviour: where the user's filters turn them into errors
(``python -W error``, pytest's ``filterwarnings = error``), `warn` writes them to stderr
instead of raising into the user's program (eager would not have raised there).
"""
from __future__ import annotations

import sys
import time
import warnings
from contextlib import contextmanager

from . import config

AREAS = ("progress", "graph_breaks", "guards", "recompiles", "kernels", "passes", "fallback")


def _parse(spec: str) -> set[str]:
    names = {s.strip() for s in spec.split(",") if s.strip()}
    if "all" in names:
        return set(AREAS)
    unknown = names - set(AREAS)
    if unknown:
        sys.stderr.write(f"[mlircap] MLIRCAP_LOGS: unknown area(s) {sorted(unknown)}; known: {', '.join(AREAS)}, all\n")
    return names & set(AREAS)


_enabled = _parse(config.env("MLIRCAP_LOGS"))


def set_logs(*areas: str) -> None:
    """Enable log areas programmatically (replaces MLIRCAP_LOGS)."""
    global _enabled
    _enabled = _parse(",".join(areas))


def enabled(area: str) -> bool:
    return area in _enabled


def warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 1) -> None:
    """warnings.warn(message, category, stacklevel) (as seen from our caller), except that a
    filter whose action is "error" gets the message on stderr rather than an exception."""
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning:
        sys.stderr.write(f"[mlircap] {category.__name__}: {message}\n")


def warn_explicit(message, category: type[Warning], filename: str, lineno: int) -> None:
    """warnings.warn_explicit with `warn`'s protection."""
    try:
        warnings.warn_explicit(message, category, filename, lineno)
    except Warning:
        sys.stderr.write(f"[mlircap] {category.__name__}: {message}\n")


def log(area: str, msg: str) -> None:
    if area in _enabled:
        sys.stderr.write(f"[mlircap:{area}] {msg}\n")


@contextmanager
def stage(name: str, times: dict | None = None):
    """Times a compile stage; logs it under 'progress' and records it in ``times``."""
    t0 = time.perf_counter()
    log("progress", f"{name} ...")
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        if times is not None:
            times[name] = dt
        log("progress", f"{name} done in {dt * 1e3:.1f} ms")
