// RUN: mlircap-opt %s --split-input-file --mlircap-form-kernels --mlircap-gpu-codegen --verify-diagnostics

func.func @diag(%x: tensor<4x4xf32>) -> tensor<7xf32> {
  %e = tensor.empty() : tensor<7xf32>
  // expected-error @+1 {{mlircap-gpu-codegen: output indexing map is not invertible}}
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0 + d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x4xf32>) outs(%e : tensor<7xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

// Scalars cannot be kernel parameters (the plan passes tensors only).
func.func @scalar(%x: tensor<4xf32>, %s: f32) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  // expected-error @+1 {{mlircap-gpu-codegen: kernel parameter of type 'f32' is not a statically shaped tensor}}
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.mulf %a, %s : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A kernel function with dynamic shapes (hand-written: kernel formation
// rejects them) is a diagnostic, not a negative memref size.
// expected-error @+1 {{mlircap-gpu-codegen: kernel parameter of type 'tensor<?xf32>' is not a statically shaped tensor}}
func.func private @dyn_k0(%x: tensor<?xf32>) -> tensor<?xf32> attributes {mlircap.kernel = "pointwise"} {
  return %x : tensor<?xf32>
}

// -----

// A result that does not index a parallel loop (extent 3) but whose value
// depends on it: its element would be whichever iteration wrote last.
func.func @depends_on_unindexed_loop(%x: tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<2xf32>) {
  %cst = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<3x2xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e0 : tensor<3x2xf32>) -> tensor<3x2xf32>
  %e1 = tensor.empty() : tensor<2xf32>
  %w = tensor.empty() : tensor<2xi1>
  // expected-error @+1 {{mlircap-gpu-codegen: output indexing map is not invertible}}
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%w : tensor<2xi1>) outs(%z, %e1 : tensor<3x2xf32>, tensor<2xf32>) {
  ^bb0(%in: i1, %acc: f32, %cnt: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %k = linalg.index 2 : index
    %c2 = arith.constant 2 : index
    %col = arith.muli %j, %c2 : index
    %c = arith.addi %col, %k : index
    %v = tensor.extract %x[%i, %c] : tensor<3x4xf32>
    %s = arith.addf %v, %acc : f32
    %n = arith.index_cast %i : index to i64
    %nf = arith.sitofp %n : i64 to f32
    linalg.yield %s, %nf : f32, f32
  } -> (tensor<3x2xf32>, tensor<2xf32>)
  return %r#0, %r#1 : tensor<3x2xf32>, tensor<2xf32>
}
