// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-narrow-library-operands,canonicalize))" | FileCheck %s

#map = affine_map<(d0, d1) -> (d0, d1)>
// torch-mlir's bf16 matmul: both operands extended to f32, the f32 result
// rounded to bf16. The matmul reads the bf16 tensors and, starting from zero,
// stores bf16; one extf follows (the truncf after it folds away later).
// CHECK-LABEL: func.func @bf16_matmul
// CHECK: %[[Z:.*]] = linalg.fill ins(%{{.*}} : bf16) outs(%{{.*}} : tensor<8x32xbf16>)
// CHECK: %[[M:.*]] = linalg.matmul ins(%arg0, %arg1 : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%[[Z]] : tensor<8x32xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[M]] : tensor<8x32xbf16>) outs(%{{.*}} : tensor<8x32xf32>)
// CHECK: arith.extf
// CHECK-NOT: arith.extf
func.func @bf16_matmul(%a: tensor<8x16xbf16>, %b: tensor<16x32xbf16>) -> tensor<8x32xbf16> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<8x16xf32>
  %a32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x16xbf16>) outs(%e0 : tensor<8x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<8x16xf32>
  %e1 = tensor.empty() : tensor<16x32xf32>
  %b32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<16x32xbf16>) outs(%e1 : tensor<16x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<16x32xf32>
  %e2 = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %m = linalg.matmul ins(%a32, %b32 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %e3 = tensor.empty() : tensor<8x32xbf16>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<8x32xf32>) outs(%e3 : tensor<8x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %x = arith.truncf %in : f32 to bf16
    linalg.yield %x : bf16
  } -> tensor<8x32xbf16>
  return %r : tensor<8x32xbf16>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
// The f32 product of upcast bf16 tensors used as f32 (`a.float() @ b.float()`,
// an f32 bias added before one rounding): the matmul reads the bf16 tensors but
// its result stays f32 (stored bf16 it was rounded: 0.06 off on 16x32x8).
// CHECK-LABEL: func.func @wide_result_used_wide
// CHECK: %[[M:.*]] = linalg.matmul ins(%arg0, %arg1 : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%{{.*}} : tensor<8x32xf32>)
// CHECK-NOT: arith.extf
// CHECK: arith.mulf
// CHECK: return
func.func @wide_result_used_wide(%a: tensor<8x16xbf16>, %b: tensor<16x32xbf16>) -> tensor<8x32xf32> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<8x16xf32>
  %a32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x16xbf16>) outs(%e0 : tensor<8x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<8x16xf32>
  %e1 = tensor.empty() : tensor<16x32xf32>
  %b32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<16x32xbf16>) outs(%e1 : tensor<16x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<16x32xf32>
  %e2 = tensor.empty() : tensor<8x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %m = linalg.matmul ins(%a32, %b32 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<8x32xf32>) outs(%e2 : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x = arith.mulf %in, %in : f32
    linalg.yield %x : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
// Only one operand is narrow: unchanged (a mixed library call would need its
// own conversion).
// CHECK-LABEL: func.func @mixed_kept
// CHECK: arith.extf
// CHECK: linalg.matmul ins(%{{.*}}, %arg1 : tensor<8x16xf32>, tensor<16x32xf32>)
func.func @mixed_kept(%a: tensor<8x16xbf16>, %b: tensor<16x32xf32>, %f: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %e0 = tensor.empty() : tensor<8x16xf32>
  %a32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x16xbf16>) outs(%e0 : tensor<8x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<8x16xf32>
  %m = linalg.matmul ins(%a32, %b : tensor<8x16xf32>, tensor<16x32xf32>) outs(%f : tensor<8x32xf32>) -> tensor<8x32xf32>
  return %m : tensor<8x32xf32>
}

// -----

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// batch_matmul too; an init that is not a zero fill keeps the wide result.
// CHECK-LABEL: func.func @bf16_bmm
// CHECK: linalg.batch_matmul ins(%arg0, %arg1 : tensor<2x8x16xbf16>, tensor<2x16x4xbf16>) outs(%arg2 : tensor<2x8x4xf32>)
func.func @bf16_bmm(%a: tensor<2x8x16xbf16>, %b: tensor<2x16x4xbf16>, %f: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %e0 = tensor.empty() : tensor<2x8x16xf32>
  %a32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a : tensor<2x8x16xbf16>) outs(%e0 : tensor<2x8x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<2x8x16xf32>
  %e1 = tensor.empty() : tensor<2x16x4xf32>
  %b32 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%b : tensor<2x16x4xbf16>) outs(%e1 : tensor<2x16x4xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<2x16x4xf32>
  %m = linalg.batch_matmul ins(%a32, %b32 : tensor<2x8x16xf32>, tensor<2x16x4xf32>) outs(%f : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %m : tensor<2x8x4xf32>
}

// -----

// Operands already bf16 (torch-mlir's batch matmul): the f32 result starting
// from zero, only used rounded to bf16, is stored bf16 and extended after.
// CHECK-LABEL: func.func @bf16_operands_f32_result
// CHECK: %[[M:.*]] = linalg.batch_matmul ins(%arg0, %arg1 : tensor<2x8x16xbf16>, tensor<2x16x4xbf16>) outs(%{{.*}} : tensor<2x8x4xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[M]] : tensor<2x8x4xbf16>) outs(%{{.*}} : tensor<2x8x4xf32>)
func.func @bf16_operands_f32_result(%a: tensor<2x8x16xbf16>, %b: tensor<2x16x4xbf16>) -> tensor<2x8x4xbf16> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x8x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %m = linalg.batch_matmul ins(%a, %b : tensor<2x8x16xbf16>, tensor<2x16x4xbf16>) outs(%f : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %e2 = tensor.empty() : tensor<2x8x4xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<2x8x4xf32>) outs(%e2 : tensor<2x8x4xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %x = arith.truncf %in : f32 to bf16
    linalg.yield %x : bf16
  } -> tensor<2x8x4xbf16>
  return %r : tensor<2x8x4xbf16>
}

// -----

// The same with the f32 result returned as f32: left alone.
// CHECK-LABEL: func.func @bf16_operands_f32_result_returned
// CHECK: linalg.batch_matmul ins(%arg0, %arg1 : tensor<2x8x16xbf16>, tensor<2x16x4xbf16>) outs(%{{.*}} : tensor<2x8x4xf32>)
// CHECK-NOT: arith.extf
func.func @bf16_operands_f32_result_returned(%a: tensor<2x8x16xbf16>, %b: tensor<2x16x4xbf16>) -> tensor<2x8x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x8x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %m = linalg.batch_matmul ins(%a, %b : tensor<2x8x16xbf16>, tensor<2x16x4xbf16>) outs(%f : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %m : tensor<2x8x4xf32>
}

// -----

// Dynamic shapes: the narrow init and the extension take their sizes from the
// original init (no assertion in tensor.empty).
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[E:.*]] = tensor.empty(%{{.*}}) : tensor<?x4xbf16>
// CHECK: %[[M:.*]] = linalg.matmul ins(%arg0, %arg1 : tensor<?x16xbf16>, tensor<16x4xbf16>) outs(%{{.*}} : tensor<?x4xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[M]] : tensor<?x4xbf16>) outs(%{{.*}} : tensor<?x4xf32>)
func.func @dynamic(%a: tensor<?x16xbf16>, %b: tensor<16x4xbf16>, %n: index) -> tensor<?x4xbf16> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = linalg.matmul ins(%a, %b : tensor<?x16xbf16>, tensor<16x4xbf16>) outs(%f : tensor<?x4xf32>) -> tensor<?x4xf32>
  %e2 = tensor.empty(%n) : tensor<?x4xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%m : tensor<?x4xf32>) outs(%e2 : tensor<?x4xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %x = arith.truncf %in : f32 to bf16
    linalg.yield %x : bf16
  } -> tensor<?x4xbf16>
  return %r : tensor<?x4xbf16>
}

// -----

// A bf16 convolution accumulating into f32 from a bias: the library call
// rounds to bf16 anyway, so its result is stored bf16 from a zero init and
// the bias is added after the extension (fused into the epilogue later).
// CHECK-LABEL: func.func @conv_bias_bf16(
// CHECK-SAME: %[[X:.*]]: tensor<1x4x8x8xbf16>, %[[W:.*]]: tensor<8x4x3x3xbf16>, %[[INIT:.*]]: tensor<1x8x6x6xf32>)
// CHECK: %[[Z:.*]] = linalg.fill ins(%{{.*}} : bf16) outs(%{{.*}} : tensor<1x8x6x6xbf16>)
// CHECK: %[[C:.*]] = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%[[X]], %[[W]] : tensor<1x4x8x8xbf16>, tensor<8x4x3x3xbf16>) outs(%[[Z]] : tensor<1x8x6x6xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[C]], %[[INIT]] : tensor<1x8x6x6xbf16>, tensor<1x8x6x6xf32>)
// CHECK:   %[[E:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK:   arith.addf %{{.*}}, %[[E]] : f32
func.func @conv_bias_bf16(%x: tensor<1x4x8x8xbf16>, %w: tensor<8x4x3x3xbf16>, %init: tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xbf16> {
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x4x8x8xbf16>, tensor<8x4x3x3xbf16>) outs(%init : tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  %e = tensor.empty() : tensor<1x8x6x6xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%0 : tensor<1x8x6x6xf32>) outs(%e : tensor<1x8x6x6xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<1x8x6x6xbf16>
  return %r : tensor<1x8x6x6xbf16>
}

// -----

// The same convolution whose f32 result is returned as f32: left alone.
// CHECK-LABEL: func.func @conv_bias_bf16_returned(
// CHECK: linalg.conv_2d_nchw_fchw {{.*}} outs(%{{.*}} : tensor<1x8x6x6xf32>)
// CHECK-NOT: arith.extf
func.func @conv_bias_bf16_returned(%x: tensor<1x4x8x8xbf16>, %w: tensor<8x4x3x3xbf16>, %init: tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32> {
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x4x8x8xbf16>, tensor<8x4x3x3xbf16>) outs(%init : tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %0 : tensor<1x8x6x6xf32>
}

// -----

// An f32 convolution is left alone.
// CHECK-LABEL: func.func @conv_f32(
// CHECK: linalg.conv_2d_nchw_fchw {{.*}} outs(%{{.*}} : tensor<1x8x6x6xf32>)
// CHECK-NOT: arith.extf
func.func @conv_f32(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %init: tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32> {
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%x, %w : tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) outs(%init : tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  return %0 : tensor<1x8x6x6xf32>
}
