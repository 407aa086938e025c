// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-generalize-elementwise))' | FileCheck %s

// Transposes and pooling become generics; matmul and fill stay named.
// CHECK-LABEL: func.func @mixed(
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel"]
// CHECK: linalg.fill
// CHECK: linalg.matmul
func.func @mixed(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%w : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = linalg.matmul ins(%x, %t : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %m : tensor<4x4xf32>
}

// -----

// Pooling and convolutions without a library call become generics (kernels).
// CHECK-LABEL: func.func @pool(
// CHECK-NOT: linalg.pooling
// CHECK-NOT: linalg.depthwise
// CHECK: linalg.generic
// CHECK-SAME: "reduction", "reduction"
// CHECK: linalg.generic
func.func @pool(%x: tensor<1x4x8x8xf32>, %w: tensor<2x2xf32>, %dw: tensor<3x3x4xf32>, %y: tensor<1x8x8x4xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x6x6x4xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %p = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>}
      ins(%x, %w : tensor<1x4x8x8xf32>, tensor<2x2xf32>) outs(%f : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %e2 = tensor.empty() : tensor<1x6x6x4xf32>
  %d = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
      ins(%y, %dw : tensor<1x8x8x4xf32>, tensor<3x3x4xf32>) outs(%e2 : tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
  return %p, %d : tensor<1x4x4x4xf32>, tensor<1x6x6x4xf32>
}
