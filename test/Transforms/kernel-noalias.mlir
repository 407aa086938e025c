// RUN: mlircap-opt %s --mlircap-mark-noalias | FileCheck %s --check-prefix=MARK
// RUN: mlircap-opt %s --mlircap-mark-noalias --mlircap-emit-c-interface --finalize-memref-to-llvm \
// RUN:   --convert-to-llvm --reconcile-unrealized-casts --mlircap-apply-noalias | FileCheck %s

// A kernel: every memref's aligned data pointer (slots 1 and 6 of 12: 3 + 2 * rank each,
// the index argument 1 slot) is noalias; the C wrapper (descriptor pointers) is untouched.
// MARK-LABEL: func.func @kernel
// MARK-SAME: mlircap.noalias_slots = array<i64: 13, 1, 6>
// CHECK-LABEL: llvm.func @kernel(
// CHECK-SAME: %arg0: !llvm.ptr, %arg1: !llvm.ptr {llvm.noalias}, %arg2: i64, %arg3: i64, %arg4: i64,
// CHECK-SAME: %arg5: !llvm.ptr, %arg6: !llvm.ptr {llvm.noalias}, %arg7: i64,
// CHECK-SAME: %arg12: i64)
// CHECK-NOT: mlircap.noalias_slots
// CHECK-LABEL: llvm.func @_mlir_ciface_kernel(
// CHECK-NOT: llvm.noalias
// CHECK-SAME: )
func.func @kernel(%a: memref<16xf32>, %b: memref<2x16xf32>, %n: index) attributes {mlircap.kernel = "pointwise"} {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%n] : memref<16xf32>
  memref.store %v, %b[%c0, %n] : memref<2x16xf32>
  return
}

// A function marked mlircap.noalias: only the memref arguments carrying it.
// MARK-LABEL: func.func private @body
// MARK-SAME: (%{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>)
// MARK-SAME: mlircap.noalias_slots = array<i64: 15, 11>
// MARK-NOT: mlircap.noalias,
// CHECK-LABEL: llvm.func @body(
// CHECK-SAME: %arg1: !llvm.ptr, %arg2: i64
// CHECK-SAME: %arg11: !llvm.ptr {llvm.noalias}
func.func private @body(%x: memref<4xf32>, %y: memref<4xf32>, %z: memref<4xf32> {mlircap.noalias}) attributes {mlircap.noalias} {
  return
}

// Not a kernel: nothing.
// MARK-LABEL: func.func @plain
// MARK-NOT: mlircap.noalias_slots
// CHECK-LABEL: llvm.func @plain(
// CHECK-NOT: llvm.noalias
// CHECK-SAME: )
func.func @plain(%a: memref<16xf32>, %b: memref<16xf32>) {
  return
}
