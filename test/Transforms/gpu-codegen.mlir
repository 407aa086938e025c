// RUN: mlircap-opt %s --split-input-file --mlircap-form-kernels --mlircap-gpu-codegen --canonicalize --cse | FileCheck %s

// Contiguous f32 elementwise kernel, N % 4 == 0: 128-bit vector loads/stores,
// 256 threads per block, grid = ceil(N / 4 / 256).
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: gpu.module @mlircap_kernels
// CHECK-LABEL: gpu.func @vec4_k0(
// CHECK-SAME: %[[A:.*]]: memref<4096xf32>, %[[B:.*]]: memref<4096xf32>, %[[C:.*]]: memref<4096xf32>) kernel
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: grid = array<i64: 4, 1, 1>
// CHECK-SAME: strategy = "pointwise_vec4"
// CHECK: gpu.thread_id x
// CHECK: gpu.block_id x
// CHECK: memref.extract_aligned_pointer_as_index %[[A]]
// CHECK: memref.extract_aligned_pointer_as_index %[[B]]
// CHECK: memref.extract_aligned_pointer_as_index %[[C]]
// CHECK: scf.if
// CHECK: scf.for
// CHECK: vector.load %[[A]]{{.*}} : memref<4096xf32>, vector<4xf32>
// CHECK: vector.load %[[B]]{{.*}} : memref<4096xf32>, vector<4xf32>
// CHECK: vector.store {{.*}}, %[[C]]{{.*}} : memref<4096xf32>, vector<4xf32>
// CHECK: } else {
// CHECK: scf.for
// CHECK: memref.load %[[A]]
// CHECK: memref.store {{.*}}, %[[C]]
func.func @vec4(%x: tensor<4096xf32>, %y: tensor<4096xf32>) -> tensor<4096xf32> {
  %e = tensor.empty() : tensor<4096xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %y : tensor<4096xf32>, tensor<4096xf32>) outs(%e : tensor<4096xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4096xf32>
  return %0 : tensor<4096xf32>
}

// -----

// Large kernel whose innermost dim is not a multiple of 4: scalar path, grid
// capped at 8 blocks x 132 SMs, and a grid-stride loop by the launched grid
// (grid_stride: the runtime may launch fewer blocks, one wave), so no known
// grid size.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: gpu.func @big_k0
// CHECK-NOT: known_grid_size
// CHECK-SAME: grid = array<i64: 1056, 1, 1>, grid_stride
// CHECK-SAME: strategy = "pointwise"
// CHECK-DAG: %[[N:.*]] = arith.constant 1047552 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: %[[G:.*]] = gpu.grid_dim x
// CHECK: %[[STEP:.*]] = arith.muli %[[G]], %[[C256]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[N]] step %[[STEP]]
// CHECK: arith.remui
// CHECK: memref.load
// CHECK: memref.load
// CHECK: memref.store
func.func @big(%x: tensor<1024x1023xf32>, %b: tensor<1023xf32>) -> tensor<1024x1023xf32> {
  %e = tensor.empty() : tensor<1024x1023xf32>
  %0 = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b : tensor<1024x1023xf32>, tensor<1023xf32>) outs(%e : tensor<1024x1023xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %r = arith.mulf %a, %c : f32
    linalg.yield %r : f32
  } -> tensor<1024x1023xf32>
  return %0 : tensor<1024x1023xf32>
}

// -----

// Broadcast epilogue (x + bias[j]) * scale[i]: x and bias are loaded 4 at a
// time along the innermost dim, scale once per 4 elements.
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @epilogue_k0(
// CHECK-SAME: %[[X:.*]]: memref<4096xf32>, %[[B:.*]]: memref<1024xf32>, %[[S:.*]]: memref<4xf32>, %[[O:.*]]: memref<4096xf32>)
// CHECK-SAME: strategy = "pointwise_vec4"
// CHECK: memref.load %[[S]]
// CHECK: vector.load %[[X]]{{.*}} {alignment = 16 : i64} : memref<4096xf32>, vector<4xf32>
// CHECK: vector.load %[[B]]{{.*}} {alignment = 16 : i64} : memref<1024xf32>, vector<4xf32>
// CHECK-NOT: memref.load
// CHECK: vector.store {{.*}}, %[[O]]{{.*}} {alignment = 16 : i64} : memref<4096xf32>, vector<4xf32>
func.func @epilogue(%x: tensor<4x1024xf32>, %b: tensor<1024xf32>, %s: tensor<4xf32>) -> tensor<4x1024xf32> {
  %e = tensor.empty() : tensor<4x1024xf32>
  %0 = linalg.generic {indexing_maps = [#id, #col, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %b, %s : tensor<4x1024xf32>, tensor<1024xf32>, tensor<4xf32>) outs(%e : tensor<4x1024xf32>) {
  ^bb0(%a: f32, %c: f32, %d: f32, %o: f32):
    %t = arith.addf %a, %c : f32
    %r = arith.mulf %t, %d : f32
    linalg.yield %r : f32
  } -> tensor<4x1024xf32>
  return %0 : tensor<4x1024xf32>
}

// -----

// An input read through a producer of the final generic (here an expand_shape
// of the argument), as a library matmul's [8192, 4096] output reaches the
// GELU of an MLP as [64, 128, 4096]: still one 16-byte vector load of 8 bf16 a
// slot (before: 8 scalar loads, each issued after the last lane's erf).
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: gpu.func @deep_input_k0(
// CHECK-SAME: %[[X:.*]]: memref<{{.*}}xbf16>, %[[O:.*]]: memref<{{.*}}xbf16>)
// CHECK-SAME: strategy = "pointwise_vec8"
// CHECK: scf.if
// CHECK: vector.load %[[X]]{{.*}} {alignment = 16 : i64} : memref<{{.*}}xbf16>, vector<8xbf16>
// CHECK-NOT: memref.load
// CHECK: vector.store {{.*}}, %[[O]]{{.*}} {alignment = 16 : i64} : memref<{{.*}}xbf16>, vector<8xbf16>
// CHECK: } else {
func.func @deep_input(%x: tensor<32x64xbf16>) -> tensor<4x8x64xbf16> {
  %half = arith.constant 5.000000e-01 : f32
  %one = arith.constant 1.000000e+00 : f32
  %ex = tensor.expand_shape %x [[0, 1], [2]] output_shape [4, 8, 64] : tensor<32x64xbf16> into tensor<4x8x64xbf16>
  %eb = tensor.empty() : tensor<4x8x64xbf16>
  %0 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ex : tensor<4x8x64xbf16>) outs(%eb : tensor<4x8x64xbf16>) {
  ^bb0(%b: bf16, %o: bf16):
    %a = arith.extf %b : bf16 to f32
    %e = math.erf %a : f32
    %p = arith.addf %e, %one : f32
    %h = arith.mulf %p, %half : f32
    %r = arith.mulf %a, %h : f32
    %t = arith.truncf %r : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x8x64xbf16>
  return %0 : tensor<4x8x64xbf16>
}

// -----

// Rows in registers: 4096 floats, 512 threads a row, each with one chunk of 8
// consecutive elements: a vector load when the pointers are 16-byte aligned
// (checked at run time), scalar loads otherwise. Warp shuffles, then the
// warp partials through workgroup memory between barriers.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @rowsum_k0
// CHECK-SAME: workgroup(%[[SCRATCH:.*]] : memref<16xf32, #gpu.address_space<workgroup>>, %[[RES:.*]] : memref<1xf32, #gpu.address_space<workgroup>>,
// CHECK-SAME: known_block_size = array<i32: 512, 1, 1>
// CHECK-SAME: grid = array<i64: 2, 1, 1>
// CHECK-SAME: strategy = "row_block_regs_vec8"
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: scf.if
// CHECK-NOT: scf.for
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<8192xf32>, vector<8xf32>
// CHECK-COUNT-8: vector.extract
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.store {{.*}}, %[[SCRATCH]]
// CHECK: gpu.barrier
// CHECK: memref.load %[[SCRATCH]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.store {{.*}}, %[[RES]]
// CHECK: gpu.barrier
// CHECK: memref.load %[[RES]]
// CHECK: } else {
// CHECK-NOT: vector.load
// CHECK-COUNT-8: memref.load {{.*}} : memref<8192xf32>
func.func @rowsum(%x: tensor<2x4096xf32>) -> tensor<2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<2x4096xf32>) outs(%f : tensor<2xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<2xf32>
  return %s : tensor<2xf32>
}

// -----

// Rows too long for registers (more than 32 elements a thread): a block of
// 1024 threads per row, a strided loop per reduction.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @longrow_k0
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK-SAME: strategy = "row_block"
// CHECK: scf.for {{.*}} iter_args
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: gpu.barrier
func.func @longrow(%x: tensor<2x65536xf32>) -> tensor<2xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2xf32>) -> tensor<2xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<2x65536xf32>) outs(%f : tensor<2xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<2xf32>
  return %s : tensor<2xf32>
}

// -----

// Rows of 128: 16 threads a row (one chunk of 8 each), 16 rows per
// 256-thread block, shuffles within the 16 lanes, no shared memory.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @rowmax_k0
// CHECK-NOT: workgroup
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: grid = array<i64: 1, 1, 1>
// CHECK-SAME: strategy = "row_subwarp_regs_vec8"
// CHECK: arith.maximumf
// CHECK-NOT: %c16_i32, %c32_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c8_i32, %c32_i32 : f32
// CHECK: gpu.shuffle xor %{{.*}}, %c4_i32, %c32_i32 : f32
// CHECK: gpu.shuffle xor %{{.*}}, %c2_i32, %c32_i32 : f32
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return
func.func @rowmax(%x: tensor<16x128xf32>) -> tensor<16xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<16xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x128xf32>) outs(%f : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<16xf32>
  return %s : tensor<16xf32>
}

// -----

// f64 partials are shuffled as two 32-bit halves.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @sum64_k0
// CHECK-SAME: strategy = "row_subwarp_regs_vec8"
// CHECK: arith.bitcast %{{.*}} : f64 to i64
// CHECK: arith.trunci %{{.*}} : i64 to i32
// CHECK: gpu.shuffle xor %{{.*}} : i32
// CHECK: gpu.shuffle xor %{{.*}} : i32
// CHECK: arith.bitcast %{{.*}} : i64 to f64
func.func @sum64(%x: tensor<4x128xf64>) -> tensor<4xf64> {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4xf64>
  %f = linalg.fill ins(%zero : f64) outs(%e : tensor<4xf64>) -> tensor<4xf64>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x128xf64>) outs(%f : tensor<4xf64>) {
  ^bb0(%a: f64, %o: f64):
    %r = arith.addf %a, %o : f64
    linalg.yield %r : f64
  } -> tensor<4xf64>
  return %s : tensor<4xf64>
}

// -----

// Short rows (16): 2 threads per row with 8 elements each, shuffles stay
// within the 2 lanes; rows past the end are clamped and do not store.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @short_k0
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: grid = array<i64: 1, 1, 1>
// CHECK-SAME: strategy = "row_subwarp_regs_vec8"
// CHECK: arith.minui
// CHECK-NOT: %c2_i32, %c32_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK-NOT: gpu.shuffle
// CHECK: scf.if
// CHECK: memref.store
func.func @short(%x: tensor<100x16xf32>) -> tensor<100xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<100xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<100xf32>) -> tensor<100xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<100x16xf32>) outs(%f : tensor<100xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<100xf32>
  return %s : tensor<100xf32>
}

// -----

// Long column reduction, the innermost loop parallel: adjacent threads take
// adjacent columns, 8 columns a block where 32 would leave SMs idle, 32
// slices each; partials combined by a tree in workgroup memory (5 halvings).
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: gpu.func @colsum_k0
// CHECK-SAME: workgroup(%[[P:.*]] : memref<256xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: grid = array<i64: 4, 1, 1>
// CHECK-SAME: strategy = "reduction_split"
// CHECK: arith.remui %{{.*}}, %c8
// CHECK: scf.for %{{.*}} = %{{.*}} to %c64 step %c32 iter_args
// CHECK: memref.store %{{.*}}, %[[P]]
// CHECK-COUNT-5: gpu.barrier
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: memref.load %[[P]]
// CHECK: memref.store
// CHECK-NOT: gpu.barrier
// CHECK-NOT: gpu.shuffle
func.func @colsum(%x: tensor<64x32xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
  %s = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<64x32xf32>) outs(%f : tensor<32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  return %s : tensor<32xf32>
}

// -----

// BatchNorm's statistics of an NCHW tensor: the innermost loop reduces, so a
// column's slices are adjacent threads reading adjacent elements (coalesced
// rows of H*W); 64 slices for 256 elements, 4 columns a block.
#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#c = affine_map<(d0, d1, d2) -> (d1)>
// CHECK-LABEL: gpu.func @chanstats_k0
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: grid = array<i64: 6, 1, 1>
// CHECK-SAME: strategy = "reduction_split_rows"
// CHECK: arith.divui %{{.*}}, %c64
// CHECK: scf.for %{{.*}} = %{{.*}} to %c256 step %c64 iter_args
// CHECK-COUNT-6: gpu.barrier
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
func.func @chanstats(%x: tensor<4x24x64xf32>) -> tensor<24xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<24xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<24xf32>) -> tensor<24xf32>
  %s = linalg.generic {indexing_maps = [#x, #c], iterator_types = ["reduction", "parallel", "reduction"]}
      ins(%x : tensor<4x24x64xf32>) outs(%f : tensor<24xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<24xf32>
  return %s : tensor<24xf32>
}

// -----

// A long bf16 channel reduction (17 x 1024 elements a channel, 1024 slices):
// on 16-byte aligned buffers each slice reads chunks of 8 elements with one
// vector load, a partial per lane (2176 chunks: no whole round of 4 chunks a
// slice). Otherwise (scalar loads) each slice keeps 8 independent partials
// over whole rounds of 8192 elements (8 loads in flight a thread), the last
// 1024 elements go into the first partial, and the partials combine pairwise
// before the tree in workgroup memory.
#xl = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#cl = affine_map<(d0, d1, d2) -> (d1)>
// CHECK-LABEL: gpu.func @longstats_k0
// CHECK-SAME: strategy = "reduction_split_rows_vec8"
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c2176 step %c1024 iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<69632xbf16>, vector<8xbf16>
// CHECK-NOT: memref.load
// CHECK-COUNT-7: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16384 step %c8192 iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK: scf.for %{{.*}} = %{{.*}} to %c17408 step %c1024 iter_args(%{{.*}} = %{{.*}}#0) -> (f32)
// CHECK-COUNT-7: arith.addf
// CHECK: gpu.barrier
func.func @longstats(%x: tensor<17x4x1024xbf16>) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#xl, #cl], iterator_types = ["reduction", "parallel", "reduction"]}
      ins(%x : tensor<17x4x1024xbf16>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %w = arith.extf %a : bf16 to f32
    %r = arith.addf %w, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// Whole rounds of vector chunks (9 x 8192 bf16 a channel: 9216 chunks of 8):
// each round issues its 4 chunks' 16-byte loads before their lanes' adds
// (into 8 partials, one per lane), the last 1024 chunks one at a time.
#xv = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#cv = affine_map<(d0, d1, d2) -> (d1)>
// CHECK-LABEL: gpu.func @vecrounds_k0
// CHECK-SAME: strategy = "reduction_split_rows_vec8"
// CHECK: scf.for %{{.*}} = %{{.*}} to %c8192 step %c4096 iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK-COUNT-4: vector.load %{{.*}} : memref<294912xbf16>, vector<8xbf16>
// CHECK-NOT: vector.load
// CHECK: arith.addf
// CHECK: scf.yield
// CHECK: scf.for %{{.*}} = %{{.*}} to %c9216 step %c1024 iter_args
// CHECK: vector.load
// CHECK: } else {
func.func @vecrounds(%x: tensor<9x4x8192xbf16>) -> tensor<4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#xv, #cv], iterator_types = ["reduction", "parallel", "reduction"]}
      ins(%x : tensor<9x4x8192xbf16>) outs(%f : tensor<4xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %w = arith.extf %a : bf16 to f32
    %r = arith.addf %w, %o : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// Three long rows (few outputs): a block of 1024 threads per output; the sum
// in f64 converted to f32 by an elementwise op of the output's shape is
// evaluated by the output's thread (it ran one thread per output before).
#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#c = affine_map<(d0, d1, d2) -> (d1)>
#o = affine_map<(d0) -> (d0)>
// CHECK-LABEL: gpu.func @fewrows_k0
// CHECK-SAME: workgroup(%{{.*}} : memref<1024xf64, #gpu.address_space<workgroup>>)
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK-SAME: grid = array<i64: 3, 1, 1>
// CHECK-SAME: strategy = "reduction_split_rows_vec4"
// CHECK: scf.for %{{.*}} = %{{.*}} to %c32768 step %c1024 iter_args
// CHECK: arith.truncf %{{.*}} : f64 to f32
func.func @fewrows(%x: tensor<8x3x4096xf32>) -> (tensor<3xf64>, tensor<3xf32>) {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%zero : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %s = linalg.generic {indexing_maps = [#x, #c], iterator_types = ["reduction", "parallel", "reduction"]}
      ins(%x : tensor<8x3x4096xf32>) outs(%f : tensor<3xf64>) {
  ^bb0(%a: f32, %o: f64):
    %w = arith.extf %a : f32 to f64
    %r = arith.addf %w, %o : f64
    linalg.yield %r : f64
  } -> tensor<3xf64>
  %e32 = tensor.empty() : tensor<3xf32>
  %t = linalg.generic {indexing_maps = [#o, #o], iterator_types = ["parallel"]}
      ins(%s : tensor<3xf64>) outs(%e32 : tensor<3xf32>) {
  ^bb0(%a: f64, %o: f32):
    %r = arith.truncf %a : f64 to f32
    linalg.yield %r : f32
  } -> tensor<3xf32>
  return %s, %t : tensor<3xf64>, tensor<3xf32>
}

// -----

// Short column reduction: one thread per output element, serial loop.
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: gpu.func @colshort_k0
// CHECK-SAME: strategy = "reduction_naive"
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %c0 to %c16 step %c1 iter_args
// CHECK: memref.load
// CHECK: arith.addf
// CHECK-NOT: gpu.shuffle
func.func @colshort(%x: tensor<16x32xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
  %s = linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<16x32xf32>) outs(%f : tensor<32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<32xf32>
  return %s : tensor<32xf32>
}

// -----

// Booleans are one byte per element (memref of i8).
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: gpu.func @cmp_k0(%{{.*}}: memref<10xf32>, %{{.*}}: memref<10xi8>)
// CHECK: arith.cmpf ogt
// CHECK: arith.extui %{{.*}} : i1 to i8
// CHECK: memref.store %{{.*}} : memref<10xi8>
func.func @cmp(%x: tensor<10xf32>) -> tensor<10xi1> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<10xi1>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<10xf32>) outs(%e : tensor<10xi1>) {
  ^bb0(%a: f32, %o: i1):
    %r = arith.cmpf ogt, %a, %zero : f32
    linalg.yield %r : i1
  } -> tensor<10xi1>
  return %0 : tensor<10xi1>
}

// -----

// A static slice and a transpose are folded into the kernel's indexing: the
// kernel reads the full source at offset + index * stride.
#id = affine_map<(d0, d1) -> (d0, d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: gpu.func @slice_k0(
// CHECK-SAME: %[[SRC:.*]]: memref<128xf32>, %{{.*}}: memref<16xf32>)
// CHECK: scf.for
// CHECK: %[[I:.*]] = arith.remui
// CHECK: %[[J:.*]] = arith.divui
// CHECK: %[[R:.*]] = arith.muli %[[I]], %c2
// CHECK: arith.addi %[[R]], %c1
// CHECK: arith.addi %[[J]], %c1
// CHECK: memref.load %[[SRC]]
func.func @slice(%x: tensor<8x16xf32>) -> tensor<4x4xf32> {
  %s = tensor.extract_slice %x[1, 1] [4, 4] [2, 1] : tensor<8x16xf32> to tensor<4x4xf32>
  %e = tensor.empty() : tensor<4x4xf32>
  %0 = linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// argmax (two results, not a plain combiner) falls back to the serial
// reduction; both results are written.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @argmax_k0(%{{.*}}: memref<256xf32>, %{{.*}}: memref<8xf32>, %{{.*}}: memref<8xi64>)
// CHECK-SAME: strategy = "reduction_naive"
// CHECK: scf.for {{.*}} iter_args({{.*}}, {{.*}}) -> (f32, i64)
// CHECK: memref.store {{.*}} : memref<8xf32>
// CHECK: memref.store {{.*}} : memref<8xi64>
func.func @argmax(%x: tensor<8x32xf32>) -> (tensor<8xf32>, tensor<8xi64>) {
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<8xf32>
  %ei = tensor.empty() : tensor<8xi64>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %fi = linalg.fill ins(%c0 : i64) outs(%ei : tensor<8xi64>) -> tensor<8xi64>
  %r:2 = linalg.generic {indexing_maps = [#id, #red, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<8x32xf32>) outs(%f, %fi : tensor<8xf32>, tensor<8xi64>) {
  ^bb0(%a: f32, %o: f32, %oi: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %a, %o : f32
    %gt = arith.cmpf ogt, %a, %o : f32
    %s = arith.select %gt, %ii, %oi : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<8xf32>, tensor<8xi64>)
  return %r#0, %r#1 : tensor<8xf32>, tensor<8xi64>
}

// -----

// Full reduction to a 0-d tensor: one block reduces everything.
#id = affine_map<(d0) -> (d0)>
#s = affine_map<(d0) -> ()>
// CHECK-LABEL: gpu.func @total_k0(%{{.*}}: memref<8192xf32>, %{{.*}}: memref<1xf32>)
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK-SAME: grid = array<i64: 1, 1, 1>
// CHECK-SAME: strategy = "row_block_regs_vec8"
// CHECK: gpu.barrier
func.func @total(%x: tensor<8192xf32>) -> tensor<f32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [#id, #s], iterator_types = ["reduction"]}
      ins(%x : tensor<8192xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Millions of short rows (max pooling's 3x3 windows): a thread a row, the 9
// elements in registers, no shuffles (half as many lanes would still fill
// every SM). The max with the -inf init folds away: 8 maximumf.
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: gpu.func @windows_k0
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: grid = array<i64: 7813, 1, 1>
// CHECK-SAME: strategy = "row_thread_regs"
// CHECK-COUNT-8: arith.maximumf
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return
func.func @windows(%x: tensor<2000000x9xf32>) -> tensor<2000000xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<2000000xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<2000000xf32>) -> tensor<2000000xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<2000000x9xf32>) outs(%f : tensor<2000000xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<2000000xf32>
  return %s : tensor<2000000xf32>
}

// -----

// A max over loops (rows, 1, n) (torch-mlir's keepdim max, expanded by fusion)
// beside a sum over (rows, n): one row space up to a unit dim, so the row stays
// in registers. Each element of x is loaded once (one vector load of 8, or 8
// scalar loads when misaligned) for both reductions and the output.
#m3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#bc = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: gpu.func @keepdim_softmax_k0
// CHECK-SAME: strategy = "row_warp_regs_vec8"
// CHECK: vector.load
// CHECK-NOT: vector.load
// CHECK-COUNT-8: memref.load %arg0
// CHECK-NOT: memref.load
// CHECK: gpu.return
func.func @keepdim_softmax(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<64x1xf32>
  %f1 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %xe = tensor.expand_shape %x [[0, 1], [2]] output_shape [64, 1, 256] : tensor<64x256xf32> into tensor<64x1x256xf32>
  %m = linalg.generic {indexing_maps = [#m3, #r3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%xe : tensor<64x1x256xf32>) outs(%f1 : tensor<64x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.maximumf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<64x1xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64x1xf32>) -> tensor<64x1xf32>
  %s = linalg.generic {indexing_maps = [#id, #bc, #bc], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : tensor<64x256xf32>, tensor<64x1xf32>) outs(%f2 : tensor<64x1xf32>) {
  ^bb0(%a: f32, %mx: f32, %o: f32):
    %d = arith.subf %a, %mx : f32
    %ex = math.exp %d : f32
    %r = arith.addf %ex, %o : f32
    linalg.yield %r : f32
  } -> tensor<64x1xf32>
  %e2 = tensor.empty() : tensor<64x256xf32>
  %y = linalg.generic {indexing_maps = [#id, #bc, #bc, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m, %s : tensor<64x256xf32>, tensor<64x1xf32>, tensor<64x1xf32>) outs(%e2 : tensor<64x256xf32>) {
  ^bb0(%a: f32, %mx: f32, %sum: f32, %o: f32):
    %d = arith.subf %a, %mx : f32
    %ex = math.exp %d : f32
    %r = arith.divf %ex, %sum : f32
    linalg.yield %r : f32
  } -> tensor<64x256xf32>
  return %y : tensor<64x256xf32>
}

// -----

// NCHW channel statistics (a reduction over N, H and W): the load's address
// joins (h, w), split off the reduction index r by delinearize, back into
// r % (H * W) instead of (r / W % H) * W + r % W (half the integer work a load).
#x4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#c4 = affine_map<(d0, d1, d2, d3) -> (d1)>
// CHECK-LABEL: gpu.func @nchwstats_k0
// CHECK-SAME: strategy = "reduction_split_rows"
// CHECK: scf.for %[[R:.*]] = %{{.*}} to %c240 step %c64
// CHECK-NOT: arith.remui %[[R]], %c10
// CHECK: arith.remui %[[R]], %c60
// CHECK: memref.load %arg0
func.func @nchwstats(%x: tensor<4x8x6x10xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#x4, #c4], iterator_types = ["reduction", "parallel", "reduction", "reduction"]}
      ins(%x : tensor<4x8x6x10xf32>) outs(%f : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

// torch-mlir's adaptive_avg_pool3d: one generic yields the window sums,
// indexed by (batch, position), and each window's element count, indexed by
// position only. The count does not depend on the batch loop, so the first
// batch iteration gives it (before: 'output indexing map is not invertible').
// CHECK-LABEL: gpu.func @count_beside_sum_k0
// CHECK: arith.sitofp
func.func @count_beside_sum(%x: tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<2xf32>) {
  %cst = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<3x2xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e0 : tensor<3x2xf32>) -> tensor<3x2xf32>
  %e1 = tensor.empty() : tensor<2xf32>
  %w = tensor.empty() : tensor<2xi1>
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
    %n = arith.index_cast %j : index to i64
    %nf = arith.sitofp %n : i64 to f32
    linalg.yield %s, %nf : f32, f32
  } -> (tensor<3x2xf32>, tensor<2xf32>)
  return %r#0, %r#1 : tensor<3x2xf32>, tensor<2xf32>
}
