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
//   row        lanes of a block or warp per row; gpu.shuffle xor butterfly
//              within warps, shared memory across warps; later ops of the row
//              read the reduced values from registers. Rows of up to 32
//              elements a thread are held in registers ("_regs"): each thread
//              owns chunks of 8 (4) consecutive elements, read once with
//              16-byte vector loads ("_vec8"/"_vec4", pointers checked aligned
//              at run time) and reused by every reduction and output of the
//              row (memoized eval). Longer rows: a strided loop per reduction.
//   reduction  (column, windowed, multi-result reductions) one thread per
//              output element with a serial scf.for over the reduction loops.
//
// The emitter (`Codegen`, one kernel at a time) is split by strategy across
// GpuEmit*.cpp; GpuKernelEmitter.h lists the parts. This file chooses the
// strategy and runs the pass.
//
//===----------------------------------------------------------------------===//
#include "GpuKernelEmitter.h"
#include "mlircap/Passes.h"
#include "mlir/Dialect/DLTI/DLTI.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPGPUCODEGEN
#include "mlircap/Passes.h.inc"

namespace gpu_emit {
LogicalResult Codegen::run(StringRef kind) {
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
} // namespace gpu_emit

namespace {
using gpu_emit::Codegen;

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
      if (!cg.gridStrided)
        gfn.setKnownGridSizeAttr(gb.getDenseI32ArrayAttr({(int32_t)cg.grid, 1, 1}));
      SmallVector<NamedAttribute> entries{
          gb.getNamedAttr("grid", gb.getDenseI64ArrayAttr({cg.grid, 1, 1})),
          gb.getNamedAttr("block", gb.getDenseI64ArrayAttr({cg.block, 1, 1})),
          gb.getNamedAttr("smem", gb.getI64IntegerAttr(0)),
          gb.getNamedAttr("strategy", gb.getStringAttr(cg.strategy)),
      };
      if (cg.gridStrided) // `grid` is an upper bound (see Codegen::gridStrided)
        entries.push_back(gb.getNamedAttr("grid_stride", gb.getUnitAttr()));
      auto launch = gb.getDictionaryAttr(entries);
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
