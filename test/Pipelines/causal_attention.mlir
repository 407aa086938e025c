// softmax(q @ k^T masked by a constant tril bool buffer): bmm (library) + one row kernel (mask select, max, sum, divide).
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
// CG: strategy = "row_thread_regs_vec8"

// PTX: .target sm_90
// PTX-COUNT-1: .entry main_k

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1, d2) -> (d1, d2)>
#map2 = affine_map<(d0, d1, d2) -> ()>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map5 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
module {
  func.func @main(%arg0: tensor<2x8x16xf32>, %arg1: tensor<2x8x16xf32>) -> tensor<2x8x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %c0_i8 = arith.constant 0 : i8
    %true = arith.constant true
    %c0_i64 = arith.constant 0 : i64
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant dense<0xFF800000> : tensor<f32>
    %cst_2 = arith.constant dense_resource<torch_tensor_8_8_torch.uint8> : tensor<8x8xi8>
    %0 = tensor.empty() : tensor<2x16x8xf32>
    %transposed = linalg.transpose ins(%arg1 : tensor<2x8x16xf32>) outs(%0 : tensor<2x16x8xf32>) permutation = [0, 2, 1] 
    %1 = tensor.empty() : tensor<2x8x8xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %3 = linalg.batch_matmul ins(%arg0, %transposed : tensor<2x8x16xf32>, tensor<2x16x8xf32>) outs(%2 : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %4 = tensor.empty() : tensor<8x8xi1>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%cst_2 : tensor<8x8xi8>) outs(%4 : tensor<8x8xi1>) {
    ^bb0(%in: i8, %out: i1):
      %19 = arith.cmpi ne, %in, %c0_i8 : i8
      linalg.yield %19 : i1
    } -> tensor<8x8xi1>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<8x8xi1>) outs(%4 : tensor<8x8xi1>) {
    ^bb0(%in: i1, %out: i1):
      %19 = arith.xori %in, %true : i1
      linalg.yield %19 : i1
    } -> tensor<8x8xi1>
    %7 = linalg.generic {indexing_maps = [#map1, #map2, #map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %cst_1, %3 : tensor<8x8xi1>, tensor<f32>, tensor<2x8x8xf32>) outs(%1 : tensor<2x8x8xf32>) {
    ^bb0(%in: i1, %in_3: f32, %in_4: f32, %out: f32):
      %19 = arith.select %in, %in_3, %in_4 : f32
      linalg.yield %19 : f32
    } -> tensor<2x8x8xf32>
    %8 = tensor.empty() : tensor<2x8xi64>
    %9 = linalg.fill ins(%c0_i64 : i64) outs(%8 : tensor<2x8xi64>) -> tensor<2x8xi64>
    %10 = tensor.empty() : tensor<2x8xf32>
    %11 = linalg.fill ins(%cst_0 : f32) outs(%10 : tensor<2x8xf32>) -> tensor<2x8xf32>
    %12:2 = linalg.generic {indexing_maps = [#map3, #map4, #map4], iterator_types = ["parallel", "parallel", "reduction"]} ins(%7 : tensor<2x8x8xf32>) outs(%11, %9 : tensor<2x8xf32>, tensor<2x8xi64>) {
    ^bb0(%in: f32, %out: f32, %out_3: i64):
      %19 = linalg.index 2 : index
      %20 = arith.index_cast %19 : index to i64
      %21 = arith.maximumf %in, %out : f32
      %22 = arith.cmpf ogt, %in, %out : f32
      %23 = arith.select %22, %20, %out_3 : i64
      linalg.yield %21, %23 : f32, i64
    } -> (tensor<2x8xf32>, tensor<2x8xi64>)
    %expanded = tensor.expand_shape %12#0 [[0], [1, 2]] output_shape [2, 8, 1] : tensor<2x8xf32> into tensor<2x8x1xf32>
    %13 = linalg.generic {indexing_maps = [#map3, #map5, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%7, %expanded : tensor<2x8x8xf32>, tensor<2x8x1xf32>) outs(%1 : tensor<2x8x8xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %19 = arith.subf %in, %in_3 : f32
      linalg.yield %19 : f32
    } -> tensor<2x8x8xf32>
    %14 = linalg.generic {indexing_maps = [#map3, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13 : tensor<2x8x8xf32>) outs(%1 : tensor<2x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %19 = math.exp %in : f32
      linalg.yield %19 : f32
    } -> tensor<2x8x8xf32>
    %15 = tensor.empty() : tensor<2x8x1xf32>
    %16 = linalg.fill ins(%cst : f32) outs(%15 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
    %17 = linalg.generic {indexing_maps = [#map3, #map5], iterator_types = ["parallel", "parallel", "reduction"]} ins(%14 : tensor<2x8x8xf32>) outs(%16 : tensor<2x8x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %19 = arith.addf %in, %out : f32
      linalg.yield %19 : f32
    } -> tensor<2x8x1xf32>
    %18 = linalg.generic {indexing_maps = [#map3, #map5, #map3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%14, %17 : tensor<2x8x8xf32>, tensor<2x8x1xf32>) outs(%1 : tensor<2x8x8xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %19 = arith.divf %in, %in_3 : f32
      linalg.yield %19 : f32
    } -> tensor<2x8x8xf32>
    return %18 : tensor<2x8x8xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_8_8_torch.uint8: "0x0100000001000000000000000101000000000000010101000000000001010101000000000101010101000000010101010101000001010101010101000101010101010101"
    }
  }
#-}
