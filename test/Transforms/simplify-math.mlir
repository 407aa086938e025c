// RUN: mlircap-opt %s --split-input-file --mlircap-simplify-math | FileCheck %s

// GPT-2's tanh GELU: x ** 3 inside a linalg.generic body.
// CHECK-LABEL: func.func @cube_in_generic
// CHECK-NOT: math.fpowi
// CHECK: ^bb0(%[[X:.*]]: bf16, %{{.*}}: bf16):
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[X]], %[[X]] : bf16
// CHECK-NEXT: %[[CUBE:.*]] = arith.mulf %[[SQ]], %[[X]] : bf16
// CHECK-NEXT: linalg.yield %[[CUBE]] : bf16
func.func @cube_in_generic(%x: tensor<8x16xbf16>) -> tensor<8x16xbf16> {
  %c3 = arith.constant 3 : i64
  %e = tensor.empty() : tensor<8x16xbf16>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xbf16>) outs(%e : tensor<8x16xbf16>) {
  ^bb0(%a: bf16, %o: bf16):
    %p = math.fpowi %a, %c3 : bf16, i64
    linalg.yield %p : bf16
  } -> tensor<8x16xbf16>
  return %0 : tensor<8x16xbf16>
}

// -----

// CHECK-LABEL: func.func @powf_constants
// CHECK-NOT: math.powf
// CHECK: arith.mulf %arg0, %arg0 : f32
// CHECK: math.sqrt %arg0 : f32
func.func @powf_constants(%x: f32) -> (f32, f32) {
  %two = arith.constant 2.0 : f32
  %half = arith.constant 0.5 : f32
  %0 = math.powf %x, %two : f32
  %1 = math.powf %x, %half : f32
  return %0, %1 : f32, f32
}

// -----

// A run-time exponent stays a powf.
// CHECK-LABEL: func.func @powf_dynamic
// CHECK: math.powf %arg0, %arg1 : f32
func.func @powf_dynamic(%x: f32, %y: f32) -> f32 {
  %0 = math.powf %x, %y : f32
  return %0 : f32
}
