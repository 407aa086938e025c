// relu -> max_pool2d(2): pooling is generalized; the 2x2 window is a row of 4 (64 rows: 4 lanes a row, one element each, in registers), relu recomputed in it.
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE-COUNT-1: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return
// FUSE: mlircap.kernel = "row_reduction"

// CG: gpu.module @mlircap_kernels
// CG: strategy = "row_subwarp_regs"

// PTX: .target sm_90
// PTX-COUNT-1: .entry main_k

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @main(%arg0: tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<1x4x8x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0 : tensor<1x4x8x8xf32>) outs(%0 : tensor<1x4x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %6 = arith.cmpf ugt, %in, %cst : f32
      %7 = arith.select %6, %in, %cst : f32
      linalg.yield %7 : f32
    } -> tensor<1x4x8x8xf32>
    %2 = tensor.empty() : tensor<1x4x4x4xf32>
    %3 = linalg.fill ins(%cst_0 : f32) outs(%2 : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %4 = tensor.empty() : tensor<2x2xf32>
    %5 = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%1, %4 : tensor<1x4x8x8xf32>, tensor<2x2xf32>) outs(%3 : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    return %5 : tensor<1x4x4x4xf32>
  }
}
