//===- GpuEmitPointwise.cpp - pointwise and naive reduction kernels --------===//
//
// Part of the mlircap-gpu-codegen emitter: see GpuKernelEmitter.h.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"

namespace mlir::mlircap::gpu_emit {

void Codegen::gridStride(int64_t n, Value gtid, function_ref<void(Value)> body) {
  // Stride by the launched grid, not the planned one: how many blocks fit
  // on an SM at once depends on the registers ptxas gives the kernel, known
  // only when the module is loaded, and blocks past one wave each run their
  // whole share of the loop after the first wave (a tail of up to 1/3).
  gridStrided = true;
  Value launched = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
  Value stride = arith::MulIOp::create(b, loc, launched, cIdx(block));
  auto loop = scf::ForOp::create(b, loc, gtid, cIdx(n), stride);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  body(loop.getInductionVar());
}

SmallVector<std::pair<Value, unsigned>> Codegen::outputs() {
  SmallVector<std::pair<Value, unsigned>> outs;
  auto ret = cast<func::ReturnOp>(kfn.getBody().front().getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    outs.push_back({v, (unsigned)i});
  return outs;
}

bool Codegen::vecType(Type t) {
  return t.isF32() || t.isF16() || t.isBF16() || t.isInteger(32);
}

unsigned Codegen::vecAlign(int64_t width, Type t) {
  return std::min<int64_t>(16, width * t.getIntOrFloatBitWidth() / 8);
}

int64_t Codegen::vectorizable(int64_t n, linalg::GenericOp &out) {
  auto ret = cast<func::ReturnOp>(kfn.getBody().front().getTerminator());
  if (ret.getNumOperands() != 1)
    return 0;
  auto g = ret.getOperand(0).getDefiningOp<linalg::GenericOp>();
  if (!g || !isAllParallel(g) || g.getNumResults() != 1 || g.getNumLoops() == 0)
    return 0;
  auto type = cast<RankedTensorType>(g.getResult(0).getType());
  if (!g.getMatchingIndexingMap(g.getDpsInitOperand(0)).isIdentity() ||
      !vecType(type.getElementType()))
    return 0;
  int64_t last = type.getShape().back();
  for (int64_t width : {128 / (int64_t)type.getElementTypeBitWidth(), int64_t(4)})
    if (n % width == 0 && last % width == 0) {
      out = g;
      return width;
    }
  return 0;
}

Value Codegen::buffersAligned16() {
  Value aligned;
  for (Value mem : llvm::concat<Value>(argMem, outMem)) {
    Value p = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
    Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                     arith::RemUIOp::create(b, loc, p, cIdx(16)), cIdx(0));
    aligned = aligned ? arith::AndIOp::create(b, loc, aligned, ok).getResult() : ok;
  }
  return aligned;
}

void Codegen::storeLanes(unsigned out, ArrayRef<Value> lanes, Value at) {
  int64_t width = lanes.size();
  auto vt = VectorType::get({width}, lanes[0].getType());
  Value vec = vector::BroadcastOp::create(b, loc, vt, lanes[0]);
  for (int64_t l = 1; l < width; ++l)
    vec = vector::InsertOp::create(b, loc, lanes[l], vec, l);
  auto st = vector::StoreOp::create(b, loc, vec, outMem[out], ValueRange{at});
  st.setAlignment(vecAlign(width, lanes[0].getType()));
}

void Codegen::pointwise(Value tid, Value bid, bool allowVector) {
  int64_t maxN = 1;
  for (auto [v, i] : outputs())
    maxN = std::max(maxN, product(cast<RankedTensorType>(v.getType()).getShape()));
  block = kPointwiseBlock;
  linalg::GenericOp vecOp;
  int64_t width = allowVector ? vectorizable(maxN, vecOp) : 0;
  bool vec = width > 0;
  int64_t perThread = vec ? width : 1;
  int64_t work = (maxN + perThread - 1) / perThread;
  grid = std::max<int64_t>(1, std::min((work + block - 1) / block, numSMs * 8));
  Value gtid = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, bid, cIdx(block)), tid);
  auto scalarLoops = [&] {
    for (auto [out, k] : outputs()) {
      auto type = cast<RankedTensorType>(out.getType());
      gridStride(product(type.getShape()), gtid, [&](Value i) {
        auto idx = delinearize(i, type.getShape());
        if (Value v = eval(out, idx))
          store(k, v, idx);
      });
    }
  };
  if (vec) {
    strategy = width == 4 ? "pointwise_vec4" : "pointwise_vec8";
    auto [out, k] = outputs().front();
    linalg::GenericOp g = vecOp;
    auto shape = cast<RankedTensorType>(out.getType()).getShape();
    unsigned last = g.getNumLoops() - 1;
    // Vector accesses need 16-byte aligned pointers: check them at run time
    // and take the scalar loop otherwise (e.g. a misaligned input view).
    auto ifAligned = scf::IfOp::create(b, loc, buffersAligned16(), /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifAligned.elseBlock());
    scalarLoops();
    b.setInsertionPointToStart(ifAligned.thenBlock());
    // Kernel inputs read along the innermost loop at a lane's index, by the
    // final generic or any producer it evaluates (a dtype conversion, an
    // expand_shape of the argument), are read with one aligned vector load
    // a slot (vectorLane); anything else per lane. Base pointers are checked
    // for 16-byte alignment above; slots start at multiples of `width`.
    vecWidth = width;
    vecLoads = true;
    gridStride(maxN / width, gtid, [&](Value i) {
      Value base = arith::MulIOp::create(b, loc, i, cIdx(width));
      SmallVector<Value> ivs0 = delinearize(base, shape);
      // inputs not indexed by the innermost loop: one scalar for all lanes
      DenseMap<unsigned, Value> scalarsIn;
      for (OpOperand *in : g.getDpsInputOperands()) {
        Block &body = g.getRegion().front();
        if (body.getArgument(in->getOperandNumber()).use_empty() ||
            !isa<RankedTensorType>(in->get().getType()))
          continue;
        AffineMap map = g.getMatchingIndexingMap(in);
        if (map.isFunctionOfDim(last))
          continue;
        Value v = eval(in->get(), applyMap(map, ivs0));
        if (!v)
          return;
        scalarsIn[in->getOperandNumber()] = v;
      }
      SmallVector<Value> results;
      for (int64_t l = 0; l < width; ++l) {
        SmallVector<Value> ivs(ivs0);
        if (l > 0)
          ivs[last] = arith::AddIOp::create(b, loc, ivs0[last], cIdx(l));
        laneOf[ivs[last]] = {ivs0[last], l};
        SmallVector<Value> outs;
        for (OpOperand &init : g.getDpsInitsMutable())
          outs.push_back(body_uses(g, init)
                             ? eval(init.get(), applyMap(g.getMatchingIndexingMap(&init), ivs))
                             : Value());
        auto vals = evalBody(g, ivs, outs, scalarsIn);
        if (vals.empty())
          return;
        results.push_back(vals[0]);
      }
      storeLanes(k, results, base);
    });
    vecLoads = false;
    laneOf.clear();
    return;
  }
  scalarLoops();
}

} // namespace mlir::mlircap::gpu_emit
