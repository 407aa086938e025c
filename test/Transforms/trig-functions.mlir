// RUN: mlircap-opt %s --split-input-file --mlircap-trig-functions | FileCheck %s

// Scalar f32 sin/cos become calls to functions with vector variants that LLVM's
// loop vectorizer substitutes (vector-function-abi-variant); each variant
// branches once per vector on whether every lane is below 6400.
// CHECK-LABEL: func.func @loop
// CHECK: call @__mlircap_sinf(%{{.*}}) : (f32) -> f32
// CHECK: call @__mlircap_cosf(%{{.*}}) : (f32) -> f32
// CHECK-NOT: math.sin
// CHECK-NOT: math.cos
// CHECK-LABEL: func.func @__mlircap_sinf_v16(%{{.*}}: vector<16xf32>) -> vector<16xf32> attributes {passthrough = ["noinline"]}
// CHECK: arith.constant dense<6.400000e+03> : vector<16xf32>
// CHECK: vector.reduction <and>, %{{.*}} : vector<16xi1> into i1
// CHECK: scf.if
// The short path: no Payne-Hanek (no integer multiply).
// CHECK-NOT: arith.muli
// CHECK: } else {
// CHECK: arith.muli {{.*}} : vector<16xi64>
// CHECK: return
// CHECK-LABEL: func.func @__mlircap_sinf(%{{.*}}: f32) -> f32
// CHECK-SAME: passthrough = ["noinline", ["vector-function-abi-variant", "_ZGV_LLVM_N4v___mlircap_sinf(__mlircap_sinf_v4),_ZGV_LLVM_N8v___mlircap_sinf(__mlircap_sinf_v8),_ZGV_LLVM_N16v___mlircap_sinf(__mlircap_sinf_v16)"]]
// CHECK: scf.if
// CHECK-LABEL: func.func @__mlircap_cosf(
func.func @loop(%in: memref<?xf32>, %out: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %in, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %in[%i] : memref<?xf32>
    %s = math.sin %x : f32
    %c = math.cos %s : f32
    memref.store %c, %out[%i] : memref<?xf32>
  }
  return
}

// -----

// One function per kind in a module, however many calls; f64 and vector ops
// are left alone (libm and mlircap-math-approx).
// CHECK-LABEL: func.func @twice
// CHECK-COUNT-2: call @__mlircap_sinf
// CHECK: math.sin %{{.*}} : f64
// CHECK: math.sin %{{.*}} : vector<8xf32>
// CHECK-COUNT-1: func.func @__mlircap_sinf(
// CHECK-NOT: func.func @__mlircap_cosf(
func.func @twice(%x: f32, %d: f64, %v: vector<8xf32>) -> (f32, f32, f64, vector<8xf32>) {
  %a = math.sin %x : f32
  %b = math.sin %a : f32
  %c = math.sin %d : f64
  %e = math.sin %v : vector<8xf32>
  return %a, %b, %c, %e : f32, f32, f64, vector<8xf32>
}
