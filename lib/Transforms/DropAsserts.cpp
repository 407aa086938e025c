//===- DropAsserts.cpp - remove runtime checks before GPU compilation -----===//
//
// torch-mlir guards some ops with cf.assert (index bounds, non-empty
// tensors), often inside a linalg.generic with no results that only checks.
// A failed assert in a kernel traps and poisons the CUDA context, so the GPU
// path drops them (the inputs were already checked by torch when the model
// was exported with these shapes). See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPDROPASSERTS
#include "mlircap/Passes.h.inc"

namespace {
struct DropAsserts : impl::MlircapDropAssertsBase<DropAsserts> {
  void runOnOperation() override {
    SmallVector<Operation *> asserts;
    getOperation().walk([&](cf::AssertOp op) { asserts.push_back(op); });
    for (Operation *op : asserts)
      op->erase();
    // Generics that computed only the checks are dead now.
    SmallVector<linalg::GenericOp> dead;
    getOperation().walk([&](linalg::GenericOp op) {
      if (op->getNumResults() == 0 && op.hasPureTensorSemantics() &&
          llvm::all_of(op.getRegion().front().without_terminator(),
                       [](Operation &o) { return isPure(&o); }))
        dead.push_back(op);
    });
    for (linalg::GenericOp op : dead)
      op->erase();
  }
};
} // namespace
} // namespace mlir::mlircap
