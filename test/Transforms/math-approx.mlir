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
