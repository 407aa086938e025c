//===- KernelNoAlias.cpp - kernel buffers do not alias (CPU) --------------===//
//
// The buffers a CPU launch-plan kernel reads and writes are distinct
// allocations: each result is a buffer of its own, inputs are only read.
// LLVM cannot know that: a memref argument lowers to a descriptor whose
// data pointer may alias any other, so a load of a per-channel parameter
// (BatchNorm's scale) stays inside the element loop next to the store of the
// result, with the sqrt and division computed from it, and loops vectorize
// only behind runtime alias checks, if at all.
//
// mlircap-mark-noalias (before the LLVM lowering) records, on each kernel
// function (`mlircap.kernel`) and each function marked `mlircap.noalias`
// (outlined parallel bodies), the positions that the aligned data pointers
// of its memref arguments take in the lowered signature (allocated pointer,
// aligned pointer, offset, sizes, strides per ranked memref). The upstream
// lowering drops `llvm.noalias` on memref arguments (it expands them to
// several arguments). mlircap-apply-noalias (after the lowering) puts
// `llvm.noalias` on those pointers. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPMARKNOALIAS
#define GEN_PASS_DEF_MLIRCAPAPPLYNOALIAS
#include "mlircap/Passes.h.inc"

namespace {
constexpr llvm::StringLiteral kSlotsAttr = "mlircap.noalias_slots";
constexpr llvm::StringLiteral kArgAttr = "mlircap.noalias";

struct MarkNoAlias : impl::MlircapMarkNoAliasBase<MarkNoAlias> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal() || !(func->hasAttr("mlircap.kernel") || func->hasAttr(kArgAttr)))
        continue;
      // For a kernel every memref argument is a distinct buffer; for an
      // outlined body only those arguments carrying `mlircap.noalias`.
      bool all = func->hasAttr("mlircap.kernel");
      // Slot 0: the lowered argument count (a wrapper with another signature
      // that inherits the attribute is left alone); then the aligned pointers.
      SmallVector<int64_t> slots{0};
      int64_t slot = 0;
      for (auto [i, t] : llvm::enumerate(func.getArgumentTypes())) {
        if (auto m = dyn_cast<MemRefType>(t)) {
          if (all || func.getArgAttr(i, kArgAttr))
            slots.push_back(slot + 1);
          slot += 3 + 2 * m.getRank();
        } else if (isa<UnrankedMemRefType>(t)) {
          slot += 2;
        } else {
          slot += 1;
        }
        func.removeArgAttr(i, kArgAttr);
      }
      slots[0] = slot;
      func->removeAttr(kArgAttr);
      if (slots.size() > 1)
        func->setAttr(kSlotsAttr, DenseI64ArrayAttr::get(func.getContext(), slots));
    }
  }
};

struct ApplyNoAlias : impl::MlircapApplyNoAliasBase<ApplyNoAlias> {
  void runOnOperation() override {
    getOperation().walk([&](LLVM::LLVMFuncOp func) {
      auto slots = func->getAttrOfType<DenseI64ArrayAttr>(kSlotsAttr);
      if (!slots)
        return;
      func->removeAttr(kSlotsAttr);
      ArrayRef<int64_t> s = slots.asArrayRef();
      unsigned n = func.getNumArguments();
      if (func.isExternal() || s.empty() || s[0] != static_cast<int64_t>(n))
        return;
      for (int64_t i : s.drop_front())
        if (i >= 0 && i < static_cast<int64_t>(n) &&
            isa<LLVM::LLVMPointerType>(func.getArgumentTypes()[i]))
          func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), UnitAttr::get(&getContext()));
    });
  }
};
} // namespace
} // namespace mlir::mlircap
