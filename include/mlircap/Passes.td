//===-- Passes.td - mlircap pass declarations --------------*- tablegen -*-===//
//
// Every mlircap pass is declared here with a description and before/after IR.
// One pass per file in lib/Transforms/. Pipelines are in lib/Pipelines/.
//
//===----------------------------------------------------------------------===//

#ifndef MLIRCAP_PASSES
#define MLIRCAP_PASSES

include "mlir/Pass/PassBase.td"

def MlircapEmitCInterface : Pass<"mlircap-emit-c-interface", "::mlir::ModuleOp"> {
  let summary = "Ask for a C-interface wrapper on every public function";
  let description = [{
    Sets the `llvm.emit_c_interface` unit attribute on every public
    `func.func` that has a body, so that `convert-func-to-llvm` emits
    `_mlir_ciface_<name>` taking pointers to memref descriptors. The CPU
    runtime calls these wrappers with descriptors built over torch tensors.

    Before:
    ```mlir
    func.func @main(%arg0: memref<4xf32>) { ... }
    ```
    After:
    ```mlir
    func.func @main(%arg0: memref<4xf32>) attributes {llvm.emit_c_interface} { ... }
    ```
  }];
}

def MlircapGeneralizeElementwise
    : Pass<"mlircap-generalize-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Turn fusible named linalg ops into linalg.generic";
  let description = [{
    Elementwise fusion works on `linalg.generic`. This pass generalizes the
    named ops that are data movement or pointwise math (`linalg.transpose`,
    `linalg.broadcast`, `linalg.map`, `linalg.elementwise`, `linalg.add`, ...)
    and leaves the ops that mlircap executes as library calls or keeps whole
    (contractions, convolutions, pooling, `linalg.fill`) untouched.

    Before:
    ```mlir
    %t = linalg.transpose ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
    ```
    After:
    ```mlir
    %t = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>,
                                          affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) { ^bb0(%in: f32, %out: f32): linalg.yield %in : f32 }
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def MlircapFuseElementwise
    : Pass<"mlircap-fuse-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Fuse producer linalg.generic ops into their consumers";
  let description = [{
    Producer-consumer fusion of `linalg.generic` ops on tensors: an
    elementwise producer is inlined into the consumer's region, so the
    intermediate tensor is never materialized. Reductions absorb their
    elementwise producers (e.g. `x - max` feeding `sum(exp(.))`).

    Cost rule (when *not* to fuse):
    * the producer has other users: fusing would recompute it in every
      consumer and still materialize it for the others (skipped unless the
      producer is a cheap broadcast/transpose/copy with no arithmetic,
      whose recomputation is free, or a single widening conversion such as
      torch-mlir's f32 -> f64 extension feeding var_mean's two reductions,
      which costs one conversion per element where materializing it costs a
      wide tensor written and read back; a narrowing one stays materialized,
      narrow); in a second round, once the first has converged, a few arith
      ops on one full-size operand and broadcast ones (a convolution's bias
      add) whose readers are all generics are recomputed in each of them:
      they read the full-size operand instead of the result, no more bytes,
      and the result is never written (two full-size operands, a residual
      add, would double the reads and stay materialized). A widening
      conversion read through a `tensor.collapse_shape`/`expand_shape`
      moves below it (one copy per reader), and one read by `tensor.extract`
      in another generic's body (a pooling window after
      mlircap-tensor-to-generic) becomes the extract of its narrow input and
      the conversion: every reader then converts the narrow element itself
      and the wide tensor is never written;
    * the fused op would take more than `max-operands` inputs (register
      pressure and argument count of the resulting kernel);
    * the producer is a reduction (its result is needed whole).

    Before:
    ```mlir
    %0 = linalg.generic {...} ins(%a, %b) outs(%e) { arith.addf }
    %1 = linalg.generic {...} ins(%0) outs(%e) { math.exp }
    ```
    After:
    ```mlir
    %1 = linalg.generic {...} ins(%a, %b) outs(%e) { arith.addf; math.exp }
    ```
  }];
  let options = [
    Option<"maxOperands", "max-operands", "unsigned", /*default=*/"16",
           "Do not fuse if the fused op would have more inputs than this">
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::affine::AffineDialect"];
}

def MlircapDropAsserts : Pass<"mlircap-drop-asserts", "::mlir::func::FuncOp"> {
  let summary = "Remove cf.assert runtime checks (GPU path)";
  let description = [{
    torch-mlir guards some ops with `cf.assert` (embedding index bounds,
    non-empty tensors), sometimes in a `linalg.generic` without results that
    only evaluates the checks. On the GPU a failed assert traps and poisons
    the CUDA context, and the checks cost a kernel launch each, so the GPU
    path removes every `cf.assert` and the result-less generics that become
    empty. The CPU pipeline keeps them.

    Before:
    ```mlir
    linalg.generic {...} ins(%var : tensor<4x1x1xf32>) {
    ^bb0(%in: f32):
      %0 = arith.cmpf one, %in, %cst : f32
      cf.assert %0, "unimplemented: tensor with zero element"
      linalg.yield
    }
    ```
    After: (nothing)
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def MlircapLibraryInit : Pass<"mlircap-library-init", "::mlir::func::FuncOp"> {
  let summary = "Make library ops (matmul, conv) accumulate into a zero fill";
  let description = [{
    The runtime executes `linalg.matmul`, `linalg.batch_matmul` and
    `linalg.conv_2d_nchw_fchw` as library calls that fully write their
    output; the init operand is never read. When the init is not a
    `linalg.fill` with zero, this pass gives the op a zero-filled init and
    adds the original init with an elementwise `linalg.generic` after it.
    Elementwise fusion then merges that add into the op's epilogue kernel
    (bias, activation, residual), so it costs nothing extra.

    In a module with the unit attribute `mlircap.conv_bias` (the CPU launch
    plan sets it), a library convolution whose init broadcasts a 1-D bias
    along its channel dim (dim 1 NCHW, dim 3 NHWC; same element type) keeps
    it as its init: a broadcast generic of its own marked `mlircap.conv_bias`,
    which elementwise fusion leaves alone and the launch plan turns into the
    convolution step's third operand. The runtime passes it to torch's conv2d,
    so oneDNN adds it inside its accumulation as eager does (added after the
    convolution, results were one unit in the last place off eager's, and the
    epilogue kernel read the bias); the epilogue (activation, residual) stays
    fused after it.

    Before:
    ```mlir
    %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>)
                       outs(%bias : tensor<4x16xf32>) -> tensor<4x16xf32>
    ```
    After:
    ```mlir
    %zero = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
    %m = linalg.matmul ins(%a, %b : ...) outs(%zero : tensor<4x16xf32>) -> tensor<4x16xf32>
    %r = linalg.generic {... ["parallel", "parallel"]} ins(%m, %bias : ...) outs(%e : ...) {
      ^bb0(%x: f32, %y: f32, %o: f32):
        %s = arith.addf %x, %y : f32
        linalg.yield %s : f32
    } -> tensor<4x16xf32>
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def MlircapMatmulBias : Pass<"mlircap-matmul-bias", "::mlir::func::FuncOp"> {
  let summary = "Library matmuls take a column bias added to their result as torch.addmm";
  let description = [{
    torch-mlir lowers `aten.linear` and `aten.addmm` as a 2-D matmul from a
    zero fill, then an elementwise add of a 1-D bias along the result's
    columns; for bf16/f16 operands the matmul result is f32 and the sum is
    rounded once (eager's addmm). In a module with the unit attribute
    `mlircap.matmul_bias` (the runtime marks the IR of CPU and GPU launch plans
    with it, unless MLIRCAP_MATMUL_BIAS=0), such
    a matmul (`linalg.matmul`, transposed-B included) whose one user is that
    add takes the bias as its init: a broadcast generic of its own marked
    `mlircap.matmul_bias`, which elementwise fusion leaves alone and the
    launch plan turns into the matmul step's third operand. The runtime runs
    the step as `torch.addmm(bias, a, b)`, eager's own call (cuBLASLt adds the
    bias in its epilogue, oneDNN/MKL in its accumulation), and the add is gone
    from the epilogue kernel (or the kernel itself, where it was all there was).

    With bf16/f16 operands, a bias that is the same narrow values extended and
    a sum that is only rounded back to that type, the matmul's result is
    stored narrow (half the bytes written and read back; before, the f32
    result went to a kernel that added the bias and rounded), extended back
    for its users as mlircap-narrow-library-operands does. Anything else (a
    wide bias with narrow operands, a sum used wide, more users of the matmul)
    is left as it is. Runs after mlircap-library-init, so every library init
    it sees is a zero fill.

    Before:
    ```mlir
    %m = linalg.matmul ins(%a, %b : tensor<4x8xbf16>, tensor<8x16xbf16>)
                       outs(%zero : tensor<4x16xf32>) -> tensor<4x16xf32>
    %s = linalg.generic {indexing_maps = [(d0, d1) -> (d0, d1), (d0, d1) -> (d1),
                                          (d0, d1) -> (d0, d1)], ...}
        ins(%m, %bias_f32 : tensor<4x16xf32>, tensor<16xf32>) ... { arith.addf }
    %r = linalg.generic ... ins(%s : tensor<4x16xf32>) ... { arith.truncf to bf16 }
    ```
    After:
    ```mlir
    %i = linalg.generic {... (d0, d1) -> (d1), (d0, d1) -> (d0, d1) ...}
        ins(%bias : tensor<16xbf16>) outs(%e : tensor<4x16xbf16>) attrs = {mlircap.matmul_bias}
    %m = linalg.matmul ins(%a, %b : ...) outs(%i : tensor<4x16xbf16>) -> tensor<4x16xbf16>
    %s = linalg.generic ... ins(%m : tensor<4x16xbf16>) ... { arith.extf to f32 }
    %r = linalg.generic ... ins(%s : tensor<4x16xf32>) ... { arith.truncf to bf16 }
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def MlircapConvChannelsLast
    : Pass<"mlircap-conv-channels-last", "::mlir::func::FuncOp"> {
  let summary = "Library convolutions in NHWC, activations between them in NHWC (GPU)";
  let description = [{
    cuDNN's bf16/f16 convolutions run NHWC kernels; with NCHW tensors torch
    transposes the input in and the result out on every call. This pass
    rewrites each library `linalg.conv_2d_nchw_fchw` (static shapes, after
    mlircap-library-init) as `linalg.conv_2d_nhwc_fhwc` between transposes
    (data-movement generics; a zero spatial `tensor.pad` of the input moves
    to the NHWC side), then pushes each input transpose up through the
    elementwise generics producing it (their loops are permuted, so they
    write NHWC with identity indexing) until it meets the transpose out of
    the previous convolution, where the two cancel; they also pass through
    static paddings, `tensor.concat` (each operand transposed, the concat
    dim permuted: UNet's skip connections) and generics with reduction loops
    after their result's (max pooling). Reductions reading such a result with the identity map
    (GroupNorm's per-channel spatial sums) get their loops permuted to read
    it in NHWC order (columns of contiguous channels); a partial result whose
    dims are then out of loop order is written so and read through a
    transpose, which the next reduction absorbs the same way. A convolution
    whose result is read, within a few elementwise ops, by anything else (a
    reshape such as GroupNorm's groups) stays NCHW: that reader would read
    NHWC data strided, except a transpose (ConvNeXt's permute to
    channels-last): it is pushed back into the convolution's result, where it
    composes with the transpose out of it. Library
    `linalg.depthwise_conv_2d_nchw_chw` becomes
    `linalg.depthwise_conv_2d_nhwc_hwc` (filter (kh, kw, C)) the same way,
    marked `mlircap.library_depthwise` (the library step
    conv2d_depthwise_nhwc_hwc: cuDNN's NHWC depthwise kernels; other NHWC
    depthwise convolutions are compiled into kernels as before).
    A generic a transpose is pushed into is computed once, in the new layout:
    its other readers (generics, returns) read a transposed view of the moved
    result (`mlircap.from_nhwc`), not a second copy in the old layout
    (ConvNeXt's residual stream, read by the next convolution and by the
    residual add). A model's own 4-D transpose (LayerNorm2d's permute to
    channels-last) is pushed into its producers when every full-size operand
    within a few elementwise ops is a transpose it cancels with.
    Function results that would be (views of) transposed
    views of an NHWC tensor are copied out
    (`mlircap.materialize`): callers get NCHW-contiguous results as from
    eager. A module with the unit attribute `mlircap.nchw_convs` is left
    unchanged (MLIRCAP_GPU_CHANNELS_LAST=0).

    Before:
    ```mlir
    %r = linalg.generic {maps = [id, id]} ins(%a) outs(%e)   // relu
    %c = linalg.conv_2d_nchw_fchw ins(%r, %w : tensor<1x8x16x16xbf16>, tensor<8x8x1x1xbf16>)
           outs(%zero : tensor<1x8x16x16xbf16>)
    ```
    After:
    ```mlir
    %at = linalg.generic {maps = [(n,h,w,c) -> (n,c,h,w), id]} ins(%a)   // a in NHWC
    %r = linalg.generic {maps = [id, id]} ins(%at) outs(%e2)              // relu in NHWC
    %wt = linalg.generic {maps = [(f,h,w,c) -> (f,c,h,w), id]} ins(%w)
    %ct = linalg.conv_2d_nhwc_fhwc ins(%r, %wt) outs(%zero2 : tensor<1x16x16x8xbf16>)
    %c = linalg.generic {maps = [(n,c,h,w) -> (n,h,w,c), id]} ins(%ct)   // view
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def MlircapTensorToGeneric : Pass<"mlircap-tensor-to-generic", "::mlir::func::FuncOp"> {
  let summary = "Turn tensor.pad, tensor.insert_slice and tensor.concat into linalg.generic";
  let description = [{
    Padding and slice insertion (torch's `cat`) become elementwise generics
    over the result that read the source with `tensor.extract` at clamped
    indices and select the padding value (or the destination element) outside
    the source's bounds. `tensor.concat` is first decomposed into
    `tensor.insert_slice`s. The generics fuse like any elementwise op (a chain
    of insert_slices becomes one kernel).
    A zero padding of the spatial dims (symmetric) that only library
    convolutions read stays a `tensor.pad`: kernel formation leaves it in the
    caller and the launch plan hands the convolution its source and the
    padding (cuDNN/oneDNN pad themselves), so no kernel writes the padded
    copy and the producer keeps identity indexing (vectorizable).
    Only static shapes, static offsets and unit strides are handled; anything
    else is left for kernel formation to reject.

    Before:
    ```mlir
    %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
    ^bb0(%i: index, %j: index, %k: index, %l: index):
      tensor.yield %zero : f32
    } : tensor<1x4x8x8xf32> to tensor<1x4x10x10xf32>
    ```
    After:
    ```mlir
    %p = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
         outs(%e : tensor<1x4x10x10xf32>) {
    ^bb0(%out: f32):
      // %i2 = linalg.index 2 - 1, in bounds iff %i2 ult 8 (same for dim 3)
      %v = tensor.extract %x[%c0, %i1, %i2c, %i3c] : tensor<1x4x8x8xf32>
      %r = arith.select %inbounds, %v, %zero : f32
      linalg.yield %r : f32
    } -> tensor<1x4x10x10xf32>
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

def MlircapFormKernels : Pass<"mlircap-form-kernels", "::mlir::ModuleOp"> {
  let summary = "Group fused linalg ops into kernels and outline each into a function";
  let description = [{
    Runs after elementwise fusion. Decides which ops execute together in one
    GPU kernel and outlines every kernel into a private `func.func` named
    `<caller>_k<N>` with the attribute `mlircap.kernel = "<kind>"`; the caller
    calls it with `func.call`. Kinds:

    * `"row_reduction"`: row reductions (all parallel loops, then all
      reduction loops, one result, a recognized associative combiner) that
      have the same row count and row length, together with the elementwise
      ops that read their results within the same row (and loose elementwise
      producers of the row). Softmax, layernorm, RMSnorm, mean/var over the
      last dim each become one kernel: one block per row.
    * `"pointwise"`: one elementwise generic (a fused chain with its
      broadcasts, transposes and reshapes), e.g. the epilogue of a matmul
      (bias + activation + residual). A padding / slice-insertion generic
      joins the elementwise kernel producing its source (relu + pad), and a
      materializing copy joins the kernel producing the source of its views
      (qkv bias + head split).
    * `"reduction"`: any other generic with reduction loops (column
      reductions, pooling windows, argmax, contractions without a library
      call), with the elementwise consumers that read each reduced element
      exactly once (mean = sum / n).

    Operands of library ops and results of the function must be one strided
    view of a contiguous value (the plan's "view"). A chain of reshapes /
    slices / transposes that no strided view expresses (heads split by a
    transpose, then batch dims merged) gets a copy generic marked
    `mlircap.materialize`, which a kernel writes.

    Library ops (`linalg.matmul`, `linalg.batch_matmul`, their transpose-B
    forms, `linalg.conv_2d_nchw_fchw`) stay in the caller, as do zero fills
    used only as their init and data-movement generics (transpose/broadcast)
    used only by them (the plan builder turns those into strided views).
    Fills, `tensor.empty`, splat constants, scalar arithmetic, reshapes,
    static slices and data-movement generics are cloned into every kernel
    that reads them: they cost index arithmetic, not memory traffic. A
    `linalg.fill` initializing a reduction therefore lands in the
    reduction's kernel.

    Cost rule (when not to fuse): an op joins a row kernel only if all its
    reads of the kernel's values stay within one row (the row dims of the
    value are indexed by exactly the row loops), its iteration space is
    (rows) or (rows x row length), and joining creates no cycle through an op
    outside the kernel (e.g. a matmul between two reductions keeps them
    apart). Elementwise producers used by several consumers are not fused by
    `mlircap-fuse-elementwise` (see its cost rule); they are recomputed inside
    a row kernel when they belong to it and materialized otherwise.

    A value that other kernels read only at gathered points (every use a
    `tensor.extract` in another kernel's body: nll_loss's log_softmax at the
    targets, `softmax(x)[ids]`) is not written by its kernel when what it reads
    from that kernel is small (reduced values) or elementwise values it can
    copy (softmax's exp(x - max)): the readers' kernels recompute it where they
    read it, and its small operands become its kernel's outputs.

    Unsupported ops (anything but linalg, tensor reshapes/slices/empty,
    constants, cf.assert, func.call/return) and dynamic shapes are reported
    as errors naming the op.

    Before:
    ```mlir
    func.func @main(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
      %m = linalg.generic {... ["parallel", "reduction"]} ins(%x) outs(%fill_ninf)  // max
      %s = linalg.generic {... ["parallel", "reduction"]} ins(%x, %m) outs(%fill_0) // sum(exp(x - max))
      %y = linalg.generic {... ["parallel", "parallel"]} ins(%x, %m, %s) outs(%e)  // exp(x - max) / sum
      return %y : tensor<8x64xf32>
    }
    ```
    After:
    ```mlir
    func.func @main(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
      %y = call @main_k0(%x) : (tensor<8x64xf32>) -> tensor<8x64xf32>
      return %y : tensor<8x64xf32>
    }
    func.func private @main_k0(%x: tensor<8x64xf32>) -> tensor<8x64xf32>
        attributes {mlircap.kernel = "row_reduction"} {
      // the fills, the three generics
    }
    ```
  }];
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::linalg::LinalgDialect"];
}

def MlircapGpuCodegen : Pass<"mlircap-gpu-codegen", "::mlir::ModuleOp"> {
  let summary = "Generate a gpu.func for every outlined kernel";
  let description = [{
    For each `func.func` marked `mlircap.kernel`, creates a `gpu.func` of the
    same name in `gpu.module @mlircap_kernels`. Its parameters are one flat
    `memref<N x T>` per kernel argument, then one per kernel result, so with
    the bare-pointer calling convention (`convert-gpu-to-nvvm
    {use-bare-ptr-memref-call-conv=true}`) the kernel takes plain device
    pointers. Nothing intermediate is stored: elements are computed on demand
    by folding reshapes/slices/broadcasts/transposes into index arithmetic
    and inlining elementwise bodies.

    Strategy, chosen from the kernel's ops and shapes (attribute
    `mlircap.launch = {grid, block, smem, strategy}` on both functions):
    * `pointwise`: flattened grid-stride loop, 256 threads per block, grid =
      min(ceil(N / 256), 8 * num-sms). `pointwise_vec4`: when the kernel
      writes one elementwise result (identity output map, f32/f16/bf16/i32)
      whose innermost dim is a multiple of 4, each thread computes 4
      consecutive elements: inputs read contiguously along the innermost
      loop come from one aligned `vector.load` (128-bit for f32), inputs that
      do not depend on it (bias rows, per-row scales) are loaded once, others
      are computed per lane; one aligned `vector.store` writes the 4 results.
      The kernel checks at run time that every pointer is 16-byte aligned
      and otherwise runs the scalar loop (the plan says "align": 16).
    * `row_block` / `row_warp`: one block per row, block = clamp(pow2(len /
      4), 32, 1024) threads (a single warp when 32). Per-thread strided
      partials, a `gpu.shuffle xor` butterfly in each warp, warp partials
      combined through workgroup memory; later ops of the row use the
      reduced value directly.
    * `reduction_split`: a single-result reduction (recognized combiner,
      reduction length >= 64) that is not a row reduction (column sums, mean
      over the batch), whose outputs are it or elementwise ops reading it at
      the same element: 32 output elements x 8 reduction slices per 256-thread
      block (coalesced along the outputs), partials combined through
      workgroup memory.
    * `reduction_naive`: one thread per output element, serial `scf.for`
      over the reduction loops (short column reductions, multi-result
      reductions such as argmax, reductions with other consumers).

    When every kernel tensor has fewer than 2^30 elements the gpu.module gets
    a data layout with 32-bit `index`, so the NVVM lowering uses 32-bit
    address arithmetic.

    Before:
    ```mlir
    func.func private @main_k0(%x: tensor<1024xf32>) -> tensor<1024xf32>
        attributes {mlircap.kernel = "pointwise"} { ... }
    ```
    After (the kernel function gains `mlircap.launch`):
    ```mlir
    gpu.module @mlircap_kernels {
      gpu.func @main_k0(%arg0: memref<1024xf32>, %arg1: memref<1024xf32>) kernel
          attributes {known_block_size = array<i32: 256, 1, 1>, ...} {
        %tid = gpu.thread_id x
        ...
        scf.for %i = %gtid to %c256 step %c256 { vector.load ...; vector.store ... }
        gpu.return
      }
    }
    ```
  }];
  let options = [
    Option<"numSMs", "num-sms", "int64_t",
           /*default=*/"::mlir::mlircap::kDefaultNumSMs",
           "Streaming multiprocessors of the target (grid size cap)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::scf::SCFDialect",
                           "::mlir::DLTIDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def MlircapDumpPtx : Pass<"mlircap-dump-ptx", "::mlir::ModuleOp"> {
  let summary = "Write the PTX held by gpu.binary ops to a file";
  let description = [{
    Concatenates the objects of every `gpu.binary` (PTX text when built with
    `gpu-module-to-binary{format=isa}`) into `file` (stdout for "-"). The IR
    is unchanged. Used by tests to assemble the PTX with ptxas.

    Before/after: the module is not modified.
  }];
  let options = [
    Option<"file", "file", "std::string", /*default=*/"\"-\"", "Output file">
  ];
}

def MlircapPropagateNan : Pass<"mlircap-propagate-nan", "::mlir::func::FuncOp"> {
  let summary = "Compare-and-select min/max become NaN-propagating maximumf/minimumf";
  let description = [{
    torch-mlir lowers `clamp`, `clamp_min`, `clamp_max`, `hardtanh`,
    `maximum` and `minimum` to `arith.select(arith.cmpf(a, b), a, b)`. A
    compare with NaN is false (ordered predicates) or true (unordered), so
    the select returns the other operand for one of the two: `clamp(nan,
    -1, 1)` was -1, `maximum(nan, 0)` 0, where eager torch returns NaN. Each
    select of a float that picks one of the two operands of its `cmpf`
    (gt/ge/lt/le, ordered or unordered) is the max or min of them, and
    becomes `arith.maximumf` / `arith.minimumf`, which return NaN when either
    operand is NaN (and lower to `llvm.maximum` / `max.NaN` on both targets).
    Against a bound that is a constant other than NaN (clamp's and relu's
    scalars, relu6 / hardtanh's 0-d constant tensors read by the payload),
    NaN can only come from x: the select becomes eager's own form, `x < lo ?
    lo : x` (`x > hi ? hi : x`) with an ordered compare, which keeps x when it
    is NaN and when it equals the bound: `relu(-0.0)` and `clamp(-0.0,
    min=0)` are -0.0 in eager, and `maximumf`, ordering -0 below +0, gave
    +0.0 (a sign later read by `1 / x`, `atan2`, `copysign`, `signbit`).

    Runs first in `mlircap-fuse` and the CPU pipeline, on the payloads as
    torch-mlir produced them (one aten op each): a user's own `torch.where(x
    > y, x, y)` is a compare op and a where op, two payloads, and keeps its
    NaN behavior; only after elementwise fusion would it look the same.

    Bools: the integer forms of the same ops are lowered with `arith.maxsi`,
    `arith.minsi` and signed `arith.cmpi`, which on i1 read true as -1
    (`clamp_min(true, false)` was false). A torch bool is 0 or 1: on i1 they
    become `arith.maxui` / `arith.minui` and unsigned compares.

    Before:
    ```mlir
    %c = arith.cmpf ult, %x, %lo : f32
    %y = arith.select %c, %lo, %x : f32
    ```
    After (`%lo` not a constant; a constant: `cmpf olt` and the same select):
    ```mlir
    %y = arith.maximumf %x, %lo : f32
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MlircapSimplifyMath : Pass<"mlircap-simplify-math", "::mlir::func::FuncOp"> {
  let summary = "Strength-reduce math ops with constant exponents";
  let description = [{
    `math.fpowi` and `math.powf` with a constant exponent become multiplies,
    a divide or (r)sqrt (upstream's math algebraic simplification patterns).
    On the GPU, `math.fpowi` otherwise lowers to a function call per element:
    GPT-2's tanh GELU (`x ** 3`) ran 3x slower than inductor's kernel.
    `math.sqrt` of a constant folds (any float width), and a division by a
    constant becomes a multiply by the reciprocal when that is exact (a power
    of two) or the type is f16/bf16 (computed in f32, rounded to 16 bits); an
    IEEE f32 division is a long instruction sequence on the GPU (erf GELU
    divides by sqrt(2)).

    Before:
    ```mlir
    %y = math.fpowi %x, %c3 : bf16, i64
    ```
    After:
    ```mlir
    %0 = arith.mulf %x, %x : bf16
    %y = arith.mulf %0, %x : bf16
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::vector::VectorDialect"];
}

def MlircapWidenSums : Pass<"mlircap-widen-sums", "::mlir::func::FuncOp"> {
  let summary = "f32 sums accumulate in f64 (CPU)";
  let description = [{
    The CPU lowers a reduction to one sequential loop, so an f32 sum of n
    elements has an error that grows with n: 2.4e-5 relative on 1M elements,
    where eager torch's blocked sums give 3e-8. Each output of a reduction
    `linalg.generic` whose f32 accumulator is used only by one `arith.addf`
    that is yielded (`acc' = acc + term`) accumulates in f64: its init is
    extended, the term extended, and the result truncated to f32 once, by
    elementwise generics around the op. Other outputs and payload ops are
    kept. Every f64 sum (widened here, or f64 already, as torch-mlir's
    var_mean) gets `fastmath<reassoc>` on its add, so the loop vectorizer
    keeps several f64 partial sums instead of one scalar add chain (1M-element
    sum: 1.63 -> 0.14 ms on one thread, eager 0.13; relative error ~3e-8).
    A bf16/f16 max or min reduction (`acc' = max(acc, term)`: maximumf,
    minimumf, maxnumf, minnumf) accumulates in f32 the same way: exact, since
    every bf16/f16 value is an f32 value and the f32 result rounds back to
    the same one, and its accumulator stays in a register instead of a
    narrow store reloaded through the emulation's rounding per element.
    Runs first in `mlircap-cpu-pipeline`; the GPU's tree reductions do not
    need it.

    Before:
    ```mlir
    %s = linalg.generic {iterator_types = ["parallel", "reduction"]}
        ins(%x : tensor<4x1000xf32>) outs(%zero : tensor<4xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %a = arith.addf %in, %acc : f32
      linalg.yield %a : f32
    } -> tensor<4xf32>
    ```
    After:
    ```mlir
    %zero64 = linalg.generic ... { arith.extf ... : f32 to f64 }
    %s64 = linalg.generic {iterator_types = ["parallel", "reduction"]}
        ins(%x : tensor<4x1000xf32>) outs(%zero64 : tensor<4xf64>) {
    ^bb0(%in: f32, %acc: f64):
      %w = arith.extf %in : f32 to f64
      %a = arith.addf %acc, %w fastmath<reassoc> : f64
      linalg.yield %a : f64
    } -> tensor<4xf64>
    %s = linalg.generic ... { arith.truncf ... : f64 to f32 }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MlircapEmulateLowPrecision
    : Pass<"mlircap-emulate-low-precision", "::mlir::func::FuncOp"> {
  let summary = "Compute bf16/f16 arith and math ops in f32, rounding after each op (CPU)";
  let description = [{
    x86 has no bf16 arithmetic: LLVM promotes it to f32 and rounds back with a
    call to `__truncsfbf2`, which the CPU JIT cannot resolve (every bf16 graph
    failed to load and ran eagerly). This pass extends every bf16/f16 `arith`
    and `math` op to f32 and truncates its result back, so each op rounds as
    eager's does (the conversions carry no `contract` flag, so no fold drops
    a rounding), and expands f32 <-> bf16 conversions into integer code
    (round to nearest even), which vectorizes. Runs before
    `mlircap-math-approx`, so bf16 transcendentals get the f32 approximations.

    Before:
    ```mlir
    %s = arith.subf %x, %y : bf16
    ```
    After:
    ```mlir
    %a = arith.extf %x : bf16 to f32     // as shifts and bitcasts
    %b = arith.extf %y : bf16 to f32
    %d = arith.subf %a, %b : f32
    %s = arith.truncf %d : f32 to bf16   // as integer rounding code
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MlircapMathApprox : Pass<"mlircap-math-approx", "::mlir::func::FuncOp"> {
  let summary = "Replace transcendental math ops with polynomial approximations (CPU)";
  let description = [{
    On the CPU, `math.exp`, `math.tanh`, `math.erf`, `math.log`, ... lower to
    scalar libm calls, which keep LLVM's loop vectorizer from vectorizing the
    fused loops around them. This pass rewrites them into arithmetic (range
    reduction + polynomial, about 1-2 ulp in f32, from upstream's
    MathPolynomialApproximation patterns) that vectorizes.

    `math.sin` / `math.cos` of f32 get our own rewrite: upstream reduces the
    argument with one f32 multiple of pi/2 (sin(1e6) off by 0.02, sin(1e10)
    = 0). Ours reduce exactly over the whole f32 range, branch-free: Cody-Waite
    in f64 below 6400, Payne-Hanek with a 96-bit window of 4/pi in integer
    arithmetic above, then minimax polynomials in f64 (about 0.55 ulp).

    Before:
    ```mlir
    %y = math.tanh %x : f32
    ```
    After:
    ```mlir
    %c = arith.constant ... : f32
    %a = arith.mulf %x, %x : f32
    ...                      // only arith ops
    %y = arith.select %small, %x, %p : f32
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::x86vector::X86VectorDialect"];
}

def MlircapTrigFunctions : Pass<"mlircap-trig-functions", "::mlir::ModuleOp"> {
  let summary = "sin/cos of f32 as calls with vector variants, branching per vector (CPU)";
  let description = [{
    `mlircap-math-approx` computes f32 sin and cos branch-free, so every
    element pays for both argument reductions: Cody-Waite (below 6400) and the
    exact Payne-Hanek one (above), about 3/4 of the work (a SIREN ran at 0.70x
    eager). This pass replaces each scalar f32 `math.sin` / `math.cos` with a
    call to `__mlircap_sinf` / `__mlircap_cosf`, defined in the module
    together with vector variants for 4, 8 and 16 lanes, and tells LLVM's loop
    vectorizer about them (the `vector-function-abi-variant` attribute, as
    LLVM maps sinf to libmvec or SLEEF). The variants branch once per vector:
    all lanes finite and below 6400 take the Cody-Waite reduction only, any
    other vector the full branch-free code. Results are bit-identical to the
    inline code. Run after the loops are scalar (convert-linalg-to-parallel-loops)
    and before `mlircap-math-approx`.

    Before:
    ```mlir
    %y = math.sin %x : f32
    ```
    After:
    ```mlir
    %y = call @__mlircap_sinf(%x) : (f32) -> f32
    ...
    func.func @__mlircap_sinf_v16(%x: vector<16xf32>) -> vector<16xf32>
        attributes {passthrough = ["noinline"]} {
      %small = vector.reduction <and>, %lt : vector<16xi1> into i1
      %r = scf.if %small -> (vector<16xf32>) { ... } else { ... }
      return %r : vector<16xf32>
    }
    func.func @__mlircap_sinf(%x: f32) -> f32 attributes {passthrough = ["noinline",
        ["vector-function-abi-variant", "_ZGV_LLVM_N4v___mlircap_sinf(__mlircap_sinf_v4),..."]]}
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

def MlircapNarrowLibraryOperands
    : Pass<"mlircap-narrow-library-operands", "::mlir::func::FuncOp"> {
  let summary = "Library matmuls and convolutions read (and store) bf16/f16 directly instead of f32 copies";
  let description = [{
    torch-mlir lowers a bf16 (or f16) `aten.mm` as `extf` of both operands
    followed by an f32 `linalg.matmul` (the accumulator type). Run literally,
    the library call would be an f32 GEMM (no tensor cores) on upcast copies.
    When both operands of a `linalg.matmul` / `linalg.batch_matmul` are
    elementwise `arith.extf` generics from the same narrow type, the op takes
    the narrow tensors directly and the extensions die. When the accumulator
    starts from zero the result is stored narrow as well (as eager torch does:
    the library accumulates in f32 and rounds once on store), followed by an
    `extf` generic that elementwise fusion folds into the epilogue kernel.
    A bf16/f16 `linalg.conv_2d_nchw_fchw` accumulating into f32 is stored
    narrow too, whatever its init (torch's conv2d on narrow tensors, which
    the runtime calls, rounds its result to the narrow type anyway): it
    starts from a narrow zero and the init (a bias) is added after the
    `extf`. This saves the f32 buffer and the conversion copy into it.
    With a bias that result is rounded twice (by the library, then after
    the bias add) where torch's conv2d with a bias rounds once; a module
    with the unit attribute `mlircap.round_once` (the CPU paths) keeps a
    convolution with a non-zero init wide.

    Before:
    ```mlir
    %a32 = linalg.generic {...} ins(%a : tensor<8x16xbf16>) outs(%e0 : tensor<8x16xf32>) { arith.extf }
    %b32 = linalg.generic {...} ins(%b : tensor<16x32xbf16>) outs(%e1 : tensor<16x32xf32>) { arith.extf }
    %m = linalg.matmul ins(%a32, %b32 : tensor<8x16xf32>, tensor<16x32xf32>) outs(%z : tensor<8x32xf32>)
    ```
    After:
    ```mlir
    %z16 = linalg.fill ins(%c0_bf16 : bf16) outs(%e : tensor<8x32xbf16>)
    %m16 = linalg.matmul ins(%a, %b : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%z16 : tensor<8x32xbf16>)
    %m = linalg.generic {...} ins(%m16 : tensor<8x32xbf16>) outs(%e32 : tensor<8x32xf32>) { arith.extf }
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MlircapWidenBoolMemrefs : Pass<"mlircap-widen-bool-memrefs"> {
  let summary = "Store booleans as bytes: memref<...xi1> becomes memref<...xi8>";
  let description = [{
    LLVM 22.1.8's memref-to-LLVM lowering asserts on a store to an i1 memref
    (`integralElementType.getWidth() >= 8`), which aborts the process. torch
    keeps bool tensors one byte per element, so mlircap gives every i1 memref
    i8 memory: function signatures, allocations, views and globals change
    element type, loads are followed by `arith.trunci` and stores preceded by
    `arith.extui`. Runs on bufferized IR, before the LLVM lowering, on any op
    (functions, gpu.module kernels).

    Before:
    ```mlir
    func.func @f(%m: memref<4xi1>, %v: i1) {
      memref.store %v, %m[%c0] : memref<4xi1>
    ```
    After:
    ```mlir
    func.func @f(%m: memref<4xi8>, %v: i1) {
      %b = arith.extui %v : i1 to i8
      memref.store %b, %m[%c0] : memref<4xi8>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::memref::MemRefDialect"];
}

def MlircapReductionLoops : Pass<"mlircap-reduction-loops", "::mlir::func::FuncOp"> {
  let summary = "Reductions accumulate in registers, not through memory (CPU)";
  let description = [{
    `convert-linalg-to-parallel-loops` lowers a reduction `linalg.generic` to
    loops that load the accumulator from the output memref and store it back
    on every iteration. LLVM cannot keep it in a register (it cannot prove
    that the output does not alias an input), so a row reduction ran as a
    serial add chain through memory, never vectorized (x.amax(-1) on
    2x32x32x32 f32: 0.07x eager on one thread).

    Every reduction `linalg.generic` on memrefs is lowered here, after runs
    of dims that every operand indexes contiguously are collapsed (NCHW's H,
    W: one loop of 1024 instead of 32 unrolled rows of 32):
    * innermost dim a reduction dim (row sums, norms, BatchNorm statistics):
      an `scf.parallel` over the parallel dims whose body loads the
      accumulators, reduces in an `scf.for` nest over the reduction dims with
      the accumulators as `iter_args`, and stores them once; `linalg.index`
      becomes the loop's induction variable. With fewer than 8 parallel
      iterations and a long innermost reduction dim (`x.sum()`, a norm of a
      few rows: 64K innermost iterations or more), that dim is cut into at
      most 64 chunks (of at least 4096 elements, a length that depends on
      the shape only) whose partial results, each from the combining op's
      neutral element, are computed in an `scf.parallel` over (parallel
      dims, chunks) into a stack buffer, then combined into the output in
      chunk order: the same bits on any thread count. Only for outputs
      whose accumulator is used by one combining op (add, mul, min, max,
      and, or, xor: not argmax);
    * innermost dim a parallel dim (column sums, `x.sum(1)` on NCHW): the
      trailing parallel dims stay innermost and accumulate in a stack tile
      (`memref.alloca`, at most 1024 elements: it aliases nothing, so LLVM
      vectorizes the inner loop); the other parallel dims, and tiles of the
      last dim when they give too few iterations for several threads, become
      the `scf.parallel` around it.
    Parallel dims move outside reduction dims, which run in the generic's
    order: each output accumulates in the same order as the generic's own
    loops, on any thread count. The loop vectorizer then vectorizes the
    innermost loop (with partial accumulators where the payload may be
    reassociated: the f64 sums of `mlircap-widen-sums`), and
    `mlircap-outline-parallel` spreads the `scf.parallel` over threads.
    bf16/f16 accumulators (emulated later) are left to
    `convert-linalg-to-parallel-loops`.

    Elementwise generics (all dims parallel) get the same dim collapsing,
    after operands' unit dims read at constant 0 are dropped (a row's max
    broadcast as `(d0, d1, d2, 0)`); one with an input its innermost dim does
    not index becomes an `scf.parallel` over the outer dims that loads that
    input once, around an `scf.for` over the innermost dim (a softmax's
    divide by the row sum was a scalar loop). Runs in `mlircap-cpu-pipeline`.

    Before:
    ```mlir
    linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                     affine_map<(d0, d1) -> (d0)>],
                    iterator_types = ["parallel", "reduction"]}
        ins(%x : memref<4x1000xf32>) outs(%acc : memref<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %out : f32
      linalg.yield %m : f32
    }
    ```
    After:
    ```mlir
    scf.parallel (%i) = (%c0) to (%c4) step (%c1) {
      %init = memref.load %acc[%i] : memref<4xf32>
      %r = scf.for %j = %c0 to %c1000 step %c1 iter_args(%a = %init) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<4x1000xf32>
        %m = arith.maximumf %v, %a : f32
        scf.yield %m : f32
      }
      memref.store %r, %acc[%i] : memref<4xf32>
      scf.reduce
    }
    ```
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::memref::MemRefDialect",
                           "::mlir::affine::AffineDialect", "::mlir::arith::ArithDialect"];
}

def MlircapOutlineParallel : Pass<"mlircap-outline-parallel", "::mlir::ModuleOp"> {
  let summary = "Run outer parallel loops on the runtime's thread pool (CPU)";
  let description = [{
    Every outermost `scf.parallel` without reductions (from
    `convert-linalg-to-parallel-loops`: only `parallel` iterator dims) whose
    static work reaches `2 * min-work` innermost iterations is outlined into
    a private body function `(ctx: !llvm.ptr, lo: i64, hi: i64)` and replaced
    by a call to the runtime function

      `mlircap_parallel_for(body, ctx, 0, n, grain)`

    which runs `body(ctx, lo, hi)` on chunks of `[0, n)` on up to
    `mlircap_set_num_threads` threads (libmlircap_core.so; the JIT resolves
    the symbol), each chunk at least `grain` iterations, so about `min-work`
    innermost iterations per thread. A range of less than `2 * grain` runs on
    the calling thread. Smaller loops stay as they are (single-threaded, no
    overhead).

    The dispatched dims are all but the innermost one when the body is
    straight-line code and the innermost dim has at least 16 iterations (it
    stays a sequential loop that LLVM vectorizes), otherwise all of them;
    they are linearized, outer dim slowest. Each iteration writes what it
    wrote before, so results do not depend on the thread count.

    What the loop uses from the parent travels through a stack struct that
    `ctx` points to: memrefs as their LLVM descriptors (through
    `unrealized_conversion_cast`, folded by the LLVM lowering), `index` as
    i64, other LLVM-compatible scalars as they are; constants are cloned into
    the body. Runs on bufferized IR after `convert-linalg-to-parallel-loops`,
    before `convert-scf-to-cf`.

    Before:
    ```mlir
    func.func @k(%x: memref<64x256xf32>, %y: memref<64x256xf32>) {
      scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c256) step (%c1, %c1) {
        %v = memref.load %x[%i, %j] : memref<64x256xf32>
        memref.store %v, %y[%i, %j] : memref<64x256xf32>
      }
      return
    }
    ```
    After (`min-work=1024`):
    ```mlir
    func.func private @k_parallel(%ctx: !llvm.ptr, %lo: i64, %hi: i64) {
      %x = ... llvm.load (field 0 of %ctx), unrealized_conversion_cast to memref
      scf.for %n = %lo' to %hi' step %c1 {      // rows of this chunk
        scf.parallel (%j) = (%c0) to (%c256) step (%c1) { ... original body ... }
      }
      return
    }
    func.func @k(%x: memref<64x256xf32>, %y: memref<64x256xf32>) {
      %ctx = llvm.alloca %c1 x !llvm.struct<(struct<(ptr, ptr, i64, ...)>, ...)>
      llvm.store ... // the descriptors of %x and %y
      %f = func.constant @k_parallel : (!llvm.ptr, i64, i64) -> ()
      call @mlircap_parallel_for(%f, %ctx, %c0_i64, %c64_i64, %c4_i64)
      return
    }
    ```
  }];
  let options = [
    Option<"minWork", "min-work", "int64_t", /*default=*/"32768",
           "Innermost iterations one thread gets at least">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
                           "::mlir::LLVM::LLVMDialect", "::mlir::scf::SCFDialect"];
}

def MlircapMarkNoAlias : Pass<"mlircap-mark-noalias", "::mlir::ModuleOp"> {
  let summary = "Record which lowered arguments of kernels are non-aliasing data pointers (CPU)";
  let description = [{
    The buffers of a CPU launch-plan kernel are distinct allocations (each
    result a buffer of its own, inputs only read), but after the LLVM
    lowering its memref arguments are descriptors whose data pointers may
    alias: LLVM keeps loads of per-channel parameters, and what is computed
    from them (BatchNorm's `1/sqrt(var+eps)`), inside the element loop, and
    vectorizes only behind runtime checks. The upstream lowering drops
    `llvm.noalias` on memref arguments.

    On each `func.func` with `mlircap.kernel` (every memref argument) or
    with `mlircap.noalias` (only the memref arguments carrying
    `mlircap.noalias`, which is removed), this pass records
    `mlircap.noalias_slots = array<i64: N, p...>`: N the number of arguments
    of the lowered signature (a ranked memref of rank r lowers to 3 + 2r:
    allocated pointer, aligned pointer, offset, sizes, strides; an unranked
    one to 2; anything else to 1), p the positions of the aligned pointers.
    `mlircap-apply-noalias` uses it after the lowering. Runs on bufferized IR,
    after every pass that changes a signature, before `convert-to-llvm`.

    Before:
    ```mlir
    func.func @k(%a: memref<16xf32>, %b: memref<2x16xf32>) attributes {mlircap.kernel = "pointwise"}
    ```
    After:
    ```mlir
    func.func @k(%a: memref<16xf32>, %b: memref<2x16xf32>)
        attributes {mlircap.kernel = "pointwise", mlircap.noalias_slots = array<i64: 12, 1, 6>}
    ```
  }];
}

def MlircapApplyNoAlias : Pass<"mlircap-apply-noalias", "::mlir::ModuleOp"> {
  let summary = "Mark recorded kernel data pointers llvm.noalias (CPU)";
  let description = [{
    On each `llvm.func` carrying `mlircap.noalias_slots` (see
    `mlircap-mark-noalias`) whose argument count is the recorded one, puts
    `llvm.noalias` on the recorded pointer arguments; the attribute is
    removed from every function (a C-interface wrapper inheriting it, with
    another signature, gets nothing). Runs after the LLVM lowering.

    Before:
    ```mlir
    llvm.func @k(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, ...)
        attributes {mlircap.noalias_slots = array<i64: 12, 1, 6>}
    ```
    After:
    ```mlir
    llvm.func @k(%arg0: !llvm.ptr, %arg1: !llvm.ptr {llvm.noalias}, %arg2: i64, ...)
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def MlircapBf16MemoryAsI16 : Pass<"mlircap-bf16-memory-as-i16", "::mlir::ModuleOp"> {
  let summary = "Load, store and select bf16 as i16 (CPU, LLVM dialect)";
  let description = [{
    LLVM 22.1.8's x86 backend asserts (`Unexpected illegal type!`, SIGABRT in
    the compile worker) on vectors of bf16 its vectorizers make from bf16
    loads and stores, as in a bf16 transpose (the sort of bf16 along a leading
    dim). After `mlircap-emulate-low-precision` bf16 values only
    move, so every `llvm.load`, `llvm.store` and `llvm.select` of bf16 (or a
    vector of bf16) becomes the i16 one, with bitcasts where a bf16 value is
    still read or made; bitcast pairs that cancel are folded. An f32 -> bf16
    `llvm.fptrunc` becomes integer rounding to nearest even (subnormals kept,
    NaN 0x7fc0, as torch rounds): stored as i16, the vectorizer made it
    x86's vcvtneps2bf16, which flushes subnormals. Runs after the LLVM
    lowering.

    Before:
    ```mlir
    %v = llvm.load %p : !llvm.ptr -> bf16
    llvm.store %v, %q : bf16, !llvm.ptr
    ```
    After:
    ```mlir
    %v = llvm.load %p : !llvm.ptr -> i16
    llvm.store %v, %q : i16, !llvm.ptr
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

#endif // MLIRCAP_PASSES
