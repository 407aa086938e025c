//===- GpuEmitColumns.cpp - column reduction kernels -----------------------===//
//
// Part of the mlircap-gpu-codegen emitter: see GpuKernelEmitter.h.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"

namespace mlir::mlircap::gpu_emit {

linalg::GenericOp Codegen::columnReduction() {
  linalg::GenericOp red;
  for (auto g : kfn.getBody().front().getOps<linalg::GenericOp>()) {
    if (isCloneableIntoKernel(g))
      continue;
    if (!isAllParallel(g)) {
      if (red)
        return {};
      red = g;
    }
  }
  if (!red || !getCombiner(red) ||
      !getCombinerIdentity(getCombiner(red), getCombiner(red)->getResult(0).getType()))
    return {};
  auto outType = cast<RankedTensorType>(red.getResult(0).getType());
  int64_t redLen = 1;
  for (auto [i, it] : llvm::enumerate(red.getIteratorTypesArray()))
    if (it != utils::IteratorType::parallel)
      redLen *= red.getStaticLoopRanges()[i];
  if (redLen < 64 || product(outType.getShape()) == 0)
    return {};
  for (auto [v, k] : outputs()) {
    if (v == red.getResult(0))
      continue;
    auto g = v.getDefiningOp<linalg::GenericOp>();
    if (!g || !isAllParallel(g) || v.getType() != outType ||
        !g.getIndexingMapMatchingResult(cast<OpResult>(v)).isIdentity())
      return {};
    for (OpOperand &in : g->getOpOperands()) {
      if (in.get() == red.getResult(0) &&
          !g.getMatchingIndexingMap(&in).isIdentity())
        return {};
      // Other generics of the kernel would be recomputed elsewhere.
      if (auto d = in.get().getDefiningOp<linalg::GenericOp>())
        if (d != red && !isCloneableIntoKernel(d))
          return {};
    }
  }
  return red;
}

void Codegen::columnKernel(linalg::GenericOp red, Value tid, Value bid) {
  constexpr int64_t kCols = 32, kSlices = 8;
  strategy = "reduction_split";
  block = kCols * kSlices;
  auto outType = cast<RankedTensorType>(red.getResult(0).getType());
  ArrayRef<int64_t> outShape = outType.getShape();
  int64_t numOut = product(outShape);
  grid = std::max<int64_t>(1, (numOut + kCols - 1) / kCols);
  Operation *comb = getCombiner(red);
  Type t = comb->getResult(0).getType();
  TypedAttr identity = getCombinerIdentity(comb, t);
  Value tx = arith::RemUIOp::create(b, loc, tid, cIdx(kCols));
  Value ty = arith::DivUIOp::create(b, loc, tid, cIdx(kCols));
  Value o = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, bid, cIdx(kCols)), tx);
  Value valid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, o, cIdx(numOut));
  Value oc = arith::MinUIOp::create(b, loc, o, cIdx(numOut - 1));
  auto idx = delinearize(oc, outShape);
  auto ivsOpt = invertOutput(red, 0, idx);
  if (!ivsOpt)
    return;
  SmallVector<unsigned> redDims;
  SmallVector<int64_t> redShape;
  for (auto [i, it] : llvm::enumerate(red.getIteratorTypesArray()))
    if (it != utils::IteratorType::parallel) {
      redDims.push_back(i);
      redShape.push_back(red.getStaticLoopRanges()[i]);
    }
  Value id = arith::ConstantOp::create(b, loc, identity);
  auto loop = scf::ForOp::create(b, loc, ty, cIdx(product(redShape)),
                                 cIdx(kSlices), ValueRange{id});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> ivs(*ivsOpt);
    auto rivs = delinearize(loop.getInductionVar(), redShape);
    for (auto [k, d] : llvm::enumerate(redDims))
      ivs[d] = rivs[k];
    auto vals = evalBody(red, ivs, {loop.getRegionIterArgs()[0]});
    if (vals.empty())
      return;
    scf::YieldOp::create(b, loc, vals[0]);
  }
  Value partials = sharedBuffer(kSlices * kCols, t);
  sharedStore(loop.getResult(0), partials, tid);
  gpu::BarrierOp::create(b, loc);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ty, cIdx(0));
  auto ifOp = scf::IfOp::create(b, loc, arith::AndIOp::create(b, loc, first, valid), false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Value acc = sharedLoad(partials, tx, t);
  for (int64_t sl = 1; sl < kSlices; ++sl) {
    Value at = arith::AddIOp::create(b, loc, cIdx(sl * kCols), tx);
    acc = combine(comb, acc, sharedLoad(partials, at, t));
  }
  OpOperand *init = red.getDpsInitOperand(0);
  SmallVector<Value> ivs0(*ivsOpt);
  for (unsigned d : redDims)
    ivs0[d] = cIdx(0);
  Value initV = eval(init->get(), applyMap(red.getMatchingIndexingMap(init), ivs0));
  if (!initV)
    return;
  Value res = comb->getOperand(0) == red.getRegion().front().getArguments().back()
                  ? combine(comb, initV, acc)
                  : combine(comb, acc, initV);
  materialized[red.getResult(0)] = res;
  for (auto [v, k] : outputs())
    if (Value r = eval(v, idx))
      store(k, r, idx);
  b.setInsertionPointAfter(ifOp);
}

} // namespace mlir::mlircap::gpu_emit
