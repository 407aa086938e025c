// x.mean(0) (column reduction, naive, with its division fused) and x.var(1) (row kernel).
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE-COUNT-2: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return
// FUSE-DAG: mlircap.kernel = "reduction"
// FUSE-DAG: mlircap.kernel = "row_reduction"

// CG: gpu.module @mlircap_kernels
// CG-DAG: strategy = "reduction_naive"
// CG-DAG: strategy = "row_subwarp_regs_vec8"

// PTX: .target sm_90
// PTX-COUNT-2: .entry main_k

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @main(%arg0: tensor<8x32xf32>) -> (tensor<32xf32>, tensor<8xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0.000000e+00 : f64
    %cst_1 = arith.constant 3.100000e+01 : f64
    %cst_2 = arith.constant 8.000000e+00 : f32
    %cst_3 = arith.constant 3.200000e+01 : f64
    %0 = tensor.empty() : tensor<32xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<32xf32>) -> tensor<32xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<8x32xf32>) outs(%1 : tensor<32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %18 = arith.addf %in, %out : f32
      linalg.yield %18 : f32
    } -> tensor<32xf32>
    %3 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel"]} ins(%2 : tensor<32xf32>) outs(%0 : tensor<32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %18 = arith.divf %in, %cst_2 : f32
      linalg.yield %18 : f32
    } -> tensor<32xf32>
    %4 = tensor.empty() : tensor<8x32xf64>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<8x32xf32>) outs(%4 : tensor<8x32xf64>) {
    ^bb0(%in: f32, %out: f64):
      %18 = arith.extf %in : f32 to f64
      linalg.yield %18 : f64
    } -> tensor<8x32xf64>
    %6 = tensor.empty() : tensor<8x1xf64>
    %7 = linalg.fill ins(%cst_0 : f64) outs(%6 : tensor<8x1xf64>) -> tensor<8x1xf64>
    %8 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["parallel", "reduction"]} ins(%5 : tensor<8x32xf64>) outs(%7 : tensor<8x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %18 = arith.addf %in, %out : f64
      linalg.yield %18 : f64
    } -> tensor<8x1xf64>
    %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%8 : tensor<8x1xf64>) outs(%6 : tensor<8x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %18 = arith.divf %in, %cst_3 : f64
      linalg.yield %18 : f64
    } -> tensor<8x1xf64>
    %10 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %9 : tensor<8x32xf64>, tensor<8x1xf64>) outs(%4 : tensor<8x32xf64>) {
    ^bb0(%in: f64, %in_4: f64, %out: f64):
      %18 = arith.subf %in, %in_4 : f64
      linalg.yield %18 : f64
    } -> tensor<8x32xf64>
    %11 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%10, %10 : tensor<8x32xf64>, tensor<8x32xf64>) outs(%4 : tensor<8x32xf64>) {
    ^bb0(%in: f64, %in_4: f64, %out: f64):
      %18 = arith.mulf %in, %in_4 : f64
      linalg.yield %18 : f64
    } -> tensor<8x32xf64>
    %12 = tensor.empty() : tensor<8xf64>
    %13 = linalg.fill ins(%cst_0 : f64) outs(%12 : tensor<8xf64>) -> tensor<8xf64>
    %14 = linalg.generic {indexing_maps = [#map, #map4], iterator_types = ["parallel", "reduction"]} ins(%11 : tensor<8x32xf64>) outs(%13 : tensor<8xf64>) {
    ^bb0(%in: f64, %out: f64):
      %18 = arith.addf %in, %out : f64
      linalg.yield %18 : f64
    } -> tensor<8xf64>
    %15 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel"]} ins(%14 : tensor<8xf64>) outs(%12 : tensor<8xf64>) {
    ^bb0(%in: f64, %out: f64):
      %18 = arith.divf %in, %cst_1 : f64
      linalg.yield %18 : f64
    } -> tensor<8xf64>
    %16 = tensor.empty() : tensor<8xf32>
    %17 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel"]} ins(%15 : tensor<8xf64>) outs(%16 : tensor<8xf32>) {
    ^bb0(%in: f64, %out: f32):
      %18 = arith.truncf %in : f64 to f32
      linalg.yield %18 : f32
    } -> tensor<8xf32>
    return %3, %17 : tensor<32xf32>, tensor<8xf32>
  }
}
