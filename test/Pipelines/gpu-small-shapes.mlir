// RUN: mlircap-opt %s --mlircap-gpu-pipeline | FileCheck %s
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | %PYTHON -m mlircap.tools.extract_ptx --ptxas %ptxas | FileCheck %s --check-prefix=ASM

// Shapes smaller than one block still get a kernel (one block, bounds-checked);
// the matmul stays a library call with its zero fill.
// CHECK-LABEL: func.func @main(
// CHECK: linalg.matmul
// CHECK: call @main_k0(
// CHECK: func.func private @main_k0({{.*}}mlircap.kernel = "pointwise"{{.*}}grid = array<i64: 1, 1, 1>
// ASM: ptxas ok: 1 module(s)
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
