// RUN: mlircap-opt %s --mlircap-cpu-pipeline | FileCheck %s

#map = affine_map<(d0, d1) -> (d0, d1)>
// Results become out-parameters; a C wrapper is emitted; no tensors remain;
// exp is a polynomial (mlircap-math-approx), not a libm call, so the loop vectorizes.
// CHECK-LABEL: llvm.func @ew(
// CHECK-NOT: tensor<
// CHECK-NOT: llvm.intr.exp
// CHECK-NOT: @expf
// CHECK: llvm.fmul
// CHECK-LABEL: llvm.func @_mlir_ciface_ew(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
func.func @ew(%a: tensor<64x256xf32>, %b: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %e = tensor.empty() : tensor<64x256xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<64x256xf32>, tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<64x256xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<64x256xf32>) outs(%e : tensor<64x256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<64x256xf32>
  return %1 : tensor<64x256xf32>
}
