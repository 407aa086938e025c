// Integer math ops that have no libdevice function go through the whole GPU
// pipeline as LLVM intrinsics (math.absi: T5's relative position buckets take
// abs of an i64 tensor; the GPU codegen failed and the whole graph ran eagerly).
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx | FileCheck %s
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx

// CHECK: gpu.binary @mlircap_kernels
// PTX-DAG: .visible .entry absi_k0(
// PTX-DAG: abs.s64
// PTX-DAG: .visible .entry bits_k0(

#id = affine_map<(d0, d1) -> (d0, d1)>

func.func @absi(%x: tensor<32x32xi64>) -> tensor<32x32xi64> {
  %e = tensor.empty() : tensor<32x32xi64>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<32x32xi64>) outs(%e : tensor<32x32xi64>) {
  ^bb0(%a: i64, %o: i64):
    %r = math.absi %a : i64
    linalg.yield %r : i64
  } -> tensor<32x32xi64>
  return %0 : tensor<32x32xi64>
}

func.func @bits(%x: tensor<32x32xi32>) -> tensor<32x32xi32> {
  %e = tensor.empty() : tensor<32x32xi32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<32x32xi32>) outs(%e : tensor<32x32xi32>) {
  ^bb0(%a: i32, %o: i32):
    %c = math.ctpop %a : i32
    %l = math.ctlz %a : i32
    %r = arith.addi %c, %l : i32
    linalg.yield %r : i32
  } -> tensor<32x32xi32>
  return %0 : tensor<32x32xi32>
}
