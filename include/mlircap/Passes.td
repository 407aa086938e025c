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
      whose recomputation is free);
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

#endif // MLIRCAP_PASSES
