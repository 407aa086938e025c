// RUN: mlircap-opt %s --split-input-file --mlircap-form-kernels | FileCheck %s

// An elementwise op is one pointwise kernel; its init tensor.empty and the
// scalar constant are cloned in, the broadcast bias is a kernel argument.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @pointwise(
// CHECK: %[[R:.*]] = call @pointwise_k0(%arg0, %arg1)
// CHECK: return %[[R]]
// CHECK: func.func private @pointwise_k0(%{{.*}}: tensor<4x8xf32>, %{{.*}}: tensor<8xf32>) -> tensor<4x8xf32> attributes {mlircap.kernel = "pointwise"}
// CHECK: arith.constant 0.0
// CHECK: tensor.empty
// CHECK: linalg.generic
func.func @pointwise(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    %r = arith.maximumf %s, %c0 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Softmax: the two row reductions and the final division form one row kernel;
// the fills that initialize the reductions are cloned into it.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax(
// CHECK-NEXT: call @softmax_k0(%arg0)
// CHECK-NEXT: return
// CHECK: func.func private @softmax_k0({{.*}}) -> tensor<4x64xf32> attributes {mlircap.kernel = "row_reduction"}
// CHECK: linalg.fill
// CHECK: linalg.generic
// CHECK: linalg.fill
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: call
func.func @softmax(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4xf32>
  %f1 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %m = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x64xf32>) outs(%f1 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #red, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : tensor<4x64xf32>, tensor<4xf32>) outs(%f2 : tensor<4xf32>) {
  ^bb0(%a: f32, %mx: f32, %o: f32):
    %d = arith.subf %a, %mx : f32
    %ex = math.exp %d : f32
    %r = arith.addf %ex, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x64xf32>
  %y = linalg.generic {indexing_maps = [#id, #red, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m, %s : tensor<4x64xf32>, tensor<4xf32>, tensor<4xf32>) outs(%e2 : tensor<4x64xf32>) {
  ^bb0(%a: f32, %mx: f32, %sum: f32, %o: f32):
    %d = arith.subf %a, %mx : f32
    %ex = math.exp %d : f32
    %r = arith.divf %ex, %sum : f32
    linalg.yield %r : f32
  } -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}

// -----

// A matmul is a library op and stays in the caller with its zero fill; its
// bias + relu epilogue is one kernel. The transposed weight feeding only the
// matmul stays as a (view) generic in the caller.
#id = affine_map<(d0, d1) -> (d0, d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
#row = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @matmul_epilogue(
// CHECK: linalg.generic
// CHECK: linalg.fill
// CHECK: linalg.matmul
// CHECK: call @matmul_epilogue_k0
// CHECK-NOT: call
// CHECK: return
func.func @matmul_epilogue(%x: tensor<4x16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> tensor<4x32xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<16x32xf32>
  %wt = linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<32x16xf32>) outs(%et : tensor<16x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<16x32xf32>
  %e = tensor.empty() : tensor<4x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x32xf32>) -> tensor<4x32xf32>
  %mm = linalg.matmul ins(%x, %wt : tensor<4x16xf32>, tensor<16x32xf32>) outs(%f : tensor<4x32xf32>) -> tensor<4x32xf32>
  %y = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<4x32xf32>, tensor<32xf32>) outs(%e : tensor<4x32xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// Cost rule: a matmul between two row reductions keeps them in separate
// kernels (one kernel would need the matmul's result before it exists).
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0, 0)>
#bc = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func.func @no_cycle(
// CHECK: call @no_cycle_k0
// CHECK: linalg.matmul
// CHECK: call @no_cycle_k1
func.func @no_cycle(%x: tensor<8x8xf32>) -> tensor<8x1xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x1xf32>) -> tensor<8x1xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x8xf32>) outs(%f1 : tensor<8x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<8x1xf32>
  %e2 = tensor.empty() : tensor<8x8xf32>
  %n = linalg.generic {indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<8x8xf32>, tensor<8x1xf32>) outs(%e2 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %mm = linalg.matmul ins(%n, %x : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f2 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %s2 = linalg.generic {indexing_maps = [#id, #red, #red], iterator_types = ["parallel", "reduction"]}
      ins(%mm, %s : tensor<8x8xf32>, tensor<8x1xf32>) outs(%f1 : tensor<8x1xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %m, %o : f32
    linalg.yield %r : f32
  } -> tensor<8x1xf32>
  return %s2 : tensor<8x1xf32>
}

// -----

// Cost rule: an op that reads a row kernel's value across rows (here the
// reduced column is read transposed) does not join the row kernel.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
#cross = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @cross_row(
// CHECK: call @cross_row_k0
// CHECK: call @cross_row_k1
// CHECK-DAG: @cross_row_k0{{.*}}mlircap.kernel = "row_reduction"
// CHECK-DAG: @cross_row_k1{{.*}}mlircap.kernel = "pointwise"
func.func @cross_row(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x8xf32>) outs(%f1 : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x8xf32>
  %n = linalg.generic {indexing_maps = [#id, #cross, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<8x8xf32>, tensor<8xf32>) outs(%e2 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  return %n : tensor<8x8xf32>
}

// -----

// A row-reduced value read through a slice at another row (a shift by one:
// `m[:, 1:] = m[:, :-1]` after a row sum, tensor.extract of an extract_slice)
// does not join the row kernel: the kernel holds each row's value only for
// that row (top-p filtering's shifted mask was this row's value on the GPU).
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @shifted_row_read(
// CHECK: call @shifted_row_read_k0
// CHECK: call @shifted_row_read_k1
// CHECK-DAG: @shifted_row_read_k0{{.*}}mlircap.kernel = "row_reduction"
// CHECK-DAG: @shifted_row_read_k1{{.*}}mlircap.kernel = "pointwise"
func.func @shifted_row_read(%x: tensor<8x8xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.0 : f32
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %e1 = tensor.empty() : tensor<8xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x8xf32>) outs(%f1 : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %head = tensor.extract_slice %s[0] [7] [1] : tensor<8xf32> to tensor<7xf32>
  %n = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%s : tensor<8xf32>) outs(%e1 : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 0 : index
    %j = arith.subi %i, %c1 : index
    %in = arith.cmpi ult, %j, %c1 : index
    %k = arith.select %in, %c0, %j : index
    %p = tensor.extract %head[%k] : tensor<7xf32>
    %r = arith.addf %a, %p : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %n : tensor<8xf32>
}

// -----

// The same through a slice that keeps the rows whole and read at the row's own
// index (rotate_half of a row-normalized value: qk-norm then RoPE): one kernel.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
#row = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func.func @own_row_read(
// CHECK-NEXT: call @own_row_read_k0
// CHECK-NEXT: return
// CHECK: @own_row_read_k0{{.*}}mlircap.kernel = "row_reduction"
func.func @own_row_read(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %zero = arith.constant 0.0 : f32
  %c4 = arith.constant 4 : index
  %c0 = arith.constant 0 : index
  %e1 = tensor.empty() : tensor<4xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x8xf32>) outs(%f1 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %n = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<4x8xf32>, tensor<4xf32>) outs(%e2 : tensor<4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %hi = tensor.extract_slice %n[0, 4] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32>
  %rot = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%n : tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %in = arith.cmpi ult, %i, %c4 : index
    %ii = arith.select %in, %i, %c0 : index
    %jin = arith.cmpi ult, %j, %c4 : index
    %jj = arith.select %jin, %j, %c0 : index
    %p = tensor.extract %hi[%ii, %jj] : tensor<4x4xf32>
    %r = arith.addf %a, %p : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %rot : tensor<4x8xf32>
}

// -----

// A slice of a transposed row-normalized value, read at the row's own index,
// reads other rows (element (i, j) of the transpose is row j's): it does not
// join the row kernel.
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @transposed_row_read(
// CHECK: call @transposed_row_read_k0
// CHECK: call @transposed_row_read_k1
func.func @transposed_row_read(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %c8 = arith.constant 8 : index
  %c0 = arith.constant 0 : index
  %e1 = tensor.empty() : tensor<8xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x8xf32>) outs(%f1 : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x8xf32>
  %n = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<8x8xf32>, tensor<8xf32>) outs(%e2 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  %t = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%n : tensor<8x8xf32>) outs(%e2 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<8x8xf32>
  %hi = tensor.extract_slice %t[0, 0] [8, 8] [1, 1] : tensor<8x8xf32> to tensor<8x8xf32>
  %rot = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%n : tensor<8x8xf32>) outs(%e2 : tensor<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %p = tensor.extract %hi[%i, %j] : tensor<8x8xf32>
    %r = arith.addf %a, %p : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  return %rot : tensor<8x8xf32>
}

// -----

// A column reduction is a "reduction" kernel; its elementwise consumer reads
// each reduced element once and is computed by the same thread.
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#v = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @column_mean(
// CHECK-NEXT: call @column_mean_k0
// CHECK-NEXT: return
// CHECK: mlircap.kernel = "reduction"
func.func @column_mean(%x: tensor<8x32xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 8.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
  %s = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<8x32xf32>) outs(%f : tensor<32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  %m = linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%s : tensor<32xf32>) outs(%e : tensor<32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.divf %a, %n : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  return %m : tensor<32xf32>
}

// -----

// Reshapes feeding a kernel are cloned into it (folded into its indexing);
// the kernel argument is the reshape's source.
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @reshape_folded(
// CHECK-NEXT: call @reshape_folded_k0(%arg0) : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: func.func private @reshape_folded_k0
// CHECK: tensor.collapse_shape
// CHECK: linalg.generic
func.func @reshape_folded(%x: tensor<2x4x8xf32>) -> tensor<8x8xf32> {
  %c = tensor.collapse_shape %x [[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
  %e = tensor.empty() : tensor<8x8xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : tensor<8x8xf32>) outs(%e : tensor<8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.tanh %a : f32
    linalg.yield %r : f32
  } -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

// A fill returned as a value is a kernel of its own.
// CHECK-LABEL: func.func @fill_result(
// CHECK-NEXT: call @fill_result_k0()
// CHECK: func.func private @fill_result_k0() -> tensor<4xf32> attributes {mlircap.kernel = "pointwise"}
// CHECK: linalg.fill
func.func @fill_result() -> tensor<4xf32> {
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%one : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %f : tensor<4xf32>
}

// -----

// A reduction result used by the row kernel and returned is a kernel output
// too (row-scalar outputs are written once per row).
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @two_outputs(
// CHECK: %[[R:.*]]:2 = call @two_outputs_k0
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @two_outputs(%x: tensor<4x64xf32>) -> (tensor<4xf32>, tensor<4x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x64xf32>) outs(%f1 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x64xf32>
  %y = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<4x64xf32>, tensor<4xf32>) outs(%e2 : tensor<4x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x64xf32>
  return %s, %y : tensor<4xf32>, tensor<4x64xf32>
}

// -----

// A channel shuffle (groups split, transposed, merged back) in front of a
// convolution that pads its input: the padding's source is a view no single
// stride expresses, so a copy kernel materializes it (the launch plan rejected
// the whole graph: "collapse of a non-contiguous view").
// CHECK-LABEL: func.func @shuffle_pad_conv(
// CHECK: %[[S:.*]] = call @shuffle_pad_conv_k0(%arg0)
// CHECK-NEXT: tensor.pad %[[S]] low[0, 0, 1, 1]
// CHECK: linalg.conv_2d_nchw_fchw
// CHECK: func.func private @shuffle_pad_conv_k0({{.*}} attributes {mlircap.kernel = "pointwise"}
// CHECK: mlircap.materialize
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#sw5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d3, d4)>
func.func @shuffle_pad_conv(%x: tensor<1x4x4x4xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %g = tensor.expand_shape %x [[0], [1, 2], [3], [4]] output_shape [1, 2, 2, 4, 4] : tensor<1x4x4x4xf32> into tensor<1x2x2x4x4xf32>
  %e = tensor.empty() : tensor<1x2x2x4x4xf32>
  %t = linalg.generic {indexing_maps = [#sw5, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%g : tensor<1x2x2x4x4xf32>) outs(%e : tensor<1x2x2x4x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  } -> tensor<1x2x2x4x4xf32>
  %s = tensor.collapse_shape %t [[0], [1, 2], [3], [4]] : tensor<1x2x2x4x4xf32> into tensor<1x4x4x4xf32>
  %p = tensor.pad %s low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %zero : f32
  } : tensor<1x4x4x4xf32> to tensor<1x4x6x6xf32>
  %e2 = tensor.empty() : tensor<1x4x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
      ins(%p, %w : tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) outs(%f : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %c : tensor<1x4x4x4xf32>
}
