// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-math-approx))" | FileCheck %s

// Transcendentals become arithmetic so the CPU loops around them vectorize.
// CHECK-LABEL: func.func @transcendentals
// CHECK-NOT: math.exp
// CHECK-NOT: math.tanh
// CHECK-NOT: math.erf
// CHECK: arith.mulf
// CHECK: return
func.func @transcendentals(%x: f32) -> (f32, f32, f32) {
  %a = math.exp %x : f32
  %b = math.tanh %x : f32
  %c = math.erf %x : f32
  return %a, %b, %c : f32, f32, f32
}

// -----

// Ops without an approximation are left alone.
// CHECK-LABEL: func.func @untouched
// CHECK: math.sqrt
func.func @untouched(%x: f32) -> f32 {
  %a = math.sqrt %x : f32
  return %a : f32
}

// -----

// sin/cos of f32 reduce their argument exactly (Cody-Waite below 6400,
// Payne-Hanek in integers above), in f64, branch-free: no libm call, no
// math op left, vectors stay vectors.
// CHECK-LABEL: func.func @sincos
// CHECK-NOT: math.sin
// CHECK-NOT: math.cos
// CHECK-DAG: arith.extf {{.*}} : vector<8xf32> to vector<8xf64>
// CHECK-DAG: arith.muli {{.*}} : vector<8xi64>
// CHECK: arith.truncf {{.*}} : vector<8xf64> to vector<8xf32>
// CHECK: return
func.func @sincos(%x: vector<8xf32>) -> (vector<8xf32>, vector<8xf32>) {
  %a = math.sin %x : vector<8xf32>
  %b = math.cos %x : vector<8xf32>
  return %a, %b : vector<8xf32>, vector<8xf32>
}

// -----

// f64 sin is left to the backend (libm), which reduces exactly.
// CHECK-LABEL: func.func @sin_f64
// CHECK: math.sin
func.func @sin_f64(%x: f64) -> f64 {
  %a = math.sin %x : f64
  return %a : f64
}

// -----

// erf of f32 is one rational function of |x| clamped to 4 (10 FMAs, one
// division), not upstream's coefficients selected per element from three
// intervals: two unordered compares (clamps that keep NaN), no other select.
// CHECK-LABEL: func.func @erf_rational
// CHECK-NOT: math.erf
// CHECK: math.absf %arg0 : vector<16xf32>
// CHECK: arith.cmpf ult
// CHECK-COUNT-5: math.fma
// CHECK: arith.mulf
// CHECK-COUNT-5: math.fma
// CHECK: arith.divf
// CHECK: arith.cmpf ult
// CHECK: arith.select
// CHECK-NEXT: math.copysign {{.*}}, %arg0 : vector<16xf32>
// CHECK-NOT: arith.select
// CHECK: return
func.func @erf_rational(%x: vector<16xf32>) -> vector<16xf32> {
  %a = math.erf %x : vector<16xf32>
  return %a : vector<16xf32>
}

// -----

// tanh of f32: a + a * t * P(t) below 1 (t = a^2, 7 FMAs), 1 - 2 / (exp(2a) + 1)
// above (exact next to 1, where a tanh GELU's tail cancels), a = |x| clamped to 10
// keeping NaN, x's sign copied; about 1 ulp, upstream's rational form was 4.6.
// CHECK-LABEL: func.func @tanh_two_forms
// CHECK-NOT: math.tanh
// CHECK: math.absf %arg0 : vector<16xf32>
// CHECK: arith.cmpf ult
// CHECK-COUNT-7: math.fma
// CHECK: arith.divf
// CHECK: arith.subf
// CHECK: arith.cmpf olt
// CHECK: arith.select
// CHECK-NEXT: math.copysign {{.*}}, %arg0 : vector<16xf32>
// CHECK: return
func.func @tanh_two_forms(%x: vector<16xf32>) -> vector<16xf32> {
  %a = math.tanh %x : vector<16xf32>
  return %a : vector<16xf32>
}

// -----

// exp of f32 whose result is subnormal (x < -87.34): upstream's approximation
// returns 0 there, eager gives subnormals down to exp(-103.97). Below -87 the
// op is exp(x / 2) squared (x / 2 exact, one rounding into the subnormal).
// CHECK-LABEL: func.func @exp_subnormal
// CHECK-DAG: arith.constant dense<-8.700000e+01> : vector<8xf32>
// CHECK-DAG: arith.constant dense<5.000000e-01> : vector<8xf32>
// CHECK-NOT: math.exp
// CHECK: arith.cmpf olt
// CHECK: return
func.func @exp_subnormal(%x: vector<8xf32>) -> vector<8xf32> {
  %a = math.exp %x : vector<8xf32>
  return %a : vector<8xf32>
}

// -----

// exp's exponent reaches fptosi NaN-free (fptosi of NaN is poison, which LLVM folds
// to anything where the NaN is a constant: softmax of a var() of no elements gave
// 1 or inf); a conversion of the program's own stays as it is.
// CHECK-LABEL: func.func @exp_exponent_not_nan
// CHECK: %[[NAN:.*]] = arith.cmpf uno, %[[K:.*]], %[[K]] : f32
// CHECK: %[[SAFE:.*]] = arith.select %[[NAN]], %{{.*}}, %[[K]] : f32
// CHECK: arith.fptosi %[[SAFE]] : f32 to i32
// CHECK: arith.fptosi %arg1 : f32 to i32
// CHECK-NOT: mlircap.math_approx
func.func @exp_exponent_not_nan(%x: f32, %y: f32) -> (f32, i32) {
  %a = math.exp %x : f32
  %b = arith.fptosi %y : f32 to i32
  return %a, %b : f32, i32
}

// -----

// expm1 and log1p of f64 in Kahan's forms on exp and log (convert-math-to-llvm
// would lower them as exp(x) - 1 and log(1 + x), which cancel near 0); x itself
// where u rounds to 1. f32's keep upstream's approximations.
// CHECK-LABEL: func.func @expm1_log1p_f64
// CHECK-NOT: math.expm1
// CHECK-NOT: math.log1p
// CHECK: math.exp
// CHECK: math.log
// CHECK: arith.cmpf ueq
// CHECK: math.log
// CHECK: arith.cmpf ueq
// CHECK: return
func.func @expm1_log1p_f64(%x: f64, %v: vector<4xf64>) -> (f64, vector<4xf64>) {
  %a = math.expm1 %x : f64
  %b = math.log1p %v : vector<4xf64>
  return %a, %b : f64, vector<4xf64>
}

// -----

// log of a negative f64 is +NaN, as eager's kernels give it (libm's default
// NaN of an invalid operation has the sign bit set on x86): fuzz --grad seed 3839.
// CHECK-LABEL: func.func @log_f64_negative_nan
// CHECK: %[[L:.*]] = math.log %[[X:.*]] : f64
// CHECK: %[[N:.*]] = arith.cmpf olt, %[[X]]
// CHECK: %[[R:.*]] = arith.select %[[N]], %{{.*}}, %[[L]] : f64
// CHECK: return %[[R]]
func.func @log_f64_negative_nan(%x: f64) -> f64 {
  %a = math.log %x : f64
  return %a : f64
}
