"""The compiler core through its binding: pipelines, PTX, JIT, errors, symbols."""
import subprocess

import pytest
import torch

from mlircap._core import core, lib_dirs
from mlircap.runtime.cpu import CpuExecutable

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


def test_version():
    assert core().version().startswith("mlircap 0.1 (LLVM 22.1.8")


def test_run_pipeline_fuses():
    out = core().run_pipeline(EW, "mlircap-fuse")
    assert out.count("linalg.generic") == 1


def test_run_pipeline_accepts_builtin_module_wrapper():
    # parsePassPipeline silently nests a builtin.module(...) anchor; the core strips it.
    out = core().run_pipeline(EW, "builtin.module(mlircap-cpu-pipeline)")
    assert "llvm.func @_mlir_ciface_main" in out and "tensor<" not in out


def test_parse_error_is_an_exception_with_location():
    with pytest.raises(RuntimeError, match=r"loc\(.*error: .*custom op 'foo.bar'"):
        core().run_pipeline("func.func @f() {\n  foo.bar\n}", "canonicalize")


def test_bad_pipeline_is_an_exception():
    with pytest.raises(RuntimeError, match="invalid pass pipeline"):
        core().run_pipeline(EW, "no-such-pass")


def test_ptx():
    ptx = core().to_ptx(EW)
    assert ".target sm_90" in ptx and ".visible .entry main_k0" in ptx


def test_cpu_jit_matches_eager():
    exe = CpuExecutable(EW, "main", [((8, 16), torch.float32)])
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    (out,) = exe(a, b)
    torch.testing.assert_close(out, torch.tanh(a * b), rtol=1e-6, atol=1e-6)


def test_cpu_jit_non_contiguous_input():
    exe = CpuExecutable(EW, "main", [((8, 16), torch.float32)])
    a = torch.randn(16, 8).t()   # a transposed view
    b = torch.randn(8, 16)
    (out,) = exe(a, b)
    torch.testing.assert_close(out, torch.tanh(a * b), rtol=1e-6, atol=1e-6)


def test_only_c_api_is_exported():
    lib = next(d / "libmlircap_core.so" for d in lib_dirs() if (d / "libmlircap_core.so").exists())
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.split()[1] in "TDRBVW" and line.split()[1] != "b"]
    assert names and all(n.startswith("mlircap_") for n in names), names[:10]
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "libLLVM" not in needed and "libMLIR" not in needed


@pytest.mark.parametrize("bad", [
    'iterator_types = [42, "parallel"]',
    "permutation = [1,",
    "permutation =",
])
def test_known_parser_crashers_are_errors_not_aborts(bad):
    # These made upstream parsers assert (found by bench/fuzz_opt.py); in the
    # Python process an abort would kill the user's program.
    text = "func.func @f() {\n  %0 = linalg.generic {" + bad + "}\n}"
    with pytest.raises(RuntimeError, match="input rejected before parsing"):
        core().run_pipeline(text, "canonicalize")
