//===- TrigFunctions.cpp - sin/cos of f32 as vectorizable calls (CPU) ----===//
//
// Every scalar f32 math.sin / math.cos becomes a call to a function of this
// module that LLVM's loop vectorizer replaces with a vector variant (LLVM's
// "vector-function-abi-variant" attribute, as it maps sinf to libmvec or
// SLEEF). The vector variants branch once per vector: arguments all below
// 6400 (kSinCosShortLimit) take the short Cody-Waite reduction, any other vector the exact
// Payne-Hanek path too. Inline and branch-free (mlircap-math-approx), every
// element paid for both. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/StringExtras.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPTRIGFUNCTIONS
#include "mlircap/Passes.h.inc"

namespace {
/// The vector widths a variant is made for: 128, 256 and 512-bit vectors.
constexpr int64_t kWidths[] = {4, 8, 16};

/// Body of `fn` (one f32 or vector<Nxf32> argument and result): the short
/// reduction when every element is below kSinCosShortLimit in magnitude (NaN and inf are
/// not), else the full one.
void buildBody(func::FuncOp fn, bool isCos) {
  OpBuilder b = OpBuilder::atBlockBegin(fn.addEntryBlock());
  Location loc = fn.getLoc();
  Value x = fn.getArgument(0);
  Type type = x.getType();
  auto vt = dyn_cast<VectorType>(type);
  Value limit = arith::ConstantOp::create(
      b, loc,
      vt ? (TypedAttr)DenseElementsAttr::get(vt, b.getF32FloatAttr(kSinCosShortLimit))
         : (TypedAttr)b.getF32FloatAttr(kSinCosShortLimit));
  Value small = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                                      math::AbsFOp::create(b, loc, x), limit);
  if (vt)
    small = vector::ReductionOp::create(b, loc, vector::CombiningKind::AND, small);
  auto ifOp = scf::IfOp::create(
      b, loc, small,
      [&](OpBuilder &t, Location l) {
        scf::YieldOp::create(t, l, emitSinCosF32(t, l, x, isCos, /*largeArgs=*/false));
      },
      [&](OpBuilder &e, Location l) {
        scf::YieldOp::create(e, l, emitSinCosF32(e, l, x, isCos, /*largeArgs=*/true));
      });
  func::ReturnOp::create(b, loc, ifOp.getResult(0));
}

/// The scalar function `name` for sin or cos, with its vector variants,
/// created in `module` unless there already.
func::FuncOp getOrCreate(ModuleOp module, StringRef name, bool isCos) {
  if (auto fn = module.lookupSymbol<func::FuncOp>(name))
    return fn;
  MLIRContext *ctx = module.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type();
  SmallVector<std::string> mappings;
  for (int64_t n : kWidths) {
    std::string vname = (name + "_v" + Twine(n)).str();
    auto vt = VectorType::get({n}, f32);
    auto vfn = func::FuncOp::create(b, loc, vname, b.getFunctionType({vt}, {vt}));
    // Public (no symbol visibility): a private function nothing calls yet
    // would be deleted before the vectorizer could call it.
    vfn->setAttr("passthrough", b.getArrayAttr({b.getStringAttr("noinline")}));
    buildBody(vfn, isCos);
    mappings.push_back(("_ZGV_LLVM_N" + Twine(n) + "v_" + name + "(" + vname + ")").str());
  }
  auto fn = func::FuncOp::create(b, loc, name, b.getFunctionType({f32}, {f32}));
  // noinline: inlined before the vectorizer runs, its branch would be
  // if-converted and both reductions computed for every element again.
  fn->setAttr("passthrough",
              b.getArrayAttr({b.getStringAttr("noinline"),
                              b.getArrayAttr({b.getStringAttr("vector-function-abi-variant"),
                                              b.getStringAttr(llvm::join(mappings, ","))})}));
  buildBody(fn, isCos);
  (void)ctx;
  return fn;
}

struct TrigFunctions : impl::MlircapTrigFunctionsBase<TrigFunctions> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isa<math::SinOp, math::CosOp>(op) && op->getResult(0).getType().isF32())
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      bool isCos = isa<math::CosOp>(op);
      func::FuncOp fn = getOrCreate(module, isCos ? "__mlircap_cosf" : "__mlircap_sinf", isCos);
      OpBuilder b(op);
      auto call = func::CallOp::create(b, op->getLoc(), fn, op->getOperand(0));
      op->getResult(0).replaceAllUsesWith(call.getResult(0));
      op->erase();
    }
  }
};
} // namespace
} // namespace mlir::mlircap
