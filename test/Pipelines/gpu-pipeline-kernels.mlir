// The whole GPU pipeline: the caller keeps calling the (tensor-level) kernel
// functions, which carry their launch configuration; gpu.binary holds one
// PTX module with every kernel. The chip is an option.
// RUN: mlircap-opt %s --mlircap-gpu-pipeline | FileCheck %s
// RUN: mlircap-opt %s '--mlircap-gpu-pipeline=chip=sm_80 features=+ptx75' --mlircap-dump-ptx | FileCheck %s --check-prefix=SM80
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin

// CHECK-LABEL: func.func @main(
// CHECK: %[[A:.*]] = call @main_k0(%arg0)
// CHECK: call @main_k1(%[[A]], %arg1)
// CHECK: func.func private @main_k0({{.*}}) {{.*}}attributes {mlircap.kernel = "row_reduction", mlircap.launch = {block = array<i64: 32, 1, 1>, grid = array<i64: 1, 1, 1>, smem = 0 : i64, strategy = "row_subwarp_regs_vec8"}}
// CHECK: func.func private @main_k1({{.*}}) {{.*}}mlircap.launch = {{.*}}strategy = "pointwise_vec4"
// CHECK: gpu.binary @mlircap_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">

// SM80: .target sm_80
// SM80: .entry main_k0
// SM80: .entry main_k1
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#bj = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<4x32xf32>, %b: tensor<32xf32>) -> (tensor<4x32xf32>, tensor<32x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 32.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x32xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x32xf32>
  %y = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<4x32xf32>, tensor<4xf32>) outs(%e2 : tensor<4x32xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %mean = arith.divf %m, %n : f32
    %r = arith.subf %a, %mean : f32
    linalg.yield %r : f32
  } -> tensor<4x32xf32>
  %e3 = tensor.empty() : tensor<32x4xf32>
  %t = linalg.generic {indexing_maps = [#tr, #bj, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : tensor<4x32xf32>, tensor<32xf32>) outs(%e3 : tensor<32x4xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %r = arith.mulf %a, %c : f32
    linalg.yield %r : f32
  } -> tensor<32x4xf32>
  return %y, %t : tensor<4x32xf32>, tensor<32x4xf32>
}
