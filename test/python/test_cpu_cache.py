"""The on-disk cache of compiled CPU code (runtime/cpu.py): round trip, a second
process loads instead of compiling, damaged entries are removed and recompiled."""
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from mlircap._core import core, lib_dirs
from mlircap.runtime import cpu

HERE = pathlib.Path(__file__).resolve().parent

EW = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<8x16xf32>, tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.mulf %x, %y : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MLIRCAP_CPU_CACHE", raising=False)
    return tmp_path


def run_plan(exe):
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    (out,) = exe(a, b)
    torch.testing.assert_close(out, torch.tanh(a * b), rtol=1e-6, atol=1e-6)


def entries(cache):
    return sorted(cache.glob("*.cpu"))


def test_round_trip_plan(cache):
    first = cpu.CpuPlanExecutable(EW)
    assert not first.cache_hit and len(entries(cache)) == 1
    second = cpu.CpuPlanExecutable(EW)
    assert second.cache_hit
    assert second.plan == first.plan
    run_plan(second)


def test_round_trip_whole_graph(cache):
    first = cpu.CpuExecutable(EW, "main", [((8, 16), torch.float32)])
    second = cpu.CpuExecutable(EW, "main", [((8, 16), torch.float32)])
    assert (first.cache_hit, second.cache_hit) == (False, True)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    torch.testing.assert_close(second(a, b)[0], torch.tanh(a * b), rtol=1e-6, atol=1e-6)
    # the plan and the whole-graph code of one IR are different entries
    cpu.CpuPlanExecutable(EW)
    assert len(entries(cache)) == 2


def test_object_code_reloads_in_this_process():
    engine, _ = core().cpu_plan_compile(EW, 3)
    again = core().cpu_load(engine.object())
    assert again.object() == engine.object()
    assert again.lookup("main_k0")


def test_second_process_loads_instead_of_compiling(cache):
    cpu.CpuPlanExecutable(EW)
    code = ("import sys, torch; from mlircap.runtime import cpu; ir = sys.stdin.read(); "
            "exe = cpu.CpuPlanExecutable(ir); a = torch.randn(8, 16); "
            "print(exe.cache_hit, torch.allclose(exe(a, a)[0], torch.tanh(a * a), atol=1e-6))")
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "python"), MLIRCAP_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-c", code], input=EW, capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


def test_cache_off(cache, monkeypatch):
    monkeypatch.setenv("MLIRCAP_CPU_CACHE", "0")
    assert not cpu.CpuPlanExecutable(EW).cache_hit
    assert not cpu.CpuPlanExecutable(EW).cache_hit
    assert entries(cache) == []


def damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flip":
        i = len(data) - 10
        path.write_bytes(data[:i] + bytes([data[i] ^ 1]) + data[i + 1:])
    elif how == "empty":
        path.write_bytes(b"")
    else:   # a valid checksum over a body that is not what the cache writes
        body = {"not-elf": b"\0" + b"x" * 100,
                "bad-object": b"\0\x7fELF" + b"\1" * 200,
                "bad-plan": b'{"a": 1}\0' + data.partition(b"\0")[2],
                "no-separator": b"plain text"}[how]
        path.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


@pytest.mark.parametrize("how", ["truncate", "flip", "empty", "not-elf", "bad-object", "bad-plan",
                                 "no-separator"])
def test_damaged_entry_is_removed_and_recompiled(cache, how):
    cpu.CpuPlanExecutable(EW)
    (path,) = entries(cache)
    good = path.read_bytes()
    damage(path, how)
    exe = cpu.CpuPlanExecutable(EW)
    assert not exe.cache_hit
    run_plan(exe)
    assert path.read_bytes() == good   # the recompiled entry replaced the damaged one
    assert cpu.CpuPlanExecutable(EW).cache_hit


def test_entry_missing_a_kernel_is_recompiled(cache):
    # A well-formed entry whose object lacks a function the plan calls (as if
    # written by another compiler): the lookup fails, the entry is replaced.
    cpu.CpuPlanExecutable(EW)
    (path,) = entries(cache)
    plan, _, obj = path.read_bytes().partition(b"\n")[2].partition(b"\0")
    plan = json.loads(plan)
    plan["steps"][0]["name"] = "no_such_kernel"
    body = json.dumps(plan).encode() + b"\0" + obj
    path.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    exe = cpu.CpuPlanExecutable(EW)
    assert not exe.cache_hit
    run_plan(exe)


def test_key_depends_on_ir_opt_level_and_kind():
    k = cpu._cache_key("plan", "ir", 3)
    assert k == cpu._cache_key("plan", "ir", 3)
    assert k != cpu._cache_key("plan", "ir2", 3)
    assert k != cpu._cache_key("plan", "ir", 2)
    assert k != cpu._cache_key("whole", "ir", 3)


def test_key_depends_on_the_python_sources(monkeypatch):
    # an entry stored by another version of the package (same core, same IR) is a miss
    from mlircap import config

    k = cpu._cache_key("plan", "ir", 3)
    assert len(config.code_fingerprint()) == 64
    monkeypatch.setattr(config, "code_fingerprint", lambda: "other sources")
    assert k != cpu._cache_key("plan", "ir", 3)


def test_key_names_this_build_and_host():
    triple, cpu_name, features = core().cpu_target().split(" ")
    assert triple.startswith(("x86_64-", "aarch64-")) and cpu_name
    assert features.split(",") == sorted(features.split(","))
    # the GNU build ID of the loaded libmlircap_core.so: a rebuilt core never loads older code
    lib = next(p for d in lib_dirs() if (p := d / "libmlircap_core.so").exists())
    notes = subprocess.run(["readelf", "-n", str(lib)], capture_output=True, text=True, check=True).stdout
    assert f"Build ID: {core().build_id()}" in notes
