//===- LibraryInit.cpp - library ops accumulate into zero ----------------===//
//
// The runtime executes library ops (matmul, batch_matmul, conv) as
// `out = op(ins)`: it never reads the init. An init that is not a fill with
// zero is split off into an elementwise add after the op, which elementwise
// fusion then merges into the op's epilogue kernel. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/IR/Matchers.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPLIBRARYINIT
#include "mlircap/Passes.h.inc"

namespace {
bool isZeroFill(Value init) {
  auto fill = init.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return false;
  Value v = fill.getInputs()[0];
  return matchPattern(v, m_AnyZeroFloat()) || matchPattern(v, m_Zero());
}

struct LibraryInit : impl::MlircapLibraryInitBase<LibraryInit> {
  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> todo;
    auto module = getOperation()->getParentOfType<ModuleOp>();
    bool convBias = module && module->hasAttr(kConvBiasModuleAttr);
    getOperation().walk([&](linalg::LinalgOp op) {
      if (isLibraryOp(op) && op.getNumDpsInits() == 1 &&
          !isZeroFill(op.getDpsInitOperand(0)->get()))
        todo.push_back(op);
    });
    for (linalg::LinalgOp op : todo) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value init = op.getDpsInitOperand(0)->get();
      auto type = dyn_cast<RankedTensorType>(init.getType());
      if (!type)
        continue;
      if (convBias && isLibraryConv(op) && hasStaticShapes(op)) {
        unsigned channel = convChannelDim(op);
        if (Value bias = channelBiasOf(init, channel)) {
          auto g = init.getDefiningOp<linalg::GenericOp>();
          if (!g || !g->hasAttr(kConvBiasAttr) || !g->hasOneUse())
            op.getDpsInitOperand(0)->set(buildConvBiasInit(b, loc, bias, type, channel));
          continue;
        }
      }
      Type et = type.getElementType();
      Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(et));
      // Dynamic dims take their sizes from the original init (tensor.dim).
      Value empty = tensor::EmptyOp::create(
          b, loc, tensor::getMixedSizes(b, loc, init), et);
      Value fill = linalg::FillOp::create(b, loc, zero, empty).getResult(0);
      op.getDpsInitOperand(0)->set(fill);
      b.setInsertionPointAfter(op);
      Value res = op->getResult(0);
      unsigned rank = type.getRank();
      SmallVector<AffineMap> maps(3, b.getMultiDimIdentityMap(rank));
      SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
      auto add = linalg::GenericOp::create(
          b, loc, TypeRange{type}, ValueRange{res, init}, ValueRange{empty},
          maps, iters, [&](OpBuilder &nb, Location l, ValueRange args) {
            Value s = isa<FloatType>(et)
                          ? arith::AddFOp::create(nb, l, args[0], args[1]).getResult()
                          : arith::AddIOp::create(nb, l, args[0], args[1]).getResult();
            linalg::YieldOp::create(nb, l, s);
          });
      res.replaceAllUsesExcept(add.getResult(0), add);
    }
  }
};
} // namespace
} // namespace mlir::mlircap
