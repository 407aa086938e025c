//===- MatmulBias.cpp - library matmuls add their bias as addmm ----------===//
//
// torch-mlir lowers aten.linear / aten.addmm as a matmul from zero followed
// by an elementwise add of the bias along the result's columns, rounded once
// (bf16: an f32 matmul result, + bias, truncf). Under the module attribute
// mlircap.matmul_bias (the launch-plan compilers) the bias becomes the
// matmul's init, which the runtime passes to torch.addmm: eager's own call,
// whose library adds it in its epilogue. See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPMATMULBIAS
#include "mlircap/Passes.h.inc"

namespace {
/// The 1-D bias operand `bias` of an add to an (M, N) result adds along the
/// columns, read through `map`: a 1-D tensor indexed by the column loop, or an
/// (M, N) broadcast of one (channelBiasOf). Null otherwise.
Value columnBias(Value bias, AffineMap map) {
  auto type = dyn_cast<RankedTensorType>(bias.getType());
  if (!type || !type.hasStaticShape())
    return {};
  if (type.getRank() == 1)
    return map == AffineMap::get(2, 0, {getAffineDimExpr(1, map.getContext())}, map.getContext())
               ? bias
               : Value();
  return map.isIdentity() ? channelBiasOf(bias, 1, /*rank=*/2) : Value();
}

/// `g` adds its two inputs and nothing else (arith.addf of the two block
/// arguments, its init unread).
bool isPlainAdd(linalg::GenericOp g) {
  if (g.getNumDpsInputs() != 2 || g.getNumDpsInits() != 1 || g.getNumLoops() != 2 ||
      g.getNumParallelLoops() != 2)
    return false;
  Block &body = g.getRegion().front();
  if (body.getOperations().size() != 2)
    return false;
  auto add = dyn_cast<arith::AddFOp>(body.front());
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (!add || yield.getValues().size() != 1 || yield.getValues()[0] != add.getResult())
    return false;
  Value a = body.getArgument(0), b = body.getArgument(1);
  return (add.getLhs() == a && add.getRhs() == b) || (add.getLhs() == b && add.getRhs() == a);
}

/// Gives `mm` (a 2-D library matmul from zero whose one user adds a column
/// bias) that bias as its init, when the sum is all that is used: in the
/// result's type when its operands have it, or narrow (bf16/f16 operands, a
/// bias extended from that type, the sum only rounded back to it: eager's
/// bf16 addmm rounds once, as this does), extended back for the users.
void attachBias(linalg::MatmulOp mm) {
  if (!isLibraryMatmul2D(mm) || !mm.hasPureTensorSemantics() || !mm->hasOneUse())
    return;
  auto type = dyn_cast<RankedTensorType>(mm->getResult(0).getType());
  if (!type || type.getRank() != 2 || !type.hasStaticShape() ||
      !isa<FloatType>(type.getElementType()))
    return;
  auto fill = mm.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
  if (!fill || !matchPattern(fill.getInputs()[0], m_AnyZeroFloat()))
    return;
  OpOperand &use = *mm->getUses().begin();
  auto add = dyn_cast<linalg::GenericOp>(use.getOwner());
  if (!add || !add.isDpsInput(&use) || !isPlainAdd(add) ||
      add->getResult(0).getType() != type ||
      !add.getMatchingIndexingMap(&use).isIdentity())
    return;
  OpOperand *other = add.getDpsInputOperand(1 - use.getOperandNumber());
  Value bias = columnBias(other->get(), add.getMatchingIndexingMap(other));
  if (!bias || getElementTypeOrSelf(bias.getType()) != type.getElementType())
    return;
  Type inElem = getElementTypeOrSelf(mm.getDpsInputs()[0].getType());
  if (getElementTypeOrSelf(mm.getDpsInputs()[1].getType()) != inElem)
    return;
  RankedTensorType resultType = type;
  if (inElem != type.getElementType()) {
    // narrow operands: the bias must be the same narrow values extended, and
    // the sum used only rounded to that type
    Value narrowBias = narrowSource(bias);
    if (!(inElem.isBF16() || inElem.isF16()) || !type.getElementType().isF32() || !narrowBias ||
        getElementTypeOrSelf(narrowBias.getType()) != inElem ||
        !onlyRoundedTo(add->getResult(0), inElem))
      return;
    bias = narrowBias;
    resultType = type.clone(inElem);
  }
  // after the add: the bias (maybe computed after the matmul) dominates it
  OpBuilder b(add);
  Location loc = mm.getLoc();
  Value init = buildConvBiasInit(b, loc, bias, resultType, 1, kMatmulBiasAttr);
  Value result = linalg::MatmulOp::create(b, loc, TypeRange{resultType}, mm.getDpsInputs(),
                                          ValueRange{init}, opAttrs(mm))
                     ->getResult(0);
  if (resultType != type) {
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    SmallVector<AffineMap> maps(2, b.getMultiDimIdentityMap(2));
    SmallVector<utils::IteratorType> iters(2, utils::IteratorType::parallel);
    result = linalg::GenericOp::create(
                 b, loc, TypeRange{type}, ValueRange{result}, ValueRange{empty}, maps, iters,
                 [&](OpBuilder &nb, Location l, ValueRange args) {
                   linalg::YieldOp::create(
                       nb, l, arith::ExtFOp::create(nb, l, type.getElementType(), args[0]).getResult());
                 })
                 ->getResult(0);
  }
  Operation *biasDef = other->get().getDefiningOp();
  add->getResult(0).replaceAllUsesWith(result);
  add->erase();
  mm->erase();
  if (biasDef && isOpTriviallyDead(biasDef))
    biasDef->erase();
}

struct MatmulBias : impl::MlircapMatmulBiasBase<MatmulBias> {
  void runOnOperation() override {
    auto module = getOperation()->getParentOfType<ModuleOp>();
    if (!module || !module->hasAttr(kMatmulBiasModuleAttr))
      return;
    SmallVector<linalg::MatmulOp> mms;
    getOperation().walk([&](linalg::MatmulOp mm) { mms.push_back(mm); });
    for (linalg::MatmulOp mm : mms)
      attachBias(mm);
  }
};
} // namespace
} // namespace mlir::mlircap
