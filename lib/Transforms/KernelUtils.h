//===- KernelUtils.h - helpers shared by kernel formation and codegen ----===//
//
// What is a library op, what is a row reduction, what can be cloned into a
// kernel. Kernel formation (FormKernels.cpp), GPU code generation
// (GpuCodegen.cpp) and the launch-plan builder (CAPI/LaunchPlan.cpp) must agree
// on these, so they live in one place.
//
//===----------------------------------------------------------------------===//
#ifndef MLIRCAP_LIB_TRANSFORMS_KERNELUTILS_H
#define MLIRCAP_LIB_TRANSFORMS_KERNELUTILS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include <optional>

namespace mlir::mlircap {

/// Marks the NHWC depthwise convolutions mlircap-conv-channels-last makes: library ops.
constexpr llvm::StringLiteral kLibraryDepthwiseAttr = "mlircap.library_depthwise";

/// Name of the library operation the runtime executes for `op` (through
/// torch/cuBLAS/cuDNN), or "" when `op` is compiled into kernels.
inline llvm::StringRef libraryOpName(Operation *op) {
  if (!op)
    return "";
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || !linalgOp.hasPureTensorSemantics())
    return "";
  if (isa<linalg::MatmulTransposeBOp>(op))
    return "matmul_transpose_b";
  if (auto mm = dyn_cast<linalg::MatmulOp>(op))
    return mm.hasUserDefinedMaps() ? "" : "matmul";
  if (isa<linalg::BatchMatmulTransposeBOp>(op))
    return "batch_matmul_transpose_b";
  if (auto bmm = dyn_cast<linalg::BatchMatmulOp>(op))
    return bmm.hasUserDefinedMaps() ? "" : "batch_matmul";
  if (isa<linalg::Conv2DNchwFchwOp>(op))
    return "conv2d_nchw_fchw";
  if (isa<linalg::Conv2DNhwcFhwcOp>(op))
    return "conv2d_nhwc_fhwc";
  if (isa<linalg::DepthwiseConv2DNchwChwOp>(op))
    return "conv2d_depthwise_nchw_chw";
  // only the NHWC depthwise convolutions mlircap-conv-channels-last makes (others are
  // generalized into kernels, as before)
  if (isa<linalg::DepthwiseConv2DNhwcHwcOp>(op) && op->hasAttr(kLibraryDepthwiseAttr))
    return "conv2d_depthwise_nhwc_hwc";
  return "";
}
inline bool isLibraryOp(Operation *op) { return !libraryOpName(op).empty(); }

/// A library convolution (input as operand 0: conv2d_nchw_fchw,
/// conv2d_depthwise_nchw_chw, conv2d_nhwc_fhwc, conv2d_depthwise_nhwc_hwc).
inline bool isLibraryConv(Operation *op) {
  return isa<linalg::Conv2DNchwFchwOp, linalg::DepthwiseConv2DNchwChwOp,
             linalg::Conv2DNhwcFhwcOp, linalg::DepthwiseConv2DNhwcHwcOp>(op) &&
         isLibraryOp(op);
}

/// The first of the two spatial dims of a library convolution's input: 2 for
/// NCHW, 1 for NHWC (conv2d_nhwc_fhwc, see mlircap-conv-channels-last).
inline unsigned convSpatialDim(Operation *conv) {
  return isa<linalg::Conv2DNhwcFhwcOp, linalg::DepthwiseConv2DNhwcHwcOp>(conv) ? 1 : 2;
}

/// The (height, width) padding a library convolution applies itself (cuDNN /
/// oneDNN take a padding argument) when `pad` is the zero padding of an NCHW
/// (or, for NHWC convolutions, NHWC) input that only such convolutions of one
/// layout read: static, symmetric, spatial dims only. Such a pad is no kernel:
/// the launch plan hands the convolution the pad's source and the padding (no
/// padded copy, and the kernel producing the source keeps identity indexing).
inline std::optional<std::pair<int64_t, int64_t>> convInputPadding(tensor::PadOp pad) {
  auto srcType = pad.getSourceType();
  if (srcType.getRank() != 4 || !srcType.hasStaticShape() ||
      !pad.getResultType().hasStaticShape() || pad->use_empty())
    return std::nullopt;
  Value value = pad.getConstantPaddingValue();
  if (!value || !(matchPattern(value, m_AnyZeroFloat()) || matchPattern(value, m_Zero())))
    return std::nullopt;
  ArrayRef<int64_t> low = pad.getStaticLow(), high = pad.getStaticHigh();
  if (low.size() != 4 || high.size() != 4 || ShapedType::isDynamicShape(low) ||
      ShapedType::isDynamicShape(high))
    return std::nullopt;
  std::optional<unsigned> h;
  for (OpOperand &use : pad->getUses()) {
    if (!isLibraryConv(use.getOwner()) || use.getOperandNumber() != 0)
      return std::nullopt;
    unsigned d = convSpatialDim(use.getOwner());
    if (h && *h != d)
      return std::nullopt;
    h = d;
  }
  unsigned w = *h + 1;
  for (unsigned d = 0; d < 4; ++d)
    if (d != *h && d != w && (low[d] || high[d]))
      return std::nullopt;
  if (low[*h] != high[*h] || low[w] != high[w] || low[*h] < 0 || low[w] < 0)
    return std::nullopt;
  return std::make_pair(low[*h], low[w]);
}

/// The attribute marking an outlined kernel function; its value is the kernel
/// kind chosen by kernel formation ("pointwise", "row_reduction", "reduction").
inline constexpr llvm::StringLiteral kKernelAttr = "mlircap.kernel";
/// Launch configuration attached by mlircap-gpu-codegen to the kernel function.
inline constexpr llvm::StringLiteral kLaunchAttr = "mlircap.launch";

inline bool isAllParallel(linalg::GenericOp op) {
  return op.getNumReductionLoops() == 0;
}

/// The op of a single-result reduction body that combines the new element with
/// the accumulator: `yield combine(f(ins), %out)` where f does not use %out and
/// combine is associative and commutative. Null if the body has another form.
inline Operation *getCombiner(linalg::GenericOp op) {
  if (op.getNumDpsInits() != 1 || op.getNumResults() != 1)
    return nullptr;
  Block &body = op.getRegion().front();
  BlockArgument out = body.getArgument(body.getNumArguments() - 1);
  if (!out.hasOneUse())
    return nullptr;
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  Operation *comb = yield.getValues()[0].getDefiningOp();
  if (!comb || comb->getBlock() != &body || comb->getNumOperands() != 2 ||
      comb->getNumResults() != 1)
    return nullptr;
  if (!isa<arith::AddFOp, arith::MulFOp, arith::MaximumFOp, arith::MinimumFOp,
           arith::MaxNumFOp, arith::MinNumFOp, arith::AddIOp, arith::MulIOp,
           arith::MaxSIOp, arith::MinSIOp, arith::MaxUIOp, arith::MinUIOp,
           arith::AndIOp, arith::OrIOp, arith::XOrIOp>(comb))
    return nullptr;
  if (comb->getOperand(0) != out && comb->getOperand(1) != out)
    return nullptr;
  if (comb->getOperand(0) == out && comb->getOperand(1) == out)
    return nullptr;
  return comb;
}

/// Identity element of a combiner (see getCombiner) for type `t`.
inline TypedAttr getCombinerIdentity(Operation *comb, Type t) {
  auto ft = dyn_cast<FloatType>(t);
  auto it = dyn_cast<IntegerType>(t);
  auto fl = [&](double v) -> TypedAttr { return FloatAttr::get(t, v); };
  auto inf = [&](bool neg) -> TypedAttr {
    return FloatAttr::get(t, llvm::APFloat::getInf(ft.getFloatSemantics(), neg));
  };
  auto in = [&](const llvm::APInt &v) -> TypedAttr { return IntegerAttr::get(t, v); };
  if (ft) {
    if (isa<arith::AddFOp>(comb)) return fl(0.0);
    if (isa<arith::MulFOp>(comb)) return fl(1.0);
    if (isa<arith::MaximumFOp, arith::MaxNumFOp>(comb)) return inf(true);
    if (isa<arith::MinimumFOp, arith::MinNumFOp>(comb)) return inf(false);
    return {};
  }
  if (!it)
    return {};
  unsigned w = it.getWidth();
  if (isa<arith::AddIOp, arith::OrIOp, arith::XOrIOp, arith::MaxUIOp>(comb))
    return in(llvm::APInt::getZero(w));
  if (isa<arith::MulIOp>(comb)) return in(llvm::APInt(w, 1));
  if (isa<arith::AndIOp, arith::MinUIOp>(comb)) return in(llvm::APInt::getAllOnes(w));
  if (isa<arith::MaxSIOp>(comb)) return in(llvm::APInt::getSignedMinValue(w));
  if (isa<arith::MinSIOp>(comb)) return in(llvm::APInt::getSignedMaxValue(w));
  return {};
}

/// True if every parallel loop of `op` comes before every reduction loop.
inline bool parallelLoopsFirst(linalg::GenericOp op) {
  auto iters = op.getIteratorTypesArray();
  unsigned np = op.getNumParallelLoops();
  for (unsigned i = 0; i < iters.size(); ++i)
    if ((i < np) != (iters[i] == utils::IteratorType::parallel))
      return false;
  return true;
}

/// A reduction that a block per row can compute: one result with a recognized
/// combiner, all parallel loops before all reduction loops, the output map a
/// projection on the parallel loops (unit dims may be constant 0).
inline bool isRowReduction(linalg::GenericOp op) {
  if (op.getNumReductionLoops() == 0 || !op.hasPureTensorSemantics())
    return false;
  Operation *comb = getCombiner(op);
  if (!comb || !getCombinerIdentity(comb, comb->getResult(0).getType()))
    return false;
  if (!parallelLoopsFirst(op))
    return false;
  unsigned np = op.getNumParallelLoops();
  AffineMap out = op.getDpsInitOperand(0) ? op.getMatchingIndexingMap(op.getDpsInitOperand(0)) : AffineMap();
  unsigned next = 0;
  for (AffineExpr e : out.getResults()) {
    if (auto d = dyn_cast<AffineDimExpr>(e)) {
      if (d.getPosition() != next)
        return false;
      ++next;
      continue;
    }
    auto c = dyn_cast<AffineConstantExpr>(e);
    if (!c || c.getValue() != 0)
      return false;
  }
  return next == np;
}

inline int64_t product(llvm::ArrayRef<int64_t> v) {
  int64_t p = 1;
  for (int64_t x : v)
    p *= x;
  return p;
}

/// Smallest k such that the product of shape[0..k) is `rows`.
inline std::optional<unsigned> rowPrefix(llvm::ArrayRef<int64_t> shape,
                                         int64_t rows) {
  int64_t p = 1;
  for (unsigned k = 0;; ++k) {
    if (p == rows)
      return k;
    if (k == shape.size() || p > rows)
      return std::nullopt;
    p *= shape[k];
  }
}

/// Pure data movement: all-parallel generic with one input whose body yields
/// that input. Kernels recompute these in their indexing; in front of a library
/// op they become strided views.
/// Marks a copy that must be materialized (a kernel writes it), see
/// FormKernels.cpp.
inline constexpr llvm::StringLiteral kMaterializeAttr = "mlircap.materialize";

inline bool isDataMovementGeneric(linalg::GenericOp op) {
  if (op->hasAttr(kMaterializeAttr))
    return false;
  if (!isAllParallel(op) || op.getNumDpsInputs() != 1 ||
      op.getNumResults() != 1 || !op.hasPureTensorSemantics())
    return false;
  Block &body = op.getRegion().front();
  if (body.getOperations().size() != 1)
    return false;
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  return yield.getValues()[0] == body.getArgument(0);
}

/// A data-movement generic expressible as a strided view of its input: the
/// output map is the identity and the input map a projected permutation
/// (transpose, broadcast along new dims).
inline bool isViewGeneric(linalg::GenericOp op) {
  if (!isDataMovementGeneric(op))
    return false;
  AffineMap in = op.getMatchingIndexingMap(op.getDpsInputOperand(0));
  AffineMap out = op.getMatchingIndexingMap(op.getDpsInitOperand(0));
  return out.isIdentity() && in.isProjectedPermutation(/*allowZeroInResults=*/false);
}

/// Module attribute: library convolutions keep a per-channel bias init and the
/// runtime passes the bias to the library convolution (the CPU plan: oneDNN
/// adds it inside its accumulation, as eager's conv2d with a bias does; split
/// off into an add after the convolution, results were a unit in the last
/// place off eager's and the add cost a pass). See mlircap-library-init.
inline constexpr llvm::StringLiteral kConvBiasModuleAttr = "mlircap.conv_bias";
/// Marks the broadcast of a 1-D bias that is a library convolution's init
/// (a view generic the launch plan folds into the convolution step).
inline constexpr llvm::StringLiteral kConvBiasAttr = "mlircap.conv_bias";

/// The channel dim of a library convolution's result: 1 for NCHW, 3 for NHWC.
inline unsigned convChannelDim(Operation *conv) {
  return isa<linalg::Conv2DNhwcFhwcOp, linalg::DepthwiseConv2DNhwcHwcOp>(conv) ? 3 : 1;
}

/// The 1-D bias `init` broadcasts along dim `channel` of its float result of
/// rank `rank` (a linalg.broadcast, or a view generic indexing its input by
/// that dim alone), with the result's element type; null otherwise.
inline Value channelBiasOf(Value init, unsigned channel, int64_t rank = 4) {
  auto type = dyn_cast<RankedTensorType>(init.getType());
  if (!type || type.getRank() != rank || !type.hasStaticShape() ||
      !isa<FloatType>(type.getElementType()))
    return {};
  Value bias;
  if (auto bc = init.getDefiningOp<linalg::BroadcastOp>()) {
    if (!bc.hasPureTensorSemantics())
      return {};
    ArrayRef<int64_t> dims = bc.getDimensions();
    if ((int64_t)dims.size() != rank - 1 || llvm::is_contained(dims, (int64_t)channel))
      return {};
    bias = bc.getInput();
  } else if (auto g = init.getDefiningOp<linalg::GenericOp>(); g && isViewGeneric(g)) {
    AffineMap in = g.getMatchingIndexingMap(g.getDpsInputOperand(0));
    if (in.getNumResults() != 1 || in.getResult(0) != getAffineDimExpr(channel, g.getContext()))
      return {};
    bias = g.getDpsInputOperand(0)->get();
  } else {
    return {};
  }
  auto bt = dyn_cast<RankedTensorType>(bias.getType());
  if (!bt || bt.getRank() != 1 || bt.getElementType() != type.getElementType() ||
      bt.getDimSize(0) != type.getDimSize(channel))
    return {};
  return bias;
}

/// The bias of library convolution `conv` whose init is its broadcast marked
/// kConvBiasAttr (mlircap-library-init under kConvBiasModuleAttr); null if none.
inline Value convBiasOf(Operation *conv) {
  auto lin = dyn_cast<linalg::LinalgOp>(conv);
  if (!lin || !isLibraryConv(conv) || lin.getNumDpsInits() != 1)
    return {};
  auto g = lin.getDpsInitOperand(0)->get().getDefiningOp<linalg::GenericOp>();
  if (!g || !g->hasAttr(kConvBiasAttr))
    return {};
  return channelBiasOf(g->getResult(0), convChannelDim(conv));
}

/// A fresh broadcast of 1-D `bias` to `type` along dim `channel`, marked
/// `mark` (kConvBiasAttr: the init of one library convolution).
inline Value buildConvBiasInit(OpBuilder &b, Location loc, Value bias, RankedTensorType type,
                               unsigned channel, StringRef mark = kConvBiasAttr) {
  Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  MLIRContext *ctx = b.getContext();
  unsigned rank = type.getRank();
  SmallVector<AffineMap> maps = {
      AffineMap::get(rank, 0, {getAffineDimExpr(channel, ctx)}, ctx),
      b.getMultiDimIdentityMap(rank)};
  SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
  auto g = linalg::GenericOp::create(
      b, loc, TypeRange{type}, ValueRange{bias}, ValueRange{empty}, maps, iters,
      [](OpBuilder &nb, Location l, ValueRange args) { linalg::YieldOp::create(nb, l, args[0]); });
  g->setAttr(mark, b.getUnitAttr());
  return g.getResult(0);
}

/// The narrow source of `v` if `v` is an elementwise generic that only
/// extends floats (identity maps), else null.
inline Value narrowSource(Value v) {
  auto g = v.getDefiningOp<linalg::GenericOp>();
  if (!g || g.getNumDpsInputs() != 1 || g.getNumDpsInits() != 1 ||
      g.getNumReductionLoops() != 0 ||
      !llvm::all_of(g.getIndexingMapsArray(), [](AffineMap m) { return m.isIdentity(); }))
    return {};
  Block &body = g.getRegion().front();
  if (body.getOperations().size() != 2)
    return {};
  auto ext = dyn_cast<arith::ExtFOp>(body.front());
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (!ext || ext.getIn() != body.getArgument(0) || yield.getValues().size() != 1 ||
      yield.getValues()[0] != ext.getResult())
    return {};
  return g.getDpsInputs()[0];
}

/// `op`'s attributes for a rebuilt op of its kind (operand segment sizes are
/// the builder's).
inline SmallVector<NamedAttribute> opAttrs(Operation *op) {
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute a : op->getAttrs())
    if (a.getName() != "operandSegmentSizes")
      attrs.push_back(a);
  return attrs;
}

/// True if every use of `v` rounds it to `narrow` before anything else: each
/// user is an elementwise generic reading `v` as an input whose block argument
/// is only truncated to `narrow` (torch-mlir's bf16 matmul: f32 result, then
/// truncf). Storing `v` narrow then loses nothing. A user that computes with
/// the wide value (`a.float() @ b.float()` of bf16 tensors, an f32 bias added
/// before one rounding) needs the wide result.
inline bool onlyRoundedTo(Value v, Type narrow) {
  if (v.use_empty())
    return false;
  for (OpOperand &use : v.getUses()) {
    auto g = dyn_cast<linalg::GenericOp>(use.getOwner());
    if (!g || g.getNumReductionLoops() != 0 || !g.isDpsInput(&use))
      return false;
    BlockArgument arg = g.getMatchingBlockArgument(&use);
    if (arg.use_empty())
      continue;
    for (Operation *u : arg.getUsers()) {
      auto t = dyn_cast<arith::TruncFOp>(u);
      if (!t || t.getType() != narrow)
        return false;
    }
  }
  return true;
}

/// Module attribute: 2-D library matmuls whose result gets a 1-D bias added
/// along its columns before anything else (torch-mlir's aten.linear / addmm:
/// mm, then + bias, rounded once) take the bias as their init, and the runtime
/// runs them as torch.addmm, eager's own call for them (cuBLASLt adds it in its
/// epilogue; a bf16 result is then stored bf16, not f32 for a kernel to add
/// the bias and round). Set by the runtime on the IR of launch plans
/// (runtime/plan.py's mark_matmul_bias); see mlircap-matmul-bias.
inline constexpr llvm::StringLiteral kMatmulBiasModuleAttr = "mlircap.matmul_bias";
/// Marks the broadcast of such a bias (a view generic the launch plan folds
/// into the matmul step as its third operand).
inline constexpr llvm::StringLiteral kMatmulBiasAttr = "mlircap.matmul_bias";

/// A 2-D library matmul whose operands give an (M, N) result as torch.addmm's
/// (matmul, matmul_transpose_b).
inline bool isLibraryMatmul2D(Operation *op) {
  llvm::StringRef name = libraryOpName(op);
  return name == "matmul" || name == "matmul_transpose_b";
}

/// The bias of 2-D library matmul `op` whose init is its broadcast along the
/// result's columns marked kMatmulBiasAttr (mlircap-matmul-bias); null if none.
inline Value matmulBiasOf(Operation *op) {
  auto lin = dyn_cast<linalg::LinalgOp>(op);
  if (!lin || !isLibraryMatmul2D(op) || lin.getNumDpsInits() != 1)
    return {};
  auto g = lin.getDpsInitOperand(0)->get().getDefiningOp<linalg::GenericOp>();
  if (!g || !g->hasAttr(kMatmulBiasAttr))
    return {};
  return channelBiasOf(g->getResult(0), 1, /*rank=*/2);
}

/// The 1-D bias a library op adds inside its accumulation (a convolution's
/// or a matmul's: the launch plan's third operand of its step); null if none.
inline Value libraryBiasOf(Operation *op) {
  if (Value bias = convBiasOf(op))
    return bias;
  return matmulBiasOf(op);
}

/// A broadcast marked as some library op's bias init.
inline bool isLibraryBiasInit(Operation *op) {
  return op->hasAttr(kConvBiasAttr) || op->hasAttr(kMatmulBiasAttr);
}

inline bool hasStaticShapes(Operation *op) {
  auto ok = [](Type t) {
    auto st = dyn_cast<ShapedType>(t);
    return !st || st.hasStaticShape();
  };
  return llvm::all_of(op->getOperandTypes(), ok) &&
         llvm::all_of(op->getResultTypes(), ok);
}

/// Ops that kernels recompute instead of reading from memory: scalar and
/// splat constants, tensor.empty, linalg.fill, reshapes and slices (folded into
/// indexing), data-movement generics, and pure scalar arithmetic.
inline bool isCloneableIntoKernel(Operation *op) {
  if (auto cst = dyn_cast<arith::ConstantOp>(op)) {
    if (auto dense = dyn_cast<DenseElementsAttr>(cst.getValue()))
      return dense.isSplat();
    return !isa<ShapedType>(cst.getType());
  }
  if (isa<tensor::EmptyOp, linalg::FillOp, tensor::ExpandShapeOp,
          tensor::CollapseShapeOp>(op))
    return true;
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
    return !ShapedType::isDynamicShape(slice.getStaticOffsets()) &&
           !ShapedType::isDynamicShape(slice.getStaticSizes()) &&
           !ShapedType::isDynamicShape(slice.getStaticStrides());
  if (auto g = dyn_cast<linalg::GenericOp>(op))
    return isDataMovementGeneric(g);
  // Scalar arithmetic computed in the function body.
  if (op->getNumRegions() == 0 && op->getNumResults() == 1 &&
      isPure(op) && !isa<ShapedType>(op->getResult(0).getType()) &&
      llvm::none_of(op->getOperandTypes(),
                    [](Type t) { return isa<ShapedType>(t); }) &&
      (op->getDialect() && (op->getDialect()->getNamespace() == "arith" ||
                            op->getDialect()->getNamespace() == "math")))
    return true;
  return false;
}

/// Is `v` a view op result (reshape, static slice, view generic)?
inline bool isViewOp(Operation *op) {
  if (!op)
    return false;
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op))
    return true;
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
    return isCloneableIntoKernel(slice);
  auto g = dyn_cast<linalg::GenericOp>(op);
  return g && isViewGeneric(g);
}

/// Element offset and strides of `v` relative to the contiguous value at the
/// root of its chain of view ops. Nullopt when the chain cannot be expressed
/// as one strided view (e.g. merging dims that a transpose separated).
struct StridedView {
  Value base;
  int64_t offset = 0;
  llvm::SmallVector<int64_t> strides;
};
inline std::optional<StridedView> getStridedView(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  Operation *def = v.getDefiningOp();
  if (!isViewOp(def)) {
    StridedView r{v, 0, llvm::SmallVector<int64_t>(type.getRank(), 1)};
    for (int i = (int)type.getRank() - 2; i >= 0; --i)
      r.strides[i] = r.strides[i + 1] * type.getDimSize(i + 1);
    return r;
  }
  auto src = getStridedView(def->getOperand(0));
  if (!src)
    return std::nullopt;
  StridedView out{src->base, src->offset, {}};
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
    out.strides.resize(type.getRank());
    for (auto [j, group] : llvm::enumerate(expand.getReassociationIndices())) {
      int64_t st = src->strides[j];
      for (int64_t d : llvm::reverse(group)) {
        out.strides[d] = st;
        st *= type.getDimSize(d);
      }
    }
    return out;
  }
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
    auto st = collapse.getSrcType();
    for (ReassociationIndices group : collapse.getReassociationIndices()) {
      int64_t last = -1, stride = 1;
      for (int64_t d : llvm::reverse(group)) {
        if (st.getDimSize(d) == 1)
          continue;
        if (last >= 0 && src->strides[d] != src->strides[last] * st.getDimSize(last))
          return std::nullopt;
        if (last < 0)
          stride = src->strides[d];
        last = d;
      }
      out.strides.push_back(stride);
    }
    return out;
  }
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(def)) {
    llvm::SmallBitVector dropped = slice.getDroppedDims();
    for (unsigned i = 0; i < src->strides.size(); ++i) {
      out.offset += slice.getStaticOffsets()[i] * src->strides[i];
      if (!dropped.test(i))
        out.strides.push_back(src->strides[i] * slice.getStaticStrides()[i]);
    }
    return out;
  }
  auto g = cast<linalg::GenericOp>(def);
  AffineMap in = g.getMatchingIndexingMap(g.getDpsInputOperand(0));
  out.strides.assign(g.getNumLoops(), 0);
  for (auto [j, e] : llvm::enumerate(in.getResults()))
    out.strides[cast<AffineDimExpr>(e).getPosition()] = src->strides[j];
  return out;
}

} // namespace mlir::mlircap

#endif
