// x.argmax(-1), x.max(0): multi-result (value, index) reductions use the serial strategy.
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE-COUNT-2: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return

// CG: gpu.module @mlircap_kernels
// CG: strategy = "reduction_naive"

// PTX: .target sm_90
// PTX-COUNT-2: .entry main_k

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<6x7xf32>) -> (tensor<6xi64>, tensor<7xf32>) {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0xFF800000 : f32
    %0 = tensor.empty() : tensor<6xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<6xi64>) -> tensor<6xi64>
    %2 = tensor.empty() : tensor<6xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<6xf32>) -> tensor<6xf32>
    %4:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<6x7xf32>) outs(%3, %1 : tensor<6xf32>, tensor<6xi64>) {
    ^bb0(%in: f32, %out: f32, %out_0: i64):
      %10 = linalg.index 1 : index
      %11 = arith.index_cast %10 : index to i64
      %12 = arith.maximumf %in, %out : f32
      %13 = arith.cmpf ogt, %in, %out : f32
      %14 = arith.select %13, %11, %out_0 : i64
      linalg.yield %12, %14 : f32, i64
    } -> (tensor<6xf32>, tensor<6xi64>)
    %5 = tensor.empty() : tensor<7xi64>
    %6 = linalg.fill ins(%c0_i64 : i64) outs(%5 : tensor<7xi64>) -> tensor<7xi64>
    %7 = tensor.empty() : tensor<7xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<7xf32>) -> tensor<7xf32>
    %9:2 = linalg.generic {indexing_maps = [#map, #map2, #map2], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<6x7xf32>) outs(%8, %6 : tensor<7xf32>, tensor<7xi64>) {
    ^bb0(%in: f32, %out: f32, %out_0: i64):
      %10 = linalg.index 0 : index
      %11 = arith.index_cast %10 : index to i64
      %12 = arith.maximumf %in, %out : f32
      %13 = arith.cmpf ogt, %in, %out : f32
      %14 = arith.select %13, %11, %out_0 : i64
      linalg.yield %12, %14 : f32, i64
    } -> (tensor<7xf32>, tensor<7xi64>)
    return %4#1, %9#0 : tensor<6xi64>, tensor<7xf32>
  }
}
