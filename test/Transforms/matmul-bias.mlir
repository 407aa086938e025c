// RUN: mlircap-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(mlircap-matmul-bias))' | FileCheck %s

// float32 linear (torch-mlir's aten.linear): the column bias becomes the
// matmul's init, marked for the plan, and the add is gone.
// CHECK-LABEL: func.func @linear_f32(
// CHECK-SAME: %[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8x16xf32>, %[[BIAS:.*]]: tensor<16xf32>
// CHECK: %[[I:.*]] = linalg.generic {{.*}} ins(%[[BIAS]] : tensor<16xf32>) {{.*}} attrs = {mlircap.matmul_bias}
// CHECK: %[[M:.*]] = linalg.matmul ins(%[[A]], %[[B]] : {{.*}}) outs(%[[I]] : tensor<4x16xf32>)
// CHECK-NOT: arith.addf
// CHECK: return %[[M]]
#col = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
module attributes {mlircap.matmul_bias} {
func.func @linear_f32(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<16xf32>) -> tensor<4x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
}

// -----

// bf16 linear: f32 matmul of bf16 operands, + the bias extended, rounded once.
// The matmul takes the bf16 bias and stores bf16 (eager's addmm rounds once);
// its users get it extended.
// CHECK-LABEL: func.func @linear_bf16(
// CHECK-SAME: %[[A:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<16x8xbf16>, %[[BIAS:.*]]: tensor<16xbf16>
// CHECK: %[[I:.*]] = linalg.generic {{.*}} ins(%[[BIAS]] : tensor<16xbf16>) outs({{.*}} : tensor<4x16xbf16>) attrs = {mlircap.matmul_bias}
// CHECK: %[[M:.*]] = linalg.matmul {{.*}} ins(%[[A]], %[[B]] : {{.*}}) outs(%[[I]] : tensor<4x16xbf16>) -> tensor<4x16xbf16>
// CHECK: %[[X:.*]] = linalg.generic {{.*}} ins(%[[M]] : tensor<4x16xbf16>)
// CHECK: arith.extf
// CHECK-NOT: arith.addf
// CHECK: arith.truncf
#col = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#ma = affine_map<(d0, d1, d2) -> (d0, d2)>
#mb = affine_map<(d0, d1, d2) -> (d1, d2)>
#mc = affine_map<(d0, d1, d2) -> (d0, d1)>
module attributes {mlircap.matmul_bias} {
func.func @linear_bf16(%a: tensor<4x8xbf16>, %b: tensor<16x8xbf16>, %bias: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul indexing_maps = [#ma, #mb, #mc] ins(%a, %b : tensor<4x8xbf16>, tensor<16x8xbf16>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %eb = tensor.empty() : tensor<16xf32>
  %bw = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%bias : tensor<16xbf16>) outs(%eb : tensor<16xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %w = arith.extf %x : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16xf32>
  %s = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bw : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  %en = tensor.empty() : tensor<4x16xbf16>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x16xf32>) outs(%en : tensor<4x16xbf16>) {
  ^bb0(%x: f32, %o: bf16):
    %n = arith.truncf %x : f32 to bf16
    linalg.yield %n : bf16
  } -> tensor<4x16xbf16>
  return %t : tensor<4x16xbf16>
}
}

// -----

// A bf16 sum used wide (not only rounded): the f32 result must stay, so
// nothing changes.
// CHECK-LABEL: func.func @bf16_sum_used_wide(
// CHECK: linalg.fill
// CHECK: linalg.matmul {{.*}} -> tensor<4x16xf32>
// CHECK: arith.addf
#col = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
module attributes {mlircap.matmul_bias} {
func.func @bf16_sum_used_wide(%a: tensor<4x8xbf16>, %b: tensor<8x16xbf16>, %bias: tensor<16xbf16>) -> tensor<4x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xbf16>, tensor<8x16xbf16>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %eb = tensor.empty() : tensor<16xf32>
  %bw = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%bias : tensor<16xbf16>) outs(%eb : tensor<16xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %w = arith.extf %x : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<16xf32>
  %s = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bw : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
}

// -----

// A bias along the rows (indexed by d0), a matmul with a second user, and a
// module without the attribute (whole-graph CPU loops): all left alone.
// CHECK-LABEL: func.func @rows(
// CHECK: linalg.fill
// CHECK: arith.addf
// CHECK-LABEL: func.func @two_users(
// CHECK: linalg.fill
// CHECK: arith.addf
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
module attributes {mlircap.matmul_bias} {
func.func @rows(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<4xf32>) -> tensor<4x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<4x16xf32>, tensor<4xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
func.func @two_users(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s, %m : tensor<4x16xf32>, tensor<4x16xf32>
}
}

// -----

// CHECK-LABEL: func.func @no_attribute(
// CHECK: linalg.fill
// CHECK: arith.addf
#col = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @no_attribute(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<16xf32>) -> tensor<4x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}

// -----

// A constant bias (weights frozen into the graph) stays the broadcast's input.
// CHECK-LABEL: func.func @constant_bias(
// CHECK: %[[C:.*]] = arith.constant dense<
// CHECK: %[[I:.*]] = linalg.generic {{.*}} ins(%[[C]] : tensor<16xf32>) {{.*}} attrs = {mlircap.matmul_bias}
// CHECK: linalg.matmul {{.*}} outs(%[[I]] : tensor<4x16xf32>)
#col = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
module attributes {mlircap.matmul_bias} {
func.func @constant_bias(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %bias = arith.constant dense<1.5> : tensor<16xf32>
  %e = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%m, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
}
