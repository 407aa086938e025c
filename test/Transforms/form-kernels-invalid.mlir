// RUN: mlircap-opt %s --split-input-file --mlircap-form-kernels --verify-diagnostics

func.func @dynamic(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{mlircap: dynamic shapes are not supported: 'tensor.dim'}}
  %d = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%d) : tensor<?x4xf32>
  return %e : tensor<?x4xf32>
}

// -----

func.func @gather(%x: tensor<8xf32>, %i: tensor<4x1xi64>) -> tensor<4xf32> {
  // expected-error @+1 {{mlircap: unsupported op 'tensor.gather' (no GPU kernel or library call for it)}}
  %g = tensor.gather %x[%i] gather_dims([0]) unique : (tensor<8xf32>, tensor<4x1xi64>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}

// -----

// expected-error @+1 {{mlircap: functions with control flow are not supported}}
func.func @branches(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^a, ^b
^a:
  return %x : tensor<4xf32>
^b:
  return %x : tensor<4xf32>
}

// -----

func.func @loop(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  // expected-error @+1 {{mlircap: unsupported op 'scf.for'}}
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%t = %x) -> tensor<4xf32> {
    scf.yield %t : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

func.func @insert(%x: tensor<4xf32>, %v: f32) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{mlircap: unsupported op 'tensor.insert'}}
  %r = tensor.insert %v into %x[%c0] : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @fp8(%x: tensor<4xf8E4M3FN>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  // expected-error @+1 {{mlircap: unsupported element type 'f8E4M3FN' in 'linalg.generic'}}
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf8E4M3FN>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f8E4M3FN, %o: f32):
    %r = arith.extf %a : f8E4M3FN to f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

