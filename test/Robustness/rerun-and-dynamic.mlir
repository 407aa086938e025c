// Inputs that made mlircap's own passes assert (found by the mlircap-opt
// crash repros): every one ends with output or a diagnostic, never a signal.
// RUN: mlircap-opt %s --split-input-file --mlircap-cpu-pipeline | mlircap-opt --split-input-file --mlircap-cpu-pipeline | FileCheck %s --check-prefix=AGAIN
// RUN: not mlircap-opt %s --split-input-file --mlircap-fuse 2>&1 | FileCheck %s --check-prefix=FUSE
// RUN: not mlircap-opt %s --split-input-file --mlircap-gpu-pipeline 2>&1 | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --split-input-file --mlircap-cpu-pipeline | FileCheck %s --check-prefix=CPU

// The CPU pipeline's output (LLVM dialect) run through it again: the
// bool-widening pass used to cast llvm.func's type to a builtin function type.
// AGAIN: llvm.func @softmax
// AGAIN: llvm.func @_mlir_ciface_softmax
// CPU: llvm.func @softmax
// FUSE: error: mlircap: dynamic shapes are not supported
func.func @softmax(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %e = tensor.empty() : tensor<8x64xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

// Dynamic shapes: library-init and narrow-library-operands created
// tensor.empty with static sizes only (assertion). Kernel formation rejects
// the function; the CPU pipeline (whole-graph loops) compiles it.
// CPU: llvm.func @dynamic_matmul
func.func @dynamic_matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

// CPU: llvm.func @dynamic_bf16
func.func @dynamic_bf16(%a: tensor<?x16xbf16>, %b: tensor<16x4xbf16>, %n: index) -> tensor<?x4xf32> {
  %a_e = tensor.empty(%n) : tensor<?x16xf32>
  %b_e = tensor.empty() : tensor<16x4xf32>
  %a32 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<?x16xbf16>) outs(%a_e : tensor<?x16xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %y = arith.extf %x : bf16 to f32
    linalg.yield %y : f32
  } -> tensor<?x16xf32>
  %b32 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
      ins(%b : tensor<16x4xbf16>) outs(%b_e : tensor<16x4xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %y = arith.extf %x : bf16 to f32
    linalg.yield %y : f32
  } -> tensor<16x4xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = linalg.matmul ins(%a32, %b32 : tensor<?x16xf32>, tensor<16x4xf32>) outs(%f : tensor<?x4xf32>) -> tensor<?x4xf32>
  return %m : tensor<?x4xf32>
}
