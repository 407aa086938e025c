// RUN: mlircap-opt %s --mlircap-cpu-pipeline | FileCheck %s

// A whole graph may return one value twice (an FX graph whose outputs repeat a
// node). Each result is copied into its own out-param; hoisting the result's
// allocation into the first out-param erased it once per use (SIGSEGV in
// buffer-results-to-out-params).
#map = affine_map<(d0) -> (d0)>
// CHECK-LABEL: llvm.func @twice(
// CHECK-SAME: %{{.*}}: !llvm.ptr
// CHECK: llvm.fadd
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_twice(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @twice(%a: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %0, %0 : tensor<16xf32>, tensor<16xf32>
}
