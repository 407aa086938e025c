//===- GpuCodegen.cpp - kernels on tensors -> gpu.func ---------------------===//
//
// Every function marked `mlircap.kernel` (see FormKernels.cpp) gets a gpu.func
// of the same name in gpu.module @mlircap_kernels. Parameters are flat
// memref<N x T> (one per kernel input, then one per result) so that with the
// bare-pointer calling convention they are plain device pointers.
//
// Values are computed on demand: `eval(tensor, index)` loads kernel inputs,
// folds reshapes/slices/broadcasts/transposes into index arithmetic, and
// inlines elementwise generic bodies, so no intermediate is written to memory.
//
// Strategies, chosen from the kernel's ops and shapes:
//   pointwise  flattened grid-stride loop, 256 threads/block, grid capped at
//              8 blocks per SM on 132 SMs; outputs of 4-aligned contiguous
//              f32/f16/bf16/i32 kernels are stored 4 at a time (vector.store).
//   row        a block (a single warp for rows of <= 32 elements) per row:
//              strided per-thread partials, gpu.shuffle xor butterfly within
//              warps, shared memory across warps; later ops of the row read
//              the reduced values from registers.
//   reduction  (column, windowed, multi-result reductions) one thread per
//              output element with a serial scf.for over the reduction loops.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/Dialect/Affine/Utils.h"
#include "mlir/Dialect/DLTI/DLTI.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/ScopeExit.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPGPUCODEGEN
#include "mlircap/Passes.h.inc"

namespace {

constexpr int64_t kPointwiseBlock = 256;

struct Codegen {
  func::FuncOp kfn;
  gpu::GPUFuncOp gfn;
  OpBuilder b;
  Location loc;
  int64_t numSMs;
  SmallVector<Value> argMem;   // memrefs of kernel inputs
  SmallVector<Value> outMem;   // memrefs of kernel results
  IRMapping scalars;           // scalar values of kfn -> gfn
  DenseMap<Value, Value> materialized; // row-reduced values (same row)
  DenseMap<Value, unsigned> resultIndex; // kfn result values -> output index
  int64_t grid = 1, block = 1;
  int64_t rowLanes = 32; // threads cooperating on one row
  std::string strategy;
  bool failedFlag = false;

  Codegen(func::FuncOp kfn, gpu::GPUFuncOp gfn, int64_t numSMs)
      : kfn(kfn), gfn(gfn), b(gfn.getContext()), loc(kfn.getLoc()),
        numSMs(numSMs) {}

  InFlightDiagnostic error(Operation *op, const Twine &msg) {
    failedFlag = true;
    return op->emitError("mlircap-gpu-codegen: ") << msg;
  }

  Value cIdx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

  Value linearize(ArrayRef<Value> idx, ArrayRef<int64_t> shape) {
    Value lin = cIdx(0);
    for (auto [i, s] : llvm::zip(idx, shape))
      lin = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, lin, cIdx(s)), i);
    return lin;
  }

  SmallVector<Value> delinearize(Value lin, ArrayRef<int64_t> shape) {
    SmallVector<Value> idx(shape.size());
    for (int i = shape.size() - 1; i >= 0; --i) {
      if (shape[i] == 1) {
        idx[i] = cIdx(0);
        continue;
      }
      idx[i] = i == 0 ? lin : arith::RemUIOp::create(b, loc, lin, cIdx(shape[i])).getResult();
      if (i > 0)
        lin = arith::DivUIOp::create(b, loc, lin, cIdx(shape[i]));
    }
    return idx;
  }

  SmallVector<Value> applyMap(AffineMap map, ArrayRef<Value> ivs) {
    SmallVector<Value> out;
    for (AffineExpr e : map.getResults())
      out.push_back(affine::expandAffineExpr(b, loc, e, ivs, {}));
    return out;
  }

  /// Scalars of the kernel function are cloned at the top of the gpu.func.
  Value scalar(Value v) {
    if (Value m = scalars.lookupOrNull(v))
      return m;
    error(kfn, "scalar value not available in the kernel");
    return {};
  }

  Value zeroOf(Type t) {
    return arith::ConstantOp::create(b, loc, cast<TypedAttr>(b.getZeroAttr(t)));
  }

  /// The element of `tensor` at `idx`.
  Value eval(Value tensor, ArrayRef<Value> idx) {
    if (failedFlag)
      return {};
    if (Value m = materialized.lookup(tensor))
      return m;
    auto type = cast<RankedTensorType>(tensor.getType());
    if (auto arg = dyn_cast<BlockArgument>(tensor)) {
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

  /// Loop ivs of `g` that produce element `idx` of result `res`.
  std::optional<SmallVector<Value>> invertOutput(linalg::GenericOp g,
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
        if (loops[i] != 1) {
          error(g, "output indexing map is not invertible");
          return std::nullopt;
        }
        ivs[i] = cIdx(0);
      }
    return ivs;
  }

  /// Clones the body of `g` at loop ivs `ivs` with the accumulators `outs`
  /// (one per init) and returns the yielded values.
  SmallVector<Value> evalBody(linalg::GenericOp g, ArrayRef<Value> ivs,
                              ArrayRef<Value> outs,
                              const DenseMap<unsigned, Value> &given = {}) {
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
    for (Value y : cast<linalg::YieldOp>(body.getTerminator()).getValues())
    {
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

  Value evalGeneric(linalg::GenericOp g, unsigned res, ArrayRef<Value> idx) {
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

  static bool body_uses(linalg::GenericOp g, OpOperand &operand) {
    return !g.getRegion().front().getArgument(operand.getOperandNumber()).use_empty();
  }

  void store(unsigned out, Value v, ArrayRef<Value> idx) {
    auto type = cast<RankedTensorType>(kfn.getResultTypes()[out]);
    if (v.getType().isInteger(1))
      v = arith::ExtUIOp::create(b, loc, b.getI8Type(), v);
    memref::StoreOp::create(b, loc, v, outMem[out], linearize(idx, type.getShape()));
  }

  //===--------------------------------------------------------------------===//
  // Shuffles and block reductions.
  //===--------------------------------------------------------------------===//

  Value shuffleXor(Value v, int64_t offset) {
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

  Value combine(Operation *comb, Value a, Value c) {
    IRMapping m;
    m.map(comb->getOperand(0), a);
    m.map(comb->getOperand(1), c);
    return b.clone(*comb, m)->getResult(0);
  }

  Value warpReduce(Value v, Operation *comb) {
    for (int64_t off = std::min<int64_t>(rowLanes, 32) / 2; off >= 1; off /= 2)
      v = combine(comb, v, shuffleXor(v, off));
    return v;
  }

  /// All threads of the block get the combination of every thread's `v`.
  Value blockReduce(Value v, Operation *comb, TypedAttr identity, Value tid) {
    v = warpReduce(v, comb);
    if (rowLanes <= 32)
      return v;
    Type t = v.getType();
    int64_t warps = block / 32;
    auto space = gpu::AddressSpaceAttr::get(b.getContext(),
                                            gpu::AddressSpace::Workgroup);
    auto scratchT = MemRefType::get({warps}, t, MemRefLayoutAttrInterface{}, space);
    auto resultT = MemRefType::get({1}, t, MemRefLayoutAttrInterface{}, space);
    Value scratch = gfn.addWorkgroupAttribution(scratchT, loc);
    Value result = gfn.addWorkgroupAttribution(resultT, loc);
    Value lane = arith::RemUIOp::create(b, loc, tid, cIdx(32));
    Value warp = arith::DivUIOp::create(b, loc, tid, cIdx(32));
    Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, cIdx(0));
    auto ifLane0 = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifLane0.thenBlock());
      memref::StoreOp::create(b, loc, v, scratch, warp);
    }
    gpu::BarrierOp::create(b, loc);
    Value isWarp0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, warp, cIdx(0));
    auto ifWarp0 = scf::IfOp::create(b, loc, isWarp0, false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifWarp0.thenBlock());
      Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, lane, cIdx(warps));
      Value safeLane = arith::SelectOp::create(b, loc, inRange, lane, cIdx(0));
      Value x = memref::LoadOp::create(b, loc, scratch, safeLane);
      Value id = arith::ConstantOp::create(b, loc, identity);
      x = arith::SelectOp::create(b, loc, inRange, x, id);
      int64_t saved = rowLanes;
      rowLanes = 32;
      x = warpReduce(x, comb);
      rowLanes = saved;
      auto ifFirst = scf::IfOp::create(b, loc, isLane0, false);
      b.setInsertionPointToStart(ifFirst.thenBlock());
      memref::StoreOp::create(b, loc, x, result, cIdx(0));
    }
    gpu::BarrierOp::create(b, loc);
    return memref::LoadOp::create(b, loc, result, cIdx(0));
  }

  //===--------------------------------------------------------------------===//
  // Strategies.
  //===--------------------------------------------------------------------===//

  /// Grid-stride loop over `n` elements; `body(i)`.
  void gridStride(int64_t n, Value gtid, function_ref<void(Value)> body) {
    auto loop = scf::ForOp::create(b, loc, gtid, cIdx(n), cIdx(grid * block));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    body(loop.getInductionVar());
  }

  SmallVector<std::pair<Value, unsigned>> outputs() {
    SmallVector<std::pair<Value, unsigned>> outs;
    auto ret = cast<func::ReturnOp>(kfn.getBody().front().getTerminator());
    for (auto [i, v] : llvm::enumerate(ret.getOperands()))
      outs.push_back({v, (unsigned)i});
    return outs;
  }

  static bool vecType(Type t) {
    return t.isF32() || t.isF16() || t.isBF16() || t.isInteger(32);
  }

  /// Alignment of a `width`-lane access at an offset that is a multiple of
  /// `width` elements from a 16-byte aligned base.
  static unsigned vecAlign(int64_t width, Type t) {
    return std::min<int64_t>(16, width * t.getIntOrFloatBitWidth() / 8);
  }

  /// The kernel computes one elementwise generic with an identity output map
  /// whose innermost dim is a multiple of the vector width: each thread then
  /// computes `width` consecutive elements and stores them with one 16-byte
  /// vector store (4 lanes of f32/i32, 8 of bf16/f16). Returns the width, 0
  /// when the kernel is not vectorizable.
  int64_t vectorizable(int64_t n, linalg::GenericOp &out) {
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

  void pointwise(Value tid, Value bid, bool allowVector) {
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
      Value aligned;
      for (Value mem : llvm::concat<Value>(argMem, outMem)) {
        Value p = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
        Value ok = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq,
            arith::RemUIOp::create(b, loc, p, cIdx(16)), cIdx(0));
        aligned = aligned ? arith::AndIOp::create(b, loc, aligned, ok).getResult() : ok;
      }
      auto ifAligned = scf::IfOp::create(b, loc, aligned, /*withElse=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifAligned.elseBlock());
      scalarLoops();
      b.setInsertionPointToStart(ifAligned.thenBlock());
      gridStride(maxN / width, gtid, [&](Value i) {
        Value base = arith::MulIOp::create(b, loc, i, cIdx(width));
        SmallVector<Value> ivs0 = delinearize(base, shape);
        // Inputs read contiguously along the innermost loop: one aligned
        // vector load; inputs not indexed by it: one scalar for all lanes;
        // anything else is computed per lane.
        DenseMap<unsigned, Value> vecs, scalarsIn;
        for (OpOperand *in : g.getDpsInputOperands()) {
          Block &body = g.getRegion().front();
          if (body.getArgument(in->getOperandNumber()).use_empty())
            continue;
          auto t = dyn_cast<RankedTensorType>(in->get().getType());
          if (!t)
            continue;
          AffineMap map = g.getMatchingIndexingMap(in);
          bool usesLast = map.isFunctionOfDim(last);
          if (!usesLast) {
            Value v = eval(in->get(), applyMap(map, ivs0));
            if (!v)
              return;
            scalarsIn[in->getOperandNumber()] = v;
            continue;
          }
          auto arg = dyn_cast<BlockArgument>(in->get());
          auto lastExpr = dyn_cast<AffineDimExpr>(map.getResults().back());
          bool contiguous =
              arg && vecType(t.getElementType()) && lastExpr &&
              lastExpr.getPosition() == last && t.getShape().back() % width == 0 &&
              llvm::count_if(map.getResults(), [&](AffineExpr e) {
                return e.isFunctionOfDim(last);
              }) == 1;
          if (!contiguous)
            continue;
          Value at = linearize(applyMap(map, ivs0), t.getShape());
          auto load = vector::LoadOp::create(
              b, loc, VectorType::get({width}, t.getElementType()),
              argMem[arg.getArgNumber()], ValueRange{at});
          // Base pointers are checked for 16-byte alignment at the top of
          // the kernel; offsets are multiples of `width` elements.
          load.setAlignment(vecAlign(width, t.getElementType()));
          vecs[in->getOperandNumber()] = load;
        }
        SmallVector<Value> results;
        for (int64_t l = 0; l < width; ++l) {
          SmallVector<Value> ivs(ivs0);
          ivs[last] = arith::AddIOp::create(b, loc, ivs0[last], cIdx(l));
          DenseMap<unsigned, Value> given(scalarsIn);
          for (auto [num, vv] : vecs)
            given[num] = vector::ExtractOp::create(b, loc, vv, l);
          SmallVector<Value> outs;
          for (OpOperand &init : g.getDpsInitsMutable())
            outs.push_back(body_uses(g, init)
                               ? eval(init.get(), applyMap(g.getMatchingIndexingMap(&init), ivs))
                               : Value());
          auto vals = evalBody(g, ivs, outs, given);
          if (vals.empty())
            return;
          results.push_back(vals[0]);
        }
        auto vt = VectorType::get({width}, results[0].getType());
        Value acc = vector::BroadcastOp::create(b, loc, vt, results[0]);
        for (int64_t l = 1; l < width; ++l)
          acc = vector::InsertOp::create(b, loc, results[l], acc, l);
        auto st = vector::StoreOp::create(b, loc, acc, outMem[k], ValueRange{base});
        st.setAlignment(vecAlign(width, results[0].getType()));
      });
      return;
    }
    scalarLoops();
  }

  void rowKernel(Value tid, Value bid) {
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
      strategy = lanes == 32 ? "row_warp" : lanes == 1 ? "row_thread" : "row_subwarp";
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

  /// A reduction kernel that splits the reduction loop across threads: one
  /// single-result reduction R with a recognized combiner and a long
  /// reduction, and outputs that are R or elementwise ops reading R at the
  /// same element (identity maps over R's shape).
  linalg::GenericOp columnReduction() {
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

  /// 32 output elements per block, 8 threads per element splitting the
  /// reduction; partials combined through workgroup memory.
  void columnKernel(linalg::GenericOp red, Value tid, Value bid) {
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
    auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    Value partials = gfn.addWorkgroupAttribution(
        MemRefType::get({kSlices * kCols}, t, MemRefLayoutAttrInterface{}, space), loc);
    memref::StoreOp::create(b, loc, loop.getResult(0), partials, tid);
    gpu::BarrierOp::create(b, loc);
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ty, cIdx(0));
    auto ifOp = scf::IfOp::create(b, loc, arith::AndIOp::create(b, loc, first, valid), false);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value acc = memref::LoadOp::create(b, loc, partials, tx);
    for (int64_t sl = 1; sl < kSlices; ++sl) {
      Value at = arith::AddIOp::create(b, loc, cIdx(sl * kCols), tx);
      acc = combine(comb, acc, memref::LoadOp::create(b, loc, partials, at).getResult());
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

  LogicalResult run(StringRef kind) {
    Block *entry = &gfn.getBody().front();
    b.setInsertionPointToStart(entry);
    unsigned nIn = kfn.getNumArguments();
    for (unsigned i = 0; i < nIn; ++i)
      argMem.push_back(entry->getArgument(i));
    for (unsigned i = 0; i < kfn.getNumResults(); ++i)
      outMem.push_back(entry->getArgument(nIn + i));
    // Scalars (constants and scalar arithmetic) first.
    for (Operation &op : kfn.getBody().front()) {
      if (op.getNumResults() != 1 || isa<ShapedType>(op.getResult(0).getType()) ||
          op.getNumRegions() != 0 || isa<func::ReturnOp>(op))
        continue;
      if (!isPure(&op))
        continue;
      b.clone(op, scalars);
    }
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    bool row = kind == "row_reduction" &&
               llvm::any_of(kfn.getBody().front().getOps<linalg::GenericOp>(),
                            [](linalg::GenericOp g) { return isRowReduction(g); });
    linalg::GenericOp colRed;
    if (!row && kind == "reduction")
      colRed = columnReduction();
    if (row) {
      rowKernel(tid, bid);
    } else if (colRed) {
      columnKernel(colRed, tid, bid);
    } else {
      strategy = kind == "pointwise" ? "pointwise" : "reduction_naive";
      pointwise(tid, bid, kind == "pointwise");
    }
    if (failedFlag)
      return failure();
    gpu::ReturnOp::create(b, loc);
    return success();
  }
};

struct GpuCodegen : impl::MlircapGpuCodegenBase<GpuCodegen> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> kernels;
    for (auto f : module.getOps<func::FuncOp>())
      if (f->hasAttr(kKernelAttr) && !f.isExternal())
        kernels.push_back(f);
    if (kernels.empty())
      return;
    OpBuilder mb(module.getBodyRegion());
    mb.setInsertionPointToEnd(module.getBody());
    auto gmod = module.lookupSymbol<gpu::GPUModuleOp>("mlircap_kernels");
    if (!gmod)
      gmod = gpu::GPUModuleOp::create(mb, module.getLoc(), "mlircap_kernels");
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), mb.getUnitAttr());
    int64_t largest = 0;
    for (func::FuncOp kfn : kernels) {
      for (Type t : llvm::concat<const Type>(kfn.getArgumentTypes(), kfn.getResultTypes()))
        if (auto rt = dyn_cast<RankedTensorType>(t); rt && rt.hasStaticShape())
          largest = std::max(largest, product(rt.getShape()));
      SmallVector<Type> params;
      auto flat = [](Type t) {
        auto rt = dyn_cast<RankedTensorType>(t);
        if (!rt || !rt.hasStaticShape())
          return Type();
        // Bools are one byte per element (as torch stores them).
        Type et = rt.getElementType().isInteger(1)
                      ? IntegerType::get(rt.getContext(), 8)
                      : rt.getElementType();
        return (Type)MemRefType::get({std::max<int64_t>(1, product(rt.getShape()))}, et);
      };
      for (Type t : llvm::concat<const Type>(kfn.getArgumentTypes(), kfn.getResultTypes())) {
        Type m = flat(t);
        if (!m) {
          kfn.emitError("mlircap-gpu-codegen: kernel parameter of type ")
              << t << " is not a statically shaped tensor";
          return signalPassFailure();
        }
        params.push_back(m);
      }
      OpBuilder gb(gmod.getBodyRegion());
      gb.setInsertionPointToEnd(gmod.getBody());
      auto gfn = gpu::GPUFuncOp::create(gb, kfn.getLoc(), kfn.getSymName(),
                                        gb.getFunctionType(params, {}));
      gfn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), gb.getUnitAttr());
      Codegen cg(kfn, gfn, numSMs);
      StringRef kind = "pointwise";
      if (auto k = kfn->getAttrOfType<StringAttr>(kKernelAttr))
        kind = k.getValue();
      if (failed(cg.run(kind)))
        return signalPassFailure();
      gfn.setKnownBlockSizeAttr(gb.getDenseI32ArrayAttr({(int32_t)cg.block, 1, 1}));
      gfn.setKnownGridSizeAttr(gb.getDenseI32ArrayAttr({(int32_t)cg.grid, 1, 1}));
      auto launch = gb.getDictionaryAttr({
          gb.getNamedAttr("grid", gb.getDenseI64ArrayAttr({cg.grid, 1, 1})),
          gb.getNamedAttr("block", gb.getDenseI64ArrayAttr({cg.block, 1, 1})),
          gb.getNamedAttr("smem", gb.getI64IntegerAttr(0)),
          gb.getNamedAttr("strategy", gb.getStringAttr(cg.strategy)),
      });
      kfn->setAttr(kLaunchAttr, launch);
      gfn->setAttr(kLaunchAttr, launch);
    }
    // 32-bit index arithmetic (cheaper address math, fewer registers) when
    // every index, loop bound and grid-stride step fits with room to spare.
    if (largest < (int64_t(1) << 30)) {
      MLIRContext *ctx = module.getContext();
      auto entry = DataLayoutEntryAttr::get(
          IndexType::get(ctx), IntegerAttr::get(IntegerType::get(ctx, 32), 32));
      gmod->setAttr(DLTIDialect::kDataLayoutAttrName,
                    DataLayoutSpecAttr::get(ctx, {entry}));
    }
  }
};
} // namespace
} // namespace mlir::mlircap
