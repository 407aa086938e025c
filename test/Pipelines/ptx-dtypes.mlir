// Every strategy and element type through the whole GPU pipeline; the PTX is
// assembled by ptxas for sm_90.
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx | FileCheck %s
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// CHECK: gpu.binary @mlircap_kernels
// PTX-DAG: .visible .entry vec4_k0(
// PTX-DAG: ld.global.v4.b32
// PTX-DAG: st.global.v4.b32
// PTX-DAG: .visible .entry softmax_f16_k0(
// PTX-DAG: .visible .entry sum_f64_k0(
// PTX-DAG: .visible .entry rms_bf16_k0(
// PTX-DAG: .visible .entry argmax_k0(
// PTX-DAG: .visible .entry isum_k0(
// PTX-DAG: .visible .entry cmp_k0(
// PTX-DAG: .visible .entry bigrow_k0(
// PTX-DAG: .shared .align {{[0-9]+}} .b8 {{.*}}[128]
// PTX-DAG: bar.sync 0
// PTX-DAG: shfl.sync.bfly.b32

#id1 = affine_map<(d0) -> (d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>

func.func @vec4(%x: tensor<4096xf32>, %y: tensor<4096xf32>) -> tensor<4096xf32> {
  %e = tensor.empty() : tensor<4096xf32>
  %0 = linalg.generic {indexing_maps = [#id1, #id1, #id1], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<4096xf32>, tensor<4096xf32>) outs(%e : tensor<4096xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %r = math.tanh %s : f32
    linalg.yield %r : f32
  } -> tensor<4096xf32>
  return %0 : tensor<4096xf32>
}

func.func @softmax_f16(%x: tensor<8x96xf16>) -> tensor<8x96xf16> {
  %ninf = arith.constant 0xFC00 : f16
  %zero = arith.constant 0.0 : f16
  %e1 = tensor.empty() : tensor<8xf16>
  %f1 = linalg.fill ins(%ninf : f16) outs(%e1 : tensor<8xf16>) -> tensor<8xf16>
  %m = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x96xf16>) outs(%f1 : tensor<8xf16>) {
  ^bb0(%a: f16, %o: f16):
    %r = arith.maximumf %a, %o : f16
    linalg.yield %r : f16
  } -> tensor<8xf16>
  %f2 = linalg.fill ins(%zero : f16) outs(%e1 : tensor<8xf16>) -> tensor<8xf16>
  %s = linalg.generic {indexing_maps = [#id, #red, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : tensor<8x96xf16>, tensor<8xf16>) outs(%f2 : tensor<8xf16>) {
  ^bb0(%a: f16, %mx: f16, %o: f16):
    %d = arith.subf %a, %mx : f16
    %ex = math.exp %d : f16
    %r = arith.addf %ex, %o : f16
    linalg.yield %r : f16
  } -> tensor<8xf16>
  %e2 = tensor.empty() : tensor<8x96xf16>
  %y = linalg.generic {indexing_maps = [#id, #red, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m, %s : tensor<8x96xf16>, tensor<8xf16>, tensor<8xf16>) outs(%e2 : tensor<8x96xf16>) {
  ^bb0(%a: f16, %mx: f16, %sum: f16, %o: f16):
    %d = arith.subf %a, %mx : f16
    %ex = math.exp %d : f16
    %r = arith.divf %ex, %sum : f16
    linalg.yield %r : f16
  } -> tensor<8x96xf16>
  return %y : tensor<8x96xf16>
}

func.func @sum_f64(%x: tensor<4x1000xf64>) -> tensor<4xf64> {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4xf64>
  %f = linalg.fill ins(%zero : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x1000xf64>) outs(%f : tensor<4xf64>) {
  ^bb0(%a: f64, %o: f64):
    %r = arith.addf %a, %o : f64
    linalg.yield %r : f64
  } -> tensor<4xf64>
  return %s : tensor<4xf64>
}

func.func @rms_bf16(%x: tensor<4x256xbf16>) -> tensor<4x256xbf16> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 256.0 : f32
  %e1 = tensor.empty() : tensor<4xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x256xbf16>) outs(%f1 : tensor<4xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %w = arith.extf %a : bf16 to f32
    %sq = arith.mulf %w, %w : f32
    %r = arith.addf %sq, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x256xbf16>
  %y = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<4x256xbf16>, tensor<4xf32>) outs(%e2 : tensor<4x256xbf16>) {
  ^bb0(%a: bf16, %ss: f32, %o: bf16):
    %mean = arith.divf %ss, %n : f32
    %inv = math.rsqrt %mean : f32
    %w = arith.extf %a : bf16 to f32
    %r = arith.mulf %w, %inv : f32
    %t = arith.truncf %r : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x256xbf16>
  return %y : tensor<4x256xbf16>
}

func.func @argmax(%x: tensor<8x32xf32>) -> tensor<8xi64> {
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<8xf32>
  %ei = tensor.empty() : tensor<8xi64>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %fi = linalg.fill ins(%c0 : i64) outs(%ei : tensor<8xi64>) -> tensor<8xi64>
  %r:2 = linalg.generic {indexing_maps = [#id, #red, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x32xf32>) outs(%f, %fi : tensor<8xf32>, tensor<8xi64>) {
  ^bb0(%a: f32, %o: f32, %oi: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %a, %o : f32
    %gt = arith.cmpf ogt, %a, %o : f32
    %s = arith.select %gt, %ii, %oi : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<8xf32>, tensor<8xi64>)
  return %r#1 : tensor<8xi64>
}

func.func @isum(%x: tensor<64x48xi32>) -> tensor<48xi32> {
  %zero = arith.constant 0 : i32
  %e = tensor.empty() : tensor<48xi32>
  %f = linalg.fill ins(%zero : i32) outs(%e : tensor<48xi32>) -> tensor<48xi32>
  %s = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<64x48xi32>) outs(%f : tensor<48xi32>) {
  ^bb0(%a: i32, %o: i32):
    %r = arith.addi %a, %o : i32
    linalg.yield %r : i32
  } -> tensor<48xi32>
  return %s : tensor<48xi32>
}

func.func @cmp(%x: tensor<10xf32>, %y: tensor<10xi8>) -> tensor<10xi1> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<10xi1>
  %0 = linalg.generic {indexing_maps = [#id1, #id1, #id1], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<10xf32>, tensor<10xi8>) outs(%e : tensor<10xi1>) {
  ^bb0(%a: f32, %b: i8, %o: i1):
    %bf = arith.sitofp %b : i8 to f32
    %r = arith.cmpf ogt, %a, %bf : f32
    linalg.yield %r : i1
  } -> tensor<10xi1>
  return %0 : tensor<10xi1>
}

func.func @bigrow(%x: tensor<3x5000xf32>) -> tensor<3x5000xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<3xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<3xf32>) -> tensor<3xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<3x5000xf32>) outs(%f1 : tensor<3xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<3xf32>
  %e2 = tensor.empty() : tensor<3x5000xf32>
  %y = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<3x5000xf32>, tensor<3xf32>) outs(%e2 : tensor<3x5000xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<3x5000xf32>
  return %y : tensor<3x5000xf32>
}
