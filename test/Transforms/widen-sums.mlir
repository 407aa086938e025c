// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-widen-sums))" | FileCheck %s
// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-widen-sums),cse)" | FileCheck %s --check-prefix=CSE

// An f32 sum accumulates in f64: init extended (a fill: filled with the
// extended constant), term extended (the add keeps its operand order), result
// truncated; the f64 adds may be reassociated (vectorized partial sums).
// CHECK-LABEL: func.func @row_sum
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f64
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[Z]] : f64) outs(%{{.*}} : tensor<4xf64>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<4x1000xf32>) outs(%[[INIT]] : tensor<4xf64>)
// CHECK: ^bb0(%[[IN:.*]]: f32, %[[ACC:.*]]: f64):
// CHECK:   %[[M:.*]] = arith.mulf %[[IN]], %{{.*}} : f32
// CHECK:   %[[W:.*]] = arith.extf %[[M]] : f32 to f64
// CHECK:   %[[A:.*]] = arith.addf %[[W]], %[[ACC]] fastmath<reassoc> : f64
// CHECK:   linalg.yield %[[A]] : f64
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<4xf64>) outs(%{{.*}} : tensor<4xf32>)
// CHECK:   arith.truncf {{.*}} : f64 to f32
// CHECK: return %[[OUT]]
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @row_sum(%arg0: tensor<4x1000xf32>) -> tensor<4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %k = arith.constant 1.000100e+00 : f32
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4xf32>) -> tensor<4xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x1000xf32>) outs(%1 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.mulf %in, %k : f32
    %4 = arith.addf %3, %out : f32
    linalg.yield %4 : f32
  } -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// A max reduction, and an accumulator used twice, stay f32; so do parallel ops.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: f64
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @untouched(%arg0: tensor<4x8xf32>, %init: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>) {
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %out : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.mulf %out, %out : f32
    %a = arith.addf %in, %s : f32
    %b = arith.addf %a, %out : f32
    linalg.yield %b : f32
  } -> tensor<4xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x8xf32>) outs(%arg0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<4x8xf32>
  return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4x8xf32>
}

// -----

// Of a two-output reduction only the sum is widened.
// CHECK-LABEL: func.func @sum_and_max
// CHECK: ^bb0(%{{.*}}: f32, %[[S:.*]]: f64, %[[M:.*]]: f32):
// CHECK:   arith.addf %[[S]], {{.*}} : f64
// CHECK:   arith.maximumf {{.*}} : f32
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @sum_and_max(%arg0: tensor<4x8xf32>, %i0: tensor<4xf32>, %i1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%i0, %i1 : tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%in: f32, %s: f32, %m: f32):
    %a = arith.addf %s, %in : f32
    %b = arith.maximumf %m, %in : f32
    linalg.yield %a, %b : f32, f32
  } -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A sum that accumulates in f64 already (torch-mlir's var_mean) is marked
// reassociable; an f64 accumulator that is not a plain sum is not.
// CHECK-LABEL: func.func @f64_sums
// CHECK: arith.addf %{{.*}}, %{{.*}} fastmath<reassoc> : f64
// CHECK: %[[P:.*]] = arith.mulf %{{.*}}, %{{.*}} : f64
// CHECK-NEXT: arith.addf %[[P]], %{{.*}} : f64
// CHECK-NOT: fastmath
// CHECK: return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @f64_sums(%arg0: tensor<4x8xf64>, %init: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {
  %0 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf64>) outs(%init : tensor<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %a = arith.addf %in, %out : f64
    linalg.yield %a : f64
  } -> tensor<4xf64>
  %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf64>) outs(%init : tensor<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %p = arith.mulf %out, %in : f64
    %a = arith.addf %p, %out : f64
    linalg.yield %a : f64
  } -> tensor<4xf64>
  return %0, %1 : tensor<4xf64>, tensor<4xf64>
}

// -----

// LayerNorm's mean in f32 next to the f64 sum of its variance (torch's
// decomposition): widened, the f32 sum is the same f64 sum and CSE keeps one;
// the mean is that sum truncated. An init that is not a fill is converted.
// CSE-LABEL: func.func @mean_and_f64_sum
// CSE-COUNT-1: "reduction"
// CSE-NOT: "reduction"
// CSE: return
// CHECK-LABEL: func.func @init_not_a_fill
// CHECK: %[[INIT:.*]] = linalg.generic {{.*}} ins(%arg1 : tensor<4xf32>) outs(%{{.*}} : tensor<4xf64>)
// CHECK:   arith.extf {{.*}} : f32 to f64
// CHECK: linalg.generic {{.*}} outs(%[[INIT]] : tensor<4xf64>)
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @mean_and_f64_sum(%arg0: tensor<4x1000xf32>) -> (tensor<4xf64>, tensor<4xf32>) {
  %z = arith.constant 0.000000e+00 : f64
  %zf = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  %s = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x1000xf32>) outs(%f : tensor<4xf64>) {
  ^bb0(%in: f32, %out: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %w, %out : f64
    linalg.yield %a : f64
  } -> tensor<4xf64>
  %ef = tensor.empty() : tensor<4xf32>
  %ff = linalg.fill ins(%zf : f32) outs(%ef : tensor<4xf32>) -> tensor<4xf32>
  %m = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x1000xf32>) outs(%ff : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  return %s, %m : tensor<4xf64>, tensor<4xf32>
}

func.func @init_not_a_fill(%arg0: tensor<4x1000xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
  %m = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x1000xf32>) outs(%arg1 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %out, %in : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// A bf16 max reduction accumulates in f32 (exact: a max picks an operand):
// init extended, term extended, the max on f32 (same op, same attributes),
// result truncated back to bf16 once. An f16 min likewise; a bf16 max whose
// accumulator is used twice stays bf16.
// CHECK-LABEL: func.func @narrow_max
// CHECK: %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[NINF]] : f32) outs(%{{.*}} : tensor<4xf32>)
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<4x62xbf16>) outs(%[[INIT]] : tensor<4xf32>)
// CHECK: ^bb0(%[[IN:.*]]: bf16, %[[ACC:.*]]: f32):
// CHECK:   %[[W:.*]] = arith.extf %[[IN]] : bf16 to f32
// CHECK:   %[[M:.*]] = arith.maximumf %[[W]], %[[ACC]] : f32
// CHECK:   linalg.yield %[[M]] : f32
// CHECK: linalg.generic {{.*}} ins(%[[MAX]] : tensor<4xf32>) outs(%{{.*}} : tensor<4xbf16>)
// CHECK:   arith.truncf {{.*}} : f32 to bf16
// CHECK: ^bb0(%{{.*}}: f16, %[[ACC2:.*]]: f32):
// CHECK:   arith.minnumf %[[ACC2]], %{{.*}} : f32
// CHECK: arith.truncf {{.*}} : f32 to f16
// CHECK: ^bb0(%{{.*}}: bf16, %{{.*}}: bf16):
// CHECK:   arith.maximumf {{.*}} : bf16
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @narrow_max(%arg0: tensor<4x62xbf16>, %arg1: tensor<4x62xf16>) -> (tensor<4xbf16>, tensor<4xf16>, tensor<4xbf16>) {
  %ninf = arith.constant 0xFF80 : bf16
  %0 = tensor.empty() : tensor<4xbf16>
  %1 = linalg.fill ins(%ninf : bf16) outs(%0 : tensor<4xbf16>) -> tensor<4xbf16>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x62xbf16>) outs(%1 : tensor<4xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %m = arith.maximumf %in, %out : bf16
    linalg.yield %m : bf16
  } -> tensor<4xbf16>
  %inf = arith.constant 0x7C00 : f16
  %3 = tensor.empty() : tensor<4xf16>
  %4 = linalg.fill ins(%inf : f16) outs(%3 : tensor<4xf16>) -> tensor<4xf16>
  %5 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg1 : tensor<4x62xf16>) outs(%4 : tensor<4xf16>) {
  ^bb0(%in: f16, %out: f16):
    %m = arith.minnumf %out, %in : f16
    linalg.yield %m : f16
  } -> tensor<4xf16>
  %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x62xbf16>) outs(%1 : tensor<4xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %m = arith.maximumf %in, %out : bf16
    %s = arith.addf %m, %out : bf16
    linalg.yield %s : bf16
  } -> tensor<4xbf16>
  return %2, %5, %6 : tensor<4xbf16>, tensor<4xf16>, tensor<4xbf16>
}
