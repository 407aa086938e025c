// softmax over dim 0 (column): serial column reductions, 4 kernels (no transposed row strategy yet).
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE-COUNT-4: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return

// CG: gpu.module @mlircap_kernels
// CG: strategy = "reduction_naive"

// PTX: .target sm_90
// PTX-COUNT-4: .entry main_k

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
#map2 = affine_map<(d0, d1) -> (0, d1)>
module {
  func.func @main(%arg0: tensor<5x7xf32>) -> tensor<5x7xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<7xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<7xi64>) -> tensor<7xi64>
    %2 = tensor.empty() : tensor<7xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<7xf32>) -> tensor<7xf32>
    %4:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<5x7xf32>) outs(%3, %1 : tensor<7xf32>, tensor<7xi64>) {
    ^bb0(%in: f32, %out: f32, %out_1: i64):
      %12 = linalg.index 0 : index
      %13 = arith.index_cast %12 : index to i64
      %14 = arith.maximumf %in, %out : f32
      %15 = arith.cmpf ogt, %in, %out : f32
      %16 = arith.select %15, %13, %out_1 : i64
      linalg.yield %14, %16 : f32, i64
    } -> (tensor<7xf32>, tensor<7xi64>)
    %expanded = tensor.expand_shape %4#0 [[0, 1]] output_shape [1, 7] : tensor<7xf32> into tensor<1x7xf32>
    %5 = tensor.empty() : tensor<5x7xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %expanded : tensor<5x7xf32>, tensor<1x7xf32>) outs(%5 : tensor<5x7xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.subf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<5x7xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<5x7xf32>) outs(%5 : tensor<5x7xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = math.exp %in : f32
      linalg.yield %12 : f32
    } -> tensor<5x7xf32>
    %8 = tensor.empty() : tensor<1x7xf32>
    %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<1x7xf32>) -> tensor<1x7xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["reduction", "parallel"]} ins(%7 : tensor<5x7xf32>) outs(%9 : tensor<1x7xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.addf %in, %out : f32
      linalg.yield %12 : f32
    } -> tensor<1x7xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %10 : tensor<5x7xf32>, tensor<1x7xf32>) outs(%5 : tensor<5x7xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.divf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<5x7xf32>
    return %11 : tensor<5x7xf32>
  }
}
