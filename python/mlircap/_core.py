"""Loads the pybind11 binding over libmlircap_core.so.

Search order: ``$MLIRCAP_LIB_DIR``, ``<repo>/build/lib`` (a developer build, so an
editable install never runs a stale copy), then the package's own ``_lib/``
(where ``pip install`` puts the built files).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from . import config

_PKG = Path(__file__).resolve().parent
_module = None


def lib_dirs() -> list[Path]:
    dirs = [_PKG.parent.parent / "build" / "lib", _PKG / "_lib"]
    if config.env("MLIRCAP_LIB_DIR"):
        dirs.insert(0, Path(config.env("MLIRCAP_LIB_DIR")))
    return dirs


def core():
    """The `_mlircap` binding module (imported once)."""
    global _module
    if _module is not None:
        return _module
    tried = []
    for d in lib_dirs():
        if any(d.glob("_mlircap*.so")):
            # The binding is a top-level extension module named `_mlircap` that lives
            # next to libmlircap_core.so (it finds the core through its $ORIGIN rpath),
            # in whichever of these directories holds the current build. Importing it
            # by name from that directory, only for this import, keeps that layout
            # (the same .so works from build/lib, _lib/ and the GPU host's lib dir).
            sys.path.insert(0, str(d))
            try:
                _module = importlib.import_module("_mlircap")
                return _module
            finally:
                sys.path.remove(str(d))
        tried.append(str(d))
    raise ImportError(
        "mlircap's compiler core is not built (looked for _mlircap*.so in "
        + ", ".join(tried)
        + "). Run ./scripts/setup or `pip install --no-build-isolation -e .`."
    )


def tool_path(name: str) -> Path | None:
    """Path of a built tool such as mlircap-opt, or None."""
    for d in [_PKG.parent.parent / "build" / "bin"] + lib_dirs():
        p = d / name
        if p.exists():
            return p
    return None
