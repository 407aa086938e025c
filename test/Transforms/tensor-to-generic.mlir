// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-tensor-to-generic))' | FileCheck %s

// CHECK-LABEL: func.func @pad(
// CHECK-NOT: tensor.pad
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x6x6xf32>)
// CHECK-DAG: linalg.index 2
// CHECK-DAG: linalg.index 3
// CHECK: arith.cmpi ult
// CHECK: tensor.extract %arg0
// CHECK: arith.select
func.func @pad(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x6x6xf32> {
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %z : f32
  } : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
  return %p : tensor<1x2x6x6xf32>
}

// -----

// CHECK-LABEL: func.func @insert(
// CHECK-NOT: tensor.insert_slice
// CHECK: linalg.generic {{.*}} ins(%arg1 : tensor<8x4xf32>)
// CHECK: tensor.extract %arg0
// CHECK: arith.select
func.func @insert(%x: tensor<2x4xf32>, %d: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = tensor.insert_slice %x into %d[3, 0] [2, 4] [1, 1] : tensor<2x4xf32> into tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}

// -----

// concat = insert_slices = one elementwise chain (fused later).
// CHECK-LABEL: func.func @concat(
// CHECK-NOT: tensor.concat
// CHECK-COUNT-2: linalg.generic
func.func @concat(%a: tensor<2x4xf32>, %b: tensor<3x4xf32>) -> tensor<5x4xf32> {
  %r = tensor.concat dim(0) %a, %b : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<5x4xf32>
  return %r : tensor<5x4xf32>
}

// -----

// A zero padding that only a library convolution reads stays: the convolution
// pads its input itself (the launch plan passes it the source and the padding).
// CHECK-LABEL: func.func @conv_pads(
// CHECK: tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1]
// CHECK: linalg.conv_2d_nchw_fchw
func.func @conv_pads(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32> {
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %z : f32
  } : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
  %e = tensor.empty() : tensor<1x3x4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
       ins(%p, %w : tensor<1x2x6x6xf32>, tensor<3x2x3x3xf32>) outs(%f : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  return %c : tensor<1x3x4x4xf32>
}

// -----

// Asymmetric padding, or a padded tensor that something else reads too, is a kernel.
// CHECK-LABEL: func.func @conv_pad_also_returned(
// CHECK-NOT: tensor.pad
// CHECK: linalg.conv_2d_nchw_fchw
func.func @conv_pad_also_returned(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x3x3xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x2x6x6xf32>) {
  %z = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %z : f32
  } : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
  %e = tensor.empty() : tensor<1x3x4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
       ins(%p, %w : tensor<1x2x6x6xf32>, tensor<3x2x3x3xf32>) outs(%f : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  return %c, %p : tensor<1x3x4x4xf32>, tensor<1x2x6x6xf32>
}
