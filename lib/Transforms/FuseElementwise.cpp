//===- FuseElementwise.cpp - producer/consumer fusion of linalg.generic --===//
//
// Wraps upstream elementwise fusion with mlircap's cost rule; see Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "KernelUtils.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPFUSEELEMENTWISE
#include "mlircap/Passes.h.inc"

namespace {
/// A generic whose body only yields one of its block arguments: a copy,
/// broadcast or transpose. Recomputing it in several consumers costs nothing
/// but index arithmetic.
bool isPureDataMovement(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  if (body.getOperations().size() != 1)
    return false;
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  return llvm::all_of(yield.getValues(),
                      [](Value v) { return isa<BlockArgument>(v); });
}

/// A generic whose body only converts one of its block arguments to a type at
/// least as wide (extf, int<->float casts): recomputing it in each
/// consumer costs one conversion per element, materializing it writes and
/// reads back a (possibly wider) tensor. torch-mlir's var_mean extends its
/// input to f64 once for the mean and the variance reductions.
bool isPureConversion(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  if (body.getOperations().size() != 2 || op.getNumDpsInits() != 1)
    return false;
  Operation &conv = body.front();
  if (!isa<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp, arith::UIToFPOp,
           arith::FPToSIOp, arith::ExtSIOp, arith::ExtUIOp>(conv) ||
      !isa<BlockArgument>(conv.getOperand(0)))
    return false;
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (yield.getValues().size() != 1 || yield.getValues()[0] != conv.getResult(0))
    return false;
  // Only widening ones: a narrowing conversion (truncf) recomputed in each
  // consumer leaves its wide operand materialized instead of its narrow result
  // (UNet's SiLU output read by a pooling and a concatenation, kept in f32).
  Type from = conv.getOperand(0).getType(), to = conv.getResult(0).getType();
  return from.isIntOrFloat() && to.isIntOrFloat() &&
         to.getIntOrFloatBitWidth() >= from.getIntOrFloatBitWidth();
}

/// A generic with one full-size operand (indexed by a permutation of its loops)
/// and otherwise only smaller, broadcast ones (a bias, a per-channel scale),
/// whose body is a few arith ops (at most 7: a bf16 bias add is extf, extf,
/// addf, truncf): a convolution's bias add read by GroupNorm's
/// statistics and by its normalization. Recomputed in each consumer it costs a
/// few instructions per element; materialized it costs the tensor written and
/// read back, as each consumer then reads it instead of the full operand (so
/// no more bytes are read, as long as that operand is no wider than the
/// result). Two full-size operands (a residual add) would double the reads.
bool isBroadcastArith(linalg::GenericOp op) {
  if (op.getNumDpsInits() != 1 || op.getNumReductionLoops() != 0)
    return false;
  Block &body = op.getRegion().front();
  if (body.getOperations().size() > 8)
    return false;
  for (Operation &inner : body.without_terminator())
    if (!isa<arith::ArithDialect>(inner.getDialect()) || inner.getNumRegions() != 0)
      return false;
  auto outType = dyn_cast<RankedTensorType>(op.getResult(0).getType());
  if (!outType)
    return false;
  unsigned full = 0;
  for (OpOperand *in : op.getDpsInputOperands()) {
    if (!op.getMatchingIndexingMap(in).isPermutation())
      continue;
    auto inType = dyn_cast<RankedTensorType>(in->get().getType());
    if (!inType || inType.getElementTypeBitWidth() > outType.getElementTypeBitWidth())
      return false;
    ++full;
  }
  return full == 1;
}

/// Whether every user of `op` is a generic that can take it in (so that once
/// each has, the producer is gone, and nothing reads both it and its operand).
bool onlyGenericUsers(linalg::GenericOp op) {
  return llvm::all_of(op->getUsers(), [](Operation *user) {
    return isa<linalg::GenericOp>(user) && !isLibraryOp(user);
  });
}

/// Whether `expand` splits a dim in two or more of size > 1 (not only adds
/// unit dims, as a keepdim reduction's result does).
bool splitsDim(tensor::ExpandShapeOp expand) {
  ArrayRef<int64_t> shape = expand.getResultType().getShape();
  for (const ReassociationIndices &group : expand.getReassociationIndices())
    if (llvm::count_if(group, [&](int64_t d) { return shape[d] != 1; }) > 1)
      return true;
  return false;
}

/// The pure widening conversion (isPureConversion) of one input that produces
/// `source`, its result indexed by the identity and its input by a permutation
/// (the identity too where `identityInput`), or null.
linalg::GenericOp wideningConversion(Value source, bool identityInput) {
  auto conv = source.getDefiningOp<linalg::GenericOp>();
  if (!conv || !isPureConversion(conv) || conv.getNumDpsInputs() != 1 ||
      conv.getNumReductionLoops() != 0)
    return {};
  SmallVector<AffineMap> maps = conv.getIndexingMapsArray();
  if (!maps[1].isIdentity() || !(identityInput ? maps[0].isIdentity() : maps[0].isPermutation()))
    return {};
  return conv;
}

/// `op(conv(x))` as `conv(op(x))`: the conversion moved below the reshape
/// `op`, one copy of it for this reader. A widening conversion is recomputed in
/// each reader (isPureConversion), but only where they are generics: one read
/// through a reshape (GroupNorm's statistics, split in two levels, read the
/// f32 copy of a bf16 activation once per level) kept it a kernel of its own
/// that wrote the wide copy and read it back. Below the reshape it fuses into
/// the generic that reads it.
Value convertAfter(PatternRewriter &rewriter, Location loc, linalg::GenericOp conv,
                   Value moved, RankedTensorType resultType) {
  Value init = rewriter.create<tensor::EmptyOp>(loc, resultType.getShape(),
                                                resultType.getElementType());
  AffineMap id = rewriter.getMultiDimIdentityMap(resultType.getRank());
  auto copy = rewriter.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, ValueRange{moved}, ValueRange{init},
      ArrayRef<AffineMap>{id, id},
      SmallVector<utils::IteratorType>(resultType.getRank(), utils::IteratorType::parallel));
  IRMapping map;
  rewriter.cloneRegionBefore(conv.getRegion(), copy.getRegion(), copy.getRegion().begin(), map);
  return copy.getResult(0);
}

template <typename ReshapeOp>
struct ConvertAfterReshape : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern<ReshapeOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op, PatternRewriter &rewriter) const override {
    linalg::GenericOp conv = wideningConversion(op.getSrc(), /*identityInput=*/true);
    if (!conv || !op.getResultType().hasStaticShape())
      return failure();
    Value x = conv.getDpsInputOperand(0)->get();
    auto xType = cast<RankedTensorType>(x.getType());
    auto type = RankedTensorType::get(op.getResultType().getShape(), xType.getElementType());
    Value moved = rewriter.create<ReshapeOp>(op.getLoc(), type, x, op.getReassociationIndices());
    rewriter.replaceOp(op, convertAfter(rewriter, op.getLoc(), conv, moved, op.getResultType()));
    return success();
  }
};

/// `tensor.extract conv(x)[i]` as the conversion of `tensor.extract x[i']`
/// (i' = i through the conversion's input map, a permutation): the element
/// read where it is used. Generics that read a tensor at computed positions
/// (average pooling's window once mlircap-tensor-to-generic has turned the
/// padding into index arithmetic, gathers) take it as a captured value, which
/// elementwise fusion cannot reach: the widened copy was a kernel of its own.
struct ConvertAfterExtract : OpRewritePattern<tensor::ExtractOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tensor::ExtractOp op, PatternRewriter &rewriter) const override {
    linalg::GenericOp conv = wideningConversion(op.getTensor(), /*identityInput=*/false);
    if (!conv)
      return failure();
    SmallVector<Value> at;
    for (AffineExpr e : conv.getIndexingMapsArray()[0].getResults())
      at.push_back(op.getIndices()[cast<AffineDimExpr>(e).getPosition()]);
    Value x = conv.getDpsInputOperand(0)->get();
    Value narrow = rewriter.create<tensor::ExtractOp>(op.getLoc(), x, at);
    Operation &widen = conv.getRegion().front().front();
    IRMapping map;
    map.map(widen.getOperand(0), narrow);
    rewriter.replaceOp(op, rewriter.clone(widen, map)->getResults());
    return success();
  }
};

struct FuseElementwise : impl::MlircapFuseElementwiseBase<FuseElementwise> {
  using Base::Base;
  void runOnOperation() override {
    // Two rounds: the second also recomputes broadcast arithmetic with several
    // readers (isBroadcastArith) in each of them, once the first has fused
    // what feeds it into it (else those producers would be left with several
    // readers and materialized: a causal mask's select read by softmax's max
    // and its exp, its mask preparation then a kernel of its own).
    for (bool recompute : {false, true})
      if (failed(fuse(recompute)))
        return signalPassFailure();
  }

  LogicalResult fuse(bool recompute) {
    unsigned maxOps = maxOperands;
    linalg::ControlFusionFn control = [maxOps, recompute](OpOperand *fused) {
      auto producer = fused->get().getDefiningOp<linalg::GenericOp>();
      auto consumer = dyn_cast<linalg::GenericOp>(fused->getOwner());
      if (!producer || !consumer)
        return false;
      // A library convolution's or matmul's bias broadcast stays a view of the
      // 1-D bias (the plan hands the bias to the library op): its producer (a
      // bf16 bias converted) is not recomputed at every element of the result.
      if (isLibraryBiasInit(consumer))
        return false;
      if (producer.getNumReductionLoops() != 0)
        return false;
      // A producer that reads its result's initial value (torch-mlir's sum or
      // prod of a 0-d tensor: a generic of no loops yielding out + in) read
      // through a broadcast: the fused generic would make that value one
      // element of an output indexed by none of the broadcast loops, and
      // accumulate into it once per element (y - x.sum() of a 0-d x
      // subtracted x, 2x, 3x, ... along y).
      if (!consumer.getMatchingIndexingMap(fused).isPermutation() &&
          llvm::any_of(producer.getDpsInitsMutable(), [&](OpOperand &init) {
            return producer.payloadUsesValueFromOperand(&init);
          }))
        return false;
      if (!producer->hasOneUse() && !isPureDataMovement(producer) &&
          !isPureConversion(producer) &&
          !(recompute && isBroadcastArith(producer) && onlyGenericUsers(producer)))
        return false;
      unsigned inputs = consumer.getNumDpsInputs() - 1 + producer.getNumDpsInputs();
      return inputs <= maxOps;
    };
    RewritePatternSet patterns(&getContext());
    patterns.add<ConvertAfterReshape<tensor::CollapseShapeOp>,
                 ConvertAfterReshape<tensor::ExpandShapeOp>, ConvertAfterExtract>(&getContext());
    linalg::populateElementwiseOpsFusionPatterns(patterns, control);
    // Reshapes between elementwise ops block fusion: fold them by expansion.
    linalg::populateFoldReshapeOpsByExpansionPatterns(
        patterns, [](OpOperand *fused) {
          // Never turn a library op (matmul, conv) into a generic by folding
          // a reshape into it: it must stay a named op for the runtime.
          Operation *producer = fused->get().getDefiningOp();
          // Nor move the zero padding a library convolution applies itself
          // above a reshape: a 5-D padding of a channel shuffle's groups is
          // no convolution's padding (the plan rejected the graph).
          if (auto pad = dyn_cast<tensor::PadOp>(fused->getOwner()); pad && convInputPadding(pad))
            return false;
          // Nor move a reshape across a library op's bias broadcast (a Linear's
          // bias viewed from a [2, 3] parameter): expanded, it is no 1-D bias
          // the plan can hand to the library op (the plan rejected the graph).
          if (isLibraryBiasInit(fused->getOwner()) || (producer && isLibraryBiasInit(producer)))
            return false;
          // Nor expand a reduction's loops for a reshape of its result
          // (GroupNorm's per-channel sums viewed as [N, G, C/G]): the
          // elementwise ops feeding it then sit behind a reshape of their
          // own result with broadcast operands, which stops their fusion
          // into the reduction (a kernel and a tensor more).
          // Nor move a reshape back below a widening conversion
          // (ConvertAfterReshape moved the conversion below it).
          if (auto owner = dyn_cast<linalg::GenericOp>(fused->getOwner());
              owner && isa_and_nonnull<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(producer) &&
              isPureConversion(owner))
            return false;
          auto expand = dyn_cast<tensor::ExpandShapeOp>(fused->getOwner());
          if (auto g = dyn_cast_or_null<linalg::GenericOp>(producer);
              g && g.getNumReductionLoops() != 0 && expand && splitsDim(expand))
            return false;
          return producer && producer->hasOneUse() && !isLibraryOp(producer) &&
                 !isLibraryOp(fused->getOwner());
        });
    linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
    tensor::populateFoldTensorEmptyPatterns(patterns);
    return applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};
} // namespace
} // namespace mlir::mlircap
