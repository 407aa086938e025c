// RUN: mlircap-opt %s --pass-pipeline="builtin.module(func.func(mlircap-emulate-low-precision),canonicalize)" --split-input-file | FileCheck %s

// f16: each op computes in f32 and rounds back; canonicalize must not fold
// the truncf/extf pair between the two ops (eager rounds there).
// CHECK-LABEL: func.func @f16_chain(
// CHECK: %[[M:.*]] = arith.mulf {{.*}} : f32
// CHECK: %[[T:.*]] = arith.truncf %[[M]] : f32 to f16
// CHECK: %[[E:.*]] = arith.extf %[[T]] : f16 to f32
// CHECK: arith.addf %[[E]], {{.*}} : f32
// CHECK-NOT: contract
func.func @f16_chain(%a: f16, %b: f16) -> f16 {
  %0 = arith.mulf %a, %b : f16
  %1 = arith.addf %0, %a : f16
  return %1 : f16
}

// -----

// bf16: math extended to f32; conversions become integer code.
// CHECK-LABEL: func.func @bf16_math(
// CHECK-NOT: arith.extf
// CHECK-NOT: arith.truncf
// CHECK: math.tanh {{.*}} : f32
// CHECK: arith.bitcast {{.*}} : i16 to bf16
func.func @bf16_math(%a: bf16) -> bf16 {
  %0 = math.tanh %a : bf16
  return %0 : bf16
}

// -----

// Other types are left alone.
// CHECK-LABEL: func.func @f32_untouched(
// CHECK-NEXT: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT: return
func.func @f32_untouched(%a: f32) -> f32 {
  %0 = arith.addf %a, %a : f32
  return %0 : f32
}

// -----

// f64 <-> bf16 go through f32 (c10 converts double -> float -> BFloat16); the
// direct truncation was lowered to __truncdfbf2, which the JIT cannot resolve.
// CHECK-LABEL: func.func @f64_bf16(
// CHECK: arith.truncf %{{.*}} : f64 to f32
// CHECK: arith.bitcast {{.*}} : i16 to bf16
// CHECK: arith.extf %{{.*}} : f32 to f64
// CHECK-NOT: f64 to bf16
func.func @f64_bf16(%a: f64, %b: bf16) -> (bf16, f64) {
  %0 = arith.truncf %a : f64 to bf16
  %1 = arith.extf %b : bf16 to f64
  return %0, %1 : bf16, f64
}
