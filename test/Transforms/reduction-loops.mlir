// RUN: mlircap-opt %s --split-input-file --mlircap-reduction-loops | FileCheck %s

// A row max: the accumulator is loaded once per row, carried through the
// reduction loop, stored once.
// CHECK-LABEL: func.func @row_max(
// CHECK-SAME: %[[X:.*]]: memref<4x1000xf32>, %[[ACC:.*]]: memref<4xf32>)
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %[[ACC]][%[[I]]] : memref<4xf32>
// CHECK:   %[[R:.*]] = scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A:.*]] = %[[INIT]]) -> (f32) {
// CHECK:     %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x1000xf32>
// CHECK:     %[[M:.*]] = arith.maximumf %[[V]], %[[A]] : f32
// CHECK:     scf.yield %[[M]] : f32
// CHECK:   memref.store %[[R]], %[[ACC]][%[[I]]] : memref<4xf32>
// CHECK-NOT: linalg.generic
func.func @row_max(%x: memref<4x1000xf32>, %acc: memref<4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x1000xf32>) outs(%acc : memref<4xf32>) {
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

// A column sum (a parallel dim inside the reduction dim: its inner loop is
// already contiguous) and bf16 accumulators are left alone.
// CHECK-LABEL: func.func @column_sum(
// CHECK: linalg.generic
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

// A broadcast input (constant index) and a scalar input; 3-D with two
// trailing reduction dims: one loop nest carries the accumulator.
// CHECK-LABEL: func.func @two_reduction_dims(
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[I]]]
// CHECK:   %[[R:.*]] = scf.for %[[J:.*]] = {{.*}} iter_args(%[[A:.*]] = %[[INIT]]) -> (f32) {
// CHECK:     %[[R2:.*]] = scf.for %[[K:.*]] = {{.*}} iter_args(%[[B:.*]] = %[[A]]) -> (f32) {
// CHECK:       memref.load %{{.*}}[%[[I]], %[[J]], %[[K]]] : memref<8x4x16xf32>
// CHECK:       memref.load %{{.*}}[%[[C0:.*]], %[[K]]] : memref<1x16xf32>
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
