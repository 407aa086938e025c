//===- EmitCInterface.cpp - mark public functions for C wrappers ---------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPEMITCINTERFACE
#include "mlircap/Passes.h.inc"

namespace {
struct EmitCInterface
    : impl::MlircapEmitCInterfaceBase<EmitCInterface> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (func.isPublic() && !func.isExternal())
        func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                      UnitAttr::get(&getContext()));
  }
};
} // namespace
} // namespace mlir::mlircap
