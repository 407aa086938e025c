// RUN: mlircap-opt %s --mlircap-gpu-pipeline | FileCheck %s
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | %PYTHON -m mlircap.tools.extract_ptx | FileCheck %s --check-prefix=PTX
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | %PYTHON -m mlircap.tools.extract_ptx --ptxas %ptxas | FileCheck %s --check-prefix=ASM
// RUN: mlircap-opt %s --mlircap-gpu-pipeline="chip=sm_80 features=+ptx80" | %PYTHON -m mlircap.tools.extract_ptx | FileCheck %s --check-prefix=SM80

#map = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// Fusion leaves one kernel for exp(a+b); the row sum adds a fill and a reduction.
// CHECK: gpu.launch_func @ew_kernel::@ew_kernel
// CHECK: gpu.binary @ew_kernel
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">
// PTX: // mlircap-kernel-module: ew_kernel
// PTX: .target sm_90
// PTX: .visible .entry ew_kernel(
// PTX: ex2.approx
// PTX: // mlircap-kernel-module: rowsum_kernel
// PTX: .visible .entry rowsum_kernel
// ASM: ptxas ok: 3 module(s)
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
