// RUN: mlircap-opt %s --split-input-file --mlircap-widen-bool-memrefs | FileCheck %s
// RUN: mlircap-opt %s --split-input-file --mlircap-widen-bool-memrefs --finalize-memref-to-llvm | FileCheck %s --check-prefix=LLVM

// CHECK-LABEL: func.func @store_load(%arg0: memref<4xi8>, %arg1: i1) -> i1
// CHECK: %[[E:.*]] = arith.extui %arg1 : i1 to i8
// CHECK: memref.store %[[E]], %arg0
// CHECK: %[[L:.*]] = memref.load %arg0{{.*}} : memref<4xi8>
// CHECK: %[[T:.*]] = arith.trunci %[[L]] : i8 to i1
// CHECK: return %[[T]]
// LLVM-LABEL: func.func @store_load
// LLVM: llvm.store {{.*}} : i8, !llvm.ptr
func.func @store_load(%m: memref<4xi1>, %v: i1) -> i1 {
  %c0 = arith.constant 0 : index
  memref.store %v, %m[%c0] : memref<4xi1>
  %r = memref.load %m[%c0] : memref<4xi1>
  return %r : i1
}

// -----

// Allocations, views and copies change element type together.
// CHECK-LABEL: func.func @views
// CHECK: memref.alloc() {{.*}}: memref<2x4xi8>
// CHECK: memref.collapse_shape {{.*}} into memref<8xi8>
// CHECK: memref.copy {{.*}} : memref<8xi8> to memref<8xi8>
func.func @views(%out: memref<8xi1>) {
  %a = memref.alloc() {alignment = 64 : i64} : memref<2x4xi1>
  %c = memref.collapse_shape %a [[0, 1]] : memref<2x4xi1> into memref<8xi1>
  memref.copy %c, %out : memref<8xi1> to memref<8xi1>
  return
}

// -----

// Bool globals keep their bytes.
// CHECK: memref.global "private" constant @mask : memref<3xi8> = dense<[1, 0, 1]>
// CHECK-LABEL: func.func @global
// CHECK: memref.get_global @mask : memref<3xi8>
memref.global "private" constant @mask : memref<3xi1> = dense<[true, false, true]>
func.func @global() -> memref<3xi1> {
  %g = memref.get_global @mask : memref<3xi1>
  return %g : memref<3xi1>
}

// -----

// Other element types are untouched.
// CHECK-LABEL: func.func @untouched(%arg0: memref<4xf32>)
func.func @untouched(%m: memref<4xf32>) {
  return
}

// -----

// llvm.func (e.g. mlircap-cpu-pipeline output run through it again) has an
// LLVM function type and no memrefs: left alone, no assertion.
// CHECK-LABEL: llvm.func @lowered(%arg0: i64, %arg1: !llvm.ptr)
func.func private @keep(memref<2xi1>)
llvm.func @lowered(%a: i64, %p: !llvm.ptr) {
  llvm.return
}
