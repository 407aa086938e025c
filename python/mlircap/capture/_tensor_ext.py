"""Build-on-first-use loader for `_mlircap_tensor_meta` (`_tensor_meta.cpp`): a check of many
tensors' metadata in one call, about 8 ns a tensor against torch's TensorGuards' 50-70 ns,
for the merged tensor guard of a variant (guard_kinds.TensorMatchAll).  It is compiled
against the running torch's headers and libraries (about 40 s, in a background thread,
once per torch version and source) into the capture cache directory; until it is there, or
if it cannot be built, guards use TensorGuards, which state the same facts.
`MLIRCAP_CAPTURE_NO_TENSOR_EXT=1` turns it off."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import threading
import types

from .. import config
from ._ext import elf_complete

_SRC = os.path.join(os.path.dirname(__file__), "_tensor_meta.cpp")
_NAME = "_mlircap_tensor_meta"
_API_VERSION = 2
_mod: types.ModuleType | None = None
_err: str | None = None
_lock = threading.Lock()
_building: threading.Thread | None = None


def _out_path() -> str:
    import torch
    base = str(config.cache_dir())
    with open(_SRC, "rb") as f:
        # (the source, the torch build it links against and the exact Python build)
        h = hashlib.sha1(f.read() + torch.__version__.encode() + str(torch.version.git_version).encode() +
                         sys.version.encode()).hexdigest()[:12]
    tag = f"{sys.implementation.cache_tag}-torch{torch.__version__.replace('+', '_')}-{h}"
    return os.path.join(base, tag, _NAME + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def _import(path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(_NAME, path)
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    if getattr(m, "API_VERSION", 0) != _API_VERSION:
        raise RuntimeError(f"stale {_NAME} build at {path}")
    return m


def _build(out: str) -> None:
    import torch
    from torch.utils import cpp_extension
    os.makedirs(os.path.dirname(out), exist_ok=True)
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    tmp = out + f".tmp{os.getpid()}"
    cmd = shlex.split(os.environ.get("CXX", "g++")) + [
        "-O2", "-shared", "-fPIC", "-std=c++20", "-w", "-fvisibility=hidden",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{sysconfig.get_paths()['include']}"] + [f"-I{p}" for p in cpp_extension.include_paths()] + [
        _SRC, f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}", "-o", tmp]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    os.replace(tmp, out)


def _build_and_load(out: str) -> None:
    global _mod, _err
    try:
        _build(out)
        m = _import(out)
        with _lock:
            _mod = m
    except Exception as e:  # pragma: no cover - depends on the toolchain
        with _lock:
            _err = f"{type(e).__name__}: {e}"


def load(block: bool = False) -> types.ModuleType | None:
    """The extension, or None: not built yet (a background build starts; `block` waits
    for it), disabled, or it cannot be built (`error()` says why)."""
    global _mod, _err, _building
    with _lock:
        if _mod is not None or _err is not None:
            return _mod
        if config.env_flag("MLIRCAP_CAPTURE_NO_TENSOR_EXT"):
            _err = "disabled by MLIRCAP_CAPTURE_NO_TENSOR_EXT"
            return None
        t = _building
        if t is None:
            try:
                out = _out_path()
                if os.path.exists(out) and not elf_complete(out):
                    os.unlink(out)   # damaged (truncated): built again, never dlopen'ed
                if os.path.exists(out):
                    _mod = _import(out)
                    return _mod
            except Exception as e:
                _err = f"{type(e).__name__}: {e}"
                return None
            t = _building = threading.Thread(target=_build_and_load, args=(out,), daemon=True,
                                             name="mlircap-tensor-meta-build")
            t.start()
    if block:
        t.join()
    return _mod


def error() -> str | None:
    return _err
