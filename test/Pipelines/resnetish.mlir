// conv(pad) -> relu -> max_pool2d -> adaptive_avg_pool -> linear: conv (pads its input
// itself); bias+relu+2x2 max (row of 4, a thread per window); global average (row
// kernel); linear bias.
// RUN: mlircap-opt %s --mlircap-fuse | FileCheck %s --check-prefix=FUSE
// RUN: mlircap-opt %s --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// FUSE-LABEL: func.func @main(
// FUSE-COUNT-3: call @main_k
// FUSE-NOT: call @main_k
// FUSE: return

// CG: gpu.module @mlircap_kernels
// CG: strategy = "row_subwarp_regs"

// PTX: .target sm_90
// PTX-COUNT-3: .entry main_k

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, 0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<2x3x8x8xf32>) -> tensor<2x5xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %cst_1 = arith.constant dense_resource<torch_tensor_5_torch.float32> : tensor<5xf32>
    %cst_2 = arith.constant dense_resource<torch_tensor_5_8_torch.float32> : tensor<5x8xf32>
    %cst_3 = arith.constant dense_resource<torch_tensor_8_3_3_3_torch.float32> : tensor<8x3x3x3xf32>
    %cst_4 = arith.constant dense_resource<torch_tensor_8_torch.float32> : tensor<8xf32>
    %cst_5 = arith.constant 1.600000e+01 : f32
    %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%arg1: index, %arg2: index, %arg3: index, %arg4: index):
      tensor.yield %cst : f32
    } : tensor<2x3x8x8xf32> to tensor<2x3x10x10xf32>
    %0 = tensor.empty() : tensor<2x8x8x8xf32>
    %broadcasted = linalg.broadcast ins(%cst_4 : tensor<8xf32>) outs(%0 : tensor<2x8x8x8xf32>) dimensions = [0, 2, 3] 
    %1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%padded, %cst_3 : tensor<2x3x10x10xf32>, tensor<8x3x3x3xf32>) outs(%broadcasted : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%1 : tensor<2x8x8x8xf32>) outs(%0 : tensor<2x8x8x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.cmpf ugt, %in, %cst : f32
      %17 = arith.select %16, %in, %cst : f32
      linalg.yield %17 : f32
    } -> tensor<2x8x8x8xf32>
    %3 = tensor.empty() : tensor<2x8x4x4xf32>
    %4 = linalg.fill ins(%cst_0 : f32) outs(%3 : tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
    %5 = tensor.empty() : tensor<2x2xf32>
    %6 = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%2, %5 : tensor<2x8x8x8xf32>, tensor<2x2xf32>) outs(%4 : tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
    %7 = tensor.empty() : tensor<2x8x1x1xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<2x8x1x1xf32>) -> tensor<2x8x1x1xf32>
    %9 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%6 : tensor<2x8x4x4xf32>) outs(%8 : tensor<2x8x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<2x8x1x1xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%9 : tensor<2x8x1x1xf32>) outs(%7 : tensor<2x8x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.divf %in, %cst_5 : f32
      linalg.yield %16 : f32
    } -> tensor<2x8x1x1xf32>
    %collapsed = tensor.collapse_shape %10 [[0], [1, 2, 3]] : tensor<2x8x1x1xf32> into tensor<2x8xf32>
    %11 = tensor.empty() : tensor<8x5xf32>
    %transposed = linalg.transpose ins(%cst_2 : tensor<5x8xf32>) outs(%11 : tensor<8x5xf32>) permutation = [1, 0] 
    %12 = tensor.empty() : tensor<2x5xf32>
    %13 = linalg.fill ins(%cst : f32) outs(%12 : tensor<2x5xf32>) -> tensor<2x5xf32>
    %14 = linalg.matmul ins(%collapsed, %transposed : tensor<2x8xf32>, tensor<8x5xf32>) outs(%13 : tensor<2x5xf32>) -> tensor<2x5xf32>
    %15 = linalg.generic {indexing_maps = [#map2, #map3, #map2], iterator_types = ["parallel", "parallel"]} ins(%14, %cst_1 : tensor<2x5xf32>, tensor<5xf32>) outs(%12 : tensor<2x5xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %16 = arith.addf %in, %in_6 : f32
      linalg.yield %16 : f32
    } -> tensor<2x5xf32>
    return %15 : tensor<2x5xf32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_5_torch.float32: "0x04000000395C24BE40E0163D34E88EBEC6A4AD3D02C7113E",
      torch_tensor_5_8_torch.float32: "0x04000000037D863E4A4D0C3EF0C5AF3E9405AE3ECF8A64BEFE464F3ED9D6B5BD75DD133EE58A8DBE64B17BBE72FFF8BD5C65A0BEF2B2323E89DEF93D3F7CB33E0F7E14BB0BE7A8BE272D9D3E2AEA653E98F7A53E2603393E360641BC01F7C5BD4F9C8ABE7F4AAC3E3F2C513EC3E876BE37DD82BE7D9CAA3EFD6B61BEB121A53E19FC933EC7F71F3EED1A20BEE5219D3EF0AB0DBE7CFDEE3D53B31FBCA9ECA4BDF0CF38BD",
      torch_tensor_8_3_3_3_torch.float32: "0x04000000F5D770BDAA721F3BA3D03CBEE78089BC2174F1BDCB6920BD2A0BC5BD82BD13BEFB9AA4BDFF5E163E3D279C3DA598303EC45593BD48ADAE3DE61E3B3D6020173EE7A13BBE05A5973D49BC0B3ECDDD08BD45B9E13D1248993D411238BE28DFC43DA3A3A5BC3B50443E7D65093E4623373DC16F15BE70BE103E2C78033E29AF1E3D8698263E7E48CD3DC1BF333E8F373ABEC03603BEBEDE45BD75F8043ECE488BBD33FC3D3E805238BECD69DABD0E5ED93DBC8BF03DCBE6A4BD6243213E2539C1BD3786BE3DF666E8BDC412BA3D9CEBE53CA57F413E539EE13D12819BBD6BC0E03B7DD7C0BD1E04A1BB5BE86F3DF2CA37BD092E753DE541E93C5F8271BD7BB5F8BD9E1BECBDB6D4623D5BC9DEBD42381C3D4BED303E7BABFF3DCBAAA53D01DC99BDFF04243E4D1C9F3C64611B3D3EE3B73D111EB23D6C912ABE0332C8BD3DFB013EC23674BDD5C0313E197800BE331CD9BD286A3DBD10D55DBD4983463D14E38B3DF468C23D5DF2EB3DC00DB83D3BB783BC539C163E6E5C0D3E6EFA7EBDDF0B63BCD418093E18E0F83DF7DDF6BD64E18E3DAE05313EA0AF43BCBCF3DDBD875D31BE65F31CBD37F124BE0DCEC6BC5791933DA2E52C3ED858EEBDCB09BABDAAD0533DBF269C3DB300C3BDAFB738BCCE9EA2BD820B133E59543BBEE97423BE81FD2DBE2AEF3D3E6CB1623CF7DF813C1CD438BEA718643D4D0510BC576F1A3E06AE323E394A12BEE3F809BE53FDAD3D95BB3FBEBCE4E63DFE69A13D1272393DF1183B3E1A66543D6BB7433DB068FDBDB98E04BBD47CD3BA02993FBE2D5B5EBD303D22BEA84B153E240B323EBB2C0ABED4E09D3B9DFDA1BDDD0D9E3CD8BCCA3D79D4ED3D1D151C3D77C0F0BD0FA211BD52A61FBE7F79CABDEE8B19BD2B6C363E356341BDC08E2EBE6F0131BEF16C5CBD0D22E3BDE3F38A3DDA2D0E3E7C0179BDC86536BC825F9C3DF7DCE23DF3813DBD7D19A63D0EF6923D971D9D3C59EA03BE115EF23D12CFE43CEDD7AB3C17D732BEDE96A43D7BF03B3E76AD13BED9FE90BD9DB5D13DA7AE13BEA9B0B1BDAF5F713CF9BE06BE84E4F93DA1A5E53D9C14F2BD3DB00F3D7B18DE3D5C3D0ABDFA81323E388F9D3DC22A993D7BB6DE3D8B970E3E637FCBBD74D819BE27CA663D492C193DC24D87BDA88B893DDCA3153EBEF72D3E84B3BBBC316FA53DDE9D23BE7F2A16BE253632BE0E271C3ED4AA45BD1CE5363D683A34BE",
      torch_tensor_8_torch.float32: "0x04000000BB8FD9BC3C35C63D524DCCBDC89D433EFFF7293ED7FE88BD543A91BCE1CAD13D"
    }
  }
#-}
