"""Soundness of what mlircap keeps on disk (MLIRCAP_CACHE_DIR): every input that changes the
code, or how it is read, is part of the key, so two programs / settings never share an entry;
writers running at the same time never publish half an entry; and a damaged entry is built
again, never loaded.

Inputs of a CPU entry (runtime/cpu._cache_key): the IR as the core compiles it (with the
layout and rounding marks that MLIRCAP_CPU_CHANNELS_LAST and bf16 convolutions put on it),
plan or whole-graph code, the optimization level, the core's version and GNU build ID, the
host CPU and its features, the package's Python sources. A GPU plan (runtime/cuda._cache_key):
the IR, chip, PTX features, core version and build, Python sources. The settings that change
the partition (MLIRCAP_CPU_LIBRARY_OPS, MLIRCAP_FUSE_ATTENTION, ...) act on the graph before it
is IR, so they reach the key through it. The capture extensions: their source, the Python
build and (the tensor-metadata check, linked against torch) the torch build."""
import hashlib
import os
import pathlib
import subprocess
import sys
import types

import pytest
import torch

import mlircap
from mlircap import config
from mlircap._core import core
from mlircap.capture import _ext, _tensor_ext
from mlircap.runtime import cpu
from mlircap.runtime import cuda as gpu

HERE = pathlib.Path(__file__).resolve().parent

CONV = """
func.func @main(%x: tensor<1x2x6x6xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x3x4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x2x6x6xf32>, tensor<3x2x3x3xf32>) outs(%f : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  return %c : tensor<1x3x4x4xf32>
}"""

SCALE = """
#map = affine_map<(d0) -> (d0)>
func.func @main(%a: tensor<64xf32>) -> tensor<64xf32> {
  %k = arith.constant %K% : f32
  %e = tensor.empty() : tensor<64xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%a : tensor<64xf32>) outs(%e : tensor<64xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %k : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %0 : tensor<64xf32>
}"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MLIRCAP_CPU_CACHE", raising=False)
    monkeypatch.delenv("MLIRCAP_CPU_CHANNELS_LAST", raising=False)
    return tmp_path


def _entries(d):
    return sorted(p.name for p in d.glob("*.cpu"))


class _Core:
    """The loaded core with one of its identities changed (another build, host or version)."""

    def __init__(self, real, **changed):
        self.real, self.changed = real, changed

    def __getattr__(self, name):
        if name in self.changed:
            return lambda: self.changed[name]
        return getattr(self.real, name)


# -- each input of a key changes it ----------------------------------------------------------------

@pytest.mark.parametrize("part", ["version", "build_id", "cpu_target"])
def test_cpu_key_names_the_core_and_the_host(part, monkeypatch):
    # Object code of another build of the core, another core version or another host CPU (its
    # features: AVX-512 code on an AVX2 host) is a different entry
    k = cpu._cache_key("plan", "ir", 3)
    real = core()
    monkeypatch.setattr(cpu, "core", lambda: _Core(real, **{part: getattr(real, part)() + "-other"}))
    assert cpu._cache_key("plan", "ir", 3) != k


@pytest.mark.parametrize("part", ["version", "build_id", "code_fingerprint", "chip", "features", "ir"])
def test_gpu_key_names_every_input(part, monkeypatch):
    args = {"linalg_ir": "ir", "chip": "sm_90", "features": "+ptx80"}
    k = gpu._cache_key(**args)
    if part in ("version", "build_id"):
        real = gpu.core()
        monkeypatch.setattr(gpu, "core", lambda: _Core(real, **{part: getattr(real, part)() + "-other"}))
    elif part == "code_fingerprint":
        monkeypatch.setattr(config, "code_fingerprint", lambda: "other sources")
    else:
        args[{"ir": "linalg_ir"}.get(part, part)] += "x"
    assert gpu._cache_key(**args) != k


def test_python_fingerprint_covers_every_source_file(tmp_path, monkeypatch):
    # config.code_fingerprint hashes each .py of the package, its path included
    root = pathlib.Path(config.__file__).resolve().parent
    files = sorted(root.rglob("*.py"))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(f.read_bytes())
    assert config.code_fingerprint() == h.hexdigest()
    assert any(f.name == "cpu.py" for f in files) and any(f.name == "calls.py" for f in files)


# -- two programs / settings, one cache directory: never one entry -------------------------------

def test_programs_differing_in_a_constant_get_their_own_entries(cache):
    a = torch.randn(64)
    for k in ("2.0", "3.0"):
        exe = cpu.CpuPlanExecutable(SCALE.replace("%K%", k))
        assert not exe.cache_hit
        torch.testing.assert_close(exe(a)[0], a * float(k))
    assert len(_entries(cache)) == 2


def test_opt_levels_get_their_own_entries(cache):
    ir = SCALE.replace("%K%", "2.0")
    assert not cpu.compile_cpu(ir, 3)[3]
    assert not cpu.compile_cpu(ir, 0)[3]
    assert cpu.compile_cpu(ir, 0)[3] and cpu.compile_cpu(ir, 3)[3]
    assert len(_entries(cache)) == 2


def test_channels_last_setting_gets_its_own_entry(cache, monkeypatch):
    # MLIRCAP_CPU_CHANNELS_LAST changes how the plan's convolutions are laid out: the mark it
    # leaves on the IR (or its absence) is part of the key
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    want = torch.nn.functional.conv2d(x, w)
    hits = []
    for setting in ("0", "1", "0", "1"):
        monkeypatch.setenv("MLIRCAP_CPU_CHANNELS_LAST", setting)
        exe = cpu.CpuPlanExecutable(CONV)
        hits.append(exe.cache_hit)
        torch.testing.assert_close(exe(x, w)[0], want, rtol=1e-5, atol=1e-5)
    assert hits == [False, False, True, True]
    assert len(_entries(cache)) == 2


def test_partition_setting_gets_its_own_entry(cache, monkeypatch):
    # MLIRCAP_CPU_LIBRARY_OPS=0 compiles log_softmax instead of calling torch's kernel: another
    # graph, another entry; each setting gets eager's result from its own entry
    def f(x):
        return torch.log_softmax(x * 2, dim=-1) + 1

    x = torch.randn(4, 33)
    seen = []
    for setting in ("1", "0"):
        monkeypatch.setenv("MLIRCAP_CPU_LIBRARY_OPS", setting)
        before = set(_entries(cache))
        fast = mlircap.compile(f)
        for _ in range(2):
            torch.testing.assert_close(fast(x), f(x), rtol=1e-5, atol=1e-5)
        seen.append(set(_entries(cache)) - before)
    assert seen[0] and seen[1] and not seen[0] & seen[1]


# -- writers at the same time, damaged entries -----------------------------------------------------

_WRITER = """
import sys
from mlircap.runtime import cpu
key, n, i = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plan = '{"writer": %d, "pad": "%s"}' % (i, "x" * 200000)
obj = b"\\x7fELF" + bytes([i]) * 300000
for _ in range(n):
    cpu.store_cached(key, plan, obj)
"""


def test_concurrent_writers_never_publish_half_an_entry(cache, monkeypatch):
    # Four processes fill the same key over and over (different bodies, as different builds
    # would) while this one reads it: every read is one writer's whole entry, none is damaged.
    key = "0" * 64
    dropped = []
    monkeypatch.setattr(cpu, "drop_cached", lambda k, problem: dropped.append(problem))
    monkeypatch.setattr(cpu.Plan, "from_json", staticmethod(lambda obj: obj))   # (bodies are not plans)
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "python"), MLIRCAP_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, key, "40", str(i)], env=env) for i in range(1, 5)]
    reads = set()
    while any(p.poll() is None for p in procs):
        e = cpu.load_cached(key)
        if e is not None:
            plan, obj = e
            assert obj == b"\x7fELF" + bytes([plan["writer"]]) * 300000
            reads.add(plan["writer"])
    assert all(p.wait() == 0 for p in procs)
    assert not dropped, dropped
    assert reads and not list(cache.glob(".*.tmp"))


def test_threads_of_one_process_write_their_own_temporary_files(cache, monkeypatch):
    # Two threads storing the same key: each writes its own temporary file (a shared one would
    # be truncated by the second while the first renames it into place: half an entry). The
    # GPU plan cache and the CPU cache alike.
    import threading

    names = []
    real = pathlib.Path.write_bytes
    both = threading.Barrier(2, timeout=60)

    def record(self, data):   # (both threads in their write at once)
        names.append(self.name)
        both.wait()
        return real(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", record)
    for store in (lambda: cpu.store_cached("k", "{}", b"\x7fELF"),
                  lambda: gpu.store_cached_plan("k", '{"values": [], "steps": [], "outputs": []}')):
        names.clear()
        ts = [threading.Thread(target=store) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(names) == 2 and names[0] != names[1], names


def test_damaged_tensor_extension_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    # A truncated build of the tensor-metadata extension in the cache (a full disk, a killed
    # copy): it is removed and built again instead of leaving tensor guards on the slow path
    # for good (or loading a damaged library).
    good = _tensor_ext.load(block=True)
    assert good is not None, _tensor_ext.error()
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    for name in ("_mod", "_err", "_building"):
        monkeypatch.setattr(_tensor_ext, name, None)
    out = _tensor_ext._out_path()
    os.makedirs(os.path.dirname(out))
    with open(good.__file__, "rb") as f:
        data = f.read()
    with open(out, "wb") as f:
        f.write(data[: len(data) // 3])
    builds = []

    def build(path):   # (a copy of the good build: the test does not wait for the compiler)
        builds.append(path)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)

    monkeypatch.setattr(_tensor_ext, "_build", build)
    m = _tensor_ext.load(block=True)
    assert builds == [out]
    assert m is not None and m.API_VERSION == _tensor_ext._API_VERSION, _tensor_ext.error()


def test_extension_builds_are_keyed_by_their_python_and_torch(monkeypatch):
    # The frame-evaluation extension uses CPython's frame internals, the tensor-metadata one
    # torch's C++ headers and libraries: a build for another Python (patch release included) or
    # another torch build is another file
    frame_dir, meta_path = _ext._cache_dir(), _tensor_ext._out_path()
    fake_sys = types.SimpleNamespace(version=sys.version + " other build", version_info=sys.version_info,
                                     implementation=sys.implementation)
    monkeypatch.setattr(_ext, "sys", fake_sys)
    monkeypatch.setattr(_tensor_ext, "sys", fake_sys)
    assert _ext._cache_dir() != frame_dir
    assert _tensor_ext._out_path() != meta_path
    monkeypatch.undo()
    monkeypatch.setattr(torch.version, "git_version", "0" * 40)
    assert _tensor_ext._out_path() != meta_path


def test_frame_extension_loader_rejects_a_truncated_build(tmp_path):
    # The frame-evaluation extension's loader checks a build the same way before dlopen
    # (prebuilt candidates and the cache's copy alike): whole builds pass, cut ones do not.
    from mlircap.capture import frame_hook   # noqa: F401 (loads the extension)

    m = _ext.load()
    assert m is not None, _ext.error()
    assert _ext.elf_complete(m.__file__) and _ext.elf_complete(_tensor_ext.load(block=True).__file__)
    data = pathlib.Path(m.__file__).read_bytes()
    for cut in (len(data) // 2, len(data) - 1, 63):
        (tmp_path / "cut.so").write_bytes(data[:cut])
        assert not _ext.elf_complete(str(tmp_path / "cut.so"))


@pytest.mark.parametrize("setting", ["MLIRCAP_CACHE_DIR", "MLIRCAP_CPU_CHANNELS_LAST"])
def test_worker_compiles_under_the_settings_of_the_compile(setting, tmp_path, monkeypatch):
    # The compile worker is started once, with the environment of its start. Set since then,
    # MLIRCAP_CACHE_DIR made it fill another directory and MLIRCAP_CPU_CHANNELS_LAST compile other
    # IR than the parent's own compile, whose success its compile is meant to prove safe
    # (so the parent compiled the graph in-process, unchecked). Now each request carries the
    # settings: the worker compiles what the parent loads, and the parent's compile is a hit.
    from mlircap import worker

    if not worker.enabled():
        pytest.fail("test needs the compile worker (MLIRCAP_COMPILE_WORKER unset)")
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path / "at_start"))
    monkeypatch.delenv("MLIRCAP_CPU_CHANNELS_LAST", raising=False)
    monkeypatch.delenv("MLIRCAP_CPU_CACHE", raising=False)
    worker._worker.stop()
    worker.prestart()
    try:
        if setting == "MLIRCAP_CACHE_DIR":
            monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path / "later"))
        else:
            monkeypatch.setenv("MLIRCAP_CPU_CHANNELS_LAST", "1")
        conv = torch.nn.Conv2d(3, 5, 3).eval()
        seed = torch.randn(5)

        def f(x):
            return (conv(x) + seed[:, None, None]).relu()

        x = torch.randn(2, 3, 9, 9)
        fast = mlircap.compile(f)
        with torch.no_grad():
            for _ in range(2):
                torch.testing.assert_close(fast(x), f(x), rtol=1e-5, atol=1e-5)
        exes = [g.executable for g in fast.graphs]
        assert exes and all(getattr(e, "cache_hit", None) is True for e in exes), \
            [(type(e).__name__, getattr(e, "cache_hit", None)) for e in exes]
    finally:
        worker._worker.stop()   # (the next compile starts one with the test session's environment)
