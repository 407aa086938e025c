//===- GpuEmitRows.cpp - row reduction kernels -----------------------------===//
//
// Part of the mlircap-gpu-codegen emitter: see GpuKernelEmitter.h.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"

namespace mlir::mlircap::gpu_emit {

/// A row reduction's iteration space with its unit loops dropped: the number
/// of rows (the product of the parallel extents) and the reduction extents
/// other than 1. Reductions of one row computed over loops that differ only by
/// unit dims (a keepdim max expanded to (rows, 1, n) beside a sum over (rows,
/// n), softmax's) share it.
static std::pair<int64_t, SmallVector<int64_t>> rowSpace(ArrayRef<int64_t> loops, unsigned np) {
  SmallVector<int64_t> red;
  for (int64_t e : loops.drop_front(np))
    if (e != 1)
      red.push_back(e);
  return {product(loops.take_front(np)), red};
}

void Codegen::rowKernel(Value tid, Value bid) {
  int64_t rows = 0, len = 0;
  linalg::GenericOp first;
  for (auto g : kfn.getBody().front().getOps<linalg::GenericOp>())
    if (isRowReduction(g)) {
      first = g;
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
  for (auto [v, k] : outputs())
    resultIndex.try_emplace(v, k);
  SmallVector<int64_t> loops = first.getStaticLoopRanges();
  unsigned np = first.getNumParallelLoops();
  // The row in registers when every row reduction runs over the same loops
  // and a thread's share is small: chunks of up to 8 consecutive elements
  // (one 16-byte vector load of bf16, two of f32), about 4 chunks a thread,
  // more threads per row while the GPU is not filled.
  auto space = rowSpace(loops, np);
  bool sameLoops = llvm::all_of(kfn.getBody().front().getOps<linalg::GenericOp>(),
                                [&](linalg::GenericOp g) {
                                  return !isRowReduction(g) || isCloneableIntoKernel(g) ||
                                         rowSpace(g.getStaticLoopRanges(),
                                                  g.getNumParallelLoops()) == space;
                                });
  int64_t inner = space.second.empty() ? 1 : space.second.back();
  int64_t width = inner % 8 == 0 ? 8 : inner % 4 == 0 ? 4
                                                      : 1;
  int64_t chunks = len / width;
  int64_t lanes = std::clamp<int64_t>(llvm::PowerOf2Ceil((chunks + 3) / 4), 1, 1024);
  while (lanes < 1024 && lanes < chunks && rows * lanes < numSMs * 1024)
    lanes *= 2;
  // So many rows that half the lanes still fill every SM (max pooling's
  // windows: millions of rows of 9): fewer lanes a row, down to a thread,
  // while its share stays within 32 elements; fewer shuffles.
  while (lanes > 1 && rows * (lanes / 2) >= numSMs * 2048 &&
         (chunks + lanes / 2 - 1) / (lanes / 2) * width <= 32)
    lanes /= 2;
  int64_t slots = (chunks + lanes - 1) / lanes;
  bool persistent = sameLoops && slots * width <= 32;
  if (!persistent) {
    // Threads per row: about 4 elements per thread. Many rows of up to 1024
    // elements: a warp per row (no shared memory, no barriers) still fills
    // the GPU, e.g. attention softmax over 256 keys.
    width = 1;
    lanes = llvm::PowerOf2Ceil((len + 3) / 4);
    if (lanes > 32 && len <= 1024 && rows >= numSMs * 32)
      lanes = 32;
  }
  // Up to a warp, several rows share a block (and a warp: shuffles stay
  // within aligned groups of `lanes` lanes); beyond, a block per row.
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
  if (!persistent) {
    loopedRow(tid, row, valid, rows);
    return;
  }
  strategy += width > 1 ? "_regs_vec" + std::to_string(width) : "_regs";
  vecWidth = width;
  if (width == 1) {
    persistentRow(tid, row, valid, loops, np, slots);
    return;
  }
  // Vector loads and stores need 16-byte aligned base pointers: checked at
  // run time, the scalar version otherwise (e.g. a misaligned input view).
  auto ifAligned = scf::IfOp::create(b, loc, buffersAligned16(), /*withElse=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifAligned.thenBlock());
  vecLoads = true;
  persistentRow(tid, row, valid, loops, np, slots);
  b.setInsertionPointToStart(ifAligned.elseBlock());
  vecLoads = false;
  persistentRow(tid, row, valid, loops, np, slots);
}

std::optional<OpBuilder::InsertionGuard> Codegen::guardIf(Value cond) {
  if (!cond)
    return std::nullopt;
  std::optional<OpBuilder::InsertionGuard> g(std::in_place, b);
  auto ifOp = scf::IfOp::create(b, loc, cond, false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  return g;
}

Value Codegen::andIf(Value a, Value c) {
  if (!a || !c)
    return a ? a : c;
  return arith::AndIOp::create(b, loc, a, c);
}

bool Codegen::finishRowReduction(linalg::GenericOp g, Value acc, Value tid, Value valid,
                                 ArrayRef<Value> rowIvs) {
  Operation *comb = getCombiner(g);
  TypedAttr identity = getCombinerIdentity(comb, comb->getResult(0).getType());
  Value total = blockReduce(acc, comb, identity, tid);
  // Combine with the init (the fill) at this row's output element.
  SmallVector<Value> ivs(rowIvs);
  ivs.resize(g.getNumLoops(), cIdx(0));
  OpOperand *init = g.getDpsInitOperand(0);
  auto outIdx = applyMap(g.getMatchingIndexingMap(init), ivs);
  Value initV = eval(init->get(), outIdx);
  if (!initV)
    return false;
  // The body is combine(f, out): out is the init.
  Value res = comb->getOperand(0) == g.getRegion().front().getArguments().back()
                  ? combine(comb, initV, total)
                  : combine(comb, total, initV);
  materialized[g.getResult(0)] = res;
  auto it = resultIndex.find(g.getResult(0));
  if (it != resultIndex.end()) {
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, cIdx(0));
    auto guard = guardIf(andIf(first, valid));
    store(it->second, res, outIdx);
  }
  return true;
}

bool Codegen::rowOutputLoop(linalg::GenericOp g, Value r, unsigned out, Value tid, Value row,
                            Value valid, int64_t rows) {
  auto shape = cast<RankedTensorType>(r.getType()).getShape();
  auto k = rowPrefix(shape, rows);
  if (!k) {
    error(g, "row kernel output is not row-partitioned");
    return false;
  }
  auto g0 = guardIf(valid);
  auto rowIdx = delinearize(row, shape.take_front(*k));
  ArrayRef<int64_t> inner = shape.drop_front(*k);
  auto loop = scf::ForOp::create(b, loc, tid, cIdx(product(inner)), cIdx(rowLanes));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  SmallVector<Value> idx(rowIdx);
  auto in = delinearize(loop.getInductionVar(), inner);
  idx.append(in.begin(), in.end());
  if (Value v = eval(r, idx))
    store(out, v, idx);
  return true;
}

void Codegen::persistentRow(Value tid, Value row, Value valid, ArrayRef<int64_t> loops,
                            unsigned np, int64_t slots) {
  memo.clear();
  laneOf.clear();
  materialized.clear();
  int64_t width = vecWidth;
  auto [rows, redShape] = rowSpace(loops, np);
  int64_t chunks = product(redShape) / width;
  SmallVector<Value> rowIvs = delinearize(row, loops.take_front(np));
  // This row's index over dims `rowShape` (a generic's parallel loops).
  auto rowIvsOver = [&](ArrayRef<int64_t> rowShape) {
    return rowShape == loops.take_front(np) ? rowIvs : delinearize(row, rowShape);
  };
  // The loop ivs of a generic (or the index of an output) over `shape`, whose
  // first `k` dims are the row's and the rest its reduction dims (the row
  // space's, with unit dims in between), at the reduction ivs `red`.
  auto ivsOf = [&](ArrayRef<int64_t> shape, unsigned k, ArrayRef<Value> red) {
    SmallVector<Value> ivs = rowIvsOver(shape.take_front(k));
    unsigned next = 0;
    for (int64_t e : shape.drop_front(k))
      ivs.push_back(e == 1 ? cIdx(0) : red[next++]);
    return ivs;
  };
  // Slot j of this thread: chunk tid + j * lanes (clamped into the row; a
  // slot past the row's end is computed but neither reduced nor stored).
  struct Slot {
    Value inRange;
    SmallVector<SmallVector<Value>> red; // per lane: the row space's reduction ivs
  };
  SmallVector<Slot> slotIvs;
  for (int64_t j = 0; j < slots; ++j) {
    Slot s;
    Value ch = arith::AddIOp::create(b, loc, tid, cIdx(j * rowLanes));
    if (chunks % rowLanes != 0 && (j + 1) * rowLanes > chunks) {
      s.inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, ch, cIdx(chunks));
      ch = arith::MinUIOp::create(b, loc, ch, cIdx(chunks - 1));
    }
    auto pre = delinearize(arith::MulIOp::create(b, loc, ch, cIdx(width)), redShape);
    for (int64_t l = 0; l < width; ++l) {
      SmallVector<Value> red(pre.begin(), pre.end());
      if (!red.empty()) {
        Value last = l == 0 ? pre.back() : arith::AddIOp::create(b, loc, pre.back(), cIdx(l)).getResult();
        if (width > 1)
          laneOf[last] = {pre.back(), l};
        red.back() = last;
      }
      s.red.push_back(std::move(red));
    }
    slotIvs.push_back(std::move(s));
  }
  for (Operation &op : kfn.getBody().front()) {
    if (failedFlag)
      return;
    auto g = dyn_cast<linalg::GenericOp>(&op);
    if (!g || isCloneableIntoKernel(g))
      continue;
    if (isRowReduction(g)) {
      Operation *comb = getCombiner(g);
      Type t = comb->getResult(0).getType();
      TypedAttr identity = getCombinerIdentity(comb, t);
      Value acc = arith::ConstantOp::create(b, loc, identity);
      SmallVector<int64_t> gLoops = g.getStaticLoopRanges();
      unsigned gNp = g.getNumParallelLoops();
      for (Slot &s : slotIvs)
        for (auto &red : s.red) {
          auto vals = evalBody(g, ivsOf(gLoops, gNp, red), {acc});
          if (vals.empty())
            return;
          acc = s.inRange ? arith::SelectOp::create(b, loc, s.inRange, vals[0], acc).getResult()
                          : vals[0];
        }
      if (!finishRowReduction(g, acc, tid, valid, rowIvsOver(ArrayRef<int64_t>(gLoops).take_front(gNp))))
        return;
      continue;
    }
    for (Value r : g->getResults()) {
      auto it = resultIndex.find(r);
      if (it == resultIndex.end())
        continue;
      auto type = cast<RankedTensorType>(r.getType());
      ArrayRef<int64_t> shape = type.getShape();
      // Outputs over the row space (its dims, unit dims aside) are written
      // from the slots; others by a strided loop over the row's part of them.
      std::optional<unsigned> k;
      for (unsigned i = 0; i <= shape.size() && !k; ++i)
        if (rowSpace(shape, i) == std::make_pair(rows, redShape))
          k = i;
      if (!k) {
        if (!rowOutputLoop(g, r, it->second, tid, row, valid, rows))
          return;
        continue;
      }
      // Vector stores when the innermost dim is the lanes' (not a unit dim).
      bool vecStore = vecLoads && width > 1 && vecType(type.getElementType()) &&
                      !redShape.empty() && shape.back() == redShape.back();
      for (Slot &s : slotIvs) {
        SmallVector<Value> vals;
        SmallVector<SmallVector<Value>> idx;
        for (auto &red : s.red) {
          idx.push_back(ivsOf(shape, *k, red));
          Value v = eval(r, idx.back());
          if (!v)
            return;
          vals.push_back(v);
        }
        auto guard = guardIf(andIf(valid, s.inRange));
        if (!vecStore) {
          for (auto [i, v] : llvm::zip(idx, vals))
            store(it->second, v, i);
          continue;
        }
        storeLanes(it->second, vals, linearize(idx[0], shape));
      }
    }
  }
}

void Codegen::loopedRow(Value tid, Value row, Value valid, int64_t rows) {
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
      Value id = arith::ConstantOp::create(
          b, loc, getCombinerIdentity(comb, comb->getResult(0).getType()));
      auto loop = scf::ForOp::create(b, loc, tid, cIdx(product(redShape)), cIdx(rowLanes),
                                     ValueRange{id});
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
      if (!finishRowReduction(g, loop.getResult(0), tid, valid, rowIvs))
        return;
      continue;
    }
    // Elementwise ops of the row are computed where used; results of the
    // kernel are written by the whole block.
    for (Value r : g->getResults()) {
      auto it = resultIndex.find(r);
      if (it != resultIndex.end() && !rowOutputLoop(g, r, it->second, tid, row, valid, rows))
        return;
    }
  }
}

} // namespace mlir::mlircap::gpu_emit
