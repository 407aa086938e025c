//===- WidenBoolMemrefs.cpp - store booleans as bytes ---------------------===//
//
// LLVM 22's memref-to-LLVM lowering asserts (aborts the process) on a store to
// memref<...xi1>. torch stores bool tensors one byte per element, so mlircap
// represents every i1 memref as i8 memory: loads truncate, stores extend.
// See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPWIDENBOOLMEMREFS
#include "mlircap/Passes.h.inc"

namespace {
bool isBool(Type t) { return t.isInteger(1); }

/// memref<...xi1> -> memref<...xi8> (same shape, layout, memory space).
Type widen(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  if (!m || !isBool(m.getElementType()))
    return t;
  return MemRefType::get(m.getShape(), IntegerType::get(t.getContext(), 8), m.getLayout(),
                         m.getMemorySpace());
}

struct WidenBoolMemrefs : impl::MlircapWidenBoolMemrefsBase<WidenBoolMemrefs> {
  void runOnOperation() override {
    Operation *root = getOperation();
    // Function signatures and block arguments.
    root->walk([](FunctionOpInterface fn) {
      // Only builtin function types carry memrefs (func.func, gpu.func);
      // llvm.func and other function-like ops keep their own type.
      if (!isa<FunctionType>(fn.getFunctionType()))
        return;
      auto widenAll = [](ArrayRef<Type> ts) {
        SmallVector<Type> out;
        for (Type t : ts)
          out.push_back(widen(t));
        return out;
      };
      SmallVector<Type> ins = widenAll(fn.getArgumentTypes());
      SmallVector<Type> outs = widenAll(fn.getResultTypes());
      fn.setType(FunctionType::get(fn->getContext(), ins, outs));
    });
    root->walk([](Block *block) {
      for (BlockArgument arg : block->getArguments())
        arg.setType(widen(arg.getType()));
    });
    // Globals holding bool data keep their bytes: dense<i1> -> dense<i8>.
    root->walk([](memref::GlobalOp global) {
      MemRefType old = global.getType();
      if (!isBool(old.getElementType()))
        return;
      global.setType(cast<MemRefType>(widen(old)));
      if (auto init = dyn_cast_or_null<DenseElementsAttr>(global.getInitialValueAttr())) {
        auto type = RankedTensorType::get(old.getShape(), IntegerType::get(global.getContext(), 8));
        global.setInitialValueAttr(init.mapValues(type.getElementType(), [](const APInt &v) {
          return v.zext(8);
        }));
      }
    });
    // Every other memref value changes type in place; loads and stores convert.
    SmallVector<memref::LoadOp> loads;
    SmallVector<memref::StoreOp> stores;
    root->walk([&](Operation *op) {
      for (OpResult r : op->getResults())
        r.setType(widen(r.getType()));
      if (auto load = dyn_cast<memref::LoadOp>(op); load && isBool(load.getType()))
        loads.push_back(load);
      if (auto store = dyn_cast<memref::StoreOp>(op); store && isBool(store.getValue().getType()))
        stores.push_back(store);
    });
    Type i8 = IntegerType::get(&getContext(), 8);
    Type i1 = IntegerType::get(&getContext(), 1);
    for (memref::LoadOp load : loads) {
      OpBuilder b(load->getContext());
      b.setInsertionPointAfter(load);
      load.getResult().setType(i8);
      auto trunc = arith::TruncIOp::create(b, load.getLoc(), i1, load.getResult());
      load.getResult().replaceAllUsesExcept(trunc, trunc);
    }
    for (memref::StoreOp store : stores) {
      OpBuilder b(store);
      auto ext = arith::ExtUIOp::create(b, store.getLoc(), i8, store.getValue());
      store.getValueMutable().assign(ext);
    }
  }
};
} // namespace
} // namespace mlir::mlircap
