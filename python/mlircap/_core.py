"""Loads the pybind11 binding over libmlircap_core.so.

Search order: ``$MLIRCAP_LIB_DIR``, ``<repo>/build/lib`` (a developer build, so an
editable install never runs a stale copy), then the package's own ``_lib/``
(where ``pip install`` puts the built files).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
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
        # The binding is a top-level extension module named `_mlircap` that lives next to
        # libmlircap_core.so (it finds the core through its $ORIGIN rpath), in whichever of
        # these directories holds the current build (build/lib, _lib/, the GPU host's lib
        # dir): loaded from its file, for this Python's suffix, without touching sys.path.
        path = next((d / f"_mlircap{s}" for s in importlib.machinery.EXTENSION_SUFFIXES
                     if (d / f"_mlircap{s}").is_file()), None)
        if path is not None:
            spec = importlib.util.spec_from_file_location("_mlircap", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["_mlircap"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["_mlircap"]
                raise
            _module = module
            return _module
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
