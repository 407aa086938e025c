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
#include "mlircap/TargetDefaults.h"
#include <string>

namespace mlir::mlircap {

#define GEN_PASS_DECL
#include "mlircap/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mlircap/Passes.h.inc"

/// Below this magnitude sin/cos of f32 reduce their argument with two f64
/// multiples of pi/2 (Cody-Waite: n < 2^12, so n * P1 is exact), above it
/// with Payne-Hanek (MathApprox.cpp).
constexpr float kSinCosShortLimit = 6400.0f;

/// sin (`isCos` false) or cos of `x` (f32 or a fixed-size f32 vector) as
/// arithmetic, about 0.6 ulp (MathApprox.cpp). `largeArgs` false leaves out
/// the reduction of arguments from kSinCosShortLimit on, inf and NaN: for
/// inputs known to be finite and smaller.
Value emitSinCosF32(OpBuilder &b, Location loc, Value x, bool isCos, bool largeArgs);

/// Textual pass pipelines (anchored on builtin.module, without the wrapper).
/// `channelsLast`: library convolutions in NHWC (the GPU pipeline).
std::string fusePipeline(bool channelsLast = false);
/// `fused`: the input already went through fusePipeline (the CPU plan's
/// kernels): NaN propagation, which must see unfused ops, is not run again.
std::string cpuPipeline(bool fused = false);
std::string gpuPipeline(llvm::StringRef chip, llvm::StringRef features);
std::string gpuKernelPipeline(llvm::StringRef chip, llvm::StringRef features,
                              int64_t numSMs);

/// "" if `chip` (sm_<N>) and `features` (comma-separated +ptx<NN>) name a
/// target the NVPTX backend can compile for, else a one-line error. Unknown
/// chips or features, and PTX versions below the chip's minimum, abort the
/// process inside LLVM, so every GPU entry point checks them first.
std::string checkGpuTarget(llvm::StringRef chip, llvm::StringRef features);

/// The features used when none are given: PTX 8.0, or the chip's minimum
/// PTX version when that is newer (sm_100 and later).
std::string defaultGpuFeatures(llvm::StringRef chip);

/// Registers mlircap-cpu-pipeline and mlircap-gpu-pipeline.
void registerPipelines();

} // namespace mlir::mlircap

#endif // MLIRCAP_PASSES_H
