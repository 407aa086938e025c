"""Logging by area, in the spirit of TORCH_LOGS.

    MLIRCAP_LOGS=progress,graph_breaks,guards,recompiles,kernels,passes,fallback
    MLIRCAP_LOGS=all

Warnings about eager fallbacks are always shown (once per graph) through the
``warnings`` module; the areas above add detail on stderr.
"""
from __future__ import annotations

import sys
import time
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
