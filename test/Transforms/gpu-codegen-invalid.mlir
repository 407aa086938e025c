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
