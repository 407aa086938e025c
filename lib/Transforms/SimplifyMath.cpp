//===- SimplifyMath.cpp - strength-reduce math ops with constant operands -===//
//
// `x ** 3` (GPT-2's tanh GELU) arrives as `math.fpowi %x, 3`, which the NVVM
// lowering turns into a call per element; `math.powf %x, 2.0` into libdevice's
// general powf. Upstream's algebraic simplification patterns rewrite constant
// exponents into multiplies, divides and (r)sqrt.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPSIMPLIFYMATH
#include "mlircap/Passes.h.inc"

namespace {
struct SimplifyMath : impl::MlircapSimplifyMathBase<SimplifyMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathAlgebraicSimplificationPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
} // namespace mlir::mlircap
