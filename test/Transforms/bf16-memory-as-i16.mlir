// RUN: mlircap-opt %s --mlircap-bf16-memory-as-i16 --split-input-file | FileCheck %s

// A bf16 copy (a transpose's body) moves i16: no bf16 value is left for the
// vectorizers (LLVM 22's x86 backend asserted on their bf16 vectors).
// CHECK-LABEL: llvm.func @copy(
// CHECK: %[[V:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i16
// CHECK-NEXT: llvm.store %[[V]], %{{.*}} : i16, !llvm.ptr
// CHECK-NOT: bitcast
llvm.func @copy(%p: !llvm.ptr, %q: !llvm.ptr) {
  %v = llvm.load %p : !llvm.ptr -> bf16
  llvm.store %v, %q : bf16, !llvm.ptr
  llvm.return
}

// -----

// A select between a loaded value and a constant (a masked max's -inf), and
// the emulation's integer read of a bf16 value.
// CHECK-LABEL: llvm.func @select(
// CHECK: %[[V:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i16
// CHECK: %[[C:.*]] = llvm.bitcast %{{.*}} : bf16 to i16
// CHECK: %[[S:.*]] = llvm.select %{{.*}}, %[[V]], %[[C]] : i1, i16
// CHECK: llvm.zext %[[V]] : i16 to i32
// CHECK: llvm.store %[[S]], %{{.*}} : i16, !llvm.ptr
llvm.func @select(%p: !llvm.ptr, %q: !llvm.ptr, %c: i1) -> i32 {
  %ninf = llvm.mlir.constant(0xFF80 : bf16) : bf16
  %v = llvm.load %p : !llvm.ptr -> bf16
  %s = llvm.select %c, %v, %ninf : i1, bf16
  %i = llvm.bitcast %v : bf16 to i16
  %w = llvm.zext %i : i16 to i32
  llvm.store %s, %q : bf16, !llvm.ptr
  llvm.return %w : i32
}

// -----

// Vectors of bf16 too; other types are left as they are.
// CHECK-LABEL: llvm.func @vector(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> vector<8xi16>
// CHECK: llvm.store %{{.*}}, %{{.*}} : vector<8xi16>, !llvm.ptr
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> f16
// CHECK: llvm.store %{{.*}}, %{{.*}} : f16, !llvm.ptr
llvm.func @vector(%p: !llvm.ptr, %q: !llvm.ptr) {
  %v = llvm.load %p : !llvm.ptr -> vector<8xbf16>
  llvm.store %v, %q : vector<8xbf16>, !llvm.ptr
  %h = llvm.load %p : !llvm.ptr -> f16
  llvm.store %h, %q : f16, !llvm.ptr
  llvm.return
}

// -----

// An f32 -> bf16 fptrunc is integer rounding to nearest even (NaN 0x7fc0):
// no conversion instruction (x86's vcvtneps2bf16 flushes subnormals).
// CHECK-LABEL: llvm.func @round(
// CHECK-NOT: llvm.fptrunc
// CHECK: %[[B:.*]] = llvm.bitcast %{{.*}} : f32 to i32
// CHECK: llvm.lshr %[[B]]
// CHECK: %[[H:.*]] = llvm.trunc %{{.*}} : i32 to i16
// CHECK: %[[N:.*]] = llvm.fcmp "uno"
// CHECK: %[[R:.*]] = llvm.select %[[N]], %{{.*}}, %[[H]] : i1, i16
// CHECK: llvm.store %[[R]], %{{.*}} : i16, !llvm.ptr
llvm.func @round(%x: f32, %q: !llvm.ptr) {
  %t = llvm.fptrunc %x : f32 to bf16
  llvm.store %t, %q : bf16, !llvm.ptr
  llvm.return
}
