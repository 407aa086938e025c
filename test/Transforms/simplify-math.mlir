// RUN: mlircap-opt %s --split-input-file --mlircap-simplify-math | FileCheck %s

// GPT-2's tanh GELU: x ** 3 inside a linalg.generic body.
// CHECK-LABEL: func.func @cube_in_generic
// CHECK-NOT: math.fpowi
// CHECK: ^bb0(%[[X:.*]]: bf16, %{{.*}}: bf16):
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[X]], %[[X]] : bf16
// CHECK-NEXT: %[[CUBE:.*]] = arith.mulf %[[SQ]], %[[X]] : bf16
// CHECK-NEXT: linalg.yield %[[CUBE]] : bf16
func.func @cube_in_generic(%x: tensor<8x16xbf16>) -> tensor<8x16xbf16> {
  %c3 = arith.constant 3 : i64
  %e = tensor.empty() : tensor<8x16xbf16>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xbf16>) outs(%e : tensor<8x16xbf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %p = math.fpowi %a, %c3 : bf16, i64
    linalg.yield %p : bf16
  } -> tensor<8x16xbf16>
  return %0 : tensor<8x16xbf16>
}

// -----

// CHECK-LABEL: func.func @powf_constants
// CHECK-NOT: math.powf
// CHECK: arith.mulf %arg0, %arg0 : f32
// CHECK: math.sqrt %arg0 : f32
func.func @powf_constants(%x: f32) -> (f32, f32) {
  %two = arith.constant 2.0 : f32
  %half = arith.constant 0.5 : f32
  %0 = math.powf %x, %two : f32
  %1 = math.powf %x, %half : f32
  return %0, %1 : f32, f32
}

// -----

// A run-time exponent stays a powf.
// CHECK-LABEL: func.func @powf_dynamic
// CHECK: math.powf %arg0, %arg1 : f32
func.func @powf_dynamic(%x: f32, %y: f32) -> f32 {
  %0 = math.powf %x, %y : f32
  return %0 : f32
}

// -----

// erf GELU in bf16: x / sqrt(2) becomes x * (1/sqrt(2)); a power-of-two
// divisor is exact in any type; an f32 division by 3 stays a division.
// CHECK-LABEL: func.func @div_by_constants
// CHECK-NOT: math.sqrt
// CHECK-DAG: %[[R2:.*]] = arith.constant 7.070{{[0-9]*}}e-01 : bf16
// CHECK-DAG: %[[EIGHTH:.*]] = arith.constant 1.250000e-01 : f32
// CHECK-DAG: %[[THREE:.*]] = arith.constant 3.000000e+00 : f32
// CHECK: arith.mulf %arg0, %[[R2]] : bf16
// CHECK: arith.mulf %arg1, %[[EIGHTH]] : f32
// CHECK: arith.divf %arg1, %[[THREE]] : f32
func.func @div_by_constants(%x: bf16, %y: f32) -> (bf16, f32, f32) {
  %two = arith.constant 2.0 : bf16
  %eight = arith.constant 8.0 : f32
  %three = arith.constant 3.0 : f32
  %s = math.sqrt %two : bf16
  %0 = arith.divf %x, %s : bf16
  %1 = arith.divf %y, %eight : f32
  %2 = arith.divf %y, %three : f32
  return %0, %1, %2 : bf16, f32, f32
}

// -----

// A division by a constant that only feeds erf (erf GELU's x / sqrt(2) in
// f32) becomes a multiply by the reciprocal, as eager's GELU kernels compute
// it; one with another user stays a division.
// CHECK-LABEL: func.func @div_into_erf
// CHECK-DAG: %[[R2:.*]] = arith.constant 0.707106769 : f32
// CHECK-DAG: %[[S2:.*]] = arith.constant 1.41421354 : f32
// CHECK: %[[M:.*]] = arith.mulf %arg0, %[[R2]] : f32
// CHECK: math.erf %[[M]] : f32
// CHECK: %[[D:.*]] = arith.divf %arg1, %[[S2]] : f32
// CHECK: math.erf %[[D]] : f32
// CHECK: arith.addf %[[D]]
func.func @div_into_erf(%x: f32, %y: f32) -> (f32, f32) {
  %s = arith.constant 1.41421354 : f32
  %0 = arith.divf %x, %s : f32
  %1 = math.erf %0 : f32
  %2 = arith.divf %y, %s : f32
  %3 = math.erf %2 : f32
  %4 = arith.addf %2, %3 : f32
  return %1, %4 : f32, f32
}

// -----

// An integer power past the strength reduction's threshold: upstream's
// patterns match it again and again without converging, which is no failure
// (the pass failed and the whole graph ran eagerly); the op stays.
// CHECK-LABEL: func.func @fpowi_past_threshold
// CHECK: math.fpowi %arg0, %{{.*}} : f32, i64
func.func @fpowi_past_threshold(%x: f32) -> f32 {
  %c = arith.constant 10 : i64
  %0 = math.fpowi %x, %c : f32, i64
  return %0 : f32
}
