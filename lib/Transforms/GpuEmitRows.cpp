//===- GpuEmitRows.cpp - row reduction kernels -----------------------------===//
//
// Part of the mlircap-gpu-codegen emitter: see GpuKernelEmitter.h.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"

namespace mlir::mlircap::gpu_emit {

void Codegen::rowKernel(Value tid, Value bid) {
  int64_t rows = 0, len = 0;
  for (auto g : kfn.getBody().front().getOps<linalg::GenericOp>())
    if (isRowReduction(g)) {
      rows = len = 1;
      for (auto [i, it] : llvm::enumerate(g.getIteratorTypesArray()))
        ((it == utils::IteratorType::parallel) ? rows : len) *= g.getStaticLoopRanges()[i];
      break;
    }
  if (rows == 0) { // nothing to compute or write
    grid = 1;
    block = 32;
    strategy = "empty";
    return;
  }
  // Threads per row: about 4 elements per thread. Up to a warp, several
  // rows share a block (and a warp: shuffles stay within aligned groups of
  // `lanes` lanes); beyond, a block per row.
  // Many rows of up to 1024 elements: a warp per row (no shared memory, no
  // barriers) still fills the GPU, e.g. attention softmax over 256 keys.
  int64_t lanes = llvm::PowerOf2Ceil((len + 3) / 4);
  if (lanes > 32 && len <= 1024 && rows >= numSMs * 32)
    lanes = 32;
  int64_t rowsPerBlock = 1;
  if (lanes <= 32) {
    lanes = std::max<int64_t>(lanes, 1);
    block = std::clamp<int64_t>(llvm::PowerOf2Ceil(rows * lanes), 32, 256);
    rowsPerBlock = block / lanes;
    strategy = lanes == 32 ? "row_warp" : lanes == 1 ? "row_thread"
                                                     : "row_subwarp";
  } else {
    lanes = block = std::min<int64_t>(lanes, 1024);
    strategy = "row_block";
  }
  grid = (rows + rowsPerBlock - 1) / rowsPerBlock;
  rowLanes = lanes;
  Value row = bid, valid;
  if (rowsPerBlock > 1) {
    Value r = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, bid, cIdx(rowsPerBlock)),
        arith::DivUIOp::create(b, loc, tid, cIdx(lanes)));
    valid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, r, cIdx(rows));
    // Rows past the end compute a duplicate of the last row (every lane
    // must take part in the shuffles) and store nothing.
    row = arith::MinUIOp::create(b, loc, r, cIdx(rows - 1));
    tid = arith::RemUIOp::create(b, loc, tid, cIdx(lanes));
  }
  auto guarded = [&]() -> std::optional<OpBuilder::InsertionGuard> {
    if (!valid)
      return std::nullopt;
    std::optional<OpBuilder::InsertionGuard> g(std::in_place, b);
    auto ifOp = scf::IfOp::create(b, loc, valid, false);
    b.setInsertionPointToStart(ifOp.thenBlock());
    return g;
  };
  DenseMap<Value, unsigned> outIndex;
  for (auto [v, k] : outputs())
    outIndex.try_emplace(v, k);

  for (Operation &op : kfn.getBody().front()) {
    if (failedFlag)
      return;
    auto g = dyn_cast<linalg::GenericOp>(&op);
    if (!g || isCloneableIntoKernel(g))
      continue;
    if (isRowReduction(g)) {
      SmallVector<int64_t> loops = g.getStaticLoopRanges();
      unsigned np = g.getNumParallelLoops();
      auto rowIvs = delinearize(row, ArrayRef<int64_t>(loops).take_front(np));
      SmallVector<int64_t> redShape(ArrayRef<int64_t>(loops).drop_front(np));
      Operation *comb = getCombiner(g);
      Type t = comb->getResult(0).getType();
      TypedAttr identity = getCombinerIdentity(comb, t);
      Value id = arith::ConstantOp::create(b, loc, identity);
      auto loop = scf::ForOp::create(b, loc, tid, cIdx(product(redShape)),
                                     cIdx(lanes), ValueRange{id});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        SmallVector<Value> ivs(rowIvs);
        auto rivs = delinearize(loop.getInductionVar(), redShape);
        ivs.append(rivs.begin(), rivs.end());
        auto vals = evalBody(g, ivs, {loop.getRegionIterArgs()[0]});
        if (vals.empty())
          return;
        scf::YieldOp::create(b, loc, vals[0]);
      }
      Value total = blockReduce(loop.getResult(0), comb, identity, tid);
      // Combine with the init (the fill) at this row's output element.
      SmallVector<Value> ivs(rowIvs);
      for (size_t i = 0; i < redShape.size(); ++i)
        ivs.push_back(cIdx(0));
      OpOperand *init = g.getDpsInitOperand(0);
      auto outIdx = applyMap(g.getMatchingIndexingMap(init), ivs);
      Value initV = eval(init->get(), outIdx);
      if (!initV)
        return;
      // The body is combine(f, out): out is the init.
      Value res = comb->getOperand(0) ==
                          g.getRegion().front().getArguments().back()
                      ? combine(comb, initV, total)
                      : combine(comb, total, initV);
      materialized[g.getResult(0)] = res;
      auto it = outIndex.find(g.getResult(0));
      if (it != outIndex.end()) {
        Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, cIdx(0));
        if (valid)
          first = arith::AndIOp::create(b, loc, first, valid);
        auto ifOp = scf::IfOp::create(b, loc, first, false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        store(it->second, res, outIdx);
      }
      continue;
    }
    // Elementwise ops of the row are computed where used; results of the
    // kernel are written by the whole block.
    for (Value r : g->getResults()) {
      auto it = outIndex.find(r);
      if (it == outIndex.end())
        continue;
      auto shape = cast<RankedTensorType>(r.getType()).getShape();
      auto k = rowPrefix(shape, rows);
      if (!k) {
        error(g, "row kernel output is not row-partitioned");
        return;
      }
      auto g0 = guarded();
      auto rowIdx = delinearize(row, shape.take_front(*k));
      ArrayRef<int64_t> inner = shape.drop_front(*k);
      auto loop = scf::ForOp::create(b, loc, tid, cIdx(product(inner)), cIdx(lanes));
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      SmallVector<Value> idx(rowIdx);
      auto in = delinearize(loop.getInductionVar(), inner);
      idx.append(in.begin(), in.end());
      if (Value v = eval(r, idx))
        store(it->second, v, idx);
    }
  }
}

} // namespace mlir::mlircap::gpu_emit
