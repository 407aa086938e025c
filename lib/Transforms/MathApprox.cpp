//===- MathApprox.cpp - polynomial approximations for the CPU path ------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPMATHAPPROX
#include "mlircap/Passes.h.inc"

namespace {
struct MathApprox : impl::MlircapMathApproxBase<MathApprox> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
} // namespace mlir::mlircap
