// RUN: mlircap-opt %s --mlircap-gpu-pipeline | FileCheck %s
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | %PYTHON -m mlircap.tools.extract_ptx | FileCheck %s --check-prefix=PTX
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | %PYTHON -m mlircap.tools.extract_ptx --ptxas %ptxas | FileCheck %s --check-prefix=ASM
// RUN: mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_80 features=+ptx80" | %PYTHON -m mlircap.tools.extract_ptx | FileCheck %s --check-prefix=SM80

#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// exp(a+b) fuses into one pointwise kernel; the row sum, with its fill, is one
// row-reduction kernel with warp shuffles. The host functions call the kernels.
// CHECK-LABEL: func.func @ew(
// CHECK: call @ew_k0(
// CHECK: func.func private @ew_k0({{.*}}mlircap.kernel = "pointwise"
// CHECK-LABEL: func.func @rowsum(
// CHECK-NOT: linalg.fill
// CHECK: call @rowsum_k0(
// CHECK: func.func private @rowsum_k0({{.*}}mlircap.kernel = "row_reduction"
// CHECK: gpu.binary @mlircap_kernels
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// PTX: .target sm_90
// PTX: .visible .entry ew_k0(
// PTX: ex2.approx
// PTX: .visible .entry rowsum_k0(
// PTX: shfl.sync.bfly.b32
// ASM: ptxas ok: 1 module(s)
// SM80: .target sm_80
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

func.func @rowsum(%a: tensor<64x256xf32>) -> tensor<64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %r = linalg.generic {indexing_maps = [#map, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<64x256xf32>) outs(%f : tensor<64xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %r : tensor<64xf32>
}
