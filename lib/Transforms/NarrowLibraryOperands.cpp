//===- NarrowLibraryOperands.cpp - feed library ops their narrow inputs --===//
//
// torch-mlir lowers a bf16/f16 matmul as extf(a), extf(b) -> f32 matmul.
// Executed literally, the library call would run in f32 (no tensor cores) on
// upcast copies. This pass lets the library op read the narrow tensors
// directly and accumulate into the wide result (cuBLAS accumulates bf16 in
// f32 anyway). See Passes.td.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPNARROWLIBRARYOPERANDS
#include "mlircap/Passes.h.inc"

namespace {
/// `op`'s inputs with each elementwise `extf` looked through; `changed` tells
/// whether any was.
SmallVector<Value> narrowInputs(Operation *op, bool &changed) {
  SmallVector<Value> inputs;
  changed = false;
  for (Value in : cast<DestinationStyleOpInterface>(op).getDpsInputs()) {
    Value src = narrowSource(in);
    inputs.push_back(src ? src : in);
    changed |= bool(src);
  }
  return inputs;
}

/// True if `v` is a zero-filled tensor.
bool isZeroFill(Value v) {
  auto fill = v.getDefiningOp<linalg::FillOp>();
  return fill && matchPattern(fill.getInputs()[0], m_AnyZeroFloat());
}

/// Replaces `op` by the same library op on `inputs` whose result is stored in
/// `narrowElem` from a zero fill, followed by an `extf` generic back to the
/// wide result type (plus `addend`, the original init, when given) that
/// elementwise fusion folds into the epilogue kernel.
template <typename OpTy>
void rebuildNarrow(OpTy op, ValueRange inputs, Type narrowElem, Value addend) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value init = op.getDpsInits()[0];
  auto wideType = cast<RankedTensorType>(init.getType());
  // Dynamic dims take their sizes from the original init (tensor.dim).
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, init);
  Value empty = tensor::EmptyOp::create(b, loc, sizes, narrowElem);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(narrowElem));
  Value narrowInit = linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  auto narrowed = OpTy::create(b, loc, TypeRange{wideType.clone(narrowElem)}, inputs,
                               ValueRange{narrowInit}, opAttrs(op));
  SmallVector<Value> ins{narrowed->getResult(0)};
  if (addend)
    ins.push_back(addend);
  Value wideEmpty = tensor::EmptyOp::create(b, loc, sizes, wideType.getElementType());
  SmallVector<AffineMap> maps(ins.size() + 1, b.getMultiDimIdentityMap(wideType.getRank()));
  SmallVector<utils::IteratorType> iters(wideType.getRank(), utils::IteratorType::parallel);
  auto ext = linalg::GenericOp::create(
      b, loc, TypeRange{wideType}, ins, ValueRange{wideEmpty}, maps, iters,
      [&](OpBuilder &nb, Location nl, ValueRange args) {
        Value e = arith::ExtFOp::create(nb, nl, wideType.getElementType(), args[0]);
        if (args.size() > 2)
          e = arith::AddFOp::create(nb, nl, args[1], e);
        linalg::YieldOp::create(nb, nl, e);
      });
  op->replaceAllUsesWith(ext->getResults());
  op->erase();
}

template <typename OpTy>
void narrow(OpTy op) {
  if (!op.hasPureTensorSemantics())
    return;
  bool changed;
  SmallVector<Value> inputs = narrowInputs(op, changed);
  // Both operands must be narrow, in the same type: a mixed bf16 x f32 library
  // call would need its own upcast anyway.
  Type inElem = getElementTypeOrSelf(inputs[0].getType());
  if (!(inElem.isBF16() || inElem.isF16()) || llvm::any_of(inputs, [&](Value v) {
        return getElementTypeOrSelf(v.getType()) != inElem;
      }))
    return;
  // Operands already narrow (torch-mlir emits bf16 x bf16 -> f32 batch
  // matmuls directly): only the result can still be narrowed.
  Value init = op.getDpsInits()[0];
  bool zeroInit = isZeroFill(init);
  // The result is stored narrow too when it starts from zero and is only used
  // rounded to the narrow type, as eager torch does for a bf16 matmul (the
  // library still accumulates in f32): half the bytes written and read back.
  bool narrowResult = zeroInit && getElementTypeOrSelf(init.getType()) != inElem &&
                      onlyRoundedTo(op->getResult(0), inElem);
  if (!changed && !narrowResult)
    return;
  if (narrowResult) {
    rebuildNarrow(op, inputs, inElem, Value());
    return;
  }
  OpBuilder b(op);
  auto narrowed = OpTy::create(b, op.getLoc(), op->getResultTypes(), inputs, op.getDpsInits(),
                               opAttrs(op));
  op->replaceAllUsesWith(narrowed->getResults());
  op->erase();
}

constexpr llvm::StringLiteral kRoundOnceAttr = "mlircap.round_once";

/// A bf16/f16 convolution accumulating into f32: the library call (torch's
/// conv2d on the narrow tensors) returns its result rounded to the narrow
/// type, so storing it narrow loses nothing and saves the f32 buffer and the
/// conversion copy into it. `conv(ins) outs(init)` becomes
/// `extf(conv(ins) outs(0 narrow)) [+ init]`, the add left out when the init
/// is a zero fill. Only when every use rounds the result to the narrow type
/// (onlyRoundedTo): a convolution of upcast operands whose f32 result is used
/// as f32 stays wide. With a bias (a non-zero init) the narrow result is
/// rounded twice, once by the library and once after the bias add, where
/// torch's conv2d with a bias rounds once: one unit in the last place off
/// eager's in some elements (OpInfo's depthwise bf16 conv samples on the CPU).
/// A module with the unit attribute `mlircap.round_once` (the CPU paths, where
/// the f32 convolution costs little next to eager's) keeps such a convolution
/// wide; the GPU keeps its tensor-core convolution and the extra rounding.
template <typename ConvOp>
void narrowConv(ConvOp op) {
  if (!op.hasPureTensorSemantics())
    return;
  Value init = op.getDpsInits()[0];
  if (!isZeroFill(init))
    if (auto module = op->template getParentOfType<ModuleOp>(); module && module->hasAttr(kRoundOnceAttr))
      return;
  bool changed;
  SmallVector<Value> inputs = narrowInputs(op, changed);
  Type inElem = getElementTypeOrSelf(inputs[0].getType());
  if (!(inElem.isBF16() || inElem.isF16()) || !getElementTypeOrSelf(init.getType()).isF32() ||
      getElementTypeOrSelf(inputs[1].getType()) != inElem || !onlyRoundedTo(op->getResult(0), inElem))
    return;
  rebuildNarrow(op, inputs, inElem, isZeroFill(init) ? Value() : init);
}

struct NarrowLibraryOperands
    : impl::MlircapNarrowLibraryOperandsBase<NarrowLibraryOperands> {
  void runOnOperation() override {
    SmallVector<linalg::MatmulOp> mms;
    SmallVector<linalg::BatchMatmulOp> bmms;
    SmallVector<linalg::Conv2DNchwFchwOp> convs;
    SmallVector<linalg::DepthwiseConv2DNchwChwOp> depthwise;
    getOperation().walk([&](Operation *op) {
      if (auto m = dyn_cast<linalg::MatmulOp>(op))
        mms.push_back(m);
      else if (auto m = dyn_cast<linalg::BatchMatmulOp>(op))
        bmms.push_back(m);
      else if (auto c = dyn_cast<linalg::Conv2DNchwFchwOp>(op))
        convs.push_back(c);
      else if (auto d = dyn_cast<linalg::DepthwiseConv2DNchwChwOp>(op))
        depthwise.push_back(d);
    });
    for (auto op : convs)
      narrowConv(op);
    for (auto op : depthwise)
      narrowConv(op);
    for (auto op : mms)
      narrow(op);
    for (auto op : bmms)
      narrow(op);
  }
};
} // namespace
} // namespace mlir::mlircap
