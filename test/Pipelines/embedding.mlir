// nn.Embedding(10, 8)(i) * 2: the gather (tensor.extract at a loaded index) and the scale in one kernel; bounds asserts dropped.
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

#map = affine_map<(d0, d1, d2) -> (d0, d1)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module {
  func.func @main(%arg0: tensor<2x3xi64>) -> tensor<2x3x8xf32> {
    %c10 = arith.constant 10 : index
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant dense_resource<torch_tensor_10_8_torch.float32> : tensor<10x8xf32>
    %cst_0 = arith.constant 2.000000e+00 : f32
    %0 = tensor.empty() : tensor<2x3x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x3xi64>) outs(%0 : tensor<2x3x8xf32>) {
    ^bb0(%in: i64, %out: f32):
      %3 = arith.index_cast %in : i64 to index
      %4 = linalg.index 2 : index
      %5 = arith.cmpi slt, %3, %c10 : index
      cf.assert %5, "index must be smaller than dim size"
      %6 = arith.cmpi sge, %in, %c0_i64 : i64
      cf.assert %6, "index must be larger or equal to 0"
      %extracted = tensor.extract %cst[%3, %4] : tensor<10x8xf32>
      linalg.yield %extracted : f32
    } -> tensor<2x3x8xf32>
    %2 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%1 : tensor<2x3x8xf32>) outs(%0 : tensor<2x3x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.mulf %in, %cst_0 : f32
      linalg.yield %3 : f32
    } -> tensor<2x3x8xf32>
    return %2 : tensor<2x3x8xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_10_8_torch.float32: "0x04000000DFCB343F0213183F5775F43D39E5A3BFF410E03F86BA43BFC0EDB8BF81DEE13F474D70BD8E9B30BF6E80633F42D54EBFC725FDBFDF6E60BFE9B3A4BFA111CCBE15EA483B5C01BBBD9186DB3EB7E9923EC332183E2C1FE43D29F15A3FE2A529BFF2C412BF72159CBFF6F6373FBEEC89BE98B865BE212E063D7ABE813F90996EBF7AC83740F7DAA1BF615CA6BC66B9353FD1F070BE82F17C3F706A1A3F64ED573F78362ABF060CC9BEA38648BFAF1BDBBD3A109D3F4C8C80BF98E7DFBFADD56E3FB9252E3FCB8FFF3FC6EAABBD0BE5F23CF1468FBF26EB203F139C103F6DF9633F46001140E72C9EBE5C3B363FBB84003F1C4D8A3F4882F0BF8B154D3F1267B13F1C75633F1AFB23BFE80EEB3F952F9DBFA7302FBFE29893BF7F7D853E5B6FBF3E4882A13C7A5E9F3E04001A4087A7BF3F4582EF3FBA7C7F3F3F94B3BF1DCE963D"
    }
  }
#-}
