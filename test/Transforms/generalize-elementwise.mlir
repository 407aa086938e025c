// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-generalize-elementwise))" | FileCheck %s

// CHECK-LABEL: func.func @transpose
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel"]
// CHECK-NOT: linalg.transpose
func.func @transpose(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  return %t : tensor<8x4xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast
// CHECK: linalg.generic
// CHECK-NOT: linalg.broadcast
func.func @broadcast(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %b = linalg.broadcast ins(%x : tensor<8xf32>) outs(%e : tensor<4x8xf32>) dimensions = [0]
  return %b : tensor<4x8xf32>
}

// -----

// Contractions stay named: they become library calls.
// CHECK-LABEL: func.func @matmul_kept
// CHECK: linalg.fill
// CHECK: linalg.matmul
// CHECK-NOT: linalg.generic
func.func @matmul_kept(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %m : tensor<4x16xf32>
}

// -----

// Convolutions stay named (library calls); pooling becomes a generic (a kernel).
// CHECK-LABEL: func.func @conv_kept
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: linalg.generic
// CHECK-SAME: "reduction", "reduction"
// CHECK-NOT: linalg.pooling_nchw_max
func.func @conv_kept(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %o: tensor<1x4x6x6xf32>, %k: tensor<2x2xf32>, %p: tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32> {
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) outs(%o : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %r = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%c, %k : tensor<1x4x6x6xf32>, tensor<2x2xf32>) outs(%p : tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  return %r : tensor<1x4x3x3xf32>
}
