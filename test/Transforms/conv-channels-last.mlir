// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-conv-channels-last))' | FileCheck %s
// RUN: mlircap-opt %s --split-input-file --mlircap-gpu-pipeline -o /dev/null

// conv -> relu -> conv + residual: the relu between the convolutions runs in NHWC
// (identity maps, reading the first convolution's NHWC result), once: the residual
// add reads a view of it (not a second relu over an NCHW view of the convolution's
// result), the padding moves to
// the NHWC side, the weights are transposed views, and the result (a graph output) is
// copied out NCHW by a materialized transpose.
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[TO_NHWC:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
// CHECK-DAG: #[[TO_NCHW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>
// CHECK-LABEL: func.func @resblock(
// CHECK-SAME: %[[X:.*]]: tensor<1x4x8x8xf32>, %[[W1:.*]]: tensor<8x4x3x3xf32>, %[[W2:.*]]: tensor<8x8x3x3xf32>
// CHECK: %[[XT:.*]] = linalg.generic {indexing_maps = [#[[TO_NHWC]], #[[ID]]]{{.*}} ins(%[[X]] : tensor<1x4x8x8xf32>)
// CHECK: %[[XP:.*]] = tensor.pad %[[XT]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK: %[[W1T:.*]] = linalg.generic {indexing_maps = [#[[TO_NHWC]], #[[ID]]]{{.*}} ins(%[[W1]] : tensor<8x4x3x3xf32>)
// CHECK: %[[C1:.*]] = linalg.conv_2d_nhwc_fhwc {{.*}} ins(%[[XP]], %[[W1T]] : tensor<1x10x10x4xf32>, tensor<8x3x3x4xf32>)
// the relu, computed once, NHWC from the first convolution's result ...
// CHECK: %[[R:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ID]]]{{.*}} ins(%[[C1]] :
// CHECK: arith.maximumf
// ... read by the residual add through an NCHW view of it
// CHECK: %[[RN:.*]] = linalg.generic {indexing_maps = [#[[TO_NCHW]], #[[ID]]]{{.*}} ins(%[[R]] : {{.*}}) {{.*}} attrs = {mlircap.from_nhwc}
// CHECK-NOT: arith.maximumf
// CHECK: %[[RP:.*]] = tensor.pad %[[R]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK: %[[W2T:.*]] = linalg.generic {indexing_maps = [#[[TO_NHWC]], #[[ID]]]{{.*}} ins(%[[W2]] :
// CHECK: %[[C2:.*]] = linalg.conv_2d_nhwc_fhwc {{.*}} ins(%[[RP]], %[[W2T]] : tensor<1x10x10x8xf32>, tensor<8x3x3x8xf32>)
// CHECK: %[[C2N:.*]] = linalg.generic {indexing_maps = [#[[TO_NCHW]], #[[ID]]]{{.*}} ins(%[[C2]] :
// CHECK: %[[SUM:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ID]], #[[ID]]]{{.*}} ins(%[[C2N]], %[[RN]] :
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: return %[[SUM]]
func.func @resblock(%x: tensor<1x4x8x8xf32>, %w1: tensor<8x4x3x3xf32>, %w2: tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %padded = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : f32
  } : tensor<1x4x8x8xf32> to tensor<1x4x10x10xf32>
  %e = tensor.empty() : tensor<1x8x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %w1 : tensor<1x4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<1x8x8x8xf32>) outs(%e : tensor<1x8x8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %6 = arith.maximumf %in, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<1x8x8x8xf32>
  %padded_4 = tensor.pad %2 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : f32
  } : tensor<1x8x8x8xf32> to tensor<1x8x10x10xf32>
  %3 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded_4, %w2 : tensor<1x8x10x10xf32>, tensor<8x8x3x3xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%3, %2 : tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) outs(%e : tensor<1x8x8x8xf32>) {
  ^bb0(%in: f32, %in_6: f32, %out: f32):
    %6 = arith.addf %in, %in_6 : f32
    linalg.yield %6 : f32
  } -> tensor<1x8x8x8xf32>
  return %4 : tensor<1x8x8x8xf32>
}

// -----

// Two convolutions in a row, the first one's result also returned: the transposes
// cancel (the second convolution reads the first's NHWC result), and the returned
// value is copied out NCHW by a materialized transpose.
// CHECK-LABEL: func.func @chain(
// CHECK: %[[A:.*]] = linalg.conv_2d_nhwc_fhwc
// CHECK: %[[B:.*]] = linalg.conv_2d_nhwc_fhwc {{.*}} ins(%[[A]], %{{.*}} : tensor<2x6x6x8xf32>
// CHECK-DAG: %[[OA:.*]] = linalg.generic {{.*}} ins(%[[A]] : {{.*}}) {{.*}} attrs = {mlircap.materialize}
// CHECK-DAG: %[[OB:.*]] = linalg.generic {{.*}} ins(%[[B]] : {{.*}}) {{.*}} attrs = {mlircap.materialize}
// CHECK: return %[[OA]], %[[OB]]
func.func @chain(%x: tensor<2x3x8x8xf32>, %w1: tensor<8x3x3x3xf32>, %w2: tensor<4x8x1x1xf32>) -> (tensor<2x8x6x6xf32>, tensor<2x4x6x6xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %e1 = tensor.empty() : tensor<2x8x6x6xf32>
  %z1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  %a = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w1 : tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) outs(%z1 : tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  %e2 = tensor.empty() : tensor<2x4x6x6xf32>
  %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x4x6x6xf32>) -> tensor<2x4x6x6xf32>
  %b = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%a, %w2 : tensor<2x8x6x6xf32>, tensor<4x8x1x1xf32>) outs(%z2 : tensor<2x4x6x6xf32>) -> tensor<2x4x6x6xf32>
  return %a, %b : tensor<2x8x6x6xf32>, tensor<2x4x6x6xf32>
}

// -----

// The module opts out (MLIRCAP_GPU_CHANNELS_LAST=0): the convolution stays NCHW.
// CHECK-LABEL: func.func @opt_out(
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK-NOT: linalg.conv_2d_nhwc_fhwc
module attributes {mlircap.nchw_convs} {
  func.func @opt_out(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) -> tensor<1x8x6x6xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<1x8x6x6xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
    %a = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>) outs(%z : tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
    return %a : tensor<1x8x6x6xf32>
  }
}

// -----

// conv -> relu -> max pool (a -inf padding and a generic with reduction loops) -> conv:
// the pooling's parallel loops are permuted too (NHWC, reading the padded relu result
// in NHWC), so both convolutions and everything between them run in NHWC.
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#pin = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>
#pwin = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#pout = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @pool(
// CHECK: %[[C1:.*]] = linalg.conv_2d_nhwc_fhwc
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[C1]] : tensor<1x8x8x8xf32>)
// CHECK: %[[P:.*]] = tensor.pad %[[R]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK: %[[M:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%[[P]], %{{.*}} : tensor<1x10x10x8xf32>, tensor<3x3xf32>) outs(%{{.*}} : tensor<1x4x4x8xf32>)
// CHECK: linalg.conv_2d_nhwc_fhwc {{.*}} ins(%[[M]], %{{.*}} : tensor<1x4x4x8xf32>
func.func @pool(%x: tensor<1x3x8x8xf32>, %w1: tensor<8x3x1x1xf32>, %w2: tensor<4x8x1x1xf32>) -> tensor<1x4x4x4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<1x8x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w1 : tensor<1x3x8x8xf32>, tensor<8x3x1x1xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<1x8x8x8xf32>) outs(%e : tensor<1x8x8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %6 = arith.maximumf %in, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<1x8x8x8xf32>
  %padded = tensor.pad %2 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %ninf : f32
  } : tensor<1x8x8x8xf32> to tensor<1x8x10x10xf32>
  %win = tensor.empty() : tensor<3x3xf32>
  %pe = tensor.empty() : tensor<1x8x4x4xf32>
  %pf = linalg.fill ins(%ninf : f32) outs(%pe : tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
  %3 = linalg.generic {indexing_maps = [#pin, #pwin, #pout], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%padded, %win : tensor<1x8x10x10xf32>, tensor<3x3xf32>) outs(%pf : tensor<1x8x4x4xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %6 = arith.maximumf %in, %out : f32
    linalg.yield %6 : f32
  } -> tensor<1x8x4x4xf32>
  %e2 = tensor.empty() : tensor<1x4x4x4xf32>
  %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %4 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%3, %w2 : tensor<1x8x4x4xf32>, tensor<4x8x1x1xf32>) outs(%z2 : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %4 : tensor<1x4x4x4xf32>
}

// -----

// A convolution whose result is reshaped (GroupNorm's groups) stays NCHW: the
// reshape would read an NHWC result transposed and strided.
// CHECK-LABEL: func.func @groups(
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK-NOT: linalg.conv_2d_nhwc_fhwc
func.func @groups(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x1x1xf32>) -> tensor<1x2x4x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<1x8x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x3x8x8xf32>, tensor<8x3x1x1xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %2 = tensor.expand_shape %1 [[0], [1, 2], [3], [4]] output_shape [1, 2, 4, 8, 8] : tensor<1x8x8x8xf32> into tensor<1x2x4x8x8xf32>
  return %2 : tensor<1x2x4x8x8xf32>
}

// -----

// The same through an elementwise op that is the result's only reader (here a bf16
// convolution's result extended to f32; UNet: the bias add), then grouped: still NCHW.
#id5 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @groups_after_extf(
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK-NOT: linalg.conv_2d_nhwc_fhwc
func.func @groups_after_extf(%x: tensor<1x3x8x8xbf16>, %w: tensor<8x3x1x1xbf16>) -> tensor<1x2x4x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : bf16
  %e = tensor.empty() : tensor<1x8x8x8xbf16>
  %z = linalg.fill ins(%cst : bf16) outs(%e : tensor<1x8x8x8xbf16>) -> tensor<1x8x8x8xbf16>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x3x8x8xbf16>, tensor<8x3x1x1xbf16>) outs(%z : tensor<1x8x8x8xbf16>) -> tensor<1x8x8x8xbf16>
  %ef = tensor.empty() : tensor<1x8x8x8xf32>
  %2 = linalg.generic {indexing_maps = [#id5, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<1x8x8x8xbf16>) outs(%ef : tensor<1x8x8x8xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %6 = arith.extf %in : bf16 to f32
    linalg.yield %6 : f32
  } -> tensor<1x8x8x8xf32>
  %3 = tensor.expand_shape %2 [[0], [1, 2], [3], [4]] output_shape [1, 2, 4, 8, 8] : tensor<1x8x8x8xf32> into tensor<1x2x4x8x8xf32>
  return %3 : tensor<1x2x4x8x8xf32>
}

// -----

// Two functions in one module: each converts its own convolution (the pass keeps no
// transposes from one function for the next).
// CHECK-LABEL: func.func @first(
// CHECK: linalg.conv_2d_nhwc_fhwc {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x8x8x3xf32>, tensor<4x1x1x3xf32>)
// CHECK-LABEL: func.func @second(
// CHECK: linalg.conv_2d_nhwc_fhwc {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x8x8x3xf32>, tensor<4x1x1x3xf32>)
func.func @first(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<1x4x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x3x8x8xf32>, tensor<4x3x1x1xf32>) outs(%z : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  return %1 : tensor<1x4x8x8xf32>
}
func.func @second(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<1x4x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x3x8x8xf32>, tensor<4x3x1x1xf32>) outs(%z : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  return %1 : tensor<1x4x8x8xf32>
}

// -----

// Spatial sums of a convolution's result (GroupNorm's per-channel statistics, sum over W
// then H) are read in NHWC order: the reductions' loops are permuted (columns of
// contiguous channels), the partial sums written [N, H, C] and read back so by the next
// reduction; the normalization between the convolutions stays NHWC, both convolutions too.
// CHECK-LABEL: func.func @spatial_sums(
// CHECK: %[[C1:.*]] = linalg.conv_2d_nhwc_fhwc
// CHECK: %[[S1:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%[[C1]] : tensor<1x8x8x8xf32>) outs(%{{.*}} : tensor<1x8x8xf32>)
// CHECK: %[[S2:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction", "parallel"]} ins(%[[S1]] : tensor<1x8x8xf32>) outs(%{{.*}} : tensor<1x8xf32>)
// CHECK: %[[N:.*]] = linalg.generic {{.*}} ins(%[[C1]], %[[S2]] : tensor<1x8x8x8xf32>, tensor<1x8xf32>)
// CHECK: linalg.conv_2d_nhwc_fhwc {{.*}} ins(%[[N]], %{{.*}} : tensor<1x8x8x8xf32>, tensor<4x1x1x8xf32>)
// CHECK-NOT: linalg.conv_2d_nchw_fchw
// CHECK: return %[[S2]],
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#sw = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#sh = affine_map<(d0, d1, d2) -> (d0, d1)>
#bc = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
func.func @spatial_sums(%x: tensor<1x3x8x8xf32>, %w1: tensor<8x3x1x1xf32>, %w2: tensor<4x8x1x1xf32>) -> (tensor<1x8xf32>, tensor<1x4x8x8xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<1x8x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w1 : tensor<1x3x8x8xf32>, tensor<8x3x1x1xf32>) outs(%z : tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %e3 = tensor.empty() : tensor<1x8x8xf32>
  %z3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<1x8x8xf32>) -> tensor<1x8x8xf32>
  %2 = linalg.generic {indexing_maps = [#id, #sw], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%1 : tensor<1x8x8x8xf32>) outs(%z3 : tensor<1x8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<1x8x8xf32>
  %e2 = tensor.empty() : tensor<1x8xf32>
  %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<1x8xf32>) -> tensor<1x8xf32>
  %3 = linalg.generic {indexing_maps = [#id3, #sh], iterator_types = ["parallel", "parallel", "reduction"]} ins(%2 : tensor<1x8x8xf32>) outs(%z2 : tensor<1x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<1x8xf32>
  %4 = linalg.generic {indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %3 : tensor<1x8x8x8xf32>, tensor<1x8xf32>) outs(%e : tensor<1x8x8x8xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %s = arith.subf %in, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x8x8x8xf32>
  %e4 = tensor.empty() : tensor<1x4x8x8xf32>
  %z4 = linalg.fill ins(%cst : f32) outs(%e4 : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %5 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%4, %w2 : tensor<1x8x8x8xf32>, tensor<4x8x1x1xf32>) outs(%z4 : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  return %3, %5 : tensor<1x8xf32>, tensor<1x4x8x8xf32>
}

// -----

// Two convolutions joined on channels (a UNet skip connection) feed a third: the
// transpose passes through the concatenation (each operand transposed, the concat
// dim now the last), so all three run in NHWC and nothing is transposed between
// them.
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-LABEL: func.func @concat(
// CHECK-DAG: %[[A:.*]] = linalg.conv_2d_nhwc_fhwc
// CHECK-DAG: %[[B:.*]] = linalg.conv_2d_nhwc_fhwc
// CHECK-DAG: %[[R:.*]] = linalg.generic {{.*}} ins(%[[A]] : tensor<1x8x8x4xf32>)
// CHECK: %[[C:.*]] = tensor.concat dim(3) %[[R]], %[[B]] : (tensor<1x8x8x4xf32>, tensor<1x8x8x4xf32>) -> tensor<1x8x8x8xf32>
// CHECK: linalg.conv_2d_nhwc_fhwc {{.*}} ins(%[[C]], %{{.*}} : tensor<1x8x8x8xf32>
func.func @concat(%x: tensor<1x3x8x8xf32>, %w1: tensor<4x3x1x1xf32>, %w2: tensor<4x3x1x1xf32>, %w3: tensor<2x8x1x1xf32>) -> tensor<1x2x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<1x4x8x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %a = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w1 : tensor<1x3x8x8xf32>, tensor<4x3x1x1xf32>) outs(%z : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %b = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w2 : tensor<1x3x8x8xf32>, tensor<4x3x1x1xf32>) outs(%z : tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%a : tensor<1x4x8x8xf32>) outs(%e : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %cst : f32
    linalg.yield %m : f32
  } -> tensor<1x4x8x8xf32>
  %c = tensor.concat dim(1) %r, %b : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x8x8x8xf32>
  %e3 = tensor.empty() : tensor<1x2x8x8xf32>
  %z3 = linalg.fill ins(%cst : f32) outs(%e3 : tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %d = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%c, %w3 : tensor<1x8x8x8xf32>, tensor<2x8x1x1xf32>) outs(%z3 : tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  return %d : tensor<1x2x8x8xf32>
}

// -----

// ConvNeXt's block: a depthwise convolution, a bias, then a permute to channels-last
// (LayerNorm over channels and a linear layer follow). The convolution runs NHWC
// (filter (kh, kw, C)) and the permute composes with the transpose out of it: the bias
// is added in NHWC, reading the convolution's result directly, and no transpose is left.
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias = affine_map<(d0, d1, d2, d3) -> (d1)>
#to_nhwc = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
// CHECK-LABEL: func.func @depthwise_then_permute(
// CHECK-SAME: %[[X:.*]]: tensor<2x8x12x12xbf16>, %[[W:.*]]: tensor<8x7x7xbf16>, %[[B:.*]]: tensor<8xf32>
// CHECK: %[[WT:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<8x7x7xbf16>) outs({{.*}} : tensor<7x7x8xbf16>)
// CHECK: %[[C:.*]] = linalg.depthwise_conv_2d_nhwc_hwc {{.*}} ins(%{{.*}}, %[[WT]] : tensor<2x12x12x8xbf16>, tensor<7x7x8xbf16>) outs(%{{.*}} : tensor<2x6x6x8xbf16>)
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[C]], %[[B]] : tensor<2x6x6x8xbf16>, tensor<8xf32>) outs(%{{.*}} : tensor<2x6x6x8xf32>)
// CHECK-NOT: linalg.depthwise_conv_2d_nchw_chw
// CHECK: return %[[R]] : tensor<2x6x6x8xf32>
func.func @depthwise_then_permute(%x: tensor<2x8x12x12xbf16>, %w: tensor<8x7x7xbf16>, %b: tensor<8xf32>) -> tensor<2x6x6x8xf32> {
  %zero = arith.constant 0.000000e+00 : bf16
  %e = tensor.empty() : tensor<2x8x6x6xbf16>
  %z = linalg.fill ins(%zero : bf16) outs(%e : tensor<2x8x6x6xbf16>) -> tensor<2x8x6x6xbf16>
  %c = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<2x8x12x12xbf16>, tensor<8x7x7xbf16>) outs(%z : tensor<2x8x6x6xbf16>) -> tensor<2x8x6x6xbf16>
  %ef = tensor.empty() : tensor<2x8x6x6xf32>
  %biased = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c, %b : tensor<2x8x6x6xbf16>, tensor<8xf32>) outs(%ef : tensor<2x8x6x6xf32>) {
  ^bb0(%in: bf16, %bi: f32, %out: f32):
    %0 = arith.extf %in : bf16 to f32
    %1 = arith.addf %0, %bi : f32
    linalg.yield %1 : f32
  } -> tensor<2x8x6x6xf32>
  %et = tensor.empty() : tensor<2x6x6x8xf32>
  %t = linalg.generic {indexing_maps = [#to_nhwc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%biased : tensor<2x8x6x6xf32>) outs(%et : tensor<2x6x6x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x6x6x8xf32>
  return %t : tensor<2x6x6x8xf32>
}

// -----

// ConvNeXt's stage: each block's depthwise convolution reads the residual stream,
// and so does the block's residual add; the stage's result is permuted to
// channels-last (LayerNorm2d). The residual stream is computed once, in NHWC: the
// residual adds read it directly (no second, NCHW copy of the stream recomputed
// from every block's terms), and the final permute cancels (no transpose left).
// CHECK-LABEL: func.func @convnext_stage(
// CHECK-SAME: %[[X0:.*]]: tensor<2x8x12x12xf32>
// CHECK: %[[C1:.*]] = linalg.depthwise_conv_2d_nhwc_hwc
// CHECK: %[[M1:.*]] = linalg.generic {{.*}} ins(%[[C1]] : tensor<2x12x12x8xf32>)
// CHECK: %[[X1:.*]] = linalg.generic {{.*}} ins(%[[M1]], %{{.*}}, %[[X0]] : tensor<2x12x12x8xf32>, tensor<8xf32>, tensor<2x8x12x12xf32>) outs(%{{.*}} : tensor<2x12x12x8xf32>)
// CHECK: tensor.pad %[[X1]]
// CHECK: %[[C2:.*]] = linalg.depthwise_conv_2d_nhwc_hwc
// CHECK: %[[M2:.*]] = linalg.generic {{.*}} ins(%[[C2]] : tensor<2x12x12x8xf32>)
// CHECK: %[[X2:.*]] = linalg.generic {{.*}} ins(%[[M2]], %{{.*}}, %[[X1]] : tensor<2x12x12x8xf32>, tensor<8xf32>, tensor<2x12x12x8xf32>) outs(%{{.*}} : tensor<2x12x12x8xf32>)
// CHECK-NOT: linalg.generic
// CHECK: return %[[X2]] : tensor<2x12x12x8xf32>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1)>
#to_nhwc = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>
#to_nchw = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>
func.func @convnext_stage(%x0: tensor<2x8x12x12xf32>, %w: tensor<8x7x7xf32>, %g: tensor<8xf32>) -> tensor<2x12x12x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %two = arith.constant 2.000000e+00 : f32
  %e = tensor.empty() : tensor<2x8x12x12xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x8x12x12xf32>) -> tensor<2x8x12x12xf32>
  %et = tensor.empty() : tensor<2x12x12x8xf32>
  // block 1
  %p1 = tensor.pad %x0 low[0, 0, 3, 3] high[0, 0, 3, 3] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %zero : f32
  } : tensor<2x8x12x12xf32> to tensor<2x8x18x18xf32>
  %c1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p1, %w : tensor<2x8x18x18xf32>, tensor<8x7x7xf32>) outs(%z : tensor<2x8x12x12xf32>) -> tensor<2x8x12x12xf32>
  %t1 = linalg.generic {indexing_maps = [#to_nhwc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c1 : tensor<2x8x12x12xf32>) outs(%et : tensor<2x12x12x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x12x12x8xf32>
  %m1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%t1 : tensor<2x12x12x8xf32>) outs(%et : tensor<2x12x12x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %two : f32
    linalg.yield %0 : f32
  } -> tensor<2x12x12x8xf32>
  %b1 = linalg.generic {indexing_maps = [#to_nchw, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%m1 : tensor<2x12x12x8xf32>) outs(%e : tensor<2x8x12x12xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x8x12x12xf32>
  %x1 = linalg.generic {indexing_maps = [#id, #ch, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%b1, %g, %x0 : tensor<2x8x12x12xf32>, tensor<8xf32>, tensor<2x8x12x12xf32>) outs(%e : tensor<2x8x12x12xf32>) {
  ^bb0(%in: f32, %gi: f32, %r: f32, %out: f32):
    %0 = arith.mulf %in, %gi : f32
    %1 = arith.addf %0, %r : f32
    linalg.yield %1 : f32
  } -> tensor<2x8x12x12xf32>
  // block 2
  %p2 = tensor.pad %x1 low[0, 0, 3, 3] high[0, 0, 3, 3] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %zero : f32
  } : tensor<2x8x12x12xf32> to tensor<2x8x18x18xf32>
  %c2 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%p2, %w : tensor<2x8x18x18xf32>, tensor<8x7x7xf32>) outs(%z : tensor<2x8x12x12xf32>) -> tensor<2x8x12x12xf32>
  %t2 = linalg.generic {indexing_maps = [#to_nhwc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c2 : tensor<2x8x12x12xf32>) outs(%et : tensor<2x12x12x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x12x12x8xf32>
  %m2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%t2 : tensor<2x12x12x8xf32>) outs(%et : tensor<2x12x12x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %two : f32
    linalg.yield %0 : f32
  } -> tensor<2x12x12x8xf32>
  %b2 = linalg.generic {indexing_maps = [#to_nchw, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%m2 : tensor<2x12x12x8xf32>) outs(%e : tensor<2x8x12x12xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x8x12x12xf32>
  %x2 = linalg.generic {indexing_maps = [#id, #ch, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%b2, %g, %x1 : tensor<2x8x12x12xf32>, tensor<8xf32>, tensor<2x8x12x12xf32>) outs(%e : tensor<2x8x12x12xf32>) {
  ^bb0(%in: f32, %gi: f32, %r: f32, %out: f32):
    %0 = arith.mulf %in, %gi : f32
    %1 = arith.addf %0, %r : f32
    linalg.yield %1 : f32
  } -> tensor<2x8x12x12xf32>
  // LayerNorm2d's permute to channels-last
  %y = linalg.generic {indexing_maps = [#to_nhwc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x2 : tensor<2x8x12x12xf32>) outs(%et : tensor<2x12x12x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x12x12x8xf32>
  return %y : tensor<2x12x12x8xf32>
}
