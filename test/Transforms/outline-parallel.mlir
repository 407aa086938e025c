// RUN: mlircap-opt %s --split-input-file --mlircap-outline-parallel="min-work=1024" | FileCheck %s
// RUN: mlircap-opt %s --split-input-file --mlircap-outline-parallel="min-work=1024" --convert-scf-to-cf --expand-strided-metadata --lower-affine --finalize-memref-to-llvm --convert-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM
// RUN: mlircap-opt %s --split-input-file --mlircap-outline-parallel="min-work=1024" --mlircap-mark-noalias --convert-scf-to-cf --expand-strided-metadata --lower-affine --finalize-memref-to-llvm --convert-to-llvm --reconcile-unrealized-casts --mlircap-apply-noalias | FileCheck %s --check-prefix=NOALIAS

// Rows are dispatched, the innermost dim stays a loop of its own (vectorized
// by LLVM); the memrefs travel as descriptors through the stack context: the
// entry point loads them and calls the chunk's body with them as arguments
// (not a kernel: no noalias mark).
// CHECK-LABEL: func.func private @copy_parallel_body(
// CHECK-SAME: %[[X:.*]]: memref<64x256xf32>, %[[Y:.*]]: memref<64x256xf32>, %[[LO:.*]]: i64, %[[HI:.*]]: i64)
// CHECK-NOT: mlircap.noalias
// CHECK: %[[L:.*]] = arith.index_cast %[[LO]] : i64 to index
// CHECK: %[[H:.*]] = arith.index_cast %[[HI]] : i64 to index
// CHECK: scf.for %[[I:.*]] = %[[L]] to %[[H]]
// CHECK:   scf.parallel (%[[J:.*]]) =
// CHECK:     memref.load %[[X]][%{{.*}}, %[[J]]]
// CHECK: return
// CHECK-LABEL: func.func private @copy_parallel(
// CHECK-SAME: %[[CTX:.*]]: !llvm.ptr, %[[CLO:.*]]: i64, %[[CHI:.*]]: i64)
// CHECK: %[[P0:.*]] = llvm.getelementptr %[[CTX]][0, 0]
// CHECK: %[[D0:.*]] = llvm.load %[[P0]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK: %[[X0:.*]] = builtin.unrealized_conversion_cast %[[D0]] {{.*}} to memref<64x256xf32>
// CHECK: %[[X1:.*]] = builtin.unrealized_conversion_cast %{{.*}} to memref<64x256xf32>
// CHECK: call @copy_parallel_body(%[[X0]], %[[X1]], %[[CLO]], %[[CHI]])
// CHECK-NEXT: return
// CHECK-LABEL: func.func @copy(
// CHECK: %[[C:.*]] = llvm.alloca %{{.*}} x !llvm.struct<(struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>, struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>)>
// CHECK: llvm.store
// CHECK: llvm.store
// CHECK: %[[F:.*]] = constant @copy_parallel : (!llvm.ptr, i64, i64) -> ()
// CHECK: call @mlircap_parallel_for(%[[F]], %[[C]], %c0_i64, %{{.*}}, %c4_i64)
// CHECK-NOT: scf.parallel
// LLVM-LABEL: llvm.func @copy_parallel_body(
// LLVM-LABEL: llvm.func @copy_parallel(
// LLVM: llvm.call @copy_parallel_body(
// LLVM-LABEL: llvm.func @copy(
// LLVM: %[[F:.*]] = llvm.mlir.addressof @copy_parallel : !llvm.ptr
// LLVM: llvm.call @mlircap_parallel_for(%[[F]],
func.func @copy(%x: memref<64x256xf32>, %y: memref<64x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c256) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<64x256xf32>
    memref.store %v, %y[%i, %j] : memref<64x256xf32>
  }
  return
}

// -----

// Too little work for two threads: unchanged.
// CHECK-LABEL: func.func @small(
// CHECK: scf.parallel
// CHECK-NOT: mlircap_parallel_for
func.func @small(%x: memref<8x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %f = arith.constant 1.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%c8, %c32) step (%c1, %c1) {
    memref.store %f, %x[%i, %j] : memref<8x32xf32>
  }
  return
}

// -----

// A parallel loop with a reduction is never split.
// CHECK-LABEL: func.func @reduce(
// CHECK: scf.parallel
// CHECK: scf.reduce
// CHECK-NOT: mlircap_parallel_for
func.func @reduce(%x: memref<65536xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 65536 : index
  %zero = arith.constant 0.0 : f32
  %s = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> f32 {
    %v = memref.load %x[%i] : memref<65536xf32>
    scf.reduce(%v : f32) {
    ^bb0(%a: f32, %b: f32):
      %r = arith.addf %a, %b : f32
      scf.reduce.return %r : f32
    }
  }
  return %s : f32
}

// -----

// Row sums: both parallel dims are dispatched (linearized, delinearized in
// the body), the reduction dim stays a sequential loop; the grain counts
// rows: 1024 / 128 = 8. Scalars (f32) and indices (as i64) are captured.
// CHECK-LABEL: func.func private @rowsum_parallel_body(
// CHECK-SAME: f32, %{{.*}}: index, %{{.*}}: i64, %{{.*}}: i64)
// CHECK: scf.for %[[N:.*]] =
// CHECK:   %[[R:.*]] = arith.remui %[[N]], %c16
// CHECK:   arith.divui %[[N]], %c16
// CHECK:   scf.for %{{.*}} = %c0 to %c128
// CHECK-LABEL: func.func private @rowsum_parallel(
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK-LABEL: func.func @rowsum(
// CHECK: arith.index_cast %{{.*}} : index to i64
// CHECK: call @mlircap_parallel_for(%{{.*}}, %{{.*}}, %c0_i64, %{{.*}}, %c8_i64)
func.func @rowsum(%x: memref<8x16x128xf32>, %y: memref<8x16xf32>, %scale: f32, %k: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c128 = arith.constant 128 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c8, %c16) step (%c1, %c1) {
    scf.for %r = %c0 to %c128 step %c1 {
      %v = memref.load %x[%i, %j, %r] : memref<8x16x128xf32>
      %a = memref.load %y[%i, %j] : memref<8x16xf32>
      %w = arith.mulf %v, %scale : f32
      %s = arith.addf %a, %w : f32
      memref.store %s, %y[%i, %j] : memref<8x16xf32>
    }
    %kk = arith.index_cast %k : index to i32
    scf.reduce
  }
  return
}

// -----

// A column reduction: the sequential loop around the parallel one moves into
// each chunk (every written memref is accessed at one index list holding
// the parallel IV), so there is one dispatch, not one per row.
// CHECK-LABEL: func.func private @colsum_parallel_body(
// CHECK: scf.for %[[R:.*]] = %c0 to %c16
// CHECK-NEXT: scf.for %[[C:.*]] =
// CHECK: memref.load %{{.*}}[%[[R]], %[[C]]]
// CHECK-LABEL: func.func @colsum(
// CHECK-NOT: scf.for
// CHECK: call @mlircap_parallel_for(%{{.*}}, %{{.*}}, %c0_i64, %{{.*}}, %c64_i64)
// CHECK-NOT: scf.for
// CHECK: return
func.func @colsum(%x: memref<16x4096xf32>, %y: memref<4096xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c4096 = arith.constant 4096 : index
  scf.for %i = %c0 to %c16 step %c1 {
    scf.parallel (%j) = (%c0) to (%c4096) step (%c1) {
      %v = memref.load %x[%i, %j] : memref<16x4096xf32>
      %a = memref.load %y[%j] : memref<4096xf32>
      %s = arith.addf %a, %v : f32
      memref.store %s, %y[%j] : memref<4096xf32>
      scf.reduce
    }
  }
  return
}

// -----

// A written memref read at another index: the loop around stays in the
// parent and dispatches at each of its iterations; the context is allocated
// once, at function entry.
// CHECK-LABEL: func.func @neighbours(
// CHECK-NEXT: llvm.mlir.constant(1 : i64)
// CHECK-NEXT: llvm.alloca
// CHECK: scf.for
// CHECK:   call @mlircap_parallel_for
func.func @neighbours(%y: memref<4097xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c4096 = arith.constant 4096 : index
  scf.for %i = %c0 to %c16 step %c1 {
    scf.parallel (%j) = (%c0) to (%c4096) step (%c1) {
      %k = arith.addi %j, %c1 : index
      %a = memref.load %y[%k] : memref<4097xf32>
      memref.store %a, %y[%j] : memref<4097xf32>
      scf.reduce
    }
  }
  return
}

// -----

// In a kernel (distinct buffers), captured memrefs that are kernel arguments
// or allocations are noalias arguments of the chunk's body; two views of one
// buffer are not. After the LLVM lowering their data pointers are llvm.noalias.
// CHECK-LABEL: func.func private @kern_parallel_body(
// CHECK-SAME: %{{.*}}: memref<64x256xf32> {mlircap.noalias},
// CHECK-SAME: %{{.*}}: memref<256xf32> {mlircap.noalias},
// CHECK-SAME: %{{.*}}: memref<64x128xf32, strided<[256, 1]>>,
// CHECK-SAME: %{{.*}}: memref<64x128xf32, strided<[256, 1], offset: 128>>,
// CHECK-SAME: %{{.*}}: memref<64x128xf32> {mlircap.noalias},
// CHECK-SAME: attributes {mlircap.noalias}
// NOALIAS-LABEL: llvm.func @kern_parallel_body(
// NOALIAS-SAME: %arg1: !llvm.ptr {llvm.noalias}
// NOALIAS-SAME: %arg8: !llvm.ptr {llvm.noalias}
// NOALIAS-NOT: %arg13: !llvm.ptr {llvm.noalias}
// NOALIAS-NOT: %arg20: !llvm.ptr {llvm.noalias}
// NOALIAS-SAME: %arg27: !llvm.ptr {llvm.noalias}
func.func @kern(%x: memref<64x256xf32>, %s: memref<256xf32>, %z: memref<64x256xf32>) attributes {mlircap.kernel = "pointwise"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %c256 = arith.constant 256 : index
  %lo = memref.subview %z[0, 0] [64, 128] [1, 1] : memref<64x256xf32> to memref<64x128xf32, strided<[256, 1]>>
  %hi = memref.subview %z[0, 128] [64, 128] [1, 1] : memref<64x256xf32> to memref<64x128xf32, strided<[256, 1], offset: 128>>
  %t = memref.alloc() : memref<64x128xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c128) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<64x256xf32>
    %w = memref.load %s[%j] : memref<256xf32>
    %r = arith.mulf %v, %w : f32
    memref.store %r, %lo[%i, %j] : memref<64x128xf32, strided<[256, 1]>>
    memref.store %r, %hi[%i, %j] : memref<64x128xf32, strided<[256, 1], offset: 128>>
    memref.store %r, %t[%i, %j] : memref<64x128xf32>
  }
  memref.dealloc %t : memref<64x128xf32>
  return
}

// -----

// A global is storage of its own: the kernel's arguments stay noalias, the
// global is not marked. A memref of unknown origin (a call's result) could
// alias any of them: then no argument of the body is noalias.
// CHECK-LABEL: func.func private @kern_global_parallel_body(
// CHECK-SAME: %{{.*}}: memref<64x256xf32> {mlircap.noalias}, %{{.*}}: memref<256xf32>, %{{.*}}: memref<64x256xf32> {mlircap.noalias},
// CHECK-LABEL: func.func private @kern_unknown_parallel_body(
// CHECK-NOT: mlircap.noalias
// CHECK: return
memref.global "private" constant @table : memref<256xf32> = dense<1.0>
func.func @kern_global(%x: memref<64x256xf32>, %y: memref<64x256xf32>) attributes {mlircap.kernel = "pointwise"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  %t = memref.get_global @table : memref<256xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c256) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<64x256xf32>
    %w = memref.load %t[%j] : memref<256xf32>
    %r = arith.mulf %v, %w : f32
    memref.store %r, %y[%i, %j] : memref<64x256xf32>
  }
  return
}

func.func private @make() -> memref<256xf32>
func.func @kern_unknown(%x: memref<64x256xf32>, %y: memref<64x256xf32>) attributes {mlircap.kernel = "pointwise"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  %t = func.call @make() : () -> memref<256xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c256) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<64x256xf32>
    %w = memref.load %t[%j] : memref<256xf32>
    %r = arith.mulf %v, %w : f32
    memref.store %r, %y[%i, %j] : memref<64x256xf32>
  }
  return
}

// -----

// A kernel's row loops over one iteration space are fused first (softmax:
// row max, exp, row sum, in-place division): one parallel body, each row's
// steps in their order. The fill loop over another iteration space (rows x
// 1) writes a buffer the first loops do not touch: the max and exp loops
// move down past it; the sum loop reads what the fill wrote and follows it.
// CHECK-LABEL: func.func private @softmax_parallel_body(
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for {{.*}} iter_args
// CHECK: arith.maximumf
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[I]]] : memref<64xf32>
// CHECK: scf.for
// CHECK: math.exp
// CHECK: scf.for {{.*}} iter_args
// CHECK: arith.addf
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[I]]] : memref<64xf32>
// CHECK: scf.for
// CHECK: arith.divf
// CHECK: return
// CHECK-NOT: func.func private @softmax_parallel_body
// CHECK-LABEL: func.func @softmax(
// CHECK: scf.parallel
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<64x1xf32>
// CHECK: call @mlircap_parallel_for(
// CHECK-NOT: call @mlircap_parallel_for(
// CHECK: return
func.func @softmax(%x: memref<64x256xf32>, %y: memref<64x256xf32>) attributes {mlircap.kernel = "row_reduction"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c256 = arith.constant 256 : index
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %m = memref.alloc() : memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %r = scf.for %j = %c0 to %c256 step %c1 iter_args(%a = %ninf) -> (f32) {
      %v = memref.load %x[%i, %j] : memref<64x256xf32>
      %n = arith.maximumf %v, %a : f32
      scf.yield %n : f32
    }
    memref.store %r, %m[%i] : memref<64xf32>
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %mx = memref.load %m[%i] : memref<64xf32>
    scf.for %j = %c0 to %c256 step %c1 {
      %v = memref.load %x[%i, %j] : memref<64x256xf32>
      %d = arith.subf %v, %mx : f32
      %e = math.exp %d : f32
      memref.store %e, %y[%i, %j] : memref<64x256xf32>
    }
  }
  %s2 = memref.alloc() : memref<64x1xf32>
  scf.parallel (%i, %k) = (%c0, %c0) to (%c64, %c1) step (%c1, %c1) {
    memref.store %zero, %s2[%i, %k] : memref<64x1xf32>
  }
  %s = memref.collapse_shape %s2 [[0, 1]] : memref<64x1xf32> into memref<64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %init = memref.load %s[%i] : memref<64xf32>
    %r = scf.for %j = %c0 to %c256 step %c1 iter_args(%a = %init) -> (f32) {
      %v = memref.load %y[%i, %j] : memref<64x256xf32>
      %n = arith.addf %v, %a : f32
      scf.yield %n : f32
    }
    memref.store %r, %s[%i] : memref<64xf32>
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    %t = memref.load %s[%i] : memref<64xf32>
    scf.for %j = %c0 to %c256 step %c1 {
      %v = memref.load %y[%i, %j] : memref<64x256xf32>
      %q = arith.divf %v, %t : f32
      memref.store %q, %y[%i, %j] : memref<64x256xf32>
    }
  }
  memref.dealloc %m : memref<64xf32>
  memref.dealloc %s2 : memref<64x1xf32>
  return
}

// -----

// Not fused: the second loop reads a column of what the first one wrote by
// rows (another iteration's elements); an op between them writes a buffer
// the first loop reads; a function that is no kernel (its arguments may be
// one buffer).
// CHECK-LABEL: func.func @transposed(
// CHECK-COUNT-2: call @mlircap_parallel_for(
// CHECK-LABEL: func.func @copy_between(
// CHECK-COUNT-2: call @mlircap_parallel_for(
// CHECK-LABEL: func.func @not_kernel(
// CHECK-COUNT-2: call @mlircap_parallel_for(
func.func @transposed(%x: memref<64x64xf32>, %y: memref<64x64xf32>) attributes {mlircap.kernel = "pointwise"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %t = memref.alloc() : memref<64x64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %x[%i, %j] : memref<64x64xf32>
      memref.store %v, %t[%i, %j] : memref<64x64xf32>
    }
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %t[%j, %i] : memref<64x64xf32>
      memref.store %v, %y[%i, %j] : memref<64x64xf32>
    }
  }
  memref.dealloc %t : memref<64x64xf32>
  return
}

func.func @copy_between(%x: memref<64x64xf32>, %y: memref<64x64xf32>, %z: memref<64x64xf32>) attributes {mlircap.kernel = "pointwise"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %t = memref.alloc() : memref<64x64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %t[%i, %j] : memref<64x64xf32>
      memref.store %v, %y[%i, %j] : memref<64x64xf32>
    }
  }
  memref.copy %x, %t : memref<64x64xf32> to memref<64x64xf32>
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %t[%i, %j] : memref<64x64xf32>
      memref.store %v, %z[%i, %j] : memref<64x64xf32>
    }
  }
  memref.dealloc %t : memref<64x64xf32>
  return
}

func.func @not_kernel(%x: memref<64x64xf32>, %y: memref<64x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %x[%i, %j] : memref<64x64xf32>
      memref.store %v, %y[%i, %j] : memref<64x64xf32>
    }
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %j = %c0 to %c64 step %c1 {
      %v = memref.load %y[%i, %j] : memref<64x64xf32>
      %w = arith.addf %v, %v : f32
      memref.store %w, %x[%i, %j] : memref<64x64xf32>
    }
  }
  return
}

// -----

// Outer dims too short to dispatch alone (2 rows: little parallelism) over a
// long last dim: the linear chunk [lo, hi) runs row by row, each row's part an
// inner loop over the last dim (vectorized by LLVM), instead of recovering
// both indices from the linear one per element.
// CHECK-LABEL: func.func private @bcast_parallel_body(
// CHECK: %[[L:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[H:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[RL:.*]] = arith.divui %[[L]], %c4096
// CHECK: %[[RH:.*]] = arith.ceildivui %[[H]], %c4096
// CHECK: scf.for %[[R:.*]] = %[[RL]] to %[[RH]]
// CHECK:   %[[S:.*]] = arith.muli %[[R]], %c4096
// CHECK:   %[[C0:.*]] = arith.maxsi
// CHECK:   %[[C1:.*]] = arith.minsi
// CHECK:   scf.parallel (%[[J:.*]]) = (%[[C0]]) to (%[[C1]])
// CHECK:     memref.load %{{.*}}[%[[J]]]
// CHECK:     memref.store %{{.*}}, %{{.*}}[%[[R]], %[[J]]]
// CHECK-LABEL: func.func @bcast(
// CHECK: %[[N:.*]] = arith.index_cast %c8192 : index to i64
// CHECK: call @mlircap_parallel_for(%{{.*}}, %{{.*}}, %c0_i64, %[[N]], %c1024_i64)
func.func @bcast(%x: memref<4096xf32>, %y: memref<2x4096xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4096 = arith.constant 4096 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c2, %c4096) step (%c1, %c1) {
    %v = memref.load %x[%j] : memref<4096xf32>
    memref.store %v, %y[%i, %j] : memref<2x4096xf32>
  }
  return
}
