// RUN: mlircap-opt %s --mlircap-cpu-pipeline --split-input-file | FileCheck %s

// x86 has no bf16/f16 arithmetic and the JIT cannot resolve __truncsfbf2:
// every op computes in f32 and rounds back (as eager does), and the
// f32 -> bf16 rounding is integer code, so no bf16/f16 arithmetic or
// conversion instruction reaches LLVM.
#map = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: llvm.func @bf16_ops(
// CHECK-NOT: llvm.fsub {{.*}} : bf16
// CHECK-NOT: llvm.fptrunc {{.*}} to bf16
// CHECK-NOT: llvm.intr.exp({{.*}}) : (bf16)
// CHECK-NOT: llvm.load {{.*}} -> bf16
// CHECK: llvm.fsub {{.*}} : f32
// CHECK-NOT: llvm.bitcast {{.*}} : i16 to bf16
// CHECK: llvm.store {{.*}} : i16, !llvm.ptr
// CHECK-LABEL: llvm.func @_mlir_ciface_bf16_ops(
func.func @bf16_ops(%a: tensor<8x16xbf16>, %b: tensor<8x16xbf16>) -> tensor<8x16xbf16> {
  %e = tensor.empty() : tensor<8x16xbf16>
  %0 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<8x16xbf16>, tensor<8x16xbf16>) outs(%e : tensor<8x16xbf16>) {
  ^bb0(%x: bf16, %y: bf16, %o: bf16):
    %s = arith.subf %x, %y : bf16
    %t = math.tanh %s : bf16
    linalg.yield %t : bf16
  } -> tensor<8x16xbf16>
  return %0 : tensor<8x16xbf16>
}

// -----

#map = affine_map<(d0) -> (d0)>
// CHECK-LABEL: llvm.func @f16_mul(
// CHECK-NOT: llvm.fmul {{.*}} : f16
// CHECK: llvm.fmul {{.*}} : f32
// CHECK: llvm.fptrunc {{.*}} : f32 to f16
func.func @f16_mul(%a: tensor<32xf16>) -> tensor<32xf16> {
  %e = tensor.empty() : tensor<32xf16>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<32xf16>) outs(%e : tensor<32xf16>) {
  ^bb0(%x: f16, %o: f16):
    %s = arith.mulf %x, %x : f16
    linalg.yield %s : f16
  } -> tensor<32xf16>
  return %0 : tensor<32xf16>
}
