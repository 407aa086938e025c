// conv(stride 2, pad 1) -> batchnorm (eval) -> silu: conv (library, it pads its input
// itself: the tensor.pad stays in main, no kernel), one epilogue kernel.
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE: tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1]
// FUSE: linalg.conv_2d_nchw_fchw
// FUSE-COUNT-1: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return

// CG: gpu.module @mlircap_kernels
// CG: strategy = "pointwise

// PTX: .target sm_90
// PTX-COUNT-1: .entry main_k

#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>
module {
  func.func @main(%arg0: tensor<1x3x9x9xf32>) -> tensor<1x4x5x5xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e+00 : f32
    %cst_1 = arith.constant dense_resource<torch_tensor_4_torch.float32_4> : tensor<4xf32>
    %cst_2 = arith.constant dense_resource<torch_tensor_4_torch.float32_3> : tensor<4xf32>
    %cst_3 = arith.constant 1.000000e-05 : f64
    %cst_4 = arith.constant dense_resource<torch_tensor_4_torch.float32_2> : tensor<4xf32>
    %cst_5 = arith.constant dense_resource<torch_tensor_4_torch.float32_1> : tensor<4xf32>
    %cst_6 = arith.constant dense_resource<torch_tensor_4_3_3_3_torch.float32> : tensor<4x3x3x3xf32>
    %cst_7 = arith.constant dense_resource<torch_tensor_4_torch.float32> : tensor<4xf32>
    %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%arg1: index, %arg2: index, %arg3: index, %arg4: index):
      tensor.yield %cst : f32
    } : tensor<1x3x9x9xf32> to tensor<1x3x11x11xf32>
    %0 = tensor.empty() : tensor<1x4x5x5xf32>
    %broadcasted = linalg.broadcast ins(%cst_7 : tensor<4xf32>) outs(%0 : tensor<1x4x5x5xf32>) dimensions = [0, 2, 3] 
    %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%padded, %cst_6 : tensor<1x3x11x11xf32>, tensor<4x3x3x3xf32>) outs(%broadcasted : tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32>
    %2 = tensor.empty() : tensor<4xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%cst_4 : tensor<4xf32>) outs(%2 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.truncf %cst_3 : f64 to f32
      %13 = arith.addf %in, %12 : f32
      linalg.yield %13 : f32
    } -> tensor<4xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%3 : tensor<4xf32>) outs(%2 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = math.sqrt %in : f32
      linalg.yield %12 : f32
    } -> tensor<4xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%4 : tensor<4xf32>) outs(%2 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.cmpf one, %in, %cst : f32
      cf.assert %12, "unimplemented: tensor with zero element"
      %13 = arith.divf %cst_0, %in : f32
      linalg.yield %13 : f32
    } -> tensor<4xf32>
    %expanded = tensor.expand_shape %cst_5 [[0, 1, 2]] output_shape [4, 1, 1] : tensor<4xf32> into tensor<4x1x1xf32>
    %expanded_8 = tensor.expand_shape %5 [[0, 1, 2]] output_shape [4, 1, 1] : tensor<4xf32> into tensor<4x1x1xf32>
    %6 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1, %expanded : tensor<1x4x5x5xf32>, tensor<4x1x1xf32>) outs(%0 : tensor<1x4x5x5xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %12 = arith.subf %in, %in_11 : f32
      linalg.yield %12 : f32
    } -> tensor<1x4x5x5xf32>
    %7 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6, %expanded_8 : tensor<1x4x5x5xf32>, tensor<4x1x1xf32>) outs(%0 : tensor<1x4x5x5xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %12 = arith.mulf %in, %in_11 : f32
      linalg.yield %12 : f32
    } -> tensor<1x4x5x5xf32>
    %expanded_9 = tensor.expand_shape %cst_2 [[0, 1, 2]] output_shape [4, 1, 1] : tensor<4xf32> into tensor<4x1x1xf32>
    %8 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %expanded_9 : tensor<1x4x5x5xf32>, tensor<4x1x1xf32>) outs(%0 : tensor<1x4x5x5xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %12 = arith.mulf %in, %in_11 : f32
      linalg.yield %12 : f32
    } -> tensor<1x4x5x5xf32>
    %expanded_10 = tensor.expand_shape %cst_1 [[0, 1, 2]] output_shape [4, 1, 1] : tensor<4xf32> into tensor<4x1x1xf32>
    %9 = linalg.generic {indexing_maps = [#map1, #map2, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%8, %expanded_10 : tensor<1x4x5x5xf32>, tensor<4x1x1xf32>) outs(%0 : tensor<1x4x5x5xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %12 = arith.addf %in, %in_11 : f32
      linalg.yield %12 : f32
    } -> tensor<1x4x5x5xf32>
    %10 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9 : tensor<1x4x5x5xf32>) outs(%0 : tensor<1x4x5x5xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.negf %in : f32
      %13 = math.exp %12 : f32
      %14 = arith.addf %13, %cst_0 : f32
      %15 = arith.divf %cst_0, %14 : f32
      linalg.yield %15 : f32
    } -> tensor<1x4x5x5xf32>
    %11 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9, %10 : tensor<1x4x5x5xf32>, tensor<1x4x5x5xf32>) outs(%0 : tensor<1x4x5x5xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %12 = arith.mulf %in, %in_11 : f32
      linalg.yield %12 : f32
    } -> tensor<1x4x5x5xf32>
    return %11 : tensor<1x4x5x5xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_4_torch.float32_4: "0x0400000000000000000000000000000000000000",
      torch_tensor_4_torch.float32_3: "0x040000000000803F0000803F0000803F0000803F",
      torch_tensor_4_torch.float32_2: "0x040000000000803F0000803F0000803F0000803F",
      torch_tensor_4_torch.float32_1: "0x0400000000000000000000000000000000000000",
      torch_tensor_4_3_3_3_torch.float32: "0x040000000018CCBD7E34F33B6F78C2BCC12EFC3D8CA0413EB8D7C03D328E063EF541903D356A1DBD5CC806BEC9AA2EBE7BC432BEF0CD6E3DAFBE34BE9069193E5079DB3D662AA6BC079BDF3D8B0145BE57A2293E28AA0CBE677A50BDAD9EDABD46C979BDBF0F0A3E610D43BE2B943EBD408612BED286E63D914706BE037AC43D00FC133E3E12FF3DE77BA1BDEF7DC83DD164003D283CF0BD32FF1FBE4954C0BD47A3D4BDCC0ACBBDB50B03BE78D4023E2121263EDAD6AEBD72989A3C30E5343E3C04363E6965C83DDFAB053EABA70F3E892676BD4FE6393E63EAFBBDABC9A3BD9DC114BEE47D4CBDA7240B3EDAE0E8BDADBD25BE5918A5BB624702BEC1954C3CE39719BD683C883DE726F03C7D688DBD3FBC0FBEBB32FD3D387FCFBDB7300F3E98EB0F3E2D9132BE3BB3CABD775425BD9646ACBC3F4551BD12411C3E3DB61DBEBF3F2BBE1DD5163D3F7056BDD466633DB0D7F1BDF8D63ABC41F2493BFF5F7CBCD00BFC3DD8FE113DFB57A03D47A413BE8191FCBCA24D323EEB8AD2BD903006BE7E0E2D3D718A363DEC1A0ABE7905A8BDE09939BE67BA433D3787E43D9A7501BE7967F43D563041BE8B181E3E7110A43D21CCEABD",
      torch_tensor_4_torch.float32: "0x040000003D1FD33D1724173B59B1133DC493D3BD"
    }
  }
#-}
