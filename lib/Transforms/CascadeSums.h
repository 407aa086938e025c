//===- CascadeSums.h - float row sums in eager's order (CPU) --------------===//
//
// mlircap-reduction-loops lowers a float sum over a contiguous innermost
// reduction dim with these (CascadeSums.cpp): the terms in vectors, added in
// the order of eager torch's CPU sum kernel (cascade_sum), so a compiled
// mean is eager's to the bit and a `x >= x.mean()` tie agrees.
//
//===----------------------------------------------------------------------===//
#ifndef MLIRCAP_LIB_TRANSFORMS_CASCADESUMS_H
#define MLIRCAP_LIB_TRANSFORMS_CASCADESUMS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "llvm/ADT/DenseSet.h"
#include <optional>

namespace mlir::mlircap {

/// A reduction generic whose every output is a float sum (`acc' = acc +
/// term`) over its last dim, the terms computed by arith/math ops that
/// vectorize from inputs read contiguously along that dim.
struct CascadeSum {
  /// The type the cascade adds in: f64, or f32 for f64 accumulators of
  /// f32 terms whose result is only ever read rounded to f32 (mlircap-widen-
  /// sums' f32 sums, where eager sums in f32).
  FloatType elem;
  /// Per output, the body value summed (of type `elem`).
  SmallVector<Value> terms;
  /// Per output, its `acc + term` (not cloned: the cascade adds instead).
  SmallVector<Operation *> adds;
};

/// Whether float row sums take eager's cascade order: MLIRCAP_CASCADE_SUMS,
/// unset the default; 0, false, no and "" mean off (mlircap.config's flags).
bool cascadeSumsEnabled();

/// The buffers (their roots, through views) that a reduction generic's
/// output accumulates into and that every other op reads only rounded to
/// f32 (an input whose block argument feeds only `arith.truncf` to f32) or
/// writes whole (a fill): the f64 sum of f32 terms there stands for an f32
/// sum. Computed before any op is lowered.
llvm::DenseSet<Value> f32ObservedSums(Operation *root);

/// `op` as a cascade sum, if it is one (see CascadeSum); `f32Sums` from
/// f32ObservedSums.
std::optional<CascadeSum> matchCascadeSum(linalg::GenericOp op,
                                          const llvm::DenseSet<Value> &f32Sums);

/// The sums (type cs.elem, one per output) of the terms of `op` at loop
/// indices `ivs` with its last dim at `base + e`, e in [0, len), each from
/// +0, in eager's order: see CascadeSums.cpp.
SmallVector<Value> emitCascadeRow(OpBuilder &b, Location loc, linalg::GenericOp op,
                                  const CascadeSum &cs, ArrayRef<Value> ivs, Value base,
                                  int64_t len);

/// The attribute on a loop whose iteration covers that many elements
/// (vectors), and on an op standing for that many straight-line elements:
/// mlircap-outline-parallel counts them as work.
constexpr llvm::StringLiteral kLanesAttr = "mlircap.lanes";
constexpr llvm::StringLiteral kWorkAttr = "mlircap.work";

} // namespace mlir::mlircap

#endif // MLIRCAP_LIB_TRANSFORMS_CASCADESUMS_H
