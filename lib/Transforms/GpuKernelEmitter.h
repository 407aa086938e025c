//===- GpuKernelEmitter.h - one kernel on tensors -> gpu.func body --*- C++ -*-===//
//
// The emitter behind mlircap-gpu-codegen (GpuCodegen.cpp): `Codegen` writes
// the body of the gpu.func of one `mlircap.kernel` function. Its parts:
//   GpuEmitValues.cpp    values on demand (eval: loads, index folding of
//                        views, inlined elementwise bodies), stores, warp
//                        shuffles and block reductions
//   GpuEmitPointwise.cpp the pointwise strategy (grid-stride, vector stores)
//                        and the naive one-thread-per-output reduction
//   GpuEmitRows.cpp      row reductions: a block or warp per row
//   GpuEmitColumns.cpp   column reductions split across threads
//   GpuCodegen.cpp       strategy choice (Codegen::run) and the pass
//
//===----------------------------------------------------------------------===//
#ifndef MLIRCAP_LIB_TRANSFORMS_GPUKERNELEMITTER_H
#define MLIRCAP_LIB_TRANSFORMS_GPUKERNELEMITTER_H

#include "KernelUtils.h"
#include "mlir/Dialect/Affine/Utils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/ScopeExit.h"
#include <map>
#include <vector>

namespace mlir::mlircap::gpu_emit {

constexpr int64_t kPointwiseBlock = 256;

struct Codegen {
  func::FuncOp kfn;
  gpu::GPUFuncOp gfn;
  OpBuilder b;
  Location loc;
  int64_t numSMs;
  SmallVector<Value> argMem;             // memrefs of kernel inputs
  SmallVector<Value> outMem;             // memrefs of kernel results
  IRMapping scalars;                     // scalar values of kfn -> gfn
  DenseMap<Value, Value> materialized;   // row-reduced values (same row)
  DenseMap<Value, unsigned> resultIndex; // kfn result values -> output index (row kernels)
  int64_t grid = 1, block = 1;
  /// The kernel's loops stride by the launched grid (gpu.grid_dim), so any
  /// grid from 1 to `grid` computes the same result: the runtime launches as
  /// many blocks as fit on the device at once (one wave).
  bool gridStrided = false;
  int64_t rowLanes = 32; // threads cooperating on one row
  std::string strategy;
  bool failedFlag = false;
  /// eval's results by (tensor, index values): an element computed again at
  /// the same index values (e.g. a row element read by two reductions and
  /// the output) is reused where it dominates the insertion point.
  std::map<std::vector<const void *>, Value> memo;
  /// Persistent rows: the innermost index value of each (slot, lane) -> the
  /// slot's first index value (a multiple of vecWidth) and the lane.
  DenseMap<Value, std::pair<Value, int64_t>> laneOf;
  int64_t vecWidth = 1;
  bool vecLoads = false; // vector loads of kernel inputs at lane indices

  Codegen(func::FuncOp kfn, gpu::GPUFuncOp gfn, int64_t numSMs)
      : kfn(kfn), gfn(gfn), b(gfn.getContext()), loc(kfn.getLoc()),
        numSMs(numSMs) {}

  InFlightDiagnostic error(Operation *op, const Twine &msg) {
    failedFlag = true;
    return op->emitError("mlircap-gpu-codegen: ") << msg;
  }

  Value cIdx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

  /// Row-major linear index; a single index is returned as is (so that
  /// `memo` and the lane indices of persistent rows see through 1-D groups).
  /// Unit dims add nothing (their index is 0): (row, 0) over (rows, 1) is row.
  Value linearize(ArrayRef<Value> allIdx, ArrayRef<int64_t> allShape) {
    SmallVector<Value> idx;
    SmallVector<int64_t> shape;
    for (auto [i, s] : llvm::zip(allIdx, allShape))
      if (s != 1) {
        idx.push_back(i);
        shape.push_back(s);
      }
    if (idx.empty())
      return cIdx(0);
    if (idx.size() == 1)
      return idx.front();
    // The same index computed again (e.g. a reshaped input read by every
    // lane of a chunk) is the same value: hash-consed through `memo`.
    std::vector<const void *> key{reinterpret_cast<const void *>(uintptr_t(1))};
    for (auto [i, s] : llvm::zip(idx, shape)) {
      key.push_back(i.getAsOpaquePointer());
      key.push_back(reinterpret_cast<const void *>(uintptr_t(s)));
    }
    auto it = memo.find(key);
    if (it != memo.end() && dominatesInsertion(it->second))
      return it->second;
    // Indices that delinearize split off one value are joined back without
    // the division chain: (X / s % e) * s + X % s is X % (e * s), and
    // (X / s) * s + X % s is X. A term is `src` or `src % mod`; an element's
    // address from its own loop index is then the index itself, and an NCHW
    // column's (h, w) from the reduction index r is r % (H * W).
    auto constOf = [](Value v) -> std::optional<int64_t> {
      APInt c;
      if (matchPattern(v, m_ConstantInt(&c)))
        return c.getSExtValue();
      return std::nullopt;
    };
    auto term = [&](Value v, int64_t extent) -> std::pair<Value, int64_t> {
      if (auto rem = v.getDefiningOp<arith::RemUIOp>())
        if (constOf(rem.getRhs()) == extent)
          return {rem.getLhs(), extent};
      return {v, 0};
    };
    auto materialize = [&](std::pair<Value, int64_t> t) -> Value {
      return t.second ? arith::RemUIOp::create(b, loc, t.first, cIdx(t.second)).getResult() : t.first;
    };
    auto acc = term(idx.front(), shape.front());
    int64_t accExtent = shape.front();
    Value lin; // the materialized part before `acc`, scaled as it goes
    auto append = [&] {
      Value a = materialize(acc);
      lin = lin ? arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, lin, cIdx(accExtent)), a).getResult()
                : a;
    };
    for (auto [i, s] : llvm::zip(ArrayRef<Value>(idx).drop_front(), ArrayRef<int64_t>(shape).drop_front())) {
      auto next = term(i, s);
      auto div = acc.first.getDefiningOp<arith::DivUIOp>();
      if (next.second == s && div && div.getLhs() == next.first && constOf(div.getRhs()) == s &&
          (acc.second == 0 || acc.second == accExtent)) {
        acc = {next.first, acc.second ? accExtent * s : 0};
        accExtent *= s;
        continue;
      }
      append();
      acc = next;
      accExtent = s;
    }
    append();
    memo[key] = lin;
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

  /// The element of `tensor` at `idx` (memoized, see `memo`).
  Value eval(Value tensor, ArrayRef<Value> idx);
  Value evalUncached(Value tensor, ArrayRef<Value> idx);
  /// True if `v` is defined in the insertion block or one enclosing it.
  bool dominatesInsertion(Value v);
  /// Element `idx` of kernel input `arg` as a lane of a vector load, when
  /// vecLoads is on and idx's innermost index is a lane index (laneOf).
  Value vectorLane(BlockArgument arg, ArrayRef<Value> idx);

  /// Loop ivs of `g` that produce element `idx` of result `res`.
  std::optional<SmallVector<Value>> invertOutput(linalg::GenericOp g,
                                                 unsigned res,
                                                 ArrayRef<Value> idx);

  /// Clones the body of `g` at loop ivs `ivs` with the accumulators `outs`
  /// (one per init) and returns the yielded values.
  SmallVector<Value> evalBody(linalg::GenericOp g, ArrayRef<Value> ivs,
                              ArrayRef<Value> outs,
                              const DenseMap<unsigned, Value> &given = {});

  Value evalGeneric(linalg::GenericOp g, unsigned res, ArrayRef<Value> idx);

  static bool body_uses(linalg::GenericOp g, OpOperand &operand);

  void store(unsigned out, Value v, ArrayRef<Value> idx);

  //===--------------------------------------------------------------------===//
  // Shuffles and block reductions.
  //===--------------------------------------------------------------------===//

  Value shuffleXor(Value v, int64_t offset);

  Value combine(Operation *comb, Value a, Value c);

  Value warpReduce(Value v, Operation *comb);

  /// All threads of the block get the combination of every thread's `v`.
  Value blockReduce(Value v, Operation *comb, TypedAttr identity, Value tid);

  /// Workgroup (shared) memory for `n` values of type `t`: bools are bytes there as
  /// in global memory (LLVM cannot store i1); sharedStore/sharedLoad convert.
  Value sharedBuffer(int64_t n, Type t);
  void sharedStore(Value v, Value mem, Value i);
  Value sharedLoad(Value mem, Value i, Type t);

  //===--------------------------------------------------------------------===//
  // Strategies.
  //===--------------------------------------------------------------------===//

  /// Grid-stride loop over `n` elements; `body(i)`.
  void gridStride(int64_t n, Value gtid, function_ref<void(Value)> body);

  SmallVector<std::pair<Value, unsigned>> outputs();

  static bool vecType(Type t);

  /// Alignment of a `width`-lane access at an offset that is a multiple of
  /// `width` elements from a 16-byte aligned base.
  static unsigned vecAlign(int64_t width, Type t);

  /// The kernel computes one elementwise generic with an identity output map
  /// whose innermost dim is a multiple of the vector width: each thread then
  /// computes `width` consecutive elements and stores them with one 16-byte
  /// vector store (4 lanes of f32/i32, 8 of bf16/f16). Returns the width, 0
  /// when the kernel is not vectorizable.
  int64_t vectorizable(int64_t n, linalg::GenericOp &out);

  /// True (i1) when every kernel input and output pointer is 16-byte aligned:
  /// the run-time condition of the vector versions.
  Value buffersAligned16();

  /// `lanes` stored to output `out` at linear index `at` (a multiple of their
  /// count) with one aligned vector.store.
  void storeLanes(unsigned out, ArrayRef<Value> lanes, Value at);

  void pointwise(Value tid, Value bid, bool allowVector);

  void rowKernel(Value tid, Value bid);
  /// The row kernel with the row in registers: each thread owns `slots`
  /// chunks of `vecWidth` consecutive elements of its row (chunk c at
  /// elements [c*vecWidth, (c+1)*vecWidth), chunks dealt round-robin to the
  /// row's lanes); every reduction and output reads them from `memo`.
  void persistentRow(Value tid, Value row, Value valid, ArrayRef<int64_t> loops,
                     unsigned np, int64_t slots);
  /// The row kernel with a strided loop per reduction and output.
  void loopedRow(Value tid, Value row, Value valid, int64_t rows);
  /// An scf.if on `cond` (none when null) whose body the builder is in.
  std::optional<OpBuilder::InsertionGuard> guardIf(Value cond);
  /// a && c, either may be null (true).
  Value andIf(Value a, Value c);
  /// Row reduction `g` after each thread's partial `acc`: combined across the
  /// row's lanes and with the init, materialized for the row's later ops,
  /// stored by lane 0 when it is a kernel result. False on failure.
  bool finishRowReduction(linalg::GenericOp g, Value acc, Value tid, Value valid,
                          ArrayRef<Value> rowIvs);
  /// Result `r` of `g` (kernel output `out`) written by a strided loop over
  /// the row's part of it. False on failure.
  bool rowOutputLoop(linalg::GenericOp g, Value r, unsigned out, Value tid, Value row,
                     Value valid, int64_t rows);

  /// A reduction kernel that splits the reduction loop across threads: one
  /// single-result reduction R with a recognized combiner and a long
  /// reduction, and outputs that are R or elementwise ops reading R at the
  /// same element (identity maps over R's shape).
  linalg::GenericOp columnReduction();

  /// Several output elements per block, each reduction split across the
  /// block's slices (adjacent threads on adjacent reduction elements when the
  /// innermost loop reduces, on adjacent outputs otherwise; blocks sized so
  /// that few outputs still fill the GPU); partials combined by a tree in
  /// workgroup memory.
  void columnKernel(linalg::GenericOp red, Value tid, Value bid);

  LogicalResult run(StringRef kind);
};

} // namespace mlir::mlircap::gpu_emit

#endif // MLIRCAP_LIB_TRANSFORMS_GPUKERNELEMITTER_H
