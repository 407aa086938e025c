// RUN: mlircap-opt %s --pass-pipeline='builtin.module(func.func(mlircap-drop-asserts))' | FileCheck %s

// The checking generic disappears, the assert in the embedding body too.
#id = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @checks(
// CHECK-NOT: cf.assert
// CHECK: linalg.generic
// CHECK-NOT: cf.assert
// CHECK: tensor.extract
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @checks(%v: tensor<4xf32>, %w: tensor<10x8xf32>, %idx: tensor<3xi64>) -> tensor<3x8xf32> {
  %zero = arith.constant 0.0 : f32
  %c10 = arith.constant 10 : i64
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]} ins(%v : tensor<4xf32>) {
  ^bb0(%in: f32):
    %0 = arith.cmpf one, %in, %zero : f32
    cf.assert %0, "unimplemented: tensor with zero element"
    linalg.yield
  }
  %e = tensor.empty() : tensor<3x8xf32>
  %r = linalg.generic {indexing_maps = [#r, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%idx : tensor<3xi64>) outs(%e : tensor<3x8xf32>) {
  ^bb0(%i: i64, %o: f32):
    %ok = arith.cmpi slt, %i, %c10 : i64
    cf.assert %ok, "index out of range"
    %ii = arith.index_cast %i : i64 to index
    %j = linalg.index 1 : index
    %x = tensor.extract %w[%ii, %j] : tensor<10x8xf32>
    linalg.yield %x : f32
  } -> tensor<3x8xf32>
  return %r : tensor<3x8xf32>
}
