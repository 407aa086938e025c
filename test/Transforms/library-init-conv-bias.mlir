// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-library-init))' | FileCheck %s

// Under mlircap.conv_bias (the CPU launch plan), a convolution accumulating into
// its bias broadcast along the channels keeps it: a broadcast of its own, marked
// for the plan, which hands the 1-D bias to the library convolution.
// CHECK-LABEL: func.func @bias(
// CHECK-SAME: %[[X:.*]]: tensor<1x2x6x6xf32>, %[[W:.*]]: tensor<4x2x3x3xf32>, %[[B:.*]]: tensor<4xf32>
// CHECK: %[[I:.*]] = linalg.generic {{.*}} ins(%[[B]] : tensor<4xf32>) {{.*}} attrs = {mlircap.conv_bias}
// CHECK: %[[C:.*]] = linalg.conv_2d_nchw_fchw {{.*}} outs(%[[I]] : tensor<1x4x4x4xf32>)
// CHECK-NOT: arith.addf
// CHECK: return %[[C]]
module attributes {mlircap.conv_bias} {
func.func @bias(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %bc = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<1x4x4x4xf32>) dimensions = [0, 2, 3]
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) outs(%bc : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %0 : tensor<1x4x4x4xf32>
}
}

// -----

// Without the module attribute (the GPU) the bias is added after the convolution.
// CHECK-LABEL: func.func @gpu(
// CHECK: linalg.fill
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: arith.addf
func.func @gpu(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %bc = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<1x4x4x4xf32>) dimensions = [0, 2, 3]
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) outs(%bc : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %0 : tensor<1x4x4x4xf32>
}

// -----

// A broadcast along another dim than the channels (not a bias) is added after.
// CHECK-LABEL: func.func @rows(
// CHECK: linalg.fill
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: arith.addf
module attributes {mlircap.conv_bias} {
func.func @rows(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %bc = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<1x4x4x4xf32>) dimensions = [0, 1, 3]
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) outs(%bc : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %0 : tensor<1x4x4x4xf32>
}
}
