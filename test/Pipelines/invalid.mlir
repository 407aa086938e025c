// RUN: mlircap-opt %s --split-input-file --verify-diagnostics --mlircap-fuse

// Malformed input is a diagnostic, never a crash.
func.func @bad_yield(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  // expected-error @+1 {{'linalg.generic' op invalid indexing maps are non-invertible}}
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  } -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @type_mismatch(%a: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<8xf32>')}}
  return %a : tensor<4xf32>
}
