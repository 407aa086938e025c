//===-- Passes.h - mlircap passes and pipelines -----------------*- C++ -*-===//
#ifndef MLIRCAP_PASSES_H
#define MLIRCAP_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/DLTI/DLTI.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Pass/Pass.h"
#include <string>

namespace mlir::mlircap {

#define GEN_PASS_DECL
#include "mlircap/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mlircap/Passes.h.inc"

/// Textual pass pipelines (anchored on builtin.module, without the wrapper).
std::string fusePipeline();
std::string cpuPipeline();
std::string gpuPipeline(llvm::StringRef chip, llvm::StringRef features);
std::string gpuKernelPipeline(llvm::StringRef chip, llvm::StringRef features,
                              int64_t numSMs);

/// Registers mlircap-cpu-pipeline and mlircap-gpu-pipeline.
void registerPipelines();

} // namespace mlir::mlircap

#endif // MLIRCAP_PASSES_H
