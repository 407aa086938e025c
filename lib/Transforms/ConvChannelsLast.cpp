//===- ConvChannelsLast.cpp - library convolutions in NHWC ---------------===//
//
// cuDNN's bf16/f16 convolution kernels are NHWC kernels: given NCHW tensors,
// torch's cuDNN path transposes the input to NHWC and the result back on every
// call (a third of ResNet's device time on the H200). This pass turns each
// library `linalg.conv_2d_nchw_fchw` into `linalg.conv_2d_nhwc_fhwc` between
// transposes, then pushes each input transpose up through the elementwise
// generics that produce the convolution's input, until it meets the transpose
// back out of the previous convolution, where the two cancel. The activations
// between convolutions then live in NHWC, and the runtime hands cuDNN
// channels-last tensors directly (conv2d_nhwc_fhwc). Transposes that remain
// are data-movement generics: strided views for library ops, indexing for the
// kernels that read them. A function result is never left a transposed view
// of an NHWC tensor: it is copied out (NCHW, contiguous) as eager returns it.
// See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPCONVCHANNELSLAST
#include "mlircap/Passes.h.inc"

namespace {
constexpr int64_t kToNhwc[4] = {0, 2, 3, 1};
constexpr int64_t kToNchw[4] = {0, 3, 1, 2};
/// Marks the transposes out of an NHWC convolution (result copied at a return).
constexpr llvm::StringLiteral kFromNhwcAttr = "mlircap.from_nhwc";

/// `src` transposed: result dim k is `src` dim perm[k] (linalg.transpose's
/// convention), as a data-movement generic.
linalg::GenericOp transpose(OpBuilder &b, Location loc, Value src, ArrayRef<int64_t> perm) {
  auto type = cast<RankedTensorType>(src.getType());
  unsigned rank = type.getRank();
  SmallVector<int64_t> shape;
  SmallVector<AffineExpr> exprs(rank);
  for (unsigned k = 0; k < rank; ++k) {
    shape.push_back(type.getDimSize(perm[k]));
    exprs[perm[k]] = b.getAffineDimExpr(k);
  }
  Value empty = tensor::EmptyOp::create(b, loc, shape, type.getElementType());
  AffineMap in = AffineMap::get(rank, 0, exprs, b.getContext());
  return linalg::GenericOp::create(
      b, loc, TypeRange{empty.getType()}, ValueRange{src}, ValueRange{empty},
      SmallVector<AffineMap>{in, b.getMultiDimIdentityMap(rank)},
      SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
      [](OpBuilder &nb, Location l, ValueRange args) { linalg::YieldOp::create(nb, l, args[0]); });
}

/// The permutation of a transpose generic (see transpose()), or empty.
SmallVector<int64_t> permOf(Operation *op) {
  auto g = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!g || !isViewGeneric(g))
    return {};
  AffineMap in = g.getMatchingIndexingMap(g.getDpsInputOperand(0));
  if (!in.isPermutation())
    return {};
  SmallVector<int64_t> perm(in.getNumResults());
  for (unsigned i = 0; i < in.getNumResults(); ++i)
    perm[cast<AffineDimExpr>(in.getResult(i)).getPosition()] = i;
  return perm;
}

/// An elementwise generic whose result can be computed transposed by
/// permuting its loops: all parallel, one result with the identity map and an
/// unread init, no linalg.index (the body does not depend on loop order).
bool isPermutable(Operation *op) {
  auto g = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!g || !g.hasPureTensorSemantics() || !isAllParallel(g) || g.getNumDpsInits() != 1 ||
      g.getNumResults() != 1 || op->hasAttr(kMaterializeAttr) || !hasStaticShapes(op) ||
      !g.getMatchingIndexingMap(g.getDpsInitOperand(0)).isIdentity() ||
      g.payloadUsesValueFromOperand(g.getDpsInitOperand(0)))
    return false;
  return !g.getRegion().front().walk([](linalg::IndexOp) { return WalkResult::interrupt(); })
              .wasInterrupted();
}

struct ConvChannelsLast : impl::MlircapConvChannelsLastBase<ConvChannelsLast> {
  // (producer, permutation) -> its transposed form, built once.
  llvm::DenseMap<std::pair<Value, unsigned>, Value> made;
  SmallVector<linalg::GenericOp> work;

  static unsigned key(ArrayRef<int64_t> perm) {
    unsigned k = 0;
    for (int64_t p : perm)
      k = k * 8 + p;
    return k;
  }

  /// `v` transposed by `perm`; transposes to push further are queued.
  Value transposed(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> perm) {
    auto it = made.find({v, key(perm)});
    if (it != made.end())
      return it->second;
    auto t = transpose(b, loc, v, perm);
    work.push_back(t);
    made[{v, key(perm)}] = t.getResult(0);
    return t.getResult(0);
  }

  void convert(linalg::Conv2DNchwFchwOp conv) {
    OpBuilder b(conv);
    Location loc = conv.getLoc();
    Value x = conv.getDpsInputOperand(0)->get(), w = conv.getDpsInputOperand(1)->get();
    Value xt;
    if (auto pad = x.getDefiningOp<tensor::PadOp>(); pad && convInputPadding(pad)) {
      auto [ph, pw] = *convInputPadding(pad);
      Value src = transposed(b, loc, pad.getSource(), kToNhwc);
      auto st = cast<RankedTensorType>(src.getType());
      SmallVector<int64_t> shape(st.getShape());
      shape[1] += 2 * ph;
      shape[2] += 2 * pw;
      SmallVector<OpFoldResult> lo = {b.getIndexAttr(0), b.getIndexAttr(ph), b.getIndexAttr(pw),
                                      b.getIndexAttr(0)};
      xt = tensor::PadOp::create(b, loc, RankedTensorType::get(shape, st.getElementType()), src, lo, lo,
                                 pad.getConstantPaddingValue());
    } else {
      xt = transposed(b, loc, x, kToNhwc);
    }
    Value wt = transpose(b, loc, w, kToNhwc).getResult(0);
    auto outType = cast<RankedTensorType>(conv->getResult(0).getType());
    SmallVector<int64_t> shape;
    for (int64_t p : kToNhwc)
      shape.push_back(outType.getDimSize(p));
    Type et = outType.getElementType();
    Value empty = tensor::EmptyOp::create(b, loc, shape, et);
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(et));
    Value init = linalg::FillOp::create(b, loc, zero, empty).getResult(0);
    auto nhwc = linalg::Conv2DNhwcFhwcOp::create(b, loc, TypeRange{init.getType()}, ValueRange{xt, wt},
                                                 ValueRange{init}, conv.getStrides(), conv.getDilations());
    auto back = transpose(b, loc, nhwc->getResult(0), kToNchw);
    back->setAttr(kFromNhwcAttr, b.getUnitAttr());
    conv->getResult(0).replaceAllUsesWith(back.getResult(0));
    conv->erase();
  }

  /// Pushes transpose `t` into its producer; false if it stays.
  bool push(linalg::GenericOp t) {
    if (t->use_empty())
      return false;
    SmallVector<int64_t> perm = permOf(t);
    Value src = t.getDpsInputOperand(0)->get();
    Operation *def = src.getDefiningOp();
    OpBuilder b(t);
    Location loc = t.getLoc();
    if (SmallVector<int64_t> inner = permOf(def); !inner.empty()) {
      // t(s(x)) = x transposed by inner[perm[k]]
      SmallVector<int64_t> both;
      bool identity = true;
      for (unsigned k = 0; k < perm.size(); ++k) {
        both.push_back(inner[perm[k]]);
        identity &= both.back() == (int64_t)k;
      }
      Value x = def->getOperand(0);
      replace(t, src, perm, identity ? x : transposed(b, loc, x, both));
      return true;
    }
    if (!isPermutable(def))
      return false;
    auto g = cast<linalg::GenericOp>(def);
    // The loops of t's result: old loop i is new loop inv[i], which is t's
    // input map (new dims -> old dims).
    AffineMap q = t.getMatchingIndexingMap(t.getDpsInputOperand(0));
    SmallVector<Value> ins;
    SmallVector<AffineMap> maps;
    for (OpOperand *in : g.getDpsInputOperands()) {
      AffineMap m = g.getMatchingIndexingMap(in);
      Operation *producer = in->get().getDefiningOp();
      if (m.isIdentity() && (isPermutable(producer) || !permOf(producer).empty())) {
        ins.push_back(transposed(b, loc, in->get(), perm));
        maps.push_back(b.getMultiDimIdentityMap(perm.size()));
      } else {
        ins.push_back(in->get());
        maps.push_back(m.compose(q));
      }
    }
    auto type = cast<RankedTensorType>(t->getResult(0).getType());
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    maps.push_back(b.getMultiDimIdentityMap(perm.size()));
    auto moved = linalg::GenericOp::create(
        b, loc, TypeRange{type}, ins, ValueRange{empty}, maps,
        SmallVector<utils::IteratorType>(perm.size(), utils::IteratorType::parallel));
    IRMapping none;
    g.getRegion().cloneInto(&moved.getRegion(), none);
    replace(t, src, perm, moved.getResult(0));
    return true;
  }

  /// Uses of transpose `t` (of `src` by `perm`) now read `r`, and so does any
  /// later request for that transpose.
  void replace(linalg::GenericOp t, Value src, ArrayRef<int64_t> perm, Value r) {
    t->getResult(0).replaceAllUsesWith(r);
    made[{src, key(perm)}] = r;
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (auto module = func->getParentOfType<ModuleOp>(); module && module->hasAttr("mlircap.nchw_convs"))
      return;
    SmallVector<linalg::Conv2DNchwFchwOp> convs;
    func.walk([&](linalg::Conv2DNchwFchwOp c) {
      if (isLibraryOp(c) && hasStaticShapes(c))
        convs.push_back(c);
    });
    if (convs.empty())
      return;
    for (auto c : convs)
      convert(c);
    while (!work.empty()) {
      linalg::GenericOp t = work.pop_back_val();
      (void)push(t);
    }
    // Results are returned as eager computes them: NCHW, contiguous.
    func.walk([&](func::ReturnOp ret) {
      for (OpOperand &use : ret->getOpOperands()) {
        auto t = use.get().getDefiningOp<linalg::GenericOp>();
        if (!t || !t->hasAttr(kFromNhwcAttr))
          continue;
        OpBuilder b(ret);
        auto copy = transpose(b, t.getLoc(), t.getDpsInputOperand(0)->get(), kToNchw);
        copy->setAttr(kMaterializeAttr, b.getUnitAttr());
        use.set(copy.getResult(0));
      }
    });
    // What the pushed transposes replaced (the NCHW forms) is dead now.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(func.getBody().front())))
      if (isOpTriviallyDead(&op))
        op.erase();
  }
};
} // namespace
} // namespace mlir::mlircap
