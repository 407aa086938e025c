//===- TensorToGeneric.cpp - tensor.pad / insert_slice as linalg.generic -===//
//
// Padding and slice insertion (torch's cat lowers to tensor.insert_slice
// chains, or tensor.concat) become elementwise generics over the result that
// read their source with tensor.extract at clamped indices. They then fuse like
// any elementwise op and compile into kernels. A zero padding that only library
// convolutions read stays: they pad themselves (convInputPadding). See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPTENSORTOGENERIC
#include "mlircap/Passes.h.inc"

namespace {
/// In the body of an all-parallel generic over `shape`: for each dim,
/// rel = index - offset; in bounds iff 0 <= rel < size. Returns the clamped
/// source indices and the conjunction of the bounds checks.
std::pair<SmallVector<Value>, Value>
clampedIndices(OpBuilder &b, Location loc, ArrayRef<int64_t> offsets,
               ArrayRef<int64_t> sizes) {
  SmallVector<Value> idx;
  Value all;
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  for (unsigned i = 0; i < offsets.size(); ++i) {
    Value iv = linalg::IndexOp::create(b, loc, i);
    Value rel = arith::SubIOp::create(
        b, loc, iv, arith::ConstantIndexOp::create(b, loc, offsets[i]));
    // Unsigned compare: a negative rel wraps around and is out of bounds.
    Value inb = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ult, rel,
        arith::ConstantIndexOp::create(b, loc, sizes[i]));
    idx.push_back(arith::SelectOp::create(b, loc, inb, rel, zero));
    all = all ? arith::AndIOp::create(b, loc, all, inb).getResult() : inb;
  }
  if (!all)
    all = arith::ConstantIntOp::create(b, loc, 1, 1);
  return {idx, all};
}

struct PadToGeneric : OpRewritePattern<tensor::PadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tensor::PadOp pad,
                                PatternRewriter &rewriter) const override {
    if (convInputPadding(pad))
      return rewriter.notifyMatchFailure(pad, "padding applied by the library convolution");
    Value padValue = pad.getConstantPaddingValue();
    auto resultType = pad.getResultType();
    auto srcType = pad.getSourceType();
    if (!padValue || !resultType.hasStaticShape() || !srcType.hasStaticShape() ||
        ShapedType::isDynamicShape(pad.getStaticLow()))
      return rewriter.notifyMatchFailure(pad, "dynamic or non-constant pad");
    Location loc = pad.getLoc();
    unsigned rank = resultType.getRank();
    Value empty = tensor::EmptyOp::create(rewriter, loc, resultType.getShape(),
                                          resultType.getElementType());
    SmallVector<int64_t> low(pad.getStaticLow());
    SmallVector<int64_t> srcShape(srcType.getShape());
    Value src = pad.getSource();
    auto generic = linalg::GenericOp::create(
        rewriter, loc, TypeRange{resultType}, ValueRange{}, ValueRange{empty},
        SmallVector<AffineMap>{rewriter.getMultiDimIdentityMap(rank)},
        SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
        [&](OpBuilder &b, Location l, ValueRange) {
          auto [idx, inb] = clampedIndices(b, l, low, srcShape);
          Value v = tensor::ExtractOp::create(b, l, src, idx);
          linalg::YieldOp::create(b, l,
                                  arith::SelectOp::create(b, l, inb, v, padValue)
                                      .getResult());
        });
    rewriter.replaceOp(pad, generic.getResults());
    return success();
  }
};

struct InsertSliceToGeneric : OpRewritePattern<tensor::InsertSliceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tensor::InsertSliceOp op,
                                PatternRewriter &rewriter) const override {
    auto destType = op.getDestType();
    auto srcType = op.getSourceType();
    if (!destType.hasStaticShape() || !srcType.hasStaticShape() ||
        ShapedType::isDynamicShape(op.getStaticOffsets()) || !op.hasUnitStride() ||
        srcType.getRank() != destType.getRank())
      return rewriter.notifyMatchFailure(op, "dynamic, strided or rank-reducing");
    Location loc = op.getLoc();
    unsigned rank = destType.getRank();
    Value empty = tensor::EmptyOp::create(rewriter, loc, destType.getShape(),
                                          destType.getElementType());
    SmallVector<int64_t> offsets(op.getStaticOffsets());
    SmallVector<int64_t> sizes(srcType.getShape());
    Value src = op.getSource();
    auto id = rewriter.getMultiDimIdentityMap(rank);
    auto generic = linalg::GenericOp::create(
        rewriter, loc, TypeRange{destType}, ValueRange{op.getDest()},
        ValueRange{empty}, SmallVector<AffineMap>{id, id},
        SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
        [&](OpBuilder &b, Location l, ValueRange args) {
          auto [idx, inb] = clampedIndices(b, l, offsets, sizes);
          Value v = tensor::ExtractOp::create(b, l, src, idx);
          linalg::YieldOp::create(
              b, l, arith::SelectOp::create(b, l, inb, v, args[0]).getResult());
        });
    rewriter.replaceOp(op, generic.getResults());
    return success();
  }
};

struct TensorToGeneric : impl::MlircapTensorToGenericBase<TensorToGeneric> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    tensor::populateDecomposeTensorConcatPatterns(patterns);
    patterns.add<PadToGeneric, InsertSliceToGeneric>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
} // namespace mlir::mlircap
