// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-library-init))' | FileCheck %s

// A matmul accumulating into a bias gets a zero init; the bias is added after.
// CHECK-LABEL: func.func @acc(
// CHECK-SAME: %[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8x16xf32>, %[[C:.*]]: tensor<4x16xf32>
// CHECK: %[[Z:.*]] = arith.constant 0.0
// CHECK: %[[F:.*]] = linalg.fill ins(%[[Z]] : f32)
// CHECK: %[[M:.*]] = linalg.matmul ins(%[[A]], %[[B]] : {{.*}}) outs(%[[F]] : tensor<4x16xf32>)
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[M]], %[[C]] : tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK: arith.addf
// CHECK: return %[[R]]
func.func @acc(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// A zero fill init is left alone.
// CHECK-LABEL: func.func @zero(
// CHECK: linalg.fill
// CHECK-NEXT: linalg.batch_matmul
// CHECK-NOT: linalg.generic
func.func @zero(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<2x4x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x4x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %0 = linalg.batch_matmul ins(%a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32>) outs(%f : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

// A non-zero fill init (conv accumulating into 1.0) is split too.
// CHECK-LABEL: func.func @ones(
// CHECK: linalg.conv_2d_nchw_fchw {{.*}} outs(%[[F:.*]] :
// CHECK: linalg.generic
func.func @ones(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32> {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %f = linalg.fill ins(%one : f32) outs(%e : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) outs(%f : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %0 : tensor<1x4x4x4xf32>
}

// -----

// Dynamic shapes: the zero init takes its sizes from the original init (no
// assertion in tensor.empty); kernel formation rejects the function later.
// CHECK-LABEL: func.func @dynamic(
// CHECK-SAME: %{{.*}}: tensor<?x?xf32>, %{{.*}}: tensor<?x?xf32>, %[[C:.*]]: tensor<?x?xf32>
// CHECK-DAG: %[[D0:.*]] = tensor.dim %[[C]], %c0
// CHECK-DAG: %[[D1:.*]] = tensor.dim %[[C]], %c1
// CHECK: %[[E:.*]] = tensor.empty(%[[D0]], %[[D1]]) : tensor<?x?xf32>
// CHECK: linalg.fill {{.*}} outs(%[[E]] : tensor<?x?xf32>)
// CHECK: linalg.matmul
// CHECK: linalg.generic
func.func @dynamic(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
