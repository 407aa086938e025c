//===- EmulateLowPrecision.cpp - bf16/f16 arithmetic in f32 on the CPU ----===//
//
// x86 has no bf16 (and, before AVX512-FP16, no f16) arithmetic: LLVM promotes
// such ops to f32 and rounds back through __truncsfbf2, which the JIT cannot
// resolve, so every bf16 CPU graph failed to load. Every bf16/f16 arith and
// math op computes in f32 here and rounds back to its type after each op, as
// eager does; bf16 conversions become integer code (round to nearest even).
// See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPEMULATELOWPRECISION
#include "mlircap/Passes.h.inc"

namespace {
struct EmulateLowPrecision
    : impl::MlircapEmulateLowPrecisionBase<EmulateLowPrecision> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    Operation *root = getOperation();
    Type f32 = Float32Type::get(ctx);

    // math ops: f32 and f64 are the supported types, the rest is extended.
    TypeConverter mathTypes;
    SetVector<Type> supported;
    supported.insert(f32);
    supported.insert(Float64Type::get(ctx));
    math::populateExtendToSupportedTypesTypeConverter(mathTypes, supported,
                                                      f32);
    ConversionTarget mathTarget(*ctx);
    math::populateExtendToSupportedTypesConversionTarget(mathTarget, mathTypes);
    RewritePatternSet mathPatterns(ctx);
    math::populateExtendToSupportedTypesPatterns(mathPatterns, mathTypes);
    if (failed(applyPartialConversion(root, mathTarget,
                                      std::move(mathPatterns))))
      return signalPassFailure();

    // arith ops on bf16/f16.
    TypeConverter arithTypes;
    arith::populateEmulateUnsupportedFloatsConversions(
        arithTypes, {BFloat16Type::get(ctx), Float16Type::get(ctx)}, f32);
    ConversionTarget arithTarget(*ctx);
    arith::populateEmulateUnsupportedFloatsLegality(arithTarget, arithTypes);
    RewritePatternSet arithPatterns(ctx);
    arith::populateEmulateUnsupportedFloatsPatterns(arithPatterns, arithTypes);
    if (failed(applyPartialConversion(root, arithTarget,
                                      std::move(arithPatterns))))
      return signalPassFailure();

    // Upstream marks the conversions `contract`, which lets the folder drop
    // truncf+extf pairs, i.e. the rounding after each op that eager does
    // (f16 a*b+a/b: 490/2112 elements one ulp off). Keep every rounding.
    root->walk([&](Operation *op) {
      if (isa<arith::ExtFOp, arith::TruncFOp>(op))
        op->removeAttr(
            cast<arith::ArithFastMathInterface>(op).getFastMathAttrName());
    });

    // f64 <-> bf16/f16 go through f32, as c10's conversions do (double ->
    // float -> BFloat16/Half): LLVM lowers the direct ones to __truncdfbf2 /
    // __truncdfhf2, which the JIT cannot resolve (var_mean of bf16, which
    // accumulates in f64, failed to load). Extending through f32 is exact.
    auto withF32 = [&](Type t) -> Type {
      if (auto shaped = dyn_cast<ShapedType>(t))
        return shaped.clone(f32);
      return f32;
    };
    auto isLow = [](Type t) {
      Type e = getElementTypeOrSelf(t);
      return e.isBF16() || e.isF16();
    };
    root->walk([&](Operation *op) {
      if (!isa<arith::TruncFOp, arith::ExtFOp>(op))
        return;
      Value in = op->getOperand(0);
      Type from = in.getType(), to = op->getResult(0).getType();
      bool narrowing = isa<arith::TruncFOp>(op);
      if (!getElementTypeOrSelf(narrowing ? from : to).isF64() ||
          !isLow(narrowing ? to : from))
        return;
      OpBuilder b(op);
      Value mid, res;
      if (narrowing) {
        mid = arith::TruncFOp::create(b, op->getLoc(), withF32(from), in);
        res = arith::TruncFOp::create(b, op->getLoc(), to, mid);
      } else {
        mid = arith::ExtFOp::create(b, op->getLoc(), withF32(to), in);
        res = arith::ExtFOp::create(b, op->getLoc(), to, mid);
      }
      op->getResult(0).replaceAllUsesWith(res);
      op->erase();
    });

    RewritePatternSet expand(ctx);
    arith::populateExpandBFloat16Patterns(expand);
    if (failed(applyPatternsGreedily(root, std::move(expand))))
      return signalPassFailure();
  }
};
} // namespace
} // namespace mlir::mlircap
