//===- GpuEmitColumns.cpp - column reduction kernels -----------------------===//
//
// Part of the mlircap-gpu-codegen emitter: see GpuKernelEmitter.h.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"

namespace mlir::mlircap::gpu_emit {

/// `v` is computed element by element over the reduction's output shape from
/// the reduction's element at the same index, other values of that shape
/// computed the same way, and cloneable values: each output thread evaluates
/// it at its own element (a dtype conversion of the sum, BatchNorm's running
/// statistics updated from the mean and the variance).
static bool isPerOutputOf(Value v, linalg::GenericOp red, int depth) {
  if (v == red.getResult(0))
    return true;
  auto outShape = cast<RankedTensorType>(red.getResult(0).getType()).getShape();
  auto g = v.getDefiningOp<linalg::GenericOp>();
  auto vt = dyn_cast<RankedTensorType>(v.getType());
  if (!g || depth > 8 || !isAllParallel(g) || !vt || vt.getShape() != outShape ||
      !g.getIndexingMapMatchingResult(cast<OpResult>(v)).isIdentity())
    return false;
  for (OpOperand *in : g.getDpsInputOperands()) {
    auto d = in->get().getDefiningOp<linalg::GenericOp>();
    if (!d || isCloneableIntoKernel(d))
      continue;
    if (!g.getMatchingIndexingMap(in).isIdentity() || !isPerOutputOf(in->get(), red, depth + 1))
      return false;
  }
  return true;
}

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
    if (!isPerOutputOf(v, red, 0))
      return {};
  }
  return red;
}

void Codegen::columnKernel(linalg::GenericOp red, Value tid, Value bid) {
  auto outType = cast<RankedTensorType>(red.getResult(0).getType());
  ArrayRef<int64_t> outShape = outType.getShape();
  int64_t numOut = product(outShape);
  SmallVector<unsigned> redDims;
  SmallVector<int64_t> redShape;
  for (auto [i, it] : llvm::enumerate(red.getIteratorTypesArray()))
    if (it != utils::IteratorType::parallel) {
      redDims.push_back(i);
      redShape.push_back(red.getStaticLoopRanges()[i]);
    }
  int64_t redLen = product(redShape);
  // A block computes `cols` outputs, `slices` threads each splitting its
  // reduction; partials combined by a tree in workgroup memory. When the
  // innermost loop is a reduction loop (NCHW BatchNorm statistics: each
  // channel's rows of H*W), a column's slices are adjacent threads reading
  // adjacent elements; otherwise (NHWC: contiguous channels) adjacent threads
  // take adjacent columns, at least 8 of them (a 32-byte sector of f32).
  // Few outputs get blocks of up to 1024 threads and fewer columns each, so
  // that the grid still spreads over the SMs (96 channels of 4x16x16 ran in
  // 3 blocks of 8 slices: 128 dependent loads a thread).
  bool sliceFast = red.getIteratorTypesArray().back() != utils::IteratorType::parallel;
  int64_t blockSize = 256;
  auto gridFor = [&](int64_t c) { return (numOut + c - 1) / c; };
  int64_t cols;
  if (sliceFast) {
    int64_t want = std::clamp<int64_t>(llvm::PowerOf2Ceil((redLen + 3) / 4), 32, 1024);
    if (want > blockSize && numOut < numSMs * 2)
      blockSize = want;
    cols = std::max<int64_t>(1, blockSize / std::min(want, blockSize));
  } else {
    cols = 32;
    while (cols > 8 && gridFor(cols) < numSMs)
      cols /= 2;
    if (gridFor(cols) < numSMs && redLen >= 4 * 1024 / cols)
      blockSize = 1024;
  }
  int64_t kSlices = blockSize / cols;
  strategy = sliceFast ? "reduction_split_rows" : "reduction_split";
  block = blockSize;
  grid = std::max<int64_t>(1, gridFor(cols));
  Operation *comb = getCombiner(red);
  Type t = comb->getResult(0).getType();
  TypedAttr identity = getCombinerIdentity(comb, t);
  Value tx = sliceFast ? arith::DivUIOp::create(b, loc, tid, cIdx(kSlices)).getResult()
                       : arith::RemUIOp::create(b, loc, tid, cIdx(cols)).getResult();
  Value ty = sliceFast ? arith::RemUIOp::create(b, loc, tid, cIdx(kSlices)).getResult()
                       : arith::DivUIOp::create(b, loc, tid, cIdx(cols)).getResult();
  Value o = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, bid, cIdx(cols)), tx);
  Value valid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, o, cIdx(numOut));
  Value oc = arith::MinUIOp::create(b, loc, o, cIdx(numOut - 1));
  auto idx = delinearize(oc, outShape);
  auto ivsOpt = invertOutput(red, 0, idx);
  if (!ivsOpt)
    return;
  Value id = arith::ConstantOp::create(b, loc, identity);
  unsigned last = red.getNumLoops() - 1;
  bool narrow = llvm::any_of(red.getDpsInputOperands(), [](OpOperand *in) {
    auto tt = dyn_cast<RankedTensorType>(in->get().getType());
    return tt && tt.getElementTypeBitWidth() <= 16;
  });
  // Slice ty's partial over chunks ty, ty + kSlices, ... of `width`
  // consecutive reduction elements along the innermost loop (width 1: single
  // elements). Independent partials keep loads in flight per thread (a block
  // per channel of 100k elements with one dependent 2-byte load in flight a
  // thread ran at 21% of copy bandwidth on an H100): `width` of them, one per
  // lane of a chunk's vector load, or `unroll` for single elements. An
  // unguarded loop over whole rounds of kSlices * unroll chunks issues every
  // round's loads before its combines; the rest one chunk at a time.
  auto slicePartial = [&](int64_t width) -> Value {
    int64_t chunks = redLen / width;
    int64_t unroll = width == 1 && narrow ? 8 : 4;
    if (chunks < 2 * kSlices * unroll)
      unroll = 1;
    int64_t full = unroll > 1 ? chunks / (kSlices * unroll) * (kSlices * unroll) : 0;
    // Reduction ivs of chunk q's first element (lane indices registered for
    // vector loads of the inputs read along the innermost loop).
    auto chunkIvs = [&](Value q) {
      SmallVector<Value> ivs(*ivsOpt);
      Value r = width > 1 ? arith::MulIOp::create(b, loc, q, cIdx(width)).getResult() : q;
      auto rivs = delinearize(r, redShape);
      for (auto [k, d] : llvm::enumerate(redDims))
        ivs[d] = rivs[k];
      if (width > 1)
        laneOf[ivs[last]] = {ivs[last], 0};
      return ivs;
    };
    auto chunkInto = [&](ArrayRef<Value> ivs0, MutableArrayRef<Value> accs, int64_t u) -> bool {
      for (int64_t l = 0; l < width; ++l) {
        SmallVector<Value> ivs(ivs0);
        if (l > 0) {
          ivs[last] = arith::AddIOp::create(b, loc, ivs0[last], cIdx(l));
          laneOf[ivs[last]] = {ivs0[last], l};
        }
        Value &acc = accs[width > 1 ? l : u];
        auto vals = evalBody(red, ivs, {acc});
        if (vals.empty())
          return false;
        acc = vals[0];
      }
      return true;
    };
    SmallVector<Value> accs(width > 1 ? width : unroll, id);
    if (unroll > 1) {
      auto main = scf::ForOp::create(b, loc, ty, cIdx(full), cIdx(kSlices * unroll), accs);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(main.getBody());
      SmallVector<SmallVector<Value>> round;
      for (int64_t u = 0; u < unroll; ++u) {
        round.push_back(chunkIvs(arith::AddIOp::create(b, loc, main.getInductionVar(), cIdx(u * kSlices))));
        // the chunk's loads first (memoized for the lanes' bodies)
        for (OpOperand *in : red.getDpsInputOperands())
          if (isa<RankedTensorType>(in->get().getType()) &&
              !red.getRegion().front().getArgument(in->getOperandNumber()).use_empty() &&
              !eval(in->get(), applyMap(red.getMatchingIndexingMap(in), round.back())))
            return {};
      }
      SmallVector<Value> next(main.getRegionIterArgs());
      for (int64_t u = 0; u < unroll; ++u)
        if (!chunkInto(round[u], next, u))
          return {};
      scf::YieldOp::create(b, loc, next);
      b.setInsertionPointAfter(main);
      accs.assign(main.getResults().begin(), main.getResults().end());
    }
    auto loop = scf::ForOp::create(b, loc, arith::AddIOp::create(b, loc, ty, cIdx(full)),
                                   cIdx(chunks), cIdx(kSlices), width > 1 ? ValueRange(accs) : ValueRange{accs[0]});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      SmallVector<Value> next(loop.getRegionIterArgs());
      if (!chunkInto(chunkIvs(loop.getInductionVar()), next, 0))
        return {};
      scf::YieldOp::create(b, loc, next);
    }
    for (auto [i, r] : llvm::enumerate(loop.getResults()))
      accs[i] = r;
    for (int64_t w = 1; w < (int64_t)accs.size(); w *= 2) // pairwise: (a0 + a1) + (a2 + a3)
      for (int64_t u = 0; u + w < (int64_t)accs.size(); u += 2 * w)
        accs[u] = combine(comb, accs[u], accs[u + w]);
    return accs[0];
  };
  Value partials = sharedBuffer(blockSize, t);
  // 16-byte vector loads of the inputs read along the innermost loop when
  // its extent is a multiple of the width (8 lanes of a 16-bit input, 4 of
  // a 32-bit one) and the buffers are aligned (checked at run time, the
  // scalar loop otherwise).
  int64_t width = narrow ? 8 : 4;
  bool vec = sliceFast && redShape.back() % width == 0 && redLen >= 2 * kSlices * width &&
             llvm::any_of(red.getDpsInputOperands(), [&](OpOperand *in) {
               auto tt = dyn_cast<RankedTensorType>(in->get().getType());
               return tt && vecType(tt.getElementType()) && red.getMatchingIndexingMap(in).isFunctionOfDim(last);
             });
  // Slice ty's partial into partials[tid]; false on failure.
  auto storePartial = [&](int64_t w) {
    Value partial = slicePartial(w);
    if (partial)
      sharedStore(partial, partials, tid);
    return bool(partial);
  };
  if (vec) {
    strategy += "_vec" + std::to_string(width);
    auto ifAligned = scf::IfOp::create(b, loc, buffersAligned16(), /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifAligned.thenBlock());
    vecWidth = width;
    vecLoads = true;
    bool ok = storePartial(width);
    vecLoads = false;
    laneOf.clear();
    b.setInsertionPointToStart(ifAligned.elseBlock());
    if (!ok || !storePartial(1))
      return;
  } else if (!storePartial(1)) {
    return;
  }
  // Partial of (column tx, slice ty) at slot(tx, ty); a tree over the slices.
  auto slot = [&](Value c, Value sl) -> Value {
    return sliceFast ? arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, c, cIdx(kSlices)), sl)
                     : arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, sl, cIdx(cols)), c);
  };
  for (int64_t half = kSlices / 2; half >= 1; half /= 2) {
    gpu::BarrierOp::create(b, loc);
    Value lower = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, ty, cIdx(half));
    auto step = scf::IfOp::create(b, loc, lower, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(step.thenBlock());
    Value mine = sharedLoad(partials, tid, t);
    Value other = sharedLoad(
        partials, slot(tx, arith::AddIOp::create(b, loc, ty, cIdx(half))), t);
    sharedStore(combine(comb, mine, other), partials, tid);
  }
  gpu::BarrierOp::create(b, loc);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ty, cIdx(0));
  auto ifOp = scf::IfOp::create(b, loc, arith::AndIOp::create(b, loc, first, valid), false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Value acc = sharedLoad(partials, tid, t);
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
