//===- GeneralizeElementwise.cpp - named pointwise ops -> linalg.generic -===//
#include "mlircap/Passes.h"
#include "KernelUtils.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPGENERALIZEELEMENTWISE
#include "mlircap/Passes.h.inc"

namespace {
/// Ops kept in named form: library calls (see libraryOpName: matmul,
/// batch_matmul, conv_2d_nchw_fchw) and fills (folded into the op whose init
/// they produce). Everything else, pooling and the contractions/convolutions
/// the runtime has no library call for included, becomes a generic and is
/// compiled into a kernel.
bool keepNamed(linalg::LinalgOp op) {
  return isa<linalg::GenericOp, linalg::FillOp>(op) || isLibraryOp(op);
}

struct GeneralizeElementwise
    : impl::MlircapGeneralizeElementwiseBase<GeneralizeElementwise> {
  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> todo;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (!keepNamed(op))
        todo.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : todo) {
      rewriter.setInsertionPoint(op);
      // Ops without a generic form (none expected here) are left as they are.
      (void)linalg::generalizeNamedOp(rewriter, op);
    }
  }
};
} // namespace
} // namespace mlir::mlircap
