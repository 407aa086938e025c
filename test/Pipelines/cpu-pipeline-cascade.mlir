// RUN: env MLIRCAP_CASCADE_SUMS=1 mlircap-opt %s --mlircap-cpu-pipeline | FileCheck %s

// A float64 row sum in eager's order (lib/Transforms/CascadeSums.cpp) whose
// terms read their index along the row (vectors of indices) lowers to the
// LLVM dialect only: no vector op is left for LLVM IR translation (a
// vector.step was: 'missing LLVMTranslationDialectInterface').
// CHECK-LABEL: llvm.func @indexed_row_sum(
// CHECK-NOT: vector.
// CHECK: llvm.fadd %{{.*}} : vector<16xf64>
// CHECK-NOT: vector.
// CHECK-LABEL: llvm.func @_mlir_ciface_indexed_row_sum(
func.func @indexed_row_sum(%x: tensor<3x40xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<3x40xf64>) outs(%f : tensor<3xf64>) {
  ^bb0(%in: f64, %out: f64):
    %j = linalg.index 1 : index
    %i = arith.index_cast %j : index to i64
    %w = arith.sitofp %i : i64 to f64
    %t = arith.mulf %in, %w : f64
    %a = arith.addf %t, %out : f64
    linalg.yield %a : f64
  } -> tensor<3xf64>
  return %s : tensor<3xf64>
}
