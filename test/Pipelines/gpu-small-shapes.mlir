// RUN: mlircap-opt %s --mlircap-gpu-pipeline | FileCheck %s
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | %PYTHON -m mlircap.tools.extract_ptx --ptxas %ptxas | FileCheck %s --check-prefix=ASM

// Shapes smaller than a tile (3 < 256 columns) are still mapped to GPU threads
// (full tiles with an in-kernel bounds check), not left as host loops.
// CHECK-LABEL: llvm.func @main
// CHECK-NOT: llvm.br
// CHECK: gpu.launch_func @main_kernel::@main_kernel
// CHECK: gpu.launch_func @main_kernel_0::@main_kernel
// CHECK: gpu.launch_func @main_kernel_1::@main_kernel
// CHECK-NOT: llvm.br
// CHECK: llvm.return
// ASM: ptxas ok: 3 module(s)
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<4x3xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x3xf32>) -> tensor<4x3xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8x3xf32>) outs(%1 : tensor<4x3xf32>) -> tensor<4x3xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<4x3xf32>) outs(%0 : tensor<4x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = arith.maximumf %in, %cst : f32
    linalg.yield %5 : f32
  } -> tensor<4x3xf32>
  return %3 : tensor<4x3xf32>
}
