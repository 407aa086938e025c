// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-fuse-elementwise))' | FileCheck %s

// bias add + relu fuse into one generic.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @chain(
// CHECK-COUNT-1: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: arith.addf
// CHECK: arith.maximumf
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %z : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// A reshape of a batch_matmul result is not folded into it: the batch_matmul
// must stay a named (library) op.
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @bmm_reshape(
// CHECK: linalg.batch_matmul
// CHECK: tensor.expand_shape
// CHECK: linalg.generic
func.func @bmm_reshape(%a: tensor<8x4x16xf32>, %b: tensor<8x16x4xf32>) -> tensor<2x4x4x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  %m = linalg.batch_matmul ins(%a, %b : tensor<8x4x16xf32>, tensor<8x16x4xf32>) outs(%f : tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
  %r = tensor.expand_shape %m [[0, 1], [2], [3]] output_shape [2, 4, 4, 4] : tensor<8x4x4xf32> into tensor<2x4x4x4xf32>
  %e2 = tensor.empty() : tensor<2x4x4x4xf32>
  %s = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%r : tensor<2x4x4x4xf32>) outs(%e2 : tensor<2x4x4x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<2x4x4x4xf32>
  return %s : tensor<2x4x4x4xf32>
}
