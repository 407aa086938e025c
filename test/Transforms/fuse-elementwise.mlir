// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-fuse-elementwise))" | FileCheck %s
// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-fuse-elementwise{max-operands=1}))" | FileCheck %s --check-prefix=MAXOPS

#map = affine_map<(d0, d1) -> (d0, d1)>
// A chain add -> exp becomes one generic.
// CHECK-LABEL: func.func @chain
// CHECK-COUNT-1: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: arith.addf
// CHECK: math.exp
// MAXOPS-LABEL: func.func @chain
// MAXOPS-COUNT-2: linalg.generic
func.func @chain(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
// Cost rule: a producer with arithmetic and two users is not recomputed.
// CHECK-LABEL: func.func @multi_use_kept
// CHECK-COUNT-3: linalg.generic
func.func @multi_use_kept(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
// Cost rule: a pure transpose with two users is recomputed (index math only).
// CHECK-LABEL: func.func @multi_use_transpose_fused
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: linalg.generic
func.func @multi_use_transpose_fused(%a: tensor<8x4xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %t = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x4xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%t : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.tanh %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// Elementwise producer folds into a reduction (exp(x) summed per row).
// CHECK-LABEL: func.func @into_reduction
// CHECK: linalg.fill
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK: math.exp
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
func.func @into_reduction(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %re = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%z : f32) outs(%re : tensor<4xf32>) -> tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%0 : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// A conversion used by two reductions (torch-mlir's var_mean extends its input
// to f64 once) is recomputed in each of them, not materialized as an f64 tensor.
// CHECK-LABEL: func.func @conversion_into_two_reductions
// CHECK-NOT: tensor<4x8xf64>
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<4x8xf32>) outs(%{{.*}} : tensor<4xf64>)
// CHECK: arith.extf
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<4x8xf32>) outs(%{{.*}} : tensor<4xf64>)
// CHECK: arith.extf
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @conversion_into_two_reductions(%arg0: tensor<4x8xf32>, %init: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %e = tensor.empty() : tensor<4x8xf64>
  %w = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf64>) {
  ^bb0(%in: f32, %out: f64):
    %x = arith.extf %in : f32 to f64
    linalg.yield %x : f64
  } -> tensor<4x8xf64>
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%w : tensor<4x8xf64>) outs(%init : tensor<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %a = arith.addf %in, %out : f64
    linalg.yield %a : f64
  } -> tensor<4xf64>
  %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%w : tensor<4x8xf64>) outs(%init : tensor<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %m = arith.mulf %in, %in : f64
    %a = arith.addf %m, %out : f64
    linalg.yield %a : f64
  } -> tensor<4xf64>
  return %0, %1 : tensor<4xf64>, tensor<4xf64>
}

// -----

// The zero padding a library convolution applies itself stays right in front
// of it: folding the channel shuffle's reshape by expansion would move it
// above the collapse as a 5-D padding, which no convolution takes (the plan
// rejected the graph: "unsupported op 'tensor.pad'").
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#sw5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d3, d4)>
// CHECK-LABEL: func.func @shuffle_pad_depthwise(
// CHECK: %[[S:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2], [3], [4]] : tensor<1x2x2x4x4xf32> into tensor<1x4x4x4xf32>
// CHECK-NEXT: tensor.pad %[[S]] low[0, 0, 1, 1] high[0, 0, 1, 1]
// CHECK: linalg.depthwise_conv_2d_nchw_chw
func.func @shuffle_pad_depthwise(%x: tensor<1x4x4x4xf32>, %w: tensor<4x3x3xf32>) -> tensor<1x4x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %g = tensor.expand_shape %x [[0], [1, 2], [3], [4]] output_shape [1, 2, 2, 4, 4] : tensor<1x4x4x4xf32> into tensor<1x2x2x4x4xf32>
  %e = tensor.empty() : tensor<1x2x2x4x4xf32>
  %t = linalg.generic {indexing_maps = [#sw5, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%g : tensor<1x2x2x4x4xf32>) outs(%e : tensor<1x2x2x4x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %zero : f32
    linalg.yield %r : f32
  } -> tensor<1x2x2x4x4xf32>
  %s = tensor.collapse_shape %t [[0], [1, 2], [3], [4]] : tensor<1x2x2x4x4xf32> into tensor<1x4x4x4xf32>
  %p = tensor.pad %s low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<1x4x4x4xf32> to tensor<1x4x6x6xf32>
  %e2 = tensor.empty() : tensor<1x4x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %c = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%p, %w : tensor<1x4x6x6xf32>, tensor<4x3x3xf32>) outs(%f : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %c : tensor<1x4x4x4xf32>
}

// -----

// A reshape that splits a reduction's result dim (per-channel sums viewed as
// [N, G, C/G]) is not folded into the reduction by expansion: the elementwise op
// feeding the reduction fuses into it instead of sitting behind a reshape.
#rid = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#rred = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @no_split_into_reduction(
// CHECK: %[[R:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<2x8x16xf32>) outs(%{{.*}} : tensor<2x8xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: tensor.expand_shape %[[R]] {{\[}}[0], [1, 2]] output_shape [2, 4, 2]
func.func @no_split_into_reduction(%x: tensor<2x8x16xf32>) -> tensor<2x4x2xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<2x8x16xf32>
  %sq = linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<2x8x16xf32>) outs(%e : tensor<2x8x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    linalg.yield %m : f32
  } -> tensor<2x8x16xf32>
  %e2 = tensor.empty() : tensor<2x8xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e2 : tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = linalg.generic {indexing_maps = [#rid, #rred], iterator_types = ["parallel", "parallel", "reduction"]} ins(%sq : tensor<2x8x16xf32>) outs(%z : tensor<2x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<2x8xf32>
  %g = tensor.expand_shape %r [[0], [1, 2]] output_shape [2, 4, 2] : tensor<2x8xf32> into tensor<2x4x2xf32>
  return %g : tensor<2x4x2xf32>
}

// -----

// A bias add (one full-size operand, a broadcast bias) read by a reduction and by
// an elementwise op is recomputed in both: each reads the unbiased tensor instead
// of a materialized biased one (a convolution's bias add read by GroupNorm's
// statistics and its normalization).
// CHECK-LABEL: func.func @bias_add_recomputed
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @bias_add_recomputed(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %init: tensor<4xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#map, #row, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %b : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %a = arith.addf %in, %bias : f32
    linalg.yield %a : f32
  } -> tensor<4x8xf32>
  %s = linalg.generic {indexing_maps = [#map, #red], iterator_types = ["parallel", "reduction"]} ins(%y : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  %z = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  return %s, %z : tensor<4xf32>, tensor<4x8xf32>
}

// -----

// A residual add (two full-size operands) read twice is materialized: recomputed,
// each reader would read two tensors instead of one.
// CHECK-LABEL: func.func @residual_add_kept
// CHECK-COUNT-3: linalg.generic
#map = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @residual_add_kept(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>, %init: tensor<4xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%x, %r : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %res: f32, %out: f32):
    %a = arith.addf %in, %res : f32
    linalg.yield %a : f32
  } -> tensor<4x8xf32>
  %s = linalg.generic {indexing_maps = [#map, #red], iterator_types = ["parallel", "reduction"]} ins(%y : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  %z = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  return %s, %z : tensor<4xf32>, tensor<4x8xf32>
}

// -----

// A narrowing conversion (f32 -> bf16) read by two ops is not recomputed in each:
// that would leave its f32 operand materialized instead of the bf16 result (a
// SiLU output read by a pooling and a concatenation).
// CHECK-LABEL: func.func @narrowing_kept
// CHECK: %[[N:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<4x8xbf16>)
// CHECK: arith.truncf
// CHECK: linalg.generic {{.*}} ins(%[[N]] : tensor<4x8xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[N]] : tensor<4x8xbf16>)
#map = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @narrowing_kept(%x: tensor<4x8xf32>, %init: tensor<4xbf16>) -> (tensor<4xbf16>, tensor<4x8xbf16>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %eb = tensor.empty() : tensor<4x8xbf16>
  %s = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %ex = math.exp %in : f32
    linalg.yield %ex : f32
  } -> tensor<4x8xf32>
  %n = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%s : tensor<4x8xf32>) outs(%eb : tensor<4x8xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x8xbf16>
  %m = linalg.generic {indexing_maps = [#map, #red], iterator_types = ["parallel", "reduction"]} ins(%n : tensor<4x8xbf16>) outs(%init : tensor<4xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %a = arith.maximumf %in, %out : bf16
    linalg.yield %a : bf16
  } -> tensor<4xbf16>
  %c = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%n : tensor<4x8xbf16>) outs(%eb : tensor<4x8xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %a = arith.addf %in, %in : bf16
    linalg.yield %a : bf16
  } -> tensor<4x8xbf16>
  return %m, %c : tensor<4xbf16>, tensor<4x8xbf16>
}

// -----

// A widening conversion read through a reshape by a reduction and by a generic
// with a broadcast operand (GroupNorm's statistics split in two levels): the
// conversion moves below the reshape and fuses into each reader; no f32 copy
// of the bf16 input is left.
#m4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#m3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#b3 = affine_map<(d0, d1, d2) -> (d0, 0, 0)>
// CHECK-LABEL: func.func @conversion_through_reshape
// CHECK-NOT: -> tensor<2x4x6x6xf32>
// CHECK: tensor.collapse_shape %{{.*}} : tensor<2x4x6x6xbf16> into tensor<2x4x36xbf16>
// CHECK: arith.extf
// CHECK: arith.extf
// CHECK-NOT: -> tensor<2x4x6x6xf32>
func.func @conversion_through_reshape(%x: tensor<2x4x6x6xbf16>, %m: tensor<2x1x1xf32>) -> (tensor<2x4xf32>, tensor<2x4x36xf32>) {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x4x6x6xf32>
  %c = linalg.generic {indexing_maps = [#m4, #m4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<2x4x6x6xbf16>) outs(%e : tensor<2x4x6x6xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<2x4x6x6xf32>
  %a = tensor.collapse_shape %c [[0], [1], [2, 3]] : tensor<2x4x6x6xf32> into tensor<2x4x36xf32>
  %i = tensor.empty() : tensor<2x4xf32>
  %f = linalg.fill ins(%cst : f32) outs(%i : tensor<2x4xf32>) -> tensor<2x4xf32>
  %s = linalg.generic {indexing_maps = [#m3, #r3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a : tensor<2x4x36xf32>) outs(%f : tensor<2x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %v = arith.addf %in, %out : f32
    linalg.yield %v : f32
  } -> tensor<2x4xf32>
  %e3 = tensor.empty() : tensor<2x4x36xf32>
  %d = linalg.generic {indexing_maps = [#m3, #b3, #m3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %m : tensor<2x4x36xf32>, tensor<2x1x1xf32>) outs(%e3 : tensor<2x4x36xf32>) {
  ^bb0(%in: f32, %mm: f32, %out: f32):
    %v = arith.subf %in, %mm : f32
    linalg.yield %v : f32
  } -> tensor<2x4x36xf32>
  return %s, %d : tensor<2x4xf32>, tensor<2x4x36xf32>
}

// -----

// A generic reading a converted tensor at computed positions (a pooling
// window after mlircap-tensor-to-generic) reads the bf16 element and converts
// it: the conversion is no kernel of its own. Its input map (a transpose)
// permutes the indices read.
#p = affine_map<(d0, d1) -> (d1, d0)>
#i2 = affine_map<(d0, d1) -> (d0, d1)>
#o1 = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @conversion_read_by_extract
// CHECK-NOT: -> tensor<4x8xf32>
// CHECK: %[[E:.*]] = tensor.extract %arg0[%[[J:.*]], %[[I:.*]]] : tensor<8x4xbf16>
// CHECK: arith.extf %[[E]] : bf16 to f32
func.func @conversion_read_by_extract(%x: tensor<8x4xbf16>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %c = linalg.generic {indexing_maps = [#p, #i2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<8x4xbf16>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  %e1 = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#o1], iterator_types = ["parallel"]} outs(%e1 : tensor<4xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %c7 = arith.constant 7 : index
    %j = arith.subi %c7, %i : index
    %v = tensor.extract %c[%i, %j] : tensor<4x8xf32>
    linalg.yield %v : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// A generic of no loops that reads its initial value (torch-mlir's sum of a 0-d
// tensor: out + in) stays out of a consumer that broadcasts it: fused, the
// initial value would be an output indexed by none of the consumer's loops,
// accumulated into once per element.
#map = affine_map<() -> ()>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0) -> ()>
// CHECK-LABEL: func.func @zero_dim_sum_broadcast
// CHECK: linalg.generic {{.*}}iterator_types = []
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK-NOT: arith.addf
// CHECK: arith.subf
func.func @zero_dim_sum_broadcast(%x: tensor<f32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%cst : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [#map, #map], iterator_types = []} ins(%x : tensor<f32>) outs(%init : tensor<f32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<f32>
  %e = tensor.empty() : tensor<3xf32>
  %r = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel"]} ins(%y, %s : tensor<3xf32>, tensor<f32>) outs(%e : tensor<3xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %d = arith.subf %in, %in_0 : f32
    linalg.yield %d : f32
  } -> tensor<3xf32>
  return %r : tensor<3xf32>
}
