"""Runs torch-mlir's JIT and mlircap's JIT in one process, in a given order.

    python coload_check.py torch_mlir_first|mlircap_first

Two LLVM copies share this process: torch-mlir's (24git, symbols exported) and
mlircap's (22.1.8, linked statically into libmlircap_core.so with every symbol
hidden). Both JITs must compile and run code correctly in either load order.
Prints one line per check and "COLOAD OK <n>" at the end; exits 1 on failure.
"""
import ctypes
import math
import sys

import torch

checks = []


def check(name, ok, detail=""):
    checks.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)


def torch_mlir_jit():
    from torch_mlir import ir
    from torch_mlir.execution_engine import ExecutionEngine
    from torch_mlir.passmanager import PassManager

    with ir.Context():
        mod = ir.Module.parse(
            "func.func @f(%a: f32, %b: f32) -> f32 attributes {llvm.emit_c_interface} {\n"
            "  %e = math.exp %a : f32\n  %t = math.tanh %b : f32\n  %s = arith.addf %e, %t : f32\n"
            "  return %s : f32\n}\n")
        PassManager.parse("builtin.module(convert-math-to-llvm,convert-to-llvm,reconcile-unrealized-casts)").run(
            mod.operation)
        ee = ExecutionEngine(mod, opt_level=2)
        a, b, res = ctypes.c_float(0.5), ctypes.c_float(-0.25), ctypes.c_float(0.0)
        ee.invoke("f", ctypes.pointer(a), ctypes.pointer(b), ctypes.pointer(res))
    want = math.exp(0.5) + math.tanh(-0.25)
    check("torch-mlir JIT exp+tanh", abs(res.value - want) < 1e-5, f"{res.value} vs {want}")


def torch_mlir_import():
    from mlircap.frontend import import_graph
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: torch.exp(x) * 2, tracing_mode="fake")(torch.randn(4, 4))
    fe = import_graph(gm)
    check("torch-mlir import to linalg", "linalg.generic" in fe.linalg_ir)


def mlircap_jit():
    from mlircap.runtime.cpu import CpuExecutable

    ir_text = """
#map = affine_map<(d0) -> (d0)>
func.func @main(%a: tensor<1003xf32>, %b: tensor<1003xf32>) -> tensor<1003xf32> {
  %e = tensor.empty() : tensor<1003xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<1003xf32>, tensor<1003xf32>) outs(%e : tensor<1003xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = math.exp %x : f32
    %t = math.erf %y : f32
    %r = arith.addf %s, %t : f32
    linalg.yield %r : f32
  } -> tensor<1003xf32>
  return %0 : tensor<1003xf32>
}"""
    exe = CpuExecutable(ir_text, "main", [((1003,), torch.float32)])
    a, b = torch.randn(1003), torch.randn(1003)
    (out,) = exe(a, b)
    err = (out - (torch.exp(a) + torch.erf(b))).abs().max().item()
    check("mlircap JIT exp+erf", err < 1e-5, f"max|diff|={err:.2e}")


def mlircap_ptx():
    from mlircap._core import core

    ptx = core().to_ptx("""
func.func @k(%a: tensor<256xf32>) -> tensor<256xf32> {
  %e = tensor.empty() : tensor<256xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a : tensor<256xf32>) outs(%e : tensor<256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<256xf32>
  return %0 : tensor<256xf32>
}""")
    check("mlircap PTX", ".visible .entry" in ptx and ".target sm_90" in ptx)


def main(order):
    if order == "torch_mlir_first":
        seq = [torch_mlir_jit, torch_mlir_import, mlircap_jit, mlircap_ptx, torch_mlir_jit, mlircap_jit]
    elif order == "mlircap_first":
        seq = [mlircap_jit, mlircap_ptx, torch_mlir_jit, torch_mlir_import, mlircap_jit, torch_mlir_jit]
    else:
        raise SystemExit(f"unknown order {order}")
    for step in seq:
        try:
            step()
        except Exception as e:  # a broken JIT shows up as an exception here
            check(step.__name__, False, repr(e))
    print(f"COLOAD {'OK' if all(checks) else 'FAILED'} {sum(checks)}/{len(checks)}")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
