//===- CascadeSums.cpp - float row sums in eager's order (CPU) ------------===//
//
// Eager torch sums a contiguous float row on the CPU (SumKernel.cpp,
// cascade_sum) with 256-bit vectors of the accumulation type (W lanes: 4
// doubles, 8 floats; the kernel has no AVX-512 variant) and four vector
// accumulators: element i of a row of n goes to lane i mod 4W while full
// groups of 4W remain (S = n / 4W groups, "rows" of the cascade); each lane
// sums 16 groups from +0, those sums are summed 16 at a time, and so on over
// four levels (16 becomes 2^(ceil(log2 S) / 4) past 2^19 groups), the
// levels added lowest first; the rest of the full W-vectors is added to
// accumulator 0, the four accumulators are added (0 + 1, + 2, + 3), and the
// row's sum is 0 + the last n mod W elements one by one + the W lanes one
// by one. A row shorter than W sums four scalar accumulators the same way.
// The sequential sum this replaces was 1 ulp off eager's on a 12-element
// f64 row, which flipped a `v >= v.mean()` tie; the cascade's error grows
// with log(n), not n.
//
// Here the terms of 4W consecutive elements are computed as one vector
// (vector.load of the contiguous inputs, the payload's arith/math ops on
// vectors), so every lane of the order above is a lane of a vector<4W x T>
// (two 512-bit registers), and the levels are loops of 16 such vector adds:
// the same association as eager's whatever LLVM does, vectorized (an f64
// sum was a scalar add chain, 4 cycles per element).
//
//===----------------------------------------------------------------------===//
#include "CascadeSums.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SetVector.h"
#include <cstdlib>

namespace mlir::mlircap {
namespace {
/// Bytes of eager's vectors in its sum kernel, and its vector accumulators.
constexpr int64_t kEagerVectorBytes = 32;
constexpr int64_t kAccumulators = 4;
constexpr int64_t kLevels = 4;

Value rootOf(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

/// Scalar types a vectorized payload may compute in: integers, index, f32, f64.
bool vectorizableScalar(Type t) {
  if (isa<IndexType>(t))
    return true;
  if (auto i = dyn_cast<IntegerType>(t))
    return i.getWidth() >= 1;
  return t.isF32() || t.isF64();
}

/// The indices of `map` at loop IVs `ivs`.
SmallVector<Value> indicesAt(OpBuilder &b, Location loc, AffineMap map, ValueRange ivs) {
  SmallVector<OpFoldResult> dims = getAsOpFoldResult(ivs);
  dims.resize(map.getNumDims(), b.getIndexAttr(0));
  return getValueOrCreateConstantIndexOp(
      b, loc, affine::makeComposedFoldedMultiResultAffineApply(b, loc, map, dims));
}

/// Whether every use of `v` (a view of buffer `root`, written by `self`) reads
/// it rounded to f32 or writes it whole; see f32ObservedSums.
bool onlyF32Reads(Value v, Operation *self) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (user == self || isa<memref::DeallocOp>(user))
      continue;
    if (auto view = dyn_cast<ViewLikeOpInterface>(user)) {
      if (view.getViewSource() != v)
        return false;
      for (Value r : user->getResults())
        if (!onlyF32Reads(r, self))
          return false;
      continue;
    }
    auto linalgOp = dyn_cast<linalg::LinalgOp>(user);
    if (!linalgOp || !linalgOp.hasPureBufferSemantics())
      return false;
    BlockArgument arg = linalgOp.getMatchingBlockArgument(&use);
    if (!arg)
      return false;
    if (linalgOp.isDpsInit(&use)) {
      if (!arg.use_empty()) // accumulates into it
        return false;
      continue;
    }
    for (Operation *reader : arg.getUsers()) {
      auto trunc = dyn_cast<arith::TruncFOp>(reader);
      if (!trunc || !trunc.getType().isF32())
        return false;
    }
  }
  return true;
}

/// The terms of `op` (cs.terms) at loop indices `ivs` (its last dim at the
/// first element): vectors of `width` consecutive elements of the last dim,
/// or scalars when `width` is 0.
SmallVector<Value> termsAt(OpBuilder &b, Location loc, linalg::GenericOp op,
                           const CascadeSum &cs, ArrayRef<Value> ivs, int64_t width) {
  unsigned dim = op.getNumLoops() - 1;
  IRMapping map;
  auto vecOf = [&](Type t) { return VectorType::get({width}, t); };
  auto isVec = [](Value v) { return isa<VectorType>(v.getType()); };
  auto asVec = [&](Value v) -> Value {
    return isVec(v) ? v : vector::BroadcastOp::create(b, loc, vecOf(v.getType()), v).getResult();
  };
  for (OpOperand *in : op.getDpsInputOperands()) {
    BlockArgument arg = op.getMatchingBlockArgument(in);
    if (arg.use_empty())
      continue;
    Value v = in->get();
    if (isa<MemRefType>(v.getType())) {
      AffineMap m = op.getMatchingIndexingMap(in);
      SmallVector<Value> idx = indicesAt(b, loc, m, ivs);
      if (width && m.isFunctionOfDim(dim))
        v = vector::LoadOp::create(b, loc, vecOf(arg.getType()), v, idx);
      else
        v = memref::LoadOp::create(b, loc, v, idx);
    }
    map.map(arg, v);
  }
  for (Operation &inner : op.getBody()->without_terminator()) {
    if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
      Value iv = ivs[index.getDim()];
      if (width && index.getDim() == dim) {
        // [0, 1, ..., width - 1] as a constant, not vector.step: the CPU
        // pipeline's convert-to-llvm has no pattern for vector.step (its
        // lowering to this constant is a pre-pattern of convert-vector-to-llvm
        // only), and LLVM IR translation then fails on it.
        SmallVector<Attribute> lanes;
        for (int64_t i = 0; i < width; ++i)
          lanes.push_back(b.getIndexAttr(i));
        auto stepType = VectorType::get({width}, b.getIndexType());
        Value step =
            arith::ConstantOp::create(b, loc, DenseElementsAttr::get(stepType, lanes));
        iv = arith::AddIOp::create(b, loc, asVec(iv), step);
      }
      map.map(index.getResult(), iv);
      continue;
    }
    if (llvm::is_contained(cs.adds, &inner))
      continue;
    bool varying = llvm::any_of(inner.getOperands(),
                                [&](Value o) { return isVec(map.lookupOrDefault(o)); });
    if (!varying) {
      b.clone(inner, map);
      continue;
    }
    SmallVector<Value> operands =
        llvm::map_to_vector(inner.getOperands(), [&](Value o) { return asVec(map.lookupOrDefault(o)); });
    Operation *c = b.clone(inner, map);
    c->setOperands(operands);
    for (Value r : c->getResults())
      r.setType(vecOf(r.getType()));
  }
  return llvm::map_to_vector(cs.terms, [&](Value t) {
    Value v = map.lookupOrDefault(t);
    return width ? asVec(v) : v;
  });
}
} // namespace

bool cascadeSumsEnabled() {
  const char *v = std::getenv("MLIRCAP_CASCADE_SUMS");
  if (!v) // off by default: slower than the blocked sums in places (bench/sum_speed.py)
    return false;
  std::string s = StringRef(v).trim().lower();
  return !(s.empty() || s == "0" || s == "false" || s == "no");
}

llvm::DenseSet<Value> f32ObservedSums(Operation *root) {
  llvm::DenseSet<Value> out;
  root->walk([&](linalg::GenericOp op) {
    if (!op.hasPureBufferSemantics() || op.getNumReductionLoops() == 0)
      return;
    for (OpOperand &init : op.getDpsInitsMutable()) {
      Value r = rootOf(init.get());
      auto type = dyn_cast<MemRefType>(r.getType());
      if (!type || !type.getElementType().isF64() ||
          !(r.getDefiningOp<memref::AllocOp>() || r.getDefiningOp<memref::AllocaOp>()))
        continue;
      if (onlyF32Reads(r, op))
        out.insert(r);
    }
  });
  return out;
}

std::optional<CascadeSum> matchCascadeSum(linalg::GenericOp op,
                                          const llvm::DenseSet<Value> &f32Sums) {
  auto iters = op.getIteratorTypesArray();
  if (!op.hasPureBufferSemantics() || iters.empty() ||
      iters.back() != utils::IteratorType::reduction)
    return std::nullopt;
  unsigned dim = iters.size() - 1;
  Block *body = op.getBody();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  CascadeSum cs;
  for (OpOperand &out : op.getDpsInitsMutable()) {
    BlockArgument acc = op.getMatchingBlockArgument(&out);
    if (!acc.hasOneUse())
      return std::nullopt;
    auto add = dyn_cast<arith::AddFOp>(*acc.getUsers().begin());
    unsigned i = out.getOperandNumber() - op.getNumDpsInputs();
    if (!add || add->getBlock() != body || !add->hasOneUse() ||
        yield.getOperand(i) != add.getResult() || add.getLhs() == add.getRhs())
      return std::nullopt;
    Value term = add.getLhs() == acc ? add.getRhs() : add.getLhs();
    if (auto ext = term.getDefiningOp<arith::ExtFOp>();
        ext && acc.getType().isF64() && ext.getIn().getType().isF32()) {
      // An f64 sum of f32 terms read as f64 (torch-mlir's var_mean: eager
      // sums those in double, Welford) stays the blocked sum of
      // lowerToRegisters.
      if (!f32Sums.contains(rootOf(out.get())))
        return std::nullopt;
      term = ext.getIn();
    }
    Type elem = term.getType();
    if (!(elem.isF32() || elem.isF64()) || (acc.getType() != elem && !acc.getType().isF64()))
      return std::nullopt;
    if (cs.elem && cs.elem != elem)
      return std::nullopt;
    cs.elem = cast<FloatType>(elem);
    cs.terms.push_back(term);
    cs.adds.push_back(add);
  }
  if (!cs.elem)
    return std::nullopt;
  for (Operation &inner : body->without_terminator()) {
    if (isa<linalg::IndexOp>(inner))
      continue;
    Dialect *d = inner.getDialect();
    if (!d || !isa<arith::ArithDialect, math::MathDialect>(d) || inner.getNumRegions() ||
        !(isa<arith::ConstantOp>(inner) || OpTrait::hasElementwiseMappableTraits(&inner)))
      return std::nullopt;
    for (Type t : llvm::concat<Type>(inner.getOperandTypes(), inner.getResultTypes()))
      if (!vectorizableScalar(t))
        return std::nullopt;
  }
  for (OpOperand *in : op.getDpsInputOperands()) {
    if (op.getMatchingBlockArgument(in).use_empty())
      continue;
    auto type = dyn_cast<MemRefType>(in->get().getType());
    if (!type) {
      if (isa<ShapedType>(in->get().getType()))
        return std::nullopt;
      continue;
    }
    AffineMap m = op.getMatchingIndexingMap(in);
    if (!m.isFunctionOfDim(dim))
      continue;
    // Read along the last dim: a vector.load of consecutive elements.
    Type e = type.getElementType();
    if (!(e.isF32() || e.isF64() || (e.isInteger() && e.getIntOrFloatBitWidth() >= 8)) ||
        !type.isLastDimUnitStride() || m.getNumResults() == 0 ||
        m.getResults().back() != getAffineDimExpr(dim, op.getContext()))
      return std::nullopt;
    for (AffineExpr r : m.getResults().drop_back())
      if (r.isFunctionOfDim(dim))
        return std::nullopt;
  }
  return cs;
}

SmallVector<Value> emitCascadeRow(OpBuilder &b, Location loc, linalg::GenericOp op,
                                  const CascadeSum &cs, ArrayRef<Value> ivs, Value base,
                                  int64_t len) {
  unsigned dim = op.getNumLoops() - 1;
  FloatType elem = cs.elem;
  int64_t w = kEagerVectorBytes / (elem.getWidth() / 8), lanes = kAccumulators * w;
  size_t numOut = cs.terms.size();
  auto cst = [&](OpBuilder &ob, int64_t v) {
    return arith::ConstantIndexOp::create(ob, loc, v).getResult();
  };
  // The terms at element `e` (an index value) of the row.
  auto termsOf = [&](OpBuilder &ob, Value e, int64_t width) {
    SmallVector<Value> at(ivs);
    at[dim] = arith::AddIOp::create(ob, loc, base, e);
    return termsAt(ob, loc, op, cs, at, width);
  };
  auto add = [&](OpBuilder &ob, ValueRange a, ValueRange c) {
    SmallVector<Value> s;
    for (auto [x, y] : llvm::zip(a, c))
      s.push_back(arith::AddFOp::create(ob, loc, x, y));
    return s;
  };
  Value zero = arith::ConstantOp::create(b, loc, b.getFloatAttr(elem, 0.0));
  SmallVector<Value> zeros(numOut, zero);

  if (len < w) {
    // Eager's scalar row: four accumulators over groups of four, the rest
    // into the first, then added 0 + 1, + 2, + 3.
    int64_t groups = len / kAccumulators;
    SmallVector<SmallVector<Value>> acc(kAccumulators, zeros);
    for (int64_t i = 0; i < groups * kAccumulators; ++i)
      acc[i % kAccumulators] = add(b, acc[i % kAccumulators], termsOf(b, cst(b, i), 0));
    for (int64_t i = groups * kAccumulators; i < len; ++i)
      acc[0] = add(b, acc[0], termsOf(b, cst(b, i), 0));
    SmallVector<Value> s = acc[0];
    if (groups)
      for (int64_t k = 1; k < kAccumulators; ++k)
        s = add(b, s, acc[k]);
    return s;
  }

  auto vecType = VectorType::get({lanes}, elem);
  Value vzero = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(vecType, b.getFloatAttr(elem, 0.0)));
  SmallVector<Value> vzeros(numOut, vzero);
  int64_t groups = len / lanes;
  int64_t ceilLog2 = groups <= 2 ? 1 : llvm::Log2_64_Ceil(groups);
  int64_t step = int64_t(1) << std::max<int64_t>(4, ceilLog2 / kLevels);
  // Level `k` over `count` blocks of step^k groups from group `first`: each
  // block summed from 0 (level k - 1), the blocks' sums added from 0.
  std::function<SmallVector<Value>(OpBuilder &, unsigned, Value, int64_t)> level =
      [&](OpBuilder &ob, unsigned k, Value first, int64_t count) -> SmallVector<Value> {
    int64_t span = 1;
    for (unsigned j = 0; j < k; ++j)
      span *= step;
    auto loop = scf::ForOp::create(
        ob, loc, cst(ob, 0), cst(ob, count), cst(ob, 1), vzeros,
        [&](OpBuilder &fb, Location, Value j, ValueRange accs) {
          Value g = arith::AddIOp::create(fb, loc, first,
                                          arith::MulIOp::create(fb, loc, j, cst(fb, span)));
          SmallVector<Value> part =
              k == 0 ? termsOf(fb, arith::MulIOp::create(fb, loc, g, cst(fb, lanes)), lanes)
                     : level(fb, k - 1, g, step);
          scf::YieldOp::create(fb, loc, add(fb, accs, part));
        });
    if (k == 0)
      loop->setAttr(kLanesAttr, ob.getI64IntegerAttr(lanes));
    return loop.getResults();
  };
  // Full blocks of the top level, then what is left at each level below.
  SmallVector<int64_t> blocks(kLevels); // blocks[k]: whole blocks of step^k groups
  blocks[0] = groups;
  for (unsigned k = 1; k < kLevels; ++k)
    blocks[k] = blocks[k - 1] / step;
  SmallVector<SmallVector<Value>> sums(kLevels, vzeros);
  int64_t first = 0;
  for (int k = kLevels - 1; k >= 0; --k) {
    int64_t count = k == kLevels - 1 ? blocks[k] : blocks[k] % step, span = 1;
    for (int j = 0; j < k; ++j)
      span *= step;
    if (count)
      sums[k] = level(b, k, cst(b, first), count);
    first += count * span;
  }
  // ((A0 + A1) + A2) + A3, without the levels that got no block: each A is
  // a sum from +0 (never -0), so adding a +0 level would change nothing.
  SmallVector<Value> total;
  for (unsigned k = 0; k < kLevels; ++k)
    if (sums[k] != vzeros)
      total = total.empty() ? sums[k] : add(b, total, sums[k]);
  if (total.empty())
    total = vzeros;
  // The rest of the full W-vectors into accumulator 0, then the four added.
  // Lanes [k w, (k + 1) w) of `v` (a shuffle: llvm.shufflevector).
  auto slice = [&](Value v, int64_t k) -> Value {
    SmallVector<int64_t> mask = llvm::to_vector(llvm::seq<int64_t>(k * w, (k + 1) * w));
    return vector::ShuffleOp::create(b, loc, v, v, mask).getResult();
  };
  SmallVector<Value> acc0 = llvm::map_to_vector(total, [&](Value v) { return slice(v, 0); });
  int64_t vecs = len / w;
  for (int64_t i = groups * kAccumulators; i < vecs; ++i)
    acc0 = add(b, acc0, termsOf(b, cst(b, i * w), w));
  if (total != vzeros) // else accumulators 1-3 are +0 and acc0 a sum from +0
    for (int64_t k = 1; k < kAccumulators; ++k)
      acc0 = add(b, acc0, llvm::map_to_vector(total, [&](Value v) { return slice(v, k); }));
  // 0 + the last elements, then + the lanes.
  SmallVector<Value> s = zeros;
  for (int64_t e = vecs * w; e < len; ++e)
    s = add(b, s, termsOf(b, cst(b, e), 0));
  for (int64_t l = 0; l < w; ++l)
    s = add(b, s, llvm::map_to_vector(acc0, [&](Value v) {
              return (Value)vector::ExtractOp::create(b, loc, v, l).getResult();
            }));
  // Elements outside the loops, for mlircap-outline-parallel's work count.
  if (int64_t straight = len - groups * lanes; straight && !s.empty())
    s.front().getDefiningOp()->setAttr(kWorkAttr, b.getI64IntegerAttr(straight));
  return s;
}

} // namespace mlir::mlircap
