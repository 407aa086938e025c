//===- WidenBoolMemrefs.cpp - i1 buffers as bytes (CPU pipeline) ----------===//
//
// finalize-memref-to-llvm cannot store to memref<...xi1> (sub-byte element
// types assert), and torch stores bools as one byte anyway. After
// bufferization and linalg-to-loops, every memref of i1 becomes a memref of
// i8; loads truncate, stores zero-extend. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPWIDENBOOLMEMREFS
#include "mlircap/Passes.h.inc"

namespace {
Type widen(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  if (!m || !m.getElementType().isInteger(1))
    return t;
  return MemRefType::get(m.getShape(), IntegerType::get(t.getContext(), 8),
                         m.getLayout(), m.getMemorySpace());
}

struct WidenBoolMemrefs : impl::MlircapWidenBoolMemrefsBase<WidenBoolMemrefs> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Function signatures and block arguments.
    module.walk([&](func::FuncOp f) {
      SmallVector<Type> ins, outs;
      for (Type t : f.getArgumentTypes())
        ins.push_back(widen(t));
      for (Type t : f.getResultTypes())
        outs.push_back(widen(t));
      f.setType(FunctionType::get(f.getContext(), ins, outs));
    });
    module.walk([&](Block *block) {
      for (BlockArgument a : block->getArguments())
        a.setType(widen(a.getType()));
    });
    // Results of every op (alloc, views, casts, calls...).
    module.walk([&](Operation *op) {
      for (Value r : op->getResults())
        r.setType(widen(r.getType()));
    });
    // Globals holding bool constants.
    module.walk([&](memref::GlobalOp g) {
      MemRefType t = g.getType();
      if (!t.getElementType().isInteger(1))
        return;
      g.setType(cast<MemRefType>(widen(t)));
      if (auto init = dyn_cast_or_null<DenseElementsAttr>(g.getInitialValueAttr())) {
        auto i8 = IntegerType::get(g.getContext(), 8);
        auto mapped = init.mapValues(i8, [](const APInt &v) { return v.zext(8); });
        g.setInitialValueAttr(mapped);
      }
    });
    // Element accesses convert between i1 and i8.
    SmallVector<memref::LoadOp> loads;
    SmallVector<memref::StoreOp> stores;
    module.walk([&](memref::LoadOp l) { loads.push_back(l); });
    module.walk([&](memref::StoreOp st) { stores.push_back(st); });
    for (memref::StoreOp st : stores) {
      if (!st.getValue().getType().isInteger(1) ||
          !st.getMemRefType().getElementType().isInteger(8))
        continue;
      OpBuilder b(st);
      Value v = arith::ExtUIOp::create(b, st.getLoc(), b.getI8Type(), st.getValue());
      st.getValueMutable().assign(v);
    }
    for (memref::LoadOp l : loads) {
      if (!l.getResult().getType().isInteger(1) ||
          !l.getMemRefType().getElementType().isInteger(8))
        continue;
      l.getResult().setType(IntegerType::get(l.getContext(), 8));
      OpBuilder b(l);
      b.setInsertionPointAfter(l);
      auto t = arith::TruncIOp::create(b, l.getLoc(), b.getI1Type(), l.getResult());
      l.getResult().replaceAllUsesExcept(t, t);
    }
  }
};
} // namespace
} // namespace mlir::mlircap
