// nearest 2x upsample (index arithmetic + tensor.extract in the body) + 1: one kernel.
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
// CG: strategy = "pointwise_vec4"

// PTX: .target sm_90
// PTX-COUNT-1: .entry main_k

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
module {
  func.func @main(%arg0: tensor<1x2x3x4xf32>) -> tensor<1x2x6x8xf32> {
    %cst = arith.constant 1.000000e+00 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %cst_1 = arith.constant 2.000000e+00 : f32
    %c0 = arith.constant 0 : index
    %cst_2 = arith.constant 3.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x2x6x8xf32>
    %1 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%0 : tensor<1x2x6x8xf32>) {
    ^bb0(%out: f32):
      %3 = linalg.index 1 : index
      %4 = linalg.index 2 : index
      %5 = linalg.index 3 : index
      %6 = arith.index_cast %4 : index to i64
      %7 = arith.sitofp %6 : i64 to f32
      %8 = arith.divf %7, %cst_1 : f32
      %9 = math.floor %8 : f32
      %10 = arith.maximumf %9, %cst_0 : f32
      %11 = arith.minimumf %10, %cst_1 : f32
      %12 = arith.fptosi %11 : f32 to i64
      %13 = arith.index_cast %12 : i64 to index
      %14 = arith.index_cast %5 : index to i64
      %15 = arith.sitofp %14 : i64 to f32
      %16 = arith.divf %15, %cst_1 : f32
      %17 = math.floor %16 : f32
      %18 = arith.maximumf %17, %cst_0 : f32
      %19 = arith.minimumf %18, %cst_2 : f32
      %20 = arith.fptosi %19 : f32 to i64
      %21 = arith.index_cast %20 : i64 to index
      %extracted = tensor.extract %arg0[%c0, %3, %13, %21] : tensor<1x2x3x4xf32>
      linalg.yield %extracted : f32
    } -> tensor<1x2x6x8xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<1x2x6x8xf32>) outs(%0 : tensor<1x2x6x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %cst : f32
      linalg.yield %3 : f32
    } -> tensor<1x2x6x8xf32>
    return %2 : tensor<1x2x6x8xf32>
  }
}
