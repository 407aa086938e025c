// RUN: env MLIRCAP_CASCADE_SUMS=0 mlircap-opt %s --split-input-file --mlircap-reduction-loops | FileCheck %s

// The lowering with MLIRCAP_CASCADE_SUMS=0: float sums over a contiguous last
// dim in blocks / sequentially, not in eager's cascade order (cascade-sums.mlir).

// A row max: the accumulator is loaded once per row, carried through the
// reduction loop, stored once. The max is a maxnumf that assumes no NaN (one
// vector max on x86, not llvm.maximum's six ops) beside a flag of a NaN
// term (or a NaN initial value); the result is NaN where it is set.
// CHECK-LABEL: func.func @row_max(
// CHECK-SAME: %[[X:.*]]: memref<4x1001xf32>, %[[ACC:.*]]: memref<4xf32>)
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %[[ACC]][%[[I]]] : memref<4xf32>
// CHECK:   %[[N0:.*]] = arith.cmpf uno, %[[INIT]], %[[INIT]] : f32
// CHECK:   %[[R:.*]]:2 = scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A:.*]] = %[[INIT]], %[[N:.*]] = %[[N0]]) -> (f32, i1) {
// CHECK:     %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x1001xf32>
// CHECK:     %[[M:.*]] = arith.maxnumf %[[V]], %[[A]] fastmath<nnan,nsz> : f32
// CHECK:     %[[U:.*]] = arith.cmpf uno, %[[V]], %[[V]] : f32
// CHECK:     %[[N1:.*]] = arith.ori %[[N]], %[[U]] : i1
// CHECK:     scf.yield %[[M]], %[[N1]] : f32, i1
// CHECK:   %[[S:.*]] = arith.select %[[R]]#1, %cst{{.*}}, %[[R]]#0 : f32
// CHECK:   memref.store %[[S]], %[[ACC]][%[[I]]] : memref<4xf32>
// CHECK-NOT: linalg.generic
// CHECK-NOT: maximumf
func.func @row_max(%x: memref<4x1001xf32>, %acc: memref<4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x1001xf32>) outs(%acc : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %out : f32
    linalg.yield %m : f32
  }
  return
}

// -----

// argmax: two accumulators, linalg.index becomes the reduction loop's IV; a
// full reduction (no parallel dim) has no scf.parallel.
// CHECK-LABEL: func.func @argmax_all(
// CHECK-NOT: scf.parallel
// CHECK: %[[V0:.*]] = memref.load %{{.*}}[] : memref<f32>
// CHECK: %[[I0:.*]] = memref.load %{{.*}}[] : memref<i64>
// CHECK: %[[R:.*]]:2 = scf.for %[[J:.*]] = {{.*}} iter_args(%[[A:.*]] = %[[V0]], %[[B:.*]] = %[[I0]]) -> (f32, i64) {
// CHECK:   arith.index_cast %[[J]] : index to i64
// CHECK:   scf.yield
// CHECK: memref.store %[[R]]#0, %{{.*}}[] : memref<f32>
// CHECK: memref.store %[[R]]#1, %{{.*}}[] : memref<i64>
func.func @argmax_all(%x: memref<64xf32>, %m: memref<f32>, %i: memref<i64>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]}
      ins(%x : memref<64xf32>) outs(%m, %i : memref<f32>, memref<i64>) {
  ^bb0(%in: f32, %a: f32, %b: i64):
    %j = linalg.index 0 : index
    %jj = arith.index_cast %j : index to i64
    %gt = arith.cmpf ogt, %in, %a : f32
    %v = arith.select %gt, %in, %a : f32
    %k = arith.select %gt, %jj, %b : i64
    linalg.yield %v, %k : f32, i64
  }
  return
}

// -----

// A column sum (a parallel dim inside the reduction dim): the accumulators
// of a row live in a stack tile (it cannot alias the input, so LLVM
// vectorizes the contiguous inner loop), loaded from and stored to the
// output once. bf16 accumulators are left alone.
// CHECK-LABEL: func.func @column_sum(
// CHECK-SAME: %[[X:.*]]: memref<64x32xf32>, %[[ACC:.*]]: memref<32xf32>)
// CHECK-NOT: scf.parallel
// CHECK: %[[SP:.*]] = llvm.intr.stacksave : !llvm.ptr
// CHECK:   %[[T:.*]] = memref.alloca() : memref<32xf32>
// CHECK:   scf.for %[[J0:.*]] =
// CHECK:     %[[V0:.*]] = memref.load %[[ACC]][%[[J0]]]
// CHECK:     memref.store %[[V0]], %[[T]][%[[J0]]]
// CHECK:   scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:     scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK:       %[[A:.*]] = memref.load %[[T]][%[[J]]]
// CHECK:       %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]]
// CHECK:       %[[S:.*]] = arith.addf %[[V]], %[[A]] : f32
// CHECK:       memref.store %[[S]], %[[T]][%[[J]]]
// CHECK:   scf.for %[[J1:.*]] =
// CHECK:     %[[V1:.*]] = memref.load %[[T]][%[[J1]]]
// CHECK:     memref.store %[[V1]], %[[ACC]][%[[J1]]]
// CHECK-NOT: linalg.generic
// CHECK-LABEL: func.func @bf16_sum(
// CHECK: linalg.generic
func.func @column_sum(%x: memref<64x32xf32>, %acc: memref<32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
                  iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<64x32xf32>) outs(%acc : memref<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  return
}
func.func @bf16_sum(%x: memref<4x64xbf16>, %acc: memref<4xbf16>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x64xbf16>) outs(%acc : memref<4xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %s = arith.addf %in, %out : bf16
    linalg.yield %s : bf16
  }
  return
}

// -----

// A broadcast input (constant index on a unit dim: read through a
// collapse_shape without it) and a scalar input; 3-D with two trailing
// reduction dims: one loop nest carries the accumulator.
// CHECK-LABEL: func.func @two_reduction_dims(
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[I]]]
// CHECK:   %[[R:.*]] = scf.for %[[J:.*]] = {{.*}} iter_args(%[[A:.*]] = %[[INIT]]) -> (f32) {
// CHECK:     %[[R2:.*]] = scf.for %[[K:.*]] = {{.*}} iter_args(%[[B:.*]] = %[[A]]) -> (f32) {
// CHECK:       memref.load %{{.*}}[%[[I]], %[[J]], %[[K]]] : memref<8x4x16xf32>
// CHECK:       memref.load %{{.*}}[%[[K]]] : memref<16xf32>
// CHECK:       arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK:       scf.yield
// CHECK:     scf.yield %[[R2]]
// CHECK:   memref.store %[[R]], %{{.*}}[%[[I]]]
func.func @two_reduction_dims(%x: memref<8x4x16xf32>, %w: memref<1x16xf32>, %s: f32, %acc: memref<8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (0, d2)>,
                                   affine_map<(d0, d1, d2) -> ()>, affine_map<(d0, d1, d2) -> (d0)>],
                  iterator_types = ["parallel", "reduction", "reduction"]}
      ins(%x, %w, %s : memref<8x4x16xf32>, memref<1x16xf32>, f32) outs(%acc : memref<8xf32>) {
  ^bb0(%in: f32, %wi: f32, %si: f32, %out: f32):
    %p = arith.mulf %in, %wi : f32
    %q = arith.mulf %p, %si : f32
    %a = arith.addf %q, %out : f32
    linalg.yield %a : f32
  }
  return
}

// -----

// A long column sum with no outer parallel dim: its columns are cut into
// tiles of 128 that run as an scf.parallel (1001 columns: no multiple of 8
// divides it, so 7 full tiles, then the last 105 columns as a tile of their
// own; every bound static).
// CHECK-LABEL: func.func @column_tiles(
// CHECK-SAME: %[[X:.*]]: memref<4x1001xf32>, %[[ACC:.*]]: memref<1001xf32>)
// CHECK-DAG: %[[C7:.*]] = arith.constant 7 : index
// CHECK: scf.parallel (%[[T:.*]]) = (%{{.*}}) to (%[[C7]])
// CHECK:   llvm.intr.stacksave
// CHECK:   %[[BASE:.*]] = arith.muli %[[T]], %{{.*}} : index
// CHECK:   memref.alloca() : memref<128xf32>
// CHECK:   memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<128xf32>
// CHECK:   scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:     scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK:       %[[C:.*]] = arith.addi %[[BASE]], %[[J]] : index
// CHECK:       memref.load %[[X]][%[[I]], %[[C]]]
// CHECK:   llvm.intr.stackrestore
// CHECK: scf.reduce
// CHECK: llvm.intr.stacksave
// CHECK: memref.alloca() : memref<105xf32>
// CHECK-NOT: arith.minsi
func.func @column_tiles(%x: memref<4x1001xf32>, %acc: memref<1001xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
                  iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<4x1001xf32>) outs(%acc : memref<1001xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// x.sum(1) on NCHW: H and W collapse into one contiguous dim of 1024 (a
// 32-element row alone would be fully unrolled); N runs in parallel, each
// N a tile of 1024 accumulators.
// CHECK-LABEL: func.func @nchw_channel_sum(
// CHECK: %[[X:.*]] = memref.collapse_shape %{{.*}} {{\[}}[0], [1], [2, 3]] : memref<8x64x32x32xf32> into memref<8x64x1024xf32>
// CHECK: %[[ACC:.*]] = memref.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : memref<8x32x32xf32> into memref<8x1024xf32>
// CHECK: scf.parallel (%[[N:.*]]) =
// CHECK:   memref.alloca() : memref<1024xf32>
// CHECK:   memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<1024xf32>
// CHECK:   scf.for %[[C:.*]] =
// CHECK:     scf.for %[[HW:.*]] =
// CHECK:       memref.load %[[X]][%[[N]], %[[C]], %[[HW]]]
func.func @nchw_channel_sum(%x: memref<8x64x32x32xf32>, %acc: memref<8x32x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>,
                                   affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>],
                  iterator_types = ["parallel", "reduction", "parallel", "parallel"]}
      ins(%x : memref<8x64x32x32xf32>) outs(%acc : memref<8x32x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// BatchNorm statistics, x.sum((0, 2, 3)): the parallel dim C moves outside
// the reduction dims N and (H, W) (each channel's order of accumulation is
// unchanged), which accumulate in registers.
// CHECK-LABEL: func.func @per_channel_sum(
// CHECK: %[[X:.*]] = memref.collapse_shape %{{.*}} {{\[}}[0], [1], [2, 3]]
// CHECK: scf.parallel (%[[C:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[C]]] : memref<64xf32>
// CHECK:   scf.for %[[N:.*]] = {{.*}} iter_args(%{{.*}} = %[[INIT]]) -> (f32) {
// CHECK:     scf.for %[[HW:.*]] = {{.*}} iter_args
// CHECK:       memref.load %[[X]][%[[N]], %[[C]], %[[HW]]] : memref<8x64x1024xf32>
func.func @per_channel_sum(%x: memref<8x64x32x32xf32>, %acc: memref<64xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>,
                                   affine_map<(d0, d1, d2, d3) -> (d1)>],
                  iterator_types = ["reduction", "parallel", "reduction", "reduction"]}
      ins(%x : memref<8x64x32x32xf32>) outs(%acc : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// argmax over a middle dim: the index dim (C) is not collapsed; the value
// and index accumulators get one tile each.
// CHECK-LABEL: func.func @argmax_dim1(
// CHECK: memref.collapse_shape %{{.*}} {{\[}}[0], [1], [2, 3]]
// CHECK: scf.parallel (%[[N:.*]]) =
// CHECK:   memref.alloca() : memref<16xf32>
// CHECK:   memref.alloca() : memref<16xi64>
// CHECK:   memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<16xi64>
// CHECK:   scf.for %[[C:.*]] =
// CHECK:     arith.index_cast %[[C]] : index to i64
func.func @argmax_dim1(%x: memref<2x8x4x4xf32>, %m: memref<2x4x4xf32>, %i: memref<2x4x4xi64>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>,
                                   affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>,
                                   affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>],
                  iterator_types = ["parallel", "reduction", "parallel", "parallel"]}
      ins(%x : memref<2x8x4x4xf32>) outs(%m, %i : memref<2x4x4xf32>, memref<2x4x4xi64>) {
  ^bb0(%in: f32, %a: f32, %b: i64):
    %c = linalg.index 1 : index
    %cc = arith.index_cast %c : index to i64
    %gt = arith.cmpf ogt, %in, %a : f32
    %v = arith.select %gt, %in, %a : f32
    %k = arith.select %gt, %cc, %b : i64
    linalg.yield %v, %k : f32, i64
  }
  return
}

// -----

// 1000 columns: tiles of 200, a divisor (static bounds in every tile).
// CHECK-LABEL: func.func @column_tiles_divisor(
// CHECK-DAG: %[[C5:.*]] = arith.constant 5 : index
// CHECK: scf.parallel (%{{.*}}) = (%{{.*}}) to (%[[C5]])
// CHECK-NOT: arith.minsi
// CHECK: memref.alloca() : memref<200xf32>
func.func @column_tiles_divisor(%x: memref<4x1000xf32>, %acc: memref<1000xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
                  iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<4x1000xf32>) outs(%acc : memref<1000xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Elementwise: a row's max broadcast over the row from a memref<2x8x1>
// (constant 0 on its unit dim) is read through a collapse_shape without
// that dim, the dims collapse to 16x32, and the max is loaded once per row,
// outside the loop over the row (LLVM cannot hoist it past the stores).
// CHECK-LABEL: func.func @row_broadcast(
// CHECK-DAG: %[[X:.*]] = memref.collapse_shape %arg0 {{\[}}[0, 1], [2]] : memref<2x8x32xf32> into memref<16x32xf32>
// CHECK-DAG: %[[M:.*]] = memref.collapse_shape %{{.*}} {{\[}}[0, 1]] : memref<2x8xf32> into memref<16xf32>
// CHECK-DAG: %[[O:.*]] = memref.collapse_shape %arg2 {{\[}}[0, 1], [2]] : memref<2x8x32xf32> into memref<16x32xf32>
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[MAX:.*]] = memref.load %[[M]][%[[I]]] : memref<16xf32>
// CHECK:   scf.for %[[J:.*]] =
// CHECK:     %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<16x32xf32>
// CHECK:     %[[D:.*]] = arith.subf %[[V]], %[[MAX]] : f32
// CHECK:     memref.store %{{.*}}, %[[O]][%[[I]], %[[J]]] : memref<16x32xf32>
// CHECK-NOT: linalg.generic
func.func @row_broadcast(%x: memref<2x8x32xf32>, %m: memref<2x8x1xf32>, %out: memref<2x8x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>,
                                   affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                  iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %m : memref<2x8x32xf32>, memref<2x8x1xf32>) outs(%out : memref<2x8x32xf32>) {
  ^bb0(%in: f32, %mi: f32, %o: f32):
    %d = arith.subf %in, %mi : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  }
  return
}

// -----

// Elementwise without a broadcast input: collapsed (one loop of 512), left to
// convert-linalg-to-parallel-loops.
// CHECK-LABEL: func.func @plain_elementwise(
// CHECK: memref.collapse_shape %arg0 {{\[}}[0, 1, 2]] : memref<2x8x32xf32> into memref<512xf32>
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel"]
func.func @plain_elementwise(%x: memref<2x8x32xf32>, %out: memref<2x8x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                  iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<2x8x32xf32>) outs(%out : memref<2x8x32xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  return
}

// -----

// An f64 sum of f32 terms (mlircap-widen-sums' form) over 3000 elements: blocks of
// 1024 summed in f32 (reassociable), each block's sum added in f64; the last 952
// elements are a partial block of their own.
// CHECK-LABEL: func.func @blocked_sum(
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[I]]] : memref<4xf64>
// CHECK:   %[[FULL:.*]] = scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[W:.*]] = %[[INIT]]) -> (f64) {
// CHECK:     %[[P:.*]] = scf.for %[[J:.*]] = %c0{{.*}} to %c1024{{.*}} step %{{.*}} iter_args(%[[S:.*]] = %{{.*}}) -> (f32) {
// CHECK:       %[[K:.*]] = arith.addi %[[B]], %[[J]] : index
// CHECK:       %[[V:.*]] = memref.load %{{.*}}[%[[I]], %[[K]]] : memref<4x3000xf32>
// CHECK:       %[[M:.*]] = arith.mulf %[[V]], %{{.*}} : f32
// CHECK:       %[[A:.*]] = arith.addf %[[S]], %[[M]] fastmath<reassoc> : f32
// CHECK:       scf.yield %[[A]] : f32
// CHECK:     } {loop_annotation = #{{.*}}}
// CHECK:     %[[PW:.*]] = arith.extf %[[P]] : f32 to f64
// CHECK:     %[[N:.*]] = arith.addf %[[W]], %[[PW]] : f64
// CHECK:     scf.yield %[[N]] : f64
// CHECK:   %[[T:.*]] = scf.for %{{.*}} = %c0{{.*}} to %c952 step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:   %[[TW:.*]] = arith.extf %[[T]] : f32 to f64
// CHECK:   %[[R:.*]] = arith.addf %[[FULL]], %[[TW]] : f64
// CHECK:   memref.store %[[R]], %{{.*}}[%[[I]]] : memref<4xf64>
func.func @blocked_sum(%x: memref<4x3000xf32>, %acc: memref<4xf64>) {
  %k = arith.constant 1.000100e+00 : f32
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x3000xf32>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f32, %out: f64):
    %m = arith.mulf %in, %k : f32
    %w = arith.extf %m : f32 to f64
    %a = arith.addf %out, %w fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  return
}

// -----

// One partial block: 1000 elements summed in f32, then added in f64.
// CHECK-LABEL: func.func @one_partial_block(
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[I]]] : memref<4xf64>
// CHECK-NOT: iter_args({{.*}}) -> (f64)
// CHECK:   %[[P:.*]] = scf.for %{{.*}} = %c0{{.*}} to %c1000{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:     arith.addf %{{.*}}, %{{.*}} fastmath<reassoc> : f32
// CHECK:   %[[PW:.*]] = arith.extf %[[P]] : f32 to f64
// CHECK:   %[[R:.*]] = arith.addf %[[INIT]], %[[PW]] : f64
// CHECK:   memref.store %[[R]], %{{.*}}[%[[I]]] : memref<4xf64>
func.func @one_partial_block(%x: memref<4x1000xf32>, %acc: memref<4xf64>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x1000xf32>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f32, %out: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %out, %w fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  return
}

// -----

// Not blocked: fewer than 64 elements, an f64 term, an add without reassoc.
// CHECK-LABEL: func.func @not_blocked(
// CHECK-NOT: -> (f32)
// CHECK: return
func.func @not_blocked(%x: memref<4x40xf32>, %y: memref<4x1000xf64>, %z: memref<4x1000xf32>,
                       %acc: memref<4xf64>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x40xf32>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f32, %out: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %out, %w fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%y : memref<4x1000xf64>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %a = arith.addf %out, %in fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%z : memref<4x1000xf32>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f32, %out: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %out, %w : f64
    linalg.yield %a : f64
  }
  return
}

// -----

// A full sum of 2^20 elements: its one output would run on one thread. The
// dim is cut into 64 chunks of 16384 (a length fixed by the shape), each
// chunk's blocked sum from the neutral element (-0.0) stored to a stack
// buffer: the first 63 in an scf.parallel over the chunks (static loop
// bounds, the chunk's offset added to the index), the last one (here full)
// after it; then the partials are added to the output in chunk order.
// CHECK-LABEL: func.func @split_full_sum(
// CHECK-SAME: %[[X:.*]]: memref<1048576xf32>, %[[ACC:.*]]: memref<f64>)
// CHECK: %[[SP:.*]] = llvm.intr.stacksave
// CHECK: %[[PART:.*]] = memref.alloca() : memref<64xf64>
// CHECK: scf.parallel (%[[C:.*]]) = (%{{.*}}) to (%c63{{.*}}) step
// CHECK:   %[[OFF:.*]] = arith.muli %[[C]], %c16384{{.*}} : index
// CHECK:   scf.for %[[B:.*]] = %c0{{.*}} to %c16384{{.*}} step %c1024{{.*}} iter_args(%{{.*}} = %cst{{.*}}) -> (f64) {
// CHECK:     scf.for %[[J:.*]] = %c0{{.*}} to %c1024{{.*}} step %{{.*}} -> (f32) {
// CHECK:       %[[E:.*]] = arith.addi %[[B]], %[[J]] : index
// CHECK:       %[[IX:.*]] = arith.addi %[[OFF]], %[[E]] : index
// CHECK:       memref.load %[[X]][%[[IX]]]
// CHECK:   memref.store %{{.*}}, %[[PART]][%[[C]]] : memref<64xf64>
// CHECK: %[[LAST:.*]] = scf.for {{.*}} -> (f64) {
// CHECK: memref.store %[[LAST]], %[[PART]][%c63{{.*}}] : memref<64xf64>
// CHECK: %[[INIT:.*]] = memref.load %[[ACC]][] : memref<f64>
// CHECK: %[[SUM:.*]] = scf.for %[[K:.*]] = %{{.*}} to %c64{{.*}} step %{{.*}} iter_args(%[[S:.*]] = %[[INIT]]) -> (f64) {
// CHECK:   %[[P:.*]] = memref.load %[[PART]][%[[K]]] : memref<64xf64>
// CHECK:   %[[N:.*]] = arith.addf %[[S]], %[[P]] fastmath<reassoc> : f64
// CHECK:   scf.yield %[[N]] : f64
// CHECK: memref.store %[[SUM]], %[[ACC]][] : memref<f64>
// CHECK: llvm.intr.stackrestore %[[SP]]
func.func @split_full_sum(%x: memref<1048576xf32>, %acc: memref<f64>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]}
      ins(%x : memref<1048576xf32>) outs(%acc : memref<f64>) {
  ^bb0(%in: f32, %out: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %out, %w fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  return
}

// -----

// Two rows' max over 40000 elements: 10 chunks of 4096 per row, from -inf,
// combined with maximumf; rows and the 9 full chunks are the parallel loop,
// the last 3136 elements of each row a partial chunk after it.
// CHECK-LABEL: func.func @split_row_max(
// CHECK: %[[PART:.*]] = memref.alloca() : memref<2x10xf32>
// CHECK: scf.parallel (%[[I:.*]], %[[C:.*]]) = (%{{.*}}, %{{.*}}) to (%c2{{.*}}, %c9{{.*}}) step
// CHECK:   %[[OFF:.*]] = arith.muli %[[C]], %c4096{{.*}} : index
// CHECK:   scf.for %[[J:.*]] = %c0{{.*}} to %c4096{{.*}} step %{{.*}} iter_args(%{{.*}} = %cst{{.*}}, %{{.*}} = %{{.*}}) -> (f32, i1) {
// CHECK:     arith.addi %[[OFF]], %[[J]] : index
// CHECK:     arith.maxnumf
// CHECK:   memref.store %{{.*}}, %[[PART]][%[[I]], %[[C]]] : memref<2x10xf32>
// CHECK: scf.for %[[R:.*]] = %{{.*}} to %c2{{.*}} step
// CHECK:   scf.for %{{.*}} = %c0{{.*}} to %c3136 step
// CHECK:   memref.store %{{.*}}, %[[PART]][%[[R]], %c9{{.*}}] : memref<2x10xf32>
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[R]]] : memref<2xf32>
// CHECK:   scf.for %[[K:.*]] = %{{.*}} to %c10{{.*}} step %{{.*}} iter_args(%[[S:.*]] = %[[INIT]], %{{.*}} = %{{.*}}) -> (f32, i1) {
// CHECK:     %[[P:.*]] = memref.load %[[PART]][%[[R]], %[[K]]] : memref<2x10xf32>
// CHECK:     arith.maxnumf %[[P]], %[[S]] fastmath<nnan,nsz> : f32
func.func @split_row_max(%x: memref<2x40000xf32>, %acc: memref<2xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<2x40000xf32>) outs(%acc : memref<2xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %out : f32
    linalg.yield %m : f32
  }
  return
}

// -----

// Not split: 8 rows (enough parallel iterations), an argmax (its accumulators
// are compared, not combined), too little work.
// CHECK-LABEL: func.func @not_split(
// CHECK-NOT: memref.alloca
// CHECK: return
func.func @not_split(%x: memref<8x40000xf32>, %acc: memref<8xf32>, %y: memref<65536xf32>,
                     %m: memref<f32>, %i: memref<i64>, %z: memref<16384xf32>, %s: memref<f32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x40000xf32>) outs(%acc : memref<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]}
      ins(%y : memref<65536xf32>) outs(%m, %i : memref<f32>, memref<i64>) {
  ^bb0(%in: f32, %a: f32, %b: i64):
    %j = linalg.index 0 : index
    %jj = arith.index_cast %j : index to i64
    %gt = arith.cmpf ogt, %in, %a : f32
    %v = arith.select %gt, %in, %a : f32
    %k = arith.select %gt, %jj, %b : i64
    linalg.yield %v, %k : f32, i64
  }
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]}
      ins(%z : memref<16384xf32>) outs(%s : memref<f32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  }
  return
}

// -----

// Innermost reduction loops of at least 32 iterations are unrolled at most
// twice by LLVM (llvm.loop.unroll.count, kept by the NaN-flag rewrite of a
// max): fully unrolled, a 1024-element row's vector loop spilled registers,
// and a 64- or 77-element f32 sum became a chain of scalar adds that neither
// vectorizer took (5x slower than eager). A 16-element row stays unannotated
// (fully unrolled, no loop).
// CHECK: #[[UNROLL:.*]] = #llvm.loop_unroll<count = 2 : i32>
// CHECK: #[[ANN:.*]] = #llvm.loop_annotation<unroll = #[[UNROLL]]>
// CHECK-LABEL: func.func @long_rows_unrolled_twice(
// CHECK: scf.for %{{.*}} = %{{.*}} to %c1001 step %{{.*}} iter_args(%{{.*}}, %{{.*}}) -> (f32, i1) {
// CHECK:   arith.maxnumf
// CHECK: } {loop_annotation = #[[ANN]]}
// CHECK: scf.for %{{.*}} = %{{.*}} to %c77 step %{{.*}} iter_args(%{{.*}}) -> (f32) {
// CHECK:   arith.addf
// CHECK-NEXT: scf.yield
// CHECK-NEXT: } {loop_annotation = #[[ANN]]}
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16 step %{{.*}} iter_args(%{{.*}}) -> (f32) {
// CHECK:   arith.addf
// CHECK-NEXT: scf.yield
// CHECK-NEXT: }
// CHECK-NOT: loop_annotation
// CHECK: return
func.func @long_rows_unrolled_twice(%x: memref<4x1001xf32>, %acc: memref<4xf32>,
                                    %y: memref<4x77xf32>, %acc2: memref<4xf32>,
                                    %z: memref<4x16xf32>, %acc3: memref<4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x1001xf32>) outs(%acc : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %out : f32
    linalg.yield %m : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%y : memref<4x77xf32>) outs(%acc2 : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%z : memref<4x16xf32>) outs(%acc3 : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  }
  return
}
