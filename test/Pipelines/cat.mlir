// torch.cat([x * 2, y], 1) + 1: the concat (insert_slices) and both elementwise ops in one kernel.
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE-COUNT-1: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return

// CG: gpu.module @mlircap_kernels
// CG: strategy = "pointwise"

// PTX: .target sm_90
// PTX-COUNT-1: .entry main_k

#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<3x4xf32>, %arg1: tensor<3x2xf32>) -> tensor<3x6xf32> {
    %cst = arith.constant 2.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e+00 : f32
    %0 = tensor.empty() : tensor<3x4xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<3x4xf32>) outs(%0 : tensor<3x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %4 = arith.mulf %in, %cst : f32
      linalg.yield %4 : f32
    } -> tensor<3x4xf32>
    %concat = tensor.concat dim(1) %1, %arg1 : (tensor<3x4xf32>, tensor<3x2xf32>) -> tensor<3x6xf32>
    %2 = tensor.empty() : tensor<3x6xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%concat : tensor<3x6xf32>) outs(%2 : tensor<3x6xf32>) {
    ^bb0(%in: f32, %out: f32):
      %4 = arith.addf %in, %cst_0 : f32
      linalg.yield %4 : f32
    } -> tensor<3x6xf32>
    return %3 : tensor<3x6xf32>
  }
}
