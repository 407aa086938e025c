//===- Bf16MemoryAsI16.cpp - bf16 memory moved as i16 (CPU) ---------------===//
//
// LLVM 22.1.8's x86 backend asserts ("Unexpected illegal type!" in
// LegalizeDAG, the compile worker died of SIGABRT) on some vectors of bf16
// the vectorizers make from bf16 loads and stores: a bf16 transpose
// (`x.permute(2, 0, 1).contiguous()` of a 5x5x5 tensor, which a sort along
// dim 0 lowers to) never compiled. mlircap computes no bf16 arithmetic in
// LLVM (mlircap-emulate-low-precision: f32 code, conversions as integer
// code), so bf16 values only move: every bf16 load, store and select becomes
// the same i16 operation, with bitcasts where a bf16 value is still read or
// made; a bitcast pair that cancels is folded. An f32 -> bf16 fptrunc left
// in the IR becomes the integer rounding. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPBF16MEMORYASI16
#include "mlircap/Passes.h.inc"

namespace {
/// i16 for bf16, vector<N x i16> for vector<N x bf16>, else null.
Type asInt(Type t) {
  Type i16 = IntegerType::get(t.getContext(), 16);
  if (t.isBF16())
    return i16;
  if (auto v = dyn_cast<VectorType>(t); v && v.getElementType().isBF16())
    return v.clone(i16);
  return nullptr;
}

/// `v` as type `to`: the source of a bitcast from `to`, else a new bitcast.
Value castTo(OpBuilder &b, Location loc, Value v, Type to) {
  if (auto cast = v.getDefiningOp<LLVM::BitcastOp>(); cast && cast.getArg().getType() == to)
    return cast.getArg();
  return LLVM::BitcastOp::create(b, loc, to, v);
}

/// A constant `value` of integer type `type` (a splat for a vector).
Value constant(OpBuilder &b, Location loc, Type type, int64_t value) {
  auto element = cast<IntegerType>(getElementTypeOrSelf(type));
  Attribute attr = IntegerAttr::get(element, value);
  if (auto v = dyn_cast<VectorType>(type))
    attr = SplatElementsAttr::get(v, attr);
  return LLVM::ConstantOp::create(b, loc, type, cast<TypedAttr>(attr));
}

/// `fptrunc x : f32 to bf16` as integer code, rounding to nearest even with
/// subnormals kept and NaN 0x7fc0, as torch's c10::BFloat16 (and the
/// emulation's arith.truncf expansion) round. x86's vcvtneps2bf16, which
/// the vectorizer picks for it once the result is stored as i16, flushes
/// subnormal inputs to zero.
Value roundToBf16Bits(OpBuilder &b, Location loc, Value x, Type bits16) {
  Type bits32 = b.getI32Type();
  if (auto v = dyn_cast<VectorType>(bits16))
    bits32 = v.clone(bits32);
  Value bits = LLVM::BitcastOp::create(b, loc, bits32, x);
  Value sixteen = constant(b, loc, bits32, 16);
  Value lsb = LLVM::AndOp::create(b, loc, LLVM::LShrOp::create(b, loc, bits, sixteen),
                                  constant(b, loc, bits32, 1));
  Value rounded = LLVM::AddOp::create(
      b, loc, bits, LLVM::AddOp::create(b, loc, lsb, constant(b, loc, bits32, 0x7fff)));
  Value high = LLVM::TruncOp::create(b, loc, bits16,
                                     LLVM::LShrOp::create(b, loc, rounded, sixteen));
  Value nan = LLVM::FCmpOp::create(b, loc, LLVM::FCmpPredicate::uno, x, x);
  return LLVM::SelectOp::create(b, loc, nan, constant(b, loc, bits16, 0x7fc0), high);
}

struct Bf16MemoryAsI16 : impl::MlircapBf16MemoryAsI16Base<Bf16MemoryAsI16> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<LLVM::LoadOp, LLVM::StoreOp, LLVM::SelectOp, LLVM::FPTruncOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      OpBuilder b(op);
      Location loc = op->getLoc();
      if (auto trunc = dyn_cast<LLVM::FPTruncOp>(op)) {
        Type to = asInt(trunc.getType());
        if (!to || !getElementTypeOrSelf(trunc.getArg().getType()).isF32())
          continue;
        Value back = LLVM::BitcastOp::create(b, loc, trunc.getType(),
                                             roundToBf16Bits(b, loc, trunc.getArg(), to));
        trunc.getResult().replaceAllUsesWith(back);
        trunc.erase();
      } else if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
        Type to = asInt(load.getType());
        if (!to)
          continue;
        Operation *copy = b.clone(*op);
        copy->getResult(0).setType(to);
        b.setInsertionPointAfter(copy);
        Value back = LLVM::BitcastOp::create(b, loc, load.getType(), copy->getResult(0));
        load.getResult().replaceAllUsesWith(back);
        load.erase();
      } else if (auto store = dyn_cast<LLVM::StoreOp>(op)) {
        Type to = asInt(store.getValue().getType());
        if (to)
          store.getValueMutable().assign(castTo(b, loc, store.getValue(), to));
      } else if (auto select = dyn_cast<LLVM::SelectOp>(op)) {
        Type to = asInt(select.getType());
        if (!to)
          continue;
        Value picked = LLVM::SelectOp::create(b, loc, select.getCondition(),
                                              castTo(b, loc, select.getTrueValue(), to),
                                              castTo(b, loc, select.getFalseValue(), to));
        Value back = LLVM::BitcastOp::create(b, loc, select.getType(), picked);
        select.getResult().replaceAllUsesWith(back);
        select.erase();
      }
    }
    // bitcast(bitcast(x)) back to x's type is x; unused bitcasts go
    SmallVector<LLVM::BitcastOp> casts;
    getOperation().walk([&](LLVM::BitcastOp cast) { casts.push_back(cast); });
    for (LLVM::BitcastOp cast : casts) {
      if (auto inner = cast.getArg().getDefiningOp<LLVM::BitcastOp>();
          inner && inner.getArg().getType() == cast.getType())
        cast.getResult().replaceAllUsesWith(inner.getArg());
    }
    for (LLVM::BitcastOp cast : llvm::reverse(casts))
      if (cast->use_empty())
        cast.erase();
  }
};
} // namespace
} // namespace mlir::mlircap
