//===- FormKernels.cpp - group fused linalg ops into outlined kernels ----===//
//
// After elementwise fusion every linalg.generic is one loop nest. This pass
// decides which of them run together in one GPU kernel and outlines each
// kernel into a private func.func marked `mlircap.kernel`:
//
//  * row groups: row reductions (parallel loops, then reduction loops) with
//    the same row count and row length, and the elementwise ops between them
//    whose accesses stay within one row, become one kernel (softmax,
//    layernorm, RMSnorm: one kernel each). A block per row executes it.
//  * every other generic (elementwise or reduction) is one kernel.
//  * library ops (matmul, batch_matmul, conv_2d_nchw_fchw) stay in the
//    caller; their zero-fill init is left for the plan builder to drop.
//  * fills, splat constants, tensor.empty, reshapes, slices and data-movement
//    generics are cloned into every kernel that reads them (folded into the
//    kernel's indexing). Data-movement generics feeding library ops stay as
//    strided views.
//
// See Passes.td for the cost rule and examples.
//
//===----------------------------------------------------------------------===//
#include "KernelUtils.h"
#include "mlircap/Passes.h"
#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::mlircap {
#define GEN_PASS_DEF_MLIRCAPFORMKERNELS
#include "mlircap/Passes.h.inc"

namespace {

/// Values an op reads, including those its regions capture from above.
SmallVector<Value> readValues(Operation *op) {
  SmallVector<Value> vals(op->getOperands());
  llvm::SetVector<Value> captured;
  for (Region &r : op->getRegions())
    getUsedValuesDefinedAbove(r, captured);
  vals.append(captured.begin(), captured.end());
  return vals;
}

struct Group {
  SmallVector<Operation *> ops;
  bool row = false;
  int64_t rows = 0, len = 0;
  bool dead = false;
};

struct Former {
  func::FuncOp func;
  Block &block;
  DenseMap<Operation *, int> groupOf;
  std::vector<Group> groups;
  Operation *lastKernel = nullptr; // kernels are placed in order after func
  /// Elementwise ops recomputed by the kernels that read them at gathered
  /// points (recomputeGatheredValues), like cloneable ops.
  llvm::SmallPtrSet<Operation *, 8> gathered;

  explicit Former(func::FuncOp f) : func(f), block(f.getBody().front()) {}

  Operation *topLevel(Operation *op) { return block.findAncestorOpInBlock(*op); }

  /// Would running `ops` as one kernel create a cycle through an op outside
  /// it? Forward closure from `ops`, then look for an operand coming back.
  /// Kernels formed so far count as one op each: reaching one op of a group
  /// reaches all of it (the kernel runs after all its inputs), so two groups
  /// that read each other's results (a1 -> b1, b2 -> a2) are a cycle even
  /// though no path of single ops leads back (BCEWithLogitsLoss with
  /// pos_weight next to other losses: the plan rejected the graph).
  bool createsCycle(const llvm::SmallPtrSetImpl<Operation *> &ops) {
    llvm::SmallPtrSet<Operation *, 32> fwd;
    SmallVector<Operation *> work(ops.begin(), ops.end());
    auto reach = [&](Operation *top) {
      if (!top || ops.contains(top) || !fwd.insert(top).second)
        return;
      work.push_back(top);
      auto it = groupOf.find(top);
      if (it == groupOf.end())
        return;
      for (Operation *member : groups[it->second].ops)
        if (!ops.contains(member) && fwd.insert(member).second)
          work.push_back(member);
    };
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value r : op->getResults())
        for (Operation *user : r.getUsers())
          reach(topLevel(user));
    }
    // A value read back from the forward closure closes a cycle, unless it
    // comes from cloneable ops (cloned into the kernel) whose own inputs do
    // not come from the closure.
    std::function<bool(Value)> back = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (!def)
        return false;
      Operation *top = topLevel(def);
      if (!top || ops.contains(top) || !fwd.contains(top))
        return false;
      if (!isCloneableIntoKernel(top))
        return true;
      return llvm::any_of(readValues(top), back);
    };
    for (Operation *op : ops)
      for (Value v : readValues(op))
        if (back(v))
          return true;
    return false;
  }

  /// Is the access `map` (from the loops of an op with loop sizes `loops`) to
  /// `value` row consistent: the row-prefix dims of the value are indexed by
  /// exactly the row-prefix loops, in order (unit dims aside)?
  static bool rowConsistent(AffineMap map, ArrayRef<int64_t> loops,
                            ArrayRef<int64_t> vshape, int64_t rows) {
    auto kl = rowPrefix(loops, rows), kv = rowPrefix(vshape, rows);
    if (!kl || !kv)
      return false;
    SmallVector<unsigned> want, got;
    for (unsigned i = 0; i < *kl; ++i)
      if (loops[i] != 1)
        want.push_back(i);
    for (unsigned j = 0; j < *kv; ++j) {
      if (vshape[j] == 1)
        continue;
      auto d = dyn_cast<AffineDimExpr>(map.getResult(j));
      if (!d)
        return false;
      got.push_back(d.getPosition());
    }
    return want == got;
  }

  /// Can generic `op` run in a row group (rows, len), given how it reads
  /// and writes the group's values?
  bool fitsRowGroup(linalg::GenericOp op, int64_t rows, int64_t len,
                    const llvm::SmallPtrSetImpl<Operation *> &groupOps) {
    SmallVector<int64_t> loops = op.getStaticLoopRanges();
    if (isRowReduction(op)) {
      int64_t p = 1, r = 1;
      for (auto [i, it] : llvm::enumerate(op.getIteratorTypesArray()))
        ((it == utils::IteratorType::parallel) ? p : r) *= loops[i];
      if (p != rows || r != len)
        return false;
    } else if (isAllParallel(op)) {
      auto k = rowPrefix(loops, rows);
      if (!k)
        return false;
      int64_t rest = product(ArrayRef<int64_t>(loops).drop_front(*k));
      if (rest != 1 && rest != len)
        return false;
    } else {
      return false;
    }
    // Writes must be row consistent, and so must reads of group values.
    for (OpOperand &init : op.getDpsInitsMutable()) {
      auto t = cast<RankedTensorType>(init.get().getType());
      if (!rowConsistent(op.getMatchingIndexingMap(&init), loops, t.getShape(),
                         rows))
        return false;
    }
    for (OpOperand &in : op->getOpOperands()) {
      Operation *def = in.get().getDefiningOp();
      if (!def || !groupOps.contains(def))
        continue;
      auto t = dyn_cast<RankedTensorType>(in.get().getType());
      if (!t || !rowConsistent(op.getMatchingIndexingMap(&in), loops,
                               t.getShape(), rows))
        return false;
    }
    // Group values captured in the body (tensor.extract) can be anywhere.
    return !readsRowValueAnywhere(op, groupOps, rows);
  }

  /// Does the body of `op` read (tensor.extract, at any index) a value of
  /// `ops` that is row-reduced or computed from one, directly or through
  /// views? A row kernel holds a reduced value for its own row only: a slice
  /// shifted by one (`m[..., 1:] = m[..., :-1]` after a cumulative sum, as
  /// top-p filtering writes it) read this row's value for the previous
  /// row's (wrong elements on the GPU). Values computed from the kernel's
  /// inputs alone are recomputed at any index.
  bool readsRowValueAnywhere(linalg::GenericOp op,
                             const llvm::SmallPtrSetImpl<Operation *> &ops,
                             int64_t rows) {
    llvm::SetVector<Value> captured;
    getUsedValuesDefinedAbove(op.getRegion(), captured);
    for (Value v : captured) {
      Operation *def = v.getDefiningOp();
      if (def && ops.contains(def))
        return true;
      def = viewRoot(def, ops);
      if (def && ops.contains(def) && dependsOnReduction(def, ops) &&
          !readInOwnRow(op, v, rows))
        return true;
    }
    return false;
  }

  /// Is every read of `v` in the body of `op` (tensor.extract) within the
  /// row `op` computes? `v` is a chain of tensor.extract_slice ops that keep
  /// the row dims whole (offset 0, full size, unit stride, not dropped), and
  /// each extract indexes row dim j with `op`'s loop index j, as torch-mlir's
  /// cat and slice lowerings write it: `linalg.index j`, or that index
  /// clamped (`select(index < size, index, 0)`, the identity in range). E.g.
  /// RoPE's rotate_half of a query normalized in the same kernel (qk-norm).
  static bool readInOwnRow(linalg::GenericOp op, Value v, int64_t rows) {
    SmallVector<int64_t> loops = op.getStaticLoopRanges();
    auto kl = rowPrefix(loops, rows);
    if (!kl)
      return false;
    unsigned k = *kl;
    Value cur = v;
    for (; auto slice = cur.getDefiningOp<tensor::ExtractSliceOp>(); cur = slice.getSource()) {
      if (slice.getSourceType().getRank() != slice.getResultType().getRank() ||
          slice.getSourceType().getRank() < k)
        return false;
      for (unsigned j = 0; j < k; ++j)
        if (slice.getStaticOffsets()[j] != 0 || slice.getStaticStrides()[j] != 1 ||
            slice.getStaticSizes()[j] != slice.getSourceType().getDimSize(j) ||
            slice.getSourceType().getDimSize(j) != loops[j])
          return false;
    }
    // Only slices between `v` and the value it reads: a transpose (a view
    // generic) in the chain moves elements across rows.
    if (!v.getDefiningOp<tensor::ExtractSliceOp>() || isViewOp(cur.getDefiningOp()))
      return false;
    auto isLoopIndex = [&](Value i, unsigned j) {
      if (auto idx = i.getDefiningOp<linalg::IndexOp>())
        return idx.getDim() == j;
      return false;
    };
    auto isRowIndex = [&](Value i, unsigned j) {
      if (loops[j] == 1)
        return true;
      if (isLoopIndex(i, j))
        return true;
      // select(index < n, index, 0) with n >= the loop range: the index itself
      auto sel = i.getDefiningOp<arith::SelectOp>();
      if (!sel || !isLoopIndex(sel.getTrueValue(), j))
        return false;
      auto cmp = sel.getCondition().getDefiningOp<arith::CmpIOp>();
      IntegerAttr::ValueType bound;
      return cmp && cmp.getPredicate() == arith::CmpIPredicate::ult &&
             cmp.getLhs() == sel.getTrueValue() &&
             matchPattern(cmp.getRhs(), m_ConstantInt(&bound)) &&
             bound.getSExtValue() >= loops[j];
    };
    for (OpOperand &use : v.getUses()) {
      if (!op.getRegion().isAncestor(use.getOwner()->getParentRegion()))
        continue;
      auto extract = dyn_cast<tensor::ExtractOp>(use.getOwner());
      if (!extract)
        return false;
      for (unsigned j = 0; j < k; ++j)
        if (!isRowIndex(extract.getIndices()[j], j))
          return false;
    }
    return true;
  }

  /// An elementwise op in no kernel yet that reads no row-kernel value, and
  /// whose result can be written row by row if other kernels need it.
  bool isLooseProducer(linalg::GenericOp op, int64_t rows) {
    if (!isAllParallel(op) || isCloneableIntoKernel(op) || groupOf.count(op))
      return false;
    // (Reads of other kernels' values are inputs; reads within the merged
    // kernel are checked by tryMerge.)
    for (Value r : op->getResults())
      if (!rowPrefix(cast<RankedTensorType>(r.getType()).getShape(), rows))
        return false;
    return true;
  }

  /// The op a read of a value defined by `def` reads: `def` itself, or the
  /// op behind its chain of views (reshapes, slices, view generics), stopping
  /// at an op of `ops`.
  static Operation *viewRoot(Operation *def, const llvm::SmallPtrSetImpl<Operation *> &ops) {
    while (def && !ops.contains(def) && isViewOp(def) && def->getNumOperands() > 0)
      def = def->getOperand(0).getDefiningOp();
    return def;
  }

  /// Does `op` (in `ops`) read, directly or through other ops of `ops` or
  /// views of them, the result of a reduction in `ops`?
  bool dependsOnReduction(Operation *op,
                          const llvm::SmallPtrSetImpl<Operation *> &ops) {
    llvm::SmallPtrSet<Operation *, 16> seen;
    SmallVector<Operation *> work{op};
    while (!work.empty()) {
      Operation *o = work.pop_back_val();
      if (!seen.insert(o).second)
        continue;
      if (auto g = dyn_cast<linalg::GenericOp>(o); g && !isAllParallel(g))
        return true;
      for (Value v : readValues(o)) {
        Operation *d = viewRoot(v.getDefiningOp(), ops);
        if (d && ops.contains(d))
          work.push_back(d);
      }
    }
    return false;
  }

  /// Every read of a value produced inside `ops` stays within the row (so
  /// row-reduced values held per row are read where they live).
  bool internallyRowConsistent(const llvm::SmallPtrSetImpl<Operation *> &ops,
                               int64_t rows) {
    for (Operation *o : ops) {
      auto g = dyn_cast<linalg::GenericOp>(o);
      if (!g)
        continue;
      SmallVector<int64_t> loops = g.getStaticLoopRanges();
      for (OpOperand &in : g->getOpOperands()) {
        Operation *def = in.get().getDefiningOp();
        // Through reshapes/slices: only values recomputed from outside the
        // row kernel (no row-reduced value upstream) can be read anywhere.
        Operation *root = viewRoot(def, ops);
        if (root != def && root && ops.contains(root)) {
          if (dependsOnReduction(root, ops))
            return false;
          continue;
        }
        if (!def || !ops.contains(def))
          continue;
        auto t = dyn_cast<RankedTensorType>(in.get().getType());
        if (!t || !rowConsistent(g.getMatchingIndexingMap(&in), loops,
                                 t.getShape(), rows))
          return false;
      }
      if (readsRowValueAnywhere(g, ops, rows))
        return false;
    }
    return true;
  }

  int newGroup(Operation *op) {
    groups.push_back({});
    groups.back().ops.push_back(op);
    groupOf[op] = groups.size() - 1;
    return groups.size() - 1;
  }

  /// Try to merge groups `gs` and the loose ops `extra` into one row group
  /// (rows, len). Fails (changing nothing) on a cycle.
  bool tryMerge(ArrayRef<int> gs, ArrayRef<Operation *> extra, int64_t rows,
                int64_t len) {
    llvm::SmallPtrSet<Operation *, 32> all;
    for (int g : gs)
      all.insert(groups[g].ops.begin(), groups[g].ops.end());
    all.insert(extra.begin(), extra.end());
    if (createsCycle(all) || !internallyRowConsistent(all, rows))
      return false;
    int target = gs.empty() ? newGroup(extra.front()) : gs.front();
    Group &t = groups[target];
    t.row = true;
    t.rows = rows;
    t.len = len;
    for (int g : gs.drop_front(gs.empty() ? 0 : 1)) {
      for (Operation *op : groups[g].ops) {
        t.ops.push_back(op);
        groupOf[op] = target;
      }
      groups[g].ops.clear();
      groups[g].dead = true;
    }
    for (Operation *op : extra) {
      if (groupOf.count(op) && groupOf[op] == target)
        continue;
      t.ops.push_back(op);
      groupOf[op] = target;
    }
    return true;
  }

  llvm::SmallPtrSet<Operation *, 32> groupSet(int g) {
    return llvm::SmallPtrSet<Operation *, 32>(groups[g].ops.begin(),
                                              groups[g].ops.end());
  }

  /// Joins all-parallel `op` to the non-row reduction kernel it reads from,
  /// if every read of that kernel's values is a permutation (no element is
  /// recomputed) and no cycle arises.
  bool tryJoinNaive(linalg::GenericOp op) {
    int target = -1;
    for (OpOperand &in : op->getOpOperands()) {
      Operation *def = in.get().getDefiningOp();
      auto it = def ? groupOf.find(def) : groupOf.end();
      if (it == groupOf.end())
        continue;
      Group &g = groups[it->second];
      if (g.row)
        return false;
      if (target >= 0 && target != it->second)
        return false;
      AffineMap map = op.getMatchingIndexingMap(&in);
      auto t = cast<RankedTensorType>(in.get().getType());
      if (!map.isPermutation() ||
          product(t.getShape()) != product(op.getStaticLoopRanges()))
        return false;
      target = it->second;
    }
    llvm::SetVector<Value> captured;
    getUsedValuesDefinedAbove(op.getRegion(), captured);
    for (Value v : captured)
      if (Operation *def = v.getDefiningOp())
        if (groupOf.count(def))
          return false;
    if (target < 0)
      return false;
    auto all = groupSet(target);
    all.insert(op);
    if (createsCycle(all))
      return false;
    groups[target].ops.push_back(op);
    groupOf[op] = target;
    return true;
  }

  /// A padding / slice-insertion generic (it reads a tensor with
  /// tensor.extract, once per element) joins the pointwise kernel that
  /// produces that tensor, or pulls in a loose elementwise producer: the
  /// producer's elements are recomputed where the padding reads them (e.g.
  /// relu -> pad -> conv is one kernel writing the padded tensor, and the
  /// relu output too if something else reads it).
  bool tryJoinPadSource(linalg::GenericOp op) {
    llvm::SetVector<Value> captured;
    getUsedValuesDefinedAbove(op.getRegion(), captured);
    for (Value v : captured) {
      auto def = v.getDefiningOp<linalg::GenericOp>();
      if (!def || !isAllParallel(def) || isCloneableIntoKernel(def))
        continue;
      auto it = groupOf.find(def);
      if (it != groupOf.end()) {
        Group &g = groups[it->second];
        bool pointwise = !g.row && llvm::all_of(g.ops, [](Operation *o) {
          auto gen = dyn_cast<linalg::GenericOp>(o);
          return gen && isAllParallel(gen);
        });
        if (!pointwise)
          continue;
        auto all = groupSet(it->second);
        all.insert(op);
        if (createsCycle(all))
          continue;
        g.ops.push_back(op);
        groupOf[op] = it->second;
        return true;
      }
      llvm::SmallPtrSet<Operation *, 32> all{def.getOperation(), op.getOperation()};
      if (createsCycle(all))
        continue;
      int g = newGroup(def);
      groups[g].ops.push_back(op);
      groupOf[op] = g;
      return true;
    }
    return false;
  }

  /// Library ops and results need their operands as one strided view of a
  /// contiguous value. Where a chain of views cannot be expressed so (heads
  /// split by a transpose, then batch dims merged), a copy is inserted; it
  /// joins the kernel producing the chain's source when there is one.
  void insertMaterializingCopies() {
    SmallVector<OpOperand *> todo;
    for (Operation &op : block) {
      if (!isLibraryOp(&op) && !isa<func::ReturnOp>(op))
        continue;
      for (OpOperand &use : op.getOpOperands()) {
        OpOperand *u = viewedOperand(use);
        if (isViewOp(u->get().getDefiningOp()) && !getStridedView(u->get()))
          todo.push_back(u);
      }
    }
    for (OpOperand *use : todo) {
      Value v = use->get();
      auto type = cast<RankedTensorType>(v.getType());
      OpBuilder b(use->getOwner());
      Location loc = v.getLoc();
      Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
      unsigned rank = type.getRank();
      SmallVector<AffineMap> maps(2, b.getMultiDimIdentityMap(rank));
      auto copy = linalg::GenericOp::create(
          b, loc, TypeRange{type}, ValueRange{v}, ValueRange{empty}, maps,
          SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
          [](OpBuilder &nb, Location l, ValueRange args) {
            linalg::YieldOp::create(nb, l, args[0]);
          });
      copy->setAttr(kMaterializeAttr, b.getUnitAttr());
      use->set(copy.getResult(0));
    }
  }

  /// The operand a library op reads as a strided view for `use`: the source
  /// of a convolution's input padding (the plan hands the convolution that
  /// source and the padding), else `use` itself. A channel shuffle or a
  /// pixel (un)shuffle in front of a padded convolution is a view no single
  /// stride expresses: the plan builder rejected the whole graph.
  static OpOperand *viewedOperand(OpOperand &use) {
    if (auto pad = use.get().getDefiningOp<tensor::PadOp>(); pad && convInputPadding(pad))
      return &pad.getSourceMutable();
    return &use;
  }

  /// A materializing copy joins the elementwise kernel that produces the
  /// source of its views (e.g. q, k and v split out of the qkv projection's
  /// bias kernel are written by that kernel, in head-major layout).
  bool tryJoinCopySource(linalg::GenericOp op) {
    if (!op->hasAttr(kMaterializeAttr))
      return false;
    Operation *def = op.getDpsInputOperand(0)->get().getDefiningOp();
    while (isViewOp(def) && def->getNumOperands() > 0)
      def = def->getOperand(0).getDefiningOp();
    auto src = dyn_cast_or_null<linalg::GenericOp>(def);
    if (!src || !isAllParallel(src) || isCloneableIntoKernel(src))
      return false;
    auto it = groupOf.find(src);
    llvm::SmallPtrSet<Operation *, 32> all{op.getOperation(), def};
    if (it != groupOf.end()) {
      Group &g = groups[it->second];
      if (g.row || llvm::any_of(g.ops, [](Operation *o) {
            auto gen = dyn_cast<linalg::GenericOp>(o);
            return !gen || !isAllParallel(gen);
          }))
        return false;
      all = groupSet(it->second);
      all.insert(op);
      if (createsCycle(all))
        return false;
      g.ops.push_back(op);
      groupOf[op] = it->second;
      return true;
    }
    if (createsCycle(all))
      return false;
    int g = newGroup(def);
    groups[g].ops.push_back(op);
    groupOf[op] = g;
    return true;
  }

  /// An elementwise value that other kernels read only at gathered points
  /// (tensor.extract in their bodies: nll_loss's log_softmax[i, target[i]]) is
  /// recomputed there instead of written whole by its own kernel, when what it
  /// reads from that kernel is small (reduced values; inputs are read from
  /// memory either way). Cross-entropy over 32000 classes wrote the
  /// 4096x32000 log-softmax to read 4096 elements of it. Its operands from its
  /// kernel become that kernel's outputs; the readers' kernels read them from
  /// memory, so rows stay consistent (the kernels are distinct), and no cycle
  /// arises: the readers already ran after that kernel.
  void recomputeGatheredValues() {
    for (auto [gi, grp] : llvm::enumerate(groups)) {
      if (grp.dead)
        continue;
      for (Operation *op : llvm::to_vector(grp.ops)) {
        auto g = dyn_cast<linalg::GenericOp>(op);
        if (!g || !isAllParallel(g) || g->getNumResults() != 1 || g->use_empty() ||
            g->hasAttr(kMaterializeAttr))
          continue;
        auto type = cast<RankedTensorType>(g->getResult(0).getType());
        int64_t size = product(type.getShape());
        bool atGathers = llvm::all_of(g->getResult(0).getUsers(), [&](Operation *u) {
          if (!isa<tensor::ExtractOp>(u) || !isa<linalg::GenericOp>(u->getParentOp()))
            return false;
          auto it = groupOf.find(topLevel(u));
          return it != groupOf.end() && it->second != (int)gi;
        });
        // Its elementwise operands from its kernel are recomputed with it.
        SmallVector<Operation *> also;
        std::function<bool(Value)> small = [&](Value v) {
          Operation *def = v.getDefiningOp();
          if (!def || def->getBlock() != &block)
            return true;
          if (isCloneableIntoKernel(def) || gathered.contains(def))
            return llvm::all_of(readValues(def), small);
          auto it = groupOf.find(def);
          if (it == groupOf.end() || it->second != (int)gi)
            return true;
          auto t = dyn_cast<RankedTensorType>(v.getType());
          if (t && product(t.getShape()) * 8 <= size)
            return true;
          auto gen = dyn_cast<linalg::GenericOp>(def);
          if (!gen || !isAllParallel(gen) || gen->getNumResults() != 1 ||
              gen->hasAttr(kMaterializeAttr) || also.size() >= 4 || llvm::is_contained(also, def))
            return false;
          also.push_back(def);
          return llvm::all_of(readValues(def), small);
        };
        if (!atGathers || !llvm::all_of(readValues(g), small))
          continue;
        // Those operands (softmax's exp(x - max) under its division, which the
        // sum also reads) stay in the kernel; the gathered op reads copies of
        // them that its readers recompute as they recompute it.
        llvm::sort(also, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
        IRMapping copies;
        OpBuilder b(g);
        for (Operation *o : also)
          gathered.insert(b.clone(*o, copies));
        for (Operation *o : also)
          o->getResult(0).replaceUsesWithIf(copies.lookup(o->getResult(0)), [&](OpOperand &u) {
            return g->isAncestor(u.getOwner());
          });
        llvm::erase(grp.ops, op);
        groupOf.erase(op);
        gathered.insert(op);
      }
      if (grp.ops.empty())
        grp.dead = true;
    }
  }

  void formGroups() {
    for (Operation &o : block) {
      auto op = dyn_cast<linalg::GenericOp>(&o);
      if (!op || isLibraryOp(op) || isCloneableIntoKernel(op))
        continue;
      SmallVector<int64_t> loops = op.getStaticLoopRanges();
      if (isRowReduction(op)) {
        int64_t rows = 1, len = 1;
        for (auto [i, it] : llvm::enumerate(op.getIteratorTypesArray()))
          ((it == utils::IteratorType::parallel) ? rows : len) *= loops[i];
        SmallVector<int> gs;
        SmallVector<Operation *> extra{op};
        for (Value v : op->getOperands()) {
          auto def = v.getDefiningOp<linalg::GenericOp>();
          if (!def)
            continue;
          auto it = groupOf.find(def);
          if (it != groupOf.end()) {
            Group &g = groups[it->second];
            if (g.row && g.rows == rows && g.len == len &&
                !llvm::is_contained(gs, it->second)) {
              auto set = groupSet(it->second);
              if (fitsRowGroup(op, rows, len, set))
                gs.push_back(it->second);
            }
            continue;
          }
        }
        // Loose elementwise producers of the row (possibly behind reshapes)
        // join the group: they are recomputed where the row reads them.
        for (Value v : op->getOperands()) {
          Operation *def = v.getDefiningOp();
          while (def && isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(def))
            def = def->getOperand(0).getDefiningOp();
          auto gen = dyn_cast_or_null<linalg::GenericOp>(def);
          if (gen && isLooseProducer(gen, rows) &&
              !llvm::is_contained(extra, def))
            extra.push_back(def);
        }
        if (!tryMerge(gs, extra, rows, len) &&
            !tryMerge({}, {op.getOperation()}, rows, len))
          newGroup(op);
        continue;
      }
      if (isAllParallel(op)) {
        SmallVector<int> gs;
        for (Value v : readValues(op)) {
          Operation *def = v.getDefiningOp();
          auto it = def ? groupOf.find(def) : groupOf.end();
          if (it == groupOf.end() || !groups[it->second].row ||
              llvm::is_contained(gs, it->second))
            continue;
          Group &g0 = groups[it->second];
          if (!gs.empty() && (groups[gs.front()].rows != g0.rows ||
                              groups[gs.front()].len != g0.len))
            continue;
          auto set = groupSet(it->second);
          if (fitsRowGroup(op, g0.rows, g0.len, set))
            gs.push_back(it->second);
        }
        if (!gs.empty() &&
            tryMerge(gs, {op.getOperation()}, groups[gs.front()].rows,
                     groups[gs.front()].len))
          continue;
        // Elementwise consumer of a serial (thread per element) reduction:
        // computed by the same thread when it reads each reduced element once.
        if (tryJoinNaive(op))
          continue;
        if (tryJoinPadSource(op) || tryJoinCopySource(op))
          continue;
        // Loose for now: a later row reduction may absorb it.
        continue;
      }
      newGroup(op);
    }
    for (Operation &o : block)
      if (auto op = dyn_cast<linalg::GenericOp>(&o))
        if (!isLibraryOp(op) && !isCloneableIntoKernel(op) && !groupOf.count(op))
          newGroup(op);
  }

  /// Outlines `ops` (program order) into a private kernel function.
  void outline(ArrayRef<Operation *> ops, StringRef kind, unsigned index) {
    llvm::SmallPtrSet<Operation *, 32> inKernel(ops.begin(), ops.end());
    llvm::SetVector<Operation *> clones;
    llvm::SetVector<Value> inputs;
    std::function<void(Value)> visit = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (def && inKernel.contains(def))
        return;
      if (def && def->getBlock() == &block &&
          (isCloneableIntoKernel(def) || gathered.contains(def))) {
        if (clones.insert(def))
          for (Value o : readValues(def))
            visit(o);
        return;
      }
      inputs.insert(v);
    };
    for (Operation *op : ops)
      for (Value v : readValues(op))
        visit(v);
    // A result is an output if something outside the kernel reads it; a
    // cloneable user (reshape) only counts if its own result escapes.
    std::function<bool(Value)> escapes = [&](Value r) {
      return llvm::any_of(r.getUsers(), [&](Operation *u) {
        Operation *top = topLevel(u);
        if (inKernel.contains(top))
          return false;
        if (isCloneableIntoKernel(top) && top != u)
          return true;
        if (isCloneableIntoKernel(top))
          return llvm::any_of(top->getResults(), escapes);
        return true;
      });
    };
    SmallVector<Value> outputs;
    for (Operation *op : ops)
      for (Value r : op->getResults())
        if (escapes(r))
          outputs.push_back(r);
    SmallVector<Operation *> cloneList(clones.begin(), clones.end());
    llvm::sort(cloneList, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });

    OpBuilder mb(func);
    mb.setInsertionPointAfter(lastKernel ? lastKernel : func.getOperation());
    std::string name = (func.getSymName() + "_k" + Twine(index)).str();
    auto type = mb.getFunctionType(TypeRange(ValueRange(inputs.getArrayRef())),
                                   TypeRange(ValueRange(outputs)));
    auto kfn = func::FuncOp::create(mb, ops.back()->getLoc(), name, type);
    kfn.setPrivate();
    lastKernel = kfn;
    kfn->setAttr(kKernelAttr, mb.getStringAttr(kind));
    Block *entry = kfn.addEntryBlock();
    OpBuilder kb = OpBuilder::atBlockEnd(entry);
    IRMapping map;
    for (auto [v, a] : llvm::zip(inputs, entry->getArguments()))
      map.map(v, a);
    // Clones and kernel ops interleaved in program order (a clone may read a
    // kernel op's result, e.g. a reshape between two ops of a row kernel).
    SmallVector<Operation *> all(cloneList);
    all.append(ops.begin(), ops.end());
    llvm::sort(all, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    for (Operation *op : all)
      kb.clone(*op, map);
    SmallVector<Value> rets;
    for (Value o : outputs)
      rets.push_back(map.lookup(o));
    func::ReturnOp::create(kb, kfn.getLoc(), rets);

    OpBuilder b(ops.back());
    b.setInsertionPointAfter(ops.back());
    auto call = func::CallOp::create(b, ops.back()->getLoc(), kfn,
                                     ValueRange(inputs.getArrayRef()));
    for (auto [o, r] : llvm::zip(outputs, call.getResults()))
      o.replaceUsesWithIf(r, [&](OpOperand &use) {
        // A fill stays the init of library ops (the plan folds zero inits).
        if (isa<linalg::FillOp>(o.getDefiningOp()))
          if (auto lin = dyn_cast<linalg::LinalgOp>(use.getOwner()))
            if (isLibraryOp(lin) && lin.isDpsInit(&use))
              return false;
        return !inKernel.contains(topLevel(use.getOwner()));
      });
    // Erase the kernel ops and the caller's reshapes of their results that
    // only the kernel read (it has its own clones), users first.
    llvm::SetVector<Operation *> dead(ops.begin(), ops.end());
    for (unsigned i = 0; i < dead.size(); ++i)
      for (Value r : dead[i]->getResults())
        for (Operation *u : r.getUsers())
          if (u->getBlock() == &block && isCloneableIntoKernel(u))
            dead.insert(u);
    bool progress = true;
    while (progress && !dead.empty()) {
      // (A fill kept as a library init stays.)
      progress = false;
      for (Operation *op : llvm::to_vector(dead))
        if (op->use_empty()) {
          dead.remove(op);
          op->erase();
          progress = true;
        }
    }
  }

  /// Is `op` left in the caller: a fill used only as the init of library
  /// ops, or a data-movement generic used only by library ops (a view)?
  bool staysInCaller(Operation *op) {
    if (isa<linalg::FillOp>(op))
      return llvm::all_of(op->getUses(), [](OpOperand &use) {
        auto lin = dyn_cast<linalg::LinalgOp>(use.getOwner());
        return lin && isLibraryOp(lin) && lin.isDpsInit(&use);
      });
    if (auto g = dyn_cast<linalg::GenericOp>(op))
      return isViewGeneric(g) && feedsOnlyLibraryOps(op);
    return true;
  }

  /// All users are library ops, or views whose users are (recursively).
  static bool feedsOnlyLibraryOps(Operation *op) {
    return llvm::all_of(op->getUsers(), [](Operation *u) {
      if (isLibraryOp(u))
        return true;
      if (auto pad = dyn_cast<tensor::PadOp>(u))
        return convInputPadding(pad).has_value();
      auto g = dyn_cast<linalg::GenericOp>(u);
      if ((g && isViewGeneric(g)) ||
          isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
              tensor::ExtractSliceOp>(u))
        return feedsOnlyLibraryOps(u);
      return false;
    });
  }

  LogicalResult run(unsigned &counter) {
    // Reject what the GPU path cannot compile, naming the op.
    for (Operation &op : block) {
      if (!hasStaticShapes(&op))
        return op.emitError("mlircap: dynamic shapes are not supported: '")
               << op.getName() << "'";
      for (Type t : llvm::concat<const Type>(op.getOperandTypes(), op.getResultTypes()))
        if (auto st = dyn_cast<ShapedType>(t)) {
          Type et = st.getElementType();
          bool ok = et.isF32() || et.isF16() || et.isBF16() || et.isF64() ||
                    et.isInteger(64) || et.isInteger(32) || et.isInteger(16) ||
                    et.isInteger(8) || et.isInteger(1);
          if (!ok)
            return op.emitError("mlircap: unsupported element type ")
                   << et << " in '" << op.getName() << "'";
        }
      if (isa<linalg::GenericOp, linalg::FillOp, tensor::EmptyOp,
              tensor::ExpandShapeOp, tensor::CollapseShapeOp, func::ReturnOp,
              func::CallOp, cf::AssertOp>(op) ||
          isLibraryOp(&op) || isCloneableIntoKernel(&op))
        continue;
      if (auto cst = dyn_cast<arith::ConstantOp>(op))
        if (isa<ElementsAttr>(cst.getValue()))
          continue;
      if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
        continue;
      if (auto pad = dyn_cast<tensor::PadOp>(op); pad && convInputPadding(pad))
        continue; // the convolution pads (the plan passes it the source)
      return op.emitError("mlircap: unsupported op '")
             << op.getName() << "' (no GPU kernel or library call for it)";
    }
    insertMaterializingCopies();
    formGroups();
    recomputeGatheredValues();

    // Kernels in program order of their last op.
    SmallVector<int> order;
    for (auto [i, g] : llvm::enumerate(groups))
      if (!g.dead && !g.ops.empty())
        order.push_back(i);
    for (int g : order)
      llvm::sort(groups[g].ops, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
    llvm::sort(order, [&](int a, int b) {
      return groups[a].ops.back()->isBeforeInBlock(groups[b].ops.back());
    });
    for (int g : order) {
      Group &grp = groups[g];
      bool allPar = llvm::all_of(grp.ops, [](Operation *op) {
        auto gen = dyn_cast<linalg::GenericOp>(op);
        return !gen || isAllParallel(gen);
      });
      StringRef kind = grp.row ? "row_reduction" : allPar ? "pointwise" : "reduction";
      outline(grp.ops, kind, counter++);
    }
    // Gathered ops every reader has recomputed (readers first): none is left
    // for the loose kernels below.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
      if (op.use_empty() && gathered.contains(&op)) {
        gathered.erase(&op);
        op.erase();
      }
    // Cloneable ops that still have users the caller cannot express.
    SmallVector<Operation *> loose;
    for (Operation &op : block)
      if ((isa<linalg::FillOp>(op) || isa<linalg::GenericOp>(op)) &&
          !op.use_empty() && !staysInCaller(&op))
        loose.push_back(&op);
    for (Operation *op : loose)
      outline({op}, "pointwise", counter++);
    // Views that library ops or the caller's results need but that no single
    // strided view expresses (e.g. heads split by a transpose, then batch
    // dims merged) are materialized by a copy kernel.
    SmallVector<Operation *> copies;
    for (Operation &op : block) {
      if (!isLibraryOp(&op) && !isa<func::ReturnOp>(op))
        continue;
      for (OpOperand &use : op.getOpOperands()) {
        Value v = viewedOperand(use)->get();
        Operation *def = v.getDefiningOp();
        if (isViewOp(def) && !getStridedView(v) && !llvm::is_contained(copies, def))
          copies.push_back(def);
      }
    }
    for (Operation *op : copies)
      outline({op}, "pointwise", counter++);
    if (!sortTopologically(&block))
      return func.emitError("mlircap: kernel formation created a cycle");
    // What the kernels cloned is dead in the caller now.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
      if (op.use_empty() && isCloneableIntoKernel(&op))
        op.erase();
    return success();
  }
};

struct FormKernels : impl::MlircapFormKernelsBase<FormKernels> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs;
    for (auto f : getOperation().getOps<func::FuncOp>())
      if (!f.isExternal() && !f->hasAttr(kKernelAttr))
        funcs.push_back(f);
    for (func::FuncOp f : funcs) {
      if (!llvm::hasSingleElement(f.getBody())) {
        f.emitError("mlircap: functions with control flow are not supported");
        return signalPassFailure();
      }
      unsigned counter = 0;
      Former former(f);
      if (failed(former.run(counter)))
        return signalPassFailure();
    }
  }
};
} // namespace
} // namespace mlir::mlircap
