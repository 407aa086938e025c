"""Build-on-first-import loader for the PEP 523 C++ extension `_mlircap_evalframe`.

The extension is compiled with g++ against the running interpreter's headers into a
cache directory keyed by the Python version and the source hash.  If a prebuilt copy
exists next to the package (CMake target) it is used.  If nothing can be built,
`load()` returns None and mlircap.capture falls back to pure Python dispatch.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import types

_SRC = os.path.join(os.path.dirname(__file__), "_evalframe.cpp")
_mod: types.ModuleType | None = None
_err: str | None = None
API_VERSION = 5
_API_TAG = b"mlircap-evalframe-api-%d" % API_VERSION


def _has_api_tag(path: str) -> bool:
    """True if the binary was built from a source of this API version.  Checked before
    importing: once a stale build is imported, a fresh one of the same module name is not."""
    try:
        with open(path, "rb") as f:
            return _API_TAG in f.read()
    except OSError:
        return False


def elf_complete(path: str) -> bool:
    """The file is a whole 64-bit little-endian ELF object: its program and section headers,
    and the bytes they map, lie inside it. A truncated shared library (a full disk, an
    interrupted copy of the cache) is not dlopen'ed: mapping pages past its end kills the
    process with SIGBUS."""
    import struct

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    n = len(data)
    if n < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    if phoff + phnum * phentsize > n or shoff + shnum * shentsize > n or phentsize < 56:
        return False
    for i in range(phnum):
        p_type, _, p_offset = struct.unpack_from("<IIQ", data, phoff + i * phentsize)
        (p_filesz,) = struct.unpack_from("<Q", data, phoff + i * phentsize + 0x20)
        if p_offset + p_filesz > n:
            return False
    return True


def _cache_dir() -> str:
    base = os.environ.get("MLIRCAP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "mlircap")
    with open(_SRC, "rb") as f:
        # (the source and the exact Python build: the extension uses CPython's frame internals)
        h = hashlib.sha1(f.read() + sys.version.encode()).hexdigest()[:12]
    tag = f"{sys.implementation.cache_tag}-{sys.version_info[0]}{sys.version_info[1]}-{h}"
    return os.path.join(base, tag)


def _import_from(path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("_mlircap_evalframe", path)
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def load() -> types.ModuleType | None:
    global _mod, _err
    if _mod is not None or _err is not None:
        return _mod
    if os.environ.get("MLIRCAP_CAPTURE_NO_EXT"):
        _err = "disabled by MLIRCAP_CAPTURE_NO_EXT"
        return None
    if sys.version_info[:2] not in ((3, 11), (3, 12)):
        _err = f"unsupported Python {sys.version_info[:2]}"
        return None
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    # prebuilt by CMake (python/CMakeLists.txt) into the package's _lib or root dir?
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:  # the CMake build dir and the installed _lib, as for the core binding
        from mlircap._core import lib_dirs

        cands = [str(d) for d in lib_dirs()] + [pkg]
    except ImportError:
        cands = [os.path.join(pkg, "_lib"), pkg]
    for cand in cands:
        path = os.path.join(cand, "_mlircap_evalframe" + suffix)
        if os.path.exists(path) and _has_api_tag(path) and elf_complete(path):
            try:
                m = _import_from(path)
                if getattr(m, "API_VERSION", 0) == API_VERSION:
                    _mod = m
                    return _mod
            except Exception:
                pass
    try:
        import shlex
        import tempfile
        d0 = _cache_dir()
        last: OSError | None = None
        for d in (d0, os.path.join(tempfile.gettempdir(), "mlircap-" + os.path.basename(d0))):
            out = os.path.join(d, "_mlircap_evalframe" + suffix)
            try:
                if os.path.exists(out) and not elf_complete(out):
                    os.unlink(out)   # damaged: built again
                if not os.path.exists(out):
                    os.makedirs(d, exist_ok=True)
                    try:
                        import pybind11
                        pyb = pybind11.get_include()
                    except ImportError:  # header-only: any pybind11 >= 2.11 include dir works
                        pyb = os.environ["MLIRCAP_PYBIND11_INCLUDE"]
                    inc = [sysconfig.get_paths()["include"], pyb]
                    tmp = out + f".tmp{os.getpid()}"
                    cmd = shlex.split(os.environ.get("CXX", "g++")) + [
                        "-O2", "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden"] + \
                        [f"-I{i}" for i in inc] + [_SRC, "-o", tmp]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    if r.returncode != 0:
                        raise RuntimeError(r.stderr[-2000:])
                    os.replace(tmp, out)
                m = _import_from(out)
                if getattr(m, "API_VERSION", 0) != API_VERSION:
                    raise RuntimeError("stale _mlircap_evalframe build")
                _mod = m
                return _mod
            except OSError as e:  # e.g. read-only cache dir: try the temp dir
                last = e
        raise last if last is not None else RuntimeError("no cache directory")
    except Exception as e:  # pragma: no cover - depends on toolchain
        _err = f"{type(e).__name__}: {e}"
        _mod = None
        return None


def error() -> str | None:
    return _err
