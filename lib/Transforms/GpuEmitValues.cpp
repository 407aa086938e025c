//===- GpuEmitValues.cpp - values on demand, stores, shuffles, block reductions ---===//
//
// Part of the mlircap-gpu-codegen emitter: see GpuKernelEmitter.h.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"

namespace mlir::mlircap::gpu_emit {

bool Codegen::dominatesInsertion(Value v) {
  Block *def = v.getParentBlock();
  for (Block *blk = b.getInsertionBlock(); blk;) {
    if (blk == def)
      return true;
    Operation *parent = blk->getParentOp();
    if (!parent || parent == gfn.getOperation())
      return false;
    blk = parent->getBlock();
  }
  return false;
}

Value Codegen::eval(Value tensor, ArrayRef<Value> idx) {
  if (failedFlag)
    return {};
  std::vector<const void *> key{tensor.getAsOpaquePointer()};
  for (Value i : idx)
    key.push_back(i.getAsOpaquePointer());
  auto it = memo.find(key);
  if (it != memo.end() && dominatesInsertion(it->second))
    return it->second;
  Value v = evalUncached(tensor, idx);
  if (v)
    memo[key] = v;
  return v;
}

Value Codegen::vectorLane(BlockArgument arg, ArrayRef<Value> idx) {
  if (!vecLoads || idx.empty())
    return {};
  auto lane = laneOf.find(idx.back());
  auto type = cast<RankedTensorType>(arg.getType());
  Type elem = type.getElementType();
  if (lane == laneOf.end() || !vecType(elem) || type.getShape().back() % vecWidth != 0)
    return {};
  // The vector holds the lanes of the slot: idx with its innermost index
  // replaced by the slot's first one (a multiple of vecWidth, as is the
  // innermost size, so the vector stays in the row and is aligned).
  auto [first, l] = lane->second;
  SmallVector<Value> at(idx);
  at.back() = first;
  std::vector<const void *> key{nullptr, arg.getAsOpaquePointer()};
  for (Value i : at)
    key.push_back(i.getAsOpaquePointer());
  Value vec;
  auto it = memo.find(key);
  if (it != memo.end() && dominatesInsertion(it->second)) {
    vec = it->second;
  } else {
    auto load = vector::LoadOp::create(b, loc, VectorType::get({vecWidth}, elem),
                                       argMem[arg.getArgNumber()],
                                       ValueRange{linearize(at, type.getShape())});
    load.setAlignment(vecAlign(vecWidth, elem));
    vec = load;
    memo[key] = vec;
  }
  return vector::ExtractOp::create(b, loc, vec, l);
}

Value Codegen::evalUncached(Value tensor, ArrayRef<Value> idx) {
  if (Value m = materialized.lookup(tensor))
    return m;
  auto type = cast<RankedTensorType>(tensor.getType());
  if (auto arg = dyn_cast<BlockArgument>(tensor)) {
    if (Value v = vectorLane(arg, idx))
      return v;
    Value lin = linearize(idx, type.getShape());
    Value v = memref::LoadOp::create(b, loc, argMem[arg.getArgNumber()], lin);
    if (type.getElementType().isInteger(1)) // bools are bytes in memory
      v = arith::TruncIOp::create(b, loc, b.getI1Type(), v);
    return v;
  }
  Operation *def = tensor.getDefiningOp();
  if (auto cst = dyn_cast<arith::ConstantOp>(def)) {
    auto dense = dyn_cast<DenseElementsAttr>(cst.getValue());
    if (!dense || !dense.isSplat()) {
      error(def, "non-splat constant inside a kernel");
      return {};
    }
    return arith::ConstantOp::create(b, loc, dense.getSplatValue<TypedAttr>());
  }
  if (isa<tensor::EmptyOp>(def))
    return zeroOf(type.getElementType());
  if (auto fill = dyn_cast<linalg::FillOp>(def))
    return scalar(fill.getInputs()[0]);
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
    SmallVector<Value> src;
    for (ReassociationIndices group : expand.getReassociationIndices()) {
      SmallVector<Value> sub;
      SmallVector<int64_t> shape;
      for (int64_t d : group) {
        sub.push_back(idx[d]);
        shape.push_back(type.getDimSize(d));
      }
      src.push_back(linearize(sub, shape));
    }
    return eval(expand.getSrc(), src);
  }
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
    auto srcType = collapse.getSrcType();
    SmallVector<Value> src;
    for (auto [j, group] : llvm::enumerate(collapse.getReassociationIndices())) {
      SmallVector<int64_t> shape;
      for (int64_t d : group)
        shape.push_back(srcType.getDimSize(d));
      auto sub = delinearize(idx[j], shape);
      src.append(sub.begin(), sub.end());
    }
    // A collapse into a 0-d tensor has no groups: every source dim is a unit dim.
    if (collapse.getReassociationIndices().empty())
      src.assign(srcType.getRank(), cIdx(0));
    return eval(collapse.getSrc(), src);
  }
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(def)) {
    llvm::SmallBitVector dropped = slice.getDroppedDims();
    SmallVector<Value> src;
    unsigned j = 0;
    for (unsigned i = 0; i < slice.getSourceType().getRank(); ++i) {
      Value off = cIdx(slice.getStaticOffsets()[i]);
      if (dropped.test(i)) {
        src.push_back(off);
        continue;
      }
      Value x = arith::MulIOp::create(b, loc, idx[j++],
                                      cIdx(slice.getStaticStrides()[i]));
      src.push_back(arith::AddIOp::create(b, loc, x, off));
    }
    return eval(slice.getSource(), src);
  }
  if (auto g = dyn_cast<linalg::GenericOp>(def))
    return evalGeneric(g, cast<OpResult>(tensor).getResultNumber(), idx);
  error(def, "cannot compute '") << def->getName() << "' inside a kernel";
  return {};
}

/// Whether result `res` of `g` (the value its body yields) depends on loop
/// `loop`: its linalg.index, an operand indexed by it, or an accumulator.
static bool yieldDependsOnLoop(linalg::GenericOp g, unsigned res,
                               unsigned loop) {
  Block &body = g.getRegion().front();
  auto dependsOnArg = [&](BlockArgument arg) {
    OpOperand &operand = g->getOpOperand(arg.getArgNumber());
    return g.getMatchingIndexingMap(&operand).isFunctionOfDim(loop) ||
           // an accumulator (its own, another result's): its value so far
           // depends on the order of the iterations
           g.isDpsInit(&operand);
  };
  SmallVector<Value> todo{body.getTerminator()->getOperand(res)};
  DenseSet<Value> seen;
  while (!todo.empty()) {
    Value v = todo.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == &body && dependsOnArg(arg))
        return true;
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (!def || !g.getRegion().isAncestor(def->getParentRegion()))
      continue; // defined outside the body: the same in every iteration
    if (auto index = dyn_cast<linalg::IndexOp>(def)) {
      if (index.getDim() == loop)
        return true;
      continue;
    }
    if (def->getNumRegions() != 0 || !isMemoryEffectFree(def))
      return true; // (conservative)
    for (Value operand : def->getOperands())
      todo.push_back(operand);
  }
  return false;
}

std::optional<SmallVector<Value>> Codegen::invertOutput(linalg::GenericOp g,
                                                        unsigned res,
                                                        ArrayRef<Value> idx) {
  AffineMap map = g.getIndexingMapMatchingResult(g->getResult(res));
  SmallVector<int64_t> loops = g.getStaticLoopRanges();
  SmallVector<Value> ivs(g.getNumLoops());
  for (auto [j, e] : llvm::enumerate(map.getResults())) {
    if (auto d = dyn_cast<AffineDimExpr>(e)) {
      if (!ivs[d.getPosition()])
        ivs[d.getPosition()] = idx[j];
      continue;
    }
    if (!isa<AffineConstantExpr>(e)) {
      error(g, "output indexing map is not invertible");
      return std::nullopt;
    }
  }
  auto iters = g.getIteratorTypesArray();
  for (unsigned i = 0; i < ivs.size(); ++i)
    if (!ivs[i] && (iters[i] == utils::IteratorType::parallel)) {
      // A parallel loop the result does not index: every iteration of it writes
      // the same element, so its value must not depend on that loop (then any
      // iteration, the first, gives it: torch-mlir's adaptive_avg_pool3d
      // yields each window's element count, a function of the output
      // position only, beside the window sums it indexes by batch)
      if (loops[i] != 1 && yieldDependsOnLoop(g, res, i)) {
        error(g, "output indexing map is not invertible");
        return std::nullopt;
      }
      ivs[i] = cIdx(0);
    }
  return ivs;
}

SmallVector<Value> Codegen::evalBody(linalg::GenericOp g, ArrayRef<Value> ivs,
                                     ArrayRef<Value> outs,
                                     const DenseMap<unsigned, Value> &given) {
  Block &body = g.getRegion().front();
  IRMapping m;
  for (OpOperand *in : g.getDpsInputOperands()) {
    BlockArgument arg = body.getArgument(in->getOperandNumber());
    if (arg.use_empty())
      continue;
    if (Value pre = given.lookup(in->getOperandNumber())) {
      m.map(arg, pre);
      continue;
    }
    Value v = in->get();
    Value s = isa<RankedTensorType>(v.getType())
                  ? eval(v, applyMap(g.getMatchingIndexingMap(in), ivs))
                  : scalar(v);
    if (!s)
      return {};
    m.map(arg, s);
  }
  for (auto [i, init] : llvm::enumerate(g.getDpsInitsMutable())) {
    BlockArgument arg = body.getArgument(init.getOperandNumber());
    if (arg.use_empty())
      continue;
    m.map(arg, outs[i]);
  }
  for (Operation &op : body.without_terminator()) {
    if (auto index = dyn_cast<linalg::IndexOp>(op)) {
      m.map(index.getResult(), ivs[index.getDim()]);
      continue;
    }
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      if (extract.getTensor().getParentRegion() != &g.getRegion()) {
        SmallVector<Value> at;
        for (Value i : extract.getIndices()) {
          Value mi = m.lookupOrNull(i);
          if (!mi)
            mi = scalars.lookupOrNull(i); // captured from the kernel body
          if (!mi) {
            error(&op, "index not available in the kernel");
            return {};
          }
          at.push_back(mi);
        }
        Value v = eval(extract.getTensor(), at);
        if (!v)
          return {};
        m.map(extract.getResult(), v);
        continue;
      }
    }
    // Values captured from the kernel function body.
    bool bad = false;
    op.walk([&](Operation *nested) {
      for (Value o : nested->getOperands()) {
        if (m.contains(o) || g.getRegion().isAncestor(o.getParentRegion()))
          continue;
        if (isa<ShapedType>(o.getType())) {
          error(&op, "captured tensor used by an unsupported op");
          bad = true;
          return;
        }
        if (Value s = scalars.lookupOrNull(o))
          m.map(o, s);
      }
    });
    if (bad)
      return {};
    b.clone(op, m);
  }
  SmallVector<Value> res;
  for (Value y : cast<linalg::YieldOp>(body.getTerminator()).getValues()) {
    // A yield of a body argument, a body value, or a scalar of the kernel.
    Value r = m.lookupOrNull(y);
    if (!r)
      r = scalars.lookupOrNull(y);
    if (!r) {
      error(g, "yielded value not available in the kernel");
      return {};
    }
    res.push_back(r);
  }
  return res;
}

Value Codegen::evalGeneric(linalg::GenericOp g, unsigned res, ArrayRef<Value> idx) {
  auto ivsOpt = invertOutput(g, res, idx);
  if (!ivsOpt)
    return {};
  SmallVector<Value> ivs = *ivsOpt;
  SmallVector<int64_t> loops = g.getStaticLoopRanges();
  if (isAllParallel(g)) {
    SmallVector<Value> outs;
    for (OpOperand &init : g.getDpsInitsMutable())
      outs.push_back(
          body_uses(g, init)
              ? eval(init.get(), applyMap(g.getMatchingIndexingMap(&init), ivs))
              : Value());
    auto vals = evalBody(g, ivs, outs);
    return vals.empty() ? Value() : vals[res];
  }
  // Naive reduction: a serial loop nest over the reduction dims.
  SmallVector<unsigned> red;
  for (auto [i, it] : llvm::enumerate(g.getIteratorTypesArray()))
    if (!(it == utils::IteratorType::parallel))
      red.push_back(i);
  SmallVector<Value> ivsZero(ivs);
  for (unsigned r : red)
    ivsZero[r] = cIdx(0);
  SmallVector<Value> inits;
  for (OpOperand &init : g.getDpsInitsMutable()) {
    Value v = eval(init.get(), applyMap(g.getMatchingIndexingMap(&init), ivsZero));
    if (!v)
      return {};
    inits.push_back(v);
  }
  int64_t total = 1;
  for (unsigned r : red)
    total *= loops[r];
  SmallVector<int64_t> redShape;
  for (unsigned r : red)
    redShape.push_back(loops[r]);
  auto loop = scf::ForOp::create(b, loc, cIdx(0), cIdx(total), cIdx(1), inits);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    auto rivs = delinearize(loop.getInductionVar(), redShape);
    for (auto [k, r] : llvm::enumerate(red))
      ivs[r] = rivs[k];
    SmallVector<Value> accs(loop.getRegionIterArgs());
    auto vals = evalBody(g, ivs, accs);
    if (vals.empty())
      return {};
    scf::YieldOp::create(b, loc, vals);
  }
  return loop.getResult(res);
}

bool Codegen::body_uses(linalg::GenericOp g, OpOperand &operand) {
  return !g.getRegion().front().getArgument(operand.getOperandNumber()).use_empty();
}

void Codegen::store(unsigned out, Value v, ArrayRef<Value> idx) {
  auto type = cast<RankedTensorType>(kfn.getResultTypes()[out]);
  if (v.getType().isInteger(1))
    v = arith::ExtUIOp::create(b, loc, b.getI8Type(), v);
  memref::StoreOp::create(b, loc, v, outMem[out], linearize(idx, type.getShape()));
}

Value Codegen::shuffleXor(Value v, int64_t offset) {
  Type t = v.getType();
  unsigned w = t.getIntOrFloatBitWidth();
  Type i32 = b.getI32Type();
  Value off = arith::ConstantIntOp::create(b, loc, i32, offset);
  Value width = arith::ConstantIntOp::create(b, loc, i32, 32);
  auto shfl = [&](Value x) {
    return gpu::ShuffleOp::create(b, loc, x, off, width, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  if (t.isF32() || t.isInteger(32))
    return shfl(v);
  Type it = b.getIntegerType(w);
  Value asInt = isa<FloatType>(t) ? arith::BitcastOp::create(b, loc, it, v).getResult() : v;
  Value res;
  if (w < 32) {
    Value ext = arith::ExtUIOp::create(b, loc, i32, asInt);
    res = arith::TruncIOp::create(b, loc, it, shfl(ext));
  } else if (w == 64) {
    Value lo = arith::TruncIOp::create(b, loc, i32, asInt);
    Value hi = arith::TruncIOp::create(
        b, loc, i32,
        arith::ShRUIOp::create(b, loc, asInt,
                               arith::ConstantIntOp::create(b, loc, it, 32)));
    Value slo = arith::ExtUIOp::create(b, loc, it, shfl(lo));
    Value shi = arith::ExtUIOp::create(b, loc, it, shfl(hi));
    res = arith::OrIOp::create(
        b, loc, slo,
        arith::ShLIOp::create(b, loc, shi,
                              arith::ConstantIntOp::create(b, loc, it, 32)));
  } else {
    error(kfn, "cannot shuffle a value of type ") << t;
    return v;
  }
  return isa<FloatType>(t) ? arith::BitcastOp::create(b, loc, t, res).getResult() : res;
}

Value Codegen::combine(Operation *comb, Value a, Value c) {
  IRMapping m;
  m.map(comb->getOperand(0), a);
  m.map(comb->getOperand(1), c);
  return b.clone(*comb, m)->getResult(0);
}

Value Codegen::warpReduce(Value v, Operation *comb) {
  for (int64_t off = std::min<int64_t>(rowLanes, 32) / 2; off >= 1; off /= 2)
    v = combine(comb, v, shuffleXor(v, off));
  return v;
}

Value Codegen::blockReduce(Value v, Operation *comb, TypedAttr identity, Value tid) {
  v = warpReduce(v, comb);
  if (rowLanes <= 32)
    return v;
  Type t = v.getType();
  int64_t warps = block / 32;
  Value scratch = sharedBuffer(warps, t);
  Value result = sharedBuffer(1, t);
  Value lane = arith::RemUIOp::create(b, loc, tid, cIdx(32));
  Value warp = arith::DivUIOp::create(b, loc, tid, cIdx(32));
  Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, cIdx(0));
  auto ifLane0 = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifLane0.thenBlock());
    sharedStore(v, scratch, warp);
  }
  gpu::BarrierOp::create(b, loc);
  Value isWarp0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, warp, cIdx(0));
  auto ifWarp0 = scf::IfOp::create(b, loc, isWarp0, false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifWarp0.thenBlock());
    Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, lane, cIdx(warps));
    Value safeLane = arith::SelectOp::create(b, loc, inRange, lane, cIdx(0));
    Value x = sharedLoad(scratch, safeLane, t);
    Value id = arith::ConstantOp::create(b, loc, identity);
    x = arith::SelectOp::create(b, loc, inRange, x, id);
    int64_t saved = rowLanes;
    rowLanes = 32;
    x = warpReduce(x, comb);
    rowLanes = saved;
    auto ifFirst = scf::IfOp::create(b, loc, isLane0, false);
    b.setInsertionPointToStart(ifFirst.thenBlock());
    sharedStore(x, result, cIdx(0));
  }
  gpu::BarrierOp::create(b, loc);
  return sharedLoad(result, cIdx(0), t);
}

Value Codegen::sharedBuffer(int64_t n, Type t) {
  auto space = gpu::AddressSpaceAttr::get(b.getContext(),
                                          gpu::AddressSpace::Workgroup);
  Type st = t.isInteger(1) ? b.getI8Type() : t;
  return gfn.addWorkgroupAttribution(
      MemRefType::get({n}, st, MemRefLayoutAttrInterface{}, space), loc);
}

void Codegen::sharedStore(Value v, Value mem, Value i) {
  if (v.getType().isInteger(1))
    v = arith::ExtUIOp::create(b, loc, b.getI8Type(), v);
  memref::StoreOp::create(b, loc, v, mem, i);
}

Value Codegen::sharedLoad(Value mem, Value i, Type t) {
  Value v = memref::LoadOp::create(b, loc, mem, i);
  if (t.isInteger(1))
    v = arith::TruncIOp::create(b, loc, b.getI1Type(), v);
  return v;
}

} // namespace mlir::mlircap::gpu_emit
