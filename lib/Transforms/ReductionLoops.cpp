//===- ReductionLoops.cpp - reductions accumulate in registers (CPU) ------===//
//
// convert-linalg-to-parallel-loops lowers a reduction `linalg.generic` to
// loops that load the accumulator from the output memref and store it back on
// every iteration. LLVM cannot keep it in a register (it cannot prove that the
// output does not alias an input), so a reduction runs as a serial chain
// through memory and is never vectorized. This pass lowers every reduction
// generic on memrefs (static shapes for the tile form) itself, after
// collapsing runs of dims that every operand indexes contiguously (NCHW's H,
// W: one loop of 1024 instead of 32 fully unrolled 32-element rows):
//
// * innermost dim a reduction dim (row sums, norms, BatchNorm statistics
//   over N, H, W): accumulators in registers,
//
//     scf.parallel (parallel dims) {
//       acc = load outs
//       acc' = scf.for (reduction dims) iter_args(acc) { payload }
//       store acc' to outs
//     }
//
//   f32 sums that mlircap-widen-sums made f64 sums of f32 terms (and
//   torch-mlir's var_mean) over at least 64 elements are summed in blocks of
//   1024 elements of the innermost dim, each block in f32 (vectorized at
//   f32's width: one horizontal add per block), the blocks' sums in f64: as
//   accurate as eager's blocked sums, twice the vector width of f64
//   accumulators. Few outputs over a long innermost dim (x.sum()) are
//   split into chunks of that dim computed in parallel, their partial
//   results combined in chunk order (the same bits on any thread count);
//
// * innermost dim a parallel dim (column sums, x.sum(1) on NCHW): the
//   trailing parallel dims stay innermost and contiguous, accumulated in a
//   stack tile (memref.alloca: it aliases nothing, so LLVM vectorizes the
//   inner loop) of at most 1024 elements per output; the other parallel
//   dims, and tiles of the last dim when those give too few iterations for
//   several threads, become the scf.parallel around
//
//     tile = outs; scf.for (reduction dims) { scf.for (inner) { tile =
//     payload } }; outs = tile
//
// Max/min accumulators become a maxnumf/minnumf that assumes no NaN (one
// vector instruction) beside a flag of a NaN term, the result NaN where it is
// set (`cheapMinMax`): llvm.maximum took six vector ops per element on x86.
// Innermost reduction loops of at least 32 iterations are unrolled at most
// twice by LLVM (`limitUnroll`): their vector loop, fully unrolled, spilled,
// and a short f32 sum fully unrolled was a chain of scalar adds.
//
// Moving parallel dims outside reduction dims keeps each output's order of
// accumulation (the reduction dims run in the generic's order), so results
// are the same as the generic's own loops, and the same on any thread
// count. See Passes.td.
//
// Elementwise generics (every dim parallel) on memrefs get the same dim
// collapsing, after operands' unit dims read at constant 0 are dropped (a
// row's max broadcast as (d0, d1, d2, 0)); one with an input that its
// innermost dim does not index becomes an scf.parallel over the outer dims
// that loads that input once, around an scf.for over the innermost dim
// (`lowerElementwise`): a softmax over 2x32x32x32 ran 0.56x eager on one
// thread, 1.0x with both.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "CascadeSums.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPREDUCTIONLOOPS
#include "mlircap/Passes.h.inc"

namespace {
/// True for a generic this pass rewrites: buffer semantics, at least one
/// reduction dim, outputs indexed by parallel dims only, and accumulators of
/// a type the later CPU passes keep in registers as they are (no bf16/f16
/// emulation of loop-carried values).
bool isReduction(linalg::GenericOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumReductionLoops() == 0)
    return false;
  auto iters = op.getIteratorTypesArray();
  for (OpOperand &out : op.getDpsInitsMutable()) {
    auto type = dyn_cast<MemRefType>(out.get().getType());
    if (!type)
      return false;
    Type elem = type.getElementType();
    if (isa<FloatType>(elem) && elem.getIntOrFloatBitWidth() < 32)
      return false;
    if (!elem.isIntOrFloat())
      return false;
    for (AffineExpr e : op.getMatchingIndexingMap(&out).getResults())
      for (unsigned d = 0; d < iters.size(); ++d)
        if (iters[d] == utils::IteratorType::reduction && e.isFunctionOfDim(d))
          return false;
  }
  for (OpOperand *in : op.getDpsInputOperands())
    if (!isa<MemRefType>(in->get().getType()) && isa<ShapedType>(in->get().getType()))
      return false;
  return true;
}

/// The indices of `map` at loop IVs `ivs` (dims and constants folded). An
/// output's map is given the parallel IVs only: it uses no dim past them.
SmallVector<Value> indices(OpBuilder &b, Location loc, AffineMap map, ValueRange ivs) {
  SmallVector<OpFoldResult> dims = getAsOpFoldResult(ivs);
  dims.resize(map.getNumDims(), b.getIndexAttr(0));
  return getValueOrCreateConstantIndexOp(
      b, loc, affine::makeComposedFoldedMultiResultAffineApply(b, loc, map, dims));
}

/// The accumulator (a block argument) and the term of a sum's add.
std::pair<Value, Value> sumOperands(arith::AddFOp add) {
  return isa<BlockArgument>(add.getLhs()) ? std::pair{add.getLhs(), add.getRhs()}
                                          : std::pair{add.getRhs(), add.getLhs()};
}

/// Elements of one block of a blocked sum (lowerToRegisters), and the
/// fewest elements of a blocked sum's innermost dim.
constexpr int64_t kSumBlock = 1024;
constexpr int64_t kMinBlocked = 64;

/// For every output of `op`, the add of an f32 term widened to f64 into its
/// f64 accumulator (`acc' = acc + extf(term)`, reassociable: the sums of
/// mlircap-widen-sums and torch-mlir's var_mean), the accumulator used by
/// that add only and the add only yielded; empty when some output is not
/// such a sum.
SmallVector<arith::AddFOp> widenedSums(linalg::GenericOp op) {
  SmallVector<arith::AddFOp> adds;
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  for (OpOperand &out : op.getDpsInitsMutable()) {
    BlockArgument acc = op.getMatchingBlockArgument(&out);
    if (!acc.getType().isF64() || !acc.hasOneUse())
      return {};
    auto add = dyn_cast<arith::AddFOp>(*acc.getUsers().begin());
    unsigned i = out.getOperandNumber() - op.getNumDpsInputs();
    if (!add || !add->hasOneUse() || yield.getOperand(i) != add.getResult() ||
        add.getLhs() == add.getRhs() ||
        !arith::bitEnumContainsAll(add.getFastmath(), arith::FastMathFlags::reassoc))
      return {};
    auto [a, term] = sumOperands(add);
    auto ext = term.getDefiningOp<arith::ExtFOp>();
    if (a != acc || !ext || !ext.getIn().getType().isF32())
      return {};
    adds.push_back(add);
  }
  return adds;
}

/// Innermost reduction loops of at least this many iterations (or of an
/// unknown count) are unrolled at most kUnrollCount times by LLVM (`limitUnroll`).
constexpr int64_t kLongLoopIters = 32;
constexpr int64_t kUnrollCount = 2;

/// Marks `loop` (an innermost loop carrying accumulators) `llvm.loop.unroll.
/// count` kUnrollCount when it runs at least kLongLoopIters times or an
/// unknown number of times. LLVM vectorizes it with its usual interleaving (4
/// vectors of partial results), then the unroller took the vector loop of a
/// 1024-element row whole: 64 loads and the accumulators' combining in one
/// block, which the scheduler spread past the 32 vector and 8 mask registers
/// (spills). The loop unrolled twice runs an amax over 256x1024 about 10%
/// faster on one thread; unroll.disable would also turn interleaving off (one
/// accumulator: latency-bound, slower than fully unrolled). Rows of 32 to 255
/// elements were left to LLVM's full unrolling, which runs before the loop
/// vectorizer: an f32 sum over rows of 64 or 77 became a chain of scalar adds
/// (5x slower than eager on one thread; unrolled twice, the loop vectorizer
/// takes it: 1.5-1.8x eager, softmax over 64 0.80x -> 1.34x, LayerNorm over 77
/// 0.85x -> 1.60x). Rows under 32 (pooling windows) stay fully unrolled (no
/// loop at all). The annotation reaches the latch branch through
/// convert-scf-to-cf and cf-to-llvm (`loop_annotation`).
void limitUnroll(scf::ForOp loop) {
  std::optional<int64_t> lo = getConstantIntValue(loop.getLowerBound()),
                         hi = getConstantIntValue(loop.getUpperBound()),
                         step = getConstantIntValue(loop.getStep());
  if (lo && hi && step && *step > 0 && llvm::divideCeil(*hi - *lo, *step) < kLongLoopIters)
    return;
  loop->setAttr("loop_annotation",
                parseAttribute(llvm::formatv("#llvm.loop_annotation<unroll = <count = {0} : i32>>",
                                             kUnrollCount)
                                   .str(),
                               loop.getContext()));
}

/// Clones the payload of `op` at the loop IVs `ivs` (one per dim, in dim
/// order) with accumulators `accs`; returns the yielded values. `narrowed`
/// (see widenedSums), when not empty: the accumulators are f32 partial sums,
/// each add `acc + extf(term)` cloned as `acc + term` in f32.
SmallVector<Value> payload(OpBuilder &b, Location loc, linalg::GenericOp op, ValueRange ivs,
                           ValueRange accs, ArrayRef<arith::AddFOp> narrowed = {}) {
  IRMapping map;
  for (OpOperand *in : op.getDpsInputOperands()) {
    Value v = in->get();
    if (isa<MemRefType>(v.getType()))
      v = memref::LoadOp::create(b, loc, v, indices(b, loc, op.getMatchingIndexingMap(in), ivs));
    map.map(op.getMatchingBlockArgument(in), v);
  }
  for (auto [i, out] : llvm::enumerate(op.getDpsInitsMutable()))
    map.map(op.getMatchingBlockArgument(&out), accs[i]);
  Block *body = op.getBody();
  for (Operation &inner : body->without_terminator()) {
    if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
      map.map(index.getResult(), ivs[index.getDim()]);
      continue;
    }
    if (auto add = dyn_cast<arith::AddFOp>(inner); add && llvm::is_contained(narrowed, add)) {
      auto [acc, wide] = sumOperands(add);
      Value term = map.lookupOrDefault(wide.getDefiningOp<arith::ExtFOp>().getIn());
      map.map(add.getResult(), arith::AddFOp::create(b, loc, map.lookupOrDefault(acc), term,
                                                     arith::FastMathFlags::reassoc)
                                   .getResult());
      continue;
    }
    b.clone(inner, map);
  }
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  return llvm::map_to_vector(yield.getValues(), [&](Value v) { return map.lookupOrDefault(v); });
}

/// An elementwise generic (every dim parallel, at least two) with an input
/// that its innermost dim does not index (a row's max or sum broadcast over
/// the row, a bias over NCHW's H and W): an scf.parallel over the outer
/// dims loads such inputs once, then an scf.for over the innermost dim
/// computes the row. convert-linalg-to-parallel-loops loads them on every
/// iteration, and LLVM cannot hoist those loads past the stores to the
/// output (it cannot prove that they do not alias), so a softmax's divide
/// by the row sum stayed a scalar loop. Hoisting is sound: a linalg op on
/// buffers writes its outputs in place of an input only where both have
/// the same indexing map (bufferization's elementwise access), and the
/// inputs hoisted here are not indexed like any output. False when `op`
/// has no such input (left to convert-linalg-to-parallel-loops).
bool lowerElementwise(linalg::GenericOp op) {
  unsigned n = op.getNumLoops();
  if (n < 2 || op.getNumReductionLoops() != 0 || !op.hasPureBufferSemantics())
    return false;
  unsigned last = n - 1;
  SmallVector<OpOperand *> hoisted;
  for (OpOperand *in : op.getDpsInputOperands())
    if (isa<MemRefType>(in->get().getType()) &&
        !op.getMatchingIndexingMap(in).isFunctionOfDim(last))
      hoisted.push_back(in);
  if (hoisted.empty())
    return false;
  for (OpOperand &out : op.getDpsInitsMutable())
    if (!op.getMatchingIndexingMap(&out).isFunctionOfDim(last))
      return false;
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<Range> ranges =
      cast<linalg::LinalgOp>(op.getOperation()).createLoopRanges(b, loc);
  auto value = [&](OpFoldResult r) { return getValueOrCreateConstantIndexOp(b, loc, r); };
  SmallVector<Value> lbs, ubs, steps;
  for (unsigned d = 0; d < last; ++d) {
    lbs.push_back(value(ranges[d].offset));
    ubs.push_back(value(ranges[d].size));
    steps.push_back(value(ranges[d].stride));
  }
  Value lb = value(ranges[last].offset), ub = value(ranges[last].size),
        step = value(ranges[last].stride);
  Block *body = op.getBody();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  scf::ParallelOp::create(b, loc, lbs, ubs, steps, [&](OpBuilder &pb, Location l, ValueRange pivs) {
    SmallVector<Value> ivs(pivs);
    ivs.push_back(lb); // not read by the hoisted inputs' maps
    IRMapping outer;
    for (OpOperand *in : hoisted)
      outer.map(op.getMatchingBlockArgument(in),
                memref::LoadOp::create(pb, l, in->get(),
                                       indices(pb, l, op.getMatchingIndexingMap(in), ivs)));
    scf::ForOp::create(pb, l, lb, ub, step, ValueRange{},
                       [&](OpBuilder &fb, Location fl, Value iv, ValueRange) {
                         IRMapping map = outer;
                         SmallVector<Value> all(pivs);
                         all.push_back(iv);
                         for (OpOperand *in : op.getDpsInputOperands()) {
                           if (map.contains(op.getMatchingBlockArgument(in)))
                             continue;
                           Value v = in->get();
                           if (isa<MemRefType>(v.getType()))
                             v = memref::LoadOp::create(
                                 fb, fl, v,
                                 indices(fb, fl, op.getMatchingIndexingMap(in), all));
                           map.map(op.getMatchingBlockArgument(in), v);
                         }
                         for (OpOperand &out : op.getDpsInitsMutable()) {
                           BlockArgument arg = op.getMatchingBlockArgument(&out);
                           if (!arg.use_empty())
                             map.map(arg, memref::LoadOp::create(
                                              fb, fl, out.get(),
                                              indices(fb, fl, op.getMatchingIndexingMap(&out),
                                                      all)));
                         }
                         for (Operation &inner : body->without_terminator()) {
                           if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
                             map.map(index.getResult(), all[index.getDim()]);
                             continue;
                           }
                           fb.clone(inner, map);
                         }
                         for (auto [v, out] : llvm::zip(yield.getValues(), op.getDpsInitsMutable()))
                           memref::StoreOp::create(
                               fb, fl, map.lookupOrDefault(v), out.get(),
                               indices(fb, fl, op.getMatchingIndexingMap(&out), all));
                         scf::YieldOp::create(fb, fl);
                       });
  });
  op.erase();
  return true;
}

/// The dims of `op` whose iterator type is `type`, in loop order.
SmallVector<unsigned> dimsOf(linalg::GenericOp op, utils::IteratorType type) {
  SmallVector<unsigned> dims;
  for (auto [d, t] : llvm::enumerate(op.getIteratorTypesArray()))
    if (t == type)
      dims.push_back(d);
  return dims;
}

/// The most accumulator elements of a column reduction's tile, and the
/// fewest parallel tiles it is split into when its outer parallel dims give
/// less (so that it runs on several threads).
constexpr int64_t kTileElems = 1024;
constexpr int64_t kMinTiles = 8;

/// For every output of `op`, the op combining its accumulator with a term
/// (`acc <op> term`: an add, mul, min, max, and, or, xor with a neutral
/// element), when the accumulator is used by that op only and the op's
/// result only yielded; empty when some output is not such a reduction (an
/// argmax's compare and selects). Partial results of such a reduction over
/// parts of its range combine with the same op.
SmallVector<Operation *> combiners(linalg::GenericOp op) {
  SmallVector<Operation *> ops;
  auto yield = cast<linalg::YieldOp>(op.getBody()->getTerminator());
  for (OpOperand &out : op.getDpsInitsMutable()) {
    BlockArgument acc = op.getMatchingBlockArgument(&out);
    if (!acc.hasOneUse())
      return {};
    Operation *user = *acc.getUsers().begin();
    unsigned i = out.getOperandNumber() - op.getNumDpsInputs();
    if (user->getBlock() != op.getBody() || user->getNumOperands() != 2 ||
        user->getNumResults() != 1 || !user->getResult(0).hasOneUse() ||
        yield.getOperand(i) != user->getResult(0) || user->getOperand(0) == user->getOperand(1) ||
        user->getResult(0).getType() != acc.getType() || !arith::getNeutralElement(user))
      return {};
    ops.push_back(user);
  }
  return ops;
}

/// Reductions with fewer parallel iterations than this (a full sum, a
/// norm of a few rows) and at least kSplitWork innermost iterations are
/// split into chunks of their innermost reduction dim that run in parallel.
constexpr int64_t kSplitWork = 65536;
/// Chunks of at least kMinChunk elements, at most kMaxChunks of them.
constexpr int64_t kMinChunk = 4096;
constexpr int64_t kMaxChunks = 64;

/// Accumulators in registers: an scf.parallel over the parallel dims (in
/// loop order) whose body loads the accumulators, reduces over the
/// reduction dims (in loop order) in an scf.for nest carrying them, and
/// stores them once. Moving parallel dims outside reduction dims keeps each
/// output's order of accumulation.
///
/// A reduction with few parallel iterations and a long innermost reduction
/// dim (x.sum(), the statistics of a few long rows) would run on one
/// thread: its innermost reduction dim is cut into chunks of a length that
/// depends on the shape only, each chunk's partial result (from the neutral
/// element) computed in an scf.parallel over (parallel dims, chunks) into a
/// stack buffer, then the partials combined into the output in chunk order:
/// the same bits on any thread count.
void lowerToRegisters(linalg::GenericOp op, const llvm::DenseSet<Value> &f32Sums) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<Range> ranges =
      cast<linalg::LinalgOp>(op.getOperation()).createLoopRanges(b, loc);
  auto value = [&](OpFoldResult r) { return getValueOrCreateConstantIndexOp(b, loc, r); };
  SmallVector<unsigned> par = dimsOf(op, utils::IteratorType::parallel),
                        red = dimsOf(op, utils::IteratorType::reduction);
  auto bounds = [&](ArrayRef<unsigned> dims, SmallVector<Value> &lbs, SmallVector<Value> &ubs,
                    SmallVector<Value> &steps) {
    for (unsigned d : dims) {
      lbs.push_back(value(ranges[d].offset));
      ubs.push_back(value(ranges[d].size));
      steps.push_back(value(ranges[d].stride));
    }
  };
  SmallVector<Value> plbs, pubs, psteps, rlbs, rubs, rsteps;
  bounds(par, plbs, pubs, psteps);
  bounds(red, rlbs, rubs, rsteps);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  auto cst = [&](OpBuilder &ob, Location l, int64_t v) {
    return arith::ConstantIndexOp::create(ob, l, v).getResult();
  };
  // The innermost reduction dim's static length when it runs from 0 by 1.
  std::optional<int64_t> innerLen;
  {
    std::optional<int64_t> lo = getConstantIntValue(ranges[red.back()].offset),
                           len = getConstantIntValue(ranges[red.back()].size),
                           step = getConstantIntValue(ranges[red.back()].stride);
    if (lo == 0 && step == 1 && len)
      innerLen = len;
  }
  // Sums of f32 terms in f64 (widenedSums) over an innermost reduction dim of
  // at least kMinBlocked elements (static, from 0 by 1) are summed in blocks.
  SmallVector<arith::AddFOp> narrowed = widenedSums(op);
  if (!innerLen || *innerLen < kMinBlocked)
    narrowed.clear();
  // Float sums over a contiguous last dim: in eager's order (CascadeSums.cpp)
  // with MLIRCAP_CASCADE_SUMS=1 (opt-in: slower than the blocked sums in places,
  // bench/sum_speed.py).
  std::optional<CascadeSum> cascade;
  if (innerLen && red.back() == op.getNumLoops() - 1 && cascadeSumsEnabled())
    cascade = matchCascadeSum(op, f32Sums);

  // The reduction over the reduction dims, the innermost one over [lo, hi)
  // shifted by `offset` (when not null: static loop bounds, which
  // mlircap-outline-parallel counts as work), from the accumulators
  // `inits`; returns the results.
  auto reduceRange = [&](OpBuilder &pb, Location l, ArrayRef<Value> outIvs, ValueRange inits,
                         Value lo, Value hi, Value offset) -> SmallVector<Value> {
    auto shifted = [&](OpBuilder &ob, Location ol, Value iv) -> Value {
      return offset ? arith::AddIOp::create(ob, ol, offset, iv).getResult() : iv;
    };
    std::optional<int64_t> slo = getConstantIntValue(lo), shi = getConstantIntValue(hi);
    if (cascade && slo && shi) {
      // Each row's sum (from +0, in eager's order) added to the accumulators.
      ArrayRef<Value> olbs(rlbs), oubs(rubs), osteps(rsteps);
      scf::LoopNest nest = scf::buildLoopNest(
          pb, l, olbs.drop_back(), oubs.drop_back(), osteps.drop_back(), inits,
          [&](OpBuilder &rb, Location rl, ValueRange rivs, ValueRange accs) {
            SmallVector<Value> ivs(outIvs);
            for (auto [d, iv] : llvm::zip(red, rivs))
              ivs[d] = iv;
            SmallVector<Value> rows =
                emitCascadeRow(rb, rl, op, *cascade, ivs, shifted(rb, rl, lo), *shi - *slo);
            SmallVector<Value> res;
            for (auto [acc, row] : llvm::zip(accs, rows)) {
              if (acc.getType() != row.getType())
                row = arith::ExtFOp::create(rb, rl, acc.getType(), row);
              res.push_back(arith::AddFOp::create(rb, rl, acc, row));
            }
            return res;
          });
      return nest.results;
    }
    if (!narrowed.empty()) {
      // Blocked sums: the innermost reduction dim in blocks of kSumBlock
      // elements, each summed in f32 (reassociable: LLVM keeps vectors of
      // f32 partial sums), the blocks' sums added in f64. As accurate as
      // eager's blocked (cascade) f32 sums, at f32's vector width.
      ArrayRef<Value> olbs(rlbs), oubs(rubs), osteps(rsteps);
      scf::LoopNest nest = scf::buildLoopNest(
          pb, l, olbs.drop_back(), oubs.drop_back(), osteps.drop_back(), inits,
          [&](OpBuilder &rb, Location rl, ValueRange rivs, ValueRange accs) {
            SmallVector<Value> ivs(outIvs);
            for (auto [d, iv] : llvm::zip(red, rivs))
              ivs[d] = iv;
            Value zero32 = arith::ConstantOp::create(rb, rl, rb.getF32FloatAttr(0.0f));
            SmallVector<Value> zeros(accs.size(), zero32);
            // f32 sums of elements [blo, bhi), added to the f64 sums `wide`
            // f32 sums of elements [base, base + len) (`len` a constant
            // for a full block: static loop bounds), added to the f64 sums
            // `wide`
            auto block = [&](OpBuilder &bb, Value base, Value len, ValueRange wide) {
              auto inner = scf::ForOp::create(
                  bb, rl, cst(bb, rl, 0), len, cst(bb, rl, 1), zeros,
                  [&](OpBuilder &fb, Location fl, Value iv, ValueRange part) {
                    SmallVector<Value> at = ivs;
                    at[red.back()] = shifted(fb, fl, arith::AddIOp::create(fb, fl, base, iv));
                    scf::YieldOp::create(fb, fl, payload(fb, fl, op, at, part, narrowed));
                  });
              limitUnroll(inner);
              SmallVector<Value> sums;
              for (auto [w, p] : llvm::zip(wide, inner.getResults()))
                sums.push_back(arith::AddFOp::create(
                    bb, rl, w, arith::ExtFOp::create(bb, rl, w.getType(), p)));
              return sums;
            };
            // full = lo + (hi - lo) / kSumBlock * kSumBlock (folded when static)
            std::optional<int64_t> slo = getConstantIntValue(lo), shi = getConstantIntValue(hi);
            Value full;
            if (slo && shi)
              full = cst(rb, rl, *slo + (*shi - *slo) / kSumBlock * kSumBlock);
            else
              full = arith::AddIOp::create(
                  rb, rl, lo,
                  arith::MulIOp::create(
                      rb, rl,
                      arith::DivUIOp::create(rb, rl, arith::SubIOp::create(rb, rl, hi, lo),
                                             cst(rb, rl, kSumBlock)),
                      cst(rb, rl, kSumBlock)));
            SmallVector<Value> res(accs);
            if (!(slo && shi && (*shi - *slo) < kSumBlock)) {
              auto blocks = scf::ForOp::create(
                  rb, rl, lo, full, cst(rb, rl, kSumBlock), accs,
                  [&](OpBuilder &fb, Location fl, Value kb, ValueRange wide) {
                    scf::YieldOp::create(fb, fl, block(fb, kb, cst(fb, fl, kSumBlock), wide));
                  });
              res = blocks.getResults();
            }
            if (!(slo && shi && (*shi - *slo) % kSumBlock == 0)) {
              Value rest = slo && shi ? cst(rb, rl, (*shi - *slo) % kSumBlock)
                                      : arith::SubIOp::create(rb, rl, hi, full).getResult();
              res = block(rb, full, rest, res);
            }
            return res;
          });
      return nest.results;
    }
    SmallVector<Value> lbs(rlbs), ubs(rubs);
    lbs.back() = lo;
    ubs.back() = hi;
    scf::LoopNest nest = scf::buildLoopNest(
        pb, l, lbs, ubs, rsteps, inits,
        [&](OpBuilder &rb, Location rl, ValueRange rivs, ValueRange accs) {
          SmallVector<Value> ivs(outIvs);
          for (auto [d, iv] : llvm::zip(red, rivs))
            ivs[d] = iv;
          ivs[red.back()] = shifted(rb, rl, ivs[red.back()]);
          return payload(rb, rl, op, ivs, accs);
        });
    if (!nest.loops.empty())
      limitUnroll(nest.loops.back());
    return nest.results;
  };
  auto outIvsOf = [&](ValueRange pivs) {
    SmallVector<Value> outIvs(op.getNumLoops(), zero);
    for (auto [d, iv] : llvm::zip(par, pivs))
      outIvs[d] = iv;
    return outIvs;
  };
  auto loadOuts = [&](OpBuilder &pb, Location l, ArrayRef<Value> outIvs) {
    SmallVector<Value> vals;
    for (OpOperand &out : op.getDpsInitsMutable())
      vals.push_back(memref::LoadOp::create(
          pb, l, out.get(), indices(pb, l, op.getMatchingIndexingMap(&out), outIvs)));
    return vals;
  };
  auto storeOuts = [&](OpBuilder &pb, Location l, ArrayRef<Value> outIvs, ValueRange vals) {
    for (auto [v, out] : llvm::zip(vals, op.getDpsInitsMutable()))
      memref::StoreOp::create(pb, l, v, out.get(),
                              indices(pb, l, op.getMatchingIndexingMap(&out), outIvs));
  };

  // Split into chunks? Static parallel sizes with fewer than kMinTiles
  // iterations, a static innermost reduction dim of at least two chunks,
  // enough work, and outputs whose partial results combine.
  int64_t parIters = 1, work = 1, chunk = 0, numChunks = 0;
  bool staticShape = true;
  for (unsigned d = 0; d < op.getNumLoops(); ++d) {
    auto s = getConstantIntValue(ranges[d].size);
    auto lo = getConstantIntValue(ranges[d].offset);
    auto st = getConstantIntValue(ranges[d].stride);
    if (!s || lo != 0 || st != 1) {
      staticShape = false;
      break;
    }
    work *= *s;
    if (llvm::is_contained(par, d))
      parIters *= *s;
  }
  SmallVector<Operation *> combine;
  if (staticShape && innerLen && parIters < kMinTiles && work >= kSplitWork &&
      *innerLen >= 2 * kMinChunk) {
    combine = combiners(op);
    chunk = std::max<int64_t>(kMinChunk,
                              llvm::alignTo(llvm::divideCeil(*innerLen, kMaxChunks), kSumBlock));
    numChunks = llvm::divideCeil(*innerLen, chunk);
  }
  if (!combine.empty() && numChunks >= 2) {
    // numChunks - 1 full chunks in parallel (static bounds), the last one
    // (full or partial) after them.
    int64_t lastLen = *innerLen - (numChunks - 1) * chunk;
    Value stack = LLVM::StackSaveOp::create(b, loc, LLVM::LLVMPointerType::get(op.getContext()));
    SmallVector<int64_t> shape;
    for (unsigned d : par)
      shape.push_back(*getConstantIntValue(ranges[d].size));
    shape.push_back(numChunks);
    SmallVector<Value> partials;
    for (OpOperand &out : op.getDpsInitsMutable())
      partials.push_back(memref::AllocaOp::create(
          b, loc,
          MemRefType::get(shape, cast<MemRefType>(out.get().getType()).getElementType())));
    // Chunk `c`'s partial results (from the neutral elements) over `len`
    // elements, stored at partials[pivs..., c].
    auto chunkPartial = [&](OpBuilder &pb, Location l, ValueRange pivs, Value c, int64_t len) {
      SmallVector<Value> inits;
      for (Operation *comb : combine)
        inits.push_back(arith::ConstantOp::create(pb, l, *arith::getNeutralElement(comb)));
      Value offset = arith::MulIOp::create(pb, l, c, cst(pb, l, chunk));
      SmallVector<Value> res =
          reduceRange(pb, l, outIvsOf(pivs), inits, cst(pb, l, 0), cst(pb, l, len), offset);
      SmallVector<Value> at(pivs);
      at.push_back(c);
      for (auto [v, p] : llvm::zip(res, partials))
        memref::StoreOp::create(pb, l, v, p, at);
    };
    SmallVector<Value> lbs(plbs), ubs(pubs), steps(psteps);
    lbs.push_back(zero);
    ubs.push_back(cst(b, loc, numChunks - 1));
    steps.push_back(cst(b, loc, 1));
    scf::ParallelOp::create(b, loc, lbs, ubs, steps,
                            [&](OpBuilder &pb, Location l, ValueRange ivs) {
                              chunkPartial(pb, l, ivs.drop_back(), ivs.back(), chunk);
                            });
    // The last chunk, then the partials combined in chunk order.
    scf::buildLoopNest(b, loc, plbs, pubs, psteps, [&](OpBuilder &pb, Location l, ValueRange pivs) {
      chunkPartial(pb, l, pivs, cst(pb, l, numChunks - 1), lastLen);
      SmallVector<Value> outIvs = outIvsOf(pivs);
      SmallVector<Value> accs = loadOuts(pb, l, outIvs);
      auto loop = scf::ForOp::create(
          pb, l, zero, cst(pb, l, numChunks), cst(pb, l, 1), accs,
          [&](OpBuilder &fb, Location fl, Value c, ValueRange cur) {
            SmallVector<Value> at(pivs);
            at.push_back(c);
            SmallVector<Value> next;
            for (auto [comb, acc, p, out] :
                 llvm::zip(combine, cur, partials, op.getDpsInitsMutable())) {
              Value part = memref::LoadOp::create(fb, fl, p, at);
              IRMapping map;
              BlockArgument arg = op.getMatchingBlockArgument(&out);
              for (Value operand : comb->getOperands())
                map.map(operand, operand == arg ? acc : part);
              next.push_back(fb.clone(*comb, map)->getResult(0));
            }
            scf::YieldOp::create(fb, fl, next);
          });
      storeOuts(pb, l, outIvs, loop.getResults());
    });
    LLVM::StackRestoreOp::create(b, loc, stack);
    op.erase();
    return;
  }

  // The body of one parallel iteration: load the accumulators, reduce, store.
  auto perPoint = [&](OpBuilder &pb, Location l, ValueRange pivs) {
    SmallVector<Value> outIvs = outIvsOf(pivs);
    SmallVector<Value> res =
        reduceRange(pb, l, outIvs, loadOuts(pb, l, outIvs), rlbs.back(), rubs.back(), Value());
    storeOuts(pb, l, outIvs, res);
  };

  if (par.empty()) {
    perPoint(b, loc, {});
  } else {
    scf::ParallelOp::create(b, loc, plbs, pubs, psteps,
                            [&](OpBuilder &pb, Location l, ValueRange pivs) {
                              perPoint(pb, l, pivs);
                            });
  }
  op.erase();
}

/// Accumulators in a stack tile: for a reduction whose innermost dims are
/// parallel (a column sum, BatchNorm statistics over N), the trailing
/// parallel dims (`inner`, the last one cut into tiles of `tile` elements
/// when `tile` is not 0) stay innermost and contiguous, accumulated in an
/// `memref.alloca` tile (its stack space saved and restored around each
/// iteration): LLVM vectorizes the inner loop, which it cannot do
/// on the output buffer itself (it may alias the inputs). `outer` parallel
/// dims (and the tiles) become an scf.parallel around
///
///   tile = output; for reduction dims { for inner { tile = payload } };
///   output = tile
void lowerToTile(linalg::GenericOp op, ArrayRef<int64_t> sizes, ArrayRef<unsigned> outer,
                 ArrayRef<unsigned> inner, int64_t tile) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<unsigned> red = dimsOf(op, utils::IteratorType::reduction);
  auto cst = [&](OpBuilder &ob, int64_t v) {
    return arith::ConstantIndexOp::create(ob, loc, v).getResult();
  };
  unsigned last = inner.back();
  if (tile == 0)
    tile = sizes[last];

  // `numTiles` tiles of `extent` elements of the last dim, the first one at
  // `first`: an scf.parallel over the outer dims (and the tiles, if more
  // than one) around one tile's reduction.
  auto emit = [&](int64_t numTiles, int64_t first, int64_t extent) {
    Value zero = cst(b, 0), one = cst(b, 1);
    SmallVector<Value> plbs, pubs, psteps;
    for (unsigned d : outer) {
      plbs.push_back(zero);
      pubs.push_back(cst(b, sizes[d]));
      psteps.push_back(one);
    }
    if (numTiles > 1) {
      plbs.push_back(zero);
      pubs.push_back(cst(b, numTiles));
      psteps.push_back(one);
    }
    SmallVector<int64_t> tileShape;
    for (unsigned d : inner)
      tileShape.push_back(d == last ? extent : sizes[d]);

    auto perTile = [&](OpBuilder &pb, Location l, ValueRange pivs) {
      // The tile's stack space is released after each iteration (the
      // lowering of memref.alloca_scope, whose single-block region
      // convert-scf-to-cf would break up).
      OpBuilder sb = pb;
      Value stack =
          LLVM::StackSaveOp::create(sb, l, LLVM::LLVMPointerType::get(op.getContext()));
      Value base = cst(sb, first);
      if (numTiles > 1) {
        Value offset = arith::MulIOp::create(sb, l, pivs.back(), cst(sb, extent));
        base = first ? arith::AddIOp::create(sb, l, base, offset).getResult() : offset;
      }
      SmallVector<Value> tiles;
      for (OpOperand &out : op.getDpsInitsMutable()) {
        Type elem = cast<MemRefType>(out.get().getType()).getElementType();
        tiles.push_back(memref::AllocaOp::create(sb, l, MemRefType::get(tileShape, elem)));
      }
      SmallVector<Value> lbs0(inner.size(), cst(sb, 0)), steps1(inner.size(), cst(sb, 1)),
          innerUbs = llvm::map_to_vector(tileShape, [&](int64_t v) { return cst(sb, v); });
      // Runs `fn(builder, ivs by dim, tile indices)` in a nest over the tile.
      auto overTile = [&](OpBuilder &ob, ArrayRef<Value> fixed,
                          function_ref<void(OpBuilder &, SmallVector<Value> &, ValueRange)> fn) {
        scf::buildLoopNest(ob, l, lbs0, innerUbs, steps1,
                           [&](OpBuilder &nb, Location nl, ValueRange tivs) {
                             SmallVector<Value> ivs(fixed);
                             for (auto [d, iv] : llvm::zip(inner, tivs))
                               ivs[d] = d == last && extent != sizes[last]
                                            ? arith::AddIOp::create(nb, nl, base, iv).getResult()
                                            : iv;
                             fn(nb, ivs, tivs);
                           });
      };
      SmallVector<Value> fixed(op.getNumLoops(), cst(sb, 0));
      for (auto [d, iv] : llvm::zip(outer, pivs))
        fixed[d] = iv;
      auto outs = op.getDpsInitsMutable();
      overTile(sb, fixed, [&](OpBuilder &nb, SmallVector<Value> &ivs, ValueRange tivs) {
        for (auto [out, t] : llvm::zip(outs, tiles)) {
          Value v = memref::LoadOp::create(
              nb, l, out.get(), indices(nb, l, op.getMatchingIndexingMap(&out), ivs));
          memref::StoreOp::create(nb, l, v, t, tivs);
        }
      });
      SmallVector<Value> rlbs(red.size(), cst(sb, 0)), rubs, rsteps(red.size(), cst(sb, 1));
      for (unsigned d : red)
        rubs.push_back(cst(sb, sizes[d]));
      scf::buildLoopNest(
          sb, l, rlbs, rubs, rsteps, [&](OpBuilder &rb, Location rl, ValueRange rivs) {
            SmallVector<Value> withRed = fixed;
            for (auto [d, iv] : llvm::zip(red, rivs))
              withRed[d] = iv;
            overTile(rb, withRed, [&](OpBuilder &nb, SmallVector<Value> &ivs, ValueRange tivs) {
              SmallVector<Value> accs = llvm::map_to_vector(tiles, [&](Value t) -> Value {
                return memref::LoadOp::create(nb, rl, t, tivs);
              });
              SmallVector<Value> res = payload(nb, rl, op, ivs, accs);
              for (auto [v, t] : llvm::zip(res, tiles))
                memref::StoreOp::create(nb, rl, v, t, tivs);
            });
          });
      overTile(sb, fixed, [&](OpBuilder &nb, SmallVector<Value> &ivs, ValueRange tivs) {
        for (auto [out, t] : llvm::zip(outs, tiles)) {
          Value v = memref::LoadOp::create(nb, l, t, tivs);
          memref::StoreOp::create(nb, l, v, out.get(),
                                  indices(nb, l, op.getMatchingIndexingMap(&out), ivs));
        }
      });
      LLVM::StackRestoreOp::create(sb, l, stack);
    };

    if (plbs.empty()) {
      perTile(b, loc, {});
    } else {
      scf::ParallelOp::create(b, loc, plbs, pubs, psteps,
                              [&](OpBuilder &pb, Location l, ValueRange pivs) {
                                perTile(pb, l, pivs);
                              });
    }
  };

  // Full tiles, then the partial last one as a loop of its own: every loop
  // bound stays static.
  int64_t n = sizes[last], full = n / tile;
  emit(full, 0, tile);
  if (n % tile)
    emit(1, full * tile, n % tile);
  op.erase();
}

/// `op` with every operand whose indexing map has constant-0 results on
/// unit dims (a row's max broadcast as (d0, d1, d2, 0) from a
/// memref<2x32x32x1xf32>) read through a `memref.collapse_shape` without
/// those dims and a map without those results, so that `collapseDims` can
/// merge the dims around them; `op` itself when no operand has such dims.
linalg::GenericOp dropUnitOperandDims(linalg::GenericOp op) {
  OpBuilder b(op);
  SmallVector<Value> operands;
  SmallVector<AffineMap> maps;
  bool changed = false;
  for (OpOperand &operand : op->getOpOperands()) {
    Value v = operand.get();
    AffineMap map = op.getMatchingIndexingMap(&operand);
    operands.push_back(v);
    maps.push_back(map);
    auto type = dyn_cast<MemRefType>(v.getType());
    if (!type || !type.getLayout().isIdentity() || !type.hasStaticShape() ||
        type.getRank() != static_cast<int64_t>(map.getNumResults()))
      continue;
    llvm::SmallBitVector drop(map.getNumResults());
    for (auto [i, e] : llvm::enumerate(map.getResults()))
      if (auto c = dyn_cast<AffineConstantExpr>(e); c && c.getValue() == 0 && type.getDimSize(i) == 1)
        drop.set(i);
    if (drop.none())
      continue;
    // Each dropped unit dim joins the group of the kept dim before it (the
    // first kept dim's group for leading ones); all dropped: rank 0.
    SmallVector<ReassociationIndices> groups;
    ReassociationIndices pending;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (drop.test(d)) {
        (groups.empty() ? pending : groups.back()).push_back(d);
        continue;
      }
      ReassociationIndices group = pending;
      group.push_back(d);
      pending.clear();
      groups.push_back(group);
    }
    operands.back() = memref::CollapseShapeOp::create(b, op.getLoc(), v, groups);
    maps.back() = map.dropResults(drop);
    changed = true;
  }
  if (!changed)
    return op;
  auto generic = cast<linalg::GenericOp>(b.clone(*op.getOperation()));
  generic->setOperands(operands);
  generic.setIndexingMapsAttr(b.getAffineMapArrayAttr(maps));
  op.erase();
  return generic;
}

/// `op` with each run of consecutive dims of one iterator type that every
/// operand indexes as one contiguous run (NCHW's H and W) collapsed into
/// one dim: longer inner loops for LLVM's vectorizer (a 32-element row
/// alone is fully unrolled, then the loop around it vectorized across rows).
/// Only for operands with identity layouts and projected-permutation maps,
/// and dims that `linalg.index` does not read; `op` itself when nothing collapses.
linalg::GenericOp collapseDims(linalg::GenericOp op) {
  op = dropUnitOperandDims(op);
  for (OpOperand &operand : op->getOpOperands())
    if (auto type = dyn_cast<MemRefType>(operand.get().getType());
        type && !type.getLayout().isIdentity())
      return op;
  llvm::SmallBitVector indexed(op.getNumLoops());
  op.getBody()->walk([&](linalg::IndexOp index) { indexed.set(index.getDim()); });
  auto iters = op.getIteratorTypesArray();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (!llvm::all_of(maps, [](AffineMap m) { return m.isProjectedPermutation(); }))
    return op;
  SmallVector<ReassociationIndices> groups;
  bool collapses = false;
  for (unsigned d = 0; d < iters.size(); ++d) {
    if (!groups.empty() && iters[d] == iters[groups.back().back()] && !indexed[d] &&
        !indexed[groups.back().back()]) {
      ReassociationIndices grown = groups.back();
      grown.push_back(d);
      if (linalg::areDimSequencesPreserved(maps, {grown})) {
        groups.back() = grown;
        collapses = true;
        continue;
      }
    }
    groups.push_back({static_cast<int64_t>(d)});
  }
  if (!collapses)
    return op;
  IRRewriter rewriter(op);
  FailureOr<linalg::CollapseResult> collapsed =
      linalg::collapseOpIterationDims(op, groups, rewriter);
  if (failed(collapsed))
    return op;
  auto generic = dyn_cast<linalg::GenericOp>(collapsed->collapsedOp.getOperation());
  if (!generic) {
    rewriter.eraseOp(collapsed->collapsedOp);
    return op;
  }
  rewriter.eraseOp(op);
  return generic;
}

/// A tile length for a dim of `n` elements in [lo, hi]: a multiple of 8
/// that divides `n` if there is one (static loop bounds in every tile, which
/// mlircap-outline-parallel counts as work), else `lo` rounded up to 16.
int64_t tileOf(int64_t n, int64_t lo, int64_t hi) {
  for (int64_t t = llvm::alignTo(lo, 8); t <= hi; t += 8)
    if (n % t == 0)
      return t;
  return llvm::alignTo(lo, 16);
}

/// Lowers `op` (an isReduction generic): in registers when its innermost
/// dim is a reduction dim, else in a tile of its trailing parallel dims
/// (static shapes only; others are left to convert-linalg-to-parallel-loops).
void lower(linalg::GenericOp op, const llvm::DenseSet<Value> &f32Sums) {
  op = collapseDims(op);
  auto iters = op.getIteratorTypesArray();
  if (iters.back() == utils::IteratorType::reduction) {
    lowerToRegisters(op, f32Sums);
    return;
  }
  SmallVector<int64_t> sizes = op.getStaticLoopRanges();
  if (llvm::any_of(sizes, ShapedType::isDynamic))
    return;
  // The trailing parallel dims, fewest outer ones moved out of the tile
  // until it holds at most kTileElems elements per output.
  unsigned firstInner = iters.size();
  while (iters[firstInner - 1] == utils::IteratorType::parallel)
    --firstInner;
  int64_t elems = 1;
  for (unsigned d = firstInner; d < iters.size(); ++d)
    elems *= sizes[d];
  while (firstInner + 1 < iters.size() && elems > kTileElems)
    elems /= sizes[firstInner++];
  SmallVector<unsigned> outer, inner;
  int64_t outerIters = 1;
  for (unsigned d = 0; d < iters.size(); ++d) {
    if (d >= firstInner) {
      inner.push_back(d);
    } else if (iters[d] == utils::IteratorType::parallel) {
      outer.push_back(d);
      outerIters *= sizes[d];
    }
  }
  // The last dim alone is cut into tiles when it is too long, or into
  // kMinTiles tiles (of at least 64 elements) when the outer dims have too
  // few iterations to share among threads.
  int64_t n = sizes[inner.back()], tile = 0;
  if (elems > kTileElems)
    tile = tileOf(n, kTileElems / 2, kTileElems); // the last dim alone (elems == n)
  if (outerIters < kMinTiles && n >= 128) {
    int64_t split = std::max<int64_t>(64, llvm::divideCeil(n, kMinTiles * outerIters));
    split = tileOf(n, split, std::max<int64_t>(64, 2 * split));
    tile = tile ? std::min(tile, split) : split;
  }
  if (tile >= n)
    tile = 0;
  lowerToTile(op, sizes, outer, inner, tile);
}

/// A max/min accumulator of a loop this pass built (`acc = maximumf(x, acc)`,
/// NaN-propagating, -0 < +0) compares twice per element and blends three
/// times on x86 (llvm.maximum: 6 vector ops), against eager's 3 (a max and a
/// NaN check): a reduction over rows (amax, softmax's row max, max pooling)
/// ran at 0.6x eager. It becomes a maxnumf that may assume no NaN (one
/// vmaxps) and a flag of whether some term was NaN, carried beside it; the
/// loop's result is NaN where the flag is set. As eager's vectorized max, a
/// row holding both zeros gives either sign.
void cheapMinMax(scf::ForOp loop) {
  SmallVector<unsigned> which;
  SmallVector<Operation *> combs;
  SmallVector<Value> terms;
  for (auto [i, acc] : llvm::enumerate(loop.getRegionIterArgs())) {
    if (!isa<FloatType>(acc.getType()) || !acc.hasOneUse())
      continue;
    Operation *user = *acc.getUsers().begin();
    if (!isa<arith::MaximumFOp, arith::MinimumFOp>(user) || user->getBlock() != loop.getBody() ||
        !user->getResult(0).hasOneUse() ||
        loop.getBody()->getTerminator()->getOperand(i) != user->getResult(0) ||
        user->getOperand(0) == user->getOperand(1))
      continue;
    which.push_back(i);
    combs.push_back(user);
    terms.push_back(user->getOperand(0) == acc ? user->getOperand(1) : user->getOperand(0));
  }
  if (which.empty())
    return;
  Location loc = loop.getLoc();
  IRRewriter rewriter(loop.getContext());
  rewriter.setInsertionPoint(loop);
  // The flag starts set when the initial value is NaN (the result of an
  // enclosing loop's previous iterations).
  SmallVector<Value> flags;
  for (unsigned i : which) {
    Value init = loop.getInitArgs()[i];
    flags.push_back(arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::UNO, init, init));
  }
  auto fm = arith::FastMathFlagsAttr::get(loop.getContext(),
                                          arith::FastMathFlags::nnan | arith::FastMathFlags::nsz);
  Attribute annotation = loop->getAttr("loop_annotation");
  auto grown = cast<scf::ForOp>(*loop.replaceWithAdditionalYields(
      rewriter, flags, /*replaceInitOperandUsesInLoop=*/false,
      [&](OpBuilder &yb, Location yl, ArrayRef<BlockArgument> nans) {
        SmallVector<Value> out;
        for (auto [k, comb] : llvm::enumerate(combs)) {
          Value x = terms[k];
          Value acc = comb->getOperand(0) == x ? comb->getOperand(1) : comb->getOperand(0);
          OpBuilder cb(comb);
          Value r = isa<arith::MaximumFOp>(comb)
                        ? arith::MaxNumFOp::create(cb, comb->getLoc(), x, acc, fm).getResult()
                        : arith::MinNumFOp::create(cb, comb->getLoc(), x, acc, fm).getResult();
          comb->getResult(0).replaceAllUsesWith(r);
          comb->erase();
          Value isNan = arith::CmpFOp::create(yb, yl, arith::CmpFPredicate::UNO, x, x);
          out.push_back(arith::OrIOp::create(yb, yl, nans[k], isNan));
        }
        return out;
      }));
  // replaceWithAdditionalYields keeps no discardable attribute: the loop's
  // annotation (limitUnroll) is copied over.
  if (annotation)
    grown->setAttr("loop_annotation", annotation);
  rewriter.setInsertionPointAfter(grown);
  unsigned n = grown.getNumResults() - which.size();
  for (auto [k, i] : llvm::enumerate(which)) {
    Value res = grown.getResult(i);
    auto t = cast<FloatType>(res.getType());
    Value nan = arith::ConstantOp::create(
        rewriter, loc, rewriter.getFloatAttr(t, APFloat::getQNaN(t.getFloatSemantics())));
    auto sel = arith::SelectOp::create(rewriter, loc, grown.getResult(n + k), nan, res);
    res.replaceAllUsesExcept(sel, sel);
  }
}

struct ReductionLoopsPass : impl::MlircapReductionLoopsBase<ReductionLoopsPass> {
  void getDependentDialects(DialectRegistry &registry) const override {
    MlircapReductionLoopsBase::getDependentDialects(registry);
    registry.insert<LLVM::LLVMDialect>(); // stacksave/stackrestore around tiles
    registry.insert<vector::VectorDialect>(); // cascade sums (CascadeSums.cpp)
  }

  void runOnOperation() override {
    SmallVector<linalg::GenericOp> ops, elementwise;
    getOperation().walk([&](linalg::GenericOp op) {
      if (isReduction(op))
        ops.push_back(op);
      else if (op.hasPureBufferSemantics() && op.getNumReductionLoops() == 0 &&
               op.getNumLoops() > 1)
        elementwise.push_back(op);
    });
    llvm::DenseSet<Value> f32Sums = f32ObservedSums(getOperation());
    for (linalg::GenericOp op : ops)
      lower(op, f32Sums);
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops)
      cheapMinMax(loop);
    // Elementwise generics get the same collapsing: a softmax's exp and
    // divide over 2x32x32x32 (rows of 32 broadcasting the row's max and sum)
    // ran as 4-D loops 1.6x slower than the same loops over 2048x32.
    for (linalg::GenericOp op : elementwise)
      lowerElementwise(collapseDims(op));
  }
};
} // namespace
} // namespace mlir::mlircap
