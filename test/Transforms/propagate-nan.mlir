// RUN: mlircap-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mlircap-propagate-nan))" | FileCheck %s

// torch-mlir's clamp(x, -1, 1): unordered compares pick the bound for NaN.
// Against constant bounds: eager's x < lo ? lo : x with ordered compares (NaN
// and a -0.0 equal to a bound 0.0 are kept, as eager keeps them).
// CHECK-LABEL: func.func @clamp(
// CHECK-SAME: %[[X:.*]]: f32
// CHECK-DAG: %[[LO:.*]] = arith.constant -1.0
// CHECK-DAG: %[[HI:.*]] = arith.constant 1.0
// CHECK: %[[C:.*]] = arith.cmpf olt, %[[X]], %[[LO]] : f32
// CHECK: %[[A:.*]] = arith.select %[[C]], %[[LO]], %[[X]] : f32
// CHECK: %[[D:.*]] = arith.cmpf ogt, %[[A]], %[[HI]] : f32
// CHECK: %[[B:.*]] = arith.select %[[D]], %[[HI]], %[[A]] : f32
// CHECK-NOT: arith.maximumf
// CHECK: return %[[B]]
func.func @clamp(%x: f32) -> f32 {
  %lo = arith.constant -1.0 : f32
  %hi = arith.constant 1.0 : f32
  %0 = arith.cmpf ult, %x, %lo : f32
  %1 = arith.select %0, %lo, %x : f32
  %2 = arith.cmpf ugt, %1, %hi : f32
  %3 = arith.select %2, %hi, %1 : f32
  return %3 : f32
}

// -----

// relu as torch-mlir writes it (select(x > 0, x, 0)) and relu6's decomposition,
// whose bounds are 0-d constant tensors read by the payload: the same form.
// CHECK-LABEL: func.func @relu_bounds(
// CHECK-NOT: arith.maximumf
// CHECK-NOT: arith.minimumf
// CHECK: %[[C0:.*]] = arith.cmpf olt, %{{.*}}, %[[Z:.*]] : f32
// CHECK: arith.select %[[C0]], %[[Z]], %{{.*}} : f32
// CHECK: ^bb0(%[[IN:.*]]: f32, %[[L:.*]]: f32, %[[H:.*]]: f32, %{{.*}}: f32):
// CHECK: %[[C1:.*]] = arith.cmpf olt, %[[IN]], %[[L]] : f32
// CHECK: %[[M:.*]] = arith.select %[[C1]], %[[L]], %[[IN]] : f32
// CHECK: %[[C2:.*]] = arith.cmpf ogt, %[[M]], %[[H]] : f32
// CHECK: arith.select %[[C2]], %[[H]], %[[M]] : f32
// CHECK: arith.maximumf
func.func @relu_bounds(%x: f32, %t: tensor<4xf32>, %u: tensor<4xf32>) -> (f32, tensor<4xf32>, tensor<4xf32>) {
  %zero = arith.constant 0.0 : f32
  %0 = arith.cmpf ugt, %x, %zero : f32
  %1 = arith.select %0, %x, %zero : f32
  %lo = arith.constant dense<0.0> : tensor<f32>
  %hi = arith.constant dense<6.0> : tensor<f32>
  %e = tensor.empty() : tensor<4xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>, affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%t, %lo, %hi : tensor<4xf32>, tensor<f32>, tensor<f32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %l: f32, %h: f32, %o: f32):
    %c = arith.cmpf ogt, %in, %l : f32
    %m = arith.select %c, %in, %l : f32
    %c2 = arith.cmpf olt, %m, %h : f32
    %n = arith.select %c2, %m, %h : f32
    linalg.yield %n : f32
  } -> tensor<4xf32>
  // a non-constant second operand: maximumf
  %3 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%t, %u : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %v: f32, %o: f32):
    %c = arith.cmpf ogt, %in, %v : f32
    %m = arith.select %c, %in, %v : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  return %1, %2, %3 : f32, tensor<4xf32>, tensor<4xf32>
}

// -----

// maximum / minimum / hardtanh: ordered compares pick the other operand for NaN.
// CHECK-LABEL: func.func @ordered(
// CHECK-SAME: %[[A:.*]]: f32, %[[B:.*]]: f32
// CHECK: %[[MAX:.*]] = arith.maximumf %[[A]], %[[B]] : f32
// CHECK: %[[MIN:.*]] = arith.minimumf %[[A]], %[[B]] : f32
// CHECK: %[[MAX2:.*]] = arith.maximumf %[[A]], %[[B]] : f32
// CHECK: %[[MIN2:.*]] = arith.minimumf %[[A]], %[[B]] : f32
// CHECK: return %[[MAX]], %[[MIN]], %[[MAX2]], %[[MIN2]]
func.func @ordered(%a: f32, %b: f32) -> (f32, f32, f32, f32) {
  %0 = arith.cmpf ogt, %a, %b : f32
  %1 = arith.select %0, %a, %b : f32
  %2 = arith.cmpf olt, %a, %b : f32
  %3 = arith.select %2, %a, %b : f32
  %4 = arith.cmpf ole, %a, %b : f32
  %5 = arith.select %4, %b, %a : f32
  %6 = arith.cmpf oge, %a, %b : f32
  %7 = arith.select %6, %b, %a : f32
  return %1, %3, %5, %7 : f32, f32, f32, f32
}

// -----

// Inside a payload (the form torch-mlir emits); the compare stays when it has
// other users (argmax's index select).
// CHECK-LABEL: func.func @payload
// CHECK: ^bb0(%[[IN:.*]]: f32, %[[OUT:.*]]: f32, %[[IDX:.*]]: i64):
// CHECK: %[[C:.*]] = arith.cmpf ogt, %[[IN]], %[[OUT]]
// CHECK: %[[M:.*]] = arith.maximumf %[[IN]], %[[OUT]]
// CHECK: %[[I:.*]] = arith.select %[[C]], %{{.*}}, %[[IDX]] : i64
// CHECK: linalg.yield %[[M]], %[[I]]
func.func @payload(%x: tensor<8xf32>, %m: tensor<f32>, %i: tensor<i64>) -> (tensor<f32>, tensor<i64>) {
  %0:2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>, affine_map<(d0) -> ()>],
                         iterator_types = ["reduction"]}
      ins(%x : tensor<8xf32>) outs(%m, %i : tensor<f32>, tensor<i64>) {
  ^bb0(%in: f32, %out: f32, %idx: i64):
    %k = linalg.index 0 : index
    %ki = arith.index_cast %k : index to i64
    %c = arith.cmpf ogt, %in, %out : f32
    %v = arith.select %c, %in, %out : f32
    %j = arith.select %c, %ki, %idx : i64
    linalg.yield %v, %j : f32, i64
  } -> (tensor<f32>, tensor<i64>)
  return %0#0, %0#1 : tensor<f32>, tensor<i64>
}

// -----

// Selects that are not a min/max of the compared values stay: relu written
// as select(x > 0, x, 0) already keeps NaN, but a threshold with another
// value, equality compares and a where between two payloads are not min/max.
// CHECK-LABEL: func.func @untouched(
// CHECK-NOT: arith.maximumf
// CHECK-NOT: arith.minimumf
// CHECK-COUNT-3: arith.select
func.func @untouched(%x: f32, %y: f32, %c: i1) -> (f32, f32, f32) {
  %zero = arith.constant 0.0 : f32
  %six = arith.constant 6.0 : f32
  %0 = arith.cmpf ogt, %x, %zero : f32
  %1 = arith.select %0, %x, %six : f32
  %2 = arith.cmpf oeq, %x, %y : f32
  %3 = arith.select %2, %x, %y : f32
  %4 = arith.select %c, %x, %y : f32
  return %1, %3, %4 : f32, f32, f32
}

// -----

// Vectors too.
// CHECK-LABEL: func.func @vector(
// CHECK: arith.maximumf {{.*}} : vector<4xf32>
func.func @vector(%a: vector<4xf32>, %b: vector<4xf32>) -> vector<4xf32> {
  %0 = arith.cmpf ugt, %a, %b : vector<4xf32>
  %1 = arith.select %0, %a, %b : vector<4xi1>, vector<4xf32>
  return %1 : vector<4xf32>
}

// -----

// Bools: torch-mlir's clamp_min/clamp_max of i1 use signed max/min, which read
// true as -1. They become unsigned, as do signed ordering compares; i8 stays.
// CHECK-LABEL: func.func @bool_min_max(
// CHECK: arith.maxui %{{.*}}, %{{.*}} : i1
// CHECK: arith.minui %{{.*}}, %{{.*}} : i1
// CHECK: arith.cmpi ugt, %{{.*}}, %{{.*}} : i1
// CHECK: arith.cmpi ule, %{{.*}}, %{{.*}} : i1
// CHECK: arith.cmpi eq, %{{.*}}, %{{.*}} : i1
// CHECK: arith.maxsi %{{.*}}, %{{.*}} : i8
// CHECK: arith.cmpi slt, %{{.*}}, %{{.*}} : i8
func.func @bool_min_max(%a: i1, %b: i1, %c: i8, %d: i8) -> (i1, i1, i1, i1, i1, i8, i1) {
  %0 = arith.maxsi %a, %b : i1
  %1 = arith.minsi %a, %b : i1
  %2 = arith.cmpi sgt, %a, %b : i1
  %3 = arith.cmpi sle, %a, %b : i1
  %4 = arith.cmpi eq, %a, %b : i1
  %5 = arith.maxsi %c, %d : i8
  %6 = arith.cmpi slt, %c, %d : i8
  return %0, %1, %2, %3, %4, %5, %6 : i1, i1, i1, i1, i1, i8, i1
}
