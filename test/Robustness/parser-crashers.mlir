// RUN: not mlircap-opt %s --mlircap-fuse 2>&1 | FileCheck %s
// Inputs found by bench/fuzz_opt.py that made upstream custom-op parsers assert
// (abort) in the SDK's assertions-enabled build. mlircap-opt rejects them with
// diagnostics (file:line:col) before parsing, and exits 1 instead of aborting.
// CHECK-NOT: Assertion
// CHECK-NOT: Stack dump

#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @iterator_type_not_a_string(%a: tensor<4x3xf32>, %e: tensor<4x3xf32>) -> tensor<4x3xf32> {
  // CHECK: parser-crashers.mlir:[[@LINE+1]]:{{[0-9]+}}: error: iterator_types entries must be "parallel", "reduction" or "window", got '42'
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = [42, "parallel"]} ins(%a : tensor<4x3xf32>) outs(%e : tensor<4x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

func.func @permutation_without_list(%x: tensor<4x8xf32>, %e: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // CHECK: parser-crashers.mlir:[[@LINE+1]]:{{[0-9]+}}: error: 'permutation' must be followed by a list of integers
  %t = linalg.transpose ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation =
  return %t : tensor<8x4xf32>
}

func.func @permutation_list_not_closed(%x: tensor<4x8xf32>, %e: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // CHECK: parser-crashers.mlir:[[@LINE+1]]:{{[0-9]+}}: error: 'permutation' list is not terminated by '{{\]}}'
  %t = linalg.transpose ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1,
  return %t : tensor<8x4xf32>
}

func.func @dimensions_not_integers(%x: tensor<8xf32>, %e: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: parser-crashers.mlir:[[@LINE+1]]:{{[0-9]+}}: error: 'dimensions' must be a list of integers
  %b = linalg.broadcast ins(%x : tensor<8xf32>) outs(%e : tensor<4x8xf32>) dimensions = [a]
  return %b : tensor<4x8xf32>
}
