//===- WidenSums.cpp - f32 sums accumulate in f64 (CPU) -------------------===//
//
// The CPU lowers a reduction to one sequential loop, so an f32 sum of n
// elements carries an error growing with n (2.4e-5 relative on 1M elements,
// where eager torch's blocked sums give 3e-8). A reduction payload that adds
// into its f32 accumulator and nothing else accumulates in f64 instead: the
// init is extended, each addend extended, the result truncated once. The f64
// adds may be reassociated, so the loop vectorizer keeps several f64 partial
// sums (an f32 sum of 1M elements: relative error ~3e-8, as eager). A
// bf16/f16 max or min reduction accumulates in f32 (WidenMinMax: exact, and
// the accumulator stays in a register instead of a bf16 store and integer
// rounding per element). See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPWIDENSUMS
#include "mlircap/Passes.h.inc"

namespace {
/// An elementwise generic converting `v` (a ranked float tensor) to `to`;
/// a fill with a constant becomes a fill with the converted constant, so a
/// widened sum reads as a sum that accumulates in f64 from the start (CSE
/// then merges it with the same sum in f64 next to it: LayerNorm's mean in
/// f32 and the f64 one of its variance).
Value convertTensor(OpBuilder &b, Location loc, Value v, Type to) {
  auto type = cast<RankedTensorType>(v.getType());
  FloatAttr c;
  if (auto fill = v.getDefiningOp<linalg::FillOp>();
      fill && matchPattern(fill.value(), m_Constant(&c))) {
    APFloat f = c.getValue();
    bool lost;
    f.convert(cast<FloatType>(to).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    Value k = arith::ConstantOp::create(b, loc, FloatAttr::get(to, f));
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), to);
    return linalg::FillOp::create(b, loc, k, empty).getResult(0);
  }
  Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), to);
  unsigned rank = type.getRank();
  SmallVector<AffineMap> maps(2, b.getMultiDimIdentityMap(rank));
  return linalg::GenericOp::create(
             b, loc, TypeRange{empty.getType()}, ValueRange{v}, ValueRange{empty}, maps,
             SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
             [&](OpBuilder &nb, Location l, ValueRange args) {
               Value c = to.getIntOrFloatBitWidth() > type.getElementTypeBitWidth()
                             ? arith::ExtFOp::create(nb, l, to, args[0]).getResult()
                             : arith::TruncFOp::create(nb, l, to, args[0]).getResult();
               linalg::YieldOp::create(nb, l, c);
             })
      .getResult(0);
}

/// The `arith.addf` of a plain sum into `init`'s accumulator (`acc' = acc +
/// term`, the accumulator used by that add only, the add only yielded), when
/// the accumulator has element type `elem`; else null.
arith::AddFOp sumAdd(linalg::GenericOp op, OpOperand &init, Type elem) {
  BlockArgument acc = op.getMatchingBlockArgument(&init);
  if (acc.getType() != elem || !acc.hasOneUse())
    return {};
  auto add = dyn_cast<arith::AddFOp>(*acc.getUsers().begin());
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  unsigned i = init.getOperandNumber() - op.getNumDpsInputs();
  if (!add || !add->hasOneUse() || yield.getOperand(i) != add.getResult() ||
      add.getLhs() == add.getRhs())
    return {};
  return add;
}

struct WidenSum : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(linalg::GenericOp op, PatternRewriter &rw) const override {
    if (op.getNumReductionLoops() == 0 || !op.hasPureTensorSemantics())
      return failure();
    Block *body = op.getBody();
    auto yield = cast<linalg::YieldOp>(body->getTerminator());
    // The outputs whose accumulator's only use is one addf, yielded and used
    // nowhere else: `acc' = acc + term`.
    llvm::DenseMap<Operation *, unsigned> adds; // addf -> output index
    for (OpOperand &init : op.getDpsInitsMutable())
      if (arith::AddFOp add = sumAdd(op, init, rw.getF32Type()))
        adds[add] = init.getOperandNumber() - op.getNumDpsInputs();
    if (adds.empty())
      return failure();

    Location loc = op.getLoc();
    Type f64 = rw.getF64Type();
    SmallVector<Value> inits(op.getDpsInits());
    SmallVector<Type> types(op.getResultTypes());
    for (auto [add, i] : adds) {
      inits[i] = convertTensor(rw, loc, inits[i], f64);
      types[i] = inits[i].getType();
    }
    auto widened = linalg::GenericOp::create(
        rw, loc, types, op.getDpsInputs(), inits, op.getIndexingMapsArray(),
        op.getIteratorTypesArray(), [&](OpBuilder &nb, Location l, ValueRange args) {
          IRMapping map;
          for (auto [old, now] : llvm::zip(body->getArguments(), args))
            if (old.getType() == now.getType())
              map.map(old, now);
          for (Operation &inner : body->without_terminator()) {
            auto it = adds.find(&inner);
            if (it == adds.end()) {
              nb.clone(inner, map);
              continue;
            }
            auto add = cast<arith::AddFOp>(inner);
            unsigned accNo = op.getNumDpsInputs() + it->second;
            Value acc = args[accNo];
            bool accFirst = add.getLhs() == body->getArgument(accNo);
            Value term = accFirst ? add.getRhs() : add.getLhs();
            Value wide = arith::ExtFOp::create(nb, l, f64, map.lookupOrDefault(term));
            // reassoc: f64 partial sums of f32 terms stay far more accurate
            // than the f32 result, and let LLVM vectorize the reduction loop
            // (several f64 accumulators) instead of one scalar add chain.
            // The operands keep their order (CSE sees the f64 sum as written).
            map.map(add.getResult(), arith::AddFOp::create(nb, l, accFirst ? acc : wide,
                                                           accFirst ? wide : acc,
                                                           arith::FastMathFlags::reassoc)
                                         .getResult());
          }
          SmallVector<Value> results;
          for (Value v : yield.getOperands())
            results.push_back(map.lookupOrDefault(v));
          linalg::YieldOp::create(nb, l, results);
        });
    SmallVector<Value> replacements(widened.getResults());
    for (auto [add, i] : adds)
      replacements[i] = convertTensor(rw, loc, replacements[i], rw.getF32Type());
    rw.replaceOp(op, replacements);
    return success();
  }
};

/// The max/min op of a bf16/f16 max or min reduction into `init`'s accumulator
/// (`acc' = max(acc, term)`: arith.maximumf/minimumf/maxnumf/minnumf, the
/// accumulator used by that op only, the op only yielded); else null.
Operation *narrowMinMax(linalg::GenericOp op, OpOperand &init) {
  BlockArgument acc = op.getMatchingBlockArgument(&init);
  auto type = dyn_cast<FloatType>(acc.getType());
  if (!type || !(type.isBF16() || type.isF16()) || !acc.hasOneUse())
    return nullptr;
  Operation *user = *acc.getUsers().begin();
  if (!isa<arith::MaximumFOp, arith::MinimumFOp, arith::MaxNumFOp, arith::MinNumFOp>(user) ||
      !user->hasOneUse() || user->getOperand(0) == user->getOperand(1))
    return nullptr;
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  unsigned i = init.getOperandNumber() - op.getNumDpsInputs();
  if (yield.getOperand(i) != user->getResult(0))
    return nullptr;
  return user;
}

/// A bf16/f16 max or min reduction accumulates in f32: the accumulator is
/// kept in a register by mlircap-reduction-loops and the loop vectorizes,
/// where a bf16 accumulator is stored and reloaded through the emulation's
/// integer rounding on every element (bf16 amax over rows of 620: 0.18x
/// eager). Exact: extending is exact, a max or min picks one of its operands,
/// so the f32 result rounds back to the same bf16/f16 value.
struct WidenMinMax : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(linalg::GenericOp op, PatternRewriter &rw) const override {
    if (op.getNumReductionLoops() == 0 || !op.hasPureTensorSemantics())
      return failure();
    Block *body = op.getBody();
    auto yield = cast<linalg::YieldOp>(body->getTerminator());
    llvm::DenseMap<Operation *, unsigned> ops; // max/min -> output index
    for (OpOperand &init : op.getDpsInitsMutable())
      if (Operation *m = narrowMinMax(op, init))
        ops[m] = init.getOperandNumber() - op.getNumDpsInputs();
    if (ops.empty())
      return failure();

    Location loc = op.getLoc();
    Type f32 = rw.getF32Type();
    SmallVector<Value> inits(op.getDpsInits());
    SmallVector<Type> types(op.getResultTypes());
    SmallVector<Type> narrow(op.getResultTypes());
    for (auto [m, i] : ops) {
      inits[i] = convertTensor(rw, loc, inits[i], f32);
      types[i] = inits[i].getType();
    }
    auto widened = linalg::GenericOp::create(
        rw, loc, types, op.getDpsInputs(), inits, op.getIndexingMapsArray(),
        op.getIteratorTypesArray(), [&](OpBuilder &nb, Location l, ValueRange args) {
          IRMapping map;
          for (auto [old, now] : llvm::zip(body->getArguments(), args))
            if (old.getType() == now.getType())
              map.map(old, now);
          for (Operation &inner : body->without_terminator()) {
            auto it = ops.find(&inner);
            if (it == ops.end()) {
              nb.clone(inner, map);
              continue;
            }
            unsigned accNo = op.getNumDpsInputs() + it->second;
            bool accFirst = inner.getOperand(0) == body->getArgument(accNo);
            Value term = map.lookupOrDefault(inner.getOperand(accFirst ? 1 : 0));
            Value wide = arith::ExtFOp::create(nb, l, f32, term);
            Value acc = args[accNo];
            OperationState state(l, inner.getName());
            state.addOperands({accFirst ? acc : wide, accFirst ? wide : acc});
            state.addTypes(f32);
            state.addAttributes(inner.getAttrs());
            map.map(inner.getResult(0), nb.create(state)->getResult(0));
          }
          SmallVector<Value> results;
          for (Value v : yield.getOperands())
            results.push_back(map.lookupOrDefault(v));
          linalg::YieldOp::create(nb, l, results);
        });
    SmallVector<Value> replacements(widened.getResults());
    for (auto [m, i] : ops)
      replacements[i] =
          convertTensor(rw, loc, replacements[i], cast<ShapedType>(narrow[i]).getElementType());
    rw.replaceOp(op, replacements);
    return success();
  }
};

/// Sums that accumulate in f64 already (torch-mlir's var_mean, or widened
/// above) may be reassociated: the loop vectorizer then keeps several f64
/// partial sums instead of one scalar add chain (4 cycles per element).
/// Eager torch's own sums are vectorized and blocked, so no summation order
/// is more eager's than another; f64 partial sums of the terms are as
/// accurate as the sequential order.
void reassociateF64Sums(Operation *root) {
  Type f64 = Float64Type::get(root->getContext());
  root->walk([&](linalg::GenericOp op) {
    if (op.getNumReductionLoops() == 0)
      return;
    for (OpOperand &init : op.getDpsInitsMutable())
      if (arith::AddFOp add = sumAdd(op, init, f64))
        add.setFastmath(add.getFastmath() | arith::FastMathFlags::reassoc);
  });
}

struct WidenSums : impl::MlircapWidenSumsBase<WidenSums> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<WidenSum, WidenMinMax>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
    reassociateF64Sums(getOperation());
  }
};
} // namespace
} // namespace mlir::mlircap
