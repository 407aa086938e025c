// Bool reductions and unit-dim collapses the GPU codegen once aborted on (found by the
// H200 OpInfo sweep: `unique` of a bool tensor, `masked.logsumexp` of int32).
// RUN: mlircap-opt %s --split-input-file --mlircap-fuse --mlircap-gpu-codegen | FileCheck %s --check-prefix=CG
// RUN: mlircap-opt %s --mlircap-gpu-pipeline --mlircap-dump-ptx=file=%t.ptx -o /dev/null
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin

// `any` over the rows of a bool matrix (a column reduction): the partial results
// go through shared memory as bytes (LLVM cannot store an i1).
// CG-LABEL: gpu.func @any_cols_k0
// CG: memref<{{[0-9]+}}xi8, #gpu.address_space<workgroup>>
// CG-NOT: xi1, #gpu.address_space<workgroup>
#m = affine_map<(d0, d1) -> (d0, d1)>
#c = affine_map<(d0, d1) -> (d1)>
func.func @any_cols(%x: tensor<125x125xi1>) -> tensor<125xi1> {
  %false = arith.constant false
  %e = tensor.empty() : tensor<125xi1>
  %f = linalg.fill ins(%false : i1) outs(%e : tensor<125xi1>) -> tensor<125xi1>
  %r = linalg.generic {indexing_maps = [#m, #c], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<125x125xi1>) outs(%f : tensor<125xi1>) {
  ^bb0(%a: i1, %o: i1):
    %y = arith.ori %a, %o : i1
    linalg.yield %y : i1
  } -> tensor<125xi1>
  return %r : tensor<125xi1>
}

// -----

// `any` of a long bool vector: a block reduction whose per-warp partials are bytes.
// CG-LABEL: gpu.func @any_all_k0
// CG: xi8, #gpu.address_space<workgroup>>
// CG-NOT: xi1, #gpu.address_space<workgroup>
#id = affine_map<(d0) -> (d0)>
#s = affine_map<(d0) -> ()>
func.func @any_all(%x: tensor<8192xi1>) -> tensor<i1> {
  %false = arith.constant false
  %e = tensor.empty() : tensor<i1>
  %f = linalg.fill ins(%false : i1) outs(%e : tensor<i1>) -> tensor<i1>
  %r = linalg.generic {indexing_maps = [#id, #s], iterator_types = ["reduction"]}
      ins(%x : tensor<8192xi1>) outs(%f : tensor<i1>) {
  ^bb0(%a: i1, %o: i1):
    %y = arith.ori %a, %o : i1
    linalg.yield %y : i1
  } -> tensor<i1>
  return %r : tensor<i1>
}

// -----

// log-sum-exp of a 2-vector with the max kept as tensor<1xf32> and collapsed to a 0-d
// tensor (collapse_shape with no reassociation groups): the unit dim is read at index 0.
// CG-LABEL: func.func @lse
// CG: call @lse_k1
// CG: gpu.func @lse_k1(%{{.*}}: memref<1xf32>, %{{.*}}: memref<2xf32>, %{{.*}}: memref<1xf32>)
#l1 = affine_map<(d0) -> (d0)>
#l0 = affine_map<(d0) -> ()>
#z = affine_map<(d0) -> (0)>
#e0 = affine_map<() -> ()>
func.func @lse(%x: tensor<2xf32>) -> tensor<f32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %mx = linalg.generic {indexing_maps = [#l1, #l0], iterator_types = ["reduction"]}
      ins(%x : tensor<2xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %y = arith.maximumf %a, %o : f32
    linalg.yield %y : f32
  } -> tensor<f32>
  %ex = tensor.expand_shape %mx [] output_shape [1] : tensor<f32> into tensor<1xf32>
  %e1 = tensor.empty() : tensor<1xf32>
  %ab = linalg.generic {indexing_maps = [#l1, #l1], iterator_types = ["parallel"]}
      ins(%ex : tensor<1xf32>) outs(%e1 : tensor<1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %y = math.absf %a : f32
    linalg.yield %y : f32
  } -> tensor<1xf32>
  %col = tensor.collapse_shape %ab [] : tensor<1xf32> into tensor<f32>
  %f0 = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %sum = linalg.generic {indexing_maps = [#l1, #z, #l0], iterator_types = ["reduction"]}
      ins(%x, %ab : tensor<2xf32>, tensor<1xf32>) outs(%f0 : tensor<f32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %d = arith.subf %a, %m : f32
    %x1 = math.exp %d : f32
    %y = arith.addf %x1, %o : f32
    linalg.yield %y : f32
  } -> tensor<f32>
  %r = linalg.generic {indexing_maps = [#e0, #e0, #e0], iterator_types = []}
      ins(%sum, %col : tensor<f32>, tensor<f32>) outs(%e : tensor<f32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %l = math.log %a : f32
    %y = arith.addf %l, %b : f32
    linalg.yield %y : f32
  } -> tensor<f32>
  return %r : tensor<f32>
}
