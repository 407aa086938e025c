//===- PropagateNan.cpp - compare+select min/max become NaN-propagating ---===//
//
// torch-mlir lowers clamp, clamp_min/max, hardtanh, maximum and minimum to
// `select(cmpf(a, b), a, b)`. An ordered compare is false for NaN and an
// unordered one true, so one of the operands' NaN is always dropped:
// `clamp(nan, -1, 1)` gave -1 where eager torch gives nan. Every such
// select within one op's payload is the min or max of its two operands, so
// it becomes arith.maximumf / arith.minimumf, which return NaN when either
// operand is NaN (torch's semantics).
//
// Bools: torch-mlir lowers the integer forms of the same ops with signed
// min/max and compares, which on i1 read true as -1: clamp_min(true, false)
// gave false. A torch bool is 0 or 1, so signed i1 min/max and ordering
// compares become their unsigned forms. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPPROPAGATENAN
#include "mlircap/Passes.h.inc"

namespace {
using arith::CmpFPredicate;

/// +1 if `p` holds when lhs > rhs (gt/ge), -1 when lhs < rhs (lt/le), else 0.
int direction(CmpFPredicate p) {
  switch (p) {
  case CmpFPredicate::OGT:
  case CmpFPredicate::OGE:
  case CmpFPredicate::UGT:
  case CmpFPredicate::UGE:
    return 1;
  case CmpFPredicate::OLT:
  case CmpFPredicate::OLE:
  case CmpFPredicate::ULT:
  case CmpFPredicate::ULE:
    return -1;
  default:
    return 0;
  }
}

/// Whether `v` is a float constant (scalar or splat) that is not NaN, or the
/// payload argument of a linalg.generic input that is one (hardtanh / relu6's
/// bounds are 0-d constant tensors read by the payload).
bool isNonNanConstant(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto generic = dyn_cast<linalg::GenericOp>(arg.getOwner()->getParentOp());
    if (!generic || arg.getOwner() != generic.getBody() ||
        arg.getArgNumber() >= generic.getNumDpsInputs())
      return false;
    v = generic.getDpsInputOperand(arg.getArgNumber())->get();
  }
  Attribute attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return false;
  if (auto f = dyn_cast<FloatAttr>(attr))
    return !f.getValue().isNaN();
  if (auto d = dyn_cast<SplatElementsAttr>(attr))
    return isa<FloatType>(d.getElementType()) && !d.getSplatValue<APFloat>().isNaN();
  return false;
}

/// select(a > b, a, b) -> maximumf(a, b); select(a > b, b, a) -> minimumf;
/// the same with <, >=, <= and ordered or unordered predicates. Against a
/// constant bound c that is not NaN (clamp, clamp_min, relu, relu6), it
/// becomes eager's `x < c ? c : x` (`x > c ? c : x` for a min) with an
/// ordered compare instead: NaN only comes from x and is kept, and so is x
/// when it equals the bound, as eager's kernels keep it (relu(-0.0) and
/// clamp(-0.0, min=0) are -0.0; maximumf orders -0 below +0 and gave +0.0).
struct SelectToMinMax : OpRewritePattern<arith::SelectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::SelectOp op,
                                PatternRewriter &rewriter) const override {
    auto cmp = op.getCondition().getDefiningOp<arith::CmpFOp>();
    if (!cmp || !isa<FloatType>(getElementTypeOrSelf(op.getType())))
      return failure();
    int dir = direction(cmp.getPredicate());
    Value a = cmp.getLhs(), b = cmp.getRhs();
    Value t = op.getTrueValue(), f = op.getFalseValue();
    if (!dir || a == b || a.getType() != op.getType())
      return failure();
    bool keepsOrder = t == a && f == b;  // picks a when a <dir> b
    bool swapsOrder = t == b && f == a;  // picks b when a <dir> b
    if (!keepsOrder && !swapsOrder)
      return failure();
    bool isMax = (dir > 0) == keepsOrder;
    Value x, c;
    if (isNonNanConstant(b) && !isNonNanConstant(a))
      x = a, c = b;
    else if (isNonNanConstant(a) && !isNonNanConstant(b))
      x = b, c = a;
    if (x) {
      CmpFPredicate pred = isMax ? CmpFPredicate::OLT : CmpFPredicate::OGT;
      if (cmp.getPredicate() == pred && cmp.getLhs() == x && t == c && f == x)
        return failure(); // already that form
      Value cond = arith::CmpFOp::create(rewriter, cmp.getLoc(), pred, x, c);
      rewriter.replaceOpWithNewOp<arith::SelectOp>(op, cond, c, x);
      return success();
    }
    if (isMax)
      rewriter.replaceOpWithNewOp<arith::MaximumFOp>(op, a, b);
    else
      rewriter.replaceOpWithNewOp<arith::MinimumFOp>(op, a, b);
    return success();
  }
};

bool isBool(Value v) { return getElementTypeOrSelf(v.getType()).isInteger(1); }

/// maxsi/minsi on i1 -> maxui/minui (true is 1, not -1).
template <typename SignedOp, typename UnsignedOp>
struct UnsignedBoolMinMax : OpRewritePattern<SignedOp> {
  using OpRewritePattern<SignedOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(SignedOp op,
                                PatternRewriter &rewriter) const override {
    if (!isBool(op.getLhs()))
      return failure();
    rewriter.replaceOpWithNewOp<UnsignedOp>(op, op.getLhs(), op.getRhs());
    return success();
  }
};

/// cmpi slt/sle/sgt/sge on i1 -> ult/ule/ugt/uge.
struct UnsignedBoolCompare : OpRewritePattern<arith::CmpIOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::CmpIOp op,
                                PatternRewriter &rewriter) const override {
    using P = arith::CmpIPredicate;
    if (!isBool(op.getLhs()))
      return failure();
    P p;
    switch (op.getPredicate()) {
    case P::slt: p = P::ult; break;
    case P::sle: p = P::ule; break;
    case P::sgt: p = P::ugt; break;
    case P::sge: p = P::uge; break;
    default:
      return failure();
    }
    rewriter.modifyOpInPlace(op, [&] { op.setPredicate(p); });
    return success();
  }
};

struct PropagateNan : impl::MlircapPropagateNanBase<PropagateNan> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<SelectToMinMax, UnsignedBoolCompare,
                 UnsignedBoolMinMax<arith::MaxSIOp, arith::MaxUIOp>,
                 UnsignedBoolMinMax<arith::MinSIOp, arith::MinUIOp>>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
} // namespace mlir::mlircap
