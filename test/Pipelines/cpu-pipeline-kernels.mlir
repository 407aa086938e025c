// The CPU pipeline (elementwise fusion only, no kernel outlining) still
// lowers everything to the LLVM dialect.
// RUN: mlircap-opt %s --mlircap-cpu-pipeline | FileCheck %s

// CHECK-LABEL: llvm.func @main(
// CHECK-NOT: linalg.
// CHECK-LABEL: llvm.func @_mlir_ciface_main(
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<4x16xf32>, %p: tensor<1x2x4x4xf32>) -> (tensor<4xf32>, tensor<1x2x6x6xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x16xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %ex = math.exp %a : f32
    %r = arith.addf %ex, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %padded = tensor.pad %p low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
  return %s, %padded : tensor<4xf32>, tensor<1x2x6x6xf32>
}
