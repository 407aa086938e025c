// RUN: mlircap-opt %s --mlircap-widen-bool-memrefs | FileCheck %s
// RUN: mlircap-opt %s --mlircap-widen-bool-memrefs --convert-scf-to-cf --finalize-memref-to-llvm --convert-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// CHECK: memref.global "private" constant @mask : memref<4xi8> = dense<[1, 0, 1, 1]>
// CHECK-LABEL: func.func @bools(
// CHECK-SAME: %[[A:.*]]: memref<4xi8>, %[[B:.*]]: memref<4x1xi8>)
// CHECK: memref.get_global @mask : memref<4xi8>
// CHECK: %[[L:.*]] = memref.load %[[A]]
// CHECK: arith.trunci %[[L]] : i8 to i1
// CHECK: arith.extui %{{.*}} : i1 to i8
// CHECK: memref.store %{{.*}} : memref<4xi8>
// CHECK: memref.expand_shape %{{.*}} : memref<4xi8> into memref<4x1xi8>
// LLVM-LABEL: llvm.func @bools(
// LLVM: llvm.store %{{.*}} : i8, !llvm.ptr
memref.global "private" constant @mask : memref<4xi1> = dense<[true, false, true, true]>
func.func @bools(%a: memref<4xi1>, %out: memref<4x1xi1>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %g = memref.get_global @mask : memref<4xi1>
  %tmp = memref.alloc() : memref<4xi1>
  scf.for %i = %c0 to %c4 step %c1 {
    %x = memref.load %a[%i] : memref<4xi1>
    %y = memref.load %g[%i] : memref<4xi1>
    %z = arith.andi %x, %y : i1
    memref.store %z, %tmp[%i] : memref<4xi1>
  }
  %e = memref.expand_shape %tmp [[0, 1]] output_shape [4, 1] : memref<4xi1> into memref<4x1xi1>
  memref.copy %e, %out : memref<4x1xi1> to memref<4x1xi1>
  memref.dealloc %tmp : memref<4xi1>
  return
}
