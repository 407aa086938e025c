// RUN: env MLIRCAP_CASCADE_SUMS=1 mlircap-opt %s --split-input-file --mlircap-reduction-loops | FileCheck %s
// RUN: env MLIRCAP_CASCADE_SUMS=0 mlircap-opt %s --split-input-file --mlircap-reduction-loops | FileCheck %s --check-prefix=OFF

// MLIRCAP_CASCADE_SUMS=1 turns it on, 0 (as unset) leaves it off (no
// vectors: the sums of reduction-loops.mlir).
// OFF-NOT: vector.

// Float sums over a contiguous last dim in eager's order (CascadeSums.cpp).
// An f64 row of 12: three 4-lane vectors (no group of 16 lanes) added to
// accumulator 0 from +0, then 0 + its four lanes one by one, the row's sum
// added to the output.
// CHECK-LABEL: func.func @f64_row_of_12(
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[INIT:.*]] = memref.load %{{.*}}[%[[I]]] : memref<3xf64>
// CHECK-NOT: scf.for
// CHECK:   %[[Z:.*]] = vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3] : vector<16xf64>, vector<16xf64>
// CHECK:   %[[V0:.*]] = vector.load %{{.*}}[%[[I]], %{{.*}}] : memref<3x12xf64>, vector<4xf64>
// CHECK:   %[[A0:.*]] = arith.addf %[[Z]], %[[V0]] : vector<4xf64>
// CHECK:   %[[V1:.*]] = vector.load %{{.*}}[%[[I]], %{{.*}}] : memref<3x12xf64>, vector<4xf64>
// CHECK:   %[[A1:.*]] = arith.addf %[[A0]], %[[V1]] : vector<4xf64>
// CHECK:   %[[V2:.*]] = vector.load %{{.*}}[%[[I]], %{{.*}}] : memref<3x12xf64>, vector<4xf64>
// CHECK:   %[[A2:.*]] = arith.addf %[[A1]], %[[V2]] : vector<4xf64>
// CHECK:   %[[L0:.*]] = vector.extract %[[A2]][0] : f64 from vector<4xf64>
// CHECK:   %[[S0:.*]] = arith.addf %{{.*}}, %[[L0]] : f64
// CHECK:   %[[L1:.*]] = vector.extract %[[A2]][1] : f64 from vector<4xf64>
// CHECK:   %[[S1:.*]] = arith.addf %[[S0]], %[[L1]] : f64
// CHECK:   %[[L2:.*]] = vector.extract %[[A2]][2] : f64 from vector<4xf64>
// CHECK:   %[[S2:.*]] = arith.addf %[[S1]], %[[L2]] : f64
// CHECK:   %[[L3:.*]] = vector.extract %[[A2]][3] : f64 from vector<4xf64>
// CHECK:   %[[S3:.*]] = arith.addf %[[S2]], %[[L3]] {mlircap.work = 12 : i64} : f64
// CHECK:   %[[R:.*]] = arith.addf %[[INIT]], %[[S3]] : f64
// CHECK:   memref.store %[[R]], %{{.*}}[%[[I]]] : memref<3xf64>
func.func @f64_row_of_12(%x: memref<3x12xf64>, %acc: memref<3xf64>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<3x12xf64>) outs(%acc : memref<3xf64>) {
  ^bb0(%in: f64, %out: f64):
    %a = arith.addf %in, %out fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  return
}

// -----

// 1000 f64 (x - 1)^2 terms: 62 groups of 16 lanes, as three blocks of 16
// groups (level 1) and a level 0 of the last 14 groups, each a loop of
// vector<16xf64> adds from +0 (the payload on vectors); the levels added
// lowest first; 2 more 4-lane vectors into accumulator 0; the four
// accumulators added, then the lanes.
// CHECK-LABEL: func.func @f64_levels(
// CHECK: scf.parallel (%[[I:.*]]) =
// CHECK:   %[[L1:.*]] = scf.for %{{.*}} = %c0{{.*}} to %c3{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<16xf64>) {
// CHECK:     scf.for %{{.*}} = %c0{{.*}} to %c16{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (vector<16xf64>) {
// CHECK:       %[[V:.*]] = vector.load %{{.*}}[%[[I]], %{{.*}}] : memref<4x1000xf64>, vector<16xf64>
// CHECK:       %[[D:.*]] = arith.subf %[[V]], %{{.*}} : vector<16xf64>
// CHECK:       arith.mulf %[[D]], %[[D]] : vector<16xf64>
// CHECK:     } {mlircap.lanes = 16 : i64}
// CHECK:   %[[L0:.*]] = scf.for %{{.*}} = %c0{{.*}} to %c14{{.*}} step {{.*}} -> (vector<16xf64>) {
// CHECK:   } {mlircap.lanes = 16 : i64}
// CHECK:   %[[T:.*]] = arith.addf %[[L0]], %[[L1]] : vector<16xf64>
// CHECK:   vector.shuffle %[[T]], %[[T]] [0, 1, 2, 3]
// CHECK:   vector.load {{.*}} vector<4xf64>
// CHECK:   vector.load {{.*}} vector<4xf64>
// CHECK:   vector.shuffle %[[T]], %[[T]] [4, 5, 6, 7]
// CHECK:   vector.shuffle %[[T]], %[[T]] [8, 9, 10, 11]
// CHECK:   vector.shuffle %[[T]], %[[T]] [12, 13, 14, 15]
// CHECK-COUNT-4: vector.extract %{{.*}}[{{[0-3]}}] : f64 from vector<4xf64>
// CHECK:   memref.store
func.func @f64_levels(%x: memref<4x1000xf64>, %acc: memref<4xf64>) {
  %one = arith.constant 1.0 : f64
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x1000xf64>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %d = arith.subf %in, %one : f64
    %s = arith.mulf %d, %d : f64
    %a = arith.addf %s, %out fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  return
}

// -----

// mlircap-widen-sums' f64 sum of f32 terms whose buffer is only read rounded
// to f32 (a mean): eager sums those in f32, so the cascade runs in f32
// (8-lane vectors, groups of 32: 3 of them, one more 8-lane vector, 4 last
// elements), its sum extended and added to the f64
// output. The same sum read as f64 (var_mean's mean) stays the blocked sum.
// CHECK-LABEL: func.func @f32_observed(
// CHECK: scf.for {{.*}} -> (vector<32xf32>) {
// CHECK:   vector.load %{{.*}} : memref<4x108xf32>, vector<32xf32>
// CHECK: vector.load %{{.*}} : memref<4x108xf32>, vector<8xf32>
// CHECK: %[[S:.*]] = arith.addf %{{.*}}, %{{.*}} {mlircap.work = 12 : i64} : f32
// CHECK: %[[W:.*]] = arith.extf %[[S]] : f32 to f64
// CHECK: arith.addf %{{.*}}, %[[W]] : f64
// CHECK-LABEL: func.func @f64_observed(
// CHECK-NOT: vector
// CHECK: scf.for {{.*}} -> (f32) {
// CHECK: return
func.func @f32_observed(%x: memref<4x108xf32>, %out: memref<4xf32>) {
  %z = arith.constant 0.0 : f64
  %n = arith.constant 108.0 : f32
  %buf = memref.alloc() : memref<4xf64>
  linalg.fill ins(%z : f64) outs(%buf : memref<4xf64>)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x108xf32>) outs(%buf : memref<4xf64>) {
  ^bb0(%in: f32, %acc: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %w, %acc fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                  iterator_types = ["parallel"]}
      ins(%buf : memref<4xf64>) outs(%out : memref<4xf32>) {
  ^bb0(%in: f64, %o: f32):
    %t = arith.truncf %in : f64 to f32
    %m = arith.divf %t, %n : f32
    linalg.yield %m : f32
  }
  memref.dealloc %buf : memref<4xf64>
  return
}

func.func @f64_observed(%x: memref<4x108xf32>, %out: memref<4xf64>) {
  %z = arith.constant 0.0 : f64
  %n = arith.constant 108.0 : f64
  %buf = memref.alloc() : memref<4xf64>
  linalg.fill ins(%z : f64) outs(%buf : memref<4xf64>)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x108xf32>) outs(%buf : memref<4xf64>) {
  ^bb0(%in: f32, %acc: f64):
    %w = arith.extf %in : f32 to f64
    %a = arith.addf %w, %acc fastmath<reassoc> : f64
    linalg.yield %a : f64
  }
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                  iterator_types = ["parallel"]}
      ins(%buf : memref<4xf64>) outs(%out : memref<4xf64>) {
  ^bb0(%in: f64, %o: f64):
    %m = arith.divf %in, %n : f64
    linalg.yield %m : f64
  }
  memref.dealloc %buf : memref<4xf64>
  return
}

// -----

// Not a cascade: an input read across the summed dim (a transposed view:
// no contiguous vector), and a payload computing in bf16.
// CHECK-LABEL: func.func @not_cascade(
// CHECK-NOT: vector
// CHECK: return
func.func @not_cascade(%x: memref<100x4xf64>, %y: memref<4x100xbf16>, %acc: memref<4xf64>,
                       %acc32: memref<4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<100x4xf64>) outs(%acc : memref<4xf64>) {
  ^bb0(%in: f64, %out: f64):
    %a = arith.addf %in, %out : f64
    linalg.yield %a : f64
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%y : memref<4x100xbf16>) outs(%acc32 : memref<4xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    %a = arith.addf %w, %out : f32
    linalg.yield %a : f32
  }
  return
}

// -----

// A payload reading its index along the summed dim (x * j): the vector of
// indices is base + a constant [0, 1, ..., 15], not vector.step (which the
// CPU pipeline's convert-to-llvm does not lower: LLVM IR translation failed).
// CHECK-LABEL: func.func @index_terms(
// CHECK-NOT: vector.step
// CHECK-DAG: %[[STEP:.*]] = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : vector<16xindex>
// CHECK-DAG: %[[B:.*]] = vector.broadcast %{{.*}} : index to vector<16xindex>
// CHECK: arith.addi %[[B]], %[[STEP]] : vector<16xindex>
// CHECK: arith.index_cast %{{.*}} : vector<16xindex> to vector<16xi64>
// CHECK-NOT: vector.step
// CHECK: return
func.func @index_terms(%x: memref<2x40xf64>, %acc: memref<2xf64>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<2x40xf64>) outs(%acc : memref<2xf64>) {
  ^bb0(%in: f64, %out: f64):
    %j = linalg.index 1 : index
    %i = arith.index_cast %j : index to i64
    %f = arith.sitofp %i : i64 to f64
    %t = arith.mulf %in, %f : f64
    %a = arith.addf %t, %out : f64
    linalg.yield %a : f64
  }
  return
}
