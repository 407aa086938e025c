//===- ReductionLoops.cpp - reductions accumulate in registers (CPU) ------===//
//
// convert-linalg-to-parallel-loops lowers a reduction `linalg.generic` to
// loops that load the accumulator from the output memref and store it back on
// every iteration. LLVM cannot keep it in a register (it cannot prove that the
// output does not alias an input), so a row reduction runs as a serial chain
// through memory and is never vectorized. A reduction generic on memrefs whose
// parallel dims all come before its reduction dims becomes instead
//
//   scf.parallel (parallel dims) {
//     acc = load outs
//     acc' = scf.for (reduction dims) iter_args(acc) { payload }
//     store acc' to outs
//   }
//
// in the generic's own loop order (so the same memory access order), with the
// accumulators as loop-carried values. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "KernelUtils.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPREDUCTIONLOOPS
#include "mlircap/Passes.h.inc"

namespace {
/// True for a generic this pass rewrites: buffer semantics, at least one
/// reduction dim, every parallel dim before every reduction dim, outputs
/// indexed by parallel dims only, and accumulators of a type the later CPU
/// passes keep in registers as they are (no bf16/f16 emulation of
/// loop-carried values).
bool isTrailingReduction(linalg::GenericOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumReductionLoops() == 0 || !parallelLoopsFirst(op))
    return false;
  unsigned numParallel = op.getNumParallelLoops(), numLoops = op.getNumLoops();
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
      for (unsigned d = numParallel; d < numLoops; ++d)
        if (e.isFunctionOfDim(d))
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

void lower(linalg::GenericOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  unsigned numParallel = op.getNumParallelLoops();
  SmallVector<Range> ranges =
      cast<linalg::LinalgOp>(op.getOperation()).createLoopRanges(b, loc);
  auto value = [&](OpFoldResult r) { return getValueOrCreateConstantIndexOp(b, loc, r); };
  SmallVector<Value> lbs, ubs, steps;
  for (Range &r : ranges) {
    lbs.push_back(value(r.offset));
    ubs.push_back(value(r.size));
    steps.push_back(value(r.stride));
  }
  Block *body = op.getBody();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());

  // The body of one parallel iteration: load the accumulators, reduce, store.
  auto perPoint = [&](OpBuilder &pb, Location l, ValueRange pivs) {
    SmallVector<Value> inits;
    for (OpOperand &out : op.getDpsInitsMutable())
      inits.push_back(memref::LoadOp::create(
          pb, l, out.get(), indices(pb, l, op.getMatchingIndexingMap(&out), pivs)));
    scf::LoopNest nest = scf::buildLoopNest(
        pb, l, ArrayRef(lbs).drop_front(numParallel), ArrayRef(ubs).drop_front(numParallel),
        ArrayRef(steps).drop_front(numParallel), inits,
        [&](OpBuilder &rb, Location rl, ValueRange rivs, ValueRange accs) {
          SmallVector<Value> ivs(pivs.begin(), pivs.end());
          ivs.append(rivs.begin(), rivs.end());
          IRMapping map;
          for (OpOperand *in : op.getDpsInputOperands()) {
            Value v = in->get();
            if (isa<MemRefType>(v.getType()))
              v = memref::LoadOp::create(
                  rb, rl, v, indices(rb, rl, op.getMatchingIndexingMap(in), ivs));
            map.map(op.getMatchingBlockArgument(in), v);
          }
          for (auto [i, out] : llvm::enumerate(op.getDpsInitsMutable()))
            map.map(op.getMatchingBlockArgument(&out), accs[i]);
          for (Operation &inner : body->without_terminator()) {
            if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
              map.map(index.getResult(), ivs[index.getDim()]);
              continue;
            }
            rb.clone(inner, map);
          }
          return llvm::map_to_vector(yield.getValues(),
                                     [&](Value v) { return map.lookupOrDefault(v); });
        });
    for (auto [i, out] : llvm::enumerate(op.getDpsInitsMutable()))
      memref::StoreOp::create(pb, l, nest.results[i], out.get(),
                              indices(pb, l, op.getMatchingIndexingMap(&out), pivs));
  };

  if (numParallel == 0) {
    perPoint(b, loc, {});
  } else {
    scf::ParallelOp::create(b, loc, ArrayRef(lbs).take_front(numParallel),
                            ArrayRef(ubs).take_front(numParallel),
                            ArrayRef(steps).take_front(numParallel),
                            [&](OpBuilder &pb, Location l, ValueRange pivs) {
                              perPoint(pb, l, pivs);
                            });
  }
  op.erase();
}

struct ReductionLoopsPass : impl::MlircapReductionLoopsBase<ReductionLoopsPass> {
  void runOnOperation() override {
    SmallVector<linalg::GenericOp> ops;
    getOperation().walk([&](linalg::GenericOp op) {
      if (isTrailingReduction(op))
        ops.push_back(op);
    });
    for (linalg::GenericOp op : ops)
      lower(op);
  }
};
} // namespace
} // namespace mlir::mlircap
