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
// Transposes also pass through paddings, concatenations and generics with
// reduction loops after their result's (pooling). Reductions reading an NHWC
// result with the identity map (per-channel spatial sums) get their loops
// permuted to read it in memory order (permuteReductions). A convolution whose
// result is read any other way (a reshape such as GroupNorm's groups) stays
// NCHW: that reader would read NHWC data strided.
// See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
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

/// The rank of the result a generic computes for each point of its leading
/// parallel loops, when it can be computed transposed by permuting those
/// loops: one result whose map is the identity on the leading loops (all
/// reduction loops after them: elementwise ops, pooling, reductions), static
/// shapes, an init that is unread or a fill; 0 when it cannot.
unsigned permutableRank(Operation *op) {
  auto g = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!g || !g.hasPureTensorSemantics() || g.getNumDpsInits() != 1 || g.getNumResults() != 1 ||
      op->hasAttr(kMaterializeAttr) || !hasStaticShapes(op))
    return 0;
  AffineMap out = g.getMatchingIndexingMap(g.getDpsInitOperand(0));
  unsigned r = out.getNumResults();
  if (r == 0 || out.getNumDims() != g.getNumLoops())
    return 0;
  for (unsigned i = 0; i < r; ++i) // (d0, ..., dn) -> (d0, ..., d(r-1))
    if (out.getResult(i) != getAffineDimExpr(i, op->getContext()))
      return 0;
  auto iters = g.getIteratorTypesArray();
  for (unsigned i = 0; i < iters.size(); ++i)
    if ((i < r) != (iters[i] == utils::IteratorType::parallel))
      return 0;
  if (g.payloadUsesValueFromOperand(g.getDpsInitOperand(0)) &&
      !g.getDpsInitOperand(0)->get().getDefiningOp<linalg::FillOp>())
    return 0;
  return r;
}

/// The map from permuted loops to a generic's old ones: old loop i is new loop
/// inv[i].
AffineMap toOldLoops(ArrayRef<int64_t> inv, MLIRContext *ctx) {
  SmallVector<AffineExpr> old;
  for (int64_t k : inv)
    old.push_back(getAffineDimExpr(k, ctx));
  return AffineMap::get(inv.size(), 0, old, ctx);
}

/// `g`'s body over permuted loops (old loop i is new loop inv[i]): a generic
/// reading `ins` with `maps` (the result's last), writing a new tensor of
/// `shape` (filled as g's init was, if it was a fill).
linalg::GenericOp permutedGeneric(OpBuilder &b, linalg::GenericOp g, ArrayRef<int64_t> inv, ValueRange ins,
                                  ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
                                  ArrayRef<int64_t> shape) {
  Location loc = g.getLoc();
  Type et = cast<RankedTensorType>(g->getResult(0).getType()).getElementType();
  Value init = tensor::EmptyOp::create(b, loc, shape, et);
  if (auto fill = g.getDpsInitOperand(0)->get().getDefiningOp<linalg::FillOp>())
    init = linalg::FillOp::create(b, loc, fill.getInputs()[0], init).getResult(0);
  auto moved = linalg::GenericOp::create(b, loc, TypeRange{init.getType()}, ins, ValueRange{init}, maps, iters);
  IRMapping none;
  g.getRegion().cloneInto(&moved.getRegion(), none);
  moved.getRegion().front().walk([&](linalg::IndexOp idx) { idx.setDim(inv[idx.getDim()]); });
  return moved;
}

/// A reduction whose loops can be permuted (permuteReduction): one result
/// whose map is a projected permutation of the loops, static shapes, an init
/// that is unread or a fill.
bool permutableReduction(linalg::GenericOp g) {
  if (isAllParallel(g) || !g.hasPureTensorSemantics() || g.getNumDpsInits() != 1 ||
      g.getNumResults() != 1 || g->hasAttr(kMaterializeAttr) || !hasStaticShapes(g))
    return false;
  AffineMap out = g.getMatchingIndexingMap(g.getDpsInitOperand(0));
  if (!out.isProjectedPermutation(/*allowZeroInResults=*/false) || out.getNumResults() == 0)
    return false;
  return !g.payloadUsesValueFromOperand(g.getDpsInitOperand(0)) ||
         g.getDpsInitOperand(0)->get().getDefiningOp<linalg::FillOp>();
}

/// Whether operand map `m` of a generic indexes its operand along the result's
/// dims: result i uses no leading (parallel) loop other than i. Such an operand
/// can be read transposed like the result (pooling's input; identity and
/// elementwise maps).
bool alignedMap(AffineMap m, unsigned r) {
  if (m.getNumResults() != r)
    return false;
  for (unsigned i = 0; i < r; ++i)
    for (unsigned d = 0; d < r; ++d)
      if (d != i && m.getResult(i).isFunctionOfDim(d))
        return false;
  return true;
}

/// A padding with static sizes and a constant value defined outside it
/// (transposable: a new pad can yield the same value).
tensor::PadOp staticPad(Operation *op) {
  auto pad = dyn_cast_or_null<tensor::PadOp>(op);
  if (!pad || !hasStaticShapes(pad) || ShapedType::isDynamicShape(pad.getStaticLow()) ||
      ShapedType::isDynamicShape(pad.getStaticHigh()))
    return {};
  Value value = pad.getConstantPaddingValue();
  if (!value || value.getParentRegion() == &pad.getRegion())
    return {};
  return pad;
}

/// Ops that only re-index their first operand (views when the launch plan
/// can express them so).
bool isViewLike(Operation *op) {
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::ExtractSliceOp>(op))
    return true;
  auto g = dyn_cast<linalg::GenericOp>(op);
  return g && isDataMovementGeneric(g);
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

  /// Replaces NCHW convolution `conv` by its NHWC form: `make(b, loc, x, w,
  /// init)` builds it from the input transposed to NHWC, the filter transposed
  /// by `filterPerm` and a zero NHWC init (its bias broadcast along NHWC's
  /// channels where it has one: convBiasOf); its result is transposed back.
  template <typename ConvOp, typename Make>
  void toNhwc(ConvOp conv, ArrayRef<int64_t> filterPerm, Make make) {
    OpBuilder b(conv);
    Location loc = conv.getLoc();
    Value x = conv.getDpsInputOperand(0)->get(), w = conv.getDpsInputOperand(1)->get();
    // a padded input: push() moves the transpose through the padding
    Value xt = transposed(b, loc, x, kToNhwc);
    Value wt = transpose(b, loc, w, filterPerm).getResult(0);
    auto outType = cast<RankedTensorType>(conv->getResult(0).getType());
    SmallVector<int64_t> shape;
    for (int64_t p : kToNhwc)
      shape.push_back(outType.getDimSize(p));
    Type et = outType.getElementType();
    Value init;
    if (Value bias = convBiasOf(conv)) {
      // a bias the convolution adds (mlircap-library-init, CPU): along NHWC's channels
      init = buildConvBiasInit(b, loc, bias, RankedTensorType::get(shape, et), 3);
    } else {
      Value empty = tensor::EmptyOp::create(b, loc, shape, et);
      Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(et));
      init = linalg::FillOp::create(b, loc, zero, empty).getResult(0);
    }
    Operation *nhwc = make(b, loc, xt, wt, init);
    auto back = transpose(b, loc, nhwc->getResult(0), kToNchw);
    back->setAttr(kFromNhwcAttr, b.getUnitAttr());
    conv->getResult(0).replaceAllUsesWith(back.getResult(0));
    conv->erase();
  }

  void convert(linalg::Conv2DNchwFchwOp conv) {
    auto strides = conv.getStrides(), dilations = conv.getDilations();
    toNhwc(conv, kToNhwc, [&](OpBuilder &b, Location loc, Value x, Value w, Value init) -> Operation * {
      return linalg::Conv2DNhwcFhwcOp::create(b, loc, TypeRange{init.getType()}, ValueRange{x, w},
                                              ValueRange{init}, strides, dilations);
    });
  }

  /// A depthwise convolution in NHWC: input (N, H, W, C), filter (kh, kw, C).
  /// torch runs it with channels-last operands (cuDNN's NHWC depthwise
  /// kernels); NCHW, its bf16 kernel was 2x slower (ConvNeXt's 7x7, H200).
  void convert(linalg::DepthwiseConv2DNchwChwOp conv) {
    static constexpr int64_t kFilterToHwc[3] = {1, 2, 0};
    auto strides = conv.getStrides(), dilations = conv.getDilations();
    toNhwc(conv, kFilterToHwc, [&](OpBuilder &b, Location loc, Value x, Value w, Value init) -> Operation * {
      auto op = linalg::DepthwiseConv2DNhwcHwcOp::create(b, loc, TypeRange{init.getType()}, ValueRange{x, w},
                                                         ValueRange{init}, strides, dilations);
      op->setAttr(kLibraryDepthwiseAttr, b.getUnitAttr());
      return op;
    });
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
    if (auto pad = staticPad(def); pad && pad.getSourceType().getRank() == (int64_t)perm.size()) {
      // t(pad(x)) = pad'(t(x)), the padding's dims permuted
      Value x = transposed(b, loc, pad.getSource(), perm);
      SmallVector<OpFoldResult> lo, hi;
      for (int64_t p : perm) {
        lo.push_back(b.getIndexAttr(pad.getStaticLow()[p]));
        hi.push_back(b.getIndexAttr(pad.getStaticHigh()[p]));
      }
      auto type = cast<RankedTensorType>(t->getResult(0).getType());
      Value padded = tensor::PadOp::create(b, loc, type, x, lo, hi, pad.getConstantPaddingValue());
      replace(t, src, perm, padded);
      return true;
    }
    if (auto cat = dyn_cast_or_null<tensor::ConcatOp>(def);
        cat && cat.getResultType().getRank() == (int64_t)perm.size() && hasStaticShapes(cat)) {
      // t(concat_d(a, b, ...)) = concat_k(t(a), t(b), ...), k the result dim
      // that is d (UNet's skip connections joined on channels)
      int64_t k = llvm::find(perm, (int64_t)cat.getDim()) - perm.begin();
      SmallVector<Value> parts;
      for (Value in : cat.getInputs())
        parts.push_back(transposed(b, loc, in, perm));
      replace(t, src, perm, tensor::ConcatOp::create(b, loc, k, parts).getResult());
      return true;
    }
    unsigned r = permutableRank(def);
    if (r != perm.size())
      return false;
    auto g = cast<linalg::GenericOp>(def);
    unsigned n = g.getNumLoops();
    // New loop k of the leading ones is old loop perm[k]; q maps the new loops
    // to the old (reduction loops unchanged).
    SmallVector<int64_t> inv(n);
    for (unsigned i = 0; i < n; ++i)
      inv[i] = i;
    for (unsigned k = 0; k < r; ++k)
      inv[perm[k]] = k;
    AffineMap q = toOldLoops(inv, b.getContext());
    SmallVector<Value> ins;
    SmallVector<AffineMap> maps;
    for (OpOperand *in : g.getDpsInputOperands()) {
      AffineMap m = g.getMatchingIndexingMap(in);
      Operation *producer = in->get().getDefiningOp();
      bool pushable = permutableRank(producer) == r || !permOf(producer).empty() || staticPad(producer);
      if (pushable && alignedMap(m, r) && cast<ShapedType>(in->get().getType()).getRank() == (int64_t)r) {
        // read the operand transposed like the result: result k of the map
        // is old result perm[k]
        SmallVector<AffineExpr> exprs;
        for (int64_t p : perm)
          exprs.push_back(m.getResult(p));
        ins.push_back(transposed(b, loc, in->get(), perm));
        maps.push_back(AffineMap::get(n, 0, exprs, b.getContext()).compose(q));
      } else {
        ins.push_back(in->get());
        maps.push_back(m.compose(q));
      }
    }
    maps.push_back(g.getMatchingIndexingMap(g.getDpsInitOperand(0)));
    auto type = cast<RankedTensorType>(t->getResult(0).getType());
    auto moved = permutedGeneric(b, g, inv, ins, maps, g.getIteratorTypesArray(), type.getShape());
    replace(t, src, perm, moved.getResult(0));
    // g's other readers read the moved result through the inverse transpose
    // (index arithmetic in their kernels) rather than g being computed twice,
    // once per layout: ConvNeXt's residual stream, read by the next block's
    // convolution (pushed here) and by its residual add, was recomputed from
    // every earlier block's terms in the stage's last kernel.
    if (viewableReaders(src, t)) {
      auto view = transpose(b, loc, moved.getResult(0), invertPermutationVector(perm));
      view->setAttr(kFromNhwcAttr, b.getUnitAttr());
      src.replaceUsesWithIf(view.getResult(0), [&](OpOperand &use) { return use.getOwner() != t; });
    }
    return true;
  }

  /// Whether every live reader of `v` other than `t` indexes it through an
  /// affine map (a generic that is no library op) or returns it (copied out
  /// NCHW): they can read a transposed view of it at no cost but indexing.
  static bool viewableReaders(Value v, Operation *t) {
    return llvm::all_of(v.getUses(), [&](OpOperand &use) {
      Operation *user = use.getOwner();
      if (user == t || wouldOpBeTriviallyDead(user))
        return true;
      if (isa<func::ReturnOp>(user))
        return true;
      return isa<linalg::GenericOp>(user) && !isLibraryOp(user);
    });
  }

  /// Whether `v` transposed by `perm` costs no transposed access once pushed:
  /// it is a transpose that composes with `perm` to the identity, or an
  /// elementwise generic (all-parallel, permutable) whose full-rank operands
  /// all are, within `depth` ops, and whose other readers can read a view
  /// (viewableReaders), so that pushing it creates no second copy.
  static bool cancels(Value v, ArrayRef<int64_t> perm, Operation *reader, int depth) {
    Operation *def = v.getDefiningOp();
    if (SmallVector<int64_t> inner = permOf(def); !inner.empty())
      return inner == invertPermutationVector(perm);
    auto g = dyn_cast_or_null<linalg::GenericOp>(def);
    unsigned r = perm.size();
    if (!g || depth == 0 || !isAllParallel(g) || permutableRank(g) != r || !viewableReaders(v, reader))
      return false;
    bool any = false;
    for (OpOperand *in : g.getDpsInputOperands()) {
      auto type = cast<ShapedType>(in->get().getType());
      if (type.getRank() != (int64_t)r || !alignedMap(g.getMatchingIndexingMap(in), r) ||
          llvm::count_if(type.getShape(), [](int64_t d) { return d != 1; }) < 2)
        continue; // a broadcast operand (a bias, a scale) is read the same either way
      if (!cancels(in->get(), perm, g, depth - 1))
        return false;
      any = true;
    }
    return any;
  }

  /// The model's own transposes (a permute to channels-last before a
  /// LayerNorm over channels) of values computed from NHWC tensors read back
  /// as NCHW: pushed into their producers where they cancel with every
  /// transpose there (cancels), so that the value is computed in the layout it
  /// is read in rather than written transposed (ConvNeXt's stage outputs, read
  /// by LayerNorm2d through a permute).
  void pushCancelling(func::FuncOp func) {
    for (int round = 0; round < 8; ++round) {
      SmallVector<linalg::GenericOp> found;
      func.walk([&](linalg::GenericOp t) {
        SmallVector<int64_t> perm = permOf(t);
        if (perm.size() != 4 || t->use_empty() || t->hasAttr(kFromNhwcAttr))
          return;
        Value src = t.getDpsInputOperand(0)->get();
        if (!permOf(src.getDefiningOp()).empty())
          return; // two transposes in a row: push() composes them
        if (cancels(src, perm, t, kLookAhead))
          found.push_back(t);
      });
      if (found.empty())
        return;
      for (linalg::GenericOp t : found)
        work.push_back(t);
      while (!work.empty())
        (void)push(work.pop_back_val());
    }
  }

  /// Uses of transpose `t` (of `src` by `perm`) now read `r`, and so does any
  /// later request for that transpose.
  void replace(linalg::GenericOp t, Value src, ArrayRef<int64_t> perm, Value r) {
    t->getResult(0).replaceAllUsesWith(r);
    made[{src, key(perm)}] = r;
  }

  /// The permutation of the NHWC-derived transpose `v` is computed from (a
  /// transpose out of an NHWC convolution or of a permuted reduction),
  /// directly or through elementwise generics reading it along their
  /// result's dims; empty if none within `depth` ops.
  static SmallVector<int64_t> nhwcPerm(Value v, int depth) {
    Operation *def = v.getDefiningOp();
    if (def && def->hasAttr(kFromNhwcAttr))
      return permOf(def);
    auto g = dyn_cast_or_null<linalg::GenericOp>(def);
    unsigned rank = cast<ShapedType>(v.getType()).getRank();
    if (!g || depth == 0 || !isAllParallel(g) || permutableRank(g) != rank)
      return {};
    for (OpOperand *in : g.getDpsInputOperands())
      if (g.getMatchingIndexingMap(in).isIdentity() && cast<ShapedType>(in->get().getType()).getRank() == rank)
        if (SmallVector<int64_t> p = nhwcPerm(in->get(), depth - 1); !p.empty())
          return p;
    return {};
  }

  /// Reduction `g` with its loops permuted: new loop k is old loop q[k], so
  /// that an operand read with the identity map, the NCHW view of an NHWC
  /// tensor, is read in memory order (GroupNorm's per-channel spatial sums
  /// become column reductions over contiguous channels). A result whose dims
  /// would no longer be in loop order is written in loop order and read
  /// through a transpose (itself NHWC-derived: the next reduction reading it
  /// is permuted the same way).
  void permuteReduction(linalg::GenericOp g, ArrayRef<int64_t> q) {
    OpBuilder b(g);
    Location loc = g.getLoc();
    unsigned n = g.getNumLoops();
    SmallVector<int64_t> inv(n);
    for (unsigned k = 0; k < n; ++k)
      inv[q[k]] = k;
    AffineMap toOld = toOldLoops(inv, b.getContext());
    SmallVector<Value> ins;
    SmallVector<AffineMap> maps;
    for (OpOperand *in : g.getDpsInputOperands()) {
      AffineMap m = g.getMatchingIndexingMap(in);
      if (m.isIdentity() && !nhwcPerm(in->get(), kLookAhead).empty()) {
        ins.push_back(transposed(b, loc, in->get(), q));
        maps.push_back(b.getMultiDimIdentityMap(n));
      } else {
        ins.push_back(in->get());
        maps.push_back(m.compose(toOld));
      }
    }
    SmallVector<utils::IteratorType> iters;
    auto oldIters = g.getIteratorTypesArray();
    for (unsigned k = 0; k < n; ++k)
      iters.push_back(oldIters[q[k]]);
    // The result's dims in new loop order: result dim j of the new result is
    // old result dim order[j].
    AffineMap out = g.getMatchingIndexingMap(g.getDpsInitOperand(0));
    unsigned r = out.getNumResults();
    SmallVector<int64_t> order(r);
    for (unsigned j = 0; j < r; ++j)
      order[j] = j;
    auto newDim = [&](int64_t j) { return inv[cast<AffineDimExpr>(out.getResult(j)).getPosition()]; };
    llvm::sort(order, [&](int64_t a, int64_t c) { return newDim(a) < newDim(c); });
    auto type = cast<RankedTensorType>(g->getResult(0).getType());
    SmallVector<int64_t> shape;
    SmallVector<AffineExpr> outExprs;
    for (int64_t j : order) {
      shape.push_back(type.getDimSize(j));
      outExprs.push_back(b.getAffineDimExpr(newDim(j)));
    }
    maps.push_back(AffineMap::get(n, 0, outExprs, b.getContext()));
    auto moved = permutedGeneric(b, g, inv, ins, maps, iters, shape);
    Value result = moved.getResult(0);
    if (!llvm::is_sorted(order)) {
      // old result dim k is new result dim back[k]
      SmallVector<int64_t> back(r);
      for (unsigned j = 0; j < r; ++j)
        back[order[j]] = j;
      auto t = transpose(b, loc, result, back);
      t->setAttr(kFromNhwcAttr, b.getUnitAttr());
      result = t.getResult(0);
    }
    g->getResult(0).replaceAllUsesWith(result);
    g->erase();
  }

  /// Permutes every reduction reading an NHWC-derived value (see
  /// permuteReduction), the transposes that requires pushed up to where they
  /// cancel; again for reductions reading the permuted ones' results.
  void permuteReductions(func::FuncOp func) {
    for (int round = 0; round < 8; ++round) {
      SmallVector<std::pair<linalg::GenericOp, SmallVector<int64_t>>> found;
      func.walk([&](linalg::GenericOp g) {
        if (!permutableReduction(g))
          return;
        for (OpOperand *in : g.getDpsInputOperands()) {
          if (!g.getMatchingIndexingMap(in).isIdentity())
            continue;
          SmallVector<int64_t> p = nhwcPerm(in->get(), kLookAhead);
          if (p.empty())
            continue;
          if (!isIdentityPermutation(p))
            found.push_back({g, invertPermutationVector(p)});
          return;
        }
      });
      if (found.empty())
        return;
      for (auto &[g, q] : found)
        permuteReduction(g, q);
      while (!work.empty())
        (void)push(work.pop_back_val());
    }
  }

  /// Whether the readers of a convolution's result can read it in NHWC at no
  /// cost: convolutions, paddings, generics that index it along their result's
  /// dims (elementwise epilogues, pooling). The elementwise readers' own
  /// readers are checked the same way up to `depth` ops away: a reshape
  /// (GroupNorm's groups) or a reduction over the spatial dims there would read
  /// NHWC data strided (UNet: conv, bias add, GroupNorm; reductions reading
  /// it with the identity map are permuted instead). Past `depth` the
  /// transposes have met other convolutions' (ResNet's residual stream).
  /// Transposes (a 4-D permutation generic) that read a convolution's result
  /// only through elementwise ops are collected in `readers`: pushed into their
  /// producers after the conversion, they meet the transpose back out of the
  /// NHWC convolution and compose with it (ConvNeXt's permute to channels-last
  /// after its depthwise convolution cancels).
  static bool readsAlign(Value v, int depth, SmallVectorImpl<linalg::GenericOp> &readers) {
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isLibraryConv(user) || isa<func::ReturnOp>(user))
        continue;
      if (auto pad = staticPad(user)) {
        if (!readsAlign(pad.getResult(), depth, readers))
          return false;
        continue;
      }
      if (auto cat = dyn_cast<tensor::ConcatOp>(user); cat && hasStaticShapes(cat)) {
        if (!readsAlign(cat.getResult(), depth, readers))
          return false;
        continue;
      }
      if (SmallVector<int64_t> perm = permOf(user); perm.size() == 4) {
        readers.push_back(cast<linalg::GenericOp>(user));
        continue;
      }
      auto g = dyn_cast<linalg::GenericOp>(user);
      if (g && permutableReduction(g) && g.getMatchingIndexingMap(&use).isIdentity())
        continue; // read in NHWC order by permuteReduction
      unsigned r = permutableRank(user);
      if (!g || r != 4 || !alignedMap(g.getMatchingIndexingMap(&use), r))
        return false;
      if (isAllParallel(g) && depth > 0 && !readsAlign(g->getResult(0), depth - 1, readers))
        return false;
    }
    return true;
  }
  /// How many elementwise ops past a convolution readsAlign looks.
  static constexpr int kLookAhead = 8;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    made.clear(); // values of another function are dead here
    work.clear();
    if (auto module = func->getParentOfType<ModuleOp>(); module && module->hasAttr("mlircap.nchw_convs"))
      return;
    SmallVector<linalg::Conv2DNchwFchwOp> convs;
    SmallVector<linalg::DepthwiseConv2DNchwChwOp> depthwise;
    SmallVector<linalg::GenericOp> readers;
    func.walk([&](Operation *op) {
      if (!isLibraryOp(op) || !isa<linalg::Conv2DNchwFchwOp, linalg::DepthwiseConv2DNchwChwOp>(op) ||
          !hasStaticShapes(op))
        return;
      SmallVector<linalg::GenericOp> found;
      if (!readsAlign(op->getResult(0), kLookAhead, found))
        return;
      readers.append(found.begin(), found.end());
      if (auto c = dyn_cast<linalg::Conv2DNchwFchwOp>(op))
        convs.push_back(c);
      else
        depthwise.push_back(cast<linalg::DepthwiseConv2DNchwChwOp>(op));
    });
    if (convs.empty() && depthwise.empty())
      return;
    for (auto c : convs)
      convert(c);
    for (auto c : depthwise)
      convert(c);
    for (linalg::GenericOp t : readers) // after the transposes the conversions queued
      work.insert(work.begin(), t);
    while (!work.empty()) {
      linalg::GenericOp t = work.pop_back_val();
      (void)push(t);
    }
    pushCancelling(func);
    permuteReductions(func);
    // A transpose requested again was reused where it was first built, which
    // may come after the new reader: restore def-before-use order.
    (void)sortTopologically(&func.getBody().front());
    // Results are returned as eager computes them: NCHW, contiguous. A result
    // that is an NHWC convolution's result, or a view of one (a slice, a
    // reshape), is copied out by a kernel.
    func.walk([&](func::ReturnOp ret) {
      for (OpOperand &use : ret->getOpOperands()) {
        Operation *def = use.get().getDefiningOp();
        while (def && !def->hasAttr(kFromNhwcAttr) && isViewLike(def))
          def = def->getOperand(0).getDefiningOp();
        if (!def || !def->hasAttr(kFromNhwcAttr))
          continue;
        OpBuilder b(ret);
        linalg::GenericOp copy;
        if (def == use.get().getDefiningOp()) {
          copy = transpose(b, def->getLoc(), def->getOperand(0), kToNchw);
        } else {
          auto type = cast<RankedTensorType>(use.get().getType());
          unsigned rank = type.getRank();
          Value empty = tensor::EmptyOp::create(b, def->getLoc(), type.getShape(), type.getElementType());
          copy = linalg::GenericOp::create(
              b, def->getLoc(), TypeRange{type}, ValueRange{use.get()}, ValueRange{empty},
              SmallVector<AffineMap>(2, b.getMultiDimIdentityMap(rank)),
              SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
              [](OpBuilder &nb, Location l, ValueRange args) { linalg::YieldOp::create(nb, l, args[0]); });
        }
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
